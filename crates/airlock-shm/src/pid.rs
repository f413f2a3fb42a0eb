//! This process's id without a system call per question.
//!
//! A lane checks on every send and receive that the process using it is the one that made it
//! (a child that inherited the socket by `fork` may not speak on it). `getpid` is a system
//! call (glibc stopped caching it), two per call on each side; so the id is read once, and
//! forgotten in a child right after `fork` by an atfork handler, which reads it again there.

use std::sync::Once;
use std::sync::atomic::{AtomicU32, Ordering};

static PID: AtomicU32 = AtomicU32::new(0);
static HOOK: Once = Once::new();

extern "C" fn forget_in_child() {
    // Async-signal-safe: one atomic store.
    PID.store(0, Ordering::Relaxed);
}

/// `std::process::id()`, cached until this process forks.
pub fn current_pid() -> u32 {
    HOOK.call_once(|| {
        // SAFETY: registers a child handler that only stores to an atomic.
        unsafe { libc::pthread_atfork(None, None, Some(forget_in_child)) };
    });
    match PID.load(Ordering::Relaxed) {
        0 => {
            let pid = std::process::id();
            PID.store(pid, Ordering::Relaxed);
            pid
        }
        pid => pid,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_forked_child_sees_its_own_pid() {
        let parent = current_pid();
        assert_eq!(parent, std::process::id());
        // SAFETY: the child only calls async-signal-safe functions and _exit.
        let child = unsafe { libc::fork() };
        assert!(child >= 0);
        if child == 0 {
            let ok = current_pid() == unsafe { libc::getpid() } as u32;
            unsafe { libc::_exit(if ok { 0 } else { 1 }) };
        }
        let mut status = 0;
        assert_eq!(unsafe { libc::waitpid(child, &mut status, 0) }, child);
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
        assert_eq!(current_pid(), parent);
    }
}
