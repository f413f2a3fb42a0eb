//! Pack configs, pack discovery and the environment builder of comfy-airlock.
//!
//! A pack declares its environment in `airlock.toml` (or the `comfy-env.toml` it already has):
//! a Python version, PyPI requirements, indexes, environment variables. The builder turns that
//! into a venv by driving the `uv` binary (from the `uv` wheel; never downloaded by us).
//!
//! Environments are content-addressed: the resolution of a set of inputs is cached by their
//! hash, and an env is keyed by its lock, so unchanged packs cost neither uv nor the network,
//! packs that resolve alike share one env, and nothing is ever updated in place (see
//! `docs/adr/0004-environments.md`). Every error names its pack; a build error also names the
//! requirement uv complained about and quotes uv.

mod builder;
mod comfy;
mod comfy_env_pixi;
mod comfy_env_toml;
mod conda_env;
mod config;
mod cuda_wheels;
mod discover;
mod doctor;
mod dry_run;
mod error;
mod flock;
mod gc;
mod group;
mod hash;
mod home;
mod host_pins;
mod inputs;
mod interpreter;
mod plan_extras;
mod progress;
mod pyversion;
mod record;
mod requirement;
mod requirements_txt;
mod run;
mod scans;
mod toml_doc;
mod torch_family;
mod uv;
mod uv_steps;
mod worker_policy;

pub use builder::{
    COMPLETE_MARKER, ENV_LOCK, ENV_RECORD, EnvCheck, EnvInfo, EnvOptions, EnvState, Plan,
    check_env, ensure_env, ensure_env_at, env_python, env_state, env_state_at, load_config, plan,
    plan_at,
};
pub use comfy::{COMFY_MODULES, ComfyImport, ComfyReason, core_requirements, find_comfy_import};
pub use comfy_env_pixi::CondaConfig;
pub use config::{AIRLOCK_TOML, COMFY_ENV_TOML, ConfigFormat, PackConfig, comfy_env_configs};
pub use discover::{
    CUSTOM_NODES_DIR, DiscoveredPack, MANAGED_DIR, PACKS_PATH_ENV, Placement, discover_packs,
    packs_path_from_env,
};
pub use doctor::{
    EnvProbe, NodesState, PackReport, ReportState, fix_for, import_problem, nvml_present,
    probe_env, report_pack,
};
pub use dry_run::{EnvDryRun, Outcome, dry_run};
pub use error::{BuildError, ConfigError, EnvError, IoOp, NotReady, ProbeError};
pub use gc::{GcItem, GcKind, GcPlan, plan_gc};
pub use home::{HOME_DEFAULTS, HOME_ENV, Home, pack_id};
pub use inputs::{Inputs, env_key};
pub use interpreter::{Interpreter, probe};
pub use progress::{Lines, Progress, Silent, Spinner, stderr_is_terminal};
pub use pyversion::PythonRequest;
pub use record::{EnvRecord, PackRecord};
pub use scans::{CachedScan, ScanFailure, cached_scan, scan_key, scan_path};
pub use uv::{UV_DEFAULTS, UV_ENV, Uv, UvLocator};
pub use worker_policy::{PICKLE_DENIED_MODULES, Sandbox, WorkerPolicy};
