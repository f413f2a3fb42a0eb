//! What any CPython worker needs, whatever its pack: shared libraries and tools, the few `/etc`
//! files that libc, TLS and time zones read, hardware information in `/sys` and `/proc`, its
//! own `/proc/<pid>` entry (not other processes': the host's `/proc/<pid>/environ` holds its
//! secrets), a few character devices, and GPU device nodes.
//!
//! Deliberately absent: the user's home, the rest of `/etc` (`shadow`, SSH host keys), other
//! processes in `/proc`, `/dev/shm` (comfy-airlock's segments are memfds passed over the
//! socket, so a worker never needs a shared name), `/tmp` (the worker's `TMPDIR` is a private
//! directory, allowed by the caller), and `/run` (service sockets).

use std::fs;
use std::path::PathBuf;

use crate::Rules;

const READ: &[&str] = &[
    "/usr",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/bin",
    "/sbin",
    "/sys",
    "/proc/cpuinfo",
    "/proc/meminfo",
    "/proc/stat",
    "/proc/loadavg",
    "/proc/uptime",
    "/proc/version",
    "/proc/filesystems",
    "/proc/sys",
    "/proc/driver",
    "/proc/self",
    "/dev/urandom",
    "/dev/random",
    "/dev/zero",
];

/// Files and folders under `/etc` that programs read to run (dynamic linker, users and groups,
/// name resolution, TLS roots, time zone, MIME types, fonts, GPU vendor ICDs).
const ETC: &[&str] = &[
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "localtime",
    "timezone",
    "passwd",
    "group",
    "nsswitch.conf",
    "hosts",
    "host.conf",
    "resolv.conf",
    "gai.conf",
    "services",
    "protocols",
    "ssl",
    "ca-certificates",
    "ca-certificates.conf",
    "pki",
    "crypto-policies",
    "alternatives",
    "mime.types",
    "fonts",
    "os-release",
    "lsb-release",
    "debian_version",
    "machine-id",
    "OpenCL",
    "vulkan",
    "glvnd",
    "nvidia",
    "xdg",
    "matplotlibrc",
];

/// Device nodes for GPUs, read, write and ioctl: NVIDIA's, DRM render nodes, AMD's KFD.
fn devices() -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = ["/dev/dri", "/dev/kfd", "/dev/nvidia-caps"]
        .iter()
        .map(PathBuf::from)
        .collect();
    if let Ok(entries) = fs::read_dir("/dev") {
        for e in entries.flatten() {
            if e.file_name().to_string_lossy().starts_with("nvidia") {
                out.push(e.path());
            }
        }
    }
    out
}

pub(crate) fn rules() -> Rules {
    let mut read: Vec<PathBuf> = READ.iter().map(PathBuf::from).collect();
    read.extend(ETC.iter().map(|e| PathBuf::from("/etc").join(e)));
    // /proc/self resolves to this process's own entry when the rule is made: the worker's,
    // not its children's or anyone else's.
    Rules {
        read,
        list: Vec::new(),
        // /dev/null is written to (and opened with O_TRUNC by `open(os.devnull, "w")`).
        write: vec![PathBuf::from("/dev/null")],
        devices: devices(),
        network: true,
    }
}
