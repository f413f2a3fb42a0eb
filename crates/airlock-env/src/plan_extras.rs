//! What a comfy-env config adds to a plan and to a resolution (ADR 0024): the host's torch
//! family as constraints, the `[cuda]` wheels to look up and what they must match, the conda
//! request's hash lines, and the notices the build log shows.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use crate::builder::Plan;
use crate::comfy;
use crate::conda_env::{self, CondaPlan};
use crate::config::{ConfigFormat, PackConfig};
use crate::cuda_wheels::{self, Target};
use crate::error::{BuildError, IoOp};
use crate::home::Home;
use crate::host_pins::{self, HostPackages};
use crate::interpreter::Interpreter;
use crate::record::write_atomic;
use crate::torch_family;
use crate::uv::{RunLog, Uv};

/// The parts of a plan that come from comfy-env's sections and the host's torch.
pub(crate) struct Extras {
    pub constraints: Vec<String>,
    pub extra_index_urls: Vec<String>,
    pub cuda: Vec<String>,
    pub cuda_target: Option<Target>,
    /// Lines for the inputs hash.
    pub hashed: Vec<String>,
    pub notices: Vec<String>,
}

pub(crate) fn extras(
    config: &PackConfig,
    host: &HostPackages,
    interpreter: &Interpreter,
    conda: Option<&CondaPlan>,
) -> Extras {
    let mut notices = config.notices.clone();
    let (constraints, torch_index) =
        torch_family::constraints(host, &interpreter.version, &config.dependencies);
    let mut extra_index_urls = config.extra_index_urls.clone();
    if let Some(index) = torch_index.filter(|i| !extra_index_urls.contains(i)) {
        extra_index_urls.push(index);
    }
    let (cuda, family): (Vec<String>, Vec<String>) = config
        .cuda_packages
        .iter()
        .cloned()
        .partition(|p| !torch_family::TORCH_FAMILY.contains(&p.as_str()));
    if !family.is_empty() {
        notices.push(format!(
            "[cuda] {}: the torch family is the host's (or the pack's pin), not a [cuda] wheel",
            family.join(", ")
        ));
    }
    let cuda_target = Target::of_host(
        host.installed.get("torch").map(String::as_str),
        host.torch_cuda.as_deref(),
        &interpreter.version,
    )
    .filter(|_| !cuda.is_empty());
    if !cuda.is_empty() && cuda_target.is_none() {
        notices.push(format!(
            "[cuda] {} skipped: the host's torch has no CUDA (set {} to match wheels anyway)",
            cuda.join(", "),
            cuda_wheels::VERSION_ENV
        ));
    }
    let mut hashed = conda.map(CondaPlan::describe).unwrap_or_default();
    if let Some(t) = &cuda_target {
        hashed.push(format!("cuda-index {}", cuda_wheels::index_location()));
        hashed.push(format!("cuda-target {}", t.describe()));
        hashed.extend(cuda.iter().map(|p| format!("cuda {p}")));
    }
    Extras {
        constraints,
        extra_index_urls,
        cuda: if cuda_target.is_some() {
            cuda
        } else {
            Vec::new()
        },
        cuda_target,
        hashed,
        notices,
    }
}

/// Before `uv pip compile`: the notices logged, `[cuda]` wheels looked up and added to the
/// requirements file, the torch constraints written, and for a conda env the solve and its
/// scratch prefix. Returns the requirements file, the Python to resolve for and the
/// constraints files.
pub(crate) fn prepare(
    plan: &Plan,
    dir: &Path,
    home: &Home,
    uv: &Uv,
    log: &RunLog<'_>,
) -> Result<(PathBuf, PathBuf, Vec<PathBuf>), BuildError> {
    for notice in &plan.notices {
        log.phase(&format!("note: {notice}"));
    }
    let mut requirements = plan.inputs.requirements_in();
    if let Some(target) = &plan.cuda_target {
        let index = cuda_wheels::index_location();
        for package in &plan.cuda {
            log.phase(&format!(
                "[cuda] {package}: looking for {}",
                target.describe()
            ));
            let req = cuda_wheels::resolve(package, target, &index)?;
            log.phase(&format!("[cuda] {req}"));
            requirements.push_str(&req);
            requirements.push('\n');
        }
    }
    let req_in = dir.join("requirements.in");
    write_atomic(&req_in, requirements.as_bytes()).map_err(BuildError::io(IoOp::Write, &req_in))?;
    let mut constraint_files = Vec::new();
    if let Some(text) = plan.inputs.constraints_txt() {
        let c = dir.join("constraints.txt");
        write_atomic(&c, text.as_bytes()).map_err(BuildError::io(IoOp::Write, &c))?;
        constraint_files.push(c);
    }
    let mut python = plan.inputs.interpreter.path.clone();
    if let Some(conda) = &plan.conda {
        let (p, provided) =
            conda_env::prepare_resolution(conda, dir, &home.conda_cache(), uv, log)?;
        python = p;
        constraint_files.push(provided);
    }
    Ok((req_in, python, constraint_files))
}

/// ComfyUI's requirements for the env, and the versions uv should prefer.
///
/// An airlock.toml env gets them all pinned to the host's versions (unless the pack
/// constrains one itself). A comfy-env env gets none from comfy-env (its pack lists what its
/// nodes need), so forcing the host's versions on it breaks real packs (a pack's
/// `transformers==4.51.3` needs an older `tokenizers` than the host's; `pyrender` pins
/// `pyopengl==3.1.0`, below ComfyUI's optional `PyOpenGL>=3.1.8`): it gets ComfyUI's
/// requirements above its "non essential" line as ComfyUI writes them, and the host's
/// versions only as uv preferences, kept wherever the pack's own requirements allow.
pub(crate) fn comfy_requirements(
    config: &PackConfig,
    comfyui_dir: &Path,
    host: &HostPackages,
    interpreter: &Interpreter,
) -> Result<(Vec<String>, Vec<String>), BuildError> {
    let comfy_env = config.format == ConfigFormat::ComfyEnv;
    let written = if comfy_env {
        comfy::essential_requirements(comfyui_dir)
    } else {
        comfy::core_requirements(comfyui_dir)
    }
    .map_err(|source| BuildError::ComfyRequirements {
        path: comfy::requirements_path(comfyui_dir),
        source,
    })?;
    let pins = host.for_python(&interpreter.version);
    let pinned = host_pins::pin_to_host(&written, &config.dependencies, &pins);
    if !comfy_env {
        return Ok((pinned, Vec::new()));
    }
    let preferences = pinned
        .into_iter()
        .filter(|p| !written.contains(p) && p.contains("=="))
        .map(|p| p.split(';').next().unwrap_or(&p).trim().to_string())
        .collect();
    Ok((written, preferences))
}

/// Seeds uv's output file with the plan's preferences (`uv pip compile` keeps the versions of
/// an existing output file where it can).
pub(crate) fn seed_preferences(plan: &Plan, output: &Path) -> Result<(), BuildError> {
    if plan.preferences.is_empty() {
        return Ok(());
    }
    let text: String = plan.preferences.iter().map(|p| format!("{p}\n")).collect();
    write_atomic(output, text.as_bytes()).map_err(BuildError::io(IoOp::Write, output))
}

/// `-c <file>` for each constraints file.
pub(crate) fn constraint_args(files: &[PathBuf]) -> Vec<OsString> {
    files
        .iter()
        .flat_map(|c| [OsString::from("-c"), c.clone().into_os_string()])
        .collect()
}
