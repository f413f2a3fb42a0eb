//! How a call that was asked to stop is made to stop.
//!
//! The first step is always the flag in the worker's signal page, which a node sees at its next
//! `throw_exception_if_processing_interrupted`. A node that never checks (a long C loop, a
//! `time.sleep`, a pack that ignores ComfyUI) gets the next steps, each after the delay the
//! user configured: SIGINT, which Python turns into an exception in the running node at its
//! next bytecode, then SIGKILL, after which the next call starts a new worker. The caller's
//! wait loop drives this state machine; it holds no thread and no timer of its own.

use std::time::{Duration, Instant};

/// Delays of the escalation; `None` leaves that step out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InterruptPolicy {
    /// From the flag to SIGINT.
    pub signal_after: Option<Duration>,
    /// From SIGINT (or from the flag, without a signal step) to SIGKILL.
    pub kill_after: Option<Duration>,
}

impl Default for InterruptPolicy {
    fn default() -> Self {
        InterruptPolicy {
            signal_after: Some(Duration::from_secs(5)),
            kill_after: Some(Duration::from_secs(10)),
        }
    }
}

/// What the caller must do now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    Signal,
    Kill,
}

/// One call's escalation, from the moment it was asked to stop.
#[derive(Debug, Clone)]
pub struct Escalation {
    policy: InterruptPolicy,
    flagged: Option<Instant>,
    signalled: Option<Instant>,
    killed: bool,
}

impl Escalation {
    pub fn new(policy: InterruptPolicy) -> Self {
        Escalation {
            policy,
            flagged: None,
            signalled: None,
            killed: false,
        }
    }

    /// Records that the flag was raised at `now`; false if it already was.
    pub fn flag(&mut self, now: Instant) -> bool {
        if self.flagged.is_some() {
            return false;
        }
        self.flagged = Some(now);
        true
    }

    pub fn is_flagged(&self) -> bool {
        self.flagged.is_some()
    }

    pub fn was_signalled(&self) -> bool {
        self.signalled.is_some()
    }

    pub fn was_killed(&self) -> bool {
        self.killed
    }

    /// The step that is due at `now`, if any; each step is returned once.
    pub fn due(&mut self, now: Instant) -> Option<Step> {
        let flagged = self.flagged?;
        if self.killed {
            return None;
        }
        if self.signalled.is_none()
            && let Some(after) = self.policy.signal_after
        {
            if now >= flagged + after {
                self.signalled = Some(now);
                return Some(Step::Signal);
            }
            return None;
        }
        let from = self.signalled.unwrap_or(flagged);
        match self.policy.kill_after {
            Some(after) if now >= from + after => {
                self.killed = true;
                Some(Step::Kill)
            }
            _ => None,
        }
    }

    /// The last step taken: "flag", "signal" or "kill" (what the error's `escalation` says).
    pub fn last_step(&self) -> &'static str {
        if self.killed {
            "kill"
        } else if self.signalled.is_some() {
            "signal"
        } else {
            "flag"
        }
    }

    /// Says how the call was stopped, for the error the caller raises.
    pub fn describe(&self) -> String {
        let secs = |d: Option<Duration>| d.map_or(0.0, |d| d.as_secs_f64());
        match (self.was_signalled(), self.killed) {
            (_, true) if self.was_signalled() => format!(
                "it did not stop at the interrupt flag, nor {:.1} s after SIGINT, so it was killed; \
                 the next call starts a new worker",
                secs(self.policy.kill_after)
            ),
            (_, true) => format!(
                "it did not stop within {:.1} s of the interrupt flag, so it was killed; the next \
                 call starts a new worker",
                secs(self.policy.kill_after)
            ),
            (true, false) => format!(
                "it did not check the interrupt flag within {:.1} s, so it was sent SIGINT",
                secs(self.policy.signal_after)
            ),
            (false, false) => "it stopped at the interrupt flag".to_owned(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn nothing_happens_before_the_flag() {
        let mut e = Escalation::new(InterruptPolicy::default());
        assert_eq!(e.due(Instant::now() + Duration::from_secs(3600)), None);
    }

    #[test]
    fn signal_then_kill_each_once_at_their_delays() {
        let p = InterruptPolicy {
            signal_after: Some(100 * MS),
            kill_after: Some(200 * MS),
        };
        let t0 = Instant::now();
        let mut e = Escalation::new(p);
        assert!(e.flag(t0));
        assert!(!e.flag(t0 + 50 * MS), "flagged once");
        assert_eq!(e.due(t0 + 99 * MS), None);
        assert_eq!(e.due(t0 + 100 * MS), Some(Step::Signal));
        assert_eq!(e.due(t0 + 150 * MS), None, "the signal is sent once");
        // the kill delay runs from the signal, not from the flag
        assert_eq!(e.due(t0 + 299 * MS), None);
        assert_eq!(e.due(t0 + 300 * MS), Some(Step::Kill));
        assert_eq!(e.due(t0 + 10_000 * MS), None);
        assert!(e.describe().contains("killed"));
    }

    #[test]
    fn without_a_signal_step_the_kill_runs_from_the_flag() {
        let p = InterruptPolicy {
            signal_after: None,
            kill_after: Some(50 * MS),
        };
        let t0 = Instant::now();
        let mut e = Escalation::new(p);
        e.flag(t0);
        assert_eq!(e.due(t0 + 49 * MS), None);
        assert_eq!(e.due(t0 + 50 * MS), Some(Step::Kill));
    }

    #[test]
    fn no_steps_configured_means_the_flag_only() {
        let p = InterruptPolicy {
            signal_after: None,
            kill_after: None,
        };
        let t0 = Instant::now();
        let mut e = Escalation::new(p);
        e.flag(t0);
        assert_eq!(e.due(t0 + Duration::from_secs(3600)), None);
        assert_eq!(e.describe(), "it stopped at the interrupt flag");
    }
}
