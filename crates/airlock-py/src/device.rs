//! The NVML reader, the device check and host RAM for Python (`comfy_airlock.device` wraps
//! these; the simulated GPU is `sim.rs`).
//!
//! NVML that cannot be loaded or initialised reads as `None`, never as an exception: callers
//! degrade to upstream's own semantics. Errors of a loaded NVML raise `DeviceError`
//! (`DeviceMismatch` for a worker on another card than the host's).

use std::path::PathBuf;

use airlock_device::{
    DeviceInfo, DeviceTruth as CoreTruth, MemoryInfo, Nvml as CoreNvml, NvmlError,
};
use pyo3::create_exception;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use crate::errors::DeviceError;

create_exception!(
    comfy_airlock,
    DeviceMismatch,
    DeviceError,
    "A worker's device is not the host's (by UUID); `.pack`, `.host_uuid` and `.worker_uuid` \
     say which."
);

fn nvml_error(e: &NvmlError) -> PyErr {
    DeviceError::new_err(e.to_string())
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

/// Opens NVML at `library` (else the one `NVML_LIBRARY_ENV` names, else `libnvidia-ml.so.1`); `None`
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
    let infos = crate::exit_gate::detach(py, || read_devices(nvml)).map_err(|e| nvml_error(&e))?;
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
    match crate::exit_gate::detach(py, || read_memory(nvml, uuid)) {
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
    /// NVML from `library`, the one `NVML_LIBRARY_ENV` names, or the driver's `libnvidia-ml.so.1`;
    /// `None` when it cannot be loaded or initialised.
    #[staticmethod]
    #[pyo3(signature = (library = None))]
    fn open(py: Python<'_>, library: Option<PathBuf>) -> PyResult<Option<Nvml>> {
        Ok(crate::exit_gate::detach(py, || open_nvml(library))?.map(|inner| Nvml { inner }))
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
    match crate::exit_gate::detach(py, || open_nvml(library))? {
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
    match crate::exit_gate::detach(py, || open_nvml(library))? {
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
    /// the one `NVML_LIBRARY_ENV` names, else the driver's. Raises `DeviceError` when NVML answers but has
    /// no such device.
    #[staticmethod]
    #[pyo3(signature = (uuid, library = None))]
    fn open(py: Python<'_>, uuid: &str, library: Option<PathBuf>) -> PyResult<DeviceTruth> {
        crate::exit_gate::detach(py, || {
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
        match crate::exit_gate::detach(py, || self.inner.memory()) {
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
    let r = crate::exit_gate::detach(py, airlock_device::host_ram)
        .map_err(|e| DeviceError::new_err(e.to_string()))?;
    let d = PyDict::new(py);
    d.set_item("total", r.total)?;
    d.set_item("used", r.used)?;
    d.set_item("available", r.available)?;
    d.set_item("source", r.source.as_str())?;
    d.set_item("cgroup", r.cgroup.map(|p| p.display().to_string()))?;
    Ok(d)
}
