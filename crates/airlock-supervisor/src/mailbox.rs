//! A mailbox for each direction of a call lane, in the worker's shared page: small frames
//! travel there instead of through the socket, and a sleeping reader is woken by a futex
//! (ADR 0061).
//!
//! A no-op call is two small frames, and on a socket each costs a `sendmsg`, a `recvmsg` and
//! the socket's wake-up: on one vCPU a socketpair round trip of 64 bytes took 9-11 µs here,
//! where handing the same turn over by a futex in shared memory took 4.2 µs (probe in
//! `bench/results/issue20-mailbox/`). So a frame without descriptors that fits the mailbox is
//! copied there, published by a sequence number, and the reader is woken only if it sleeps on
//! the futex. Everything else (segments announced with their descriptors, large frames, a
//! frame sent while the last mail is still untaken) goes through the socket as before, and the
//! order between the two ways is kept by numbering: each mail says how many socket bytes its
//! writer had queued before it, and the reader takes it only once it has read that far.
//!
//! The socket stays what tells a reader its peer is gone: a reader sleeps on the futex for a
//! bounded time ([`FUTEX_SLICE`], or less when its caller's timeout is shorter), and then in
//! `recvmsg`, which sees the end of the stream. The reader says which sleep it is in
//! ([`ReaderState`]), so a writer wakes a futex sleeper, and sends through the socket to one
//! that sleeps there; a mail posted as the reader moved into the socket is followed by an
//! empty release frame through the socket (a nudge), so it is never left unread.
//!
//! What the peer writes here is checked as what it sends through the socket is: a mail's
//! length is bounded before its bytes are copied out of the shared page, and its frames are
//! decoded and refused by the same rules. A worker that scribbles on the page can only delay
//! or garble its own lane's frames, which the host's guard then refuses.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

/// The bytes of one direction's mailbox in the shared page, its header included.
pub(crate) const BOX_BYTES: usize = 16 << 10;
const HEADER_BYTES: usize = 64;
/// The largest mail: the frames of one send, encoded.
pub const CAPACITY: usize = BOX_BYTES - HEADER_BYTES;
/// How long a reader sleeps on the futex before it sleeps in the socket, which also hears
/// its peer go away: the longest a worker takes to notice its host died while it was idle.
pub(crate) const FUTEX_SLICE: Duration = Duration::from_millis(50);

/// The variable that turns the mailboxes off for the lanes a process opens (`off`): either
/// side's suffices, since a writer posts only to a reader that reads its mailbox.
pub const MAIL_ENV: &str = "AIRLOCK_LANE_MAIL";

/// Whether a value of [`MAIL_ENV`] leaves the mailboxes on (pure: no environment read).
pub fn enabled(raw: Option<&str>) -> bool {
    !raw.map(|s| s.trim().to_ascii_lowercase())
        .is_some_and(|s| ["off", "0", "no", "false", "never"].contains(&s.as_str()))
}

/// Where the reader of a mailbox is, as its writer needs to know.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub(crate) enum ReaderState {
    /// Nobody reads this mailbox yet (a fresh page): writers use the socket.
    Detached = 0,
    /// Running: it looks at the mailbox before it sleeps, so a mail needs no wake-up.
    Awake = 1,
    /// Asleep on the futex: a writer wakes it after any send.
    Futex = 2,
    /// Asleep in `recvmsg`: only the socket reaches it.
    Socket = 3,
}

impl ReaderState {
    fn from_u32(v: u32) -> ReaderState {
        match v {
            1 => ReaderState::Awake,
            2 => ReaderState::Futex,
            3 => ReaderState::Socket,
            _ => ReaderState::Detached,
        }
    }
}

/// The header of a mailbox, at the start of its [`BOX_BYTES`].
#[repr(C)]
struct Header {
    /// Mails published by the writer.
    seq: AtomicU32,
    /// Mails taken by the reader (equal to `seq`: the mailbox is free).
    taken: AtomicU32,
    /// The reader's [`ReaderState`].
    state: AtomicU32,
    /// Bumped by the writer after every send, by either way: the futex a reader sleeps on.
    bell: AtomicU32,
    /// The length of the mail published last.
    len: AtomicU32,
    /// Bumped by the writer after a send through the socket: the reader asks the socket only
    /// when it moved, never once per mail.
    socket_rings: AtomicU32,
    /// The socket bytes the writer had queued before the mail published last.
    sock_before: AtomicU64,
}

const _: () = assert!(std::mem::size_of::<Header>() <= HEADER_BYTES);

/// Why a mail was refused.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct BadMail(pub u32);

impl std::fmt::Display for BadMail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "a mail of {} bytes, more than the mailbox holds ({CAPACITY})",
            self.0
        )
    }
}

/// One direction's mailbox in a mapping that outlives it (the caller keeps the page).
pub(crate) struct Mailbox {
    base: *mut u8,
}

// SAFETY: the header is atomics; the data is written only by the one writer (under its lane's
// writer lock) while the mailbox is free, and read only by the one reader after the writer
// published it and before the reader marks it taken.
unsafe impl Send for Mailbox {}
unsafe impl Sync for Mailbox {}

impl Mailbox {
    /// # Safety
    /// `base` must point to [`BOX_BYTES`] of a shared mapping, 8-byte aligned, that stays mapped
    /// as long as the mailbox is used.
    pub(crate) unsafe fn at(base: *mut u8) -> Mailbox {
        debug_assert_eq!(base as usize % 8, 0);
        Mailbox { base }
    }

    fn header(&self) -> &Header {
        // SAFETY: `at`'s contract: aligned, mapped, atomics only.
        unsafe { &*self.base.cast::<Header>() }
    }

    fn data(&self) -> *mut u8 {
        // SAFETY: within the BOX_BYTES mapped.
        unsafe { self.base.add(HEADER_BYTES) }
    }

    // The writer's side.

    /// Whether a mail of `len` bytes can be posted now: it fits, the reader reads the
    /// mailbox and sleeps nowhere the mail would not wake it, and the last mail was taken.
    pub(crate) fn can_post(&self, len: usize) -> bool {
        let h = self.header();
        len <= CAPACITY
            && matches!(self.state(), ReaderState::Awake | ReaderState::Futex)
            && h.seq.load(Ordering::Relaxed) == h.taken.load(Ordering::Acquire)
    }

    /// Publishes `bytes` (whole frames, at most [`CAPACITY`]; see [`Mailbox::can_post`]) as
    /// following `sock_before` bytes of the socket, and wakes the reader if it sleeps on the
    /// futex. True when the reader went to sleep in the socket meanwhile: the caller nudges
    /// it through the socket.
    pub(crate) fn post(&self, bytes: &[u8], sock_before: u64) -> bool {
        debug_assert!(bytes.len() <= CAPACITY);
        let h = self.header();
        // SAFETY: the mailbox is free (`can_post`), so the reader copies nothing out of it
        // now; `bytes` fits the data area.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.data(), bytes.len()) };
        h.len.store(bytes.len() as u32, Ordering::Relaxed);
        h.sock_before.store(sock_before, Ordering::Relaxed);
        h.seq.fetch_add(1, Ordering::SeqCst);
        self.ring() == ReaderState::Socket
    }

    /// After bytes went through the socket: counts them and rings.
    pub(crate) fn ring_socket(&self) -> ReaderState {
        self.header().socket_rings.fetch_add(1, Ordering::SeqCst);
        self.ring()
    }

    /// After a send by either way: bumps the bell and wakes a reader asleep on it; the state
    /// the reader was in.
    fn ring(&self) -> ReaderState {
        let h = self.header();
        h.bell.fetch_add(1, Ordering::SeqCst);
        let state = ReaderState::from_u32(h.state.load(Ordering::SeqCst));
        if state == ReaderState::Futex {
            futex_wake(&h.bell);
        }
        state
    }

    /// Mails published so far.
    #[cfg(test)]
    pub(crate) fn posted(&self) -> u32 {
        self.header().seq.load(Ordering::SeqCst)
    }

    /// Overwrites the length of the mail published last, as a hostile writer could.
    #[cfg(test)]
    pub(crate) fn forge_len(&self, len: u32) {
        self.header().len.store(len, Ordering::SeqCst);
    }

    // The reader's side.

    pub(crate) fn state(&self) -> ReaderState {
        ReaderState::from_u32(self.header().state.load(Ordering::SeqCst))
    }

    pub(crate) fn set_state(&self, state: ReaderState) {
        self.header().state.store(state as u32, Ordering::SeqCst);
    }

    /// The bell's count: what a [`Mailbox::sleep`] waits to change.
    pub(crate) fn bell(&self) -> u32 {
        self.header().bell.load(Ordering::SeqCst)
    }

    /// How many sends went through the socket (see [`Mailbox::ring_socket`]).
    pub(crate) fn socket_rings(&self) -> u32 {
        self.header().socket_rings.load(Ordering::SeqCst)
    }

    /// The socket bytes that precede the mail waiting here, if one is.
    pub(crate) fn waiting(&self) -> Option<u64> {
        let h = self.header();
        (h.seq.load(Ordering::SeqCst) != h.taken.load(Ordering::Relaxed))
            .then(|| h.sock_before.load(Ordering::Acquire))
    }

    /// Copies the waiting mail into `out` (which has room for [`CAPACITY`] bytes) and frees
    /// the mailbox; the mail's length. Call only after [`Mailbox::waiting`] said one waits.
    pub(crate) fn take(&self, out: &mut [u8]) -> Result<usize, BadMail> {
        let h = self.header();
        let seq = h.seq.load(Ordering::Acquire);
        let len = h.len.load(Ordering::Relaxed);
        if len as usize > CAPACITY || len as usize > out.len() {
            h.taken.store(seq, Ordering::Release);
            return Err(BadMail(len));
        }
        // SAFETY: `len` bytes of the data area, published before `seq`.
        unsafe { std::ptr::copy_nonoverlapping(self.data(), out.as_mut_ptr(), len as usize) };
        h.taken.store(seq, Ordering::Release);
        Ok(len as usize)
    }

    /// Sleeps until the bell moves from `bell`, at most `timeout`; returns at once if it
    /// already moved. Spurious returns are fine: the caller looks again.
    pub(crate) fn sleep(&self, bell: u32, timeout: Duration) {
        futex_wait(&self.header().bell, bell, timeout);
    }
}

/// `FUTEX_WAIT` on a word of a shared mapping (not `FUTEX_PRIVATE`: the writer is another
/// process).
fn futex_wait(word: &AtomicU32, expected: u32, timeout: Duration) {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: `word` is a live, aligned u32; the timeout is relative, as FUTEX_WAIT takes it.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            expected,
            &ts as *const libc::timespec,
        )
    };
}

fn futex_wake(word: &AtomicU32) {
    // SAFETY: `word` is a live, aligned u32.
    unsafe { libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE, i32::MAX) };
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    struct Page(Vec<u64>);

    impl Page {
        fn new() -> Page {
            Page(vec![0; BOX_BYTES / 8])
        }
        fn mailbox(&mut self) -> Mailbox {
            // SAFETY: BOX_BYTES of an 8-aligned buffer that outlives the test's use.
            unsafe { Mailbox::at(self.0.as_mut_ptr().cast()) }
        }
    }

    #[test]
    fn the_mailboxes_are_on_unless_turned_off() {
        assert!(enabled(None));
        assert!(enabled(Some("")));
        assert!(enabled(Some("on")));
        assert!(!enabled(Some("off")));
        assert!(!enabled(Some(" 0 ")));
        assert!(!enabled(Some("False")));
    }

    #[test]
    fn a_mail_is_posted_only_to_a_reader_that_reads_and_only_once_the_last_was_taken() {
        let mut page = Page::new();
        let mb = page.mailbox();
        assert!(!mb.can_post(10), "nobody reads a fresh page's mailbox");
        mb.set_state(ReaderState::Awake);
        assert!(mb.can_post(CAPACITY));
        assert!(!mb.can_post(CAPACITY + 1));
        assert_eq!(mb.waiting(), None);
        assert!(!mb.post(b"hello", 42), "an awake reader needs no nudge");
        assert_eq!(mb.waiting(), Some(42));
        assert!(!mb.can_post(1), "the last mail is not taken yet");
        let mut out = vec![0; CAPACITY];
        assert_eq!(mb.take(&mut out), Ok(5));
        assert_eq!(&out[..5], b"hello");
        assert_eq!(mb.waiting(), None);
        assert!(mb.can_post(1));
        mb.set_state(ReaderState::Socket);
        assert!(
            !mb.can_post(1),
            "a reader asleep in the socket hears only the socket"
        );
    }

    #[test]
    fn a_mail_posted_as_the_reader_went_into_the_socket_asks_for_a_nudge() {
        let mut page = Page::new();
        let mb = page.mailbox();
        mb.set_state(ReaderState::Awake);
        assert!(mb.can_post(3));
        mb.set_state(ReaderState::Socket); // between the writer's check and its post
        assert!(mb.post(b"abc", 0));
    }

    #[test]
    fn a_forged_length_is_refused_and_frees_the_mailbox() {
        let mut page = Page::new();
        let mb = page.mailbox();
        mb.set_state(ReaderState::Awake);
        mb.post(b"x", 0);
        mb.header().len.store(u32::MAX, Ordering::Relaxed);
        let mut out = vec![0; CAPACITY];
        assert_eq!(mb.take(&mut out), Err(BadMail(u32::MAX)));
        assert_eq!(mb.waiting(), None);
        assert!(
            BadMail(u32::MAX)
                .to_string()
                .contains("more than the mailbox holds")
        );
    }

    #[test]
    fn a_sleeper_wakes_when_the_bell_rings_and_not_before_its_timeout_otherwise() {
        let mut page = Page::new();
        let mb = std::sync::Arc::new(page.mailbox());
        mb.set_state(ReaderState::Futex);
        let start = Instant::now();
        mb.sleep(mb.bell(), Duration::from_millis(30));
        assert!(start.elapsed() >= Duration::from_millis(25), "timed out");
        let bell = mb.bell();
        let ringer = {
            let mb = mb.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(20));
                mb.ring_socket()
            })
        };
        let start = Instant::now();
        while mb.bell() == bell {
            mb.sleep(bell, Duration::from_secs(10));
        }
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "woken by the ring"
        );
        assert_eq!(ringer.join().unwrap(), ReaderState::Futex);
        // A bell that already moved does not sleep at all.
        let start = Instant::now();
        mb.sleep(bell, Duration::from_secs(10));
        assert!(start.elapsed() < Duration::from_secs(5));
        drop(page);
    }
}
