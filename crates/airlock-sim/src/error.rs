//! What can go wrong with a simulated card.

use std::path::PathBuf;

use thiserror::Error;

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
