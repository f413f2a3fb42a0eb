//! `airlock build`: the packs to build (every pack found, or the ones named by name or folder),
//! then each one's environment, with progress on stderr and one line per pack on stdout.

use std::io::Write;
use std::path::{Path, PathBuf};

use airlock_env::{
    ConfigFormat, DiscoveredPack, EnvOptions, Lines, Progress, Spinner, ensure_env_at,
    stderr_is_terminal,
};

use super::{NO_BASE, Place, discover, where_packs_go};

/// One env to build: its pack's name, its folder, the config error found at discovery, and
/// the comfy-env config it is built from (a comfy-env pack may have one env per file).
type Todo = (String, PathBuf, Option<String>, Option<PathBuf>);

/// Brings the `airlock.toml` that `airlock isolate` wrote in a pack's folder in step with the
/// pack's requirements (Python's `isolated_toml.refresh_before_env`, ADR 0059), as ComfyUI's
/// start does before the environment; returns what to say.
pub type Refresh<'a> = &'a dyn Fn(&Path, &str) -> Vec<String>;

pub(crate) fn build(
    opts: &EnvOptions,
    place: &Place,
    names: &[String],
    interrupted: &dyn Fn() -> bool,
    refresh: Refresh<'_>,
) -> i32 {
    let (todo, mut failed) = match select(place, names) {
        Ok(chosen) => chosen,
        Err(status) => return status,
    };
    let progress: Box<dyn Progress> = if stderr_is_terminal() {
        Box::new(Spinner::new())
    } else {
        Box::new(Lines(|line: &str| eprintln!("{line}")))
    };
    let (mut built, mut current) = (0, 0);
    for (name, dir, config_error, config_file) in todo {
        if interrupted() {
            eprintln!("airlock: interrupted");
            return 130;
        }
        if let Some(e) = config_error {
            eprintln!("{e}");
            failed.push(name);
            continue;
        }
        if config_file.is_none() {
            // isolate names the file it writes after the pack's folder.
            let folder = dir.file_name().map(|f| f.to_string_lossy().into_owned());
            for notice in refresh(&dir, folder.as_deref().unwrap_or(&name)) {
                eprintln!("warning: pack '{name}': {notice}");
            }
        }
        match ensure_env_at(&dir, config_file.as_deref(), opts, true, progress.as_ref()) {
            Ok(info) => {
                let how = if info.built {
                    built += 1;
                    "built"
                } else {
                    current += 1;
                    "up to date"
                };
                println!(
                    "{}: {how}: {} (Python {})",
                    info.name,
                    info.python.display(),
                    info.interpreter.version
                );
            }
            Err(e) => {
                eprintln!("{e}");
                failed.push(e.pack().to_string());
            }
        }
        let _ = std::io::stdout().flush();
    }
    let mut summary = format!("{built} built, {current} up to date");
    if !failed.is_empty() {
        summary.push_str(&format!(", {} failed: {}", failed.len(), failed.join(", ")));
    }
    println!("{summary}");
    i32::from(!failed.is_empty())
}

/// The packs to build (every pack found, or the ones named) and the names that are no pack;
/// `Err(status)` to exit at once.
fn select(place: &Place, names: &[String]) -> Result<(Vec<Todo>, Vec<String>), i32> {
    let base = place.base();
    let found = base.as_deref().map(discover).unwrap_or_default();
    let mut failed: Vec<String> = Vec::new();
    let mut todo: Vec<Todo> = Vec::new();
    if names.is_empty() {
        let Some(base) = &base else {
            eprintln!("{NO_BASE}");
            return Err(2);
        };
        if found.is_empty() {
            println!("{}", where_packs_go(base));
            return Err(0);
        }
        for p in &found {
            if p.misplaced() {
                eprintln!("warning: {}", p.misplaced_message());
            }
            todo.push((
                p.name.clone(),
                p.dir.clone(),
                p.config.as_ref().err().map(|e| e.to_string()),
                comfy_env_file(p),
            ));
        }
        return Ok((todo, failed));
    }
    for n in names {
        let by_name = found
            .iter()
            .find(|p| &p.name == n || p.dir.file_name().is_some_and(|f| f == n.as_str()));
        match by_name {
            Some(p) => todo.push((p.name.clone(), p.dir.clone(), None, comfy_env_file(p))),
            None if Path::new(n).is_dir() => {
                let dir = Path::new(n)
                    .canonicalize()
                    .unwrap_or_else(|_| PathBuf::from(n));
                todo.push((n.clone(), dir, None, None));
            }
            None => {
                let known: Vec<&str> = found.iter().map(|p| p.name.as_str()).collect();
                eprintln!(
                    "{n}: no such pack{} (known: {})",
                    base.as_ref()
                        .map(|b| format!(" under {}", b.display()))
                        .unwrap_or_default(),
                    if known.is_empty() {
                        "none".to_string()
                    } else {
                        known.join(", ")
                    }
                );
                failed.push(n.clone());
            }
        }
    }
    Ok((todo, failed))
}

/// The comfy-env config of a discovered env (a pack may have one env per file).
fn comfy_env_file(p: &DiscoveredPack) -> Option<PathBuf> {
    p.config
        .as_ref()
        .ok()
        .filter(|c| c.format == ConfigFormat::ComfyEnv)
        .map(|c| c.file.clone())
}
