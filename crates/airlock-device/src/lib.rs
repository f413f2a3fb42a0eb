//! Device truth for comfy-airlock: the NVML reader, and the simulated GPU that stands in for a
//! card on machines without one.
//!
//! The memory bridge must know how much memory the card really has free, across the host and
//! every worker. On a real card that is NVML ([`Nvml`]), loaded at run time and resolved by
//! UUID; without a driver it is unavailable and callers degrade. Tests need the same truth
//! without a GPU: a [`SimGpu`] is a card in a shared file that every test process books its
//! "VRAM" on, and `airlock-fake-nvml` builds a `libnvidia-ml.so.1` that reports that card, so
//! the reader is tested through real FFI. See `docs/adr/0006-simulated-gpu.md`.
//!
//! A card's [`Semantics`] say what each process reads as free: the truth (Linux), or its own
//! WDDM budget, blind to other processes until a re-partition, where over-admission demotes a
//! bystander instead of failing (`docs/adr/0008-wddm-simulation.md`). [`resolve_device`] and
//! [`DeviceTruth`] are the bridge's device truth (one UUID for host and workers, NVML's
//! reading of it, `None` without a driver); [`host_ram`] is host RAM as the process's memory
//! cgroup limits it.

mod dl;
mod error;
mod layout;
mod mapping;
mod nvml;
pub mod nvml_abi;
mod process;
mod procs;
mod ram;
mod semantics;
mod sim;
mod table;
mod truth;
mod uuid;
mod wddm;

pub use error::{DeviceMismatch, NvmlCode, NvmlError, RamError, SimError};
pub use layout::{BYTES_MAX, NAME_MAX, PROC_COUNT, SLOT_COUNT, TAG_MAX, UUID_MAX};
pub use nvml::{
    Device, DeviceInfo, MemoryInfo, NVML_LIBRARY, NVML_LIBRARY_ENV, Nvml, ProcessMemory,
};
pub use process::alive;
pub use ram::{HostRam, RamFiles, RamSource, host_ram, host_ram_from};
pub use semantics::{SIM_SEMANTICS_ENV, Semantics, WddmParams};
pub use sim::{Booking, CardSpec, SIM_GPU_ENV, SimGpu, paths_from_env};
pub use truth::{DeviceTruth, resolve_device};
pub use uuid::normalize_uuid;
pub use wddm::{Demotions, ProcessView};
