//! Finding the packs to isolate.
//!
//! ComfyUI imports every folder in `custom_nodes/` itself, in its own process, before anything
//! of ours runs. A pack that needs isolation because importing it breaks the host must
//! therefore live where ComfyUI does not look: `<base>/isolated_nodes/` (the folder we manage)
//! or a folder named in `AIRLOCK_PACKS_PATH`. The other way is the author's: a pack in
//! `custom_nodes/` with an `airlock.toml` whose `__init__.py` only calls
//! `comfy_airlock.register_nodes()`. We report such a pack with `opted_in = false` when its
//! `__init__.py` does not, so the host can say "move it" instead of letting ComfyUI crash on it.
//!
//! Discovery never fails as a whole: a pack whose config is broken is reported with its error
//! next to the others.

use std::collections::HashSet;
use std::fs;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::config::{AIRLOCK_TOML, PackConfig, comfy_env_configs, config_file, folder_name};
use crate::error::ConfigError;

/// The variable listing more folders of packs, separated like `PATH` (the `airlock` command's
/// reader is [`packs_path_from_env`]; ComfyUI's start passes the folders from Python).
pub const PACKS_PATH_ENV: &str = "AIRLOCK_PACKS_PATH";

/// The folders [`PACKS_PATH_ENV`] lists, empty ones left out.
pub fn packs_path_from_env() -> Vec<PathBuf> {
    std::env::var_os(PACKS_PATH_ENV)
        .map(|v| {
            std::env::split_paths(&v)
                .filter(|p| !p.as_os_str().is_empty())
                .collect()
        })
        .unwrap_or_default()
}

/// The folder under ComfyUI's base directory whose packs we manage (ComfyUI never imports it).
pub const MANAGED_DIR: &str = "isolated_nodes";
/// ComfyUI's own folder of custom nodes.
pub const CUSTOM_NODES_DIR: &str = "custom_nodes";

/// Where a pack was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Placement {
    /// In `isolated_nodes/` or an `AIRLOCK_PACKS_PATH` folder: only we import it.
    Managed,
    /// In `custom_nodes/`: ComfyUI imports its `__init__.py` in-process.
    CustomNodes,
}

impl Placement {
    pub fn as_str(self) -> &'static str {
        match self {
            Placement::Managed => "managed",
            Placement::CustomNodes => "custom_nodes",
        }
    }
}

/// One pack found by [`discover_packs`].
#[derive(Debug)]
pub struct DiscoveredPack {
    pub name: String,
    pub dir: PathBuf,
    pub placement: Placement,
    /// Whether its `__init__.py` calls `register_nodes` (what a pack in `custom_nodes/` must do).
    pub opted_in: bool,
    pub config: Result<PackConfig, ConfigError>,
}

impl DiscoveredPack {
    /// A pack in `custom_nodes/` that ComfyUI will import in-process without our help.
    pub fn misplaced(&self) -> bool {
        self.placement == Placement::CustomNodes && !self.opted_in
    }

    /// What to tell the user about a misplaced pack.
    pub fn misplaced_message(&self) -> String {
        format!(
            "{}: this pack sits in custom_nodes/ where ComfyUI imports it in-process; move it to \
             isolated_nodes/ or call comfy_airlock.register_nodes() in its __init__.py",
            self.name
        )
    }
}

/// The packs under `<base>/isolated_nodes/`, each of `extra_roots`, and the opted-in packs of
/// `<base>/custom_nodes/`, managed ones first, each group sorted by name.
pub fn discover_packs(base_dir: &Path, extra_roots: &[PathBuf]) -> Vec<DiscoveredPack> {
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    let managed = std::iter::once(base_dir.join(MANAGED_DIR)).chain(extra_roots.iter().cloned());
    for root in managed {
        for dir in pack_dirs(&root) {
            if config_file(&dir).is_none() && is_our_custom_node(&dir) {
                continue;
            }
            if seen.insert(identity(&dir)) {
                out.extend(found(dir, Placement::Managed));
            }
        }
    }
    for dir in pack_dirs(&base_dir.join(CUSTOM_NODES_DIR)) {
        let ours = dir.join(AIRLOCK_TOML).is_file() || uses_comfy_env(&dir);
        if ours && seen.insert(identity(&dir)) {
            out.extend(found(dir, Placement::CustomNodes));
        }
    }
    out.sort_by(|a, b| (a.placement, &a.name).cmp(&(b.placement, &b.name)));
    out
}

/// The pack in `dir`: one entry, or one per env for comfy-env's `nodes/<sub>/comfy-env.toml`
/// layout (each named `<pack>/<sub>`, its config naming its file).
fn found(dir: PathBuf, placement: Placement) -> Vec<DiscoveredPack> {
    let opted_in = calls_register_nodes(&dir);
    let one = |config: Result<PackConfig, ConfigError>, fallback: String| DiscoveredPack {
        name: config.as_ref().map_or(fallback, |c| c.name.clone()),
        opted_in,
        placement,
        dir: dir.clone(),
        config,
    };
    let subs = comfy_env_configs(&dir);
    if config_file(&dir).is_some() || subs.is_empty() {
        return vec![one(PackConfig::load(&dir), folder_name(&dir))];
    }
    subs.iter()
        .map(|file| {
            let sub = file.parent().map(folder_name).unwrap_or_default();
            let fallback = match sub.as_str() {
                "nodes" => folder_name(&dir),
                _ => format!("{}/{sub}", folder_name(&dir)),
            };
            one(PackConfig::load_comfy_env(&dir, file), fallback)
        })
        .collect()
}

/// A pack in `custom_nodes/` written for comfy-env: its `__init__.py` imports `comfy_env`
/// and it has one of comfy-env's configs.
fn uses_comfy_env(dir: &Path) -> bool {
    init_text(dir).contains("comfy_env") && !comfy_env_configs(dir).is_empty()
}

/// The pack folders directly under `root`: no files, hidden folders, caches or `*.disabled`.
fn pack_dirs(root: &Path) -> Vec<PathBuf> {
    let Ok(entries) = fs::read_dir(root) else {
        return Vec::new();
    };
    let mut dirs: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .filter(|p| {
            let name = folder_name(p);
            !name.starts_with('.') && !name.ends_with(".disabled") && name != "__pycache__"
        })
        .collect();
    dirs.sort();
    dirs
}

fn identity(dir: &Path) -> PathBuf {
    dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf())
}

fn init_text(dir: &Path) -> String {
    fs::read(dir.join("__init__.py"))
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default()
}

fn calls_register_nodes(dir: &Path) -> bool {
    init_text(dir).contains("register_nodes")
}

/// comfy-airlock's own custom node (the one that hooks into ComfyUI), which is no pack.
fn is_our_custom_node(dir: &Path) -> bool {
    init_text(dir).contains("comfy_airlock.host")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(path: &Path, text: &str) {
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, text).unwrap();
    }

    #[test]
    fn finds_managed_extra_and_opted_in_packs_and_reports_broken_ones() {
        let base = tempfile::tempdir().unwrap();
        let extra = tempfile::tempdir().unwrap();
        let b = base.path();
        write(
            &b.join("isolated_nodes/zeta/airlock.toml"),
            "dependencies = [\"six\"]\n",
        );
        write(
            &b.join("isolated_nodes/alpha/nodes/comfy-env.toml"),
            "python = \"3.10\"\n",
        );
        write(
            &b.join("isolated_nodes/broken/airlock.toml"),
            "pyhton = \"3.10\"\n",
        );
        write(&b.join("isolated_nodes/noconfig/__init__.py"), "");
        write(&b.join("isolated_nodes/old.disabled/airlock.toml"), "");
        write(&b.join("isolated_nodes/.hidden/airlock.toml"), "");
        write(&b.join("isolated_nodes/notes.txt"), "");
        write(
            &extra.path().join("gamma/airlock.toml"),
            "name = \"Gamma\"\n",
        );
        write(&b.join("custom_nodes/optin/airlock.toml"), "");
        write(
            &b.join("custom_nodes/optin/__init__.py"),
            "from comfy_airlock import register_nodes\nNODE_CLASS_MAPPINGS = register_nodes(__file__)\n",
        );
        write(&b.join("custom_nodes/plain/airlock.toml"), "");
        write(
            &b.join("custom_nodes/plain/__init__.py"),
            "from .nodes import *\n",
        );
        write(&b.join("custom_nodes/ordinary/__init__.py"), "");
        write(
            &b.join("custom_nodes/comfy-airlock/__init__.py"),
            "import comfy_airlock.host\n",
        );

        let packs = discover_packs(b, &[extra.path().to_path_buf()]);
        let names: Vec<_> = packs
            .iter()
            .map(|p| (p.name.as_str(), p.placement))
            .collect();
        assert_eq!(
            names,
            [
                ("Gamma", Placement::Managed),
                ("alpha", Placement::Managed),
                ("broken", Placement::Managed),
                ("noconfig", Placement::Managed),
                ("zeta", Placement::Managed),
                ("optin", Placement::CustomNodes),
                ("plain", Placement::CustomNodes),
            ]
        );
        let by = |n: &str| packs.iter().find(|p| p.name == n).unwrap();
        let broken = by("broken").config.as_ref().unwrap_err().to_string();
        assert!(
            broken.starts_with("broken: ") && broken.contains("unknown key `pyhton`"),
            "{broken}"
        );
        assert!(matches!(
            by("noconfig").config,
            Err(ConfigError::NoConfig { .. })
        ));
        assert_eq!(by("zeta").config.as_ref().unwrap().dependencies, ["six"]);
        assert_eq!(
            by("alpha").config.as_ref().unwrap().python.as_deref(),
            Some("3.10")
        );
        assert!(by("optin").opted_in && !by("optin").misplaced());
        assert!(!by("plain").opted_in && by("plain").misplaced());
        assert!(
            by("plain")
                .misplaced_message()
                .contains("move it to isolated_nodes/")
        );
    }

    #[test]
    fn comfy_env_packs_are_one_entry_per_env_in_both_places() {
        let base = tempfile::tempdir().unwrap();
        let b = base.path();
        for root in ["isolated_nodes/ce", "custom_nodes/ce2"] {
            write(
                &b.join(root).join("__init__.py"),
                "from comfy_env import register_nodes\nNODE_CLASS_MAPPINGS, _ = register_nodes()\n",
            );
            for sub in ["mesh", "render"] {
                write(&b.join(root).join(format!("nodes/{sub}/__init__.py")), "");
                write(
                    &b.join(root).join(format!("nodes/{sub}/comfy-env.toml")),
                    "[pypi-dependencies]\nsix = \"*\"\n",
                );
            }
        }
        // A custom_nodes pack with a comfy-env layout that does not use comfy_env: ComfyUI's.
        write(&b.join("custom_nodes/other/__init__.py"), "");
        write(&b.join("custom_nodes/other/nodes/comfy-env.toml"), "");
        let packs = discover_packs(b, &[]);
        let names: Vec<(&str, Placement, bool)> = packs
            .iter()
            .map(|p| (p.name.as_str(), p.placement, p.opted_in))
            .collect();
        assert_eq!(
            names,
            [
                ("ce/mesh", Placement::Managed, true),
                ("ce/render", Placement::Managed, true),
                ("ce2/mesh", Placement::CustomNodes, true),
                ("ce2/render", Placement::CustomNodes, true),
            ]
        );
        let mesh = packs[0].config.as_ref().unwrap();
        assert_eq!(mesh.entry.as_deref(), Some("nodes.mesh"));
        assert!(mesh.file.ends_with("nodes/mesh/comfy-env.toml"));
    }

    #[test]
    fn missing_roots_are_empty() {
        let base = tempfile::tempdir().unwrap();
        assert!(discover_packs(base.path(), &[base.path().join("nope")]).is_empty());
    }
}
