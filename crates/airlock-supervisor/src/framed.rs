//! A framed Unix socket, usable from any thread.
//!
//! A lane belongs to the process that opened it. A child forked by a pack inherits the socket
//! and a copy of the pool's bookkeeping; if it wrote a frame, or leased and filled a region of
//! the shared segments, it would corrupt the parent's exchange (a second reply, bytes
//! overwritten under the host). So every send, receive and lease checks the pid first, and a
//! forked child gets an error instead (counted as a [`Rejection::ForkedChild`]).

use std::collections::VecDeque;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, TryLockError};
use std::time::{Duration, Instant};

use airlock_shm::{recv_with_fds, try_recv_with_fds};
use airlock_wire::{Message, Side};

use crate::error::LaneError;
use crate::guard::Guard;
use crate::outbox::{Outbox, timed_out};
use crate::rejections::{self, Rejection};
use crate::spin::{Budget, LaneStamps, SpinState};

const READ_CHUNK: usize = 64 << 10;

/// A framed Unix socket: one reader and one writer at a time, each behind its own lock.
pub(crate) struct Framed {
    sock: UnixStream,
    reader: Mutex<Reader>,
    writer: Mutex<Outbox>,
    /// The process that opened the connection; nobody else may use it.
    owner: u32,
    /// The socket's receive timeout as last set, so that a wait with the same timeout as the
    /// last one costs no syscall.
    timeout: Mutex<Option<Duration>>,
    /// The host's rule for refused input (see [`Guard`]) and this lane's name; unset in a
    /// worker and during the handshake, where every refusal is only counted.
    guard: OnceLock<(Arc<Guard>, &'static str)>,
    /// Whether a read asks without blocking for a while before it sleeps (call lanes only:
    /// [`crate::spin`]).
    spins: AtomicBool,
    /// How long the last read waited for its peer and what this lane's wake-ups cost
    /// ([`crate::spin::read`]).
    spin: SpinState,
    /// Where this side notes its receipts and sends and reads the peer's (call lanes with a
    /// shared page, ADR 0046): the stamps, our side, the peer's.
    stamps: OnceLock<(Arc<dyn LaneStamps>, Side, Side)>,
}

struct Reader {
    decoder: airlock_wire::FrameDecoder,
    fds: VecDeque<OwnedFd>,
    eof: bool,
    /// A message taken out by [`Framed::absorb_ready`] that was not bookkeeping.
    held: Option<Message>,
}

impl Framed {
    pub fn new(sock: UnixStream) -> Self {
        Framed {
            sock,
            reader: Mutex::new(Reader {
                decoder: airlock_wire::FrameDecoder::new(),
                fds: VecDeque::new(),
                eof: false,
                held: None,
            }),
            writer: Mutex::new(Outbox::default()),
            owner: airlock_shm::current_pid(),
            timeout: Mutex::new(None),
            guard: OnceLock::new(),
            spins: AtomicBool::new(false),
            spin: SpinState::default(),
            stamps: OnceLock::new(),
        }
    }

    /// Notes every receipt and send of this lane as `side`'s in `stamps`, and reads `peer`'s
    /// there to judge how long it took to answer a read that slept ([`crate::spin`]).
    pub fn stamp(&self, stamps: Arc<dyn LaneStamps>, side: Side, peer: Side) {
        let _ = self.stamps.set((stamps, side, peer));
    }

    /// Makes this lane's reads spin briefly before they sleep ([`crate::spin`]).
    pub fn spin_before_sleeping(&self) {
        self.spins.store(true, Ordering::Relaxed);
    }

    /// Puts this lane under `guard`'s rule.
    pub fn arm(&self, guard: Arc<Guard>, lane: &'static str) {
        let _ = self.guard.set((guard, lane));
    }

    /// The lane's name as armed ("call", "route", "control"); "call" before.
    pub fn label(&self) -> &'static str {
        self.guard.get().map_or("call", |(_, lane)| lane)
    }

    /// Counts `e` if it refuses the peer's input and, on a guarded lane, ends the peer;
    /// returns `e`.
    pub fn refuse(&self, e: LaneError) -> LaneError {
        match self.guard.get() {
            Some((g, lane)) => g.refuse(&e, lane),
            None => rejections::count_lane(&e),
        }
        e
    }

    /// What the guarded connection refused first.
    pub fn refusal(&self) -> Option<String> {
        self.guard.get().and_then(|(g, _)| g.refusal())
    }

    /// Refuses use from a process that inherited the socket by fork, and use of a connection
    /// that refused its peer's input.
    pub fn check_owner(&self) -> Result<(), LaneError> {
        if let Some((g, _)) = self.guard.get() {
            g.check()?;
        }
        let me = airlock_shm::current_pid();
        if me == self.owner {
            return Ok(());
        }
        rejections::count(Rejection::ForkedChild);
        Err(LaneError::Protocol(format!(
            "this connection belongs to pid {}; pid {me}, a child it forked, may not use it",
            self.owner
        )))
    }

    /// Writes `msgs` as consecutive frames, waiting as long as it takes; `fds` ride no later
    /// than the first of them.
    pub fn send(&self, msgs: &[&Message], fds: Vec<OwnedFd>) -> Result<(), LaneError> {
        self.send_within(msgs, fds, None)
    }

    pub fn send_one(&self, msg: &Message) -> Result<(), LaneError> {
        self.send(&[msg], Vec::new())
    }

    /// [`Framed::send`] that gives up after `timeout` with an error of kind `TimedOut`. The
    /// frames are queued then: what did not go yet goes with the next send or
    /// [`Framed::flush_within`], in order, so a timed-out frame is late, never lost or torn.
    /// (Queueing waits for the writer: every writer of a host's lane holds it for a bounded
    /// time.)
    pub fn send_within(
        &self,
        msgs: &[&Message],
        fds: Vec<OwnedFd>,
        timeout: Option<Duration>,
    ) -> Result<(), LaneError> {
        self.check_owner()?;
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut out = self.writer.lock().unwrap_or_else(|p| p.into_inner());
        out.queue(msgs, fds)?;
        self.note_send();
        out.flush(self.sock.as_fd(), deadline)
    }

    /// This lane's spin budget: the process's for a call lane, none for the others.
    fn budget(&self) -> Budget {
        if self.spins.load(Ordering::Relaxed) {
            crate::spin::budget()
        } else {
            Budget::Fixed(Duration::ZERO)
        }
    }

    /// What this lane knows about its waits.
    pub fn timing(&self) -> crate::spin::LaneTiming {
        let (spin_ns, wake_ns, last_wait_ns) = self.spin.snapshot(self.budget());
        let stamps = self.stamps.get().map(|(s, ..)| s);
        let last = |side| stamps.map(|s| s.last(side)).unwrap_or_default();
        crate::spin::LaneTiming {
            spin_ns,
            wake_ns,
            last_wait_ns,
            host: last(Side::Host),
            worker: last(Side::Worker),
        }
    }

    /// Notes that we send now: before the bytes go, so the peer never reads an older stamp
    /// with them.
    fn note_send(&self) {
        if let Some((stamps, side, _)) = self.stamps.get() {
            stamps.sent(*side, crate::spin::monotonic_ns());
        }
    }

    /// Carries on with frames queued by a send that timed out, for at most `timeout`.
    pub fn flush_within(&self, timeout: Duration) -> Result<(), LaneError> {
        self.check_owner()?;
        let deadline = Instant::now() + timeout;
        let mut out = self.lock_writer(deadline)?;
        self.note_send();
        out.flush(self.sock.as_fd(), Some(deadline))
    }

    /// The writer, waited for at most until `deadline`.
    fn lock_writer(&self, deadline: Instant) -> Result<MutexGuard<'_, Outbox>, LaneError> {
        loop {
            match self.writer.try_lock() {
                Ok(g) => return Ok(g),
                Err(TryLockError::Poisoned(p)) => return Ok(p.into_inner()),
                Err(TryLockError::WouldBlock) if Instant::now() >= deadline => {
                    return Err(timed_out());
                }
                Err(TryLockError::WouldBlock) => std::thread::sleep(Duration::from_millis(1)),
            }
        }
    }

    /// Reads the next message, passing each one to `absorb` first; returns the first message
    /// `absorb` hands back. `Ok(None)` at a clean end of stream.
    pub fn recv(
        &self,
        absorb: impl FnMut(Message, &mut VecDeque<OwnedFd>) -> Result<Option<Message>, LaneError>,
    ) -> Result<Option<Message>, LaneError> {
        self.recv_within(absorb, None)
    }

    /// [`Framed::recv`] that gives up after `timeout` without a byte with an error of kind
    /// `TimedOut`; a frame half read by then stays in the decoder for the next call. The wait
    /// is the socket's own receive timeout: one `recvmsg` per read, no `poll`.
    pub fn recv_within(
        &self,
        mut absorb: impl FnMut(Message, &mut VecDeque<OwnedFd>) -> Result<Option<Message>, LaneError>,
        timeout: Option<Duration>,
    ) -> Result<Option<Message>, LaneError> {
        self.check_owner()?;
        self.set_read_timeout(timeout.map(|t| t.max(Duration::from_millis(1))))?;
        let mut r = self.reader.lock().unwrap_or_else(|p| p.into_inner());
        let r = &mut *r;
        if let Some(msg) = r.held.take() {
            return Ok(Some(msg));
        }
        let got = (|| loop {
            if let Some(msg) = r.decoder.next_message()? {
                if let Some(msg) = absorb(msg, &mut r.fds)? {
                    return Ok(Some(msg));
                }
                continue;
            }
            if r.eof {
                r.decoder.finish()?;
                return Ok(None);
            }
            match self.fill(r) {
                Err(LaneError::Io(e)) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    return Err(timed_out());
                }
                other => other?,
            }
        })();
        // Whatever the peer sent that we refuse is counted (and, guarded, ends it) here.
        got.map_err(|e| self.refuse(e))
    }

    /// Applies the bookkeeping frames already buffered (releases that came right behind a
    /// reply), without reading the socket; the first other message is kept for the next
    /// `recv`. Skipped when another thread is reading.
    pub fn absorb_ready(
        &self,
        mut absorb: impl FnMut(Message, &mut VecDeque<OwnedFd>) -> Result<Option<Message>, LaneError>,
    ) -> Result<(), LaneError> {
        let Ok(mut r) = self.reader.try_lock() else {
            return Ok(());
        };
        let r = &mut *r;
        let absorbed = (|| {
            while r.held.is_none() {
                let Some(msg) = r.decoder.next_message()? else {
                    break;
                };
                r.held = absorb(msg, &mut r.fds)?;
            }
            Ok(())
        })();
        absorbed.map_err(|e| self.refuse(e))
    }

    /// One read from the socket into the decoder.
    fn fill(&self, r: &mut Reader) -> Result<(), LaneError> {
        let spare = r.decoder.spare(READ_CHUNK);
        let spare_len = spare.len();
        let mut fds = Vec::new();
        let budget = self.budget();
        let sock = self.sock.as_fd();
        let stamps = self.stamps.get();
        let peer = stamps.map(|(stamps, _, peer)| move || stamps.last(*peer));
        let peer = peer.as_ref().map(|f| f as &dyn Fn() -> (u64, u64));
        let got = crate::spin::read(budget, &self.spin, peer, |block| {
            if block {
                recv_with_fds(sock, &mut *spare, &mut fds)
            } else {
                try_recv_with_fds(sock, &mut *spare, &mut fds)
            }
        });
        let n = match got {
            Ok(n) => n,
            // Our own shutdown after the peer died looks like a reset; either way, the end.
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => 0,
            // More fds in one write than a sender of ours ever attaches.
            Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
                return Err(LaneError::Protocol(e.to_string()));
            }
            Err(e) => return Err(e.into()),
        };
        if n > 0
            && let Some((stamps, side, _)) = stamps
        {
            stamps.got(*side, crate::spin::monotonic_ns());
        }
        r.decoder.commit(n, spare_len);
        r.fds.extend(fds);
        if r.fds.len() > 64 {
            return Err(LaneError::Protocol("too many unclaimed fds".into()));
        }
        if n == 0 {
            r.eof = true;
        }
        Ok(())
    }

    pub fn shutdown(&self) {
        let _ = self.sock.shutdown(std::net::Shutdown::Both);
    }

    pub fn set_read_timeout(&self, t: Option<Duration>) -> std::io::Result<()> {
        let mut current = self.timeout.lock().unwrap_or_else(|p| p.into_inner());
        if *current != t {
            self.sock.set_read_timeout(t)?;
            *current = t;
        }
        Ok(())
    }
}

pub(crate) fn is_timeout(e: &LaneError) -> bool {
    matches!(e, LaneError::Io(io) if io.kind() == std::io::ErrorKind::TimedOut)
}

/// Reads the first frame of a fresh connection, waiting at most `timeout` (None: for ever).
pub(crate) fn recv_one(framed: &Framed, timeout: Option<Duration>) -> Result<Message, LaneError> {
    framed
        .recv_within(|m, _| Ok(Some(m)), timeout)?
        .ok_or(LaneError::Closed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::process::Command;

    fn frame_too_large() -> u64 {
        rejections::rejections()[Rejection::FrameTooLarge as usize].1
    }

    #[test]
    fn a_guarded_lane_counts_a_corrupt_frame_once_and_ends_its_peer() {
        let mut child = Command::new("sleep").arg("30").spawn().unwrap();
        let pid = child.id() as i32;
        let pidfd = rustix::process::pidfd_open(
            rustix::process::Pid::from_raw(pid).unwrap(),
            rustix::process::PidfdFlags::empty(),
        )
        .unwrap();
        let (ours, mut theirs) = UnixStream::pair().unwrap();
        let framed = Framed::new(ours);
        let heard = Arc::new(crate::liveness::Heard::new());
        framed.arm(
            Guard::ending(Arc::new(pidfd), pid, heard.clone()),
            "control",
        );
        theirs.write_all(b"\xff\xff\xff\x7f garbage").unwrap();
        let before = frame_too_large();
        let first = framed.recv_within(|m, _| Ok(Some(m)), Some(Duration::from_secs(5)));
        assert!(matches!(first, Err(LaneError::Wire(_))), "{first:?}");
        for _ in 0..4 {
            let again = framed.recv_within(|m, _| Ok(Some(m)), Some(Duration::from_secs(5)));
            assert!(matches!(again, Err(LaneError::Ended(_))), "{again:?}");
        }
        // No other test of this binary refuses an oversize frame.
        assert_eq!(frame_too_large(), before + 1, "counted once");
        assert!(framed.refusal().unwrap().contains("exceeds the limit"));
        let status = child.wait().unwrap();
        assert!(status.code().is_none(), "killed by a signal: {status:?}");
        assert!(
            heard
                .verdict()
                .unwrap()
                .contains("refused its input on the control lane")
        );
    }
}
