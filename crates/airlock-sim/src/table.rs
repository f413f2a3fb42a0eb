//! The booking protocol: how processes find, claim, update and recycle slots of the shared
//! table with compare-and-swap alone, so no process ever waits on a lock another one holds.
//!
//! A booking is one slot owned by a `(pid, tag)` key. Its life: `EMPTY` → `CLAIMED` (by CAS;
//! the claimer writes the tag) → `PENDING` (tag visible) → `LIVE` (bytes may change) →
//! `RECLAIMING` (bytes reached zero) → `EMPTY`. Two processes booking the same new key at once
//! may each claim a slot; each publishes `PENDING` and then looks for the other (all sequentially
//! consistent), so at least one sees the other and withdraws. A key therefore has at most one
//! `LIVE` slot. Bytes change by CAS on a word that carries the slot's generation, which
//! recycling bumps: a writer that found the slot before it was recycled fails and looks again.
//!
//! The device total lives in the header's `used`, raised *before* a slot grows (which makes the
//! checked booking an atomic admission, like a CUDA allocation) and lowered *after* it shrinks,
//! so it never reads below the sum of the slots.
//!
//! A process killed in the middle of a transition leaves its slot `CLAIMED`, `PENDING` or
//! `RECLAIMING` with its pid as the actor; whoever runs into such a slot later, or `reap`, undoes
//! the transition once that pid is gone.

use std::sync::atomic::Ordering::SeqCst;

use crate::error::SimError;
use crate::layout::{BYTES_MAX, Header, Slot, TAG_MAX, state, tag_hash, val};
use crate::process;
use crate::wait::{STUCK_ROUNDS, backoff, me};

/// A tag, padded into the words a slot stores it in.
pub struct TagKey<'t> {
    tag: &'t str,
    hash: u64,
    words: [u64; TAG_MAX / 8],
}

impl<'t> TagKey<'t> {
    pub fn new(tag: &'t str) -> Result<TagKey<'t>, SimError> {
        if tag.len() > TAG_MAX {
            return Err(SimError::TagTooLong {
                len: tag.len(),
                max: TAG_MAX,
            });
        }
        let mut padded = [0u8; TAG_MAX];
        padded[..tag.len()].copy_from_slice(tag.as_bytes());
        let mut words = [0u64; TAG_MAX / 8];
        for (w, chunk) in words.iter_mut().zip(padded.chunks_exact(8)) {
            let mut b = [0u8; 8];
            b.copy_from_slice(chunk);
            *w = u64::from_le_bytes(b);
        }
        Ok(TagKey {
            tag,
            hash: tag_hash(tag),
            words,
        })
    }
}

/// What a scan for a key found.
enum Seen {
    /// The key's live slot and the generation it had when we read it.
    Found(usize, u64),
    /// A slot of this key in transition (state as read): wait for it to settle.
    Busy(usize, u64),
    Absent,
}

/// What [`Table::update`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Updated {
    pub old: u64,
    pub new: u64,
    /// For a growth, the device total just after this growth was added to it (the order in
    /// which growths past the total are charged); otherwise zero.
    pub used_after: u64,
}

/// The shared table seen through one mapping.
pub struct Table<'a> {
    pub header: &'a Header,
    pub slots: &'a [Slot],
}

impl Table<'_> {
    fn tag_eq(slot: &Slot, key: &TagKey<'_>) -> bool {
        slot.tag_len.load(SeqCst) as usize == key.tag.len()
            && slot.tag_hash.load(SeqCst) == key.hash
            && slot
                .tag
                .iter()
                .zip(key.words)
                .all(|(w, k)| w.load(SeqCst) == k)
    }

    fn write_tag(slot: &Slot, key: &TagKey<'_>) {
        for (w, k) in slot.tag.iter().zip(key.words) {
            w.store(k, SeqCst);
        }
        slot.tag_hash.store(key.hash, SeqCst);
        slot.tag_len.store(key.tag.len() as u32, SeqCst);
    }

    fn read_tag(slot: &Slot) -> String {
        let len = (slot.tag_len.load(SeqCst) as usize).min(TAG_MAX);
        let bytes: Vec<u8> = slot
            .tag
            .iter()
            .flat_map(|w| w.load(SeqCst).to_le_bytes())
            .take(len)
            .collect();
        String::from_utf8_lossy(&bytes).into_owned()
    }

    fn scan(&self, pid: u32, key: &TagKey<'_>) -> Seen {
        let mut busy = None;
        for (i, slot) in self.slots.iter().enumerate() {
            let v = slot.val.load(SeqCst);
            let s = slot.state.load(SeqCst);
            let kind = state::kind(s);
            if state::pid(s) != pid
                || !matches!(kind, state::LIVE | state::PENDING | state::RECLAIMING)
                || !Self::tag_eq(slot, key)
            {
                continue;
            }
            if slot.state.load(SeqCst) != s {
                // Recycled while we compared its tag: look again.
                busy = Some((i, s));
            } else if kind == state::LIVE {
                return Seen::Found(i, val::generation(v));
            } else {
                busy = Some((i, s));
            }
        }
        busy.map_or(Seen::Absent, |(i, s)| Seen::Busy(i, s))
    }

    /// Claims an empty slot for the key. `Ok(None)`: someone else published the same key at
    /// the same time and we withdrew; scan again.
    fn claim(&self, pid: u32, key: &TagKey<'_>) -> Result<Option<(usize, u64)>, SimError> {
        let me = me();
        let claimed = state::make(state::CLAIMED, me, 0);
        let Some(i) = self.slots.iter().position(|s| {
            s.state
                .compare_exchange(state::EMPTY, claimed, SeqCst, SeqCst)
                .is_ok()
        }) else {
            // Slots left behind by killed processes may be what fills the table.
            if self.recover_dead_actors() > 0 {
                return Ok(None);
            }
            return Err(SimError::Full {
                slots: self.slots.len(),
            });
        };
        let slot = &self.slots[i];
        Self::write_tag(slot, key);
        let generation = val::generation(slot.val.load(SeqCst));
        let pending = state::make(state::PENDING, me, pid);
        slot.state.store(pending, SeqCst);
        let duplicate = self.slots.iter().enumerate().any(|(j, other)| {
            let s = other.state.load(SeqCst);
            j != i
                && state::pid(s) == pid
                && matches!(
                    state::kind(s),
                    state::PENDING | state::LIVE | state::RECLAIMING
                )
                && Self::tag_eq(other, key)
        });
        if duplicate {
            slot.state.store(state::EMPTY, SeqCst);
            return Ok(None);
        }
        let live = state::make(state::LIVE, 0, pid);
        if slot
            .state
            .compare_exchange(pending, live, SeqCst, SeqCst)
            .is_err()
        {
            return Ok(None);
        }
        Ok(Some((i, generation)))
    }

    /// Raises the device total by `delta` before a slot grows, returning the new total; with a
    /// `limit`, refuses to go past it (the error is the room left).
    fn reserve(&self, delta: u64, limit: Option<u64>) -> Result<u64, u64> {
        let used = &self.header.used;
        let Some(limit) = limit else {
            return Ok(used.fetch_add(delta, SeqCst).saturating_add(delta));
        };
        let mut u = used.load(SeqCst);
        loop {
            if u.checked_add(delta).is_none_or(|n| n > limit) {
                return Err(limit.saturating_sub(u));
            }
            match used.compare_exchange_weak(u, u + delta, SeqCst, SeqCst) {
                Ok(_) => return Ok(u + delta),
                Err(now) => u = now,
            }
        }
    }

    /// Sets the booking of `(pid, tag)` to `f(current)`. With a `limit`, growth that would take
    /// the device total past it fails as out of memory.
    pub fn update(
        &self,
        pid: u32,
        tag: &str,
        limit: Option<u64>,
        f: impl Fn(u64) -> Result<u64, SimError>,
    ) -> Result<Updated, SimError> {
        if pid == 0 {
            return Err(SimError::InvalidPid { pid });
        }
        let key = TagKey::new(tag)?;
        let mut round = 0;
        loop {
            let (i, generation) = match self.scan(pid, &key) {
                Seen::Found(i, g) => (i, g),
                Seen::Busy(i, s) => {
                    self.wait(i, s, &mut round);
                    continue;
                }
                Seen::Absent => {
                    if f(0)? == 0 {
                        return Ok(Updated {
                            old: 0,
                            new: 0,
                            used_after: 0,
                        });
                    }
                    match self.claim(pid, &key)? {
                        Some(found) => found,
                        None => {
                            backoff(&mut round);
                            continue;
                        }
                    }
                }
            };
            if let Some(done) = self.apply(i, generation, pid, tag, limit, &f)? {
                return Ok(done);
            }
        }
    }

    /// Sets the live slot `i` of `(pid, tag)`, read at `generation`, to `f(current)`; `None`
    /// when the slot changed meanwhile (the caller looks again).
    fn apply(
        &self,
        i: usize,
        generation: u64,
        pid: u32,
        tag: &str,
        limit: Option<u64>,
        f: &impl Fn(u64) -> Result<u64, SimError>,
    ) -> Result<Option<Updated>, SimError> {
        let slot = &self.slots[i];
        let cur = slot.val.load(SeqCst);
        if val::generation(cur) != generation {
            return Ok(None);
        }
        let old = val::bytes(cur);
        let new = match f(old) {
            Ok(n) if n > BYTES_MAX => Err(SimError::TooLarge {
                bytes: n,
                max: BYTES_MAX,
            }),
            other => other,
        };
        let new = match new {
            Ok(n) => n,
            Err(e) => {
                if old == 0 {
                    self.reclaim(i, pid);
                }
                return Err(e);
            }
        };
        let reserved = if new > old {
            self.reserve(new - old, limit)
        } else {
            Ok(0)
        };
        let used_after = match reserved {
            Ok(u) => u,
            Err(free) => {
                if old == 0 {
                    self.reclaim(i, pid);
                }
                return Err(SimError::OutOfMemory {
                    pid,
                    tag: tag.to_owned(),
                    requested: new - old,
                    free,
                });
            }
        };
        match slot
            .val
            .compare_exchange(cur, val::make(generation, new), SeqCst, SeqCst)
        {
            Ok(_) => {
                if new < old {
                    self.header.used.fetch_sub(old - new, SeqCst);
                }
                if new == 0 {
                    self.reclaim(i, pid);
                }
                Ok(Some(Updated {
                    old,
                    new,
                    used_after,
                }))
            }
            Err(_) => {
                if new > old {
                    self.header.used.fetch_sub(new - old, SeqCst);
                }
                Ok(None)
            }
        }
    }

    /// Waits for a slot in transition; undoes the transition if its actor died.
    fn wait(&self, i: usize, s: u64, round: &mut u32) {
        backoff(round);
        if *round % STUCK_ROUNDS == 0 && self.slots[i].state.load(SeqCst) == s {
            self.recover(i, s);
        }
    }

    /// Undoes the transition of slot `i` (in state `s`) if the process making it is gone.
    /// Returns whether it did.
    fn recover(&self, i: usize, s: u64) -> bool {
        let slot = &self.slots[i];
        let kind = state::kind(s);
        if !matches!(kind, state::CLAIMED | state::PENDING | state::RECLAIMING)
            || process::alive(state::actor(s))
        {
            return false;
        }
        match kind {
            state::RECLAIMING => {
                let v = slot.val.load(SeqCst);
                let next = if val::bytes(v) == 0 {
                    // Bumping the generation again is harmless if the actor already did.
                    if slot
                        .val
                        .compare_exchange(v, val::make(val::next(v), 0), SeqCst, SeqCst)
                        .is_err()
                    {
                        return false;
                    }
                    state::EMPTY
                } else {
                    state::make(state::LIVE, 0, state::pid(s))
                };
                slot.state.compare_exchange(s, next, SeqCst, SeqCst).is_ok()
            }
            // Bytes are still zero: only LIVE slots are written.
            _ => slot
                .state
                .compare_exchange(s, state::EMPTY, SeqCst, SeqCst)
                .is_ok(),
        }
    }

    /// Undoes every transition whose actor is gone; returns how many.
    pub fn recover_dead_actors(&self) -> usize {
        self.slots
            .iter()
            .enumerate()
            .filter(|&(i, slot)| {
                let s = slot.state.load(SeqCst);
                s != state::EMPTY && state::kind(s) != state::LIVE && self.recover(i, s)
            })
            .count()
    }

    /// Recycles slot `i` if it is a live booking of `pid` with zero bytes.
    fn reclaim(&self, i: usize, pid: u32) {
        let slot = &self.slots[i];
        let live = state::make(state::LIVE, 0, pid);
        let mine = state::make(state::RECLAIMING, me(), pid);
        if slot
            .state
            .compare_exchange(live, mine, SeqCst, SeqCst)
            .is_err()
        {
            return;
        }
        loop {
            let v = slot.val.load(SeqCst);
            if val::bytes(v) != 0 {
                // Booked again meanwhile: it stays.
                let _ = slot.state.compare_exchange(mine, live, SeqCst, SeqCst);
                return;
            }
            if slot
                .val
                .compare_exchange(v, val::make(val::next(v), 0), SeqCst, SeqCst)
                .is_ok()
            {
                break;
            }
        }
        let _ = slot
            .state
            .compare_exchange(mine, state::EMPTY, SeqCst, SeqCst);
    }

    /// Drops every booking of `pid`; returns the bytes released.
    pub fn release_process(&self, pid: u32) -> u64 {
        let live = state::make(state::LIVE, 0, pid);
        let mut released = 0;
        for (i, slot) in self.slots.iter().enumerate() {
            loop {
                let v = slot.val.load(SeqCst);
                if slot.state.load(SeqCst) != live {
                    break;
                }
                let b = val::bytes(v);
                if b == 0 {
                    self.reclaim(i, pid);
                    break;
                }
                if slot
                    .val
                    .compare_exchange(v, val::make(val::generation(v), 0), SeqCst, SeqCst)
                    .is_ok()
                {
                    self.header.used.fetch_sub(b, SeqCst);
                    released += b;
                    self.reclaim(i, pid);
                    break;
                }
            }
        }
        released
    }

    /// Every live booking with bytes, as `(pid, tag, bytes)`, in slot order.
    pub fn bookings(&self) -> Vec<(u32, String, u64)> {
        self.slots
            .iter()
            .filter_map(|slot| {
                let v = slot.val.load(SeqCst);
                let s = slot.state.load(SeqCst);
                if state::kind(s) != state::LIVE || val::bytes(v) == 0 {
                    return None;
                }
                let tag = Self::read_tag(slot);
                // Recycled while we read it: it was not a booking at that moment anyway.
                (slot.state.load(SeqCst) == s
                    && val::generation(slot.val.load(SeqCst)) == val::generation(v))
                .then(|| (state::pid(s), tag, val::bytes(v)))
            })
            .collect()
    }

    /// Bytes booked by `pid`, over all its tags.
    pub fn used_by(&self, pid: u32) -> u64 {
        let live = state::make(state::LIVE, 0, pid);
        self.slots
            .iter()
            .filter(|s| s.state.load(SeqCst) == live)
            .map(|s| val::bytes(s.val.load(SeqCst)))
            .sum()
    }

    /// Slots not `EMPTY`.
    pub fn slots_in_use(&self) -> usize {
        self.slots
            .iter()
            .filter(|s| s.state.load(SeqCst) != state::EMPTY)
            .count()
    }

    /// The distinct pids with live bookings.
    pub fn pids(&self) -> Vec<u32> {
        let mut pids: Vec<u32> = self
            .slots
            .iter()
            .map(|s| s.state.load(SeqCst))
            .filter(|&s| state::kind(s) == state::LIVE)
            .map(state::pid)
            .collect();
        pids.sort_unstable();
        pids.dedup();
        pids
    }
}

#[cfg(test)]
#[path = "table_tests.rs"]
mod tests;
