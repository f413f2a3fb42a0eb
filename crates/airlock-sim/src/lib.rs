//! The simulated GPU: a card that stands in for a real one on machines without a GPU, so that
//! the memory bridge is tested across real processes (ADR 0006, ADR 0020).
//!
//! A [`SimGpu`] is a card in a shared file that every test process books its "VRAM" on;
//! `airlock-fake-nvml` builds a `libnvidia-ml.so.1` that reports these cards, so the product's
//! NVML reader (`airlock-device`) is tested through real FFI. A card's [`Semantics`] say what
//! each process reads as free: the truth (Linux), or its own WDDM budget, blind to other
//! processes until a re-partition, where over-admission demotes a bystander instead of failing
//! (`docs/adr/0008-wddm-simulation.md`).
//!
//! Nothing in the product depends on this crate: the Python binding exposes it (`SimGpu`) for
//! the tests and the scenario host, and the product's device truth is NVML alone.

mod card;
mod error;
mod layout;
mod mapping;
mod process;
mod procs;
mod semantics;
mod sim;
mod table;
mod uuid;
mod wait;
mod wddm;

pub use card::{CardSpec, SIM_GPU_ENV, paths_from_env};
pub use error::SimError;
pub use layout::{BYTES_MAX, NAME_MAX, PROC_COUNT, SLOT_COUNT, TAG_MAX, UUID_MAX};
pub use process::alive;
pub use semantics::{SIM_SEMANTICS_ENV, Semantics, WddmParams};
pub use sim::{Booking, SimGpu};
pub use wddm::{Demotions, ProcessView};
