//! Making sure a pack's environment exists: plan, check, resolve, build.
//!
//! 1. **Plan** (no uv, no network): read the config, decide on ComfyUI's requirements, find
//!    the interpreter, compute the inputs hash.
//! 2. **Check**: the pack's record names an env for these inputs, or the cached resolution of
//!    these inputs names one; the env is complete when its marker exists and its interpreter
//!    link still resolves. A complete env ends here: a ComfyUI start with unchanged packs costs
//!    one interpreter probe per pack.
//! 3. **Resolve** (only when the inputs are new): `uv pip compile` into
//!    `<home>/resolutions/<inputs>/lock.txt`.
//! 4. **Build** (only when the lock's env is missing): `uv venv` and `uv pip sync
//!    --link-mode hardlink --compile-bytecode` in `<home>/envs/<key>/`, which packages are
//!    hard-linked into from uv's cache, compiled to bytecode once so that no worker compiles
//!    them at each start (ADR 0048); the lock copied beside it; a JSON record; the completion
//!    marker last. An env without the marker is half-built (a crash, a full disk, Ctrl-C) and
//!    is removed and built again. Steps 3 and 4 run under a per-resolution and a per-env
//!    `flock` (`uv_steps.rs`).
//!
//! With `build = false` the steps that run uv are skipped and a missing or stale env is
//! reported as [`BuildError::Missing`] instead; that is what ComfyUI's start uses, so that it
//! never blocks on a download the user did not ask for.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::comfy::{self, ComfyReason};
use crate::conda_env::{self, CondaPlan};
use crate::config::PackConfig;
use crate::cuda_wheels;
use crate::error::{BuildError, EnvError, IoOp, NotReady};
use crate::home::{Home, pack_id};
use crate::host_pins;
use crate::inputs::{Inputs, env_key};
use crate::interpreter::{Finder, Interpreter};
use crate::plan_extras;
use crate::progress::Progress;
use crate::record::{PackRecord, now, read_json, write_json};
use crate::uv::{RunLog, Uv, UvLocator};
use crate::uv_steps::{build_env, resolve};
use crate::worker_policy::WorkerPolicy;

/// The completion marker of an env, written last.
pub const COMPLETE_MARKER: &str = ".airlock-complete";
/// The copy of the lock an env was synced from.
pub const ENV_LOCK: &str = "airlock.lock";
/// An env's JSON record.
pub const ENV_RECORD: &str = "airlock-env.json";
/// The lock file in a resolution folder.
pub(crate) const RESOLVED_LOCK: &str = "lock.txt";

/// Where and with what environments are built.
#[derive(Debug, Clone)]
pub struct EnvOptions {
    pub home: Home,
    /// ComfyUI's folder, for its requirements (needed only by packs that import ComfyUI).
    pub comfyui_dir: Option<PathBuf>,
    /// The running Python: the interpreter of packs that do not ask for one.
    pub host_python: Option<PathBuf>,
    pub uv: UvLocator,
}

/// A pack's ready environment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EnvInfo {
    pub name: String,
    pub pack_dir: PathBuf,
    pub pack_id: String,
    /// The env's interpreter, `<env_dir>/bin/python`.
    pub python: PathBuf,
    pub env_dir: PathBuf,
    pub key: String,
    pub lock_path: PathBuf,
    pub log_path: PathBuf,
    /// Whether uv ran for this call (a resolution, an env, or both).
    pub built: bool,
    pub env_vars: BTreeMap<String, String>,
    pub entry: Option<String>,
    /// A group's packs, imported in this order into its one worker (`packs`, ADR 0054).
    pub members: Vec<String>,
    /// What the pack's worker may do (deadline, sandbox, pickle); not part of the env.
    pub policy: WorkerPolicy,
    /// Whether ComfyUI's requirements are in the env.
    pub comfy: bool,
    pub inputs_hash: String,
    /// The interpreter the env was created from.
    pub interpreter: Interpreter,
    /// Whether the env is a conda prefix (its `bin/` then holds conda's programs too).
    pub conda: bool,
    /// What the pack's config says that is not acted on (see `PackConfig::notices`).
    pub notices: Vec<String>,
}

/// What a pack's env must be, computed without running uv.
#[derive(Debug, Clone)]
pub struct Plan {
    pub config: PackConfig,
    pub pack_id: String,
    pub comfy: Option<ComfyReason>,
    pub inputs: Inputs,
    pub inputs_hash: String,
    /// The conda part, for packs with conda packages.
    pub conda: Option<CondaPlan>,
    /// `[cuda] packages` to look up, and what their wheels must match (None: the host's torch
    /// has no CUDA, so they are skipped, as comfy-env does).
    pub cuda: Vec<String>,
    pub cuda_target: Option<cuda_wheels::Target>,
    /// Lines the build log and `airlock doctor` show (from the config and from planning).
    pub notices: Vec<String>,
    /// `name==version` uv prefers but may leave (seeded into its output file): the host's
    /// versions of ComfyUI's requirements, for a comfy-env env (ADR 0024).
    pub preferences: Vec<String>,
}

/// Whether a pack's env can be used now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EnvState {
    Ready(Box<EnvInfo>),
    NotReady(NotReady),
}

/// What is on disk for an env key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EnvCheck {
    Complete,
    Absent,
    HalfBuilt,
    InterpreterGone(PathBuf),
}

/// The state of the env in `env_dir`.
pub fn check_env(env_dir: &Path) -> EnvCheck {
    if !env_dir.exists() {
        return EnvCheck::Absent;
    }
    if !env_dir.join(COMPLETE_MARKER).is_file() {
        return EnvCheck::HalfBuilt;
    }
    let python = env_python(env_dir);
    // `exists` follows the venv's link to its base interpreter.
    if !python.exists() {
        return EnvCheck::InterpreterGone(python);
    }
    EnvCheck::Complete
}

/// The interpreter of the env in `env_dir`.
pub fn env_python(env_dir: &Path) -> PathBuf {
    env_dir.join("bin").join("python")
}

/// Makes sure the pack in `pack_dir` has its environment, building it when `build` is true.
///
/// With `build = false`, a missing, stale or broken env is [`BuildError::Missing`].
pub fn ensure_env(
    pack_dir: &Path,
    opts: &EnvOptions,
    build: bool,
    progress: &dyn Progress,
) -> Result<EnvInfo, EnvError> {
    ensure_env_at(pack_dir, None, opts, build, progress)
}

/// The config of the pack in `pack_dir`: `config_file`, one of the pack's comfy-env configs
/// (each its own env), else the pack's own.
pub fn load_config(pack_dir: &Path, config_file: Option<&Path>) -> Result<PackConfig, EnvError> {
    Ok(match config_file {
        Some(f) => PackConfig::load_comfy_env(pack_dir, f)?,
        None => PackConfig::load(pack_dir)?,
    })
}

/// [`ensure_env`] for the env of `config_file` (see [`load_config`]).
pub fn ensure_env_at(
    pack_dir: &Path,
    config_file: Option<&Path>,
    opts: &EnvOptions,
    build: bool,
    progress: &dyn Progress,
) -> Result<EnvInfo, EnvError> {
    let config = load_config(pack_dir, config_file)?;
    let name = config.name.clone();
    let result = ensure_config(config, opts, build, progress);
    progress.finish(&name);
    result.map_err(|kind| EnvError::build(&name, kind))
}

fn ensure_config(
    config: PackConfig,
    opts: &EnvOptions,
    build: bool,
    progress: &dyn Progress,
) -> Result<EnvInfo, BuildError> {
    let name = config.name.clone();
    let id = pack_id(&name, &config.dir);
    let log = RunLog::new(&name, opts.home.log(&id), progress);
    let uv = opts.uv.locate();
    let plan = plan_config(config, opts, uv.as_ref().ok(), build.then_some(&log))?;
    match state_of(&plan, opts) {
        EnvState::Ready(info) => {
            // Best effort: the record only serves `doctor` and `gc`, and a read-only home
            // must not stop a ready env from being used.
            let _ = record(&plan, &info, opts);
            return Ok(*info);
        }
        EnvState::NotReady(why) if !build => return Err(BuildError::Missing(why)),
        EnvState::NotReady(_) => {}
    }
    let uv = uv?;
    let resolution = opts.home.resolution_dir(&plan.inputs_hash);
    let (lock_text, resolved) = match fs::read_to_string(resolution.join(RESOLVED_LOCK)) {
        Ok(text) => (text, false),
        Err(_) => (resolve(&plan, &uv, opts, &log)?, true),
    };
    let key = env_key(
        &conda_env::keyed_lock(&resolution, &lock_text),
        &plan.inputs.interpreter,
    );
    let created = build_env(&plan, &uv, &lock_text, &key, opts, &log)?;
    let info = info(&plan, opts, &key, resolved || created);
    record(&plan, &info, opts)?;
    Ok(info)
}

/// Whether the pack in `pack_dir` has a usable env, without building anything.
pub fn env_state(pack_dir: &Path, opts: &EnvOptions) -> Result<(Plan, EnvState), EnvError> {
    env_state_at(pack_dir, None, opts)
}

/// [`env_state`] for the env of `config_file` (see [`load_config`]).
pub fn env_state_at(
    pack_dir: &Path,
    config_file: Option<&Path>,
    opts: &EnvOptions,
) -> Result<(Plan, EnvState), EnvError> {
    let plan = plan_at(pack_dir, config_file, opts)?;
    let state = state_of(&plan, opts);
    Ok((plan, state))
}

/// Plans the env of the pack in `pack_dir` (config, ComfyUI requirements, interpreter, hash).
pub fn plan(pack_dir: &Path, opts: &EnvOptions) -> Result<Plan, EnvError> {
    plan_at(pack_dir, None, opts)
}

/// [`plan`] for the env of `config_file` (see [`load_config`]).
pub fn plan_at(
    pack_dir: &Path,
    config_file: Option<&Path>,
    opts: &EnvOptions,
) -> Result<Plan, EnvError> {
    let config = load_config(pack_dir, config_file)?;
    let name = config.name.clone();
    let uv = opts.uv.locate().ok();
    plan_config(config, opts, uv.as_ref(), None).map_err(|k| EnvError::build(&name, k))
}

fn plan_config(
    config: PackConfig,
    opts: &EnvOptions,
    uv: Option<&Uv>,
    build_log: Option<&RunLog<'_>>,
) -> Result<Plan, BuildError> {
    let comfy = match config.comfy {
        Some(true) => Some(ComfyReason::Forced),
        Some(false) => None,
        None => Some(
            comfy::find_comfy_import(&config.dir)
                .map_err(BuildError::io(IoOp::Scan, &config.dir))?
                .map_or(ComfyReason::Default, ComfyReason::Imports),
        ),
    };
    // ComfyUI's folder not known (`airlock build --base` alone): a pack that needs ComfyUI
    // cannot be built, one that only gets the default goes without.
    let comfy = comfy.filter(|r| *r != ComfyReason::Default || opts.comfyui_dir.is_some());
    let finder = Finder {
        home: &opts.home,
        host_python: opts.host_python.as_deref(),
        uv,
        may_install: build_log.is_some(),
        log: build_log,
    };
    let host = opts
        .host_python
        .as_deref()
        .map(host_pins::host_packages)
        .unwrap_or_default();
    let conda = match config.conda {
        Some(_) => conda_env::plan(&config, &finder.find(None)?),
        None => None,
    };
    let interpreter = match &conda {
        Some(c) => c.interpreter(&finder.find(None)?),
        None => finder.find(config.python.as_deref())?,
    };
    let extras = plan_extras::extras(&config, &host, &interpreter, conda.as_ref());
    let (comfy_requirements, preferences) = match (&comfy, &opts.comfyui_dir) {
        (None, _) => (Vec::new(), Vec::new()),
        (Some(reason), None) => return Err(BuildError::NoComfyUi(reason.clone())),
        (Some(_), Some(dir)) => plan_extras::comfy_requirements(&config, dir, &host, &interpreter)?,
    };
    let mut extra = extras.hashed;
    extra.extend(preferences.iter().map(|p| format!("prefer {p}")));
    let inputs = Inputs {
        python_request: config.python.clone(),
        interpreter,
        pack_requirements: config.dependencies.clone(),
        comfy_requirements,
        index_url: config.index_url.clone(),
        extra_index_urls: extras.extra_index_urls,
        find_links: config.find_links.clone(),
        constraints: extras.constraints,
        extra,
    };
    Ok(Plan {
        pack_id: pack_id(&config.name, &config.dir),
        inputs_hash: inputs.hash(),
        config,
        comfy,
        inputs,
        conda,
        cuda: extras.cuda,
        cuda_target: extras.cuda_target,
        notices: extras.notices,
        preferences,
    })
}

fn state_of(plan: &Plan, opts: &EnvOptions) -> EnvState {
    let home = &opts.home;
    let record: Option<PackRecord> = read_json(&home.pack_record(&plan.pack_id));
    if let Some(r) = &record {
        if r.inputs_hash == plan.inputs_hash
            && check_env(&home.env_dir(&r.env_key)) == EnvCheck::Complete
        {
            return EnvState::Ready(Box::new(info(plan, opts, &r.env_key, false)));
        }
    }
    let lock = fs::read_to_string(home.resolution_dir(&plan.inputs_hash).join(RESOLVED_LOCK));
    let Ok(lock) = lock else {
        return EnvState::NotReady(match record {
            Some(_) => NotReady::Stale,
            None => NotReady::Missing,
        });
    };
    let res = home.resolution_dir(&plan.inputs_hash);
    let key = env_key(
        &conda_env::keyed_lock(&res, &lock),
        &plan.inputs.interpreter,
    );
    let env_dir = home.env_dir(&key);
    EnvState::NotReady(match check_env(&env_dir) {
        EnvCheck::Complete => return EnvState::Ready(Box::new(info(plan, opts, &key, false))),
        EnvCheck::Absent if record.is_some_and(|r| r.inputs_hash != plan.inputs_hash) => {
            NotReady::Stale
        }
        EnvCheck::Absent => NotReady::Missing,
        EnvCheck::HalfBuilt => NotReady::Broken {
            env_dir,
            reason: "half-built: a build did not finish".into(),
        },
        EnvCheck::InterpreterGone(p) => NotReady::Broken {
            env_dir,
            reason: format!("its interpreter {} no longer exists", p.display()),
        },
    })
}

fn info(plan: &Plan, opts: &EnvOptions, key: &str, built: bool) -> EnvInfo {
    let env_dir = opts.home.env_dir(key);
    EnvInfo {
        name: plan.config.name.clone(),
        pack_dir: plan.config.dir.clone(),
        pack_id: plan.pack_id.clone(),
        python: env_python(&env_dir),
        lock_path: env_dir.join(ENV_LOCK),
        log_path: opts.home.log(&plan.pack_id),
        env_dir,
        key: key.to_string(),
        built,
        env_vars: plan.config.env_vars.clone(),
        entry: plan.config.entry.clone(),
        members: plan.config.members.clone(),
        policy: plan.config.policy.clone(),
        comfy: plan.comfy.is_some(),
        inputs_hash: plan.inputs_hash.clone(),
        interpreter: plan.inputs.interpreter.clone(),
        conda: plan.conda.is_some(),
        notices: plan.notices.clone(),
    }
}

/// Writes the pack's record when it changed.
fn record(plan: &Plan, info: &EnvInfo, opts: &EnvOptions) -> Result<(), BuildError> {
    let path = opts.home.pack_record(&plan.pack_id);
    let mut new = PackRecord {
        name: info.name.clone(),
        pack_dir: info.pack_dir.clone(),
        inputs_hash: info.inputs_hash.clone(),
        env_key: info.key.clone(),
        env_dir: info.env_dir.clone(),
        python: info.python.clone(),
        interpreter: info.interpreter.clone(),
        comfyui_dir: opts.comfyui_dir.clone(),
        host_python: opts.host_python.clone(),
        comfy: info.comfy,
        config_file: comfy_env_file(&plan.config),
        updated: 0,
    };
    if let Some(old) = read_json::<PackRecord>(&path) {
        new.updated = old.updated;
        if old == new {
            return Ok(());
        }
    }
    new.updated = now();
    write_json(&path, &new).map_err(BuildError::io(IoOp::Write, path))
}

/// The config file a record names, for a comfy-env pack (whose envs are one per file).
fn comfy_env_file(config: &PackConfig) -> Option<PathBuf> {
    (config.format == crate::config::ConfigFormat::ComfyEnv).then(|| config.file.clone())
}
