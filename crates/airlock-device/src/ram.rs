//! Host RAM as a process is allowed to use it: the limit of its memory cgroup where one binds,
//! else the machine.
//!
//! Upstream sizes its pin budget and RAM cache from `psutil.virtual_memory()`, which reads the
//! machine's `/proc/meminfo`. In a container whose memory cgroup is limited to a fraction of the
//! machine, that overstates the room by the difference, and the kernel's OOM killer, not
//! ComfyUI, finds out. So the reading here is the cgroup's where a limit binds:
//!
//! - cgroup v2: `memory.max` and `memory.current` of the process's cgroup and of each ancestor
//!   up to the mount (a parent's limit binds its children too);
//! - cgroup v1: `memory.limit_in_bytes` and `memory.usage_in_bytes` the same way, plus the leaf's
//!   `hierarchical_memory_limit` (ancestors a container cannot see);
//! - else, or where no limit is below the machine's memory, `/proc/meminfo`.
//!
//! The binding level is the one with the least headroom. Its usage counts page cache, which
//! the kernel reclaims before failing an allocation, so inactive file pages (`memory.stat`) are
//! not counted as used, which is what the machine's `MemAvailable` does too. Available memory is
//! never more than the machine's `MemAvailable`. The cgroup is found through
//! `/proc/self/cgroup` and `/proc/self/mountinfo`, so cgroup namespaces and hybrid hierarchies
//! (v1 memory controller beside a v2 mount) resolve to the right directory.

use std::path::{Path, PathBuf};

use crate::error::RamError;

/// Where a reading's limit comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RamSource {
    CgroupV2,
    CgroupV1,
    Machine,
}

impl RamSource {
    pub fn as_str(self) -> &'static str {
        match self {
            RamSource::CgroupV2 => "cgroup_v2",
            RamSource::CgroupV1 => "cgroup_v1",
            RamSource::Machine => "machine",
        }
    }
}

/// Host RAM in bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostRam {
    /// The binding limit, or the machine's memory.
    pub total: u64,
    /// In use against it, reclaimable file cache excluded.
    pub used: u64,
    /// What can still be allocated: `total - used`, at most the machine's available memory.
    pub available: u64,
    pub source: RamSource,
    /// The cgroup directory whose limit binds; `None` for the machine.
    pub cgroup: Option<PathBuf>,
}

/// The files a reading comes from: the real ones, or a fake tree in tests.
#[derive(Debug, Clone)]
pub struct RamFiles {
    /// Prefixed to the mount points named in `mountinfo`.
    pub root: PathBuf,
    pub meminfo: PathBuf,
    pub self_cgroup: PathBuf,
    pub mountinfo: PathBuf,
}

impl RamFiles {
    /// This process's files on this machine.
    pub fn system() -> RamFiles {
        RamFiles::under(Path::new("/"))
    }

    /// The same layout under `root`: `proc/meminfo`, `proc/self/cgroup`,
    /// `proc/self/mountinfo`, mount points below `root`.
    pub fn under(root: &Path) -> RamFiles {
        RamFiles {
            root: root.to_path_buf(),
            meminfo: root.join("proc/meminfo"),
            self_cgroup: root.join("proc/self/cgroup"),
            mountinfo: root.join("proc/self/mountinfo"),
        }
    }
}

/// This process's host RAM.
pub fn host_ram() -> Result<HostRam, RamError> {
    host_ram_from(&RamFiles::system())
}

/// Host RAM read from `files`.
pub fn host_ram_from(files: &RamFiles) -> Result<HostRam, RamError> {
    let (mem_total, mem_available) = meminfo(&files.meminfo)?;
    let machine = HostRam {
        total: mem_total,
        used: mem_total.saturating_sub(mem_available),
        available: mem_available.min(mem_total),
        source: RamSource::Machine,
        cgroup: None,
    };
    let cgroups = read(&files.self_cgroup).unwrap_or_default();
    let mounts = read(&files.mountinfo).unwrap_or_default();
    let v2 = cgroup_dir(files, &mounts, &cgroups, Hierarchy::V2);
    let v1 = cgroup_dir(files, &mounts, &cgroups, Hierarchy::V1);
    let binding = match (v2, v1) {
        (Some((dir, top)), _) if dir.join("memory.max").exists() => {
            binding(&dir, &top, RamSource::CgroupV2)?
        }
        (_, Some((dir, top))) if dir.join("memory.limit_in_bytes").exists() => {
            binding(&dir, &top, RamSource::CgroupV1)?
        }
        _ => None,
    };
    Ok(match binding {
        Some(b) if b.limit < mem_total => {
            let used = b.usage.saturating_sub(b.inactive_file);
            HostRam {
                total: b.limit,
                used,
                available: b.limit.saturating_sub(used).min(mem_available),
                source: b.source,
                cgroup: Some(b.dir),
            }
        }
        _ => machine,
    })
}

fn read(path: &Path) -> Result<String, RamError> {
    std::fs::read_to_string(path).map_err(|source| RamError::Read {
        path: path.to_path_buf(),
        source,
    })
}

/// `MemTotal` and `MemAvailable` (older kernels: free + buffers + cached), in bytes.
fn meminfo(path: &Path) -> Result<(u64, u64), RamError> {
    let text = read(path)?;
    let field = |name: &str| {
        text.lines().find_map(|l| {
            let rest = l.strip_prefix(name)?.strip_prefix(':')?;
            let kib: u64 = rest.trim().trim_end_matches("kB").trim().parse().ok()?;
            Some(kib * 1024)
        })
    };
    let total = field("MemTotal").ok_or_else(|| RamError::Parse {
        path: path.to_path_buf(),
        reason: "no MemTotal".into(),
    })?;
    let available = field("MemAvailable").unwrap_or_else(|| {
        ["MemFree", "Buffers", "Cached"]
            .iter()
            .filter_map(|f| field(f))
            .sum()
    });
    Ok((total, available))
}

#[derive(Clone, Copy)]
enum Hierarchy {
    V2,
    V1,
}

/// The process's cgroup directory in `hierarchy`, and its mount point (the walk's top).
fn cgroup_dir(
    files: &RamFiles,
    mountinfo: &str,
    self_cgroup: &str,
    hierarchy: Hierarchy,
) -> Option<(PathBuf, PathBuf)> {
    // "hierarchy-id:controllers:path"
    let path = self_cgroup.lines().find_map(|l| {
        let mut it = l.splitn(3, ':');
        let (id, controllers, path) = (it.next()?, it.next()?, it.next()?);
        let hit = match hierarchy {
            Hierarchy::V2 => id == "0" && controllers.is_empty(),
            Hierarchy::V1 => controllers.split(',').any(|c| c == "memory"),
        };
        hit.then(|| path.to_owned())
    })?;
    // "id parent major:minor root mount-point options [optional...] - fstype source super"
    let (root, mount) = mountinfo.lines().find_map(|l| {
        let (left, right) = l.split_once(" - ")?;
        let left: Vec<&str> = left.split(' ').collect();
        let right: Vec<&str> = right.split(' ').collect();
        let (root, mount) = (*left.get(3)?, *left.get(4)?);
        let fstype = *right.first()?;
        let hit = match hierarchy {
            Hierarchy::V2 => fstype == "cgroup2",
            Hierarchy::V1 => fstype == "cgroup" && right.get(2)?.split(',').any(|o| o == "memory"),
        };
        hit.then(|| (unescape(root), unescape(mount)))
    })?;
    let top = files.root.join(mount.trim_start_matches('/'));
    // The process's path is relative to the hierarchy's root; the mount shows `root` of it.
    let rel = Path::new(&path)
        .strip_prefix(&root)
        .map(Path::to_path_buf)
        .unwrap_or_default();
    let rel = rel.strip_prefix("/").unwrap_or(&rel).to_path_buf();
    Some((top.join(rel), top))
}

/// mountinfo escapes space, tab, newline and backslash as octal.
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = b.get(i + 1..i + 4).and_then(|d| {
            let d = std::str::from_utf8(d).ok()?;
            u8::from_str_radix(d, 8).ok()
        });
        match (b[i], octal) {
            (b'\\', Some(c)) => {
                out.push(c);
                i += 4;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The cgroup level whose limit binds.
struct Binding {
    dir: PathBuf,
    limit: u64,
    usage: u64,
    inactive_file: u64,
    source: RamSource,
}

/// A number, or `None` for "max" and v1's "unlimited" (a value near 2^63).
fn limit_value(text: &str) -> Option<u64> {
    let v: u64 = text.trim().parse().ok()?;
    (v < 1 << 62).then_some(v)
}

fn stat_field(stat: &str, name: &str) -> Option<u64> {
    stat.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == name).then(|| v.trim().parse().ok())?
    })
}

/// Walks from `leaf` up to `top`, returning the level with the least headroom, if any has a
/// limit.
fn binding(leaf: &Path, top: &Path, source: RamSource) -> Result<Option<Binding>, RamError> {
    let (limit_file, usage_file, inactive) = match source {
        RamSource::CgroupV2 => ("memory.max", "memory.current", "inactive_file"),
        _ => (
            "memory.limit_in_bytes",
            "memory.usage_in_bytes",
            "total_inactive_file",
        ),
    };
    let mut best: Option<Binding> = None;
    let mut consider = |b: Binding| {
        let headroom = |b: &Binding| b.limit.saturating_sub(b.usage);
        if best.as_ref().is_none_or(|cur| headroom(&b) < headroom(cur)) {
            best = Some(b);
        }
    };
    let mut dir = Some(leaf);
    while let Some(d) = dir.filter(|d| d.starts_with(top)) {
        dir = d.parent();
        let Ok(limit_text) = std::fs::read_to_string(d.join(limit_file)) else {
            continue;
        };
        let stat = std::fs::read_to_string(d.join("memory.stat")).unwrap_or_default();
        let usage = || -> Result<u64, RamError> {
            let path = d.join(usage_file);
            read(&path)?.trim().parse().map_err(|_| RamError::Parse {
                path,
                reason: "not a byte count".into(),
            })
        };
        let inactive_file = stat_field(&stat, inactive).unwrap_or(0);
        let mut limits: Vec<u64> = limit_value(&limit_text).into_iter().collect();
        if matches!(source, RamSource::CgroupV1) && d == leaf {
            limits.extend(stat_field(&stat, "hierarchical_memory_limit").filter(|&v| v < 1 << 62));
        }
        if let Some(&limit) = limits.iter().min() {
            consider(Binding {
                dir: d.to_path_buf(),
                limit,
                usage: usage()?,
                inactive_file,
                source,
            });
        }
    }
    Ok(best)
}

#[cfg(test)]
#[path = "ram_tests.rs"]
mod tests;
