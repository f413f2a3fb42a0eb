//! The lanes of a worker connection, usable from any thread: calls and everything about
//! tensors on a call lane (two of them: the node calls' and the HTTP routes', ADR 0055),
//! heartbeats and commands on the control lane. All are [`Framed`] sockets; the node-call
//! lane's small frames go by mailbox once [`CallLane::attach_page`] shares the worker's page
//! (ADR 0061).

use std::collections::VecDeque;
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use airlock_shm::{PoolConfig, PoolStats};
use airlock_wire::{Message, Region, Side};

use crate::error::LaneError;
use crate::framed::{Framed, is_timeout};
use crate::guard::Guard;
use crate::shm_state::ShmState;
use crate::signal_page::SignalPage;
use crate::spin::LaneTiming;

/// Counters for leak checks and status.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LaneStats {
    pub pool: PoolStats,
    pub peer_segments: usize,
}

/// A block of our pool leased by [`CallLane::alloc_born`].
#[derive(Debug, Clone, Copy)]
pub struct Birth {
    pub region: Region,
    /// Our address of the region.
    pub ptr: *mut u8,
    /// Our mapping of the region's segment: `[start, start + len)`.
    pub segment_start: *mut u8,
    pub segment_len: u64,
}

/// The pool of a route or events lane (`lane`), after its call lane's `pool`: its own memfd
/// names, and no idle segment kept, since only a request or response body over 1 MiB, or a
/// preview, ever needs one.
pub(crate) fn side_pool(pool: &PoolConfig, lane: &str) -> PoolConfig {
    PoolConfig {
        name: format!("{}-{lane}", pool.name),
        keep_idle: 0,
        ..pool.clone()
    }
}

/// Calls, replies and everything about tensors that must stay in order with them.
pub struct CallLane {
    framed: Framed,
    shm: Mutex<ShmState>,
}

impl CallLane {
    pub(crate) fn from_framed(framed: Framed, side: Side, pool: PoolConfig) -> Self {
        framed.spin_before_sleeping();
        CallLane {
            framed,
            shm: Mutex::new(ShmState::new(side, pool)),
        }
    }

    /// Ends the worker on what this lane refuses; `label` names the lane in the verdict and
    /// in errors ("call" or "route").
    pub(crate) fn arm(&self, guard: Arc<Guard>, label: &'static str) {
        self.framed.arm(guard, label)
    }

    /// "call" or "route" (in the host, as armed).
    pub fn label(&self) -> &'static str {
        self.framed.label()
    }

    /// Shares the worker's page with the peer: this side's receipts and sends are noted there
    /// and the peer's read, so a read that slept judges the peer by how long it took to
    /// answer, not by when we woke (ADR 0046); and small frames travel through its mailboxes
    /// instead of the socket (ADR 0061).
    pub fn attach_page(&self, page: Arc<SignalPage>) {
        let (side, peer) = {
            let shm = self.shm();
            (shm.side(), shm.peer_side())
        };
        self.framed.stamp(page.clone(), side, peer);
        if crate::mailbox::enabled(std::env::var(crate::mailbox::MAIL_ENV).ok().as_deref()) {
            self.framed.open_mail(page, side, peer);
        }
    }

    fn shm(&self) -> std::sync::MutexGuard<'_, ShmState> {
        self.shm.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Sends `msg`, preceded by whatever is owed to the peer, waiting as long as it takes.
    pub fn send(&self, msg: &Message) -> Result<(), LaneError> {
        self.send_within(msg, None)
    }

    /// [`CallLane::send`] that returns `TimedOut` after `timeout` with the rest of the frame
    /// queued: [`CallLane::flush_within`] carries on (see [`Framed::send_within`]).
    pub fn send_within(&self, msg: &Message, timeout: Option<Duration>) -> Result<(), LaneError> {
        let (owed, trailing) = {
            let mut shm = self.shm();
            let trailing = shm.take_deferred();
            if !shm.has_owed() && trailing.is_none() {
                drop(shm);
                return self.sent(self.framed.send_within(&[msg], Vec::new(), timeout));
            }
            (shm.take_owed()?, trailing)
        };
        let mut msgs: Vec<&Message> = owed.frames.iter().collect();
        msgs.push(msg);
        msgs.extend(trailing.as_ref());
        self.sent(self.framed.send_within(&msgs, owed.fds, timeout))
    }

    /// After a send: once its frames are queued (sent, or timed out with the rest queued),
    /// every lease before them is the peer's to release.
    fn sent(&self, r: Result<(), LaneError>) -> Result<(), LaneError> {
        if r.as_ref().is_ok() || r.as_ref().is_err_and(is_timeout) {
            self.shm().mark_sent();
        }
        r
    }

    /// Sends what is owed to the peer (releases, retirements), if anything: for a lane on which
    /// this side only reads (the host's events lane), whose peer takes them at its next lease.
    pub fn send_owed(&self) -> Result<(), LaneError> {
        let owed = {
            let mut shm = self.shm();
            if !shm.has_owed() {
                return Ok(());
            }
            shm.take_owed()?
        };
        let msgs: Vec<&Message> = owed.frames.iter().collect();
        self.sent(self.framed.send_within(&msgs, owed.fds, None))
    }

    /// Carries on with a send that timed out, for at most `timeout`.
    pub fn flush_within(&self, timeout: Duration) -> Result<(), LaneError> {
        self.framed.flush_within(timeout)
    }

    /// Applies a bookkeeping frame. Whatever the peer's segments and releases fail on is the
    /// peer's doing (a regular file or an unsealed memfd for a segment, a forged release).
    fn absorb(
        &self,
        m: Message,
        fds: &mut VecDeque<OwnedFd>,
    ) -> Result<Option<Message>, LaneError> {
        self.shm().absorb(m, fds).map_err(|e| match e {
            LaneError::Shm(e) => LaneError::Protocol(format!("refused shared memory: {e}")),
            e => e,
        })
    }

    /// The next call, reply or error from the peer; bookkeeping frames are applied on the way.
    pub fn recv(&self) -> Result<Option<Message>, LaneError> {
        self.framed.recv(|m, fds| self.absorb(m, fds))
    }

    /// [`CallLane::recv`] that gives up after `timeout` without a byte, with an error of kind
    /// `TimedOut`. Waiting with the same timeout as the last time costs no extra syscall.
    pub fn recv_within(&self, timeout: Duration) -> Result<Option<Message>, LaneError> {
        self.framed
            .recv_within(|m, fds| self.absorb(m, fds), Some(timeout))
    }

    /// Counts `e` if it refuses the peer's input and, in the host, ends the worker (see
    /// [`Guard`]); returns `e`. For refusals found above the lane: a message the call protocol
    /// forbids, a value referring to shared memory the peer does not have.
    pub fn refuse(&self, e: LaneError) -> LaneError {
        self.framed.refuse(e)
    }

    /// What this connection (either of its lanes) refused first, in the host.
    pub fn refusal(&self) -> Option<String> {
        self.framed.refusal()
    }

    /// Checks that a peer region lies inside a segment the peer announced.
    pub fn check_peer_region(&self, r: Region) -> Result<(), LaneError> {
        let shm = self.shm();
        let len = (r.side == shm.peer_side())
            .then(|| shm.peer_len(r.segment))
            .flatten();
        match len {
            Some(len) if r.offset.checked_add(r.len).is_some_and(|end| end <= len) => Ok(()),
            Some(len) => Err(LaneError::Protocol(format!(
                "region at offset {} of {} bytes lies outside segment {} ({len} bytes)",
                r.offset, r.len, r.segment
            ))),
            None => Err(LaneError::Protocol(format!(
                "a region of {:?} segment {}, which was never announced",
                r.side, r.segment
            ))),
        }
    }

    /// Leases `len` bytes of our pool for a value about to be sent.
    pub fn alloc(&self, len: u64) -> Result<Region, LaneError> {
        self.alloc_in(len, false)
    }

    /// [`CallLane::alloc`] in a frozen segment: for a copy we keep and may send again without
    /// copying while its source is unchanged (ADR 0027).
    pub fn alloc_frozen(&self, len: u64) -> Result<Region, LaneError> {
        self.alloc_in(len, true)
    }

    fn alloc_in(&self, len: u64, frozen: bool) -> Result<Region, LaneError> {
        self.framed.check_owner()?;
        // Releases that arrived behind the last reply may free the very region we want.
        self.framed.absorb_ready(|m, fds| self.absorb(m, fds))?;
        self.shm().alloc(len, frozen)
    }

    /// Leases `len` bytes of our pool for a block a node's kernel writes itself (a birth, ADR
    /// 0044): the region, our address of it, and the address range of its segment. Called from
    /// inside the worker's allocator, so it reads nothing from the socket (unlike
    /// [`CallLane::alloc`]); the lease's one hold is the worker's own until it sends the region.
    pub fn alloc_born(&self, len: u64) -> Result<Birth, LaneError> {
        self.shm().alloc_born(len)
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

    /// Retires our idle segments and frees their memory now; their retirement reaches the peer
    /// with our next frame. Returns the bytes given back (ADR 0028).
    pub fn trim(&self) -> u64 {
        self.shm().trim()
    }

    /// What this lane knows about its waits: its spin, its wake-ups, both sides' stamps.
    pub fn timing(&self) -> LaneTiming {
        self.framed.timing()
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

    pub(crate) fn arm(&self, guard: Arc<Guard>) {
        self.framed.arm(guard, "control")
    }

    pub fn send(&self, msg: &Message) -> Result<(), LaneError> {
        self.framed.send(&[msg], Vec::new())
    }

    /// [`ControlLane::send`] bounded by `timeout` (see [`Framed::send_within`]).
    pub fn send_within(&self, msg: &Message, timeout: Duration) -> Result<(), LaneError> {
        self.framed.send_within(&[msg], Vec::new(), Some(timeout))
    }

    pub fn recv(&self) -> Result<Option<Message>, LaneError> {
        self.framed.recv(|m, _| Ok(Some(m)))
    }

    /// The host's read: the next answer (pong, report, model outcome), giving up after `t`
    /// with an error of kind `TimedOut`. Anything else from a worker is refused, and so is any
    /// fd (nothing on this lane carries one).
    pub fn recv_timeout(&self, t: Duration) -> Result<Option<Message>, LaneError> {
        let answer = |m: Message, fds: &mut VecDeque<OwnedFd>| match m {
            _ if !fds.is_empty() => Err(LaneError::Protocol(format!(
                "{} fd(s) on the control lane, which carries none",
                fds.len()
            ))),
            Message::Pong { .. } | Message::Report { .. } | Message::CommandDone { .. } => {
                Ok(Some(m))
            }
            other => Err(LaneError::Protocol(format!(
                "unexpected {} on the control lane",
                other.kind()
            ))),
        };
        self.framed.recv_within(answer, Some(t))
    }

    /// See [`CallLane::refuse`].
    pub fn refuse(&self, e: LaneError) -> LaneError {
        self.framed.refuse(e)
    }

    pub fn shutdown(&self) {
        self.framed.shutdown()
    }
}
