use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::time::Instant;

fn pin() { unsafe { let mut s: libc::cpu_set_t = std::mem::zeroed(); libc::CPU_SET(0, &mut s); libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &s); } }

fn recv_nb(fd: i32, buf: &mut [u8], block: bool) -> isize {
    let mut iov = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
    let mut cmsg = [0u8; 64];
    let mut m: libc::msghdr = unsafe { std::mem::zeroed() };
    m.msg_iov = &mut iov; m.msg_iovlen = 1; m.msg_control = cmsg.as_mut_ptr().cast(); m.msg_controllen = cmsg.len();
    unsafe { libc::recvmsg(fd, &mut m, if block { 0 } else { libc::MSG_DONTWAIT } | libc::MSG_CMSG_CLOEXEC) }
}
fn send(fd: i32, buf: &[u8]) { unsafe { libc::send(fd, buf.as_ptr().cast(), buf.len(), libc::MSG_NOSIGNAL); } }

fn side(fd: i32, mode: &str, n: usize, first: bool) -> Vec<u64> {
    let mut buf = [0u8; 64];
    let mut out = Vec::with_capacity(n);
    let rd = |buf: &mut [u8]| {
        match mode {
            "block" => { recv_nb(fd, buf, true); }
            "spin" => loop { if recv_nb(fd, buf, false) > 0 { break; } unsafe { libc::sched_yield(); } },
            "yieldfirst" => loop { unsafe { libc::sched_yield(); } if recv_nb(fd, buf, false) > 0 { break; } },
            _ => panic!(),
        }
    };
    for _ in 0..n {
        let t = Instant::now();
        if first { send(fd, &buf); rd(&mut buf); } else { rd(&mut buf); send(fd, &buf); }
        out.push(t.elapsed().as_nanos() as u64);
    }
    out
}

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let mode = a[1].clone();
    let n: usize = 200_000;
    pin();
    let (x, y) = UnixStream::pair().unwrap();
    let pid = unsafe { libc::fork() };
    if pid == 0 { drop(x); pin(); side(y.as_raw_fd(), &mode, n + 20000, false); std::process::exit(0); }
    drop(y);
    let mut v = side(x.as_raw_fd(), &mode, n + 20000, true);
    let mut v = v.split_off(20000);
    v.sort();
    println!("{mode}: p50 {:.2} us p10 {:.2}", v[v.len()/2] as f64 / 1000.0, v[v.len()/10] as f64 / 1000.0);
}
