//! Sending bytes with file descriptors attached (SCM_RIGHTS) over a stream socket.

use std::io::{IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::io::Errno;
use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, ReturnFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};

/// Most fds accepted with one `recvmsg`; a sender attaches at most this many to one write (the
/// kernel never merges two fd-carrying writes into one read). More in one write is refused
/// with an error of kind `InvalidData`.
pub const MAX_FDS_PER_READ: usize = 8;

/// Writes all of `bytes`, attaching `fds` to the first byte. Blocks until written.
pub fn send_with_fds(
    sock: BorrowedFd<'_>,
    bytes: &[u8],
    fds: &[BorrowedFd<'_>],
) -> std::io::Result<()> {
    let mut sent = 0;
    if !fds.is_empty() {
        sent = send_some(sock, bytes, fds, SendFlags::NOSIGNAL)?;
    }
    while sent < bytes.len() {
        sent += retry(|| rustix::net::send(sock, &bytes[sent..], SendFlags::NOSIGNAL))?;
    }
    Ok(())
}

/// One write that never blocks: as much of `bytes` as the socket takes now, with `fds` on the
/// first byte. Returns how many bytes went; an error of kind `WouldBlock` when none could.
pub fn try_send_with_fds(
    sock: BorrowedFd<'_>,
    bytes: &[u8],
    fds: &[BorrowedFd<'_>],
) -> std::io::Result<usize> {
    send_some(sock, bytes, fds, SendFlags::NOSIGNAL | SendFlags::DONTWAIT)
}

fn send_some(
    sock: BorrowedFd<'_>,
    bytes: &[u8],
    fds: &[BorrowedFd<'_>],
    flags: SendFlags,
) -> std::io::Result<usize> {
    if fds.is_empty() {
        return retry(|| rustix::net::send(sock, bytes, flags));
    }
    let mut space = vec![MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(fds.len()))];
    let mut cmsg = SendAncillaryBuffer::new(&mut space);
    if !cmsg.push(SendAncillaryMessage::ScmRights(fds)) {
        return Err(std::io::Error::other("too many fds for one message"));
    }
    retry(|| rustix::net::sendmsg(sock, &[IoSlice::new(bytes)], &mut cmsg, flags))
}

/// Reads what is available (at least one byte, blocking) into `buf`, appending any received fds
/// to `fds`. Returns 0 at end of stream.
pub fn recv_with_fds(
    sock: BorrowedFd<'_>,
    buf: &mut [u8],
    fds: &mut Vec<OwnedFd>,
) -> std::io::Result<usize> {
    recv_flags(sock, buf, fds, RecvFlags::CMSG_CLOEXEC)
}

/// [`recv_with_fds`] that never blocks: an error of kind `WouldBlock` when nothing is there.
pub fn try_recv_with_fds(
    sock: BorrowedFd<'_>,
    buf: &mut [u8],
    fds: &mut Vec<OwnedFd>,
) -> std::io::Result<usize> {
    recv_flags(
        sock,
        buf,
        fds,
        RecvFlags::CMSG_CLOEXEC | RecvFlags::DONTWAIT,
    )
}

fn recv_flags(
    sock: BorrowedFd<'_>,
    buf: &mut [u8],
    fds: &mut Vec<OwnedFd>,
    flags: RecvFlags,
) -> std::io::Result<usize> {
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS_PER_READ))];
    let mut cmsg = RecvAncillaryBuffer::new(&mut space);
    let msg = retry(|| rustix::net::recvmsg(sock, &mut [IoSliceMut::new(buf)], &mut cmsg, flags))?;
    for m in cmsg.drain() {
        if let RecvAncillaryMessage::ScmRights(received) = m {
            fds.extend(received);
        }
    }
    if msg.flags.contains(ReturnFlags::CTRUNC) {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("peer sent more than {MAX_FDS_PER_READ} file descriptors in one write"),
        ));
    }
    Ok(msg.bytes)
}

fn retry<T>(mut f: impl FnMut() -> Result<T, Errno>) -> std::io::Result<T> {
    loop {
        match f() {
            Err(Errno::INTR) => continue,
            r => return r.map_err(Into::into),
        }
    }
}

/// Borrows a set of owned fds for [`send_with_fds`].
pub fn borrow_all(fds: &[OwnedFd]) -> Vec<BorrowedFd<'_>> {
    fds.iter().map(|f| f.as_fd()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::segment::Segment;
    use std::os::unix::net::UnixStream;

    #[test]
    fn fds_arrive_with_their_bytes_and_later_bytes_do_not_merge() {
        let (a, b) = UnixStream::pair().unwrap();
        let seg = Segment::create("airlock-test", 4096).unwrap();
        send_with_fds(a.as_fd(), b"first", &[seg.fd()]).unwrap();
        send_with_fds(a.as_fd(), b"second", &[]).unwrap();
        let mut fds = Vec::new();
        let mut buf = [0u8; 64];
        let n = recv_with_fds(b.as_fd(), &mut buf, &mut fds).unwrap();
        assert_eq!(&buf[..n], b"first");
        assert_eq!(fds.len(), 1);
        let adopted = Segment::adopt(fds.pop().unwrap(), 4096).unwrap();
        assert_eq!(adopted.len(), 4096);
        let n = recv_with_fds(b.as_fd(), &mut buf, &mut fds).unwrap();
        assert_eq!(&buf[..n], b"second");
        drop(a);
        assert_eq!(recv_with_fds(b.as_fd(), &mut buf, &mut fds).unwrap(), 0);
    }
}
