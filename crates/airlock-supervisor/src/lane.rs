//! The two lanes of a worker connection, usable from any thread.
//!
//! A lane belongs to the process that opened it. A child forked by a pack inherits the socket
//! and a copy of the pool's bookkeeping; if it wrote a frame, or leased and filled a region of
//! the shared segments, it would corrupt the parent's exchange (a second reply, bytes
//! overwritten under the host). So every send, receive and lease checks the pid first, and a
//! forked child gets an error instead (counted as a [`Rejection::ForkedChild`]).

use std::collections::VecDeque;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::Mutex;
use std::time::Duration;

use airlock_shm::{PoolConfig, PoolStats, borrow_all, recv_with_fds, send_with_fds};
use airlock_wire::{FrameDecoder, Message, Region, Side, encode_frame};

use crate::error::LaneError;
use crate::rejections::{self, Rejection};
use crate::shm_state::ShmState;

const READ_CHUNK: usize = 64 << 10;

/// A framed Unix socket: one reader and one writer at a time, each behind its own lock.
pub(crate) struct Framed {
    sock: UnixStream,
    reader: Mutex<Reader>,
    writer: Mutex<Vec<u8>>,
    /// The process that opened the connection; nobody else may use it.
    owner: u32,
    /// The socket's receive timeout as last set, so that a wait with the same timeout as the
    /// last one costs no syscall.
    timeout: Mutex<Option<Duration>>,
}

struct Reader {
    decoder: FrameDecoder,
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
                decoder: FrameDecoder::new(),
                fds: VecDeque::new(),
                eof: false,
                held: None,
            }),
            writer: Mutex::new(Vec::with_capacity(4096)),
            owner: std::process::id(),
            timeout: Mutex::new(None),
        }
    }

    /// Refuses use from a process that inherited the socket by fork.
    fn check_owner(&self) -> Result<(), LaneError> {
        let me = std::process::id();
        if me == self.owner {
            return Ok(());
        }
        rejections::count(Rejection::ForkedChild);
        Err(LaneError::Protocol(format!(
            "this connection belongs to pid {}; pid {me}, a child it forked, may not use it",
            self.owner
        )))
    }

    /// Writes `msgs` as consecutive frames; `fds` ride on the first byte.
    pub fn send(&self, msgs: &[&Message], fds: &[OwnedFd]) -> Result<(), LaneError> {
        self.check_owner()?;
        let mut buf = self.writer.lock().unwrap_or_else(|p| p.into_inner());
        buf.clear();
        for m in msgs {
            encode_frame(m, &mut buf)?;
        }
        send_with_fds(self.sock.as_fd(), &buf, &borrow_all(fds))?;
        if buf.capacity() > 1 << 20 {
            *buf = Vec::with_capacity(4096);
        }
        Ok(())
    }

    pub fn send_one(&self, msg: &Message) -> Result<(), LaneError> {
        self.send(&[msg], &[])
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
        // Whatever the peer sent that we refuse is counted on the way out.
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
                    return Err(LaneError::Io(std::io::ErrorKind::TimedOut.into()));
                }
                other => other?,
            }
        })();
        if let Err(e) = &got {
            rejections::count_lane(e);
        }
        got
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
        while r.held.is_none() {
            let Some(msg) = r.decoder.next_message()? else {
                break;
            };
            r.held = absorb(msg, &mut r.fds)?;
        }
        Ok(())
    }

    /// One read from the socket into the decoder.
    fn fill(&self, r: &mut Reader) -> Result<(), LaneError> {
        let spare = r.decoder.spare(READ_CHUNK);
        let spare_len = spare.len();
        let mut fds = Vec::new();
        let n = match recv_with_fds(self.sock.as_fd(), spare, &mut fds) {
            Ok(n) => n,
            // Our own shutdown after the peer died looks like a reset; either way, the end.
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => 0,
            Err(e) => return Err(e.into()),
        };
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

/// Counters for leak checks and status.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LaneStats {
    pub pool: PoolStats,
    pub peer_segments: usize,
}

/// Calls, replies and everything about tensors that must stay in order with them.
pub struct CallLane {
    framed: Framed,
    shm: Mutex<ShmState>,
}

impl CallLane {
    pub(crate) fn from_framed(framed: Framed, side: Side, pool: PoolConfig) -> Self {
        CallLane {
            framed,
            shm: Mutex::new(ShmState::new(side, pool)),
        }
    }

    fn shm(&self) -> std::sync::MutexGuard<'_, ShmState> {
        self.shm.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Sends `msg`, preceded by whatever is owed to the peer.
    pub fn send(&self, msg: &Message) -> Result<(), LaneError> {
        let (owed, trailing) = {
            let mut shm = self.shm();
            let trailing = shm.take_deferred();
            if !shm.has_owed() && trailing.is_none() {
                drop(shm);
                self.framed.send(&[msg], &[])?;
                self.shm().mark_sent();
                return Ok(());
            }
            (shm.take_owed()?, trailing)
        };
        let mut msgs: Vec<&Message> = owed.frames.iter().collect();
        msgs.push(msg);
        msgs.extend(trailing.as_ref());
        self.framed.send(&msgs, &owed.fds)?;
        self.shm().mark_sent();
        Ok(())
    }

    /// The next call, reply or error from the peer; bookkeeping frames are applied on the way.
    pub fn recv(&self) -> Result<Option<Message>, LaneError> {
        self.framed.recv(|m, fds| self.shm().absorb(m, fds))
    }

    /// [`CallLane::recv`] that gives up after `timeout` without a byte, with an error of kind
    /// `TimedOut`. Waiting with the same timeout as the last time costs no extra syscall.
    pub fn recv_within(&self, timeout: Duration) -> Result<Option<Message>, LaneError> {
        self.framed
            .recv_within(|m, fds| self.shm().absorb(m, fds), Some(timeout))
    }

    /// Leases `len` bytes of our pool for a value about to be sent.
    pub fn alloc(&self, len: u64) -> Result<Region, LaneError> {
        self.framed.check_owner()?;
        // Releases that arrived behind the last reply may free the very region we want.
        self.framed
            .absorb_ready(|m, fds| self.shm().absorb(m, fds))?;
        self.shm().alloc(len)
    }

    /// Copies `len` bytes from `src` into a region we leased and have not yet sent. The lock
    /// is not held during the copy: nobody else touches a region between lease and send.
    ///
    /// # Safety
    /// `src` must be readable for `len` bytes for the whole call.
    pub unsafe fn write(&self, region: Region, src: *const u8, len: u64) -> Result<(), LaneError> {
        self.framed.check_owner()?;
        let dst = self.shm().region_ptr(region, len)?;
        // SAFETY: `dst` points into our mapping of a leased region at least `len` long;
        // the caller vouches for `src`.
        unsafe { airlock_shm::copy_nonoverlapping(src, dst, len as usize) };
        Ok(())
    }

    /// Returns an allocation that will not be sent after all.
    pub fn unalloc(&self, region: Region) {
        self.shm().unalloc(region)
    }

    /// We dropped our last view of a peer region; the peer may reuse it.
    pub fn release(&self, region: Region) {
        self.shm().queue_release(region)
    }

    /// Marks a peer region referenced in the frame being encoded: our release of it is held
    /// back until that frame is sent.
    pub fn pin_returned(&self, region: Region) {
        self.shm().pin_returned(region)
    }

    /// One more hold on our own `region`, about to be sent again without a copy.
    pub fn hold_own(&self, region: Region) -> Result<(), LaneError> {
        self.shm().hold_own(region)
    }

    /// Holds one of our own regions that the peer referenced back (released by `release`).
    pub fn acquire_returned(&self, region: Region) -> Result<(), LaneError> {
        self.shm().acquire_returned(region)
    }

    pub fn segment_fd(&self, side: Side, id: u32) -> Result<(OwnedFd, u64), LaneError> {
        self.shm().segment_fd(side, id)
    }

    pub fn take_unmapped(&self) -> Vec<(Side, u32)> {
        self.shm().take_unmapped()
    }

    pub fn peer_gone(&self) {
        self.shm().peer_gone()
    }

    pub fn stats(&self) -> LaneStats {
        let shm = self.shm();
        LaneStats {
            pool: shm.pool_stats(),
            peer_segments: shm.peer_segments(),
        }
    }

    pub fn shutdown(&self) {
        self.framed.shutdown()
    }
}

/// Heartbeats and commands that reach a worker even while its call lane is busy.
pub struct ControlLane {
    framed: Framed,
}

impl ControlLane {
    pub(crate) fn from_framed(framed: Framed) -> Self {
        ControlLane { framed }
    }

    pub fn send(&self, msg: &Message) -> Result<(), LaneError> {
        self.framed.send(&[msg], &[])
    }

    pub fn recv(&self) -> Result<Option<Message>, LaneError> {
        self.framed.recv(|m, _| Ok(Some(m)))
    }

    /// [`ControlLane::recv`] that gives up after `t` with an error of kind `TimedOut`.
    pub fn recv_timeout(&self, t: Duration) -> Result<Option<Message>, LaneError> {
        self.framed.recv_within(|m, _| Ok(Some(m)), Some(t))
    }

    pub fn shutdown(&self) {
        self.framed.shutdown()
    }
}

/// Reads the first frame of a fresh connection, waiting at most `timeout` (None: for ever).
pub(crate) fn recv_one(framed: &Framed, timeout: Option<Duration>) -> Result<Message, LaneError> {
    framed
        .recv_within(|m, _| Ok(Some(m)), timeout)?
        .ok_or(LaneError::Closed)
}
