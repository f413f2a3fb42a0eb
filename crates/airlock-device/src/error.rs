//! What can go wrong with NVML, host RAM readings, and the host's and workers' device.

use std::path::PathBuf;

use thiserror::Error;

use crate::nvml_abi::code_name;

/// The host's device and a worker's are not the same card (by UUID): the memory bridge
/// arbitrates one card, so the pack's worker must see the host's.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error(
    "pack {pack}: its worker's device is {worker_uuid}, the host's is {host_uuid}; they must be \
     the same card (check CUDA_VISIBLE_DEVICES in the pack's environment)"
)]
pub struct DeviceMismatch {
    pub pack: String,
    pub host_uuid: String,
    pub worker_uuid: String,
}

/// Host RAM could not be read.
#[derive(Debug, Error)]
pub enum RamError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot parse {path}: {reason}")]
    Parse { path: PathBuf, reason: String },
}

/// An NVML return code, with the library's own description of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NvmlCode {
    pub code: u32,
    /// `nvmlErrorString(code)`.
    pub message: String,
}

impl NvmlCode {
    /// The constant's name in `nvml.h`, e.g. `NVML_ERROR_NOT_FOUND`.
    pub fn name(&self) -> &'static str {
        code_name(self.code)
    }
}

impl std::fmt::Display for NvmlCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({}): {}", self.name(), self.code, self.message)
    }
}

/// An error of the NVML reader. The first three mean NVML is unavailable
/// ([`NvmlError::is_unavailable`]): callers degrade to upstream's own semantics.
#[derive(Debug, Error)]
pub enum NvmlError {
    #[error("cannot load {library}: {reason}")]
    LibraryNotFound {
        library: String,
        /// `dlerror()`'s text.
        reason: String,
    },
    #[error("{library} has no symbol {symbol}")]
    MissingSymbol {
        library: String,
        symbol: &'static str,
    },
    #[error("nvmlInit_v2 in {library} failed: {code}")]
    Init { library: String, code: NvmlCode },
    #[error("{function} failed: {code}")]
    Call {
        function: &'static str,
        code: NvmlCode,
    },
    #[error("NVML knows no device with UUID {uuid}")]
    NoDevice { uuid: String },
    #[error("{function} returned text that is not UTF-8")]
    BadText { function: &'static str },
}

impl NvmlError {
    /// No usable NVML here: no library, a library without the functions we need, or no driver.
    pub fn is_unavailable(&self) -> bool {
        matches!(
            self,
            NvmlError::LibraryNotFound { .. }
                | NvmlError::MissingSymbol { .. }
                | NvmlError::Init { .. }
        )
    }
}
