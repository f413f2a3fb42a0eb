//! A seccomp filter that refuses new network sockets, for `network = false`.
//!
//! Landlock (before ABI 10) controls only TCP connect and bind; a process could still send UDP
//! (DNS tunnels, exfiltration) or, as root, open packet sockets. This filter makes
//! `socket(AF_INET | AF_INET6 | AF_PACKET, …)` fail with `EACCES`, refuses `io_uring_setup`
//! (io_uring can create sockets without the `socket` system call), and refuses system calls of
//! other ABIs (32-bit `socketcall`, x32) that would get around the check. Everything else is
//! allowed: it is a narrow filter, not a syscall allow-list. Installed with `TSYNC` so every
//! thread of the worker gets it.

#![cfg_attr(
    not(any(target_arch = "x86_64", target_arch = "aarch64")),
    allow(dead_code)
)]

use std::io;

#[cfg(target_arch = "x86_64")]
mod arch {
    pub const AUDIT_ARCH: u32 = 0xc000_003e; // AUDIT_ARCH_X86_64
    pub const NR_SOCKET: u32 = 41;
    pub const NR_IO_URING_SETUP: u32 = 425;
}

#[cfg(target_arch = "aarch64")]
mod arch {
    pub const AUDIT_ARCH: u32 = 0xc000_00b7; // AUDIT_ARCH_AARCH64
    pub const NR_SOCKET: u32 = 198;
    pub const NR_IO_URING_SETUP: u32 = 425;
}

const BPF_LD_W_ABS: u16 = 0x20;
const BPF_JEQ_K: u16 = 0x15;
const BPF_JGE_K: u16 = 0x35;
const BPF_RET_K: u16 = 0x06;
const RET_ALLOW: u32 = 0x7fff_0000;
const RET_ERRNO: u32 = 0x0005_0000;
/// x32 system calls carry this bit in their number.
const X32_SYSCALL_BIT: u32 = 0x4000_0000;

// Offsets in `struct seccomp_data`: nr, arch, instruction_pointer, args[6].
const OFF_NR: u32 = 0;
const OFF_ARCH: u32 = 4;
const OFF_ARG0: u32 = 16; // low 32 bits of args[0] (little-endian)

#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
fn stmt(code: u16, k: u32) -> libc::sock_filter {
    libc::sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    }
}

#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
fn jump(code: u16, k: u32, jt: u8, jf: u8) -> libc::sock_filter {
    libc::sock_filter { code, jt, jf, k }
}

#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
/// The program; jump offsets count from the next instruction, and every `deny` jump lands on
/// the last one.
fn program() -> Vec<libc::sock_filter> {
    let deny = RET_ERRNO | libc::EACCES as u32;
    vec![
        /* 0 */ stmt(BPF_LD_W_ABS, OFF_ARCH),
        /* 1 */ jump(BPF_JEQ_K, arch::AUDIT_ARCH, 0, 10),
        /* 2 */ stmt(BPF_LD_W_ABS, OFF_NR),
        /* 3 */ jump(BPF_JGE_K, X32_SYSCALL_BIT, 8, 0),
        /* 4 */ jump(BPF_JEQ_K, arch::NR_SOCKET, 2, 0),
        /* 5 */ jump(BPF_JEQ_K, arch::NR_IO_URING_SETUP, 6, 0),
        /* 6 */ stmt(BPF_RET_K, RET_ALLOW),
        /* 7 */ stmt(BPF_LD_W_ABS, OFF_ARG0),
        /* 8 */ jump(BPF_JEQ_K, libc::AF_INET as u32, 3, 0),
        /* 9 */ jump(BPF_JEQ_K, libc::AF_INET6 as u32, 2, 0),
        /* 10 */ jump(BPF_JEQ_K, libc::AF_PACKET as u32, 1, 0),
        /* 11 */ stmt(BPF_RET_K, RET_ALLOW),
        /* 12 */ stmt(BPF_RET_K, deny),
    ]
}

/// Other architectures: no filter, so `network = false` is refused rather than half-enforced.
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
pub(crate) fn refuse_network_sockets() -> io::Result<()> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "no filter for this CPU architecture",
    ))
}

#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
pub(crate) fn refuse_network_sockets() -> io::Result<()> {
    let filter = program();
    let prog = libc::sock_fprog {
        len: filter.len() as u16,
        filter: filter.as_ptr() as *mut libc::sock_filter,
    };
    // SAFETY: plain prctl/seccomp calls; `prog` points at `filter`, alive for the call.
    unsafe {
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
            return Err(io::Error::last_os_error());
        }
        let r = libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            libc::SECCOMP_FILTER_FLAG_TSYNC,
            &prog as *const libc::sock_fprog,
        );
        match r {
            0 => Ok(()),
            r if r < 0 => Err(io::Error::last_os_error()),
            tid => Err(io::Error::other(format!(
                "thread {tid} could not take the filter"
            ))),
        }
    }
}

#[cfg(all(test, any(target_arch = "x86_64", target_arch = "aarch64")))]
mod tests {
    use super::*;

    #[test]
    fn every_jump_lands_inside_the_program() {
        let p = program();
        let last = p.len() - 1;
        for (i, ins) in p.iter().enumerate() {
            if ins.code & 0x07 == 0x05 {
                // a jump: both targets must be in range, and deny jumps hit the last `ret`
                for off in [ins.jt, ins.jf] {
                    assert!(i + 1 + (off as usize) <= last, "instruction {i}");
                }
            }
        }
        assert_eq!(p[last].k, RET_ERRNO | libc::EACCES as u32);
        assert_eq!(p[1].jf as usize + 2, last);
        assert_eq!(p[3].jt as usize + 4, last);
        assert_eq!(p[5].jt as usize + 6, last);
        assert_eq!(p[4].jt as usize + 5, 7, "socket goes to the family check");
        for (i, family_check) in p.iter().enumerate().take(11).skip(8) {
            assert_eq!(family_check.jt as usize + i + 1, last);
        }
    }
}
