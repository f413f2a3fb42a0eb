//! How a process waits on a slot or process record that another process is changing: back off
//! (spin, yield, then sleep with per-process jitter), and after [`STUCK_ROUNDS`] suspect that
//! the actor died mid-transition (the caller then checks its pid). Shared by the booking table
//! (`table.rs`) and the WDDM process records (`procs.rs`).

use std::time::Duration;

/// This process's pid: the actor recorded in the slots and records it changes.
pub(crate) fn me() -> u32 {
    rustix::process::getpid().as_raw_nonzero().get() as u32
}

/// Spins, then yields, then sleeps, with a little per-process jitter so two processes that
/// withdrew from the same key do not collide again in lockstep.
pub(crate) fn backoff(round: &mut u32) {
    *round += 1;
    if *round < 6 {
        for _ in 0..(1u32 << *round) {
            std::hint::spin_loop();
        }
    } else if *round < 20 {
        std::thread::yield_now();
    } else {
        let jitter = u64::from(me() % 7);
        std::thread::sleep(Duration::from_micros(20 + jitter * 10));
    }
}

/// Rounds of waiting on a slot in transition before checking whether its actor died.
pub(crate) const STUCK_ROUNDS: u32 = 200;
