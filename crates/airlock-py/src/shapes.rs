//! The memory protocol's typed messages (`airlock_wire::memory`) as the Python code sees them:
//! dicts under string topics, exactly as before the protocol was typed (ADR 0020). This is the
//! one place that knows both spellings; `_native.pyi` documents the dicts field by field.
//!
//! Python → Rust is strict: a missing field, a field of the wrong type, or a field the protocol
//! does not name is a `ValueError`/`TypeError` naming the message and the field, raised where
//! the Python code hands the dict over (nothing is sent). The one exception is the host's
//! admission answer, whose dict is the host's full record of the decision: only the fields the
//! worker gets are read from it.

use airlock_wire::limits::MAX_MEMORY_ITEMS;
use airlock_wire::{
    Admission, Answer, LoadRequest, ModelKind, ModelRow, Notice, Question, WorkerReport,
};
use pyo3::conversion::FromPyObjectOwned;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

/// The topics the Python code uses for the typed messages.
pub(crate) const ADMIT: &str = "admit?";
pub(crate) const OOM: &str = "oom?";
pub(crate) const LOADED: &str = "loaded";
pub(crate) const TELEMETRY: &str = "telemetry";

/// The typed question for `topic`, or `None` when `topic` is not a memory question.
pub(crate) fn question(topic: &str, payload: &Bound<'_, PyAny>) -> Option<PyResult<Question>> {
    match topic {
        ADMIT => Some(load_request(payload).map(Question::Admit)),
        OOM => Some(load_request(payload).map(Question::Oom)),
        _ => None,
    }
}

/// The typed notice for `topic`, or `None` when `topic` is not a memory notice.
pub(crate) fn notice(topic: &str, payload: &Bound<'_, PyAny>) -> Option<PyResult<Notice>> {
    match topic {
        LOADED => Some(holds(payload).map(|holds| Notice::Loaded { holds })),
        TELEMETRY => Some(report(payload).map(Notice::Telemetry)),
        _ => None,
    }
}

/// `(topic, payload)` as the host's `on_event` receives a question.
pub(crate) fn question_to_py<'py>(
    py: Python<'py>,
    q: &Question,
) -> PyResult<(&'static str, Bound<'py, PyDict>)> {
    Ok(match q {
        Question::Admit(r) => (ADMIT, load_request_to_py(py, r)?),
        Question::Oom(r) => (OOM, load_request_to_py(py, r)?),
    })
}

/// `(topic, payload)` as the host's `on_event` receives a notice.
pub(crate) fn notice_to_py<'py>(
    py: Python<'py>,
    n: &Notice,
) -> PyResult<(&'static str, Bound<'py, PyDict>)> {
    Ok(match n {
        Notice::Loaded { holds } => {
            let d = PyDict::new(py);
            d.set_item("holds", PyList::new(py, holds)?)?;
            (LOADED, d)
        }
        Notice::Telemetry(r) => (TELEMETRY, report_to_py(py, r)?),
    })
}

/// A dict's fields, taken one by one; what is left at the end is unknown to the protocol.
struct Fields<'py> {
    what: &'static str,
    dict: Bound<'py, PyDict>,
    taken: usize,
}

impl<'py> Fields<'py> {
    fn new(what: &'static str, obj: &Bound<'py, PyAny>) -> PyResult<Self> {
        let dict = obj.cast::<PyDict>().map_err(|_| {
            PyTypeError::new_err(format!("{what}: expected a dict, got {}", type_name(obj)))
        })?;
        Ok(Fields {
            what,
            dict: dict.clone(),
            taken: 0,
        })
    }

    fn take<T: FromPyObjectOwned<'py>>(&mut self, key: &str) -> PyResult<T> {
        let Some(v) = self.dict.get_item(key)? else {
            return Err(PyValueError::new_err(format!(
                "{}: no field {key:?}",
                self.what
            )));
        };
        self.taken += 1;
        v.extract::<T>().map_err(|e| {
            let e: PyErr = e.into();
            PyTypeError::new_err(format!("{}: field {key:?}: {e}", self.what))
        })
    }

    /// A list field of at most [`MAX_MEMORY_ITEMS`] entries (what the peer accepts).
    fn take_list<T: FromPyObjectOwned<'py>>(&mut self, key: &str) -> PyResult<Vec<T>> {
        let v: Vec<Bound<'py, PyAny>> = self.take(key)?;
        bounded(self.what, key, v.len())?;
        v.iter()
            .map(|x| {
                x.extract::<T>().map_err(|e| {
                    let e: PyErr = e.into();
                    PyTypeError::new_err(format!("{}: an entry of {key:?}: {e}", self.what))
                })
            })
            .collect()
    }

    /// Refuses fields the protocol does not name.
    fn finish(self) -> PyResult<()> {
        if self.dict.len() == self.taken {
            return Ok(());
        }
        Err(PyValueError::new_err(format!(
            "{}: {} is not a field of the memory protocol (crates/airlock-wire/src/memory.rs)",
            self.what,
            self.dict.keys().repr()?
        )))
    }
}

fn bounded(what: &str, key: &str, len: usize) -> PyResult<()> {
    if len > MAX_MEMORY_ITEMS {
        return Err(PyValueError::new_err(format!(
            "{what}: {len} entries in {key:?}, more than the {MAX_MEMORY_ITEMS} the host accepts"
        )));
    }
    Ok(())
}

fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map_or_else(|_| "?".into(), |n| n.to_string())
}

/// A worker report (`comfy_airlock.worker.models.report()`).
pub(crate) fn report(obj: &Bound<'_, PyAny>) -> PyResult<WorkerReport> {
    let mut f = Fields::new("worker report", obj)?;
    let pid = f.take("pid")?;
    let seq = f.take("seq")?;
    let reserved = f.take("reserved")?;
    let rows: Vec<Bound<'_, PyAny>> = f.take("models")?;
    bounded("worker report", "models", rows.len())?;
    let models = rows.iter().map(model_row).collect::<PyResult<_>>()?;
    let r = WorkerReport {
        pid,
        seq,
        reserved,
        models,
        pinned: f.take("pinned")?,
        rss: f.take("rss")?,
        floor: f.take("floor")?,
        device_uuid: f.take("device_uuid")?,
    };
    f.finish()?;
    Ok(r)
}

fn model_row(obj: &Bound<'_, PyAny>) -> PyResult<ModelRow> {
    let mut f = Fields::new("worker report: model row", obj)?;
    let id = f.take("id")?;
    let name = f.take("name")?;
    let kind = match f.take::<String>("kind")?.as_str() {
        "patcher" => ModelKind::Patcher,
        "module" => ModelKind::Module,
        other => {
            return Err(PyValueError::new_err(format!(
                "worker report: model row: kind {other:?} is neither \"patcher\" nor \"module\""
            )));
        }
    };
    let row = ModelRow {
        id,
        name,
        kind,
        device: f.take("device")?,
        size: f.take("size")?,
        resident: f.take("resident")?,
        seq: f.take("seq")?,
        last_used: f.take("last_used")?,
        in_use: f.take("in_use")?,
    };
    f.finish()?;
    Ok(row)
}

pub(crate) fn report_to_py<'py>(py: Python<'py>, r: &WorkerReport) -> PyResult<Bound<'py, PyDict>> {
    let rows = PyList::empty(py);
    for m in &r.models {
        let row = PyDict::new(py);
        row.set_item("id", m.id)?;
        row.set_item("name", &m.name)?;
        row.set_item(
            "kind",
            match m.kind {
                ModelKind::Patcher => "patcher",
                ModelKind::Module => "module",
            },
        )?;
        row.set_item("device", &m.device)?;
        row.set_item("size", m.size)?;
        row.set_item("resident", m.resident)?;
        row.set_item("seq", m.seq)?;
        row.set_item("last_used", m.last_used)?;
        row.set_item("in_use", m.in_use)?;
        rows.append(row)?;
    }
    let d = PyDict::new(py);
    d.set_item("pid", r.pid)?;
    d.set_item("seq", r.seq)?;
    d.set_item("reserved", r.reserved)?;
    d.set_item("models", rows)?;
    d.set_item("pinned", r.pinned)?;
    d.set_item("rss", r.rss)?;
    d.set_item("floor", r.floor)?;
    d.set_item("device_uuid", &r.device_uuid)?;
    Ok(d)
}

/// An optional report (none published yet, or a command that could not report): `None`.
pub(crate) fn report_or_none<'py>(
    py: Python<'py>,
    r: Option<&WorkerReport>,
) -> PyResult<Bound<'py, PyAny>> {
    match r {
        Some(r) => Ok(report_to_py(py, r)?.into_any()),
        None => Ok(py.None().into_bound(py)),
    }
}

fn load_request(obj: &Bound<'_, PyAny>) -> PyResult<LoadRequest> {
    let mut f = Fields::new("load request", obj)?;
    let r = LoadRequest {
        device: f.take("device")?,
        need: f.take("need")?,
        minimum: f.take("minimum")?,
        models: f.take_list("models")?,
    };
    f.finish()?;
    Ok(r)
}

fn load_request_to_py<'py>(py: Python<'py>, r: &LoadRequest) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("device", &r.device)?;
    d.set_item("need", r.need)?;
    d.set_item("minimum", r.minimum)?;
    d.set_item("models", PyList::new(py, &r.models)?)?;
    Ok(d)
}

fn holds(obj: &Bound<'_, PyAny>) -> PyResult<Vec<u64>> {
    let mut f = Fields::new("loaded notice", obj)?;
    let holds = f.take_list("holds")?;
    f.finish()?;
    Ok(holds)
}

/// The worker's part of the host's admission record (`comfy_airlock.host.admission.answer`);
/// the rest of the record (the candidates, the arbiter's steps) stays in the host.
pub(crate) fn admission(obj: &Bound<'_, PyAny>) -> PyResult<Admission> {
    let mut f = Fields::new("admission answer", obj)?;
    Ok(Admission {
        granted: f.take("granted")?,
        hold: f.take("hold")?,
        need: f.take("need")?,
        free_before: f.take("free_before")?,
        held: f.take("held")?,
        free: f.take("free")?,
    })
}

/// A decided admission as the worker's `ask` returns it.
pub(crate) fn admission_to_py<'py>(py: Python<'py>, a: &Admission) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("granted", a.granted)?;
    d.set_item("hold", a.hold)?;
    d.set_item("need", a.need)?;
    d.set_item("free_before", a.free_before)?;
    d.set_item("held", a.held)?;
    d.set_item("free", a.free)?;
    Ok(d)
}

/// What the worker's `ask` returns for `answer`: the admission, or the host's failure raised.
pub(crate) fn answer_to_py<'py>(py: Python<'py>, answer: &Answer) -> PyResult<Bound<'py, PyAny>> {
    match answer {
        Answer::Decided(a) => Ok(admission_to_py(py, a)?.into_any()),
        Answer::Unanswered { reason } => Err(crate::errors::AirlockError::new_err(reason.clone())),
    }
}
