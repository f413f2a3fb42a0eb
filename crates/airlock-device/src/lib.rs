//! Device truth for comfy-airlock: what the product reads about the card and host RAM.
//!
//! The memory bridge must know how much memory the card really has free, across the host and
//! every worker. On a real card that is NVML ([`Nvml`]), loaded at run time and resolved by
//! UUID; without a driver it is unavailable and callers degrade. [`resolve_device`] and
//! [`DeviceTruth`] are the bridge's device truth (one UUID for host and workers, NVML's
//! reading of it, `None` without a driver); [`host_ram`] is host RAM as the process's memory
//! cgroup limits it.
//!
//! Only what runs in production lives here. The simulated GPU that tests book on, and that
//! `airlock-fake-nvml` reports through this crate's NVML reader, is `airlock-sim`
//! (`docs/adr/0006-simulated-gpu.md`, `docs/adr/0020-typed-protocol-loops-and-sim.md`).

mod dl;
mod error;
mod nvml;
pub mod nvml_abi;
mod ram;
mod truth;
mod uuid;

pub use error::{DeviceMismatch, NvmlCode, NvmlError, RamError};
pub use nvml::{
    Device, DeviceInfo, MemoryInfo, NVML_LIBRARY, NVML_LIBRARY_ENV, Nvml, ProcessMemory,
};
pub use ram::{HostRam, RamFiles, RamSource, host_ram, host_ram_from};
pub use truth::{DeviceTruth, resolve_device};
pub use uuid::normalize_uuid;
