//! Whether a pid still names a live process, for dropping the bookings of dead ones.
//!
//! `kill(pid, 0)` alone says yes for a zombie (exited, not yet waited for), and a worker killed
//! by its supervisor is one until the reaper thread waits for it, so `/proc/<pid>/stat` is read
//! too. Pids are those of the caller's pid namespace, and a pid recycled by the kernel counts as
//! alive: bookings are keyed by pid alone.

use rustix::io::Errno;
use rustix::process::Pid;

/// Whether `pid` is a running (or stopped) process, not a zombie.
pub fn alive(pid: u32) -> bool {
    let Some(p) = i32::try_from(pid).ok().and_then(Pid::from_raw) else {
        return false;
    };
    match rustix::process::test_kill_process(p) {
        Ok(()) => !zombie(pid),
        // Exists, but belongs to someone else.
        Err(Errno::PERM) => true,
        Err(_) => false,
    }
}

fn zombie(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        // No procfs: trust kill().
        return false;
    };
    // "pid (comm) S ...": comm may hold spaces and parentheses, the state follows the last ')'.
    stat.rsplit_once(')')
        .and_then(|(_, rest)| rest.trim_start().chars().next())
        .is_some_and(|s| matches!(s, 'Z' | 'X' | 'x'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn we_are_alive_and_pid_zero_is_not() {
        assert!(alive(std::process::id()));
        assert!(!alive(0));
        assert!(!alive(u32::MAX));
    }

    #[test]
    fn a_zombie_is_dead() {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        // Not waited for yet: a zombie once it exits.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while alive(pid) {
            assert!(std::time::Instant::now() < deadline, "child never exited");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        child.wait().unwrap();
        assert!(!alive(pid));
    }
}
