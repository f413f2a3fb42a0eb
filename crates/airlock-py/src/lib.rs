//! `comfy_airlock._native`: the Rust core as seen from Python. Bindings only; every concept
//! lives in the `airlock-*` crates.

mod arbiter;
mod born;
mod born_numpy;
mod call;
mod cli;
mod commands;
mod convert;
mod device;
mod env;
mod errors;
mod exit_gate;
mod hooks;
mod host;
mod lane;
mod runner;
mod sandbox;
mod shapes;
mod sim;
mod sink;
mod watch;
mod worker;

use pyo3::prelude::*;

#[pymodule]
mod _native {
    #[pymodule_export]
    use crate::errors::{
        AirlockError, CallInterrupted, DeadlineExceeded, HandshakeError, ProtocolError,
        RemoteError, SpawnError, ValueTooLarge, WorkerDied,
    };
    #[pymodule_export]
    use crate::hooks::install_hooks;
    #[pymodule_export]
    use crate::host::Worker;
    #[pymodule_export]
    use crate::lane::{Lane, rejections};
    #[pymodule_export]
    use crate::watch::{
        WriteWatch, private_pages, private_watched, watch_private, write_watch_supported,
    };
    #[pymodule_export]
    use crate::worker::{WorkerLink, born_numpy, born_stats, connect, forbid_same_user_access};

    #[pymodule_export]
    const PROTOCOL_VERSION: u32 = airlock_wire::PROTOCOL_VERSION;

    // Pack configs, environments and the `airlock` command.
    #[pymodule_export]
    use crate::cli::cli_main;
    #[pymodule_export]
    use crate::env::{
        comfy_env_configs, discover_packs, ensure_env, pack_config, pickle_denied_modules, scan_key,
    };
    #[pymodule_export]
    use crate::errors::{ConfigError, EnvError, EnvMissing};

    // The simulated GPU and the NVML reader (comfy_airlock.device wraps these).
    #[pymodule_export]
    use crate::device::{
        DeviceMismatch, DeviceTruth, Nvml, host_ram, nvml_devices, nvml_memory, resolve_device,
    };
    #[pymodule_export]
    use crate::errors::{DeviceError, SimOutOfMemory};
    #[pymodule_export]
    use crate::sim::SimGpu;
    #[pymodule_export]
    const SIM_GPU_ENV: &str = airlock_sim::SIM_GPU_ENV;
    #[pymodule_export]
    const NVML_LIBRARY_ENV: &str = airlock_device::NVML_LIBRARY_ENV;
    #[pymodule_export]
    const SIM_SEMANTICS_ENV: &str = airlock_sim::SIM_SEMANTICS_ENV;

    // The host's eviction arbiter (single-flight free-room decisions over worker models).
    #[pymodule_export]
    use crate::arbiter::{Arbiter, ArbiterError};

    // The worker's optional Landlock sandbox (comfy_airlock.sandbox wraps these).
    #[pymodule_export]
    use crate::sandbox::{SandboxError, landlock_abi, sandbox_apply, sandbox_check};

    // Threads the core started stop calling into Python before the interpreter exits.
    #[pymodule_init]
    fn init(m: &pyo3::Bound<'_, pyo3::types::PyModule>) -> pyo3::PyResult<()> {
        crate::exit_gate::register(m)
    }
}
