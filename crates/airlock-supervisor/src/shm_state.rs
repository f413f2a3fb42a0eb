//! The shared-memory bookkeeping of one call lane: our pool, the peer's segments, and what is
//! owed to the peer (announcements, releases, retirements) before our next frame.

use std::collections::HashMap;
use std::os::fd::OwnedFd;

use airlock_shm::{PeerLimits, Pool, PoolConfig, PoolStats, Segment, ShmError};
use airlock_wire::{Message, Region, Side};

use crate::error::LaneError;

pub(crate) struct ShmState {
    side: Side,
    pool: Pool,
    peer: HashMap<u32, Segment>,
    /// What the peer may make us hold of its segments, and what it holds now (bytes).
    peer_limits: PeerLimits,
    peer_bytes: u64,
    announce: Vec<u32>,
    releases: Vec<Region>,
    /// Mappings the Python layer must drop: our retired segments and the peer's.
    unmapped: Vec<(Side, u32)>,
    /// Our leases not yet sent: being filled now, so the peer's death must not free them.
    unsent: Vec<(u32, u64)>,
    /// Peer regions referenced back in the frame being encoded: a release of one waits until
    /// that frame is out, so the owner takes its hold before ours goes.
    returning: Vec<Region>,
    deferred: Vec<Region>,
}

/// Frames owed to the peer, with the fds that ride on the announcements.
pub(crate) struct Owed {
    pub frames: Vec<Message>,
    pub fds: Vec<OwnedFd>,
}

impl ShmState {
    pub fn new(side: Side, config: PoolConfig) -> Self {
        ShmState {
            side,
            peer_limits: config.peer,
            peer_bytes: 0,
            pool: Pool::new(config),
            peer: HashMap::new(),
            announce: Vec::new(),
            releases: Vec::new(),
            unmapped: Vec::new(),
            unsent: Vec::new(),
            returning: Vec::new(),
            deferred: Vec::new(),
        }
    }

    pub fn side(&self) -> Side {
        self.side
    }

    pub fn peer_side(&self) -> Side {
        match self.side {
            Side::Host => Side::Worker,
            Side::Worker => Side::Host,
        }
    }

    /// Leases `len` bytes of our pool; `frozen` in a segment only our pool writes (a copy we
    /// keep, ADR 0027).
    pub fn alloc(&mut self, len: u64, frozen: bool) -> Result<Region, LaneError> {
        let a = if frozen {
            self.pool.alloc_frozen(len)?
        } else {
            self.pool.alloc(len)?
        };
        if let Some(id) = a.created {
            self.announce.push(id);
        }
        self.unsent.push((a.lease.segment, a.lease.offset));
        Ok(Region {
            side: self.side,
            segment: a.lease.segment,
            offset: a.lease.offset,
            len: a.lease.len,
        })
    }

    /// [`ShmState::alloc`] of a block a node writes itself (see [`crate::CallLane::alloc_born`]).
    pub fn alloc_born(&mut self, len: u64) -> Result<crate::lane::Birth, LaneError> {
        let region = self.alloc(len, false)?;
        let ptr = self.region_ptr(region, len)?;
        let segment = self
            .pool
            .segment(region.segment)
            .ok_or_else(|| LaneError::Protocol(format!("segment {} vanished", region.segment)))?;
        // SAFETY: the region lies inside its segment's mapping, at `offset`.
        let segment_start = unsafe { ptr.sub(region.offset as usize) };
        Ok(crate::lane::Birth {
            region,
            ptr,
            segment_start,
            segment_len: segment.len(),
        })
    }

    /// Gives back an allocation that was never sent (encoding failed half way).
    pub fn unalloc(&mut self, region: Region) {
        if region.side == self.side {
            self.unsent
                .retain(|&l| l != (region.segment, region.offset));
            let _ = self.pool.release(region.segment, region.offset);
        }
    }

    /// A frame went out: every lease allocated before it is the peer's to release now.
    pub fn mark_sent(&mut self) {
        self.unsent.clear();
        self.returning.clear();
        self.releases.append(&mut self.deferred);
    }

    /// Releases of regions the frame being sent refers back to: they travel right behind it,
    /// in the same write, so the owner holds each region for its new view before ours goes.
    pub fn take_deferred(&mut self) -> Option<Message> {
        if self.deferred.is_empty() {
            return None;
        }
        Some(Message::Release {
            regions: std::mem::take(&mut self.deferred),
        })
    }

    /// The frame being encoded refers back to the peer's `region` (a tensor passed on).
    pub fn pin_returned(&mut self, region: Region) {
        if region.side != self.side {
            self.returning.push(region);
        }
    }

    /// Queues a release of a peer region. Our own regions are never held through the peer,
    /// so a release of one is dropped rather than sent back as a forged release.
    /// Our address of a region we leased (for copying into it).
    pub fn region_ptr(&self, region: Region, len: u64) -> Result<*mut u8, LaneError> {
        if region.side != self.side {
            return Err(LaneError::Protocol(
                "cannot write into a peer region".into(),
            ));
        }
        Ok(self.pool.region_ptr(region.segment, region.offset, len)?)
    }

    pub fn queue_release(&mut self, region: Region) {
        if region.side != self.side {
            if self.returning.contains(&region) {
                self.deferred.push(region);
            } else {
                self.releases.push(region);
            }
        } else {
            // A view of one of our own regions that the peer handed back (see
            // `acquire_returned`): its hold is ours, dropped here.
            let _ = self.pool.release(region.segment, region.offset);
        }
    }

    /// We send one of our own regions again (a tensor the peer handed back, passed on): one
    /// more hold, which the peer's release will drop, and no copy.
    pub fn hold_own(&mut self, region: Region) -> Result<(), LaneError> {
        self.acquire_returned(region)
    }

    /// The peer sent back a reference to one of our regions (a tensor we gave it, passed on
    /// unchanged): we hold it for the view we are about to make. Anything but a region we
    /// leased, at least as long as claimed, is the peer's error.
    pub fn acquire_returned(&mut self, region: Region) -> Result<(), LaneError> {
        let leased = (region.side == self.side)
            .then(|| self.pool.lease_len(region.segment, region.offset))
            .flatten();
        match leased {
            Some(len) if len >= region.len => {
                self.pool.acquire(region.segment, region.offset)?;
                Ok(())
            }
            _ => Err(LaneError::Protocol(format!(
                "the peer referenced a region of ours it does not hold (segment {}, offset {})",
                region.segment, region.offset
            ))),
        }
    }

    pub fn has_owed(&self) -> bool {
        !self.announce.is_empty() || !self.releases.is_empty() || self.pool.has_retired()
    }

    /// Takes everything owed to the peer, in the order it must be sent.
    pub fn take_owed(&mut self) -> Result<Owed, LaneError> {
        let mut owed = Owed {
            frames: Vec::new(),
            fds: Vec::new(),
        };
        // Retirements first: the peer then never holds a retired segment and its successor at
        // once, which could put an honest pool over the limits the peer holds it to.
        for id in self.pool.take_retired() {
            self.unmapped.push((self.side, id));
            if let Some(at) = self.announce.iter().position(|&a| a == id) {
                // Never announced, so the peer has nothing to retire.
                self.announce.remove(at);
                continue;
            }
            owed.frames.push(Message::Retire { id });
        }
        for id in self.announce.drain(..) {
            let Some(seg) = self.pool.segment(id) else {
                continue;
            };
            owed.fds.push(seg.fd().try_clone_to_owned()?);
            owed.frames.push(Message::Segment { id, len: seg.len() });
        }
        if !self.releases.is_empty() {
            owed.frames.push(Message::Release {
                regions: std::mem::take(&mut self.releases),
            });
        }
        Ok(owed)
    }

    /// Applies a bookkeeping message from the peer; returns it back if it is not one.
    pub fn absorb(
        &mut self,
        msg: Message,
        fds: &mut std::collections::VecDeque<OwnedFd>,
    ) -> Result<Option<Message>, LaneError> {
        match msg {
            Message::Segment { id, len } => {
                let fd = fds.pop_front().ok_or_else(|| {
                    LaneError::Protocol(format!("segment {id} announced without its fd"))
                })?;
                if self.peer.contains_key(&id) {
                    return Err(LaneError::Protocol(format!("segment {id} announced twice")));
                }
                self.check_peer_limits(id, len)?;
                self.peer.insert(id, Segment::adopt(fd, len)?);
                self.peer_bytes += len;
                Ok(None)
            }
            Message::Retire { id } => {
                let Some(seg) = self.peer.remove(&id) else {
                    return Err(LaneError::Protocol(format!(
                        "retire of unknown segment {id}"
                    )));
                };
                self.peer_bytes -= seg.len();
                self.unmapped.push((self.peer_side(), id));
                Ok(None)
            }
            Message::Release { regions } => {
                for r in regions {
                    if r.side != self.side {
                        return Err(LaneError::Protocol(
                            "release of a region we do not own".into(),
                        ));
                    }
                    self.pool
                        .release(r.segment, r.offset)
                        .map_err(|e| LaneError::Protocol(format!("bad release: {e}")))?;
                }
                Ok(None)
            }
            other => Ok(Some(other)),
        }
    }

    /// Refuses an announcement beyond what the peer may make us hold: its bytes (which a
    /// descriptor can make us map and read) and its count (each an fd of ours).
    fn check_peer_limits(&self, id: u32, len: u64) -> Result<(), LaneError> {
        let limits = self.peer_limits;
        let refuse = |e: ShmError| Err(LaneError::Protocol(e.to_string()));
        if self.peer.len() >= limits.segments {
            return refuse(ShmError::PeerSegments {
                id,
                count: self.peer.len() + 1,
                limit: limits.segments,
            });
        }
        let total = self.peer_bytes.saturating_add(len);
        if total > limits.bytes {
            return refuse(ShmError::PeerBytes {
                id,
                len,
                total,
                limit: limits.bytes,
            });
        }
        Ok(())
    }

    /// A duplicate of a segment's fd (ours or the peer's) for mapping, with its length.
    pub fn segment_fd(&self, side: Side, id: u32) -> Result<(OwnedFd, u64), LaneError> {
        let seg = if side == self.side {
            self.pool.segment(id)
        } else {
            self.peer.get(&id)
        }
        .ok_or_else(|| LaneError::Protocol(format!("unknown {side:?} segment {id}")))?;
        Ok((seg.fd().try_clone_to_owned()?, seg.len()))
    }

    pub fn take_unmapped(&mut self) -> Vec<(Side, u32)> {
        std::mem::take(&mut self.unmapped)
    }

    /// The peer is gone: its holds on our regions with it. Leases not yet sent stay: the
    /// encoder may be copying into one right now (its segment must stay mapped), and the send
    /// that follows fails and reports the death.
    pub fn peer_gone(&mut self) {
        self.pool.release_all_except(&self.unsent);
        self.releases.clear();
    }

    /// Retires our idle segments and frees their memory (see [`Pool::trim`]).
    pub fn trim(&mut self) -> u64 {
        self.pool.trim()
    }

    pub fn pool_stats(&self) -> PoolStats {
        self.pool.stats()
    }

    /// The length of peer segment `id`, if the peer announced it.
    pub fn peer_len(&self, id: u32) -> Option<u64> {
        self.peer.get(&id).map(Segment::len)
    }

    pub fn peer_segments(&self) -> usize {
        self.peer.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state() -> ShmState {
        ShmState::new(Side::Host, PoolConfig::default())
    }

    #[test]
    fn a_reference_back_is_held_only_for_a_region_we_leased() {
        let mut s = state();
        let r = s.alloc(4096, false).unwrap();
        s.mark_sent();
        // The peer hands it back: one more hold; our view's release and the peer's release
        // each drop one.
        s.acquire_returned(r).unwrap();
        s.queue_release(r);
        assert_eq!(s.pool_stats().leased_regions, 1, "the peer's hold remains");
        let msg = Message::Release { regions: vec![r] };
        assert!(s.absorb(msg, &mut Default::default()).unwrap().is_none());
        assert_eq!(s.pool_stats().leased_regions, 0);
        // Now it is free: a reference to it, or to a region never leased, or one claiming
        // more bytes than the lease, is the peer's error.
        assert!(s.acquire_returned(r).is_err());
        let r2 = s.alloc(4096, false).unwrap();
        let longer = Region {
            len: r2.len + 1,
            ..r2
        };
        assert!(s.acquire_returned(longer).is_err());
        let theirs = Region {
            side: Side::Worker,
            ..r2
        };
        assert!(s.acquire_returned(theirs).is_err());
    }

    #[test]
    fn our_release_of_a_region_passed_back_waits_for_the_frame() {
        let mut s = state();
        let theirs = Region {
            side: Side::Worker,
            segment: 3,
            offset: 0,
            len: 64,
        };
        s.pin_returned(theirs);
        s.queue_release(theirs); // our view died while the frame was being encoded
        assert!(
            !s.has_owed(),
            "the release must not go before the reference"
        );
        let trailing = s.take_deferred();
        assert!(matches!(&trailing, Some(Message::Release { regions }) if regions == &[theirs]));
        s.mark_sent();
        assert!(!s.has_owed(), "sent once, behind the frame");
    }

    fn announce(s: &mut ShmState, id: u32, len: u64) -> Result<(), LaneError> {
        let seg = Segment::create("airlock-test", len).unwrap();
        let mut fds = std::collections::VecDeque::from([seg.fd().try_clone_to_owned().unwrap()]);
        s.absorb(Message::Segment { id, len }, &mut fds).map(drop)
    }

    fn limited(bytes: u64, segments: usize) -> ShmState {
        let config = PoolConfig {
            peer: PeerLimits { bytes, segments },
            ..PoolConfig::default()
        };
        ShmState::new(Side::Host, config)
    }

    #[test]
    fn the_peer_is_held_to_its_segment_count() {
        let mut s = limited(1 << 30, 3);
        for id in 0..3 {
            announce(&mut s, id, 4096).unwrap();
        }
        let err = announce(&mut s, 3, 4096).unwrap_err().to_string();
        assert!(err.contains("AIRLOCK_MAX_PEER_SEGMENTS"), "{err}");
        assert_eq!(s.peer_segments(), 3, "the refused segment is not held");
        // A retirement makes room again.
        s.absorb(Message::Retire { id: 0 }, &mut Default::default())
            .unwrap();
        announce(&mut s, 4, 4096).unwrap();
    }

    #[test]
    fn the_peer_is_held_to_its_mapped_bytes() {
        let mut s = limited(8 << 20, 16);
        announce(&mut s, 0, 6 << 20).unwrap();
        let err = announce(&mut s, 1, 4 << 20).unwrap_err().to_string();
        assert!(err.contains("AIRLOCK_MAX_PEER_MAP_MIB"), "{err}");
        assert!(err.contains("10485760 bytes"), "{err}");
        s.absorb(Message::Retire { id: 0 }, &mut Default::default())
            .unwrap();
        announce(&mut s, 1, 4 << 20).unwrap();
    }

    #[test]
    fn retirements_travel_before_announcements() {
        let config = PoolConfig {
            min_segment: 4 << 20,
            keep_idle: 0,
            ..PoolConfig::default()
        };
        let mut s = ShmState::new(Side::Host, config);
        let first = s.alloc(4096, false).unwrap();
        s.take_owed().unwrap();
        s.mark_sent();
        let msg = Message::Release {
            regions: vec![first],
        };
        s.absorb(msg, &mut Default::default()).unwrap(); // idle: retired (keep_idle 0)
        s.alloc(4096, false).unwrap();
        let owed = s.take_owed().unwrap();
        let kinds: Vec<&str> = owed.frames.iter().map(Message::kind).collect();
        assert_eq!(kinds, ["Retire", "Segment"]);
    }

    #[test]
    fn a_segment_retired_before_its_announcement_is_never_mentioned() {
        let config = PoolConfig {
            min_segment: 4 << 20,
            keep_idle: 0,
            ..PoolConfig::default()
        };
        let mut s = ShmState::new(Side::Host, config);
        let r = s.alloc(4096, false).unwrap();
        s.unalloc(r); // encoding failed: idle at once, retired
        let owed = s.take_owed().unwrap();
        assert!(owed.frames.is_empty(), "{:?}", owed.frames);
        assert!(owed.fds.is_empty());
    }
}
