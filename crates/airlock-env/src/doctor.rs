//! `airlock doctor`: whether each pack is ready to run, and what its env holds.
//!
//! For a pack whose env is current, the env's interpreter is run with a short script that
//! reports its Python, torch (and whether it sees CUDA) and numpy. Being run is the real test
//! of an env: a venv whose base interpreter was removed or upgraded fails here, not in the
//! middle of a ComfyUI workflow. The script has a time limit, because `import torch` on a
//! machine with a wedged driver can hang.
//!
//! Whether the pack's code imports in its env is what ComfyUI's last start found: `doctor` reads
//! the scan cache (`scans`), where the host keeps the nodes it read or the failure, with the
//! worker's traceback, under a key of the pack's sources and its env. A pack whose import
//! failed is not ready; one not scanned with its current content says so and is not judged.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::builder::{EnvOptions, EnvState, env_state_at};
use crate::discover::{DiscoveredPack, Placement};
use crate::error::{EnvError, NotReady, ProbeError};
use crate::run::{Ran, last_lines, run_with_timeout};
use crate::scans::{CachedScan, ScanFailure, cached_scan, scan_key, scan_path};

/// What an env's interpreter reported about itself.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnvProbe {
    pub python: Option<String>,
    /// `None`: not installed.
    pub torch: Option<String>,
    pub torch_error: Option<String>,
    pub cuda_available: Option<bool>,
    pub cuda_version: Option<String>,
    /// `None`: not installed.
    pub numpy: Option<String>,
    pub numpy_error: Option<String>,
}

const PROBE: &str = r#"
import json, sys
r = {"python": sys.version.split()[0]}
def mod(name):
    try:
        return __import__(name), None
    except ModuleNotFoundError as e:
        if e.name == name:
            return None, None
        return None, "%s: %s" % (type(e).__name__, e)
    except BaseException as e:
        return None, "%s: %s" % (type(e).__name__, e)
np, r["numpy_error"] = mod("numpy")
r["numpy"] = getattr(np, "__version__", None)
torch, r["torch_error"] = mod("torch")
if torch is not None:
    r["torch"] = torch.__version__
    try:
        r["cuda_available"] = bool(torch.cuda.is_available())
        r["cuda_version"] = torch.version.cuda
    except BaseException as e:
        r["torch_error"] = "cuda: %s: %s" % (type(e).__name__, e)
sys.stdout.write("\n" + json.dumps(r) + "\n")
"#;

/// Runs the probe script in the env's interpreter, with the pack's env vars.
pub fn probe_env(
    python: &Path,
    env_vars: &BTreeMap<String, String>,
    limit: Duration,
) -> Result<EnvProbe, ProbeError> {
    let mut cmd = Command::new(python);
    cmd.args(["-I", "-c", PROBE]).envs(env_vars);
    match run_with_timeout(cmd, limit).map_err(ProbeError::Spawn)? {
        Ran::TimedOut => Err(ProbeError::Timeout(limit.as_secs())),
        Ran::Exited {
            status,
            stdout,
            stderr,
        } => {
            let last = stdout
                .lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("");
            match serde_json::from_str(last) {
                Ok(p) if status.success() => Ok(p),
                _ if !status.success() => Err(ProbeError::Failed {
                    status: status.to_string(),
                    stderr: last_lines(&stderr, 3),
                }),
                _ => Err(ProbeError::Output(stdout)),
            }
        }
    }
}

/// Whether NVIDIA's management library loads and initialises here (a driver is up), read by
/// the same NVML reader the memory bridge uses ([`airlock_device::NVML_LIBRARY_ENV`] names
/// another library).
pub fn nvml_present() -> bool {
    airlock_device::Nvml::open().is_ok()
}

/// The state of a pack's env, as `doctor` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ReportState {
    Current,
    Stale,
    Missing,
    Broken,
    /// The env could not be checked (bad config, no interpreter, ...).
    Unknown,
}

impl ReportState {
    pub fn as_str(self) -> &'static str {
        match self {
            ReportState::Current => "current",
            ReportState::Stale => "stale",
            ReportState::Missing => "missing",
            ReportState::Broken => "broken",
            ReportState::Unknown => "unknown",
        }
    }
}

/// One pack in `airlock doctor`'s report.
#[derive(Debug, Clone, Serialize)]
pub struct PackReport {
    pub name: String,
    pub dir: PathBuf,
    pub placement: Placement,
    pub opted_in: bool,
    pub config_file: Option<PathBuf>,
    pub config_ok: bool,
    /// A group's packs (`packs`, ADR 0054), in import order; empty for one pack.
    pub members: Vec<String>,
    pub env: ReportState,
    pub env_dir: Option<PathBuf>,
    pub key: Option<String>,
    /// The env's interpreter.
    pub python: Option<PathBuf>,
    pub probe: Option<EnvProbe>,
    pub log: Option<PathBuf>,
    /// Whether ComfyUI read the pack's nodes with its current content (None: env not current).
    pub nodes: Option<NodesState>,
    /// Why its import failed (worker's traceback), from the scan cache.
    pub import_error: Option<ScanFailure>,
    /// The scan cache's entry for the pack's current content.
    pub scan_file: Option<PathBuf>,
    pub ready: bool,
    /// What is wrong, one sentence each, each starting with the pack's name.
    pub problems: Vec<String>,
    /// What to do about it, fitting the cause (None when ready).
    pub fix: Option<String>,
    /// What the pack's config says that is not acted on.
    pub notices: Vec<String>,
}

/// What ComfyUI found when it read the pack's nodes in its worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NodesState {
    Read,
    Failed,
    /// Not read with this content yet: ComfyUI reads them at its next start.
    NotRead,
}

/// Checks one discovered pack: config, env state, and (when current) what the env holds.
/// `runtime` is the `comfy_airlock` package the host runs (part of the scan cache's key).
pub fn report_pack(
    pack: &DiscoveredPack,
    opts: &EnvOptions,
    limit: Duration,
    runtime: Option<&Path>,
) -> PackReport {
    let mut r = unchecked(pack);
    if pack.misplaced() {
        r.problems.push(pack.misplaced_message());
    }
    if let Err(e) = &pack.config {
        r.problems.push(e.to_string());
        r.fix = fix_for(&r);
        return r;
    }
    let file = pack
        .config
        .as_ref()
        .ok()
        .filter(|c| c.format == crate::config::ConfigFormat::ComfyEnv)
        .map(|c| c.file.clone());
    let (plan, state) = match env_state_at(&pack.dir, file.as_deref(), opts) {
        Ok(x) => x,
        Err(e) => {
            r.problems.push(e.to_string());
            r.fix = fix_for(&r);
            return r;
        }
    };
    r.log = Some(opts.home.log(&plan.pack_id));
    match state {
        EnvState::Ready(info) => {
            r.env = ReportState::Current;
            r.env_dir = Some(info.env_dir.clone());
            r.key = Some(info.key.clone());
            r.python = Some(info.python.clone());
            read_scan(&mut r, pack, opts, &info.key, runtime);
            match probe_env(&info.python, &info.env_vars, limit) {
                Ok(p) => r.probe = Some(p),
                Err(e) => {
                    r.env = ReportState::Broken;
                    r.problems.push(format!(
                        "{}: its environment's interpreter {} does not run: {e}; run `airlock \
                         build` to rebuild it",
                        r.name,
                        info.python.display()
                    ));
                }
            }
        }
        EnvState::NotReady(why) => {
            r.env = match &why {
                NotReady::Missing => ReportState::Missing,
                NotReady::Stale => ReportState::Stale,
                NotReady::Broken { env_dir, .. } => {
                    r.env_dir = Some(env_dir.clone());
                    ReportState::Broken
                }
            };
            let e = EnvError::build(&r.name, crate::error::BuildError::Missing(why));
            r.problems.push(e.to_string());
        }
    }
    r.ready = r.problems.is_empty() && r.env == ReportState::Current;
    r.fix = fix_for(&r);
    r
}

/// A pack's report before any check: what discovery said, nothing found yet.
fn unchecked(pack: &DiscoveredPack) -> PackReport {
    PackReport {
        name: pack.name.clone(),
        dir: pack.dir.clone(),
        placement: pack.placement,
        opted_in: pack.opted_in,
        config_file: pack.config.as_ref().ok().map(|c| c.file.clone()),
        config_ok: pack.config.is_ok(),
        members: pack
            .config
            .as_ref()
            .map(|c| c.members.clone())
            .unwrap_or_default(),
        env: ReportState::Unknown,
        env_dir: None,
        key: None,
        python: None,
        probe: None,
        log: None,
        nodes: None,
        import_error: None,
        scan_file: None,
        ready: false,
        problems: Vec::new(),
        fix: None,
        notices: pack
            .config
            .as_ref()
            .map(|c| c.notices.clone())
            .unwrap_or_default(),
    }
}

/// What the scan cache says about the pack's current content.
fn read_scan(
    r: &mut PackReport,
    pack: &DiscoveredPack,
    opts: &EnvOptions,
    env_key: &str,
    runtime: Option<&Path>,
) {
    let comfyui = opts.comfyui_dir.as_deref();
    let protocol = airlock_wire::PROTOCOL_VERSION;
    let Ok(key) = scan_key(&pack.dir, env_key, comfyui, runtime, protocol) else {
        return; // an unreadable source file: the scan would say so; nothing to report here
    };
    r.scan_file = Some(scan_path(&opts.home, &key));
    r.nodes = Some(match cached_scan(&opts.home, &key) {
        CachedScan::Absent => NodesState::NotRead,
        CachedScan::Nodes { failed_members } => {
            // A group that loads without some of its packs (ADR 0054) is not all there.
            for (member, f) in failed_members {
                let name = format!("{}/{member}", r.name);
                r.problems.push(import_problem(&name, &f));
                r.import_error.get_or_insert(f);
            }
            NodesState::Read
        }
        CachedScan::Failed(f) => {
            r.problems.push(import_problem(&r.name, &f));
            r.import_error = Some(f);
            NodesState::Failed
        }
    });
}

/// The import failure as one problem: the exception, then the worker's traceback.
pub fn import_problem(pack: &str, f: &ScanFailure) -> String {
    let head = match &f.kind {
        Some(k) if !f.error.starts_with(k.as_str()) => format!("{k}: {}", f.error),
        _ => f.error.clone(),
    };
    let mut s = format!(
        "{pack}: its nodes could not be read in its worker (at ComfyUI's last start): {head}"
    );
    if let Some(tb) = f.traceback.as_deref().filter(|t| !t.trim().is_empty()) {
        s.push('\n');
        s.push_str(tb.trim_end());
    }
    s
}

/// The one thing to do first, for the first cause found: config, placement, environment,
/// import (the order in which ComfyUI meets them).
pub fn fix_for(r: &PackReport) -> Option<String> {
    if r.ready {
        return None;
    }
    let fix = if !r.config_ok {
        "fix its config (the file and line are named above)"
    } else if r.placement != Placement::Managed && !r.opted_in {
        "move it to isolated_nodes/, or make its __init__.py call register_nodes()"
    } else if r
        .problems
        .first()
        .is_some_and(|_| r.env == ReportState::Unknown)
    {
        "fix the cause named above, then run `airlock build`"
    } else if matches!(r.env, ReportState::Missing | ReportState::Stale) {
        "run `airlock build` to build its environment"
    } else if r.env == ReportState::Broken {
        "run `airlock build` to rebuild its environment"
    } else if r.nodes == Some(NodesState::Failed) || r.import_error.is_some() {
        "fix the import error shown above (in the pack's code, or add what it imports to its \
         dependencies); ComfyUI reads its nodes again once the pack or its environment changes"
    } else {
        "see the problems above"
    };
    Some(fix.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probes_an_interpreter_without_torch_cleanly() {
        let py = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.venv/bin/python");
        let py = if py.exists() {
            py
        } else {
            PathBuf::from("python3")
        };
        let p = probe_env(&py, &BTreeMap::new(), Duration::from_secs(120)).unwrap();
        assert!(p.python.is_some());
        assert!(p.torch_error.is_none() || p.torch.is_none(), "{p:?}");
    }

    #[test]
    fn a_missing_interpreter_is_an_error() {
        let e = probe_env(
            Path::new("/nonexistent/python"),
            &BTreeMap::new(),
            Duration::from_secs(5),
        );
        assert!(matches!(e, Err(ProbeError::Spawn(_))));
    }

    #[test]
    fn nvml_check_does_not_crash() {
        let _ = nvml_present();
    }
}
