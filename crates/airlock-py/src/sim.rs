//! The simulated GPU for Python (`comfy_airlock.device.SimGpu`): the tests' and the scenario
//! host's card (`airlock-sim`, ADR 0006). Errors raise `DeviceError`, `SimOutOfMemory` for a
//! checked booking that does not fit.

use std::path::PathBuf;

use airlock_sim::{CardSpec, Demotions, Semantics, SimError, SimGpu as CoreSim};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use crate::errors::{DeviceError, SimOutOfMemory};

/// The Python exception for a simulator error.
fn sim_error(py: Python<'_>, e: &SimError) -> PyErr {
    match e {
        SimError::OutOfMemory {
            pid,
            tag,
            requested,
            free,
        } => {
            let err = SimOutOfMemory::new_err(e.to_string());
            let v = err.value(py);
            let _ = v.setattr("pid", *pid);
            let _ = v.setattr("tag", tag);
            let _ = v.setattr("requested", *requested);
            let _ = v.setattr("free", *free);
            err
        }
        _ => DeviceError::new_err(e.to_string()),
    }
}

/// A simulated card shared by every process that opens its file (see ADR 0006).
#[pyclass(frozen, module = "comfy_airlock._native")]
pub struct SimGpu {
    inner: CoreSim,
}

#[pymethods]
impl SimGpu {
    /// Creates a card of `total` bytes at `path`, which must not exist. `semantics` is
    /// `"device_wide"`, `"wddm"` or `"wddm:key=value,..."`; `None` reads
    /// the variable `SIM_SEMANTICS_ENV` names, else device-wide.
    #[staticmethod]
    #[pyo3(signature = (path, total, name = "sim0", uuid = None, semantics = None))]
    fn create(
        py: Python<'_>,
        path: PathBuf,
        total: u64,
        name: &str,
        uuid: Option<String>,
        semantics: Option<&str>,
    ) -> PyResult<SimGpu> {
        let semantics = match semantics {
            Some(s) => Semantics::parse(s),
            None => Semantics::from_env(),
        }
        .map_err(|e| sim_error(py, &e))?;
        let spec = CardSpec {
            uuid,
            ..CardSpec::new(name, total).with_semantics(semantics)
        };
        CoreSim::create_with(&path, &spec)
            .map(|inner| SimGpu { inner })
            .map_err(|e| sim_error(py, &e))
    }

    /// Opens the card at `path`.
    #[staticmethod]
    fn open(py: Python<'_>, path: PathBuf) -> PyResult<SimGpu> {
        CoreSim::open(&path)
            .map(|inner| SimGpu { inner })
            .map_err(|e| sim_error(py, &e))
    }

    /// Opens the card the variable `SIM_GPU_ENV` names; `None` when it is unset.
    #[staticmethod]
    fn from_env(py: Python<'_>) -> PyResult<Option<SimGpu>> {
        CoreSim::from_env()
            .map(|o| o.map(|inner| SimGpu { inner }))
            .map_err(|e| sim_error(py, &e))
    }

    #[getter]
    fn path(&self) -> String {
        self.inner.path().display().to_string()
    }

    #[getter]
    fn uuid(&self) -> String {
        self.inner.uuid()
    }

    #[getter]
    fn name(&self) -> String {
        self.inner.name()
    }

    #[getter]
    fn total(&self) -> u64 {
        self.inner.total()
    }

    /// `"device_wide"` (every process reads the truth) or `"wddm"` (each reads its budget).
    #[getter]
    fn semantics(&self) -> &'static str {
        self.inner.semantics().as_str()
    }

    /// The semantics with their parameters, as `create` reads them back.
    #[getter]
    fn semantics_spec(&self) -> String {
        self.inner.semantics().to_string()
    }

    /// The WDDM parameters (`pinned_bias`, `repartition_bias`, `repartition_below`, bytes), or
    /// `None` on a device-wide card.
    #[getter]
    fn wddm<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        let Semantics::Wddm(p) = self.inner.semantics() else {
            return Ok(None);
        };
        let d = PyDict::new(py);
        d.set_item("pinned_bias", p.pinned_bias)?;
        d.set_item("repartition_bias", p.repartition_bias)?;
        d.set_item("repartition_below", p.repartition_below)?;
        Ok(Some(d))
    }

    /// Bytes booked by every process.
    fn used(&self) -> u64 {
        self.inner.used()
    }

    /// `total - used`, never below zero: the device's truth, what NVML reports.
    fn free(&self) -> u64 {
        self.inner.free()
    }

    /// What `pid` reads as free memory under the card's semantics (its
    /// `torch.cuda.mem_get_info`); `free()` is the truth.
    fn free_seen_by(&self, pid: u32) -> u64 {
        self.inner.free_seen_by(pid)
    }

    /// `(free_seen_by(pid), total)`: what `torch.cuda.mem_get_info` returns in `pid`.
    fn mem_get_info(&self, pid: u32) -> (u64, u64) {
        (self.inner.free_seen_by(pid), self.inner.total())
    }

    /// Bytes booked past the total (on WDDM: living in shared system memory).
    fn overcommitted(&self) -> u64 {
        self.inner.overcommitted()
    }

    /// `pid` starts on the card (its CUDA context); on WDDM its budget is pinned and the
    /// others re-partition. Returns whether it was a start (always False device-wide).
    fn attach(&self, py: Python<'_>, pid: u32) -> PyResult<bool> {
        self.inner.attach(pid).map_err(|e| sim_error(py, &e))
    }

    /// A re-partition event (WDDM); nothing device-wide.
    fn repartition(&self) {
        self.inner.repartition();
    }

    /// Re-partition events so far.
    fn repartitions(&self) -> u64 {
        self.inner.repartitions()
    }

    /// `{"count", "bytes"}`: what over-admission cost `pid` (WDDM; zeros device-wide).
    fn demotions<'py>(&self, py: Python<'py>, pid: u32) -> PyResult<Bound<'py, PyDict>> {
        demotions_dict(py, self.inner.demotions(pid))
    }

    /// Demotions summed over every process ever attached.
    fn demotions_total<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        demotions_dict(py, self.inner.demotions_total())
    }

    /// Every process on the card, ascending by pid: `pid`, `used`, `free_seen`,
    /// `repartitioned`, `demotions`, `demoted_bytes`.
    fn process_views<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let list = PyList::empty(py);
        for v in self.inner.process_views() {
            let d = PyDict::new(py);
            d.set_item("pid", v.pid)?;
            d.set_item("used", v.used)?;
            d.set_item("free_seen", v.free_seen)?;
            d.set_item("repartitioned", v.repartitioned)?;
            d.set_item("demotions", v.demotions.count)?;
            d.set_item("demoted_bytes", v.demotions.bytes)?;
            list.append(d)?;
        }
        Ok(list)
    }

    /// Processes attached (WDDM); zero on a device-wide card.
    fn processes_attached(&self) -> usize {
        self.inner.processes_attached()
    }

    /// Sets the booking of `(pid, tag)` to `nbytes`; returns the previous value.
    fn book(&self, py: Python<'_>, pid: u32, tag: &str, nbytes: u64) -> PyResult<u64> {
        self.inner
            .book(pid, tag, nbytes)
            .map_err(|e| sim_error(py, &e))
    }

    /// `book`, raising `SimOutOfMemory` when the growth does not fit in the free memory.
    fn book_checked(&self, py: Python<'_>, pid: u32, tag: &str, nbytes: u64) -> PyResult<u64> {
        self.inner
            .book_checked(pid, tag, nbytes)
            .map_err(|e| sim_error(py, &e))
    }

    /// Adds `delta` bytes (negative frees) to `(pid, tag)`; returns the new value.
    fn add(&self, py: Python<'_>, pid: u32, tag: &str, delta: i64) -> PyResult<u64> {
        self.inner
            .add(pid, tag, delta)
            .map_err(|e| sim_error(py, &e))
    }

    /// Drops `(pid, tag)`; returns the bytes it held.
    fn release(&self, py: Python<'_>, pid: u32, tag: &str) -> PyResult<u64> {
        self.inner.release(pid, tag).map_err(|e| sim_error(py, &e))
    }

    /// Drops every booking of `pid`; returns the bytes released.
    fn release_process(&self, pid: u32) -> u64 {
        self.inner.release_process(pid)
    }

    /// Drops the bookings of pids that are no longer running; returns those pids.
    fn reap(&self) -> Vec<u32> {
        self.inner.reap()
    }

    fn used_by(&self, pid: u32) -> u64 {
        self.inner.used_by(pid)
    }

    /// `[(pid, tag, bytes)]`, every booking with bytes.
    fn bookings(&self) -> Vec<(u32, String, u64)> {
        self.inner
            .bookings()
            .into_iter()
            .map(|b| (b.pid, b.tag, b.bytes))
            .collect()
    }

    /// `[(pid, bytes)]` summed over tags, ascending by pid: what NVML lists.
    fn processes(&self) -> Vec<(u32, u64)> {
        self.inner.processes()
    }

    /// Slots not free; zero on a card nobody has bookings on.
    fn slots_in_use(&self) -> usize {
        self.inner.slots_in_use()
    }

    fn __repr__(&self) -> String {
        format!(
            "SimGpu(path={:?}, name={:?}, uuid={:?}, total={}, used={}, semantics={:?})",
            self.path(),
            self.inner.name(),
            self.inner.uuid(),
            self.inner.total(),
            self.inner.used(),
            self.inner.semantics().as_str()
        )
    }
}

fn demotions_dict(py: Python<'_>, d: Demotions) -> PyResult<Bound<'_, PyDict>> {
    let out = PyDict::new(py);
    out.set_item("count", d.count)?;
    out.set_item("bytes", d.bytes)?;
    Ok(out)
}
