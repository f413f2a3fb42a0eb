//! The simulated GPU, the NVML reader and host RAM for Python (`comfy_airlock.device` wraps
//! these).
//!
//! NVML that cannot be loaded or initialised reads as `None`, never as an exception: callers
//! degrade to upstream's own semantics. Errors of a loaded NVML, and of the simulator, raise
//! `DeviceError` (`SimOutOfMemory` for a checked booking that does not fit, `DeviceMismatch`
//! for a worker on another card than the host's).

use std::path::PathBuf;

use airlock_device::{
    CardSpec, Demotions, DeviceInfo, DeviceTruth as CoreTruth, MemoryInfo, Nvml as CoreNvml,
    NvmlError, Semantics, SimError, SimGpu as CoreSim,
};
use pyo3::create_exception;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use crate::errors::{DeviceError, SimOutOfMemory};

create_exception!(
    comfy_airlock,
    DeviceMismatch,
    DeviceError,
    "A worker's device is not the host's (by UUID); `.pack`, `.host_uuid` and `.worker_uuid` \
     say which."
);

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
    /// Creates a card of `total` bytes at `path`, which must not exist. `semantics` is
    /// `"device_wide"`, `"wddm"` or `"wddm:key=value,..."`; `None` reads
    /// `AIRLOCK_SIM_SEMANTICS`, else device-wide.
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

/// The UUID the host and every worker share (NVML's spelling); `workers` maps each pack to its
/// worker's device UUID. Raises `DeviceMismatch` naming the first pack on another card.
#[pyfunction]
pub fn resolve_device(
    py: Python<'_>,
    host_uuid: &str,
    workers: Vec<(String, String)>,
) -> PyResult<String> {
    airlock_device::resolve_device(
        host_uuid,
        workers.iter().map(|(p, u)| (p.as_str(), u.as_str())),
    )
    .map_err(|e| {
        let err = DeviceMismatch::new_err(e.to_string());
        let v = err.value(py);
        let _ = v.setattr("pack", &e.pack);
        let _ = v.setattr("host_uuid", &e.host_uuid);
        let _ = v.setattr("worker_uuid", &e.worker_uuid);
        err
    })
}

/// NVML's reading of one device by UUID, kept open; reads `None` without an NVIDIA driver.
#[pyclass(frozen, module = "comfy_airlock._native")]
pub struct DeviceTruth {
    inner: CoreTruth,
}

#[pymethods]
impl DeviceTruth {
    /// The device `uuid` (NVML's or torch's spelling) through NVML at `library`, else
    /// `AIRLOCK_NVML_LIBRARY`, else the driver's. Raises `DeviceError` when NVML answers but has
    /// no such device.
    #[staticmethod]
    #[pyo3(signature = (uuid, library = None))]
    fn open(py: Python<'_>, uuid: &str, library: Option<PathBuf>) -> PyResult<DeviceTruth> {
        py.detach(|| {
            let nvml = match library {
                Some(path) => CoreNvml::open_at(&path),
                None => CoreNvml::open(),
            };
            CoreTruth::with(nvml, uuid)
        })
        .map(|inner| DeviceTruth { inner })
        .map_err(|e| nvml_error(&e))
    }

    /// The UUID in NVML's spelling.
    #[getter]
    fn uuid(&self) -> String {
        self.inner.uuid().to_owned()
    }

    /// Whether NVML answers; False: use upstream's own semantics.
    #[getter]
    fn available(&self) -> bool {
        self.inner.available()
    }

    /// `uuid`, `total`, `free`, `used` now, device-wide; `None` without NVML.
    fn memory<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        match py.detach(|| self.inner.memory()) {
            Ok(Some(m)) => Ok(Some(memory_dict(py, self.inner.uuid(), &m)?)),
            Ok(None) => Ok(None),
            Err(e) => Err(nvml_error(&e)),
        }
    }

    fn __repr__(&self) -> String {
        format!(
            "DeviceTruth(uuid={:?}, available={})",
            self.inner.uuid(),
            self.inner.available()
        )
    }
}

/// Host RAM as this process may use it (`total`, `used`, `available` bytes; `source`:
/// `"cgroup_v2"`, `"cgroup_v1"` or `"machine"`; `cgroup`: the binding directory or `None`).
#[pyfunction]
pub fn host_ram(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let r = py
        .detach(airlock_device::host_ram)
        .map_err(|e| DeviceError::new_err(e.to_string()))?;
    let d = PyDict::new(py);
    d.set_item("total", r.total)?;
    d.set_item("used", r.used)?;
    d.set_item("available", r.available)?;
    d.set_item("source", r.source.as_str())?;
    d.set_item("cgroup", r.cgroup.map(|p| p.display().to_string()))?;
    Ok(d)
}
