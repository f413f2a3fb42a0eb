//! What can go wrong with a simulated card, and with NVML.

use std::path::PathBuf;

use thiserror::Error;

use crate::nvml_abi::code_name;

/// An error of the simulated GPU.
#[derive(Debug, Error)]
pub enum SimError {
    #[error("cannot create simulated GPU {path}: {source}")]
    Create {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot create simulated GPU {path}: the file exists")]
    Exists { path: PathBuf },
    #[error("cannot open simulated GPU {path}: {source}")]
    Open {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is not a simulated GPU (bad magic)")]
    NotACard { path: PathBuf },
    #[error("{path} is a simulated GPU of layout version {found}; this build reads {expected}")]
    Version {
        path: PathBuf,
        found: u32,
        expected: u32,
    },
    #[error("simulated GPU {path} is {len} bytes, its header says {expected}")]
    Truncated {
        path: PathBuf,
        len: u64,
        expected: u64,
    },
    #[error("card name of {len} bytes (at most {max})")]
    NameTooLong { len: usize, max: usize },
    #[error("card UUID {uuid:?} is not a GPU-/MIG- UUID of at most {max} printable bytes")]
    InvalidUuid { uuid: String, max: usize },
    #[error("tag of {len} bytes (at most {max})")]
    TagTooLong { len: usize, max: usize },
    #[error("pid {pid} cannot book")]
    InvalidPid { pid: u32 },
    #[error("booking of {bytes} bytes (at most {max} per tag)")]
    TooLarge { bytes: u64, max: u64 },
    #[error("pid {pid} tag {tag:?} holds {booked} bytes; cannot add {delta}")]
    Underflow {
        pid: u32,
        tag: String,
        booked: u64,
        delta: i64,
    },
    /// What a CUDA allocation would raise: the growth asked for does not fit.
    #[error("out of memory: pid {pid} tag {tag:?} asked for {requested} more bytes, {free} free")]
    OutOfMemory {
        pid: u32,
        tag: String,
        requested: u64,
        free: u64,
    },
    #[error("all {slots} booking slots are in use")]
    Full { slots: usize },
    #[error("all {max} process records of the WDDM card are in use")]
    ProcessesFull { max: usize },
    #[error("bad simulated GPU semantics {spec:?}: {reason}")]
    BadSemantics { spec: String, reason: String },
}

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
