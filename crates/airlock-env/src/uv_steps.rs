//! The two steps of [`builder`](crate::builder) that run uv, each under its own `flock`:
//! **resolve** a pack's inputs into a lock (`uv pip compile`, only when the inputs are new)
//! and **build** the env a lock names (`uv venv`, then `uv pip sync`, only when that env is
//! missing; for a pack with conda packages, rattler's prefix, then `uv pip install`). Both write their result atomically and last, so a crash leaves nothing that
//! looks finished.

use std::ffi::OsString;
use std::fs;
use std::path::{Path, PathBuf};

use crate::builder::{
    COMPLETE_MARKER, ENV_LOCK, ENV_RECORD, EnvCheck, EnvOptions, Plan, RESOLVED_LOCK, check_env,
    env_python,
};
use crate::conda_env;
use crate::error::{BuildError, IoOp};
use crate::flock::FileLock;
use crate::host_pins;
use crate::inputs::lock_packages;
use crate::plan_extras;
use crate::record::{EnvRecord, now, write_atomic, write_json};
use crate::requirement;
use crate::uv::{RunLog, Uv, UvOutput};

/// Takes a lock, saying so when another process holds it.
fn lock(path: PathBuf, log: &RunLog<'_>) -> Result<FileLock, BuildError> {
    let lock_err = BuildError::io(IoOp::Lock, &path);
    match FileLock::try_exclusive(&path) {
        Ok(Some(l)) => Ok(l),
        Ok(None) => {
            log.phase("waiting for another build of the same environment");
            FileLock::exclusive(&path).map_err(lock_err)
        }
        Err(e) => Err(lock_err(e)),
    }
}

/// The requirement uv's message is about: one of the pack's, else one of ComfyUI's.
fn culprit(plan: &Plan, message: &[String]) -> Option<String> {
    let text = message.join("\n");
    requirement::find_mentioned(&text, &plan.inputs.pack_requirements)
        .or_else(|| requirement::find_mentioned(&text, &plan.inputs.comfy_requirements))
        .cloned()
}

pub(crate) fn resolve(
    plan: &Plan,
    uv: &Uv,
    opts: &EnvOptions,
    log: &RunLog<'_>,
) -> Result<String, BuildError> {
    let home = &opts.home;
    let dir = home.resolution_dir(&plan.inputs_hash);
    let _lock = lock(home.lock_file(&format!("res-{}", plan.inputs_hash)), log)?;
    let done = dir.join(RESOLVED_LOCK);
    if let Ok(text) = fs::read_to_string(&done) {
        return Ok(text);
    }
    fs::create_dir_all(&dir).map_err(BuildError::io(IoOp::Create, &dir))?;
    let (req_in, python, constraint_files) = plan_extras::prepare(plan, &dir, home, uv, log)?;
    let tmp = dir.join(format!("lock.{}.tmp", std::process::id()));
    let _ = fs::remove_file(&tmp);
    plan_extras::seed_preferences(plan, &tmp)?;
    let n = plan.inputs.requirements().count() + plan.cuda.len();
    log.phase(&format!(
        "resolving {n} requirement{} for {} (uv pip compile)",
        if n == 1 { "" } else { "s" },
        plan.conda.as_ref().map_or_else(
            || plan.inputs.interpreter.describe(),
            |c| format!("conda's Python {}", c.python)
        )
    ));
    let mut args: Vec<OsString> = ["pip", "compile", "--python"].map(OsString::from).to_vec();
    args.push(python.clone().into());
    args.extend(plan_extras::constraint_args(&constraint_files));
    args.extend(
        [
            "--no-header",
            "--no-annotate",
            "--emit-index-url",
            "--emit-find-links",
        ]
        .map(OsString::from),
    );
    args.extend(plan.inputs.index_args());
    args.extend([
        req_in.into_os_string(),
        "-o".into(),
        tmp.clone().into_os_string(),
    ]);
    let out = uv.run(&args, home.root(), log);
    if plan.conda.is_some()
        && let Some(prefix) = conda_env::scratch_prefix(&python)
    {
        let _ = fs::remove_dir_all(prefix);
    }
    let out = out?;
    if !out.success {
        let _ = fs::remove_file(&tmp);
        let _ = fs::remove_file(dir.join(conda_env::CONDA_LOCK));
        let message = out.message();
        return Err(BuildError::Resolve {
            requirement: culprit(plan, &message),
            uv_message: message,
            log: log.path.clone(),
        });
    }
    let text = fs::read_to_string(&tmp).map_err(BuildError::io(IoOp::Read, &tmp))?;
    fs::rename(&tmp, &done).map_err(BuildError::io(IoOp::Write, &done))?;
    Ok(text)
}

pub(crate) fn build_env(
    plan: &Plan,
    uv: &Uv,
    lock_text: &str,
    key: &str,
    opts: &EnvOptions,
    log: &RunLog<'_>,
) -> Result<bool, BuildError> {
    let home = &opts.home;
    let env_dir = home.env_dir(key);
    let _lock = lock(home.lock_file(&format!("env-{key}")), log)?;
    match check_env(&env_dir) {
        EnvCheck::Complete => return Ok(false),
        EnvCheck::Absent => {}
        EnvCheck::HalfBuilt | EnvCheck::InterpreterGone(_) => {
            log.phase(&format!(
                "removing the broken environment {}",
                env_dir.display()
            ));
            fs::remove_dir_all(&env_dir).map_err(BuildError::io(IoOp::Remove, &env_dir))?;
        }
    }
    let envs = home.envs();
    fs::create_dir_all(&envs).map_err(BuildError::io(IoOp::Create, &envs))?;
    match &plan.conda {
        Some(conda) => {
            let installed = conda_env::install_env(
                conda,
                &home.resolution_dir(&plan.inputs_hash),
                &env_dir,
                &home.conda_cache(),
                host_cuda(opts).as_deref(),
                log,
            );
            if let Err(e) = installed {
                let _ = fs::remove_dir_all(&env_dir);
                return Err(e);
            }
        }
        None => create_venv(plan, uv, &env_dir, opts, log)?,
    }
    let n = sync_lock(plan, uv, lock_text, &env_dir, opts, log)?;
    let record = EnvRecord {
        key: key.to_string(),
        interpreter: plan.inputs.interpreter.clone(),
        inputs_hash: plan.inputs_hash.clone(),
        packages: n,
        uv_version: uv.version().map(str::to_string),
        built_for: plan.config.name.clone(),
        created: now(),
    };
    let rec_path = env_dir.join(ENV_RECORD);
    write_json(&rec_path, &record).map_err(BuildError::io(IoOp::Write, &rec_path))?;
    let marker = env_dir.join(COMPLETE_MARKER);
    write_atomic(&marker, key.as_bytes()).map_err(BuildError::io(IoOp::Write, &marker))?;
    log.phase(&format!("ready: {}", env_dir.display()));
    Ok(true)
}

/// `uv venv` from the plan's interpreter; the half-made folder is removed on failure.
fn create_venv(
    plan: &Plan,
    uv: &Uv,
    env_dir: &Path,
    opts: &EnvOptions,
    log: &RunLog<'_>,
) -> Result<(), BuildError> {
    let interp = &plan.inputs.interpreter;
    log.phase(&format!("creating venv with Python {}", interp.version));
    let venv_args: Vec<OsString> = vec![
        "venv".into(),
        env_dir.into(),
        "--python".into(),
        interp.path.clone().into(),
        "--no-project".into(),
    ];
    let out = uv.run(&venv_args, opts.home.root(), log)?;
    if !out.success {
        let _ = fs::remove_dir_all(env_dir);
        return Err(BuildError::Venv {
            python: interp.path.clone(),
            uv_message: out.message(),
            log: log.path.clone(),
        });
    }
    Ok(())
}

/// The host's CUDA driver version, as far as we can tell without a driver query: the CUDA
/// version the host's torch runs with, when an NVIDIA driver is present.
fn host_cuda(opts: &EnvOptions) -> Option<String> {
    if !crate::doctor::nvml_present() {
        return None;
    }
    let host = host_pins::host_packages(opts.host_python.as_deref()?);
    host.torch_cuda
}

/// Copies the lock beside the env and installs it (hard links from uv's cache): `uv pip sync`
/// into a venv, `uv pip install --no-deps` into a conda prefix (`sync` would remove the Python
/// packages conda put there; the lock is complete). Returns the number of packages. The env
/// is removed on failure.
///
/// The env's Python files are compiled to bytecode as they are installed (`--compile-bytecode`;
/// uv leaves it to the first import otherwise): where `PYTHONDONTWRITEBYTECODE` is set (CI
/// images, many Docker images; it passes to workers) or the worker cannot write into the env,
/// that first import never writes it, and every new worker compiled torch, ComfyUI's
/// dependencies and the pack's from source again: a worker of a pack with ComfyUI's nodes took
/// 16.1-16.5 s to load them here, 7.3-8.7 s with the env compiled (25-30 s once, at build;
/// ADR 0048).
fn sync_lock(
    plan: &Plan,
    uv: &Uv,
    lock_text: &str,
    env_dir: &Path,
    opts: &EnvOptions,
    log: &RunLog<'_>,
) -> Result<usize, BuildError> {
    let lock_path = env_dir.join(ENV_LOCK);
    write_atomic(&lock_path, lock_text.as_bytes())
        .map_err(BuildError::io(IoOp::Write, &lock_path))?;
    let n = lock_packages(lock_text);
    log.phase(&format!(
        "installing {n} package{}",
        if n == 1 { "" } else { "s" }
    ));
    let verb = if plan.conda.is_some() {
        "install"
    } else {
        "sync"
    };
    let mut args: Vec<OsString> = vec!["pip".into(), verb.into()];
    args.extend([
        "--python".into(),
        env_python(env_dir).into(),
        "--link-mode".into(),
        "hardlink".into(),
        "--compile-bytecode".into(),
    ]);
    if plan.conda.is_some() {
        args.extend(["--no-deps".into(), "-r".into()]);
    } else {
        args.push("--allow-empty-requirements".into());
    }
    args.push(lock_path.into());
    let out = if plan.conda.is_some() && n == 0 {
        UvOutput {
            success: true,
            stdout: String::new(),
            stderr: Vec::new(),
        }
    } else {
        uv.run(&args, opts.home.root(), log)?
    };
    if !out.success {
        let _ = fs::remove_dir_all(env_dir);
        let message = out.message();
        return Err(BuildError::Install {
            requirement: culprit(plan, &message),
            uv_message: message,
            log: log.path.clone(),
        });
    }
    Ok(n)
}
