//! The process records of a WDDM card: one per attached pid, found and claimed with
//! compare-and-swap alone, like the booking slots (`table.rs`).
//!
//! A record's life: `EMPTY` → `PENDING` (claimed by CAS, carrying the pid; the claimer writes
//! the fields) → `LIVE` → `RECLAIMING` (being detached) → `EMPTY`. Two processes attaching the
//! same pid at once may each claim a record; each then looks for the other's (everything
//! sequentially consistent), so at least one sees the other and withdraws, and a pid has at most
//! one `LIVE` record. A killed process's half-done transition is undone by whoever meets it once
//! its pid is gone, as for slots.

use std::sync::atomic::Ordering::SeqCst;

use crate::error::SimError;
use crate::layout::{Proc, state};
use crate::process;
use crate::wait::{STUCK_ROUNDS, backoff, me};

/// The record table seen through one mapping.
pub struct Procs<'a> {
    pub records: &'a [Proc],
}

/// What a scan for a pid found.
enum Seen {
    Live(usize),
    /// A record of this pid in transition (its state as read).
    Busy(usize, u64),
    Absent,
}

impl Procs<'_> {
    fn scan(&self, pid: u32) -> Seen {
        let mut busy = None;
        for (i, r) in self.records.iter().enumerate() {
            let s = r.state.load(SeqCst);
            if s == state::EMPTY || state::pid(s) != pid {
                continue;
            }
            match state::kind(s) {
                state::LIVE => return Seen::Live(i),
                state::PENDING | state::RECLAIMING => busy = Some((i, s)),
                _ => {}
            }
        }
        busy.map_or(Seen::Absent, |(i, s)| Seen::Busy(i, s))
    }

    /// The live record of `pid`, if it is attached.
    pub fn find(&self, pid: u32) -> Option<&Proc> {
        let mut round = 0;
        loop {
            match self.scan(pid) {
                Seen::Live(i) => return Some(&self.records[i]),
                Seen::Absent => return None,
                Seen::Busy(i, s) => self.wait(i, s, &mut round),
            }
        }
    }

    /// The record of `pid`, claiming one if it has none; `init` writes a fresh record's fields
    /// before anyone can see it live. Returns the record and whether it is fresh.
    pub fn attach(&self, pid: u32, init: impl Fn(&Proc)) -> Result<(&Proc, bool), SimError> {
        if pid == 0 {
            return Err(SimError::InvalidPid { pid });
        }
        let me = me();
        let pending = state::make(state::PENDING, me, pid);
        let mut round = 0;
        loop {
            match self.scan(pid) {
                Seen::Live(i) => return Ok((&self.records[i], false)),
                Seen::Busy(i, s) => {
                    self.wait(i, s, &mut round);
                    continue;
                }
                Seen::Absent => {}
            }
            let Some(i) = self.records.iter().position(|r| {
                r.state
                    .compare_exchange(state::EMPTY, pending, SeqCst, SeqCst)
                    .is_ok()
            }) else {
                if self.recover_dead_actors() > 0 {
                    continue;
                }
                return Err(SimError::ProcessesFull {
                    max: self.records.len(),
                });
            };
            let duplicate = self.records.iter().enumerate().any(|(j, r)| {
                let s = r.state.load(SeqCst);
                j != i
                    && state::pid(s) == pid
                    && matches!(state::kind(s), state::PENDING | state::LIVE)
            });
            let r = &self.records[i];
            if duplicate {
                r.state.store(state::EMPTY, SeqCst);
                backoff(&mut round);
                continue;
            }
            init(r);
            r.state.store(state::make(state::LIVE, 0, pid), SeqCst);
            return Ok((r, true));
        }
    }

    /// Detaches `pid`; returns whether it was attached.
    pub fn detach(&self, pid: u32) -> bool {
        let live = state::make(state::LIVE, 0, pid);
        let mine = state::make(state::RECLAIMING, me(), pid);
        let Some(r) = self
            .records
            .iter()
            .find(|r| r.state.compare_exchange(live, mine, SeqCst, SeqCst).is_ok())
        else {
            return false;
        };
        for f in [&r.touched, &r.demotions, &r.demoted, &r.flags] {
            f.store(0, SeqCst);
        }
        r.offset.store(0, SeqCst);
        r.state.store(state::EMPTY, SeqCst);
        true
    }

    /// Every attached pid with its record, in record order.
    pub fn live(&self) -> Vec<(u32, &Proc)> {
        self.records
            .iter()
            .filter_map(|r| {
                let s = r.state.load(SeqCst);
                (state::kind(s) == state::LIVE).then(|| (state::pid(s), r))
            })
            .collect()
    }

    /// Records not `EMPTY`.
    pub fn in_use(&self) -> usize {
        self.records
            .iter()
            .filter(|r| r.state.load(SeqCst) != state::EMPTY)
            .count()
    }

    fn wait(&self, i: usize, s: u64, round: &mut u32) {
        backoff(round);
        if *round % STUCK_ROUNDS == 0 && self.records[i].state.load(SeqCst) == s {
            self.recover(i, s);
        }
    }

    /// Undoes the transition of record `i` (in state `s`) if its actor is gone: an attach is
    /// abandoned, a detach completed. The fields are rewritten by the next attach.
    fn recover(&self, i: usize, s: u64) -> bool {
        let kind = state::kind(s);
        matches!(kind, state::PENDING | state::RECLAIMING)
            && !process::alive(state::actor(s))
            && self.records[i]
                .state
                .compare_exchange(s, state::EMPTY, SeqCst, SeqCst)
                .is_ok()
    }

    /// Undoes every transition whose actor is gone; returns how many.
    pub fn recover_dead_actors(&self) -> usize {
        (0..self.records.len())
            .filter(|&i| {
                let s = self.records[i].state.load(SeqCst);
                s != state::EMPTY && state::kind(s) != state::LIVE && self.recover(i, s)
            })
            .count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn records(n: usize) -> Vec<Proc> {
        (0..n).map(|_| Proc::default()).collect()
    }

    #[test]
    fn a_pid_has_one_record_under_contention() {
        let recs = records(16);
        let p = Procs { records: &recs };
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for k in 0..300u32 {
                        let pid = 1 + k % 3;
                        p.attach(pid, |r| r.offset.store(7, SeqCst)).unwrap();
                        if k % 5 == 0 {
                            p.detach(pid);
                        }
                    }
                });
            }
        });
        let mut pids: Vec<u32> = p.live().iter().map(|(pid, _)| *pid).collect();
        let n = pids.len();
        pids.sort_unstable();
        pids.dedup();
        assert_eq!(pids.len(), n, "a pid with two records");
        assert!(p.live().iter().all(|(_, r)| r.offset.load(SeqCst) == 7));
        assert_eq!(p.in_use(), n);
    }

    #[test]
    fn a_full_table_is_an_error_and_a_detach_frees_a_record() {
        let recs = records(2);
        let p = Procs { records: &recs };
        assert!(p.attach(1, |_| {}).unwrap().1);
        assert!(!p.attach(1, |_| {}).unwrap().1, "attached once");
        p.attach(2, |_| {}).unwrap();
        assert!(matches!(
            p.attach(3, |_| {}),
            Err(SimError::ProcessesFull { max: 2 })
        ));
        assert!(p.detach(1));
        assert!(!p.detach(1));
        assert!(p.find(1).is_none());
        p.attach(3, |_| {}).unwrap();
        assert!(p.find(3).is_some());
    }

    #[test]
    fn a_dead_attacher_is_undone() {
        let recs = records(1);
        let p = Procs { records: &recs };
        // pid_max is at most 2^22, so this actor cannot exist.
        recs[0]
            .state
            .store(state::make(state::PENDING, (1 << 22) + 3, 9), SeqCst);
        assert!(p.find(9).is_none());
        assert!(p.attach(4, |_| {}).unwrap().1);
    }
}
