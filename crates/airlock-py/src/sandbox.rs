//! The worker's optional sandbox (`airlock-sandbox`) for Python: the host checks that the
//! kernel can enforce what a pack asks for before it starts the worker, and the worker applies
//! the rules to itself (see `comfy_airlock.sandbox`).

use std::path::PathBuf;

use airlock_sandbox::Rules;
use pyo3::create_exception;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::errors::AirlockError;

create_exception!(
    comfy_airlock,
    SandboxError,
    AirlockError,
    "A pack's `[sandbox]` cannot be enforced here (no Landlock, or no network rules)."
);

fn sandbox_err(e: airlock_sandbox::SandboxError) -> PyErr {
    SandboxError::new_err(e.to_string())
}

/// The kernel's Landlock ABI version; 0 without Landlock.
#[pyfunction]
pub fn landlock_abi() -> u32 {
    airlock_sandbox::abi()
}

/// Raises `SandboxError` unless a sandbox (without network when `network` is false) can be
/// enforced on this kernel; returns its Landlock ABI.
#[pyfunction]
pub fn sandbox_check(network: bool) -> PyResult<u32> {
    airlock_sandbox::check(network).map_err(sandbox_err)
}

/// Restricts this process, for good, to the system paths plus `read` and `write` (and listing
/// the directories in `list`), without TCP and UDP unless `network`. Call it while the process
/// has one thread.
#[pyfunction]
pub fn sandbox_apply<'py>(
    py: Python<'py>,
    read: Vec<PathBuf>,
    list: Vec<PathBuf>,
    write: Vec<PathBuf>,
    network: bool,
) -> PyResult<Bound<'py, PyDict>> {
    let mut rules = Rules::system();
    rules.read.extend(read);
    rules.list.extend(list);
    rules.write.extend(write);
    rules.network = network;
    let report = airlock_sandbox::apply(&rules).map_err(sandbox_err)?;
    let d = PyDict::new(py);
    d.set_item("abi", report.abi)?;
    d.set_item("fully_enforced", report.fully_enforced)?;
    d.set_item("network_blocked", report.network_blocked)?;
    d.set_item("scoped", report.scoped)?;
    let skipped: Vec<String> = report
        .skipped
        .iter()
        .map(|p| p.display().to_string())
        .collect();
    d.set_item("skipped", skipped)?;
    Ok(d)
}
