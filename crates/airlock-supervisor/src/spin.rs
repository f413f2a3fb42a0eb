//! How long a call lane's reader keeps asking before it sleeps (ADR 0035, ADR 0046).
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
//!
//! ADR 0046 changed two things. **What "the last wait" is.** A read that slept returns only
//! once the kernel has put it back on a CPU, so timing it from the reader's side counts its
//! wake-up, and when the peer slept too, the peer's as well: where a wake-up costs more than
//! the budget, both sides judged each other slow for ever, each because the other slept. When
//! the two sides note when they last received and last sent ([`LaneStamps`], the worker's
//! shared page), a read that slept judges the peer by how long it took from hearing us to
//! answering ([`think_time`]), which no sleep is part of. **How long the budget is.** Spinning
//! pays only while it costs less than the sleep it saves, and what a sleep costs differs by
//! machine and load (a wake-up took 36-50 µs on this project's idle virtual machine, 11-12 µs
//! while a build kept both its vCPUs busy). With
//! the stamps a read that slept also measures its wake-up (from the peer's send to our return),
//! and unless `AIRLOCK_LANE_SPIN_US` fixes the budget, a lane spins for twice what its recent
//! wake-ups took ([`measured_budget`]: a wake-up and the slow start after it): the classic
//! spin-then-block rule, spinning as long as a sleep would cost.
//!
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The variable that fixes the budget, in microseconds.
pub const SPIN_ENV: &str = "AIRLOCK_LANE_SPIN_US";
/// The budget of a lane that has measured no wake-up yet, and when the variable is not a
/// number.
pub const DEFAULT_SPIN: Duration = Duration::from_micros(50);
/// The largest budget: beyond it spinning costs more CPU than any wake-up it saves.
pub const MAX_SPIN: Duration = Duration::from_millis(1);
/// The smallest measured budget, so a machine with cheap wake-ups still catches a peer that
/// answers at once.
pub const MIN_SPIN: Duration = Duration::from_micros(5);

/// How a process's call lanes size their spin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Budget {
    /// Set by [`SPIN_ENV`] (`0` never spins).
    Fixed(Duration),
    /// Twice what the lane's recent wake-ups took ([`measured_budget`]); the default.
    Measured,
}

/// The budget a value of [`SPIN_ENV`] sets (pure: no environment read).
pub fn budget_from(raw: Option<&str>) -> Budget {
    match raw.map(str::trim).filter(|s| !s.is_empty()) {
        None => Budget::Measured,
        Some(s) if ["off", "none", "never"].contains(&s.to_ascii_lowercase().as_str()) => {
            Budget::Fixed(Duration::ZERO)
        }
        Some(s) => Budget::Fixed(
            s.parse::<u64>()
                .map(|us| Duration::from_micros(us).min(MAX_SPIN))
                .unwrap_or(DEFAULT_SPIN),
        ),
    }
}

/// The spin of a lane whose wake-ups took `wake_ns` on average (0: none measured yet):
/// twice that, within [`MIN_SPIN`] and [`MAX_SPIN`]. A sleep costs its wake-up and then
/// about as much again: code right after a wake-up on a halted vCPU runs slowly (a worker took
/// 65 µs from hearing a call to answering it after a sleep, and a whole call took 45-50 µs
/// while both sides spun; ADR 0046).
pub fn measured_budget(wake_ns: u64) -> Duration {
    if wake_ns == 0 {
        return DEFAULT_SPIN;
    }
    Duration::from_nanos(wake_ns.saturating_mul(2)).clamp(MIN_SPIN, MAX_SPIN)
}

/// Folds one wake-up (`sample_ns`) into a lane's running average (0: none yet), which follows
/// about the last eight. A sample counts for at most four times the average and at most
/// [`MAX_SPIN`]: a reader that was preempted says little about wake-ups, and a lane that
/// spins successfully takes no more samples to bring an outlier back down.
pub fn fold_wake(avg_ns: u64, sample_ns: u64) -> u64 {
    let cap = MAX_SPIN.as_nanos() as u64;
    let cap = if avg_ns == 0 {
        cap
    } else {
        cap.min(avg_ns.saturating_mul(4))
    };
    let sample = sample_ns.min(cap).max(1);
    if avg_ns == 0 {
        sample
    } else {
        (avg_ns - avg_ns / 8 + sample / 8).max(1)
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

/// How long a side took to answer, from when it last received (`got_ns`) to when it last
/// sent (`sent_ns`), both on `CLOCK_MONOTONIC` (one clock for every process): its own work,
/// without any wake-up. A send older than the last receipt says nothing slow: 0.
pub fn think_time(got_ns: u64, sent_ns: u64) -> u64 {
    sent_ns.saturating_sub(got_ns)
}

/// `CLOCK_MONOTONIC` in nanoseconds: the clock both sides of a lane stamp and read.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid out-pointer; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
}

/// Where the two sides of a call lane note when they last received and last sent (the
/// worker's shared page), on the clock of [`monotonic_ns`].
pub trait LaneStamps: Send + Sync {
    /// Notes that `side` received bytes at `now_ns`.
    fn got(&self, side: airlock_wire::Side, now_ns: u64);
    /// Notes that `side` sends at `now_ns`.
    fn sent(&self, side: airlock_wire::Side, now_ns: u64);
    /// `side`'s last receipt and last send (0: never).
    fn last(&self, side: airlock_wire::Side) -> (u64, u64);
}

/// This process's budget, read once.
pub(crate) fn budget() -> Budget {
    static BUDGET: OnceLock<Budget> = OnceLock::new();
    *BUDGET.get_or_init(|| budget_from(std::env::var(SPIN_ENV).ok().as_deref()))
}

/// What a lane remembers between reads.
#[derive(Debug, Default)]
pub(crate) struct SpinState {
    /// How long the last read waited for its peer, in nanoseconds (`u64::MAX`: it timed out).
    last_wait: AtomicU64,
    /// The running average of this lane's wake-ups, in nanoseconds (0: none measured).
    wake: AtomicU64,
}

impl SpinState {
    /// The spin the next read may take under `budget`, the running average of this lane's
    /// wake-ups (0: none measured) and its last wait, all in nanoseconds.
    pub(crate) fn snapshot(&self, budget: Budget) -> (u64, u64, u64) {
        let wake = self.wake.load(Ordering::Relaxed);
        let spin = match budget {
            Budget::Fixed(d) => d,
            Budget::Measured => measured_budget(wake),
        };
        let spin = u64::try_from(spin.as_nanos()).unwrap_or(u64::MAX);
        (spin, wake, self.last_wait.load(Ordering::Relaxed))
    }
}

/// What a call lane knows about its waits ([`crate::CallLane::timing`]), in nanoseconds; the
/// stamps on `CLOCK_MONOTONIC` (0: never, or no shared page).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LaneTiming {
    /// How long the next read may spin before it sleeps.
    pub spin_ns: u64,
    /// The running average of this lane's wake-ups (0: none measured).
    pub wake_ns: u64,
    /// How long its peer took to answer the last read (`u64::MAX`: it timed out).
    pub last_wait_ns: u64,
    /// The host's last receipt and send on this lane.
    pub host: (u64, u64),
    /// The worker's last receipt and send on this lane.
    pub worker: (u64, u64),
}

/// One read of a lane: `read(false)` (never blocks) in a [`spin`] when the lane's last wait
/// makes it [`worth_spinning`], then `read(true)` if nothing came; records how long this read
/// waited for its peer (`u64::MAX` when it timed out). `peer` gives the peer's last receipt
/// and send, when the two sides note them: then a read that slept records the peer's
/// [`think_time`] instead of its own wait, which counts the wake-ups, and measures its own
/// wake-up for a [`Budget::Measured`].
pub(crate) fn read<T>(
    budget: Budget,
    state: &SpinState,
    peer: Option<&dyn Fn() -> (u64, u64)>,
    mut read: impl FnMut(bool) -> std::io::Result<T>,
) -> std::io::Result<T> {
    let limit = match budget {
        Budget::Fixed(d) => d,
        Budget::Measured => measured_budget(state.wake.load(Ordering::Relaxed)),
    };
    let start = monotonic_ns();
    let mut got = Err(std::io::ErrorKind::WouldBlock.into());
    let mut slept = false;
    if worth_spinning(limit, state.last_wait.load(Ordering::Relaxed)) {
        got = spin(limit, || read(false));
    }
    if would_block(&got) {
        slept = true;
        got = read(true);
    }
    if budget == Budget::Fixed(Duration::ZERO) {
        return got;
    }
    let now = monotonic_ns();
    let waited = match (would_block(&got), slept, peer) {
        (true, ..) => u64::MAX,
        (false, true, Some(peer)) => {
            let (peer_got, peer_sent) = peer();
            if peer_sent > start {
                let w = fold_wake(state.wake.load(Ordering::Relaxed), now - peer_sent.min(now));
                state.wake.store(w, Ordering::Relaxed);
            }
            think_time(peer_got, peer_sent).min(u64::MAX - 1)
        }
        _ => now.saturating_sub(start).min(u64::MAX - 1),
    };
    state.last_wait.store(waited, Ordering::Relaxed);
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

    fn state(last_wait: u64) -> SpinState {
        let s = SpinState::default();
        s.last_wait.store(last_wait, Ordering::Relaxed);
        s
    }

    #[test]
    fn the_budget_is_measured_unless_fixed_and_can_be_turned_off() {
        let fixed = |us| Budget::Fixed(Duration::from_micros(us));
        assert_eq!(budget_from(None), Budget::Measured);
        assert_eq!(budget_from(Some(" ")), Budget::Measured);
        assert_eq!(budget_from(Some("20")), fixed(20));
        assert_eq!(budget_from(Some("0")), fixed(0));
        assert_eq!(budget_from(Some("off")), fixed(0));
        assert_eq!(budget_from(Some("5000000")), Budget::Fixed(MAX_SPIN));
        assert_eq!(budget_from(Some("-3")), Budget::Fixed(DEFAULT_SPIN));
    }

    #[test]
    fn a_measured_budget_is_as_long_as_the_wake_ups_within_bounds() {
        assert_eq!(measured_budget(0), DEFAULT_SPIN, "nothing measured yet");
        assert_eq!(measured_budget(70_000), Duration::from_micros(140));
        assert_eq!(measured_budget(1), MIN_SPIN);
        assert_eq!(measured_budget(u64::MAX), MAX_SPIN);
        // The average follows the recent wake-ups; one preempted read moves it by at most
        // three eighths.
        assert_eq!(fold_wake(0, 80_000), 80_000);
        assert_eq!(
            fold_wake(0, u64::MAX),
            1_000_000,
            "the first sample: capped at 1 ms"
        );
        assert_eq!(fold_wake(80_000, 80_000), 80_000);
        assert_eq!(fold_wake(80_000, 0), 70_000);
        assert_eq!(fold_wake(80_000, u64::MAX), 80_000 - 10_000 + 40_000);
        assert_eq!(fold_wake(400_000, u64::MAX), 400_000 - 50_000 + 125_000);
        // A real change in what wake-ups cost is followed, upwards too.
        let mut avg = 12_000;
        for _ in 0..16 {
            avg = fold_wake(avg, 60_000);
        }
        assert!((50_000..=60_000).contains(&avg), "{avg}");
        let mut avg = 0;
        for _ in 0..64 {
            avg = fold_wake(avg, 8_000);
        }
        assert!((7_000..=9_000).contains(&avg), "{avg}");
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
        let b = Budget::Fixed(Duration::from_millis(50));
        let st = state(0);
        // A quick answer: taken while spinning, and the next read spins too.
        let mut tries = Vec::new();
        let got = read(b, &st, None, |block| {
            tries.push(block);
            if tries.len() < 3 {
                Err(ErrorKind::WouldBlock.into())
            } else {
                Ok(())
            }
        });
        assert!(got.is_ok());
        assert_eq!(tries, [false, false, false]);
        assert!(st.last_wait.load(Ordering::Relaxed) < 50_000_000);
        // A timed-out wait: the next read goes straight to blocking.
        st.last_wait.store(u64::MAX, Ordering::Relaxed);
        let mut tries = Vec::new();
        let got = read(b, &st, None, |block| {
            tries.push(block);
            Err::<(), _>(ErrorKind::WouldBlock.into())
        });
        assert!(would_block(&got));
        assert_eq!(tries, [true]);
        assert_eq!(st.last_wait.load(Ordering::Relaxed), u64::MAX);
    }

    #[test]
    fn a_read_that_slept_judges_the_peer_by_its_think_time_not_the_wake_ups() {
        assert_eq!(think_time(1_000, 31_000), 30_000);
        assert_eq!(think_time(31_000, 1_000), 0, "received again since it sent");
        let b = Budget::Fixed(Duration::from_millis(50));
        // The last wait was long, so this read sleeps at once. The peer heard us, took 1 ms
        // and answered; we woke 60 ms after that: the next read spins all the same.
        let st = state(u64::MAX - 1);
        let stamps = std::cell::Cell::new((0, 0));
        let peer = || stamps.get();
        let got = read(b, &st, Some(&peer), |block| {
            assert!(block, "a lane whose last wait was long sleeps at once");
            let heard = monotonic_ns();
            stamps.set((heard, heard + 1_000_000));
            std::thread::sleep(Duration::from_millis(61)); // a slow wake-up
            Ok(())
        });
        assert!(got.is_ok());
        assert_eq!(st.last_wait.load(Ordering::Relaxed), 1_000_000);
        assert!(worth_spinning(Duration::from_millis(50), 1_000_000));
        // That read also measured its wake-up, from the peer's send to its return.
        let wake = st.wake.load(Ordering::Relaxed);
        assert_eq!(wake, MAX_SPIN.as_nanos() as u64, "60 ms, capped: {wake}");
        // Without stamps the same read counts its whole wait, wake-ups included.
        let st = state(u64::MAX - 1);
        read(b, &st, None, |_| {
            std::thread::sleep(Duration::from_millis(60));
            Ok(())
        })
        .unwrap();
        assert!(!worth_spinning(
            Duration::from_millis(50),
            st.last_wait.load(Ordering::Relaxed)
        ));
        assert_eq!(
            st.wake.load(Ordering::Relaxed),
            0,
            "nothing to measure a wake-up by"
        );
    }

    #[test]
    fn a_measured_lane_spins_as_long_as_its_wake_ups_take() {
        let st = state(100_000); // the peer answered in 100 µs
        let spun = |st: &SpinState| {
            let mut tries = Vec::new();
            let _ = read(Budget::Measured, st, None, |block| {
                tries.push(block);
                Err::<(), _>(ErrorKind::WouldBlock.into())
            });
            tries.len() > 1
        };
        assert!(
            !spun(&st),
            "the default 50 µs is shorter than the peer's 100 µs"
        );
        st.last_wait.store(100_000, Ordering::Relaxed);
        st.wake.store(60_000, Ordering::Relaxed); // but a sleep costs twice 60 µs here
        assert!(spun(&st));
    }

    #[test]
    fn a_lane_with_the_spin_off_neither_spins_nor_records() {
        let st = state(0);
        let mut tries = Vec::new();
        read(Budget::Fixed(Duration::ZERO), &st, None, |block| {
            tries.push(block);
            Ok(())
        })
        .unwrap();
        assert_eq!(tries, [true]);
        assert_eq!(st.last_wait.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn the_clock_is_monotonic_and_in_nanoseconds() {
        let a = monotonic_ns();
        std::thread::sleep(Duration::from_millis(2));
        let d = monotonic_ns() - a;
        assert!((2_000_000..1_000_000_000).contains(&d), "{d}");
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
