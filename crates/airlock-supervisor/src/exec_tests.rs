use std::cell::Cell;
use std::io::Read;
use std::os::fd::AsFd;

use super::*;

fn sh(script: &str, env: &[(OsString, OsString)], inherit: &[(BorrowedFd<'_>, RawFd)]) -> String {
    sh_in(script, env, inherit, None)
}

fn sh_in(
    script: &str,
    env: &[(OsString, OsString)],
    inherit: &[(BorrowedFd<'_>, RawFd)],
    cwd: Option<&Path>,
) -> String {
    let args = ["-c".into(), script.into()];
    let mut s = spawn(&Launch {
        program: Path::new("/bin/sh"),
        args: &args,
        env,
        cwd,
        inherit,
    })
    .unwrap();
    drop(s.stdin);
    let mut out = String::new();
    s.stdout.read_to_string(&mut out).unwrap();
    let mut status = 0;
    // SAFETY: our own child; sh exits once the script ran.
    assert_eq!(unsafe { libc::waitpid(s.pid, &mut status, 0) }, s.pid);
    out
}

/// A descriptor the host holds without close-on-exec, as a library that opened a file with
/// plain `open` leaves it.
fn inheritable_file() -> OwnedFd {
    let path = cstr(OsStr::new("/proc/self/exe")).unwrap();
    // SAFETY: a valid path; the result is owned below.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDONLY) };
    assert!(fd >= 0);
    // SAFETY: freshly opened, owned by nobody else.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

#[test]
fn the_child_gets_exactly_its_streams_and_the_inherited_fds() {
    let secret = inheritable_file();
    let (r3, w3) = pipe().unwrap();
    let (_r4, w4) = pipe().unwrap();
    // After the glob, `[ -e ]` drops the directory descriptor the glob itself had open.
    let script = r#"for f in /proc/$$/fd/*; do [ -e "$f" ] && printf '%s ' "${f##*/}"; done
echo; echo through-3 >&3"#;
    let out = sh(script, &[], &[(w3.as_fd(), 3), (w4.as_fd(), 4)]);
    assert_eq!(
        out.trim(),
        "0 1 2 3 4",
        "host fd {} leaked?",
        secret.as_raw_fd()
    );
    drop((w3, w4));
    let mut got = String::new();
    File::from(r3).read_to_string(&mut got).unwrap();
    assert_eq!(got, "through-3\n");
}

#[test]
fn signal_mask_dispositions_group_env_and_cwd_are_the_workers_own() {
    // SAFETY: blocking SIGINT in this test thread only; restored below.
    let mut old: libc::sigset_t = unsafe { std::mem::zeroed() };
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old);
    }
    let env = [("GIVEN".into(), "yes".into())];
    let script = r#"while read k v rest; do case $k in SigBlk:|SigIgn:) echo "$k $v";; esac; done < /proc/$$/status
read -r _ _ _ _ pgid _ < /proc/$$/stat; [ "$pgid" = "$$" ] && echo own-group
echo "given=$GIVEN host=${HOME:-none}"; pwd"#;
    let out = sh_in(script, &env, &[], Some(Path::new("/proc")));
    // SAFETY: restores this thread's mask.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut()) };
    // The test harness ignores SIGPIPE, as Python does; the child must not. glibc's spawn
    // leaves its two internal signals (32, 33) ignored; every glibc program reinstalls them.
    let mut lines: Vec<String> = out.lines().map(str::to_owned).collect();
    let ign = lines[1].strip_prefix("SigIgn: ").expect("SigIgn line");
    let ign = u64::from_str_radix(ign, 16).unwrap() & !(0b11 << 31);
    lines[1] = format!("SigIgn: {ign:016x}");
    assert_eq!(
        lines,
        [
            "SigBlk: 0000000000000000",
            "SigIgn: 0000000000000000",
            "own-group",
            "given=yes host=none",
            "/proc",
        ],
    );
}

thread_local! {
    static FORKS_HERE: Cell<usize> = const { Cell::new(0) };
}

extern "C" fn count_fork() {
    FORKS_HERE.with(|c| c.set(c.get() + 1));
}

#[test]
fn no_atfork_handler_runs_in_a_spawn() {
    // SAFETY: registers a handler that only touches a thread-local counter.
    assert_eq!(
        unsafe { libc::pthread_atfork(Some(count_fork), None, None) },
        0
    );
    for _ in 0..5 {
        sh("exit 0", &[], &[]);
    }
    assert_eq!(FORKS_HERE.with(Cell::get), 0, "a spawn forked");
    // The counter does count a fork: the child only exits.
    // SAFETY: the child calls nothing but _exit.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        unsafe { libc::_exit(0) };
    }
    // SAFETY: our own child.
    unsafe { libc::waitpid(pid, std::ptr::null_mut(), 0) };
    assert_eq!(FORKS_HERE.with(Cell::get), 1);
}

#[test]
fn a_program_that_cannot_run_is_the_exec_errno() {
    let run = |p: &str| {
        spawn(&Launch {
            program: Path::new(p),
            args: &[],
            env: &[],
            cwd: None,
            inherit: &[],
        })
        .map(|s| s.pid)
        .unwrap_err()
        .raw_os_error()
    };
    assert_eq!(run("/nonexistent/python3"), Some(libc::ENOENT));
    let plain = std::env::temp_dir().join(format!("airlock-exec-test-{}", std::process::id()));
    std::fs::write(&plain, "not a program\n").unwrap();
    let no_x = run(plain.to_str().unwrap());
    std::fs::remove_file(&plain).unwrap();
    assert_eq!(no_x, Some(libc::EACCES));
    assert_eq!(run("no-such-program-airlock"), Some(libc::ENOENT));
}
