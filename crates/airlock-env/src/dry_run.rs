//! `airlock plan`: what an env would be made of, resolved but not installed.
//!
//! Each of an env's three sources is resolved on its own, so one unreachable registry does not
//! hide what the others answer: the conda request is solved by rattler (channels' indexes only,
//! nothing downloaded into a prefix), each `[cuda]` package is looked up in the wheel index,
//! and the PyPI requirements (the host's torch family as constraints, as in a build) are
//! resolved by `uv pip compile` for the env's Python version. Without the conda solve, the
//! PyPI side cannot be constrained by what conda provides; the report says so. Every
//! requirement ends up either resolved (to a version or a wheel) or with the error that
//! stopped it, naming the registry.

use std::ffi::OsString;
use std::fs;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::builder::{EnvOptions, Plan, plan_at};
use crate::config::{ConfigFormat, PackConfig};
use crate::cuda_wheels;
use crate::discover::DiscoveredPack;
use crate::error::{BuildError, IoOp};
use crate::plan_extras::constraint_args;
use crate::progress::Progress;
use crate::requirement::{name_of, normalize_name};
use crate::uv::{RunLog, Uv};

/// One requirement and what became of it.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Outcome {
    /// As the config writes it (conda: its match spec).
    pub requirement: String,
    /// The version (conda, PyPI) or `name @ url` (a `[cuda]` wheel) it resolved to.
    pub resolved: Option<String>,
    pub error: Option<String>,
}

impl Outcome {
    fn ok(requirement: &str, resolved: String) -> Outcome {
        Outcome {
            requirement: requirement.to_string(),
            resolved: Some(resolved),
            error: None,
        }
    }

    fn failed(requirement: &str, error: String) -> Outcome {
        Outcome {
            requirement: requirement.to_string(),
            resolved: None,
            error: Some(error),
        }
    }
}

/// The dry run of one env (one `comfy-env.toml` of a pack, or its `airlock.toml`).
#[derive(Debug, Serialize)]
pub struct EnvDryRun {
    pub name: String,
    pub dir: PathBuf,
    pub config_file: Option<PathBuf>,
    /// `comfy-env` or `airlock`.
    pub format: Option<&'static str>,
    /// Why the config is not accepted, or the env cannot be planned.
    pub refused: Option<String>,
    /// The env's Python `major.minor`.
    pub python: Option<String>,
    pub conda: Vec<Outcome>,
    pub pypi: Vec<Outcome>,
    pub cuda: Vec<Outcome>,
    pub notices: Vec<String>,
}

impl EnvDryRun {
    /// Every requirement resolved.
    pub fn resolved(&self) -> bool {
        self.refused.is_none()
            && self
                .conda
                .iter()
                .chain(&self.pypi)
                .chain(&self.cuda)
                .all(|o| o.error.is_none())
    }
}

/// Plans the env of `pack` and resolves each of its requirements; writes only scratch files
/// under `<home>/plan/`.
pub fn dry_run(pack: &DiscoveredPack, opts: &EnvOptions, progress: &dyn Progress) -> EnvDryRun {
    let mut out = EnvDryRun {
        name: pack.name.clone(),
        dir: pack.dir.clone(),
        config_file: None,
        format: None,
        refused: None,
        python: None,
        conda: Vec::new(),
        pypi: Vec::new(),
        cuda: Vec::new(),
        notices: Vec::new(),
    };
    let config: &PackConfig = match &pack.config {
        Ok(c) => c,
        Err(e) => {
            out.refused = Some(e.to_string());
            return out;
        }
    };
    out.config_file = Some(config.file.clone());
    out.format = Some(match config.format {
        ConfigFormat::ComfyEnv => "comfy-env",
        _ => "airlock",
    });
    let file = (config.format == ConfigFormat::ComfyEnv).then_some(config.file.as_path());
    let plan = match plan_at(&pack.dir, file, opts) {
        Ok(p) => p,
        Err(e) => {
            out.refused = Some(e.to_string());
            return out;
        }
    };
    out.python = Some(plan.inputs.interpreter.version.clone());
    out.notices = plan.notices.clone();
    let scratch = opts.home.root().join("plan").join(&plan.pack_id);
    let log = RunLog::new(&pack.name, scratch.join("plan.log"), progress);
    if let Err(e) = fs::create_dir_all(&scratch) {
        out.refused = Some(BuildError::io(IoOp::Create, &scratch)(e).to_string());
        return out;
    }
    out.conda = conda(&plan, opts, &log);
    out.cuda = cuda(&plan);
    out.pypi = match opts.uv.locate() {
        Ok(uv) => pypi(&plan, &uv, &scratch, &log),
        Err(e) => every(&plan.inputs.pack_requirements, &e.to_string()),
    };
    if plan.conda.is_some() && out.conda.iter().any(|o| o.error.is_some()) {
        out.notices.push(
            "PyPI resolved without the conda packages as constraints (the conda solve failed)"
                .into(),
        );
    }
    let _ = fs::remove_dir_all(&scratch);
    out
}

fn every(requirements: &[String], error: &str) -> Vec<Outcome> {
    requirements
        .iter()
        .map(|r| Outcome::failed(r, error.to_string()))
        .collect()
}

fn conda(plan: &Plan, opts: &EnvOptions, log: &RunLog<'_>) -> Vec<Outcome> {
    let Some(c) = &plan.conda else {
        return Vec::new();
    };
    let specs: Vec<String> = c
        .request
        .specs
        .iter()
        .map(|s| s.match_spec_text())
        .collect();
    let report = |l: &str| log.phase(l);
    match airlock_conda::solve(&c.request, &opts.home.conda_cache(), &report) {
        Ok(lock) => {
            let got = lock.packages();
            c.request
                .specs
                .iter()
                .zip(&specs)
                .map(|(s, text)| match got.iter().find(|p| p.name == s.name) {
                    Some(p) => {
                        let from = p.channel.as_deref().unwrap_or("?");
                        Outcome::ok(text, format!("{} ({from})", p.version))
                    }
                    None => Outcome::failed(text, "not in the solution".into()),
                })
                .collect()
        }
        Err(e) => every(&specs, &e.to_string()),
    }
}

fn cuda(plan: &Plan) -> Vec<Outcome> {
    let Some(target) = &plan.cuda_target else {
        // No CUDA on the host: the notices say the packages are skipped, as comfy-env does.
        return Vec::new();
    };
    let index = cuda_wheels::index_location();
    plan.cuda
        .iter()
        .map(|p| match cuda_wheels::resolve(p, target, &index) {
            Ok(req) => Outcome::ok(p, req.split_once(" @ ").map_or(req.clone(), |x| x.1.into())),
            Err(e) => Outcome::failed(p, e.to_string()),
        })
        .collect()
}

fn pypi(plan: &Plan, uv: &Uv, scratch: &Path, log: &RunLog<'_>) -> Vec<Outcome> {
    let reqs = &plan.inputs.pack_requirements;
    if reqs.is_empty() {
        return Vec::new();
    }
    let req_in = scratch.join("requirements.in");
    let lock = scratch.join("requirements.txt");
    let mut files = Vec::new();
    let write = |path: PathBuf, text: String| {
        fs::write(&path, text)
            .map(|()| path.clone())
            .map_err(|e| BuildError::io(IoOp::Write, &path)(e).to_string())
    };
    let written = write(req_in.clone(), plan.inputs.requirements_in()).and_then(|_| {
        if let Some(text) = plan.inputs.constraints_txt() {
            files.push(write(scratch.join("constraints.txt"), text)?);
        }
        Ok(())
    });
    if let Err(e) = written {
        return every(reqs, &e);
    }
    if let Err(e) = crate::plan_extras::seed_preferences(plan, &lock) {
        return every(reqs, &e.to_string());
    }
    let mut args: Vec<OsString> = ["pip", "compile", "--python-version"]
        .map(OsString::from)
        .to_vec();
    args.push(plan.inputs.interpreter.version.clone().into());
    args.extend(constraint_args(&files));
    args.extend(["--no-header", "--no-annotate"].map(OsString::from));
    args.extend(plan.inputs.index_args());
    args.extend([req_in.into(), "-o".into(), lock.clone().into()]);
    let out = match uv.run(&args, scratch, log) {
        Ok(o) => o,
        Err(e) => return every(reqs, &e.to_string()),
    };
    if !out.success {
        let message = format!("uv pip compile: {}", out.message().join(" | "));
        return every(reqs, &message);
    }
    let text = fs::read_to_string(&lock).unwrap_or_default();
    reqs.iter()
        .map(|r| match pinned(&text, r) {
            Some(v) => Outcome::ok(r, v),
            None => Outcome::failed(r, "not in uv's resolution (its marker excludes it)".into()),
        })
        .collect()
}

/// The version (or URL) `lock` pins the project of `requirement` to.
fn pinned(lock: &str, requirement: &str) -> Option<String> {
    let name = name_of(requirement)?;
    lock.lines().find_map(|l| {
        let l = l.split(';').next()?.trim();
        let (n, v) = l.split_once("==").or_else(|| l.split_once(" @ "))?;
        let n = n.split('[').next()?.trim();
        (normalize_name(n) == name).then(|| v.trim().to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pins_are_read_by_normalized_name() {
        let lock = "numpy==1.26.4\nhuggingface-hub==0.36.0\ntrimesh==4.5.0 ; sys_platform == 'linux'\n\
                    utils3d @ git+https://github.com/x/utils3d@3913c65\n";
        assert_eq!(pinned(lock, "huggingface_hub>=0.20"), Some("0.36.0".into()));
        assert_eq!(pinned(lock, "trimesh[easy]"), Some("4.5.0".into()));
        assert_eq!(
            pinned(lock, "utils3d @ git+https://github.com/x/utils3d"),
            Some("git+https://github.com/x/utils3d@3913c65".into())
        );
        assert_eq!(pinned(lock, "numpy<2"), Some("1.26.4".into()));
        assert_eq!(pinned(lock, "scipy"), None);
    }
}
