//! A deterministic card for the executor's tests: free memory moves only by what evictions
//! free, and each model answers as scripted.

#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};

use airlock_arbiter::{Candidate, Card, ModelKey, Refusal, TruthError};

pub fn key(owner: &str, model: u64) -> ModelKey {
    ModelKey {
        owner: owner.to_owned(),
        generation: 1,
        model,
    }
}

pub fn cand(owner: &str, model: u64, resident: u64, last_used: f64) -> Candidate {
    Candidate {
        key: key(owner, model),
        resident,
        in_use: false,
        last_used,
        owner_idle: true,
        owner_is_requester: false,
        partial_ok: false,
    }
}

/// The card: `free`, what each model holds, and which models refuse.
pub struct FakeCard {
    pub free: u64,
    pub resident: BTreeMap<ModelKey, u64>,
    pub refuse: BTreeSet<ModelKey>,
    /// A partial unload frees `want` rounded up to this many bytes (a layer), capped at what
    /// the model holds.
    pub grain: u64,
    /// Every eviction asked, in order: (key, want).
    pub asked: Vec<(ModelKey, u64)>,
    pub reads: usize,
    /// Bytes some other process frees right after the n-th eviction (index = n).
    pub external: Vec<u64>,
    pub fail_truth: bool,
}

impl FakeCard {
    pub fn new(free: u64, candidates: &[Candidate]) -> Self {
        FakeCard {
            free,
            resident: candidates
                .iter()
                .map(|c| (c.key.clone(), c.resident))
                .collect(),
            refuse: BTreeSet::new(),
            grain: 1,
            asked: Vec::new(),
            reads: 0,
            external: Vec::new(),
            fail_truth: false,
        }
    }
}

impl Card for FakeCard {
    fn true_free(&mut self) -> Result<u64, TruthError> {
        self.reads += 1;
        if self.fail_truth {
            return Err(TruthError("nvml: driver not loaded".into()));
        }
        Ok(self.free)
    }

    fn evict(&mut self, c: &Candidate, want: u64) -> Result<u64, Refusal> {
        self.asked.push((c.key.clone(), want));
        if let Some(extra) = self.external.get(self.asked.len() - 1) {
            self.free += extra;
        }
        if self.refuse.contains(&c.key) {
            return Err(Refusal::Busy);
        }
        let held = self.resident.get_mut(&c.key).ok_or(Refusal::Gone)?;
        let freed = if want < *held {
            want.div_ceil(self.grain)
                .saturating_mul(self.grain)
                .min(*held)
        } else {
            *held
        };
        *held -= freed;
        self.free += freed;
        Ok(freed)
    }
}
