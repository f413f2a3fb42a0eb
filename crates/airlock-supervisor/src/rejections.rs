//! Peer input this process refused, counted by reason.
//!
//! The counters are process-wide rather than per lane: a refused handshake has no worker to
//! hang a counter on, and a lane that received a corrupt frame is torn down with its worker at
//! once. The counts must outlive both, for `airlock status`, for logs and for the tests that
//! check every hostile input is not only refused but noticed.

use std::sync::atomic::{AtomicU64, Ordering};

use airlock_wire::{HandshakeError, WireError};

use crate::error::{LaneError, SpawnError};

/// Why peer input was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rejection {
    /// A frame header announcing more than the frame limit.
    FrameTooLarge,
    /// The stream ended inside a frame.
    Truncated,
    /// A frame body that is not a message (bad encoding, trailing bytes, limits exceeded).
    Malformed,
    /// A well-formed message the protocol forbids here (a forged release, an unknown
    /// segment, a second hello, fds without announcements).
    Protocol,
    /// A hello with the wrong spawn token.
    BadToken,
    /// A hello of another protocol version.
    VersionMismatch,
    /// A hello for the other lane than the one expected.
    WrongLane,
    /// A hello claiming another pid than the socket's owner.
    PidMismatch,
    /// A connection to a handshake socket from a process we did not start (SO_PEERCRED).
    ForeignPeer,
    /// A forked child used its parent's connection.
    ForkedChild,
}

impl Rejection {
    pub const ALL: [Rejection; 10] = [
        Rejection::FrameTooLarge,
        Rejection::Truncated,
        Rejection::Malformed,
        Rejection::Protocol,
        Rejection::BadToken,
        Rejection::VersionMismatch,
        Rejection::WrongLane,
        Rejection::PidMismatch,
        Rejection::ForeignPeer,
        Rejection::ForkedChild,
    ];

    /// The snake_case name used in status output and the Python dict.
    pub fn name(self) -> &'static str {
        match self {
            Rejection::FrameTooLarge => "frame_too_large",
            Rejection::Truncated => "truncated",
            Rejection::Malformed => "malformed",
            Rejection::Protocol => "protocol",
            Rejection::BadToken => "bad_token",
            Rejection::VersionMismatch => "version_mismatch",
            Rejection::WrongLane => "wrong_lane",
            Rejection::PidMismatch => "pid_mismatch",
            Rejection::ForeignPeer => "foreign_peer",
            Rejection::ForkedChild => "forked_child",
        }
    }

    pub fn of_wire(e: &WireError) -> Rejection {
        match e {
            WireError::FrameTooLarge { .. } => Rejection::FrameTooLarge,
            WireError::Truncated { .. } => Rejection::Truncated,
            WireError::Malformed(_)
            | WireError::LimitExceeded { .. }
            | WireError::TrailingBytes(_)
            // Only ever our own message, on sending: never counted (counts are of reads).
            | WireError::Unencodable { .. } => Rejection::Malformed,
        }
    }

    pub fn of_handshake(e: &HandshakeError) -> Rejection {
        match e {
            HandshakeError::VersionMismatch { .. } => Rejection::VersionMismatch,
            HandshakeError::BadToken => Rejection::BadToken,
            HandshakeError::WrongLane { .. } => Rejection::WrongLane,
            HandshakeError::PidMismatch { .. } => Rejection::PidMismatch,
        }
    }
}

static COUNTS: [AtomicU64; Rejection::ALL.len()] = [const { AtomicU64::new(0) }; 10];

/// Counts one refusal.
pub fn count(r: Rejection) {
    COUNTS[r as usize].fetch_add(1, Ordering::Relaxed);
}

/// The reason a lane error refuses the peer's input; None for I/O failures, our own closes
/// and errors of our own side (a full pool).
pub fn of_lane(e: &LaneError) -> Option<Rejection> {
    match e {
        LaneError::Wire(w) => Some(Rejection::of_wire(w)),
        LaneError::Protocol(_) | LaneError::Shm(airlock_shm::ShmError::SizeMismatch { .. }) => {
            Some(Rejection::Protocol)
        }
        LaneError::Io(_) | LaneError::Shm(_) | LaneError::Closed | LaneError::Ended(_) => None,
    }
}

/// Counts a lane error if it is the peer's doing (I/O failures and our own closes are not).
pub fn count_lane(e: &LaneError) {
    if let Some(r) = of_lane(e) {
        count(r);
    }
}

/// Counts a refused handshake. Frame-level errors of a hello were counted when they were
/// read; this adds what only the handshake knows (token, version, lane, pid, peer).
pub fn count_spawn(e: &SpawnError) {
    match e {
        SpawnError::Handshake(h) => count(Rejection::of_handshake(h)),
        SpawnError::ForeignPeer { .. } => count(Rejection::ForeignPeer),
        SpawnError::Lane(LaneError::Protocol(_)) => count(Rejection::Protocol),
        _ => {}
    }
}

/// The counts so far, in [`Rejection::ALL`] order.
pub fn rejections() -> [(Rejection, u64); 10] {
    Rejection::ALL.map(|r| (r, COUNTS[r as usize].load(Ordering::Relaxed)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(r: Rejection) -> u64 {
        rejections().iter().find(|(k, _)| *k == r).unwrap().1
    }

    #[test]
    fn every_reason_has_its_own_counter() {
        for (i, r) in Rejection::ALL.iter().enumerate() {
            assert_eq!(*r as usize, i, "ALL is in declaration order");
        }
        let before = get(Rejection::WrongLane);
        count_spawn(&SpawnError::Handshake(HandshakeError::WrongLane {
            expected: airlock_wire::Lane::Call,
            got: airlock_wire::Lane::Control,
        }));
        assert_eq!(get(Rejection::WrongLane), before + 1);
        let before = get(Rejection::Truncated);
        count_lane(&LaneError::Wire(WireError::Truncated { have: 1, want: 4 }));
        count_lane(&LaneError::Closed);
        assert_eq!(get(Rejection::Truncated), before + 1);
    }
}
