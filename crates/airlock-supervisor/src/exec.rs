//! Starting the worker's program with `posix_spawn`, never `fork`.
//!
//! A ComfyUI host is full of threads (OpenBLAS, OpenMP, torch's pools). `fork` runs every
//! `pthread_atfork` handler those libraries registered, in the spawning thread, and scipy's
//! bundled OpenBLAS handler joins its worker threads there: a start that waits on threads busy
//! elsewhere, seen hanging a ComfyUI start for over 11 minutes. glibc's `posix_spawn` (≥ 2.24)
//! starts the child with `clone(CLONE_VM | CLONE_VFORK)` and runs no atfork handler; its file
//! actions and attributes do what `Command::pre_exec` did between fork and exec.
//!
//! The child gets exactly: its three pipes on 0-2, the `inherit` descriptors at their target
//! numbers, nothing else (every descriptor from the first free number up is closed, inheritable
//! or not), an empty signal mask, default dispositions for every signal, its own process group,
//! the given environment only, and `cwd`.

use std::ffi::{CString, OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// What to start.
pub(crate) struct Launch<'a> {
    pub program: &'a Path,
    pub args: &'a [OsString],
    /// The whole environment; nothing of the host's passes unless listed.
    pub env: &'a [(OsString, OsString)],
    pub cwd: Option<&'a Path>,
    /// Descriptors the child gets at the given numbers (each ≥ 3 and below `3 + inherit.len()`).
    pub inherit: &'a [(BorrowedFd<'a>, RawFd)],
}

/// A started child: its pid and the host's ends of its standard streams.
pub(crate) struct Started {
    pub pid: i32,
    pub stdin: File,
    pub stdout: File,
    pub stderr: File,
}

/// Starts `l` and returns at once; the caller owns reaping the child.
pub(crate) fn spawn(l: &Launch<'_>) -> io::Result<Started> {
    let program = resolve(l.program)?;
    let mut argv = vec![cstr(program.as_os_str())?];
    for a in l.args {
        argv.push(cstr(a)?);
    }
    let mut envp = Vec::with_capacity(l.env.len());
    for (k, v) in l.env {
        let mut kv = k.clone();
        kv.push("=");
        kv.push(v);
        envp.push(cstr(&kv)?);
    }
    let cwd = l.cwd.map(|c| cstr(c.as_os_str())).transpose()?;

    let (in_r, in_w) = pipe()?;
    let (out_r, out_w) = pipe()?;
    let (err_r, err_w) = pipe()?;
    // The child's descriptors 0..first_free, in order; the sources are moved to numbers at or
    // above first_free first, so no dup2 overwrites a later one's source, and the closefrom
    // that follows closes every source.
    let first_free = 3 + l.inherit.len() as RawFd;
    let mut targets: Vec<(OwnedFd, RawFd)> = Vec::with_capacity(first_free as usize);
    for (fd, target) in [(&in_r, 0), (&out_w, 1), (&err_w, 2)] {
        targets.push((above(fd.as_raw_fd(), first_free)?, target));
    }
    for (fd, target) in l.inherit {
        assert!(
            (3..first_free).contains(target),
            "inherited fd target {target} out of 3..{first_free}"
        );
        targets.push((above(fd.as_raw_fd(), first_free)?, *target));
    }

    let actions = FileActions::new(&targets, first_free, cwd.as_deref())?;
    let attr = Attr::new()?;
    let mut argv_p: Vec<*mut libc::c_char> = argv.iter().map(|a| a.as_ptr().cast_mut()).collect();
    argv_p.push(std::ptr::null_mut());
    let mut envp_p: Vec<*mut libc::c_char> = envp.iter().map(|a| a.as_ptr().cast_mut()).collect();
    envp_p.push(std::ptr::null_mut());
    let mut pid: libc::pid_t = 0;
    // SAFETY: every pointer is valid for the call (argv/envp NUL-terminated arrays of
    // NUL-terminated strings, kept alive above); glibc returns the exec's errno on failure.
    let rc = unsafe {
        libc::posix_spawn(
            &mut pid,
            argv[0].as_ptr(),
            &actions.0,
            &attr.0,
            argv_p.as_ptr(),
            envp_p.as_ptr(),
        )
    };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(rc));
    }
    Ok(Started {
        pid,
        stdin: File::from(in_w),
        stdout: File::from(out_r),
        stderr: File::from(err_r),
    })
}

/// A relative path is made absolute against the host's directory (the child changes directory
/// before its exec); a bare name is looked up in the host's `PATH`, as `Command` would.
fn resolve(program: &Path) -> io::Result<PathBuf> {
    if program.as_os_str().as_bytes().contains(&b'/') {
        return std::path::absolute(program);
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join(program))
        .find(|p| {
            let Ok(c) = cstr(p.as_os_str()) else {
                return false;
            };
            // SAFETY: a valid NUL-terminated path.
            unsafe { libc::access(c.as_ptr(), libc::X_OK) == 0 }
        })
        .ok_or_else(|| io::Error::from_raw_os_error(libc::ENOENT))
}

fn cstr(s: &OsStr) -> io::Result<CString> {
    CString::new(s.as_bytes()).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{s:?} contains a NUL byte"),
        )
    })
}

fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    Ok(rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?)
}

/// A close-on-exec duplicate of `fd` at `min` or above.
fn above(fd: RawFd, min: RawFd) -> io::Result<OwnedFd> {
    // SAFETY: F_DUPFD_CLOEXEC on a descriptor we hold; the result is a fresh descriptor.
    let new = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, min) };
    if new < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `new` is open and owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(new) })
}

fn check(rc: libc::c_int) -> io::Result<()> {
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::from_raw_os_error(rc))
    }
}

struct FileActions(libc::posix_spawn_file_actions_t);

impl FileActions {
    fn new(
        targets: &[(OwnedFd, RawFd)],
        close_from: RawFd,
        cwd: Option<&std::ffi::CStr>,
    ) -> io::Result<Self> {
        // SAFETY: init on zeroed storage; destroyed in Drop once initialized.
        let mut fa = FileActions(unsafe { std::mem::zeroed() });
        check(unsafe { libc::posix_spawn_file_actions_init(&mut fa.0) })?;
        for (src, target) in targets {
            // dup2 onto another number clears close-on-exec on the target.
            check(unsafe {
                libc::posix_spawn_file_actions_adddup2(&mut fa.0, src.as_raw_fd(), *target)
            })?;
        }
        // glibc ≥ 2.34: close_range in the child; the host's inheritable descriptors (a file
        // opened without O_CLOEXEC, another library's socket) never reach a worker.
        check(unsafe { libc::posix_spawn_file_actions_addclosefrom_np(&mut fa.0, close_from) })?;
        if let Some(dir) = cwd {
            check(unsafe { libc::posix_spawn_file_actions_addchdir_np(&mut fa.0, dir.as_ptr()) })?;
        }
        Ok(fa)
    }
}

impl Drop for FileActions {
    fn drop(&mut self) {
        // SAFETY: initialized in `new`.
        unsafe { libc::posix_spawn_file_actions_destroy(&mut self.0) };
    }
}

struct Attr(libc::posix_spawnattr_t);

impl Attr {
    fn new() -> io::Result<Self> {
        // SAFETY: init on zeroed storage; destroyed in Drop once initialized. The sigset_t
        // values are initialized by sigemptyset/sigfillset before use.
        unsafe {
            let mut a = Attr(std::mem::zeroed());
            check(libc::posix_spawnattr_init(&mut a.0))?;
            // An empty mask and default dispositions: a worker never inherits a host thread's
            // blocked SIGINT, nor an ignored signal (Python ignores SIGPIPE). glibc's sigfillset
            // leaves out its internal signals.
            let mut empty: libc::sigset_t = std::mem::zeroed();
            let mut all: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut empty);
            libc::sigfillset(&mut all);
            check(libc::posix_spawnattr_setsigmask(&mut a.0, &empty))?;
            check(libc::posix_spawnattr_setsigdefault(&mut a.0, &all))?;
            // Group 0: the child's own, numbered by its pid (what it forks dies with it).
            check(libc::posix_spawnattr_setpgroup(&mut a.0, 0))?;
            let flags = libc::POSIX_SPAWN_SETPGROUP
                | libc::POSIX_SPAWN_SETSIGMASK
                | libc::POSIX_SPAWN_SETSIGDEF;
            check(libc::posix_spawnattr_setflags(
                &mut a.0,
                flags as libc::c_short,
            ))?;
            Ok(a)
        }
    }
}

impl Drop for Attr {
    fn drop(&mut self) {
        // SAFETY: initialized in `new`.
        unsafe { libc::posix_spawnattr_destroy(&mut self.0) };
    }
}

#[cfg(test)]
#[path = "exec_tests.rs"]
mod tests;
