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
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    /// A fake machine: 32 GiB, 20 GiB available, the given cgroup lines and mounts.
    fn machine(cgroup: &str, mounts: &[&str]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let proc_self = dir.path().join("proc/self");
        std::fs::create_dir_all(&proc_self).unwrap();
        std::fs::write(
            dir.path().join("proc/meminfo"),
            format!(
                "MemTotal:       {} kB\nMemFree:         1000 kB\nMemAvailable:   {} kB\n",
                32 * GIB / 1024,
                20 * GIB / 1024
            ),
        )
        .unwrap();
        std::fs::write(proc_self.join("cgroup"), cgroup).unwrap();
        std::fs::write(proc_self.join("mountinfo"), mounts.join("\n")).unwrap();
        dir
    }

    fn files(dir: &Path, rel: &str, contents: &[(&str, String)]) -> PathBuf {
        let d = dir.join(rel);
        std::fs::create_dir_all(&d).unwrap();
        for (name, text) in contents {
            std::fs::write(d.join(name), text).unwrap();
        }
        d
    }

    const V2_MOUNT: &str = "30 23 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw";
    const V1_MOUNT: &str = "35 31 0:32 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory";
    const HYBRID_V2: &str = "41 31 0:38 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw";

    #[test]
    fn cgroup_v2_limit_binds_and_file_cache_is_not_used() {
        let m = machine("0::/app.slice/job\n", &[V2_MOUNT]);
        files(
            m.path(),
            "sys/fs/cgroup/app.slice",
            &[("memory.max", "max\n".into())],
        );
        let leaf = files(
            m.path(),
            "sys/fs/cgroup/app.slice/job",
            &[
                ("memory.max", format!("{}\n", 8 * GIB)),
                ("memory.current", format!("{}\n", 3 * GIB)),
                ("memory.stat", format!("anon 1\ninactive_file {GIB}\n")),
            ],
        );
        let r = host_ram_from(&RamFiles::under(m.path())).unwrap();
        assert_eq!(
            r,
            HostRam {
                total: 8 * GIB,
                used: 2 * GIB,
                available: 6 * GIB,
                source: RamSource::CgroupV2,
                cgroup: Some(leaf),
            }
        );
    }

    #[test]
    fn a_parents_limit_binds_its_children() {
        let m = machine("0::/a/b\n", &[V2_MOUNT]);
        let parent = files(
            m.path(),
            "sys/fs/cgroup/a",
            &[
                ("memory.max", format!("{}\n", 4 * GIB)),
                ("memory.current", format!("{}\n", 3 * GIB + GIB / 2)),
            ],
        );
        files(
            m.path(),
            "sys/fs/cgroup/a/b",
            &[
                ("memory.max", format!("{}\n", 6 * GIB)),
                ("memory.current", format!("{}\n", GIB)),
            ],
        );
        let r = host_ram_from(&RamFiles::under(m.path())).unwrap();
        assert_eq!((r.total, r.available), (4 * GIB, GIB / 2));
        assert_eq!(r.cgroup, Some(parent));
    }

    #[test]
    fn an_unlimited_cgroup_is_the_machine() {
        let m = machine("0::/\n", &[V2_MOUNT]);
        files(
            m.path(),
            "sys/fs/cgroup",
            &[
                ("memory.max", "max\n".into()),
                ("memory.current", "5\n".into()),
            ],
        );
        let r = host_ram_from(&RamFiles::under(m.path())).unwrap();
        assert_eq!(
            r,
            HostRam {
                total: 32 * GIB,
                used: 12 * GIB,
                available: 20 * GIB,
                source: RamSource::Machine,
                cgroup: None,
            }
        );
    }

    #[test]
    fn cgroup_v1_limit_and_hierarchical_limit() {
        let m = machine("4:memory:/docker/abc\n0::/\n", &[V1_MOUNT]);
        let leaf = files(
            m.path(),
            "sys/fs/cgroup/memory/docker/abc",
            &[
                ("memory.limit_in_bytes", format!("{}\n", 2 * GIB)),
                ("memory.usage_in_bytes", format!("{}\n", GIB)),
                ("memory.stat", "total_inactive_file 0\n".into()),
            ],
        );
        let r = host_ram_from(&RamFiles::under(m.path())).unwrap();
        assert_eq!((r.total, r.used, r.available), (2 * GIB, GIB, GIB));
        assert_eq!(
            (r.source, r.cgroup.as_deref()),
            (RamSource::CgroupV1, Some(&*leaf))
        );

        // Unlimited here, limited by an ancestor the container cannot see.
        std::fs::write(leaf.join("memory.limit_in_bytes"), "9223372036854771712\n").unwrap();
        std::fs::write(
            leaf.join("memory.stat"),
            format!(
                "hierarchical_memory_limit {}\ntotal_inactive_file 0\n",
                3 * GIB
            ),
        )
        .unwrap();
        let r = host_ram_from(&RamFiles::under(m.path())).unwrap();
        assert_eq!((r.total, r.available), (3 * GIB, 2 * GIB));
    }

    #[test]
    fn a_namespaced_v1_path_resolves_under_the_mounts_root() {
        // Without a cgroup namespace, the mount's root is the container's own cgroup.
        let mount = "35 31 0:32 /docker/abc /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory";
        let m = machine("4:memory:/docker/abc\n", &[mount]);
        let leaf = files(
            m.path(),
            "sys/fs/cgroup/memory",
            &[
                ("memory.limit_in_bytes", format!("{}\n", GIB)),
                ("memory.usage_in_bytes", "0\n".into()),
            ],
        );
        let r = host_ram_from(&RamFiles::under(m.path())).unwrap();
        assert_eq!((r.total, r.cgroup), (GIB, Some(leaf)));
    }

    #[test]
    fn hybrid_hierarchies_read_the_v1_memory_controller() {
        // This machine's shape: v2 mounted without the memory controller, v1 memory beside it.
        let m = machine("4:memory:/job\n0::/\n", &[V1_MOUNT, HYBRID_V2]);
        files(
            m.path(),
            "sys/fs/cgroup/unified",
            &[("cgroup.procs", String::new())],
        );
        files(
            m.path(),
            "sys/fs/cgroup/memory/job",
            &[
                ("memory.limit_in_bytes", format!("{}\n", 4 * GIB)),
                ("memory.usage_in_bytes", format!("{}\n", GIB)),
            ],
        );
        let r = host_ram_from(&RamFiles::under(m.path())).unwrap();
        assert_eq!(
            (r.source, r.total, r.available),
            (RamSource::CgroupV1, 4 * GIB, 3 * GIB)
        );
    }

    #[test]
    fn available_is_never_more_than_the_machines() {
        let m = machine("0::/big\n", &[V2_MOUNT]);
        files(
            m.path(),
            "sys/fs/cgroup/big",
            &[
                ("memory.max", format!("{}\n", 30 * GIB)),
                ("memory.current", format!("{}\n", GIB)),
            ],
        );
        let r = host_ram_from(&RamFiles::under(m.path())).unwrap();
        assert_eq!((r.total, r.used, r.available), (30 * GIB, GIB, 20 * GIB));
    }

    #[test]
    fn no_cgroup_files_is_the_machine_and_no_meminfo_is_an_error() {
        let m = machine("", &[]);
        let r = host_ram_from(&RamFiles::under(m.path())).unwrap();
        assert_eq!(r.source, RamSource::Machine);
        std::fs::write(m.path().join("proc/meminfo"), "MemFree: 1 kB\n").unwrap();
        assert!(matches!(
            host_ram_from(&RamFiles::under(m.path())),
            Err(RamError::Parse { .. })
        ));
        std::fs::remove_file(m.path().join("proc/meminfo")).unwrap();
        assert!(matches!(
            host_ram_from(&RamFiles::under(m.path())),
            Err(RamError::Read { .. })
        ));
    }

    #[test]
    fn mountinfo_octal_escapes() {
        assert_eq!(unescape(r"/a\040b\\c"), r"/a b\\c");
        assert_eq!(unescape(r"/x\134y"), r"/x\y");
    }

    #[test]
    fn this_machine() {
        let r = host_ram().unwrap();
        let text = std::fs::read_to_string("/proc/meminfo").unwrap();
        let (mem_total, _) = meminfo(Path::new("/proc/meminfo")).unwrap();
        assert!(text.contains("MemTotal"));
        assert!(r.total > 0 && r.total <= mem_total, "{r:?}");
        assert!(r.available <= r.total && r.used <= r.total, "{r:?}");
        assert_eq!(r.cgroup.is_some(), r.source != RamSource::Machine);
        eprintln!("host RAM here: {r:?}");
    }
}
