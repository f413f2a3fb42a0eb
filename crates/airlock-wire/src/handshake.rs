//! The first frame on every lane: who the worker is and whether it may speak.

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// Bumped on any change to [`crate::Message`] or its encoding. Host and worker load the same
/// extension module, so a mismatch means a stale copy, not a negotiable difference.
pub const PROTOCOL_VERSION: u32 = 5;

/// Bytes in a per-spawn token.
pub const TOKEN_LEN: usize = 32;

/// A secret the host gives one worker at spawn (over an inherited pipe) and checks on each
/// lane's [`Hello`].
#[derive(Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Token(pub [u8; TOKEN_LEN]);

impl Token {
    /// Compares in constant time, so a peer cannot learn a prefix from timing.
    pub fn matches(&self, other: &Token) -> bool {
        self.0
            .iter()
            .zip(other.0.iter())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
    }
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(<redacted>)")
    }
}

/// Which of a worker's four connections a lane is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Lane {
    /// Calls and their replies, segment announcements and lease releases.
    Call,
    /// Heartbeats, telemetry and commands that must reach a busy worker.
    Control,
    /// A second call lane, for the pack's HTTP routes: served by a thread of its own in the
    /// worker, so a request is answered while a node runs on the call lane (ADR 0055).
    Route,
    /// Worker → host: UI messages a pack sends while no call runs (a monitor's thread), read
    /// by a host thread of its own (ADR 0056).
    Events,
}

/// What a worker says first on each lane.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Hello {
    pub protocol: u32,
    pub token: Token,
    pub lane: Lane,
    pub pid: u32,
    pub python: String,
    pub torch: Option<String>,
    pub numpy: Option<String>,
}

/// Why a [`Hello`] was refused.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum HandshakeError {
    #[error("protocol version {theirs} does not match the host's {ours}")]
    VersionMismatch { ours: u32, theirs: u32 },
    #[error("wrong token")]
    BadToken,
    #[error("expected the {expected:?} lane, the peer opened {got:?}")]
    WrongLane { expected: Lane, got: Lane },
    #[error("peer says it is pid {claimed} but the socket belongs to pid {actual}")]
    PidMismatch { claimed: u32, actual: u32 },
}

impl Hello {
    /// Accepts this hello for `lane` of the worker spawned with `token`.
    pub fn check(&self, token: &Token, lane: Lane) -> Result<(), HandshakeError> {
        if self.protocol != PROTOCOL_VERSION {
            return Err(HandshakeError::VersionMismatch {
                ours: PROTOCOL_VERSION,
                theirs: self.protocol,
            });
        }
        if !self.token.matches(token) {
            return Err(HandshakeError::BadToken);
        }
        if self.lane != lane {
            return Err(HandshakeError::WrongLane {
                expected: lane,
                got: self.lane,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hello(token: [u8; TOKEN_LEN]) -> Hello {
        Hello {
            protocol: PROTOCOL_VERSION,
            token: Token(token),
            lane: Lane::Call,
            pid: 1,
            python: "3.11.7".into(),
            torch: None,
            numpy: None,
        }
    }

    #[test]
    fn right_token_and_lane_pass() {
        assert_eq!(hello([7; 32]).check(&Token([7; 32]), Lane::Call), Ok(()));
    }

    #[test]
    fn wrong_token_version_and_lane_fail() {
        let mut h = hello([7; 32]);
        assert_eq!(
            h.check(&Token([8; 32]), Lane::Call),
            Err(HandshakeError::BadToken)
        );
        assert!(matches!(
            h.check(&Token([7; 32]), Lane::Control),
            Err(HandshakeError::WrongLane { .. })
        ));
        h.protocol += 1;
        assert!(matches!(
            h.check(&Token([7; 32]), Lane::Call),
            Err(HandshakeError::VersionMismatch { .. })
        ));
    }

    #[test]
    fn token_is_not_printed() {
        assert_eq!(format!("{:?}", Token([1; 32])), "Token(<redacted>)");
    }
}
