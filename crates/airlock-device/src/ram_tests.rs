//! Unit tests of the host RAM reading, over hand-made cgroup trees (a file of their own to
//! keep `ram.rs` short).

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
