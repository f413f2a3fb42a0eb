//! `SimGpu`: a simulated card that several processes book memory on, for tests without a GPU.
//!
//! The card is a small file that every process maps shared: the host, its workers, and the fake
//! `libnvidia-ml.so.1` loaded into any of them all read and write the same bytes, so what one
//! process books every other sees at once, the way every process sees a real card's memory. The
//! test that creates a card hands its path to workers in [`SIM_GPU_ENV`].
//!
//! A booking is `(pid, tag) -> bytes`: a process's allocation for one purpose (a model id, its
//! CUDA context...). [`SimGpu::book`] sets it, which is what a reporter of residency needs; a
//! process gone without releasing is cleaned up by [`SimGpu::release_process`] or
//! [`SimGpu::reap`]. How a process *sees* free memory is the card's [`Semantics`]: on a
//! device-wide card every reading is the truth; on a WDDM card (`wddm.rs`) each process reads
//! its own budget, and over-admission demotes bystanders, counted per process.

use std::fs::OpenOptions;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering::SeqCst;

use crate::error::SimError;
use crate::layout::{self, Header, MAGIC, NAME_MAX, VERSION};
use crate::mapping::Mapping;
use crate::procs::Procs;
use crate::semantics::Semantics;
use crate::table::{Table, Updated};
use crate::uuid::{check_uuid, new_uuid};
use crate::wddm::{Demotions, ProcessView, Wddm};

/// The environment variable holding a card's path, by which tests hand the card to workers and
/// to the fake NVML. Several paths separated by `:` make several cards for the fake NVML, in
/// that order; [`SimGpu::from_env`] opens the first.
pub const SIM_GPU_ENV: &str = "AIRLOCK_SIM_GPU";

/// What a new card looks like.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CardSpec {
    /// What NVML reports as the device name.
    pub name: String,
    /// Memory in bytes.
    pub total: u64,
    /// `None`: a fresh random one. Kept for the card's life.
    pub uuid: Option<String>,
    pub semantics: Semantics,
}

impl CardSpec {
    /// A device-wide card.
    pub fn new(name: impl Into<String>, total: u64) -> CardSpec {
        CardSpec {
            name: name.into(),
            total,
            uuid: None,
            semantics: Semantics::DeviceWide,
        }
    }

    /// A card with these semantics.
    pub fn with_semantics(self, semantics: Semantics) -> CardSpec {
        CardSpec { semantics, ..self }
    }
}

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
    path: PathBuf,
    map: Mapping,
    slot_count: usize,
    proc_count: usize,
}

impl SimGpu {
    /// Creates a device-wide card of `total` bytes at `path` (which must not exist).
    pub fn create(path: impl AsRef<Path>, name: &str, total: u64) -> Result<SimGpu, SimError> {
        SimGpu::create_with(path, &CardSpec::new(name, total))
    }

    /// Creates a card at `path`. The file is written under a temporary name and then linked
    /// at `path`, so no process opens a half-written card, and an existing file is never
    /// replaced.
    pub fn create_with(path: impl AsRef<Path>, spec: &CardSpec) -> Result<SimGpu, SimError> {
        let path = path.as_ref().to_path_buf();
        if spec.name.len() > NAME_MAX {
            return Err(SimError::NameTooLong {
                len: spec.name.len(),
                max: NAME_MAX,
            });
        }
        let uuid = match &spec.uuid {
            Some(u) => {
                check_uuid(u)?;
                u.clone()
            }
            None => new_uuid(),
        };
        let err = |source: std::io::Error| SimError::Create {
            path: path.clone(),
            source,
        };
        let file_name = path.file_name().ok_or_else(|| {
            err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "no file name",
            ))
        })?;
        let tmp = path.with_file_name(format!(
            ".{}.{}.tmp",
            file_name.to_string_lossy(),
            std::process::id()
        ));
        let result = (|| {
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&tmp)
                .map_err(err)?;
            let len = layout::file_len(layout::SLOT_COUNT, layout::PROC_COUNT);
            file.set_len(len as u64).map_err(err)?;
            let map = Mapping::new(&file, len).map_err(err)?;
            let header = Header::new(
                spec.semantics.code(),
                spec.semantics.params(),
                spec.total,
                &spec.name,
                &uuid,
            );
            // SAFETY: our own fresh mapping of a full-length file nobody else has opened.
            unsafe {
                map.write_header(header);
                map.header().magic.store(MAGIC, SeqCst);
            }
            std::fs::hard_link(&tmp, &path).map_err(|e| {
                if e.kind() == std::io::ErrorKind::AlreadyExists {
                    SimError::Exists { path: path.clone() }
                } else {
                    err(e)
                }
            })?;
            Ok(SimGpu {
                path: path.clone(),
                map,
                slot_count: layout::SLOT_COUNT as usize,
                proc_count: layout::PROC_COUNT as usize,
            })
        })();
        let _ = std::fs::remove_file(&tmp);
        result
    }

    /// Opens the card at `path`, checking that it is one, of this layout version.
    pub fn open(path: impl AsRef<Path>) -> Result<SimGpu, SimError> {
        let path = path.as_ref().to_path_buf();
        let err = |source: std::io::Error| SimError::Open {
            path: path.clone(),
            source,
        };
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .map_err(err)?;
        let len = file.metadata().map_err(err)?.len();
        if len < size_of::<Header>() as u64 {
            return Err(SimError::NotACard { path });
        }
        let map = Mapping::new(&file, len as usize).map_err(err)?;
        // SAFETY: the mapping holds a header (checked above); published cards never change
        // their non-atomic fields.
        let h = unsafe { map.header() };
        if h.magic.load(SeqCst) != MAGIC {
            return Err(SimError::NotACard { path });
        }
        if h.version != VERSION {
            return Err(SimError::Version {
                path,
                found: h.version,
                expected: VERSION,
            });
        }
        let expected = layout::file_len(h.slot_count, h.proc_count) as u64;
        if len != expected {
            return Err(SimError::Truncated {
                path,
                len,
                expected,
            });
        }
        let slot_count = h.slot_count as usize;
        let proc_count = h.proc_count as usize;
        Ok(SimGpu {
            path,
            map,
            slot_count,
            proc_count,
        })
    }

    /// Opens the first card named by [`SIM_GPU_ENV`]; `None` when it is unset or empty.
    pub fn from_env() -> Result<Option<SimGpu>, SimError> {
        match paths_from_env().into_iter().next() {
            Some(p) => SimGpu::open(p).map(Some),
            None => Ok(None),
        }
    }

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

/// The card paths named by [`SIM_GPU_ENV`], in order (none when unset or empty).
pub fn paths_from_env() -> Vec<PathBuf> {
    std::env::var_os(SIM_GPU_ENV)
        .map(|v| {
            std::env::split_paths(&v)
                .filter(|p| !p.as_os_str().is_empty())
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    fn card(dir: &tempfile::TempDir) -> SimGpu {
        SimGpu::create(dir.path().join("gpu"), "sim0", 16 * GIB).unwrap()
    }

    #[test]
    fn create_then_open_sees_the_same_card() {
        let dir = tempfile::tempdir().unwrap();
        let a = card(&dir);
        a.book(10, "model", GIB).unwrap();
        let b = SimGpu::open(a.path()).unwrap();
        assert_eq!(b.uuid(), a.uuid());
        assert_eq!(b.name(), "sim0");
        assert_eq!(b.total(), 16 * GIB);
        assert_eq!(b.used(), GIB);
        b.book(11, "ctx", GIB / 2).unwrap();
        assert_eq!(a.free(), 16 * GIB - GIB - GIB / 2);
        assert_eq!(a.free_seen_by(11), a.free());
        assert_eq!(a.semantics(), Semantics::DeviceWide);
        assert!(
            dir.path().read_dir().unwrap().count() == 1,
            "temp file left"
        );
    }

    #[test]
    fn create_refuses_an_existing_file_and_open_refuses_strangers() {
        let dir = tempfile::tempdir().unwrap();
        let a = card(&dir);
        assert!(matches!(
            SimGpu::create(a.path(), "x", 1),
            Err(SimError::Exists { .. })
        ));
        let other = dir.path().join("other");
        std::fs::write(&other, vec![0u8; 4096]).unwrap();
        assert!(matches!(
            SimGpu::open(&other),
            Err(SimError::NotACard { .. })
        ));
        assert!(matches!(
            SimGpu::open(dir.path().join("missing")),
            Err(SimError::Open { .. })
        ));
    }

    #[test]
    fn book_sets_add_adjusts_release_drops() {
        let dir = tempfile::tempdir().unwrap();
        let g = card(&dir);
        assert_eq!(g.book(5, "m", 100).unwrap(), 0);
        assert_eq!(g.book(5, "m", 300).unwrap(), 100);
        assert_eq!(g.add(5, "m", -50).unwrap(), 250);
        assert_eq!(g.add(5, "n", 7).unwrap(), 7);
        assert_eq!(g.used_by(5), 257);
        assert!(matches!(
            g.add(5, "n", -8),
            Err(SimError::Underflow { booked: 7, .. })
        ));
        assert_eq!(g.release(5, "m").unwrap(), 250);
        assert_eq!(g.release(5, "m").unwrap(), 0);
        assert_eq!(
            g.bookings(),
            vec![Booking {
                pid: 5,
                tag: "n".into(),
                bytes: 7
            }]
        );
        assert_eq!(g.release_process(5), 7);
        assert_eq!(g.used(), 0);
    }

    #[test]
    fn checked_booking_fails_like_cuda() {
        let dir = tempfile::tempdir().unwrap();
        let g = card(&dir);
        g.book(1, "a", 15 * GIB).unwrap();
        match g.book_checked(2, "b", 2 * GIB) {
            Err(SimError::OutOfMemory {
                requested, free, ..
            }) => {
                assert_eq!((requested, free), (2 * GIB, GIB));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(g.used_by(2), 0);
        assert_eq!(g.bookings().len(), 1);
        g.book_checked(2, "b", GIB).unwrap();
        assert_eq!(g.free(), 0);
        // Unchecked booking may overbook; free reads zero, never wraps.
        g.book(3, "c", GIB).unwrap();
        assert_eq!(g.free(), 0);
        assert_eq!(g.used(), 17 * GIB);
    }

    #[test]
    fn reap_drops_dead_processes_only() {
        let dir = tempfile::tempdir().unwrap();
        let g = card(&dir);
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        let me = std::process::id();
        g.book(dead, "m", 10).unwrap();
        g.book(me, "m", 20).unwrap();
        assert_eq!(g.reap(), vec![dead]);
        assert_eq!(g.used(), 20);
        assert_eq!(g.processes(), vec![(me, 20)]);
    }

    #[test]
    fn released_slots_are_recycled_and_a_full_table_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let g = card(&dir);
        let n = layout::SLOT_COUNT as usize;
        for i in 0..2 * n {
            g.book(1, &i.to_string(), 1).unwrap();
            g.release(1, &i.to_string()).unwrap();
        }
        assert_eq!(g.slots_in_use(), 0);
        for i in 0..n {
            g.book(2, &i.to_string(), 1).unwrap();
        }
        assert!(matches!(
            g.book(2, "one more", 1),
            Err(SimError::Full { slots }) if slots == n
        ));
        // Re-booking a key that has a slot still works.
        g.book(2, "0", 5).unwrap();
        assert_eq!(g.release_process(2), n as u64 + 4);
        assert_eq!(g.slots_in_use(), 0);
    }

    #[test]
    fn bad_arguments_are_typed_errors() {
        let dir = tempfile::tempdir().unwrap();
        let g = card(&dir);
        assert!(matches!(
            g.book(0, "m", 1),
            Err(SimError::InvalidPid { .. })
        ));
        assert!(matches!(
            g.book(1, &"x".repeat(97), 1),
            Err(SimError::TagTooLong { len: 97, .. })
        ));
        assert!(matches!(
            g.book(1, "m", 1 << 48),
            Err(SimError::TooLarge { .. })
        ));
        let spec = CardSpec {
            uuid: Some("nope".into()),
            ..CardSpec::new("x", 1)
        };
        assert!(matches!(
            SimGpu::create_with(dir.path().join("u"), &spec),
            Err(SimError::InvalidUuid { .. })
        ));
    }
}
