use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Instant;

fn pin(cpu: usize) { unsafe { let mut s: libc::cpu_set_t = std::mem::zeroed(); libc::CPU_SET(cpu, &mut s); libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &s); } }

fn recv(fd: i32, buf: &mut [u8]) -> isize {
    let mut iov = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
    let mut cmsg = [0u8; 64];
    let mut m: libc::msghdr = unsafe { std::mem::zeroed() };
    m.msg_iov = &mut iov; m.msg_iovlen = 1; m.msg_control = cmsg.as_mut_ptr().cast(); m.msg_controllen = cmsg.len();
    unsafe { libc::recvmsg(fd, &mut m, libc::MSG_CMSG_CLOEXEC) }
}
fn send(fd: i32, buf: &[u8]) { unsafe { libc::send(fd, buf.as_ptr().cast(), buf.len(), libc::MSG_NOSIGNAL); } }

fn fwait(a: &AtomicU32, v: u32) { unsafe { libc::syscall(libc::SYS_futex, a.as_ptr(), libc::FUTEX_WAIT, v, std::ptr::null::<libc::timespec>()); } }
fn fwake(a: &AtomicU32) { unsafe { libc::syscall(libc::SYS_futex, a.as_ptr(), libc::FUTEX_WAKE, 1); } }

fn post(seq: &AtomicU32, peerw: &AtomicU32, v: u32) { seq.store(v, Ordering::SeqCst); if peerw.load(Ordering::SeqCst) != 0 { fwake(seq); } }
fn wait_until(seq: &AtomicU32, me: &AtomicU32, v: u32, spin: u32) {
    let mut k = 0;
    loop {
        if seq.load(Ordering::Acquire) == v { return; }
        if k < spin { k += 1; unsafe { libc::sched_yield(); } continue; }
        me.store(1, Ordering::SeqCst);
        let cur = seq.load(Ordering::SeqCst);
        if cur != v { fwait(seq, cur); }
        me.store(0, Ordering::SeqCst);
    }
}
fn fside(seq: &AtomicU32, me: &AtomicU32, peerw: &AtomicU32, n: usize, first: bool, spin: u32) -> Vec<u64> {
    let mut out = Vec::with_capacity(n);
    for i in 0..n as u32 {
        let t = Instant::now();
        if first { post(seq, peerw, 2*i+1); wait_until(seq, me, 2*i+2, spin); }
        else { wait_until(seq, me, 2*i+1, spin); post(seq, peerw, 2*i+2); }
        out.push(t.elapsed().as_nanos() as u64);
    }
    out
}

fn recv_nb(fd: i32, buf: &mut [u8]) -> isize {
    let mut iov = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
    let mut cmsg = [0u8; 64];
    let mut m: libc::msghdr = unsafe { std::mem::zeroed() };
    m.msg_iov = &mut iov; m.msg_iovlen = 1; m.msg_control = cmsg.as_mut_ptr().cast(); m.msg_controllen = cmsg.len();
    unsafe { libc::recvmsg(fd, &mut m, libc::MSG_CMSG_CLOEXEC | libc::MSG_DONTWAIT) }
}
fn dside(fd: i32, seq: &AtomicU32, me: &AtomicU32, peerw: &AtomicU32, n: usize, first: bool) -> Vec<u64> {
    let mut out = Vec::with_capacity(n);
    let mut buf = [0u8; 64];
    for i in 0..n as u32 {
        let t = Instant::now();
        if first { send(fd, &buf); post(seq, peerw, 2*i+1); wait_until(seq, me, 2*i+2, 0); assert!(recv_nb(fd, &mut buf) > 0); }
        else { wait_until(seq, me, 2*i+1, 0); assert!(recv_nb(fd, &mut buf) > 0); send(fd, &buf); post(seq, peerw, 2*i+2); }
        out.push(t.elapsed().as_nanos() as u64);
    }
    out
}
fn side(fd: i32, n: usize, first: bool) -> Vec<u64> {
    let mut buf = [0u8; 64];
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        if first { send(fd, &buf); recv(fd, &mut buf); } else { recv(fd, &mut buf); send(fd, &buf); }
        out.push(t.elapsed().as_nanos() as u64);
    }
    out
}

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let mode = a[1].clone();
    let cpus: usize = a.get(2).map(|s| s.parse().unwrap()).unwrap_or(1);
    let n: usize = 200_000;
    pin(0);
    let mem = unsafe { libc::mmap(std::ptr::null_mut(), 4096, libc::PROT_READ|libc::PROT_WRITE, libc::MAP_SHARED|libc::MAP_ANONYMOUS, -1, 0) } as *mut AtomicU32;
    let seq = unsafe { &*mem }; let waiting_a = unsafe { &*mem.add(16) }; let waiting_b = unsafe { &*mem.add(32) };
    let _ = waiting_b;
    let (x, y) = UnixStream::pair().unwrap();
    let pid = unsafe { libc::fork() };
    let spin: u32 = if mode == "futexspin" { 20 } else { 0 };
    if pid == 0 { drop(x); pin(if cpus == 2 {1} else {0});
        if mode == "block" { side(y.as_raw_fd(), n + 20000, false); } else if mode == "doorbell" { dside(y.as_raw_fd(), seq, waiting_b, waiting_a, n+20000, false); } else { fside(seq, waiting_b, waiting_a, n+20000, false, spin); }
        std::process::exit(0); }
    drop(y);
    let v = if mode == "block" { side(x.as_raw_fd(), n + 20000, true) } else if mode == "doorbell" { dside(x.as_raw_fd(), seq, waiting_a, waiting_b, n+20000, true) } else { fside(seq, waiting_a, waiting_b, n+20000, true, spin) };
    let mut v = v; let mut v = v.split_off(20000);
    v.sort();
    println!("{mode} cpus={cpus}: p50 {:.2} us p10 {:.2} p90 {:.2}", v[v.len()/2] as f64 / 1000.0, v[v.len()/10] as f64 / 1000.0, v[v.len()*9/10] as f64 / 1000.0);
}
