//! `Lane`: the shared-memory operations of one call lane, for the Python tensor codec.

use std::os::fd::IntoRawFd;
use std::sync::Arc;

use airlock_supervisor::CallLane;
use airlock_wire::{Region, Side};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::errors::ProtocolError;

pub fn side_code(s: Side) -> u8 {
    match s {
        Side::Host => 0,
        Side::Worker => 1,
    }
}

pub fn side_from(code: u8) -> PyResult<Side> {
    match code {
        0 => Ok(Side::Host),
        1 => Ok(Side::Worker),
        _ => Err(pyo3::exceptions::PyValueError::new_err(
            "side must be 0 or 1",
        )),
    }
}

/// The region `(side, segment, offset, len)` as the Python codec spells it.
fn region(side: u8, segment: u32, offset: u64, len: u64) -> PyResult<Region> {
    Ok(Region {
        side: side_from(side)?,
        segment,
        offset,
        len,
    })
}

pub fn region_tuple(r: &Region) -> (u8, u32, u64, u64) {
    (side_code(r.side), r.segment, r.offset, r.len)
}

/// One call lane's pool and segments, as the tensor codec needs them.
#[pyclass(frozen, module = "comfy_airlock._native")]
pub struct Lane {
    pub inner: Arc<CallLane>,
    pub(crate) side: Side,
    /// `(side, segment) -> mapping`, owned by the Python codec.
    #[pyo3(get)]
    mappings: Py<PyDict>,
}

impl Lane {
    pub fn new(py: Python<'_>, inner: Arc<CallLane>, side: Side) -> Lane {
        Lane {
            inner,
            side,
            mappings: PyDict::new(py).unbind(),
        }
    }
}

#[pymethods]
impl Lane {
    /// 0 in the host, 1 in a worker.
    #[getter]
    fn side(&self) -> u8 {
        side_code(self.side)
    }

    /// Leases `nbytes` of our pool: `(side, segment, offset, length)`; `frozen`: in a segment
    /// that only our pool writes, for a copy we keep (ADR 0027).
    #[pyo3(signature = (nbytes, frozen=false))]
    fn alloc(&self, py: Python<'_>, nbytes: u64, frozen: bool) -> PyResult<(u8, u32, u64, u64)> {
        let r = crate::exit_gate::detach(py, || {
            if frozen {
                self.inner.alloc_frozen(nbytes)
            } else {
                self.inner.alloc(nbytes)
            }
        })
        .map_err(|e| ProtocolError::new_err(format!("cannot lease shared memory: {e}")))?;
        Ok(region_tuple(&r))
    }

    /// Copies `nbytes` from address `src` (the data pointer of a live, dense tensor or array
    /// the caller holds) into our leased region, without the GIL. Private to the codec: torch's
    /// own parallel copy spins its OpenMP threads, which starves the other process on small
    /// machines.
    fn write(
        &self,
        py: Python<'_>,
        region: (u8, u32, u64, u64),
        src: usize,
        nbytes: u64,
    ) -> PyResult<()> {
        let (side, segment, offset, len) = region;
        let region = self::region(side, segment, offset, len)?;
        let inner = self.inner.clone();
        // SAFETY: the codec passes the data pointer of an object it keeps alive for the call,
        // spanning `nbytes`.
        crate::exit_gate::detach(py, move || unsafe {
            inner.write(region, src as *const u8, nbytes)
        })
        .map_err(|e| ProtocolError::new_err(format!("cannot write shared memory: {e}")))
    }

    /// Returns a lease that was never sent.
    fn unalloc(&self, side: u8, segment: u32, offset: u64, len: u64) -> PyResult<()> {
        self.inner.unalloc(region(side, segment, offset, len)?);
        Ok(())
    }

    /// The value being encoded refers back to this peer region (a tensor passed on without a
    /// copy): our release of it waits until the frame is sent.
    fn pin_returned(&self, side: u8, segment: u32, offset: u64, len: u64) -> PyResult<()> {
        self.inner.pin_returned(region(side, segment, offset, len)?);
        Ok(())
    }

    /// Sends one of our own regions again (a tensor the peer handed back, passed on): takes
    /// one more hold for the peer, which its release drops.
    fn hold_own(&self, side: u8, segment: u32, offset: u64, len: u64) -> PyResult<()> {
        self.inner
            .hold_own(region(side, segment, offset, len)?)
            .map_err(|e| ProtocolError::new_err(e.to_string()))
    }

    /// The region of a block this worker's node wrote straight into our pool (a birth, ADR
    /// 0044) that starts at `addr` and holds `nbytes`, with one more hold for the peer; None
    /// for any other address (the caller copies it).
    fn born(&self, addr: usize, nbytes: u64) -> Option<(u8, u32, u64, u64)> {
        crate::born::send(&self.inner, addr, nbytes).map(|r| region_tuple(&r))
    }

    /// Our last view of a peer region is gone. Safe from finalizers on any thread.
    fn release(&self, side: u8, segment: u32, offset: u64, len: u64) -> PyResult<()> {
        self.inner.release(region(side, segment, offset, len)?);
        Ok(())
    }

    /// A callable `(side, segment, offset, len)` that releases a region of this lane like
    /// [`Lane::release`], holding the lane's core but not this object: for bookkeeping that
    /// the lane itself holds (a reference back to the lane would be a cycle the collector
    /// cannot see through).
    fn releaser(&self) -> Releaser {
        Releaser {
            inner: self.inner.clone(),
        }
    }

    /// A new fd for mapping segment `(side, segment)`, which the caller must close, and the
    /// segment's length.
    fn segment_fd(&self, side: u8, segment: u32) -> PyResult<(i32, u64)> {
        let (fd, len) = self
            .inner
            .segment_fd(side_from(side)?, segment)
            .map_err(|e| ProtocolError::new_err(e.to_string()))?;
        Ok((fd.into_raw_fd(), len))
    }

    /// Retires our idle segments and frees their memory now (their retirement reaches the peer
    /// with our next frame); returns the bytes given back. Safe from any thread.
    fn trim(&self, py: Python<'_>) -> u64 {
        crate::exit_gate::detach(py, || self.inner.trim())
    }

    /// Segments retired since the last call, whose mappings should be dropped.
    fn take_unmapped(&self) -> Vec<(u8, u32)> {
        self.inner
            .take_unmapped()
            .into_iter()
            .map(|(s, id)| (side_code(s), id))
            .collect()
    }

    /// Pool counters: `segments`, `segment_bytes`, `leased_regions`, `leased_bytes`,
    /// `peer_segments`.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = self.inner.stats();
        let d = PyDict::new(py);
        d.set_item("segments", s.pool.segments)?;
        d.set_item("segment_bytes", s.pool.segment_bytes)?;
        d.set_item("leased_regions", s.pool.leased_regions)?;
        d.set_item("leased_bytes", s.pool.leased_bytes)?;
        d.set_item("peer_segments", s.peer_segments)?;
        Ok(d)
    }
}

/// See [`Lane::releaser`].
#[pyclass(frozen, module = "comfy_airlock._native")]
pub struct Releaser {
    inner: Arc<CallLane>,
}

#[pymethods]
impl Releaser {
    fn __call__(&self, side: u8, segment: u32, offset: u64, len: u64) -> PyResult<()> {
        self.inner.release(region(side, segment, offset, len)?);
        Ok(())
    }
}

/// Peer input this process refused since it started, by reason (`frame_too_large`,
/// `truncated`, `malformed`, `protocol`, `bad_token`, `version_mismatch`, `wrong_lane`,
/// `pid_mismatch`, `foreign_peer`, `forked_child`).
#[pyfunction]
pub fn rejections(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let d = PyDict::new(py);
    for (reason, n) in airlock_supervisor::rejections() {
        d.set_item(reason.name(), n)?;
    }
    Ok(d)
}
