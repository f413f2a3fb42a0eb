//! A framed Unix socket, usable from any thread.
//!
//! The node-call lane also has a mailbox each way in the worker's shared page: its small
//! frames go there, in order with the socket's, and its reader sleeps on a futex before it
//! sleeps in the socket ([`crate::mailbox`], ADR 0061).
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
use crate::mailbox::{CAPACITY, FUTEX_SLICE, Mailbox, ReaderState};
use crate::outbox::{Outbox, timed_out};
use crate::rejections::{self, Rejection};
use crate::signal_page::SignalPage;
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
    /// The call lane's mailboxes (ADR 0061).
    mail: OnceLock<Mail>,
}

struct Reader {
    decoder: airlock_wire::FrameDecoder,
    fds: VecDeque<OwnedFd>,
    eof: bool,
    /// A message taken out by [`Framed::absorb_ready`] that was not bookkeeping.
    held: Option<Message>,
    /// The frames of mails taken, delivered before anything after them in the socket.
    mailed: airlock_wire::FrameDecoder,
    /// Bytes read from the socket so far.
    sock_bytes: u64,
    /// The inbox's count of socket sends when the socket was last asked: unchanged, the peer
    /// sent nothing that way since (ADR 0061); None until the first ask, since what the peer
    /// sent before it opened its mailbox rang nothing.
    socket_rings: Option<u32>,
}

/// A call lane's two mailboxes in the worker's shared page, and the page that holds them.
struct Mail {
    /// What the peer posts to us.
    inbox: Mailbox,
    /// What we post to the peer.
    outbox: Mailbox,
    /// How long a read sleeps on the inbox's bell before it sleeps in the socket.
    slice: Duration,
    _page: Arc<SignalPage>,
}

/// The frame that tells a reader asleep in the socket to look at its inbox: a release of
/// nothing, which every call lane applies as bookkeeping and drops.
fn nudge() -> Message {
    Message::Release {
        regions: Vec::new(),
    }
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
                mailed: airlock_wire::FrameDecoder::new(),
                sock_bytes: 0,
                socket_rings: None,
            }),
            writer: Mutex::new(Outbox::default()),
            owner: airlock_shm::current_pid(),
            timeout: Mutex::new(None),
            guard: OnceLock::new(),
            spins: AtomicBool::new(false),
            spin: SpinState::default(),
            stamps: OnceLock::new(),
            mail: OnceLock::new(),
        }
    }

    /// Sends this lane's small frames through the mailboxes of `page` and reads the peer's
    /// there (ADR 0061); `side` is ours. For a call lane: the page has one pair.
    pub fn open_mail(&self, page: Arc<SignalPage>, side: Side, peer: Side) {
        self.open_mail_sliced(page, side, peer, FUTEX_SLICE)
    }

    fn open_mail_sliced(&self, page: Arc<SignalPage>, side: Side, peer: Side, slice: Duration) {
        let mail = Mail {
            inbox: page.mailbox(side),
            outbox: page.mailbox(peer),
            slice,
            _page: page,
        };
        mail.inbox.set_state(ReaderState::Awake);
        let _ = self.mail.set(mail);
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
        // With nothing of ours left for the socket, frames that fit the peer's free mailbox go
        // there (ADR 0061): encoded as for the socket, then taken back.
        let postable = fds.is_empty() && !out.pending();
        out.queue(msgs, fds)?;
        self.note_send();
        if let Some(mail) = self.mail()
            && postable
            && mail.outbox.can_post(out.unsent().len())
        {
            let before = out.total() - out.unsent().len() as u64;
            let nudge_owed = mail.outbox.post(out.unsent(), before);
            out.unqueue();
            if !nudge_owed {
                return Ok(());
            }
            // The peer went to sleep in the socket as we posted: it hears this.
            out.queue(&[&nudge()], Vec::new())?;
        }
        self.flush(&mut out, deadline)
    }

    /// The lane's mailboxes, once both sides read theirs: a peer that never opened its own
    /// (the mailboxes turned off there, [`crate::mailbox::MAIL_ENV`]) rings no bell when it
    /// writes the socket, so we must not wait on one.
    fn mail(&self) -> Option<&Mail> {
        self.mail
            .get()
            .filter(|m| m.outbox.state() != ReaderState::Detached)
    }

    /// Writes what `out` holds, ringing the peer's bell before any wait for room and after.
    fn flush(&self, out: &mut Outbox, deadline: Option<Instant>) -> Result<(), LaneError> {
        let ring = || {
            if let Some(mail) = self.mail.get() {
                mail.outbox.ring_socket();
            }
        };
        let flushed = out.flush(self.sock.as_fd(), deadline, &ring);
        ring();
        flushed
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
        self.flush(&mut out, Some(deadline))
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
        let timeout = timeout.map(|t| t.max(Duration::from_millis(1)));
        let deadline = timeout.map(|t| Instant::now() + t);
        if self.mail().is_none() {
            self.set_read_timeout(timeout)?;
        }
        let mut r = self.reader.lock().unwrap_or_else(|p| p.into_inner());
        let r = &mut *r;
        if let Some(msg) = r.held.take() {
            return Ok(Some(msg));
        }
        let got = (|| loop {
            if let Some(msg) = self.next_ready(r)? {
                if let Some(msg) = absorb(msg, &mut r.fds)? {
                    return Ok(Some(msg));
                }
                continue;
            }
            if r.eof {
                r.decoder.finish()?;
                return Ok(None);
            }
            match self.fill(r, deadline) {
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
                let Some(msg) = self.next_ready(r)? else {
                    break;
                };
                r.held = absorb(msg, &mut r.fds)?;
            }
            Ok(())
        })();
        absorbed.map_err(|e| self.refuse(e))
    }

    /// The next frame already received, in the order it was sent: the frames of a mail come
    /// after the socket bytes its writer had queued before it, and before the rest (ADR 0061).
    fn next_ready(&self, r: &mut Reader) -> Result<Option<Message>, LaneError> {
        loop {
            if let Some(msg) = r.mailed.next_message()? {
                return Ok(Some(msg));
            }
            if let Some(mail) = self.mail.get()
                && let Some(before) = mail.inbox.waiting()
                && before <= r.sock_bytes - r.decoder.pending() as u64
            {
                self.take_mail(r, mail).map_err(refused)?;
                continue;
            }
            return Ok(r.decoder.next_message()?);
        }
    }

    /// Moves the inbox's mail into `r.mailed`.
    fn take_mail(&self, r: &mut Reader, mail: &Mail) -> std::io::Result<()> {
        let spare = r.mailed.spare(CAPACITY);
        let spare_len = spare.len();
        let n = mail
            .inbox
            .take(spare)
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string()))?;
        r.mailed.commit(n, spare_len);
        self.note_got();
        Ok(())
    }

    fn note_got(&self) {
        if let Some((stamps, side, _)) = self.stamps.get() {
            stamps.got(*side, crate::spin::monotonic_ns());
        }
    }

    /// One read from the socket, or of a mail, into the decoders; waits until `deadline`
    /// (None: as long as it takes) and returns `WouldBlock` then.
    fn fill(&self, r: &mut Reader, deadline: Option<Instant>) -> Result<(), LaneError> {
        let budget = self.budget();
        let stamps = self.stamps.get();
        let peer = stamps.map(|(stamps, _, peer)| move || stamps.last(*peer));
        let peer = peer.as_ref().map(|f| f as &dyn Fn() -> (u64, u64));
        let mail = self.mail();
        let got = crate::spin::read(budget, &self.spin, peer, |block| match (mail, block) {
            (None, block) => self.read_sock(r, block),
            (Some(mail), false) => self.try_fill(r, mail, false),
            (Some(mail), true) => self.sleep_fill(r, mail, deadline),
        });
        got.map_err(refused)?;
        if r.fds.len() > 64 {
            return Err(LaneError::Protocol("too many unclaimed fds".into()));
        }
        Ok(())
    }

    /// One `recvmsg` into the decoder, blocking or not.
    fn read_sock(&self, r: &mut Reader, block: bool) -> std::io::Result<()> {
        let spare = r.decoder.spare(READ_CHUNK);
        let spare_len = spare.len();
        let mut fds = Vec::new();
        let sock = self.sock.as_fd();
        let got = if block {
            recv_with_fds(sock, &mut *spare, &mut fds)
        } else {
            try_recv_with_fds(sock, &mut *spare, &mut fds)
        };
        let n = match got {
            Ok(n) => n,
            // Our own shutdown after the peer died looks like a reset; either way, the end.
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => 0,
            Err(e) => return Err(e),
        };
        if n > 0 {
            self.note_got();
        }
        r.decoder.commit(n, spare_len);
        r.fds.extend(fds);
        r.sock_bytes += n as u64;
        if n == 0 {
            r.eof = true;
        }
        Ok(())
    }

    /// Without waiting: takes the inbox's mail if the socket bytes before it were read, and
    /// asks the socket if they were not, if the peer sent that way since it was last asked, if a frame
    /// is half read (its rest comes that way) or if `ask_socket`; `WouldBlock` if nothing came.
    fn try_fill(&self, r: &mut Reader, mail: &Mail, ask_socket: bool) -> std::io::Result<()> {
        if let Some(before) = mail.inbox.waiting() {
            if before <= r.sock_bytes {
                return self.take_mail(r, mail);
            }
            return self.read_sock(r, false);
        }
        let rung = Some(mail.inbox.socket_rings());
        if ask_socket || rung != r.socket_rings || r.decoder.pending() > 0 {
            r.socket_rings = rung;
            return self.read_sock(r, false);
        }
        Err(std::io::ErrorKind::WouldBlock.into())
    }

    /// Waits for a mail or socket bytes until `deadline`: on the inbox's bell for at most
    /// the mail's slice, then in `recvmsg`, which also hears the peer go away (ADR 0061).
    fn sleep_fill(
        &self,
        r: &mut Reader,
        mail: &Mail,
        deadline: Option<Instant>,
    ) -> std::io::Result<()> {
        let start = Instant::now();
        let slice_end = start + mail.slice;
        let bell_end = deadline.map_or(slice_end, |d| d.min(slice_end));
        // The rest of a frame half read comes through the socket: no bell is owed for it.
        if r.decoder.pending() == 0 {
            mail.inbox.set_state(ReaderState::Futex);
            let got = loop {
                let bell = mail.inbox.bell();
                match self.try_fill(r, mail, false) {
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                    other => break other,
                }
                let now = Instant::now();
                if now >= bell_end {
                    break Err(std::io::ErrorKind::WouldBlock.into());
                }
                mail.inbox.sleep(bell, bell_end - now);
            };
            mail.inbox.set_state(ReaderState::Awake);
            match got {
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                other => return other,
            }
        }
        let left = match deadline {
            None => None,
            Some(d) => {
                let left = d.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    // A peer that went away rings no bell: the socket says so.
                    return self.try_fill(r, mail, true);
                }
                Some(left.max(Duration::from_millis(1)))
            }
        };
        mail.inbox.set_state(ReaderState::Socket);
        // A mail posted before the writer saw where we sleep is taken now; one posted after
        // comes with a nudge.
        let got = match self.try_fill(r, mail, true) {
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => self
                .set_read_timeout(left)
                .and_then(|()| self.read_sock(r, true)),
            other => other,
        };
        mail.inbox.set_state(ReaderState::Awake);
        got
    }

    pub fn shutdown(&self) {
        let _ = self.sock.shutdown(std::net::Shutdown::Both);
        // Whoever sleeps on a bell, here or in the peer, looks at the socket now.
        if let Some(mail) = self.mail.get() {
            mail.inbox.ring_socket();
            mail.outbox.ring_socket();
        }
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

/// A read's error as the lane reports it: more fds in one write than a sender of ours ever
/// attaches, or a forged mail, is the peer's doing.
fn refused(e: std::io::Error) -> LaneError {
    if e.kind() == std::io::ErrorKind::InvalidData {
        LaneError::Protocol(e.to_string())
    } else {
        e.into()
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

    /// A host's and a worker's end of a lane sharing a page; the worker's reads sleep on the
    /// bell for `slice` before they sleep in the socket.
    fn mailed_pair(slice: Duration) -> (Framed, Framed, Arc<SignalPage>) {
        let (a, b) = UnixStream::pair().unwrap();
        let host_page = Arc::new(SignalPage::create().unwrap());
        let dup = host_page.fd().unwrap().try_clone_to_owned().unwrap();
        let worker_page = Arc::new(SignalPage::adopt(dup).unwrap());
        let host = Framed::new(a);
        let worker = Framed::new(b);
        host.open_mail_sliced(host_page.clone(), Side::Host, Side::Worker, slice);
        worker.open_mail_sliced(worker_page, Side::Worker, Side::Host, slice);
        (host, worker, host_page)
    }

    fn event(id: u64, bytes: usize) -> Message {
        Message::Event {
            id,
            topic: "t".into(),
            payload: airlock_wire::Value::Bytes(vec![id as u8; bytes]),
        }
    }

    fn id_of(m: &Message) -> u64 {
        match m {
            Message::Event { id, .. } => *id,
            other => panic!("{}", other.kind()),
        }
    }

    /// Reads the next message, dropping the nudges and keeping the fds that came.
    fn next(f: &Framed, fds: &mut Vec<OwnedFd>) -> Option<Message> {
        f.recv_within(
            |m, got| {
                fds.extend(got.drain(..));
                Ok(match m {
                    Message::Release { regions } if regions.is_empty() => None,
                    m => Some(m),
                })
            },
            Some(Duration::from_secs(20)),
        )
        .unwrap()
    }

    #[test]
    fn frames_by_mail_and_by_socket_arrive_in_the_order_they_were_sent() {
        let (host, worker, page) = mailed_pair(Duration::from_millis(2));
        let worker = Arc::new(worker);
        let echo = {
            let worker = worker.clone();
            std::thread::spawn(move || {
                let mut fds = Vec::new();
                while let Some(m) = next(&worker, &mut fds) {
                    let fd = std::mem::take(&mut fds);
                    worker.send(&[&m], fd).unwrap();
                }
            })
        };
        // Sizes around the mailbox's capacity, an fd now and then, and bursts of sends before
        // the replies are read, so that the mailbox is often busy and the socket takes over.
        let mut want = std::collections::VecDeque::new();
        let mut got_fds = Vec::new();
        let mut id = 0;
        for round in 0..400u64 {
            // At most three frames of 48 KiB in flight: below a socket buffer, which both
            // sides would otherwise fill, each writing while the other does.
            let burst = 1 + (round % 3);
            for k in 0..burst {
                id += 1;
                let size = match (round + k) % 4 {
                    0 => 10,
                    1 => CAPACITY - 100,
                    2 => CAPACITY + 1,
                    _ => 48 << 10,
                };
                let fds = if id % 7 == 0 {
                    vec![std::fs::File::open("/dev/null").unwrap().into()]
                } else {
                    Vec::new()
                };
                host.send(&[&event(id, size)], fds).unwrap();
                want.push_back(id);
            }
            if round % 3 != 0 {
                while let Some(w) = want.pop_front() {
                    let m = next(&host, &mut got_fds).unwrap();
                    assert_eq!(id_of(&m), w, "round {round}");
                }
            }
        }
        while let Some(w) = want.pop_front() {
            assert_eq!(id_of(&next(&host, &mut got_fds).unwrap()), w);
        }
        assert_eq!(got_fds.len() as u64, id / 7, "every fd came back");
        let mailed = (
            page.mailbox(Side::Worker).posted(),
            page.mailbox(Side::Host).posted(),
        );
        assert!(mailed.0 > 100 && mailed.1 > 100, "{mailed:?}");
        host.shutdown();
        echo.join().unwrap();
    }

    #[test]
    fn a_reader_asleep_on_the_bell_hears_its_peer_go_away_and_its_own_timeout() {
        let (host, worker, _page) = mailed_pair(FUTEX_SLICE);
        let start = Instant::now();
        let got = worker.recv_within(|m, _| Ok(Some(m)), Some(Duration::from_millis(30)));
        assert!(is_timeout(&got.unwrap_err()));
        assert!(start.elapsed() >= Duration::from_millis(30));
        let reader = std::thread::spawn(move || {
            let start = Instant::now();
            let got = worker.recv(|m, _| Ok(Some(m)));
            (got.map(|m| m.is_none()).ok(), start.elapsed())
        });
        std::thread::sleep(Duration::from_millis(100));
        drop(host); // no bell rings: the socket's end must be heard
        let (ended, took) = reader.join().unwrap();
        assert_eq!(ended, Some(true));
        assert!(took < Duration::from_secs(5), "{took:?}");
    }

    #[test]
    fn a_frame_larger_than_the_socket_buffer_wakes_a_reader_asleep_on_the_bell() {
        // A slice far longer than the test: only the bell can wake the reader in time.
        let (host, worker, _page) = mailed_pair(Duration::from_secs(60));
        let reader = std::thread::spawn(move || {
            let mut fds = Vec::new();
            let start = Instant::now();
            let m = next(&worker, &mut fds).unwrap();
            (id_of(&m), start.elapsed())
        });
        std::thread::sleep(Duration::from_millis(50));
        host.send(&[&event(3, 8 << 20)], Vec::new()).unwrap();
        let (id, took) = reader.join().unwrap();
        assert_eq!(id, 3);
        assert!(took < Duration::from_secs(20), "{took:?}");
    }

    #[test]
    fn a_peer_without_mailboxes_is_read_through_the_socket_at_once() {
        // The worker's side never opens its mailboxes (`AIRLOCK_LANE_MAIL=off` there): it
        // rings no bell, so the host must not sleep on one (a minute here).
        let (a, b) = UnixStream::pair().unwrap();
        let page = Arc::new(SignalPage::create().unwrap());
        let host = Framed::new(a);
        let worker = Framed::new(b);
        host.open_mail_sliced(
            page.clone(),
            Side::Host,
            Side::Worker,
            Duration::from_secs(60),
        );
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for _ in 0..3 {
                let got = host.recv(|m, _| Ok(Some(m))).unwrap();
                if tx.send(got.map(|m| id_of(&m))).is_err() {
                    return;
                }
            }
        });
        for id in 1..=3 {
            std::thread::sleep(Duration::from_millis(20));
            worker.send(&[&event(id, 10)], Vec::new()).unwrap();
            let got = rx.recv_timeout(Duration::from_secs(5));
            assert_eq!(
                got,
                Ok(Some(id)),
                "read at once, not after the bell's slice"
            );
        }
        assert_eq!(page.mailbox(Side::Host).posted(), 0);
        assert_eq!(
            page.mailbox(Side::Worker).posted(),
            0,
            "nobody reads it: no mail"
        );
    }

    #[test]
    fn a_forged_mail_is_refused_as_the_peers_input() {
        let (host, worker, page) = mailed_pair(FUTEX_SLICE);
        host.send(&[&event(1, 10)], Vec::new()).unwrap();
        let inbox = page.mailbox(Side::Worker);
        assert_eq!(inbox.posted(), 1, "went by mail");
        let first = worker.recv(|m, _| Ok(Some(m))).unwrap().unwrap();
        assert_eq!(id_of(&first), 1);
        // The writer forges the length of its next mail.
        host.send(&[&event(2, 10)], Vec::new()).unwrap();
        assert_eq!(inbox.posted(), 2);
        inbox.forge_len(u32::MAX);
        let got = worker.recv(|m, _| Ok(Some(m)));
        assert!(
            matches!(&got, Err(LaneError::Protocol(e)) if e.contains("more than the mailbox holds")),
            "{got:?}"
        );
    }

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
