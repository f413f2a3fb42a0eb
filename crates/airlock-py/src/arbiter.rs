//! `_native.Arbiter`: the host's eviction arbiter (`airlock-arbiter`) for Python.
//!
//! The card is two Python callables: `true_free()` (the device's free bytes now) and
//! `evict(candidate, want)` (the bytes freed, or `None` / an exception for a refusal). They run
//! on the calling thread, with the GIL, while this thread holds the arbiter's turn. A thread
//! that has to wait for the turn waits with the GIL released, so the turn's holder can run its
//! callbacks; the arbiter's own mutex is never held while the GIL is taken.

use std::collections::HashMap;

use airlock_arbiter::{
    Admission, Arbiter as Core, ArbiterError as CoreError, Candidate, Card, ModelKey, Outcome,
    Refusal, TruthError, plan,
};
use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use crate::errors::AirlockError;

create_exception!(
    comfy_airlock,
    ArbiterError,
    AirlockError,
    "The arbiter refused a request: `free_room` called from inside one of this thread's own \
     evictions (it would wait on itself)."
);

/// Serializes eviction decisions across the host's threads (see `docs/adr/0010-arbiter.md`).
#[pyclass(frozen, module = "comfy_airlock._native")]
pub struct Arbiter {
    inner: Core,
}

#[pymethods]
impl Arbiter {
    #[new]
    fn new() -> Self {
        Arbiter { inner: Core::new() }
    }

    /// Frees room for `need` bytes among `candidates` (dicts, see `_native.pyi`), one decision
    /// at a time across threads. `hold=True` (an admission) keeps `need` bytes claimed against
    /// later decisions until `release(outcome["hold"])`.
    #[pyo3(signature = (need, candidates, true_free, evict, *, hold = false))]
    fn free_room<'py>(
        &self,
        py: Python<'py>,
        need: u64,
        candidates: Vec<Bound<'py, PyAny>>,
        true_free: Bound<'py, PyAny>,
        evict: Bound<'py, PyAny>,
        hold: bool,
    ) -> PyResult<Bound<'py, PyDict>> {
        let cands = parse_all(&candidates)?;
        let by_key = cands
            .iter()
            .enumerate()
            .map(|(i, c)| (c.key.clone(), i))
            .collect::<HashMap<_, _>>();
        if by_key.len() != cands.len() {
            return Err(PyValueError::new_err(
                "two candidates have the same (owner, generation, model)",
            ));
        }
        let mut card = PyCard {
            true_free,
            evict,
            dicts: &candidates,
            by_key,
            error: None,
        };
        // The GIL goes while waiting: the turn's holder may need it to finish.
        let turn = crate::exit_gate::detach(py, || self.inner.enter()).map_err(arbiter_error)?;
        let result = if hold {
            turn.admit(need, &cands, &mut card)
        } else {
            turn.free_room(need, &cands, &mut card)
                .map(|outcome| Admission {
                    outcome,
                    hold: None,
                })
        };
        if let Some(e) = card.error {
            if let Ok(Admission { hold: Some(h), .. }) = &result {
                self.inner.release(*h);
            }
            return Err(e);
        }
        let admission = result.map_err(arbiter_error)?;
        outcome_dict(
            py,
            &admission.outcome,
            &candidates,
            admission.hold.map(|h| h.0),
        )
    }

    /// Gives back an admission's hold. Returns its bytes, or None if it was released already.
    fn release(&self, hold: u64) -> Option<u64> {
        self.inner.release(airlock_arbiter::HoldId(hold))
    }

    /// Indices of the candidates a decision would evict, in order, if each freed what it was
    /// asked (the policy alone; nothing is called).
    #[staticmethod]
    fn plan(need: u64, free: u64, candidates: Vec<Bound<'_, PyAny>>) -> PyResult<Vec<usize>> {
        Ok(plan(need, free, &parse_all(&candidates)?))
    }

    /// Counters since the arbiter was made, and its state now.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = self.inner.stats();
        let d = PyDict::new(py);
        d.set_item("decisions", s.decisions)?;
        d.set_item("satisfied", s.satisfied)?;
        d.set_item("steps", s.steps)?;
        d.set_item("bytes_freed", s.bytes_freed)?;
        d.set_item("refusals", s.refusals)?;
        d.set_item("waits", s.waits)?;
        d.set_item("reentries", s.reentries)?;
        d.set_item("errors", s.errors)?;
        d.set_item("in_flight", s.in_flight)?;
        d.set_item("waiting", s.waiting)?;
        d.set_item("holds", s.holds)?;
        d.set_item("held_bytes", s.held_bytes)?;
        Ok(d)
    }

    fn __repr__(&self) -> String {
        let s = self.inner.stats();
        format!(
            "<Arbiter decisions={} steps={} freed={} in_flight={}>",
            s.decisions, s.steps, s.bytes_freed, s.in_flight
        )
    }
}

fn arbiter_error(e: CoreError) -> PyErr {
    ArbiterError::new_err(e.to_string())
}

/// The Python callables as the executor's card. The first error that must reach the caller
/// (a failed `true_free`, a wrong return type, a `BaseException` such as KeyboardInterrupt) is
/// kept, and the decision is wound down: every later call fails at once.
struct PyCard<'a, 'py> {
    true_free: Bound<'py, PyAny>,
    evict: Bound<'py, PyAny>,
    dicts: &'a [Bound<'py, PyAny>],
    by_key: HashMap<ModelKey, usize>,
    error: Option<PyErr>,
}

const ABORTED: &str = "aborted: an earlier callback raised";

impl Card for PyCard<'_, '_> {
    fn true_free(&mut self) -> Result<u64, TruthError> {
        if self.error.is_some() {
            return Err(TruthError(ABORTED.into()));
        }
        let r = self.true_free.call0().and_then(|v| {
            v.extract::<u64>().map_err(|_| {
                PyTypeError::new_err(format!(
                    "true_free() must return the free bytes (an int >= 0), got {}",
                    v.repr().map_or_else(|_| "?".into(), |r| r.to_string())
                ))
            })
        });
        r.map_err(|e| {
            let msg = e.to_string();
            self.error = Some(e);
            TruthError(msg)
        })
    }

    fn evict(&mut self, c: &Candidate, want: u64) -> Result<u64, Refusal> {
        if self.error.is_some() {
            return Err(Refusal::Declined(ABORTED.into()));
        }
        let py = self.evict.py();
        let dict = &self.dicts[self.by_key[&c.key]];
        match self.evict.call1((dict, want)) {
            Ok(v) if v.is_none() => Err(Refusal::Declined("evict() returned None".into())),
            Ok(v) => v.extract::<u64>().map_err(|_| {
                self.error = Some(PyTypeError::new_err(format!(
                    "evict() must return the bytes freed (an int >= 0) or None, got {}",
                    v.repr().map_or_else(|_| "?".into(), |r| r.to_string())
                )));
                Refusal::Declined(ABORTED.into())
            }),
            Err(e) if e.is_instance_of::<PyException>(py) => Err(Refusal::Declined(format!(
                "evict() raised {}: {}",
                e.get_type(py)
                    .name()
                    .map_or_else(|_| "?".into(), |n| n.to_string()),
                e.value(py)
            ))),
            Err(e) => {
                self.error = Some(e);
                Err(Refusal::Declined(ABORTED.into()))
            }
        }
    }
}

fn parse_all(candidates: &[Bound<'_, PyAny>]) -> PyResult<Vec<Candidate>> {
    candidates
        .iter()
        .enumerate()
        .map(|(i, c)| parse(i, c))
        .collect()
}

/// One candidate dict: `owner`, `generation`, `model`, `resident` required; `in_use`,
/// `last_used`, `owner_idle`, `owner_is_requester`, `partial_ok` optional (False / 0.0).
fn parse(i: usize, obj: &Bound<'_, PyAny>) -> PyResult<Candidate> {
    let d = obj
        .cast::<PyDict>()
        .map_err(|_| PyTypeError::new_err(format!("candidate {i} is not a dict")))?;
    let bad = |key: &str, what: &str| {
        PyValueError::new_err(format!("candidate {i}: '{key}' must be {what}"))
    };
    let required = |key: &str| {
        d.get_item(key)?
            .ok_or_else(|| PyValueError::new_err(format!("candidate {i}: '{key}' is missing")))
    };
    let flag = |key: &str| -> PyResult<bool> {
        match d.get_item(key)? {
            Some(v) => v.is_truthy(),
            None => Ok(false),
        }
    };
    Ok(Candidate {
        key: ModelKey {
            owner: required("owner")?
                .extract()
                .map_err(|_| bad("owner", "a str"))?,
            generation: required("generation")?
                .extract()
                .map_err(|_| bad("generation", "an int >= 0"))?,
            model: required("model")?
                .extract()
                .map_err(|_| bad("model", "an int >= 0"))?,
        },
        resident: required("resident")?
            .extract()
            .map_err(|_| bad("resident", "an int >= 0"))?,
        in_use: flag("in_use")?,
        last_used: match d.get_item("last_used")? {
            Some(v) if !v.is_none() => v.extract().map_err(|_| bad("last_used", "a number"))?,
            _ => 0.0,
        },
        owner_idle: flag("owner_idle")?,
        owner_is_requester: flag("owner_is_requester")?,
        partial_ok: flag("partial_ok")?,
    })
}

fn outcome_dict<'py>(
    py: Python<'py>,
    o: &Outcome,
    dicts: &[Bound<'py, PyAny>],
    hold: Option<u64>,
) -> PyResult<Bound<'py, PyDict>> {
    let steps = PyList::empty(py);
    for s in &o.steps {
        let d = PyDict::new(py);
        d.set_item("index", s.index)?;
        d.set_item("candidate", &dicts[s.index])?;
        d.set_item("owner", &s.key.owner)?;
        d.set_item("generation", s.key.generation)?;
        d.set_item("model", s.key.model)?;
        d.set_item("asked", s.asked)?;
        d.set_item("freed", s.freed)?;
        d.set_item("refused", s.refused.as_ref().map(|r| r.to_string()))?;
        steps.append(d)?;
    }
    let d = PyDict::new(py);
    d.set_item("need", o.need)?;
    d.set_item("held", o.held)?;
    d.set_item("steps", steps)?;
    d.set_item("free_before", o.free_before)?;
    d.set_item("free_after", o.free_after)?;
    d.set_item("satisfied", o.satisfied)?;
    d.set_item("freed", o.freed())?;
    d.set_item("shortfall", o.shortfall())?;
    d.set_item("hold", hold)?;
    Ok(d)
}
