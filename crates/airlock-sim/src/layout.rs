//! The format of a simulated card's file: a header, a fixed table of booking slots, then a
//! fixed table of process records (used by the WDDM semantics only).
//!
//! Every process that opens the card maps this file shared, so these structs *are* the shared
//! state. Fields that change after creation are atomics; the others are written once into a
//! private temporary file before it is linked under its public name, so no process ever maps
//! a half-written header. Any change to the layout bumps [`VERSION`]; version 2 added the
//! process records and the WDDM parameters.

use std::sync::atomic::{AtomicI64, AtomicU32, AtomicU64};

/// `b"AIRLKGPU"`, read as a little-endian u64.
pub const MAGIC: u64 = u64::from_le_bytes(*b"AIRLKGPU");
/// The layout version; `open` refuses any other.
pub const VERSION: u32 = 2;
/// Slots in a card created by this version: distinct (pid, tag) bookings held at once.
pub const SLOT_COUNT: u32 = 1024;
/// Process records in a card created by this version: processes attached at once (WDDM).
pub const PROC_COUNT: u32 = 256;
/// Longest card name, in bytes (NVML's name buffer is 96 bytes).
pub const NAME_MAX: usize = 63;
/// Longest UUID, in bytes (NVML's is 40 characters; MIG ones are longer).
pub const UUID_MAX: usize = 63;
/// Longest tag, in bytes.
pub const TAG_MAX: usize = 96;
/// Largest booking in one slot: bytes are stored in 48 bits, beside a 16-bit generation.
pub const BYTES_MAX: u64 = (1 << 48) - 1;

/// The first 256 bytes of the file.
#[repr(C)]
pub struct Header {
    /// [`MAGIC`]; the last field written at creation.
    pub magic: AtomicU64,
    pub version: u32,
    /// [`crate::Semantics`] as a number.
    pub semantics: u32,
    pub slot_count: u32,
    pub name_len: u32,
    pub uuid_len: u32,
    pub proc_count: u32,
    /// The card's size in bytes.
    pub total: AtomicU64,
    /// Sum of all bookings. Raised before a slot grows and lowered after it shrinks, so it never
    /// reads below the true sum (see `table.rs`).
    pub used: AtomicU64,
    /// A counter bumped by every growth and attach under WDDM: orders processes by recency.
    pub clock: AtomicU64,
    /// Re-partition events so far (WDDM).
    pub repartitions: AtomicU64,
    pub name: [u8; 64],
    pub uuid: [u8; 64],
    pub wddm: WddmArea,
}

/// The WDDM part of the header: the parameters (written once) and the card-wide demotion
/// counters, which outlive the processes they were charged to.
#[repr(C)]
pub struct WddmArea {
    pub pinned_bias: i64,
    pub repartition_bias: i64,
    pub repartition_below: u64,
    /// Demotion events, over all processes ever attached.
    pub demotions: AtomicU64,
    /// Bytes demoted, over all processes ever attached.
    pub demoted: AtomicU64,
    _pad: [u64; 3],
}

/// One process attached to a WDDM card: its budget and what over-admission cost it. 64 bytes.
#[repr(C)]
pub struct Proc {
    /// `kind << 56 | actor << 32 | pid`, with the kinds of [`state`]: `EMPTY`, `PENDING` (being
    /// attached by `actor`), `LIVE`, `RECLAIMING` (being detached by `actor`).
    pub state: AtomicU64,
    /// The process's reading plus its own bookings, as set by the last partition: its reading
    /// is `offset - own`, so it debits its own allocations 1:1 and no one else's.
    pub offset: AtomicI64,
    /// [`Header::clock`] at its last growth or attach.
    pub touched: AtomicU64,
    /// Times its memory was demoted to shared system memory for someone else's allocation.
    pub demotions: AtomicU64,
    /// Bytes so demoted, summed over those times.
    pub demoted: AtomicU64,
    /// [`proc_flags`].
    pub flags: AtomicU64,
    _pad: [u64; 2],
}

/// Bits of [`Proc::flags`].
pub mod proc_flags {
    /// The budget was set by a re-partition, not by the process's own start (pinned).
    pub const REPARTITIONED: u64 = 1;
}

/// One booking: `(pid, tag) -> bytes`. 128 bytes: two cache lines no other slot shares.
#[repr(C)]
pub struct Slot {
    /// `kind << 56 | actor << 32 | pid`; see [`state`].
    pub state: AtomicU64,
    /// `generation << 48 | bytes`; the generation changes whenever the slot is recycled, so a
    /// writer that looked the slot up before it was recycled cannot write into its next owner.
    pub val: AtomicU64,
    pub tag_len: AtomicU32,
    _pad: AtomicU32,
    pub tag_hash: AtomicU64,
    pub tag: [AtomicU64; TAG_MAX / 8],
}

const _: () = assert!(size_of::<Header>() == 256);
const _: () = assert!(size_of::<WddmArea>() == 64);
const _: () = assert!(size_of::<Slot>() == 128);
const _: () = assert!(size_of::<Proc>() == 64);

/// Bytes in a file holding `slots` slots and `procs` process records.
pub const fn file_len(slots: u32, procs: u32) -> usize {
    size_of::<Header>() + slots as usize * size_of::<Slot>() + procs as usize * size_of::<Proc>()
}

/// The slot state word. `actor` is the pid of the process in the middle of a transition
/// (claiming or recycling the slot), so others can tell a stuck transition from a slow one. It
/// has 24 bits, and Linux pids stay below 2^22 (`pid_max`'s ceiling).
pub mod state {
    /// Free for anyone to claim.
    pub const EMPTY: u64 = 0;
    /// Claimed by `actor`, which is writing the tag; the pid is not known yet.
    pub const CLAIMED: u64 = 1;
    /// Tag written; `actor` is checking that no other slot holds the same (pid, tag).
    pub const PENDING: u64 = 2;
    /// A booking of `pid`; bytes may be written.
    pub const LIVE: u64 = 3;
    /// `actor` is recycling this booking of `pid`, whose bytes reached zero.
    pub const RECLAIMING: u64 = 4;

    pub const fn make(kind: u64, actor: u32, pid: u32) -> u64 {
        (kind << 56) | ((actor as u64 & 0x00ff_ffff) << 32) | pid as u64
    }

    pub const fn kind(s: u64) -> u64 {
        s >> 56
    }

    pub const fn actor(s: u64) -> u32 {
        ((s >> 32) & 0x00ff_ffff) as u32
    }

    pub const fn pid(s: u64) -> u32 {
        s as u32
    }
}

/// The slot value word.
pub mod val {
    use super::BYTES_MAX;

    pub const fn make(generation: u64, bytes: u64) -> u64 {
        (generation << 48) | (bytes & BYTES_MAX)
    }

    pub const fn generation(v: u64) -> u64 {
        v >> 48
    }

    pub const fn bytes(v: u64) -> u64 {
        v & BYTES_MAX
    }

    /// The next generation, wrapping in 16 bits.
    pub const fn next(v: u64) -> u64 {
        (generation(v) + 1) & 0xffff
    }
}

impl Header {
    /// A header for a fresh card; `magic` stays zero until the caller publishes it.
    /// `wddm` is `(pinned_bias, repartition_bias, repartition_below)`.
    pub fn new(
        semantics: u32,
        wddm: (i64, i64, u64),
        total: u64,
        name: &str,
        uuid: &str,
    ) -> Header {
        let mut h = Header {
            magic: AtomicU64::new(0),
            version: VERSION,
            semantics,
            slot_count: SLOT_COUNT,
            name_len: name.len() as u32,
            uuid_len: uuid.len() as u32,
            proc_count: PROC_COUNT,
            total: AtomicU64::new(total),
            used: AtomicU64::new(0),
            clock: AtomicU64::new(0),
            repartitions: AtomicU64::new(0),
            name: [0; 64],
            uuid: [0; 64],
            wddm: WddmArea {
                pinned_bias: wddm.0,
                repartition_bias: wddm.1,
                repartition_below: wddm.2,
                demotions: AtomicU64::new(0),
                demoted: AtomicU64::new(0),
                _pad: [0; 3],
            },
        };
        h.name[..name.len()].copy_from_slice(name.as_bytes());
        h.uuid[..uuid.len()].copy_from_slice(uuid.as_bytes());
        h
    }

    pub fn name(&self) -> String {
        let n = (self.name_len as usize).min(NAME_MAX);
        String::from_utf8_lossy(&self.name[..n]).into_owned()
    }

    pub fn uuid(&self) -> String {
        let n = (self.uuid_len as usize).min(UUID_MAX);
        String::from_utf8_lossy(&self.uuid[..n]).into_owned()
    }
}

impl Default for Proc {
    fn default() -> Proc {
        Proc {
            state: AtomicU64::new(state::EMPTY),
            offset: AtomicI64::new(0),
            touched: AtomicU64::new(0),
            demotions: AtomicU64::new(0),
            demoted: AtomicU64::new(0),
            flags: AtomicU64::new(0),
            _pad: [0; 2],
        }
    }
}

impl Default for Slot {
    fn default() -> Slot {
        Slot {
            state: AtomicU64::new(state::EMPTY),
            val: AtomicU64::new(0),
            tag_len: AtomicU32::new(0),
            _pad: AtomicU32::new(0),
            tag_hash: AtomicU64::new(0),
            tag: Default::default(),
        }
    }
}

/// FNV-1a of a tag: a quick filter before the byte comparison.
pub fn tag_hash(tag: &str) -> u64 {
    tag.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_word_round_trips() {
        let s = state::make(state::PENDING, 4_194_304, u32::MAX);
        assert_eq!(state::kind(s), state::PENDING);
        assert_eq!(state::actor(s), 4_194_304);
        assert_eq!(state::pid(s), u32::MAX);
    }

    #[test]
    fn value_word_round_trips() {
        let v = val::make(0xffff, BYTES_MAX);
        assert_eq!(val::generation(v), 0xffff);
        assert_eq!(val::bytes(v), BYTES_MAX);
        assert_eq!(val::next(v), 0);
    }
}
