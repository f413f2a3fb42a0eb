//! Native floors for bench/run.py, in safe std-only Rust.
//!
//! `floor pingpong ITERS WARMUP`: a parent and a child process (this binary re-executed, the
//! socket passed as its stdin) bounce 64 B over a `socketpair(AF_UNIX, SOCK_STREAM)`; prints the
//! round-trip time of every timed iteration in ns. With a third argument `sync`, it first
//! prints `{"child": PID}` and waits for a line on stdin, so the harness can set the child's
//! CPU affinity (std has no API for that) before anything is timed.
//!
//! `floor memcpy BYTES REPS`: copies BYTES from one pre-faulted buffer into another REPS times
//! (one `copy_from_slice`, i.e. a single-threaded memcpy); prints each copy's time in ns.
//!
//! `floor memcpy-serve BYTES`: the same, but the buffers are faulted in once and each line
//! `N` read from stdin runs N copies and prints one result line (until EOF), so a harness can
//! interleave copies with its other cases without paying for the page faults again. A line
//! `N B` copies only the first B bytes (B <= BYTES), so one pair of buffers serves every size.
//!
//! Output is one line of JSON: `{"mode": ..., "ns": [...]}`.

use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::process::{Command, Stdio};
use std::time::Instant;

const MSG: usize = 64;

fn print_ns(mode: &str, extra: &str, ns: &[u64]) {
    let list: Vec<String> = ns.iter().map(u64::to_string).collect();
    println!(
        "{{\"mode\": \"{mode}\"{extra}, \"ns\": [{}]}}",
        list.join(", ")
    );
}

fn child_echo() -> std::io::Result<()> {
    // Our stdin is the child end of the socketpair; take our own handle on it (dup).
    let fd: OwnedFd = std::io::stdin().as_fd().try_clone_to_owned()?;
    let mut sock = UnixStream::from(fd);
    let mut buf = [0u8; MSG];
    loop {
        match sock.read_exact(&mut buf) {
            Ok(()) => sock.write_all(&buf)?,
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) => return Err(e),
        }
    }
}

fn pingpong(iters: usize, warmup: usize, sync: bool) -> std::io::Result<()> {
    let (mut ours, theirs) = UnixStream::pair()?;
    let exe = std::env::current_exe()?;
    let mut child = Command::new(exe)
        .arg("child")
        .stdin(Stdio::from(OwnedFd::from(theirs)))
        .stdout(Stdio::null())
        .spawn()?;
    if sync {
        println!("{{\"child\": {}}}", child.id());
        let mut go = String::new();
        std::io::stdin().read_line(&mut go)?;
    }
    let mut buf = [0x5au8; MSG];
    let mut ns = Vec::with_capacity(iters);
    for i in 0..warmup + iters {
        let t = Instant::now();
        ours.write_all(&buf)?;
        ours.read_exact(&mut buf)?;
        let d = t.elapsed().as_nanos() as u64;
        if i >= warmup {
            ns.push(d);
        }
    }
    drop(ours);
    child.wait()?;
    print_ns("pingpong", &format!(", \"bytes\": {MSG}"), &ns);
    Ok(())
}

/// Two buffers of `bytes`, both written in full, so no page fault lands in a timed copy.
fn buffers(bytes: usize) -> (Vec<u8>, Vec<u8>) {
    let src: Vec<u8> = (0..bytes).map(|i| i as u8).collect();
    let dst = vec![1u8; bytes];
    (src, dst)
}

fn copies(src: &[u8], dst: &mut [u8], reps: usize) {
    let mut ns = Vec::with_capacity(reps);
    for _ in 0..reps {
        let t = Instant::now();
        dst.copy_from_slice(src);
        ns.push(t.elapsed().as_nanos() as u64);
        std::hint::black_box(&mut *dst);
    }
    let mid = src.len() / 2;
    assert_eq!(dst[mid], src[mid]);
    print_ns("memcpy", &format!(", \"bytes\": {}", src.len()), &ns);
}

fn memcpy(bytes: usize, reps: usize) {
    let (src, mut dst) = buffers(bytes);
    copies(&src, &mut dst, reps);
}

fn memcpy_serve(bytes: usize) -> std::io::Result<()> {
    let (src, mut dst) = buffers(bytes);
    println!("{{\"mode\": \"ready\", \"bytes\": {bytes}}}");
    for line in std::io::stdin().lines() {
        let line = line?;
        let mut words = line.split_whitespace();
        let reps: usize = words.next().and_then(|w| w.parse().ok()).expect("a number of copies");
        let n: usize = words.next().map_or(bytes, |w| w.parse().expect("a byte count"));
        assert!(n <= bytes, "at most {bytes} bytes");
        copies(&src[..n], &mut dst[..n], reps);
    }
    Ok(())
}

fn arg(args: &[String], i: usize, default: usize) -> usize {
    args.get(i)
        .map_or(default, |s| s.parse().expect("a number"))
}

fn main() -> std::io::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("child") => child_echo(),
        Some("pingpong") => pingpong(
            arg(&args, 2, 10_000),
            arg(&args, 3, 1_000),
            args.get(4).is_some_and(|a| a == "sync"),
        ),
        Some("memcpy") => {
            memcpy(arg(&args, 2, 1 << 30), arg(&args, 3, 5));
            Ok(())
        }
        Some("memcpy-serve") => memcpy_serve(arg(&args, 2, 1 << 30)),
        _ => {
            eprintln!(
                "usage: floor pingpong [ITERS WARMUP [sync]] | floor memcpy [BYTES REPS] | floor memcpy-serve [BYTES]"
            );
            std::process::exit(2);
        }
    }
}
