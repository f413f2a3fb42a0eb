//! ComfyUI's requirements at the versions the host has: native packs rely on what ComfyUI
//! installed (torch, numpy, Pillow, ...) without listing it, and expect the same versions they
//! would meet in ComfyUI's own process.
//!
//! Each of ComfyUI's requirements is pinned (`name==version`) to what the host interpreter has
//! installed, unless the pack constrains that project itself (a version, a range or a URL):
//! then ComfyUI's line goes as written and the pack's constraint decides. A bare name in the
//! pack (`"torch"`) constrains nothing, so it gets the host's version too. A project the host
//! does not have goes as ComfyUI writes it.
//!
//! The host's versions are read by running the host interpreter once per process (a
//! `importlib.metadata` listing, bounded in time); a host that cannot be asked pins nothing.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use crate::requirement::{name_of, normalize_name};
use crate::run::{Ran, run_with_timeout};

/// Normalized project name -> installed version.
pub type Installed = BTreeMap<String, String>;

/// What the host interpreter has.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostPackages {
    /// Its `major.minor`: versions pinned for one Python may not exist for another, so the pins
    /// apply only to envs on the same `major.minor`.
    pub python: String,
    pub installed: Installed,
    /// The CUDA version the host's torch was built for (`torch/version.py`, read without
    /// importing torch); None for a CPU build or no torch.
    pub torch_cuda: Option<String>,
}

impl HostPackages {
    /// The pins for an env on Python `version` ("3.11.7"): none for another `major.minor`.
    pub fn for_python(&self, version: &str) -> Installed {
        let minor: Vec<&str> = version.split('.').take(2).collect();
        if self.python.is_empty() || minor.join(".") != self.python {
            return Installed::new();
        }
        self.installed.clone()
    }
}

const LIST: &str = r#"
import importlib.metadata as m, json, sys
out = {}
for d in m.distributions():
    name = d.metadata["Name"]
    if name:
        out.setdefault(name, d.version)
py = "%d.%d" % sys.version_info[:2]
cuda = None
try:
    import importlib.util, os, re
    spec = importlib.util.find_spec("torch")
    for loc in (spec.submodule_search_locations or []) if spec else []:
        with open(os.path.join(loc, "version.py")) as f:
            m = re.search(r"^cuda[^=]*=\s*['\"]([0-9.]+)['\"]", f.read(), re.M)
        cuda = m.group(1) if m else None
        break
except Exception:
    pass
sys.stdout.write("\n" + json.dumps({"python": py, "installed": out, "cuda": cuda}) + "\n")
"#;

/// What `python` has installed (memoized per interpreter for this process).
pub fn host_packages(python: &Path) -> HostPackages {
    static SEEN: OnceLock<Mutex<HashMap<PathBuf, HostPackages>>> = OnceLock::new();
    let seen = SEEN.get_or_init(Default::default);
    if let Some(found) = seen.lock().unwrap_or_else(|p| p.into_inner()).get(python) {
        return found.clone();
    }
    let found = read_installed(python);
    seen.lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(python.to_path_buf(), found.clone());
    found
}

fn read_installed(python: &Path) -> HostPackages {
    #[derive(serde::Deserialize)]
    struct Listed {
        python: String,
        installed: BTreeMap<String, String>,
        #[serde(default)]
        cuda: Option<String>,
    }
    let mut cmd = Command::new(python);
    cmd.args(["-I", "-c", LIST]);
    let Ok(Ran::Exited { status, stdout, .. }) = run_with_timeout(cmd, Duration::from_secs(60))
    else {
        return HostPackages::default();
    };
    let last = stdout.lines().rev().find(|l| !l.trim().is_empty());
    match last.map(serde_json::from_str::<Listed>) {
        Some(Ok(l)) if status.success() => HostPackages {
            python: l.python,
            installed: l
                .installed
                .into_iter()
                .map(|(k, v)| (normalize_name(&k), v))
                .collect(),
            torch_cuda: l.cuda,
        },
        _ => HostPackages::default(),
    }
}

/// Whether `requirement` constrains its project's version (a specifier or a URL), beyond
/// naming it with extras and markers.
pub fn constrains_version(requirement: &str) -> bool {
    let spec = requirement.split(';').next().unwrap_or("").trim();
    let after_name =
        spec.trim_start_matches(|c: char| c.is_ascii_alphanumeric() || "-_.".contains(c));
    let after_extras = match after_name.trim_start().strip_prefix('[') {
        Some(rest) => rest.split_once(']').map_or("", |(_, r)| r),
        None => after_name,
    };
    !after_extras.trim().is_empty()
}

/// ComfyUI's requirements, each pinned to the host's version unless the pack constrains it.
pub fn pin_to_host(comfy: &[String], pack: &[String], host: &Installed) -> Vec<String> {
    let constrained: Vec<String> = pack
        .iter()
        .filter(|r| constrains_version(r))
        .filter_map(|r| name_of(r))
        .collect();
    comfy
        .iter()
        .map(|line| {
            let Some(name) = name_of(line) else {
                return line.clone();
            };
            match host.get(&name) {
                Some(version) if !constrained.contains(&name) => {
                    let spec = line.split(';').next().unwrap_or("").trim();
                    let project = &spec[..spec
                        .find(|c: char| !(c.is_ascii_alphanumeric() || "-_.".contains(c)))
                        .unwrap_or(spec.len())];
                    match line.split_once(';') {
                        Some((_, marker)) => format!("{project}=={version} ;{marker}"),
                        None => format!("{project}=={version}"),
                    }
                }
                _ => line.clone(),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host() -> Installed {
        [
            ("torch", "2.15.0"),
            ("numpy", "2.4.6"),
            ("pillow", "13.0.0"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
    }

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn version_constraints_are_told_from_bare_names() {
        assert!(!constrains_version("torch"));
        assert!(!constrains_version("torch[cuda]"));
        assert!(!constrains_version("torch ; sys_platform == 'linux'"));
        assert!(constrains_version("numpy<2"));
        assert!(constrains_version("numpy >= 1.26, <2"));
        assert!(constrains_version("torch[x]==2.4.1"));
        assert!(constrains_version("torch @ https://x/torch.whl"));
    }

    #[test]
    fn comfy_requirements_get_the_hosts_versions_unless_the_pack_says_otherwise() {
        let comfy = strings(&[
            "torch",
            "numpy>=1.25.0",
            "Pillow",
            "einops",
            "x ; os_name == 'nt'",
        ]);
        let pinned = pin_to_host(&comfy, &strings(&["torch", "opencv-python"]), &host());
        assert_eq!(
            pinned,
            [
                "torch==2.15.0",
                "numpy==2.4.6",
                "Pillow==13.0.0",
                "einops",
                "x ; os_name == 'nt'"
            ]
        );
        // The pack pins numpy below the host's: ComfyUI's own line goes as written.
        let pinned = pin_to_host(&comfy, &strings(&["numpy>=1.26,<2"]), &host());
        assert_eq!(pinned[1], "numpy>=1.25.0");
        assert_eq!(pinned[0], "torch==2.15.0");
        // A host that could not be asked pins nothing.
        assert_eq!(pin_to_host(&comfy, &[], &Installed::new()), comfy);
    }

    #[test]
    fn reads_the_running_interpreter() {
        let py = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.venv/bin/python");
        if !py.exists() {
            return;
        }
        let found = host_packages(&py);
        assert!(!found.installed.is_empty(), "{found:?}");
        assert_eq!(found.python.split('.').count(), 2, "{found:?}");
        let same = format!("{}.99", found.python);
        assert_eq!(found.for_python(&same), found.installed);
        assert!(found.for_python("2.7.18").is_empty());
        let none = host_packages(Path::new("/nonexistent/python"));
        assert!(none.installed.is_empty() && none.for_python("3.11.1").is_empty());
    }
}
