//! Device truth for comfy-airlock: the NVML reader, and the simulated GPU that stands in for a
//! card on machines without one.
//!
//! The memory bridge must know how much memory the card really has free, across the host and
//! every worker. On a real card that is NVML ([`Nvml`]), loaded at run time and resolved by
//! UUID; without a driver it is unavailable and callers degrade. Tests need the same truth
//! without a GPU: a [`SimGpu`] is a card in a shared file that every test process books its
//! "VRAM" on, and `airlock-fake-nvml` builds a `libnvidia-ml.so.1` that reports that card, so
//! the reader is tested through real FFI. See `docs/adr/0006-simulated-gpu.md`.

mod dl;
mod error;
mod layout;
mod mapping;
mod nvml;
pub mod nvml_abi;
mod process;
mod sim;
mod table;
mod uuid;

pub use error::{NvmlCode, NvmlError, SimError};
pub use layout::{BYTES_MAX, NAME_MAX, SLOT_COUNT, TAG_MAX, UUID_MAX};
pub use nvml::{
    Device, DeviceInfo, MemoryInfo, NVML_LIBRARY, NVML_LIBRARY_ENV, Nvml, ProcessMemory,
};
pub use process::alive;
pub use sim::{Booking, CardSpec, SIM_GPU_ENV, Semantics, SimGpu, paths_from_env};
pub use uuid::normalize_uuid;
