//! How long a call lane's reader keeps asking before it sleeps (ADR 0035).
//!
//! A call is a round trip: the host sends and waits for the reply, the worker replies and waits
//! for the next call. Sleeping in `recvmsg` at once makes each side's wake-up the peer's job:
//! the kernel moves the sleeper back onto a CPU, and on a virtual machine whose idle vCPU has
//! halted that costs tens of microseconds each way (a warm no-op call took 40-50 µs with it,
//! 8 µs without, docs/benchmarks.md). So the reader first asks without blocking for a short,
//! bounded time, yielding the CPU between tries so that a peer on the same CPU runs, and only
//! then sleeps; and it spins only when the lane's last wait was shorter than that bound
//! ([`worth_spinning`]), so a side waiting on a peer that computes does not take the CPU from
//! it. An idle lane costs at most one short burst; `AIRLOCK_LANE_SPIN_US=0` sleeps at once.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The variable that sets the budget, in microseconds.
pub const SPIN_ENV: &str = "AIRLOCK_LANE_SPIN_US";
/// The budget when the variable is unset or not a number.
pub const DEFAULT_SPIN: Duration = Duration::from_micros(50);
/// The largest budget accepted: beyond it spinning costs more CPU than any wake-up it saves.
pub const MAX_SPIN: Duration = Duration::from_millis(1);

/// The budget a value of [`SPIN_ENV`] sets (pure: no environment read).
pub fn budget_from(raw: Option<&str>) -> Duration {
    match raw.map(str::trim).filter(|s| !s.is_empty()) {
        None => DEFAULT_SPIN,
        Some(s) if ["off", "none", "never"].contains(&s.to_ascii_lowercase().as_str()) => {
            Duration::ZERO
        }
        Some(s) => s
            .parse::<u64>()
            .map(|us| Duration::from_micros(us).min(MAX_SPIN))
            .unwrap_or(DEFAULT_SPIN),
    }
}

/// Whether a read spins, given the budget and how long the lane's last read waited for its
/// first byte (nanoseconds; `u64::MAX` when it timed out): only when that wait was shorter
/// than the budget. A peer that answers within the budget is worth the spin; one that took
/// longer (a node computing, a host running other nodes between calls) would only have the
/// spinning thread compete for the CPU with the very threads it waits for (a worker's
/// OpenMP threads on 2 cores made a 1 MiB `x * 1` 5x slower with an unconditional spin).
/// A wait that was long is still measured when it blocks, so a lane whose peer becomes quick
/// again spins again from its next read.
pub fn worth_spinning(budget: Duration, last_wait_ns: u64) -> bool {
    !budget.is_zero() && u128::from(last_wait_ns) < budget.as_nanos()
}

/// This process's budget, read once.
pub(crate) fn budget() -> Duration {
    static BUDGET: OnceLock<Duration> = OnceLock::new();
    *BUDGET.get_or_init(|| budget_from(std::env::var(SPIN_ENV).ok().as_deref()))
}

/// One read of a lane: `read(false)` (never blocks) in a [`spin`] when the lane's last wait,
/// kept in `last_wait`, makes it [`worth_spinning`], then `read(true)` if nothing came; records
/// how long this read waited for its first byte (`u64::MAX` when it timed out).
pub(crate) fn read<T>(
    budget: Duration,
    last_wait: &AtomicU64,
    mut read: impl FnMut(bool) -> std::io::Result<T>,
) -> std::io::Result<T> {
    let start = Instant::now();
    let mut got = Err(std::io::ErrorKind::WouldBlock.into());
    if worth_spinning(budget, last_wait.load(Ordering::Relaxed)) {
        got = spin(budget, || read(false));
    }
    if would_block(&got) {
        got = read(true);
    }
    if !budget.is_zero() {
        let waited = if would_block(&got) {
            u64::MAX
        } else {
            u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX - 1)
        };
        last_wait.store(waited, Ordering::Relaxed);
    }
    got
}

fn would_block<T>(got: &std::io::Result<T>) -> bool {
    matches!(got, Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
}

/// Calls `attempt` until it gives something other than `WouldBlock` or `budget` has passed,
/// yielding between tries; the last outcome (`WouldBlock` when the budget ran out).
pub(crate) fn spin<T>(
    budget: Duration,
    mut attempt: impl FnMut() -> std::io::Result<T>,
) -> std::io::Result<T> {
    let start = Instant::now();
    loop {
        let got = attempt();
        if !would_block(&got) || start.elapsed() >= budget {
            return got;
        }
        std::thread::yield_now();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Error, ErrorKind};

    #[test]
    fn the_budget_is_bounded_and_can_be_turned_off() {
        assert_eq!(budget_from(None), DEFAULT_SPIN);
        assert_eq!(budget_from(Some(" ")), DEFAULT_SPIN);
        assert_eq!(budget_from(Some("20")), Duration::from_micros(20));
        assert_eq!(budget_from(Some("0")), Duration::ZERO);
        assert_eq!(budget_from(Some("off")), Duration::ZERO);
        assert_eq!(budget_from(Some("5000000")), MAX_SPIN);
        assert_eq!(budget_from(Some("-3")), DEFAULT_SPIN);
    }

    #[test]
    fn only_a_lane_whose_last_wait_was_short_spins() {
        let b = Duration::from_micros(50);
        assert!(worth_spinning(b, 0));
        assert!(worth_spinning(b, 49_999));
        assert!(!worth_spinning(b, 50_000));
        assert!(!worth_spinning(b, u64::MAX));
        assert!(!worth_spinning(Duration::ZERO, 0));
    }

    #[test]
    fn a_read_spins_after_a_short_wait_and_sleeps_after_a_long_one() {
        let b = Duration::from_millis(50);
        let last = AtomicU64::new(0);
        // A quick answer: taken while spinning, and the next read spins too.
        let mut tries = Vec::new();
        let got = read(b, &last, |block| {
            tries.push(block);
            if tries.len() < 3 {
                Err(ErrorKind::WouldBlock.into())
            } else {
                Ok(())
            }
        });
        assert!(got.is_ok());
        assert_eq!(tries, [false, false, false]);
        assert!(last.load(Ordering::Relaxed) < 50_000_000);
        // A timed-out wait: the next read goes straight to blocking.
        last.store(u64::MAX, Ordering::Relaxed);
        let mut tries = Vec::new();
        let got = read(b, &last, |block| {
            tries.push(block);
            Err::<(), _>(ErrorKind::WouldBlock.into())
        });
        assert!(would_block(&got));
        assert_eq!(tries, [true]);
        assert_eq!(last.load(Ordering::Relaxed), u64::MAX);
    }

    #[test]
    fn a_spin_returns_the_first_answer_and_gives_up_after_its_budget() {
        let mut n = 0;
        let got = spin(Duration::from_secs(5), || {
            n += 1;
            if n < 3 {
                Err(Error::from(ErrorKind::WouldBlock))
            } else {
                Ok(n)
            }
        });
        assert_eq!(got.unwrap(), 3);
        let start = Instant::now();
        let got: std::io::Result<()> = spin(Duration::from_millis(2), || {
            Err(ErrorKind::WouldBlock.into())
        });
        assert_eq!(got.unwrap_err().kind(), ErrorKind::WouldBlock);
        assert!(start.elapsed() >= Duration::from_millis(2));
        // An error other than WouldBlock ends the spin at once.
        let got: std::io::Result<()> =
            spin(Duration::from_secs(5), || Err(ErrorKind::BrokenPipe.into()));
        assert_eq!(got.unwrap_err().kind(), ErrorKind::BrokenPipe);
    }
}
