//! What a worker is started from, and the private directory its sockets live in.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::time::Duration;

use airlock_shm::PoolConfig;
use rustix::fs::Mode;

use crate::error::SpawnError;
use crate::launch::LOG_FD;
use crate::liveness::Liveness;
use crate::signal_page::{SIGNAL_FD, SIGNAL_FD_ENV};

/// How to start one worker.
#[derive(Debug, Clone)]
pub struct WorkerSpec {
    /// Shown in logs and errors.
    pub name: String,
    /// The interpreter (any CPython ≥ 3.10 that can load our abi3 module).
    pub python: PathBuf,
    /// Arguments after the interpreter, e.g. `["-m", "comfy_airlock.worker"]`.
    pub args: Vec<OsString>,
    /// The worker's whole environment; nothing of the host's is inherited unless listed here.
    pub env: Vec<(OsString, OsString)>,
    pub cwd: Option<PathBuf>,
    /// How long the worker may take from exec to both lanes connected.
    pub connect_timeout: Duration,
    /// Pings on the control lane, and the silence after which the worker is declared hung and
    /// killed; `None` turns the watch off.
    pub liveness: Option<Liveness>,
    pub pool: PoolConfig,
}

impl WorkerSpec {
    /// The worker's environment: `env`, then ours (the handshake socket, the private temp
    /// directory, the descriptor numbers), ours winning.
    pub(crate) fn environment(&self, socket: &Path, tmp: &Path) -> Vec<(OsString, OsString)> {
        let ours: [(&str, OsString); 6] = [
            ("AIRLOCK_SOCKET", socket.into()),
            ("AIRLOCK_NAME", self.name.clone().into()),
            ("TMPDIR", tmp.into()),
            ("XDG_RUNTIME_DIR", tmp.into()),
            ("AIRLOCK_LOG_FD", LOG_FD.to_string().into()),
            (SIGNAL_FD_ENV, SIGNAL_FD.to_string().into()),
        ];
        let mut env: BTreeMap<OsString, OsString> = self.env.iter().cloned().collect();
        env.extend(ours.into_iter().map(|(k, v)| (k.into(), v)));
        env.into_iter().collect()
    }
}

/// A 0700 directory holding the listening socket for one handshake; removed on drop, which
/// happens as soon as both lanes are connected, so nobody can connect afterwards.
pub(crate) struct SocketDir {
    dir: PathBuf,
    pub socket: PathBuf,
    pub listener: UnixListener,
}

impl SocketDir {
    pub fn create() -> Result<SocketDir, SpawnError> {
        let base = runtime_base();
        sweep_stale(&base);
        let mut rnd = [0u8; 8];
        rustix::rand::getrandom(&mut rnd, rustix::rand::GetRandomFlags::empty())
            .map_err(|e| SpawnError::SocketDir(e.into()))?;
        let dir = base.join(format!("airlock-{}-{}", std::process::id(), hex(&rnd)));
        rustix::fs::mkdir(&dir, Mode::RWXU).map_err(|e| SpawnError::SocketDir(e.into()))?;
        let socket = dir.join("s");
        let listener = UnixListener::bind(&socket).map_err(SpawnError::SocketDir)?;
        listener
            .set_nonblocking(true)
            .map_err(SpawnError::SocketDir)?;
        Ok(SocketDir {
            dir,
            socket,
            listener,
        })
    }
}

impl Drop for SocketDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.socket);
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// Removes the handshake directories of hosts killed during a handshake
/// (`airlock-<pid>-<16 hex>`, ours, with no such pid): a killed host cannot remove its own, and
/// its worker removes it only when it gets far enough to notice (`abandon_handshake`).
fn sweep_stale(base: &Path) {
    use std::os::unix::fs::MetadataExt;
    let Ok(entries) = std::fs::read_dir(base) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some((pid, rnd)) = name
            .to_str()
            .and_then(|n| n.strip_prefix("airlock-"))
            .and_then(|rest| rest.split_once('-'))
        else {
            continue;
        };
        let Ok(pid) = pid.parse::<u32>() else {
            continue;
        };
        if rnd.len() != 16 || !rnd.bytes().all(|b| b.is_ascii_hexdigit()) {
            continue;
        }
        let ours = e
            .metadata()
            .is_ok_and(|m| m.is_dir() && m.uid() == rustix::process::getuid().as_raw());
        if ours && pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_file(e.path().join("s"));
            let _ = std::fs::remove_dir(e.path());
        }
    }
}

/// `$XDG_RUNTIME_DIR` when usable, else the temp dir; a socket path must fit in 108 bytes.
fn runtime_base() -> PathBuf {
    let fits = |p: &Path| p.is_dir() && p.as_os_str().len() < 70;
    if let Some(d) = std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from)
        && fits(&d)
    {
        return d;
    }
    let t = std::env::temp_dir();
    if fits(&t) { t } else { PathBuf::from("/tmp") }
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn dirs_of_dead_hosts_are_swept_and_others_left() {
        let base = std::env::temp_dir().join(format!("airlock-sweep-test-{}", std::process::id()));
        std::fs::create_dir_all(&base).unwrap();
        let dead = base.join("airlock-4294967295-0123456789abcdef");
        let live = base.join(format!("airlock-{}-0123456789abcdef", std::process::id()));
        let other = base.join("airlock-4294967295-not-a-handshake");
        for d in [&dead, &live, &other] {
            std::fs::create_dir(d).unwrap();
        }
        std::fs::write(dead.join("s"), b"").unwrap();
        sweep_stale(&base);
        assert!(!dead.exists() && live.exists() && other.exists());
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn socket_dir_is_private_and_removed() {
        let sd = SocketDir::create().unwrap();
        let dir = sd.socket.parent().unwrap().to_owned();
        let mode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
        drop(sd);
        assert!(!dir.exists());
    }
}
