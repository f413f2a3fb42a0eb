//! The shared-memory bookkeeping of one call lane: our pool, the peer's segments, and what is
//! owed to the peer (announcements, releases, retirements) before our next frame.

use std::collections::HashMap;
use std::os::fd::OwnedFd;

use airlock_shm::{Pool, PoolConfig, PoolStats, Segment};
use airlock_wire::{Message, Region, Side};

use crate::error::LaneError;

pub(crate) struct ShmState {
    side: Side,
    pool: Pool,
    peer: HashMap<u32, Segment>,
    announce: Vec<u32>,
    releases: Vec<Region>,
    /// Mappings the Python layer must drop: our retired segments and the peer's.
    unmapped: Vec<(Side, u32)>,
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
            pool: Pool::new(config),
            peer: HashMap::new(),
            announce: Vec::new(),
            releases: Vec::new(),
            unmapped: Vec::new(),
        }
    }

    pub fn peer_side(&self) -> Side {
        match self.side {
            Side::Host => Side::Worker,
            Side::Worker => Side::Host,
        }
    }

    pub fn alloc(&mut self, len: u64) -> Result<Region, LaneError> {
        let a = self.pool.alloc(len)?;
        if let Some(id) = a.created {
            self.announce.push(id);
        }
        Ok(Region {
            side: self.side,
            segment: a.lease.segment,
            offset: a.lease.offset,
            len: a.lease.len,
        })
    }

    /// Gives back an allocation that was never sent (encoding failed half way).
    pub fn unalloc(&mut self, region: Region) {
        if region.side == self.side {
            let _ = self.pool.release(region.segment, region.offset);
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
            self.releases.push(region);
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
        for id in self.announce.drain(..) {
            // A segment retired before it was ever announced needs no announcement.
            let Some(seg) = self.pool.segment(id) else {
                continue;
            };
            owed.fds.push(seg.fd().try_clone_to_owned()?);
            owed.frames.push(Message::Segment { id, len: seg.len() });
        }
        for id in self.pool.take_retired() {
            self.unmapped.push((self.side, id));
            owed.frames.push(Message::Retire { id });
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
                self.peer.insert(id, Segment::adopt(fd, len)?);
                Ok(None)
            }
            Message::Retire { id } => {
                if self.peer.remove(&id).is_none() {
                    return Err(LaneError::Protocol(format!(
                        "retire of unknown segment {id}"
                    )));
                }
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

    /// The peer is gone: its holds on our regions with it.
    pub fn peer_gone(&mut self) {
        self.pool.release_all();
        self.releases.clear();
    }

    pub fn pool_stats(&self) -> PoolStats {
        self.pool.stats()
    }

    pub fn peer_segments(&self) -> usize {
        self.peer.len()
    }
}
