//! The per-process budget of Windows WDDM, as the seed measured it (ADR 0008).
//!
//! On WDDM, `cudaMemGetInfo` reports the calling process's video-memory budget, not the
//! device's free memory: it debits the process's own allocations 1:1 and does not move for
//! other processes' until the video memory manager re-partitions budgets, which process
//! lifecycle events trigger. Each attached process therefore keeps an `offset` set at its last
//! partition, `true_free + bias + own`, and reads `offset - own`: its own allocations count, no
//! one else's. The bias is the seed's `pinned_bias` when the budget was set by the process's own
//! start, `repartition_bias` when a re-partition set it.
//!
//! Allocating past the card's total never fails on WDDM; the cost lands on a bystander, whose
//! memory is demand-paged to shared system memory. Every growth charges the part of it that
//! lies past the total (`used_after - total`, at most the growth) to the other processes
//! holding memory, least recently grown first, each up to what it holds; what is left (nobody
//! else holds enough) is the allocator's own spill. Each charge is one demotion of that process,
//! counted with its bytes per process and card-wide.
//!
//! Races: a re-partition writes each record it listed; a record detached and re-attached to
//! another pid in between gets its budget from the stale listing, until the next event.

use std::sync::atomic::Ordering::SeqCst;

use crate::layout::{Header, Proc, proc_flags};
use crate::procs::Procs;
use crate::semantics::WddmParams;
use crate::table::Table;

/// Demotions charged to a process (or to the card, summed): how often over-admission moved its
/// memory to shared system memory, and how many bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Demotions {
    pub count: u64,
    pub bytes: u64,
}

/// One process as the card sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessView {
    pub pid: u32,
    /// Bytes it holds, over all tags.
    pub used: u64,
    /// What it reads as free memory ([`crate::SimGpu::free_seen_by`]).
    pub free_seen: u64,
    /// WDDM: its budget was last set by a re-partition, not pinned at its own start. Always
    /// false on a device-wide card.
    pub repartitioned: bool,
    /// WDDM: what over-admission cost it. Always zero on a device-wide card.
    pub demotions: Demotions,
}

/// A WDDM card's shared state, seen through one mapping.
pub struct Wddm<'a> {
    pub header: &'a Header,
    pub table: Table<'a>,
    pub procs: Procs<'a>,
    pub params: WddmParams,
}

impl Wddm<'_> {
    fn total(&self) -> u64 {
        self.header.total.load(SeqCst)
    }

    /// The device's true free memory; negative when overbooked.
    fn true_free(&self) -> i64 {
        clamp_i64(self.total()) - clamp_i64(self.header.used.load(SeqCst))
    }

    fn tick(&self) -> u64 {
        self.header.clock.fetch_add(1, SeqCst) + 1
    }

    /// A reading of `offset - own`, within `[0, total]`.
    fn reading(&self, offset: i64, own: u64) -> u64 {
        let r = offset.saturating_sub(clamp_i64(own));
        u64::try_from(r).unwrap_or(0).min(self.total())
    }

    /// What `pid` reads as free. A process not attached reads what it would at its start.
    pub fn view(&self, pid: u32) -> u64 {
        let own = self.table.used_by(pid);
        match self.procs.find(pid) {
            Some(r) => self.reading(r.offset.load(SeqCst), own),
            None => self.reading(
                self.true_free() + self.params.pinned_bias + clamp_i64(own),
                own,
            ),
        }
    }

    /// Attaches `pid` if it is not: its budget is pinned at its start, and every other budget
    /// is re-partitioned. Returns whether it was a start.
    pub fn attach(&self, pid: u32) -> Result<bool, crate::SimError> {
        let (_, fresh) = self.procs.attach(pid, |r| {
            let own = self.table.used_by(pid);
            r.offset.store(
                self.true_free() + self.params.pinned_bias + clamp_i64(own),
                SeqCst,
            );
            r.touched.store(self.tick(), SeqCst);
            r.flags.store(0, SeqCst);
            r.demotions.store(0, SeqCst);
            r.demoted.store(0, SeqCst);
        })?;
        if fresh {
            self.repartition(Some(pid));
        }
        Ok(fresh)
    }

    /// Detaches `pid` (it exited); the others re-partition. Returns whether it was attached.
    pub fn detach(&self, pid: u32) -> bool {
        let was = self.procs.detach(pid);
        if was {
            self.repartition(None);
        }
        was
    }

    /// Sets every budget but `except`'s from the device's truth, with the re-partition bias.
    pub fn repartition(&self, except: Option<u32>) {
        for (pid, r) in self.procs.live() {
            if Some(pid) == except {
                continue;
            }
            let own = self.table.used_by(pid);
            r.offset.store(
                self.true_free() + self.params.repartition_bias + clamp_i64(own),
                SeqCst,
            );
            r.flags.fetch_or(proc_flags::REPARTITIONED, SeqCst);
        }
        self.header.repartitions.fetch_add(1, SeqCst);
    }

    /// After `pid` grew by `growth` and the device total became `used_after`: charges what lies
    /// past the total, and re-partitions if true free memory fell below the threshold.
    pub fn grew(&self, pid: u32, growth: u64, used_after: u64) {
        if growth == 0 {
            return;
        }
        if let Some(r) = self.procs.find(pid) {
            r.touched.store(self.tick(), SeqCst);
        }
        let excess = growth.min(used_after.saturating_sub(self.total()));
        if excess > 0 {
            self.demote(pid, excess);
        }
        let below = self.params.repartition_below;
        if below > 0 && self.true_free() < clamp_i64(below) {
            self.repartition(None);
        }
    }

    /// Charges `bytes` of over-admission by `allocator` to bystanders, least recently grown
    /// first; the rest to the allocator itself.
    fn demote(&self, allocator: u32, bytes: u64) {
        let mut bystanders: Vec<(u64, u32, &Proc, u64)> = self
            .procs
            .live()
            .into_iter()
            .filter(|&(pid, _)| pid != allocator)
            .map(|(pid, r)| (r.touched.load(SeqCst), pid, r, self.table.used_by(pid)))
            .filter(|&(_, _, _, held)| held > 0)
            .collect();
        bystanders.sort_unstable_by_key(|&(touched, pid, _, _)| (touched, pid));
        let mut left = bytes;
        for (_, _, r, held) in bystanders {
            if left == 0 {
                break;
            }
            let take = left.min(held);
            self.charge(r, take);
            left -= take;
        }
        if left > 0
            && let Some(r) = self.procs.find(allocator)
        {
            self.charge(r, left);
        }
    }

    fn charge(&self, r: &Proc, bytes: u64) {
        r.demotions.fetch_add(1, SeqCst);
        r.demoted.fetch_add(bytes, SeqCst);
        self.header.wddm.demotions.fetch_add(1, SeqCst);
        self.header.wddm.demoted.fetch_add(bytes, SeqCst);
    }

    pub fn demotions(&self, pid: u32) -> Demotions {
        self.procs
            .find(pid)
            .map_or_else(Demotions::default, |r| Demotions {
                count: r.demotions.load(SeqCst),
                bytes: r.demoted.load(SeqCst),
            })
    }

    pub fn demotions_total(&self) -> Demotions {
        Demotions {
            count: self.header.wddm.demotions.load(SeqCst),
            bytes: self.header.wddm.demoted.load(SeqCst),
        }
    }

    /// Every attached process, ascending by pid.
    pub fn views(&self) -> Vec<ProcessView> {
        let mut v: Vec<ProcessView> = self
            .procs
            .live()
            .into_iter()
            .map(|(pid, r)| {
                let used = self.table.used_by(pid);
                ProcessView {
                    pid,
                    used,
                    free_seen: self.reading(r.offset.load(SeqCst), used),
                    repartitioned: r.flags.load(SeqCst) & proc_flags::REPARTITIONED != 0,
                    demotions: Demotions {
                        count: r.demotions.load(SeqCst),
                        bytes: r.demoted.load(SeqCst),
                    },
                }
            })
            .collect();
        v.sort_unstable_by_key(|p| p.pid);
        v
    }
}

fn clamp_i64(x: u64) -> i64 {
    i64::try_from(x).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use crate::{CardSpec, Demotions, Semantics, SimError, SimGpu, WddmParams};

    const GIB: u64 = 1 << 30;
    const MIB: u64 = 1 << 20;
    const PINNED: u64 = 583 * MIB;
    const REPART: u64 = 533 * MIB;

    fn card(dir: &tempfile::TempDir, semantics: Semantics) -> SimGpu {
        let spec = CardSpec::new("sim0", 16 * GIB).with_semantics(semantics);
        SimGpu::create_with(dir.path().join("gpu"), &spec).unwrap()
    }

    #[test]
    fn a_reading_debits_its_own_allocations_and_is_blind_to_others() {
        let dir = tempfile::tempdir().unwrap();
        let g = card(&dir, Semantics::WDDM);
        assert!(g.attach(1).unwrap());
        assert!(!g.attach(1).unwrap(), "a second attach is no start");
        // Pinned at its start: 583 MB below the truth, whatever it holds itself.
        assert_eq!(g.free_seen_by(1), 16 * GIB - PINNED);
        g.book(1, "a", GIB).unwrap();
        assert_eq!(g.free(), 15 * GIB);
        assert_eq!(g.free_seen_by(1), 15 * GIB - PINNED);
        g.add(1, "a", -(GIB as i64) / 2).unwrap();
        assert_eq!(g.free_seen_by(1), g.free() - PINNED);
        g.book(1, "a", GIB).unwrap();

        // A second process starts: it is pinned, the first re-partitions (533 MB above).
        g.book(2, "ctx", 0).unwrap();
        assert_eq!(g.processes_attached(), 1, "booking nothing starts nothing");
        g.book(2, "ctx", 300 * MIB).unwrap();
        assert_eq!(g.processes_attached(), 2);
        let truth_at_start = 15 * GIB;
        assert_eq!(g.free_seen_by(1), truth_at_start + REPART);
        assert_eq!(g.free_seen_by(2), truth_at_start - PINNED - 300 * MIB);
        // The second grows by 10 GiB: the first does not see it.
        g.book(2, "model", 10 * GIB).unwrap();
        assert_eq!(g.free(), 5 * GIB - 300 * MIB);
        assert_eq!(g.free_seen_by(1), truth_at_start + REPART);
        assert_eq!(g.free_seen_by(2), g.free() - PINNED);
        // Until a re-partition.
        let before = g.repartitions();
        g.repartition();
        assert_eq!(g.repartitions(), before + 1);
        assert_eq!(g.free_seen_by(1), g.free() + REPART);
        assert_eq!(g.free_seen_by(2), g.free() + REPART);
        let views = g.process_views();
        assert_eq!(views.len(), 2);
        assert!(views.iter().all(|v| v.repartitioned));
        assert_eq!(views[0].used, GIB);
        assert_eq!(views[0].free_seen, g.free_seen_by(1));
        // The second exits: the first re-partitions again and sees the memory come back.
        assert_eq!(g.release_process(2), 10 * GIB + 300 * MIB);
        assert_eq!(g.processes_attached(), 1);
        assert_eq!(g.free_seen_by(1), 15 * GIB + REPART);
        // A process not attached reads what it would at its start, and attaches nothing.
        assert_eq!(g.free_seen_by(3), 15 * GIB - PINNED);
        assert_eq!(g.processes_attached(), 1);
    }

    #[test]
    fn readings_stay_within_the_card() {
        let dir = tempfile::tempdir().unwrap();
        let g = card(&dir, Semantics::WDDM);
        g.attach(1).unwrap();
        g.attach(2).unwrap();
        // Re-partitioned on an empty card: 533 MB above 16 GiB reads as 16 GiB.
        assert_eq!(g.free_seen_by(1), 16 * GIB);
        g.book(2, "m", 16 * GIB - 100 * MIB).unwrap();
        assert_eq!(g.free_seen_by(2), 0, "583 MB below 100 MB is nothing");
    }

    #[test]
    fn the_seed_scenario_over_admits_and_demotes_the_bystander() {
        let dir = tempfile::tempdir().unwrap();
        let g = card(&dir, Semantics::WDDM);
        let (host, worker) = (1, 2);
        g.attach(host).unwrap();
        g.book(worker, "model", 12 * GIB).unwrap();
        // The host reads about 16 GiB less its own (nothing): blind to the worker's 12 GiB.
        assert_eq!(g.free_seen_by(host), 16 * GIB);
        assert_eq!(g.free(), 4 * GIB);
        // It books 6 GiB, which its reading admits; 2 GiB land past the card's total.
        g.book_checked(host, "model", 6 * GIB).unwrap();
        assert_eq!(g.overcommitted(), 2 * GIB);
        let hit = Demotions {
            count: 1,
            bytes: 2 * GIB,
        };
        assert_eq!(g.demotions(worker), hit);
        assert_eq!(g.demotions(host), Demotions::default());
        assert_eq!(g.demotions_total(), hit);
        // Growing further while overbooked demotes all of the growth.
        g.add(host, "scratch", 100).unwrap();
        assert_eq!(g.demotions(worker).count, 2);
        assert_eq!(g.demotions(worker).bytes, 2 * GIB + 100);
        // The bystander exits: its record goes, the card's total stays.
        g.release_process(worker);
        assert_eq!(g.demotions(worker), Demotions::default());
        assert_eq!(g.demotions_total().count, 2);
    }

    #[test]
    fn bystanders_are_charged_least_recently_grown_first_then_the_allocator() {
        let dir = tempfile::tempdir().unwrap();
        let g = card(&dir, Semantics::WDDM);
        g.book(1, "m", 4 * GIB).unwrap();
        g.book(2, "m", 5 * GIB).unwrap();
        g.book(3, "m", 6 * GIB).unwrap();
        g.book(1, "m", 5 * GIB).unwrap(); // 1 is now the most recent
        assert_eq!(g.free(), 0);
        // 4 GiB past the total: 2 (oldest, holds 5) gives 4.
        g.book(4, "m", 4 * GIB).unwrap();
        assert_eq!(g.demotions(2).bytes, 4 * GIB);
        assert_eq!(g.demotions(3).count, 0);
        // 8 GiB more: 2 gives its 5, then 3 (next oldest) 3.
        g.book(4, "m", 12 * GIB).unwrap();
        assert_eq!(
            g.demotions(2),
            Demotions {
                count: 2,
                bytes: 9 * GIB
            }
        );
        assert_eq!(g.demotions(3).bytes, 3 * GIB);
        assert_eq!(g.demotions(1).count, 0);
        // Alone on an overbooked card, the allocator spills its own memory.
        let dir2 = tempfile::tempdir().unwrap();
        let solo = card(&dir2, Semantics::WDDM);
        solo.book(9, "m", 17 * GIB).unwrap();
        assert_eq!(solo.demotions(9).bytes, GIB);
    }

    #[test]
    fn a_checked_booking_is_refused_only_past_the_budget() {
        let dir = tempfile::tempdir().unwrap();
        let g = card(&dir, Semantics::WDDM);
        g.attach(1).unwrap();
        g.book(2, "m", 12 * GIB).unwrap();
        let budget = g.free_seen_by(1);
        match g.book_checked(1, "m", budget + 1) {
            Err(SimError::OutOfMemory {
                requested, free, ..
            }) => assert_eq!((requested, free), (budget + 1, budget)),
            other => panic!("{other:?}"),
        }
        assert_eq!(g.used_by(1), 0);
        // The budget is the only limit: past the device's total is fine.
        g.book_checked(1, "m", budget).unwrap();
        assert!(g.used() > g.total());
    }

    #[test]
    fn falling_below_the_threshold_re_partitions() {
        let dir = tempfile::tempdir().unwrap();
        let params = WddmParams {
            repartition_below: GIB,
            ..WddmParams::SEED
        };
        let g = card(&dir, Semantics::Wddm(params));
        g.attach(1).unwrap();
        g.book(2, "m", 14 * GIB).unwrap();
        assert_eq!(g.free_seen_by(1), 16 * GIB, "2 GiB free: still blind");
        let n = g.repartitions();
        g.book(2, "m", 15 * GIB + 512 * MIB).unwrap();
        assert_eq!(g.repartitions(), n + 1);
        assert_eq!(g.free_seen_by(1), 512 * MIB + REPART);
    }

    #[test]
    fn device_wide_cards_are_unchanged() {
        let dir = tempfile::tempdir().unwrap();
        let g = card(&dir, Semantics::DeviceWide);
        assert!(!g.attach(1).unwrap());
        g.book(2, "m", 12 * GIB).unwrap();
        assert_eq!(g.free_seen_by(1), 4 * GIB);
        assert!(matches!(
            g.book_checked(1, "m", 6 * GIB),
            Err(SimError::OutOfMemory { .. })
        ));
        g.book(1, "m", 6 * GIB).unwrap();
        assert_eq!(g.overcommitted(), 2 * GIB);
        assert_eq!(g.demotions(2), Demotions::default());
        assert_eq!(g.demotions_total(), Demotions::default());
        g.repartition();
        assert_eq!(g.repartitions(), 0);
        assert_eq!(g.processes_attached(), 0);
        let views = g.process_views();
        assert_eq!(views.iter().map(|v| v.pid).collect::<Vec<_>>(), [1, 2]);
        assert!(views.iter().all(|v| v.free_seen == 0 && !v.repartitioned));
    }

    #[test]
    fn the_semantics_travel_with_the_card() {
        let dir = tempfile::tempdir().unwrap();
        let params = WddmParams {
            pinned_bias: -7,
            repartition_bias: 9,
            repartition_below: 11,
        };
        let g = card(&dir, Semantics::Wddm(params));
        let other = SimGpu::open(g.path()).unwrap();
        assert_eq!(other.semantics(), Semantics::Wddm(params));
        other.attach(5).unwrap();
        assert_eq!(g.free_seen_by(5), 16 * GIB - 7);
    }

    #[test]
    fn reaping_detaches_dead_processes_and_re_partitions() {
        let dir = tempfile::tempdir().unwrap();
        let g = card(&dir, Semantics::WDDM);
        let me = std::process::id();
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        g.attach(me).unwrap();
        g.attach(dead).unwrap(); // attached, holding nothing
        g.book(me, "m", GIB).unwrap();
        let n = g.repartitions();
        assert_eq!(g.reap(), vec![dead]);
        assert_eq!(g.repartitions(), n + 1);
        assert_eq!(g.processes_attached(), 1);
        assert_eq!(g.free_seen_by(me), 15 * GIB + REPART);
        g.release_process(me);
        assert_eq!(g.processes_attached(), 0);
        assert_eq!(g.slots_in_use(), 0);
    }
}
