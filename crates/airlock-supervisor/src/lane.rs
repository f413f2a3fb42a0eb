//! The two lanes of a worker connection, usable from any thread.

use std::collections::VecDeque;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::Mutex;
use std::time::Duration;

use airlock_shm::{PoolConfig, PoolStats, borrow_all, recv_with_fds, send_with_fds};
use airlock_wire::{FrameDecoder, Message, Region, Side, encode_frame};

use crate::error::LaneError;
use crate::shm_state::ShmState;

const READ_CHUNK: usize = 64 << 10;

/// A framed Unix socket: one reader and one writer at a time, each behind its own lock.
pub(crate) struct Framed {
    sock: UnixStream,
    reader: Mutex<Reader>,
    writer: Mutex<Vec<u8>>,
}

struct Reader {
    decoder: FrameDecoder,
    fds: VecDeque<OwnedFd>,
    eof: bool,
}

impl Framed {
    pub fn new(sock: UnixStream) -> Self {
        Framed {
            sock,
            reader: Mutex::new(Reader {
                decoder: FrameDecoder::new(),
                fds: VecDeque::new(),
                eof: false,
            }),
            writer: Mutex::new(Vec::with_capacity(4096)),
        }
    }

    /// Writes `msgs` as consecutive frames; `fds` ride on the first byte.
    pub fn send(&self, msgs: &[&Message], fds: &[OwnedFd]) -> Result<(), LaneError> {
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
        mut absorb: impl FnMut(Message, &mut VecDeque<OwnedFd>) -> Result<Option<Message>, LaneError>,
    ) -> Result<Option<Message>, LaneError> {
        let mut r = self.reader.lock().unwrap_or_else(|p| p.into_inner());
        let r = &mut *r;
        loop {
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
            self.fill(r)?;
        }
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
        self.sock.set_read_timeout(t)
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
        let owed = {
            let mut shm = self.shm();
            if !shm.has_owed() {
                drop(shm);
                return self.framed.send(&[msg], &[]);
            }
            shm.take_owed()?
        };
        let mut msgs: Vec<&Message> = owed.frames.iter().collect();
        msgs.push(msg);
        self.framed.send(&msgs, &owed.fds)
    }

    /// The next call, reply or error from the peer; bookkeeping frames are applied on the way.
    pub fn recv(&self) -> Result<Option<Message>, LaneError> {
        self.framed.recv(|m, fds| self.shm().absorb(m, fds))
    }

    /// Leases `len` bytes of our pool for a value about to be sent.
    pub fn alloc(&self, len: u64) -> Result<Region, LaneError> {
        self.shm().alloc(len)
    }

    /// Copies `len` bytes from `src` into a region we leased and have not yet sent. The lock
    /// is not held during the copy: nobody else touches a region between lease and send.
    ///
    /// # Safety
    /// `src` must be readable for `len` bytes for the whole call.
    pub unsafe fn write(&self, region: Region, src: *const u8, len: u64) -> Result<(), LaneError> {
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

    pub fn recv_timeout(&self, t: Duration) -> Result<Option<Message>, LaneError> {
        self.framed.set_read_timeout(Some(t))?;
        let r = self.recv();
        self.framed.set_read_timeout(None)?;
        r
    }

    pub fn shutdown(&self) {
        self.framed.shutdown()
    }
}

/// Reads the first frame of a fresh connection.
pub(crate) fn recv_one(framed: &Framed) -> Result<Message, LaneError> {
    framed.recv(|m, _| Ok(Some(m)))?.ok_or(LaneError::Closed)
}
