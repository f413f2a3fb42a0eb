//! `airlock gc`: finding (and, when asked, removing) what no pack uses any more.
//!
//! Envs are never updated in place, so every change to a pack leaves its previous env behind
//! (envs with torch are gigabytes). An env or resolution is kept when a current pack record
//! refers to it: the record's pack folder exists and recomputing the pack's inputs gives the
//! hash the record holds. A pack whose inputs cannot be recomputed right now (its config is
//! broken, its interpreter is gone) keeps its env: we cannot tell, and rebuilding costs more
//! than disk space. Packs discovered under a ComfyUI folder also keep their current env when
//! they have no record, and their log. Records and logs of packs whose folder is gone are
//! listed too.
//!
//! Removal takes each env's build lock without waiting, so an env being built is never
//! removed under its builder.

use std::collections::HashSet;
use std::fs;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::builder::{EnvOptions, RESOLVED_LOCK, plan_at};
use crate::config::{PackConfig, comfy_env_configs, folder_name};
use crate::flock::FileLock;
use crate::home::{Home, pack_id};
use crate::inputs::env_key;
use crate::record::{PackRecord, read_json};

/// What a [`GcItem`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum GcKind {
    Env,
    Resolution,
    Record,
    Log,
}

impl GcKind {
    pub fn as_str(self) -> &'static str {
        match self {
            GcKind::Env => "env",
            GcKind::Resolution => "resolution",
            GcKind::Record => "record",
            GcKind::Log => "log",
        }
    }
}

/// Something under the home that nothing uses.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GcItem {
    pub kind: GcKind,
    pub path: PathBuf,
    /// Disk usage in bytes (files hard-linked from uv's cache count here, but removing the env
    /// frees them only if the cache lets go of them too).
    pub size: u64,
    pub reason: String,
}

/// What `gc` found.
#[derive(Debug, Clone, Default, Serialize)]
pub struct GcPlan {
    pub items: Vec<GcItem>,
    pub kept_envs: usize,
    pub kept_resolutions: usize,
}

impl GcPlan {
    pub fn total_size(&self) -> u64 {
        self.items.iter().map(|i| i.size).sum()
    }

    /// Removes every item; returns each one's outcome.
    pub fn delete(&self, opts: &EnvOptions) -> Vec<(GcItem, io::Result<()>)> {
        self.items
            .iter()
            .map(|item| (item.clone(), remove(item, opts)))
            .collect()
    }
}

fn remove(item: &GcItem, opts: &EnvOptions) -> io::Result<()> {
    let name = item
        .path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let lock_name = match item.kind {
        GcKind::Env => Some(format!("env-{name}")),
        GcKind::Resolution => Some(format!("res-{name}")),
        GcKind::Record | GcKind::Log => None,
    };
    match lock_name {
        Some(l) => {
            let Some(_lock) = FileLock::try_exclusive(&opts.home.lock_file(&l))? else {
                return Err(io::Error::new(
                    io::ErrorKind::WouldBlock,
                    "a build is using it",
                ));
            };
            fs::remove_dir_all(&item.path)
        }
        None => fs::remove_file(&item.path),
    }
}

/// What the plan keeps: env keys, resolutions (inputs hashes) and pack ids with a live log.
#[derive(Default)]
struct Keep {
    envs: HashSet<String>,
    res: HashSet<String>,
    ids: HashSet<String>,
}

/// Finds what no current pack uses. `packs` are pack folders (discovered under a ComfyUI
/// folder) whose current env is kept even without a record.
pub fn plan_gc(opts: &EnvOptions, packs: &[PathBuf]) -> io::Result<GcPlan> {
    let mut keep = Keep::default();
    let mut plan_out = GcPlan::default();
    keep_recorded(opts, &mut keep, &mut plan_out)?;
    keep_discovered(opts, packs, &mut keep);
    sweep(&opts.home, &keep, &mut plan_out)?;
    Ok(plan_out)
}

/// The packs with a record: each keeps its current env (or, when that cannot be told now,
/// what it had); records of packs that are gone, or unreadable, go.
fn keep_recorded(opts: &EnvOptions, keep: &mut Keep, plan_out: &mut GcPlan) -> io::Result<()> {
    for path in list(&opts.home.packs())? {
        if path.extension().is_none_or(|e| e != "json") {
            continue;
        }
        let id = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let Some(rec) = read_json::<PackRecord>(&path) else {
            plan_out
                .items
                .push(item(GcKind::Record, &path, "unreadable pack record"));
            continue;
        };
        if !rec.pack_dir.is_dir() {
            let why = format!("pack {} is gone ({})", rec.name, rec.pack_dir.display());
            plan_out.items.push(item(GcKind::Record, &path, &why));
            continue;
        }
        keep.ids.insert(id);
        let o = EnvOptions {
            comfyui_dir: rec.comfyui_dir.clone().or_else(|| opts.comfyui_dir.clone()),
            host_python: rec.host_python.clone().or_else(|| opts.host_python.clone()),
            ..opts.clone()
        };
        match plan_at(&rec.pack_dir, rec.config_file.as_deref(), &o) {
            Ok(p) if p.inputs_hash == rec.inputs_hash => {
                keep.envs.insert(rec.env_key.clone());
                keep.res.insert(rec.inputs_hash.clone());
            }
            // Changed since its last build: its old env is no longer current.
            Ok(_) => {
                let file = rec.config_file.as_deref();
                if let Some(key) = keep_current(&rec.pack_dir, file, &o, &mut keep.res) {
                    keep.envs.insert(key);
                }
            }
            // Cannot tell now: keep what it had.
            Err(_) => {
                keep.envs.insert(rec.env_key.clone());
                keep.res.insert(rec.inputs_hash.clone());
            }
        }
    }
    Ok(())
}

/// The packs found now: each keeps its log and its current env, record or not.
fn keep_discovered(opts: &EnvOptions, packs: &[PathBuf], keep: &mut Keep) {
    for dir in packs {
        // A pack that exists keeps its log, even when it never built (the log says why).
        let name = PackConfig::load(dir).map_or_else(|_| folder_name(dir), |c| c.name);
        keep.ids.insert(pack_id(&name, dir));
        if let Some(key) = keep_current(dir, None, opts, &mut keep.res) {
            keep.envs.insert(key);
        }
        // comfy-env's one env per `nodes/<sub>/comfy-env.toml`.
        for file in comfy_env_configs(dir) {
            if let Ok(c) = PackConfig::load_comfy_env(dir, &file) {
                keep.ids.insert(pack_id(&c.name, dir));
            }
            if let Some(key) = keep_current(dir, Some(&file), opts, &mut keep.res) {
                keep.envs.insert(key);
            }
        }
    }
}

/// Everything under the home that `keep` does not name: envs, resolutions, logs.
fn sweep(home: &Home, keep: &Keep, plan_out: &mut GcPlan) -> io::Result<()> {
    for path in list(&home.envs())? {
        let name = file_name(&path);
        if !path.is_dir() || name.starts_with('.') {
            continue;
        }
        if keep.envs.contains(&name) {
            plan_out.kept_envs += 1;
        } else {
            let why = if path.join(crate::builder::COMPLETE_MARKER).exists() {
                "no current pack uses it"
            } else {
                "half-built"
            };
            plan_out.items.push(item(GcKind::Env, &path, why));
        }
    }
    for path in list(&home.resolutions())? {
        if !path.is_dir() {
            continue;
        }
        if keep.res.contains(&file_name(&path)) {
            plan_out.kept_resolutions += 1;
        } else {
            plan_out.items.push(item(
                GcKind::Resolution,
                &path,
                "no current pack has these inputs",
            ));
        }
    }
    for path in list(&home.logs())? {
        let id = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        if path.extension().is_some_and(|e| e == "log") && !keep.ids.contains(&id) {
            plan_out
                .items
                .push(item(GcKind::Log, &path, "its pack has no record"));
        }
    }
    Ok(())
}

/// Keeps the current resolution of the pack in `dir` and returns its env key when resolved.
fn keep_current(
    dir: &Path,
    file: Option<&Path>,
    o: &EnvOptions,
    keep_res: &mut HashSet<String>,
) -> Option<String> {
    let p = plan_at(dir, file, o).ok()?;
    keep_res.insert(p.inputs_hash.clone());
    let res = o.home.resolution_dir(&p.inputs_hash);
    let lock = fs::read_to_string(res.join(RESOLVED_LOCK)).ok()?;
    let keyed = crate::conda_env::keyed_lock(&res, &lock);
    Some(env_key(&keyed, &p.inputs.interpreter))
}

fn item(kind: GcKind, path: &Path, reason: &str) -> GcItem {
    GcItem {
        kind,
        path: path.to_path_buf(),
        size: disk_usage(path),
        reason: reason.to_string(),
    }
}

fn file_name(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// The entries of `dir`, sorted; none when it does not exist.
fn list(dir: &Path) -> io::Result<Vec<PathBuf>> {
    match fs::read_dir(dir) {
        Ok(entries) => {
            let mut v: Vec<PathBuf> = entries.filter_map(Result::ok).map(|e| e.path()).collect();
            v.sort();
            Ok(v)
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(e),
    }
}

/// Disk usage of a file or tree, each inode counted once (like `du`); symlinks not followed.
pub fn disk_usage(path: &Path) -> u64 {
    let mut seen = HashSet::new();
    let mut total = 0;
    let mut stack = vec![path.to_path_buf()];
    while let Some(p) = stack.pop() {
        let Ok(m) = fs::symlink_metadata(&p) else {
            continue;
        };
        if seen.insert((m.dev(), m.ino())) {
            total += m.blocks() * 512;
        }
        if m.is_dir() {
            if let Ok(entries) = fs::read_dir(&p) {
                stack.extend(entries.filter_map(Result::ok).map(|e| e.path()));
            }
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn disk_usage_counts_hard_links_once() {
        let d = tempfile::tempdir().unwrap();
        fs::write(d.path().join("a"), vec![1u8; 64 * 1024]).unwrap();
        let one = disk_usage(d.path());
        fs::hard_link(d.path().join("a"), d.path().join("b")).unwrap();
        assert_eq!(disk_usage(d.path()), one);
        assert!(one >= 64 * 1024);
    }
}
