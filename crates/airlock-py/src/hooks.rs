//! The Python functions the core calls for what only Python can do: build tensors, encode
//! foreign types, construct exceptions, and log. Installed once by `comfy_airlock.values`.

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;

pub struct Hooks {
    /// `encode_other(lane, obj) -> tuple` for values the core does not know.
    pub encode_other: Py<PyAny>,
    /// `decode_tensor(lane, kind, dtype, shape, strides, region, device) -> object`.
    pub decode_tensor: Py<PyAny>,
    /// `decode_ext(name, payload) -> object`.
    pub decode_ext: Py<PyAny>,
    /// `make_exception(worker, module, qualname, message, args, traceback) -> BaseException`.
    pub make_exception: Py<PyAny>,
    /// `log(worker, stream, level, logger, line)`.
    pub log: Py<PyAny>,
}

static HOOKS: PyOnceLock<Hooks> = PyOnceLock::new();

/// Installs the hooks; a second call is ignored (the first installer wins).
#[pyfunction]
pub fn install_hooks(
    py: Python<'_>,
    encode_other: Py<PyAny>,
    decode_tensor: Py<PyAny>,
    decode_ext: Py<PyAny>,
    make_exception: Py<PyAny>,
    log: Py<PyAny>,
) {
    let _ = HOOKS.set(
        py,
        Hooks {
            encode_other,
            decode_tensor,
            decode_ext,
            make_exception,
            log,
        },
    );
}

pub fn hooks(py: Python<'_>) -> PyResult<&Hooks> {
    HOOKS.get(py).ok_or_else(|| {
        crate::errors::AirlockError::new_err("comfy_airlock.values was not imported")
    })
}
