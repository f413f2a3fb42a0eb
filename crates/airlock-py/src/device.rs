//! The simulated GPU and the NVML reader for Python (`comfy_airlock.device` wraps these).
//!
//! NVML that cannot be loaded or initialised reads as `None`, never as an exception: callers
//! degrade to upstream's own semantics. Errors of a loaded NVML, and of the simulator, raise
//! `DeviceError` (`SimOutOfMemory` for a checked booking that does not fit).

use std::path::PathBuf;

use airlock_device::{
    CardSpec, DeviceInfo, MemoryInfo, Nvml as CoreNvml, NvmlError, SimError, SimGpu as CoreSim,
};
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

fn nvml_error(e: &NvmlError) -> PyErr {
    DeviceError::new_err(e.to_string())
}

/// A simulated card shared by every process that opens its file (see ADR 0006).
#[pyclass(frozen, module = "comfy_airlock._native")]
pub struct SimGpu {
    inner: CoreSim,
}

#[pymethods]
impl SimGpu {
    /// Creates a card of `total` bytes at `path`, which must not exist.
    #[staticmethod]
    #[pyo3(signature = (path, total, name = "sim0", uuid = None))]
    fn create(
        py: Python<'_>,
        path: PathBuf,
        total: u64,
        name: &str,
        uuid: Option<String>,
    ) -> PyResult<SimGpu> {
        let spec = CardSpec {
            uuid,
            ..CardSpec::new(name, total)
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

    /// Opens the card named by `AIRLOCK_SIM_GPU`; `None` when it is unset.
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

    /// `"device_wide"`: every process sees every allocation.
    #[getter]
    fn semantics(&self) -> &'static str {
        self.inner.semantics().as_str()
    }

    /// Bytes booked by every process.
    fn used(&self) -> u64 {
        self.inner.used()
    }

    /// `total - used`, never below zero: the device's truth, what NVML reports.
    fn free(&self) -> u64 {
        self.inner.free()
    }

    /// What `pid` reads as free memory under the card's semantics.
    fn free_seen_by(&self, pid: u32) -> u64 {
        self.inner.free_seen_by(pid)
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
            "SimGpu(path={:?}, name={:?}, uuid={:?}, total={}, used={})",
            self.path(),
            self.inner.name(),
            self.inner.uuid(),
            self.inner.total(),
            self.inner.used()
        )
    }
}

fn memory_dict<'py>(py: Python<'py>, uuid: &str, m: &MemoryInfo) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("uuid", uuid)?;
    d.set_item("total", m.total)?;
    d.set_item("free", m.free)?;
    d.set_item("used", m.used)?;
    Ok(d)
}

fn device_dict<'py>(py: Python<'py>, info: &DeviceInfo) -> PyResult<Bound<'py, PyDict>> {
    let d = memory_dict(py, &info.uuid, &info.memory)?;
    d.set_item("name", &info.name)?;
    match &info.processes {
        Some(list) => {
            let procs = PyList::empty(py);
            for p in list {
                let e = PyDict::new(py);
                e.set_item("pid", p.pid)?;
                e.set_item("used", p.used)?;
                procs.append(e)?;
            }
            d.set_item("processes", procs)?;
        }
        None => d.set_item("processes", py.None())?,
    }
    Ok(d)
}

/// Opens NVML at `library` (else `AIRLOCK_NVML_LIBRARY`, else `libnvidia-ml.so.1`); `None`
/// when it is unavailable.
fn open_nvml(library: Option<PathBuf>) -> PyResult<Option<CoreNvml>> {
    let opened = match library {
        Some(path) => CoreNvml::open_at(&path),
        None => CoreNvml::open(),
    };
    match opened {
        Ok(n) => Ok(Some(n)),
        Err(e) if e.is_unavailable() => Ok(None),
        Err(e) => Err(nvml_error(&e)),
    }
}

fn read_devices(nvml: &CoreNvml) -> Result<Vec<DeviceInfo>, NvmlError> {
    nvml.devices()?.iter().map(|d| d.info()).collect()
}

fn read_memory(nvml: &CoreNvml, uuid: &str) -> Result<Option<MemoryInfo>, NvmlError> {
    match nvml.device_by_uuid(uuid) {
        Ok(d) => d.memory().map(Some),
        Err(NvmlError::NoDevice { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

fn devices_list<'py>(py: Python<'py>, nvml: &CoreNvml) -> PyResult<Bound<'py, PyList>> {
    let infos = py
        .detach(|| read_devices(nvml))
        .map_err(|e| nvml_error(&e))?;
    let list = PyList::empty(py);
    for info in &infos {
        list.append(device_dict(py, info)?)?;
    }
    Ok(list)
}

fn memory_of<'py>(
    py: Python<'py>,
    nvml: &CoreNvml,
    uuid: &str,
) -> PyResult<Option<Bound<'py, PyDict>>> {
    let normalized = airlock_device::normalize_uuid(uuid);
    match py.detach(|| read_memory(nvml, uuid)) {
        Ok(Some(m)) => Ok(Some(memory_dict(py, &normalized, &m)?)),
        Ok(None) => Ok(None),
        Err(e) => Err(nvml_error(&e)),
    }
}

/// An initialised NVML, kept open for repeated reads (initialising costs far more than a read).
#[pyclass(frozen, module = "comfy_airlock._native")]
pub struct Nvml {
    inner: CoreNvml,
}

#[pymethods]
impl Nvml {
    /// NVML from `library`, `AIRLOCK_NVML_LIBRARY` or the driver's `libnvidia-ml.so.1`;
    /// `None` when it cannot be loaded or initialised.
    #[staticmethod]
    #[pyo3(signature = (library = None))]
    fn open(py: Python<'_>, library: Option<PathBuf>) -> PyResult<Option<Nvml>> {
        Ok(py
            .detach(|| open_nvml(library))?
            .map(|inner| Nvml { inner }))
    }

    /// The library as it was asked for.
    #[getter]
    fn library(&self) -> String {
        self.inner.library().to_owned()
    }

    /// Every device, in NVML's order.
    fn devices<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        devices_list(py, &self.inner)
    }

    /// Memory of the device with `uuid` (NVML's or torch's spelling); `None` if NVML has none.
    fn memory<'py>(&self, py: Python<'py>, uuid: &str) -> PyResult<Option<Bound<'py, PyDict>>> {
        memory_of(py, &self.inner, uuid)
    }
}

/// Every NVML device as a dict (`uuid`, `name`, `total`, `free`, `used`, `processes`), or
/// `None` when NVML is unavailable. Loads and initialises NVML for this one read.
#[pyfunction]
#[pyo3(signature = (library = None))]
pub fn nvml_devices<'py>(
    py: Python<'py>,
    library: Option<PathBuf>,
) -> PyResult<Option<Bound<'py, PyList>>> {
    match py.detach(|| open_nvml(library))? {
        Some(nvml) => devices_list(py, &nvml).map(Some),
        None => Ok(None),
    }
}

/// Memory of the device with `uuid` (`uuid`, `total`, `free`, `used`), or `None` when NVML is
/// unavailable or has no such device.
#[pyfunction]
#[pyo3(signature = (uuid, library = None))]
pub fn nvml_memory<'py>(
    py: Python<'py>,
    uuid: &str,
    library: Option<PathBuf>,
) -> PyResult<Option<Bound<'py, PyDict>>> {
    match py.detach(|| open_nvml(library))? {
        Some(nvml) => memory_of(py, &nvml, uuid),
        None => Ok(None),
    }
}
