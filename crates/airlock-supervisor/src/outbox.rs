//! The sending half of a lane: frames queued in order, written without ever blocking for
//! longer than the caller allows.
//!
//! A frame can be 64 MiB and a socket buffer holds a few hundred KiB, so a peer that stops
//! reading (a worker stuck in C code, or a hostile one) would hold a blocking `send` for ever,
//! and with it the caller, who could then neither see its deadline nor an interrupt. Every
//! write here is non-blocking, and the wait for room is a `poll` bounded by the caller's
//! deadline: at the deadline the send returns `TimedOut` with the rest of its bytes still
//! queued, and the next send or flush carries on from there. A frame is never dropped half
//! way, so the lane stays in step whatever the caller does in between (the host looks at its
//! interrupt sources, as it does between timed-out reads).

use std::collections::VecDeque;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::time::{Duration, Instant};

use airlock_shm::{MAX_FDS_PER_READ, try_send_with_fds};
use airlock_wire::{Message, encode_frame};
use rustix::event::{PollFd, PollFlags, Timespec};

use crate::error::LaneError;

/// Bytes queued for the peer, and the fds that ride on them.
#[derive(Default)]
pub(crate) struct Outbox {
    buf: Vec<u8>,
    sent: usize,
    /// Fds not yet sent; each goes no later than the first byte of the frame announcing it.
    fds: VecDeque<OwnedFd>,
    /// Bytes ever queued: where the next frame starts in the stream (a mail says how far the
    /// reader must have read the socket before it, ADR 0061).
    total: u64,
}

pub(crate) fn timed_out() -> LaneError {
    LaneError::Io(std::io::ErrorKind::TimedOut.into())
}

impl Outbox {
    /// Appends `msgs` as consecutive frames; nothing is queued if one cannot be encoded.
    pub fn queue(&mut self, msgs: &[&Message], fds: Vec<OwnedFd>) -> Result<(), LaneError> {
        let mark = self.buf.len();
        for m in msgs {
            if let Err(e) = encode_frame(m, &mut self.buf) {
                self.buf.truncate(mark);
                return Err(e.into());
            }
        }
        self.fds.extend(fds);
        self.total += (self.buf.len() - mark) as u64;
        Ok(())
    }

    /// The bytes queued and not yet written.
    pub fn unsent(&self) -> &[u8] {
        &self.buf[self.sent..]
    }

    /// Takes back the bytes queued and not yet written (they went as a mail, ADR 0061).
    pub fn unqueue(&mut self) {
        self.total -= (self.buf.len() - self.sent) as u64;
        self.buf.truncate(self.sent);
    }

    /// Bytes ever queued (see the field).
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Whether bytes are queued that the peer has not taken yet.
    pub fn pending(&self) -> bool {
        self.sent < self.buf.len()
    }

    /// Writes what is queued; waits for room until `deadline` (None: as long as it takes),
    /// then returns `TimedOut` with the rest still queued.
    /// `before_wait` runs before each wait for room: a reader that sleeps where only a bell
    /// reaches it (ADR 0061) must hear that bytes are there before we wait for it to take them.
    pub fn flush(
        &mut self,
        sock: BorrowedFd<'_>,
        deadline: Option<Instant>,
        before_wait: &dyn Fn(),
    ) -> Result<(), LaneError> {
        while self.pending() {
            // At most one read's worth of fds per write; with more waiting, the write is one
            // byte, so the next batch rides on the next byte.
            let nfds = self.fds.len().min(MAX_FDS_PER_READ);
            let end = if self.fds.len() > nfds {
                self.sent + 1
            } else {
                self.buf.len()
            };
            let fds: Vec<BorrowedFd<'_>> = self.fds.iter().take(nfds).map(|f| f.as_fd()).collect();
            match try_send_with_fds(sock, &self.buf[self.sent..end], &fds) {
                Ok(n) => {
                    drop(fds);
                    self.sent += n;
                    self.fds.drain(..nfds);
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    drop(fds);
                    before_wait();
                    wait_writable(sock, deadline)?;
                }
                Err(e) => return Err(e.into()),
            }
        }
        if !self.fds.is_empty() {
            return Err(LaneError::Protocol(format!(
                "{} fds queued without a frame to carry them",
                self.fds.len()
            )));
        }
        self.buf.clear();
        self.sent = 0;
        if self.buf.capacity() > 1 << 20 {
            self.buf = Vec::with_capacity(4096);
        }
        Ok(())
    }
}

/// Waits until `sock` has room (or is broken: the next write says how), at most until
/// `deadline`.
fn wait_writable(sock: BorrowedFd<'_>, deadline: Option<Instant>) -> Result<(), LaneError> {
    loop {
        let ts = match deadline {
            None => None,
            Some(d) => {
                let left = d.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(timed_out());
                }
                Some(timespec(left))
            }
        };
        let mut fds = [PollFd::new(&sock, PollFlags::OUT)];
        match rustix::event::poll(&mut fds, ts.as_ref()) {
            Ok(n) if n > 0 => return Ok(()),
            Ok(_) | Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(LaneError::Io(e.into())),
        }
    }
}

fn timespec(d: Duration) -> Timespec {
    Timespec {
        tv_sec: d.as_secs() as i64,
        tv_nsec: d.subsec_nanos() as i64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::os::unix::net::UnixStream;

    #[test]
    fn a_send_to_a_peer_that_does_not_read_times_out_and_resumes_in_step() {
        let (a, mut b) = UnixStream::pair().unwrap();
        let mut out = Outbox::default();
        let big = Message::Event {
            id: 1,
            topic: "x".into(),
            payload: airlock_wire::Value::Bytes(vec![7; 8 << 20]),
        };
        out.queue(&[&big], Vec::new()).unwrap();
        let start = Instant::now();
        let deadline = Some(start + Duration::from_millis(50));
        let e = out.flush(a.as_fd(), deadline, &|| ()).unwrap_err();
        assert!(matches!(&e, LaneError::Io(io) if io.kind() == std::io::ErrorKind::TimedOut));
        assert!(
            start.elapsed() < Duration::from_secs(2),
            "bounded by the deadline"
        );
        assert!(out.pending(), "the rest stays queued");
        // The peer starts reading: the frame completes, whole and in order.
        let reader = std::thread::spawn(move || {
            let mut got = Vec::new();
            b.read_to_end(&mut got).unwrap();
            got
        });
        out.queue(&[&Message::Shutdown], Vec::new()).unwrap();
        out.flush(a.as_fd(), None, &|| ()).unwrap();
        drop(a);
        let got = reader.join().unwrap();
        let mut dec = airlock_wire::FrameDecoder::new();
        let spare = dec.spare(got.len());
        let n = spare.len();
        spare[..got.len()].copy_from_slice(&got);
        dec.commit(got.len(), n);
        assert_eq!(dec.next_message().unwrap(), Some(big));
        assert_eq!(dec.next_message().unwrap(), Some(Message::Shutdown));
    }
}
