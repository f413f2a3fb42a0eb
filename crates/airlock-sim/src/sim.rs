//! `SimGpu`: a simulated card that several processes book memory on, for tests without a GPU.
//!
//! The card is a small file that every process maps shared: the host, its workers, and the fake
//! `libnvidia-ml.so.1` loaded into any of them all read and write the same bytes, so what one
//! process books every other sees at once, the way every process sees a real card's memory. The
//! test that creates a card hands its path to workers in [`SIM_GPU_ENV`](crate::SIM_GPU_ENV)
//! (`card.rs` creates and opens the file).
//!
//! A booking is `(pid, tag) -> bytes`: a process's allocation for one purpose (a model id, its
//! CUDA context...). [`SimGpu::book`] sets it, which is what a reporter of residency needs; a
//! process gone without releasing is cleaned up by [`SimGpu::release_process`] or
//! [`SimGpu::reap`]. How a process *sees* free memory is the card's [`Semantics`]: on a
//! device-wide card every reading is the truth; on a WDDM card (`wddm.rs`) each process reads
//! its own budget, and over-admission demotes bystanders, counted per process.

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering::SeqCst;

use crate::error::SimError;
use crate::layout::Header;
use crate::mapping::Mapping;
use crate::procs::Procs;
use crate::semantics::Semantics;
use crate::table::{Table, Updated};
use crate::wddm::{Demotions, ProcessView, Wddm};

/// One booking.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Booking {
    pub pid: u32,
    pub tag: String,
    pub bytes: u64,
}

/// A simulated card, mapped into this process.
#[derive(Debug)]
pub struct SimGpu {
    pub(crate) path: PathBuf,
    pub(crate) map: Mapping,
    pub(crate) slot_count: usize,
    pub(crate) proc_count: usize,
}

impl SimGpu {
    fn header(&self) -> &Header {
        // SAFETY: checked at open/create: the mapping holds a published header.
        unsafe { self.map.header() }
    }

    fn table(&self) -> Table<'_> {
        Table {
            header: self.header(),
            // SAFETY: checked at open/create: the file is exactly header + slot_count slots.
            slots: unsafe { self.map.slots(self.slot_count) },
        }
    }

    fn procs(&self) -> Procs<'_> {
        Procs {
            // SAFETY: checked at open/create: the file holds the records after the slots.
            records: unsafe { self.map.procs(self.slot_count, self.proc_count) },
        }
    }

    /// The WDDM state, on a WDDM card.
    fn wddm(&self) -> Option<Wddm<'_>> {
        match self.semantics() {
            Semantics::Wddm(params) => Some(Wddm {
                header: self.header(),
                table: self.table(),
                procs: self.procs(),
                params,
            }),
            _ => None,
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn name(&self) -> String {
        self.header().name()
    }

    /// The card's UUID in NVML's spelling (`GPU-...`).
    pub fn uuid(&self) -> String {
        self.header().uuid()
    }

    pub fn total(&self) -> u64 {
        self.header().total.load(SeqCst)
    }

    pub fn semantics(&self) -> Semantics {
        let h = self.header();
        let w = &h.wddm;
        Semantics::from_header(
            h.semantics,
            (w.pinned_bias, w.repartition_bias, w.repartition_below),
        )
    }

    /// Bytes booked on the card, by every process.
    pub fn used(&self) -> u64 {
        self.header().used.load(SeqCst)
    }

    /// The device's free memory, `total - used` (zero when overbooked): what NVML reports.
    pub fn free(&self) -> u64 {
        self.total().saturating_sub(self.used())
    }

    /// Bytes booked past the total (zero unless overbooked): on a WDDM card, memory that lives
    /// in shared system memory.
    pub fn overcommitted(&self) -> u64 {
        self.used().saturating_sub(self.total())
    }

    /// What `pid` reads as free memory (`torch.cuda.mem_get_info` in that process) under the
    /// card's semantics. Device-wide, that is [`SimGpu::free`]; on WDDM, its budget less its
    /// own bookings, within `[0, total]` (a process not attached reads what it would if it
    /// attached now).
    pub fn free_seen_by(&self, pid: u32) -> u64 {
        match self.wddm() {
            Some(w) => w.view(pid),
            None => self.free(),
        }
    }

    /// `pid` starts on the card (creates its CUDA context) without booking yet. On WDDM its
    /// budget is pinned now and every other process's is re-partitioned; booking attaches a
    /// process that is not. Device-wide, nothing happens. Returns whether it was a start.
    pub fn attach(&self, pid: u32) -> Result<bool, SimError> {
        if pid == 0 {
            return Err(SimError::InvalidPid { pid });
        }
        self.wddm().map_or(Ok(false), |w| w.attach(pid))
    }

    /// A re-partition event (WDDM): every attached process's budget is set from the truth now.
    /// Device-wide, nothing happens.
    pub fn repartition(&self) {
        if let Some(w) = self.wddm() {
            w.repartition(None);
        }
    }

    /// Re-partition events so far (zero on a device-wide card).
    pub fn repartitions(&self) -> u64 {
        self.header().repartitions.load(SeqCst)
    }

    /// What over-admission cost `pid` while attached (zero device-wide: there it would be an
    /// out-of-memory error, not a demotion).
    pub fn demotions(&self, pid: u32) -> Demotions {
        self.wddm()
            .map_or_else(Demotions::default, |w| w.demotions(pid))
    }

    /// Demotions summed over every process ever attached to the card.
    pub fn demotions_total(&self) -> Demotions {
        self.wddm()
            .map_or_else(Demotions::default, |w| w.demotions_total())
    }

    /// Every process on the card, ascending by pid: on WDDM the attached ones, device-wide
    /// those holding bookings.
    pub fn process_views(&self) -> Vec<ProcessView> {
        match self.wddm() {
            Some(w) => w.views(),
            None => {
                let free = self.free();
                self.processes()
                    .into_iter()
                    .map(|(pid, used)| ProcessView {
                        pid,
                        used,
                        free_seen: free,
                        repartitioned: false,
                        demotions: Demotions::default(),
                    })
                    .collect()
            }
        }
    }

    /// Runs a booking change, attaching the process first on WDDM when it may grow, and
    /// charging its growth afterwards.
    fn change(
        &self,
        pid: u32,
        may_grow: bool,
        update: impl FnOnce(&Table<'_>) -> Result<Updated, SimError>,
    ) -> Result<Updated, SimError> {
        let wddm = self.wddm();
        if let (Some(w), true) = (&wddm, may_grow) {
            if pid == 0 {
                return Err(SimError::InvalidPid { pid });
            }
            w.attach(pid)?;
        }
        let u = update(&self.table())?;
        if let Some(w) = &wddm
            && u.new > u.old
        {
            w.grew(pid, u.new - u.old, u.used_after);
        }
        Ok(u)
    }

    /// Sets the booking of `(pid, tag)` to `bytes` (zero releases it); returns the previous
    /// value. Booking past the total is allowed (on WDDM it demotes bystanders): see
    /// [`SimGpu::book_checked`].
    pub fn book(&self, pid: u32, tag: &str, bytes: u64) -> Result<u64, SimError> {
        self.change(pid, bytes > 0, |t| t.update(pid, tag, None, |_| Ok(bytes)))
            .map(|u| u.old)
    }

    /// [`SimGpu::book`] that fails like a CUDA allocation when the growth does not fit in what
    /// `pid` reads as free. Device-wide that is the device's free memory, and the check and the
    /// booking are one atomic step across processes. On WDDM it is the process's budget, blind
    /// to others: growth past the device's total succeeds and demotes bystanders, as the seed
    /// measured (the check is not atomic against the same pid booking from two threads).
    pub fn book_checked(&self, pid: u32, tag: &str, bytes: u64) -> Result<u64, SimError> {
        if self.wddm().is_none() {
            return self
                .table()
                .update(pid, tag, Some(self.total()), |_| Ok(bytes))
                .map(|u| u.old);
        }
        self.change(pid, bytes > 0, |t| {
            let budget = self.free_seen_by(pid);
            t.update(pid, tag, None, |old| {
                let growth = bytes.saturating_sub(old);
                if growth > budget {
                    return Err(SimError::OutOfMemory {
                        pid,
                        tag: tag.to_owned(),
                        requested: growth,
                        free: budget,
                    });
                }
                Ok(bytes)
            })
        })
        .map(|u| u.old)
    }

    /// Adds `delta` (negative: frees) to the booking of `(pid, tag)`; returns the new value.
    /// Freeing more than is booked is an error.
    pub fn add(&self, pid: u32, tag: &str, delta: i64) -> Result<u64, SimError> {
        self.change(pid, delta > 0, |t| {
            t.update(pid, tag, None, |booked| {
                booked
                    .checked_add_signed(delta)
                    .ok_or_else(|| SimError::Underflow {
                        pid,
                        tag: tag.to_owned(),
                        booked,
                        delta,
                    })
            })
        })
        .map(|u| u.new)
    }

    /// Drops the booking of `(pid, tag)`; returns the bytes it held (0 if none).
    pub fn release(&self, pid: u32, tag: &str) -> Result<u64, SimError> {
        self.book(pid, tag, 0)
    }

    /// Drops every booking of `pid` (a process that exited); returns the bytes released. On
    /// WDDM the process detaches, which re-partitions the others.
    pub fn release_process(&self, pid: u32) -> u64 {
        let released = self.table().release_process(pid);
        if let Some(w) = self.wddm() {
            w.detach(pid);
        }
        released
    }

    /// Drops the bookings (and, on WDDM, the attachment) of every pid that is no longer a live
    /// process (zombies included), and undoes transitions that a killed process left half
    /// done. Returns those pids, in ascending order.
    pub fn reap(&self) -> Vec<u32> {
        let table = self.table();
        table.recover_dead_actors();
        let mut pids = table.pids();
        if self.wddm().is_some() {
            let procs = self.procs();
            procs.recover_dead_actors();
            pids.extend(procs.live().into_iter().map(|(pid, _)| pid));
            pids.sort_unstable();
            pids.dedup();
        }
        pids.into_iter()
            .filter(|&pid| !crate::process::alive(pid))
            .inspect(|&pid| {
                self.release_process(pid);
            })
            .collect()
    }

    /// Bytes booked by `pid`, over all its tags.
    pub fn used_by(&self, pid: u32) -> u64 {
        self.table().used_by(pid)
    }

    /// Every booking with bytes, in slot order.
    pub fn bookings(&self) -> Vec<Booking> {
        self.table()
            .bookings()
            .into_iter()
            .map(|(pid, tag, bytes)| Booking { pid, tag, bytes })
            .collect()
    }

    /// Slots not free: one per booking, plus any in the middle of a change. A card with no
    /// bookings and nobody booking has none; a leak shows here.
    pub fn slots_in_use(&self) -> usize {
        self.table().slots_in_use()
    }

    /// Process records not free (WDDM: one per attached process); zero device-wide.
    pub fn processes_attached(&self) -> usize {
        self.procs().in_use()
    }

    /// Bytes per pid, over all tags, ascending by pid: what NVML lists as running processes.
    pub fn processes(&self) -> Vec<(u32, u64)> {
        let mut per: Vec<(u32, u64)> = Vec::new();
        for b in self.bookings() {
            match per.iter_mut().find(|(p, _)| *p == b.pid) {
                Some((_, bytes)) => *bytes += b.bytes,
                None => per.push((b.pid, b.bytes)),
            }
        }
        per.sort_unstable();
        per
    }
}

#[cfg(test)]
#[path = "sim_tests.rs"]
mod tests;
