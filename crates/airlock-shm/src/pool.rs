//! The regions one side lends to its peer.
//!
//! A region is held by whoever has a reference to it: the peer (once per descriptor we sent)
//! and, in later versions, local views. It returns to the free list only when its last hold is
//! released, so a producer never overwrites bytes a consumer may still read.

use std::collections::{BTreeMap, HashMap};

use crate::error::ShmError;
use crate::segment::Segment;
use crate::settings::{PeerLimits, pool_limit_from_env};

/// Sizing of a pool.
#[derive(Debug, Clone)]
pub struct PoolConfig {
    /// Prefix of memfd names (shown in `/proc/<pid>/maps`).
    pub name: String,
    /// Smallest segment created; small tensors share one.
    pub min_segment: u64,
    /// Idle (fully free) segment bytes kept for reuse; beyond this they are retired.
    pub keep_idle: u64,
    /// Most bytes the pool may hold in segments at once.
    pub limit: u64,
    /// Most segments the pool may hold at once.
    pub max_segments: usize,
    /// What this side accepts of the peer's segments (checked by the lane, not the pool).
    pub peer: PeerLimits,
}

impl Default for PoolConfig {
    /// The limits of the environment (`crate::settings`). Our own pool keeps within what we
    /// accept of the peer, since the peer reads the same settings and holds us to them.
    fn default() -> Self {
        let peer = PeerLimits::from_env();
        PoolConfig {
            name: "airlock".into(),
            min_segment: 32 << 20,
            keep_idle: 2 << 30,
            limit: pool_limit_from_env().min(peer.bytes),
            max_segments: peer.segments,
            peer,
        }
    }
}

/// A leased byte range of one segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Lease {
    pub segment: u32,
    pub offset: u64,
    pub len: u64,
}

/// The result of [`Pool::alloc`].
#[derive(Debug)]
pub struct Alloc {
    pub lease: Lease,
    /// Set when a segment was created for this lease and must be announced to the peer.
    pub created: Option<u32>,
}

/// The result of [`Pool::release`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Released {
    /// Other holds remain.
    StillHeld,
    /// The region is free for reuse.
    Freed,
}

/// Counters for tests, leak checks and `airlock status`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PoolStats {
    pub segments: usize,
    pub segment_bytes: u64,
    pub leased_regions: usize,
    pub leased_bytes: u64,
}

#[derive(Debug)]
struct Slot {
    segment: Segment,
    /// Free ranges: offset → length, coalesced.
    free: BTreeMap<u64, u64>,
    /// Leased ranges: offset → (length, holds).
    leased: HashMap<u64, (u64, u32)>,
    /// Our page-table entries were dropped by a trim: populate before the next copy.
    cold: bool,
}

impl Slot {
    fn is_idle(&self) -> bool {
        self.leased.is_empty()
    }

    fn take(&mut self, len: u64, align: u64) -> Option<u64> {
        // Best fit keeps large holes for large tensors.
        let (&start, &size) = self
            .free
            .iter()
            .filter(|&(&off, &size)| align_up(off, align) + len <= off + size)
            .min_by_key(|&(_, &size)| size)?;
        self.free.remove(&start);
        let at = align_up(start, align);
        if at > start {
            self.free.insert(start, at - start);
        }
        let end = at + len;
        if end < start + size {
            self.free.insert(end, start + size - end);
        }
        Some(at)
    }

    fn give_back(&mut self, offset: u64, len: u64) {
        let (mut start, mut size) = (offset, len);
        if let Some((&prev, &plen)) = self.free.range(..offset).next_back()
            && prev + plen == offset
        {
            self.free.remove(&prev);
            start = prev;
            size += plen;
        }
        if let Some(&nlen) = self.free.get(&(offset + len)) {
            self.free.remove(&(offset + len));
            size += nlen;
        }
        self.free.insert(start, size);
    }
}

/// The segments one side has created, and the leases on them.
#[derive(Debug)]
pub struct Pool {
    config: PoolConfig,
    slots: BTreeMap<u32, Slot>,
    next_id: u32,
    retired: Vec<u32>,
}

const SMALL: u64 = 4096;
const SEGMENT_GRANULE: u64 = 2 << 20;

fn align_up(x: u64, a: u64) -> u64 {
    x.div_ceil(a) * a
}

impl Pool {
    pub fn new(config: PoolConfig) -> Pool {
        Pool {
            config,
            slots: BTreeMap::new(),
            next_id: 0,
            retired: Vec::new(),
        }
    }

    /// Leases `len` bytes (`len > 0`), creating a segment when no free range fits. The lease
    /// starts with one hold, the peer's.
    pub fn alloc(&mut self, len: u64) -> Result<Alloc, ShmError> {
        self.alloc_in(len, false)
    }

    /// [`Pool::alloc`] in a frozen segment (see [`Segment::create_sealed`]): for a copy we
    /// keep and send again while its source is unchanged.
    pub fn alloc_frozen(&mut self, len: u64) -> Result<Alloc, ShmError> {
        self.alloc_in(len, true)
    }

    fn alloc_in(&mut self, len: u64, frozen: bool) -> Result<Alloc, ShmError> {
        let len = len.max(1);
        // Page alignment for anything not tiny keeps big copies on whole pages.
        let align = if len < SMALL { 64 } else { SMALL };
        let found = self
            .slots
            .iter_mut()
            .filter(|(_, slot)| slot.segment.is_frozen() == frozen)
            .find_map(|(&id, slot)| slot.take(len, align).map(|off| (id, off)));
        let (segment, offset, created) = match found {
            Some((id, off)) => {
                let slot = self.slots.get_mut(&id).expect("found there");
                if std::mem::take(&mut slot.cold) {
                    slot.segment.populate();
                }
                (id, off, None)
            }
            None => {
                let id = self.create_segment(len, frozen)?;
                let slot = self.slots.get_mut(&id).expect("segment just created");
                let off = slot
                    .take(len, align)
                    .expect("a new segment fits its first lease");
                (id, off, Some(id))
            }
        };
        self.slots
            .get_mut(&segment)
            .expect("segment exists")
            .leased
            .insert(offset, (len, 1));
        Ok(Alloc {
            lease: Lease {
                segment,
                offset,
                len,
            },
            created,
        })
    }

    fn create_segment(&mut self, len: u64, frozen: bool) -> Result<u32, ShmError> {
        let size = align_up(len.max(self.config.min_segment), SEGMENT_GRANULE);
        let total: u64 = self.slots.values().map(|s| s.segment.len()).sum();
        if total + size > self.config.limit {
            self.retire_idle(0);
            let total: u64 = self.slots.values().map(|s| s.segment.len()).sum();
            if total + size > self.config.limit {
                return Err(ShmError::PoolLimit {
                    len,
                    limit: self.config.limit,
                    in_use: total,
                    pool: self.config.name.clone(),
                });
            }
        }
        if self.slots.len() >= self.config.max_segments {
            self.retire_idle(0);
            if self.slots.len() >= self.config.max_segments {
                return Err(ShmError::SegmentLimit {
                    len,
                    limit: self.config.max_segments,
                    pool: self.config.name.clone(),
                });
            }
        }
        let id = self.next_id;
        self.next_id += 1;
        let name = format!("{}-{id}", self.config.name);
        let segment = Segment::create_sealed(&name, size, frozen)?;
        let mut free = BTreeMap::new();
        free.insert(0, size);
        self.slots.insert(
            id,
            Slot {
                segment,
                free,
                leased: HashMap::new(),
                cold: false,
            },
        );
        Ok(id)
    }

    /// The length of the leased region at `(segment, offset)`, if it is leased.
    pub fn lease_len(&self, segment: u32, offset: u64) -> Option<u64> {
        self.slots
            .get(&segment)
            .and_then(|s| s.leased.get(&offset))
            .map(|&(len, _)| len)
    }

    /// Adds a hold on a leased region (a local view, or a second reference sent to the peer).
    pub fn acquire(&mut self, segment: u32, offset: u64) -> Result<(), ShmError> {
        let (_, holds) = self
            .slots
            .get_mut(&segment)
            .and_then(|s| s.leased.get_mut(&offset))
            .ok_or(ShmError::UnknownRegion { segment, offset })?;
        *holds += 1;
        Ok(())
    }

    /// Drops one hold. A release for a region that is not leased is the peer's error (a
    /// duplicate or forged release) and is refused without touching the pool.
    pub fn release(&mut self, segment: u32, offset: u64) -> Result<Released, ShmError> {
        let slot = self
            .slots
            .get_mut(&segment)
            .ok_or(ShmError::UnknownRegion { segment, offset })?;
        let (len, holds) = slot
            .leased
            .get_mut(&offset)
            .ok_or(ShmError::UnknownRegion { segment, offset })?;
        *holds -= 1;
        if *holds > 0 {
            return Ok(Released::StillHeld);
        }
        let len = *len;
        slot.leased.remove(&offset);
        slot.give_back(offset, len);
        if slot.is_idle() {
            self.retire_idle(self.config.keep_idle);
        }
        Ok(Released::Freed)
    }

    /// Frees every lease at once: the peer is gone, and its holds with it.
    pub fn release_all(&mut self) {
        self.release_all_except(&[]);
    }

    /// Frees every lease but those at `keep` (`(segment, offset)`): the peer is gone, and its
    /// holds with it, but a lease we have not sent yet is still ours, and may be being filled
    /// at this moment (its segment must stay mapped).
    pub fn release_all_except(&mut self, keep: &[(u32, u64)]) {
        for (&id, slot) in self.slots.iter_mut() {
            let gone: Vec<(u64, u64)> = slot
                .leased
                .iter()
                .filter(|&(&o, _)| !keep.contains(&(id, o)))
                .map(|(&o, &(l, _))| (o, l))
                .collect();
            for (o, l) in gone {
                slot.leased.remove(&o);
                slot.give_back(o, l);
            }
        }
        self.retire_idle(self.config.keep_idle);
    }

    /// Retires idle segments, largest first, until idle bytes are at most `keep`.
    fn retire_idle(&mut self, keep: u64) {
        let mut idle: Vec<(u64, u32)> = self
            .slots
            .iter()
            .filter(|(_, s)| s.is_idle())
            .map(|(&id, s)| (s.segment.len(), id))
            .collect();
        let mut idle_bytes: u64 = idle.iter().map(|(l, _)| l).sum();
        idle.sort_unstable_by(|a, b| b.cmp(a));
        for (len, id) in idle {
            if idle_bytes <= keep {
                break;
            }
            self.slots.remove(&id);
            self.retired.push(id);
            idle_bytes -= len;
        }
    }

    /// Retires every idle segment and gives its memory back at once (the peer's mapping of it
    /// then reads as holes until our retirement reaches it; it holds no region there), and
    /// drops our page-table entries of the others (their pages hold what the peer still views:
    /// they stay, out of our resident set). Returns the bytes retired. For an idle side, or
    /// one under memory pressure (ADR 0028).
    pub fn trim(&mut self) -> u64 {
        let before: u64 = self.slots.values().map(|s| s.segment.len()).sum();
        let idle: Vec<u32> = self
            .slots
            .iter()
            .filter(|(_, s)| s.is_idle())
            .map(|(&id, _)| id)
            .collect();
        for id in idle {
            if let Some(slot) = self.slots.remove(&id) {
                slot.segment.punch();
                self.retired.push(id);
            }
        }
        for slot in self.slots.values_mut().filter(|s| !s.cold) {
            slot.segment.drop_pages();
            slot.cold = true;
        }
        before - self.slots.values().map(|s| s.segment.len()).sum::<u64>()
    }

    /// Whether segments were retired since the last [`Pool::take_retired`].
    pub fn has_retired(&self) -> bool {
        !self.retired.is_empty()
    }

    /// Segments retired since the last call; the peer must be told to unmap them.
    pub fn take_retired(&mut self) -> Vec<u32> {
        std::mem::take(&mut self.retired)
    }

    /// Copies `src` to the start of a region we leased and have not yet sent.
    ///
    /// # Safety
    /// `src` must be readable for `len` bytes for the whole call.
    pub unsafe fn write(
        &self,
        segment: u32,
        offset: u64,
        src: *const u8,
        len: u64,
    ) -> Result<(), ShmError> {
        let dst = self.region_ptr(segment, offset, len)?;
        // SAFETY: `dst` is inside a leased region of our own mapping; the caller vouches
        // for `src`.
        unsafe { crate::mapping::copy_nonoverlapping(src, dst, len as usize) };
        Ok(())
    }

    /// Our address of the first `len` bytes of a leased region.
    pub fn region_ptr(&self, segment: u32, offset: u64, len: u64) -> Result<*mut u8, ShmError> {
        let slot = self
            .slots
            .get(&segment)
            .ok_or(ShmError::UnknownRegion { segment, offset })?;
        match slot.leased.get(&offset) {
            Some(&(leased, _)) if len <= leased => {}
            _ => return Err(ShmError::UnknownRegion { segment, offset }),
        }
        let base = slot
            .segment
            .base()
            .ok_or(ShmError::UnknownRegion { segment, offset })?;
        // SAFETY: offset + len lies within the leased range, inside the mapping.
        Ok(unsafe { base.add(offset as usize) })
    }

    pub fn segment(&self, id: u32) -> Option<&Segment> {
        self.slots.get(&id).map(|s| &s.segment)
    }

    pub fn stats(&self) -> PoolStats {
        let mut st = PoolStats::default();
        for slot in self.slots.values() {
            st.segments += 1;
            st.segment_bytes += slot.segment.len();
            st.leased_regions += slot.leased.len();
            st.leased_bytes += slot.leased.values().map(|(l, _)| l).sum::<u64>();
        }
        st
    }
}

#[cfg(test)]
#[path = "pool_tests.rs"]
mod tests;
