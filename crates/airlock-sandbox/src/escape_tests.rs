//! Tests that try to get out of the sandbox. Landlock and seccomp cannot be undone, so each
//! case runs in a child: this test binary started again on the hidden `sandboxed_child` test,
//! with the case in its environment. The child prints one line per attempt (`name ok` or
//! `name denied <errno>`), and the parent checks them.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::{Rules, abi, apply, landlock_rules};

const CASE: &str = "AIRLOCK_SANDBOX_CASE";

/// Landlock is part of the kernels CI runs on; elsewhere the test is skipped, loudly.
fn landlock_or_skip() -> bool {
    if abi() > 0 {
        return true;
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "Landlock is not available on this kernel, and CI must test the sandbox"
    );
    eprintln!("skipped: this kernel has no Landlock");
    false
}

fn run_child(case: &str, env: &[(&str, String)]) -> BTreeMap<String, String> {
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "escape_tests::sandboxed_child",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CASE, case)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "child failed: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
        .lines()
        .filter_map(|l| l.strip_prefix("attempt "))
        .filter_map(|l| l.split_once(' '))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn outcome(name: &str, r: std::io::Result<()>) {
    match r {
        Ok(()) => println!("attempt {name} ok"),
        Err(e) => println!("attempt {name} denied {}", e.raw_os_error().unwrap_or(-1)),
    }
}

fn read(p: &Path) -> std::io::Result<()> {
    std::fs::File::open(p)?
        .read_to_end(&mut Vec::new())
        .map(drop)
}

fn write(p: &Path) -> std::io::Result<()> {
    std::fs::File::create(p)?.write_all(b"x")
}

/// A tree: `allowed/` (readable), `listed/` (listable), `writable/` (writable), `outside/`
/// (none of these), each with a file, and an executable script in `writable/`.
fn tree() -> tempfile::TempDir {
    let d = tempfile::Builder::new()
        .prefix("airlock-sandbox-test")
        .tempdir()
        .unwrap();
    for sub in ["allowed", "listed", "writable", "outside"] {
        std::fs::create_dir(d.path().join(sub)).unwrap();
        std::fs::write(d.path().join(sub).join("file"), "secret").unwrap();
    }
    let script = d.path().join("writable").join("run.sh");
    std::fs::write(&script, "#!/bin/sh\nexit 0\n").unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    d
}

#[test]
#[ignore = "runs only as the child of the other tests"]
fn sandboxed_child() {
    let Ok(case) = std::env::var(CASE) else {
        return;
    };
    let root = std::env::var("ROOT").map(PathBuf::from).unwrap_or_default();
    let parent: u32 = std::env::var("PARENT").unwrap().parse().unwrap();
    let port: u16 = std::env::var("PORT")
        .ok()
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    let mut rules = Rules::system();
    rules.read.push(root.join("allowed"));
    rules.list.push(root.join("listed"));
    rules.write.push(root.join("writable"));
    rules.network = !case.contains("no-network");
    let report = if case == "landlock-only-no-network" {
        landlock_rules::restrict(&rules, abi()).unwrap()
    } else {
        apply(&rules).unwrap()
    };
    println!("report {report:?}");
    let a = root.join("allowed");
    let w = root.join("writable");
    let o = root.join("outside");
    outcome("read-allowed", read(&a.join("file")));
    outcome("read-outside", read(&o.join("file")));
    outcome("list-outside", std::fs::read_dir(&o).map(drop));
    outcome(
        "list-listed",
        std::fs::read_dir(root.join("listed")).map(drop),
    );
    outcome("read-listed", read(&root.join("listed/file")));
    outcome("write-writable", write(&w.join("new")));
    outcome("write-allowed", write(&a.join("new")));
    outcome("write-outside", write(&o.join("new")));
    outcome("mkdir-outside", std::fs::create_dir(o.join("d")));
    outcome("delete-outside", std::fs::remove_file(o.join("file")));
    outcome(
        "exec-writable",
        Command::new(w.join("run.sh")).status().map(drop),
    );
    outcome("exec-system", Command::new("/bin/true").status().map(drop));
    outcome("read-own-proc", read(Path::new("/proc/self/status")));
    outcome(
        "read-parent-environ",
        read(&PathBuf::from(format!("/proc/{parent}/environ"))),
    );
    outcome("read-etc-passwd", read(Path::new("/etc/passwd")));
    outcome("read-etc-shadow", read(Path::new("/etc/shadow")));
    outcome("write-dev-null", write(Path::new("/dev/null")));
    outcome("signal-parent", kill(parent as i32, 0));
    if port != 0 {
        outcome(
            "tcp-connect",
            TcpStream::connect(("127.0.0.1", port)).map(drop),
        );
        outcome("tcp-bind", TcpListener::bind("127.0.0.1:0").map(drop));
        outcome(
            "udp-send",
            UdpSocket::bind("127.0.0.1:0")
                .and_then(|s| s.send_to(b"x", ("127.0.0.1", port)))
                .map(drop),
        );
        outcome(
            "unix-pair",
            std::os::unix::net::UnixStream::pair().map(drop),
        );
    }
}

fn kill(pid: i32, sig: i32) -> std::io::Result<()> {
    // SAFETY: kill(2) with a plain pid and signal number.
    if unsafe { libc::kill(pid, sig) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

fn env_for(d: &Path, port: u16) -> Vec<(&'static str, String)> {
    vec![
        ("ROOT", d.display().to_string()),
        ("PARENT", std::process::id().to_string()),
        ("PORT", port.to_string()),
    ]
}

const EACCES: &str = "denied 13";

#[test]
fn files_outside_the_rules_are_out_of_reach() {
    if !landlock_or_skip() {
        return;
    }
    let d = tree();
    let r = run_child("fs", &env_for(d.path(), 0));
    for ok in [
        "read-allowed",
        "list-listed",
        "write-writable",
        "exec-system",
        "read-own-proc",
        "read-etc-passwd",
        "write-dev-null",
    ] {
        assert_eq!(r[ok], "ok", "{ok}: {r:?}");
    }
    for denied in [
        "read-outside",
        "list-outside",
        "read-listed",
        "write-allowed",
        "write-outside",
        "mkdir-outside",
        "delete-outside",
        "exec-writable",
        "read-parent-environ",
        "read-etc-shadow",
    ] {
        assert_eq!(r[denied], EACCES, "{denied}: {r:?}");
    }
    // Nothing was changed outside the rules.
    assert!(d.path().join("outside/file").exists());
    assert!(!d.path().join("outside/new").exists());
    assert!(!d.path().join("allowed/new").exists());
    assert!(d.path().join("writable/new").exists());
    if abi() >= 6 {
        assert_eq!(r["signal-parent"], "denied 1", "EPERM: {r:?}");
    }
}

#[test]
fn network_off_refuses_tcp_and_udp_but_not_unix_sockets() {
    if !landlock_or_skip() {
        return;
    }
    if abi() < 4 {
        assert!(matches!(
            crate::check(false),
            Err(crate::SandboxError::NoNetworkRules { .. })
        ));
        return;
    }
    let d = tree();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let r = run_child("no-network", &env_for(d.path(), port));
    assert_eq!(r["tcp-connect"], EACCES, "{r:?}");
    assert_eq!(r["tcp-bind"], EACCES, "{r:?}");
    assert_eq!(r["udp-send"], EACCES, "{r:?}");
    assert_eq!(r["unix-pair"], "ok", "{r:?}");
    assert_eq!(r["read-allowed"], "ok", "{r:?}");
}

#[test]
fn landlock_alone_refuses_tcp_connect_and_bind() {
    if !landlock_or_skip() || abi() < 4 {
        return;
    }
    let d = tree();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let r = run_child("landlock-only-no-network", &env_for(d.path(), port));
    // The socket is created (no seccomp filter here); Landlock refuses the connect and bind.
    assert_eq!(r["tcp-connect"], EACCES, "{r:?}");
    assert_eq!(r["tcp-bind"], EACCES, "{r:?}");
    assert_eq!(
        r["udp-send"], "ok",
        "UDP is not Landlock's before ABI 10: {r:?}"
    );
}

#[test]
fn network_on_still_connects() {
    if !landlock_or_skip() {
        return;
    }
    let d = tree();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let r = run_child("network", &env_for(d.path(), port));
    assert_eq!(r["tcp-connect"], "ok", "{r:?}");
    assert_eq!(r["read-outside"], EACCES, "{r:?}");
}
