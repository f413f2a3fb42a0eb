//! `[system-requirements]`: what a pack needs of the machine (kernel, C library, CUDA driver),
//! used as pixi uses them: as the virtual packages the solve assumes (`__linux`, `__glibc`,
//! `__cuda`, with pixi's defaults for what is not given), and checked against this machine
//! before anything is installed. Host values honour conda's `CONDA_OVERRIDE_LINUX`,
//! `CONDA_OVERRIDE_GLIBC` and `CONDA_OVERRIDE_CUDA`.

use std::ffi::CStr;
use std::str::FromStr;

use rattler_conda_types::package::BuildString;
use rattler_conda_types::{GenericVirtualPackage, PackageName, Version};

use crate::error::CondaError;

/// pixi's defaults for linux-64 when a manifest says nothing.
const DEFAULT_LINUX: &str = "4.18";
const DEFAULT_GLIBC: &str = "2.28";

/// A pack's `[system-requirements]`.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize)]
pub struct SystemRequirements {
    pub linux: Option<String>,
    pub libc: Option<Libc>,
    /// The CUDA driver version the packages need (`__cuda`).
    pub cuda: Option<String>,
    pub archspec: Option<String>,
}

/// `libc = "2.28"` or `libc = { family = "glibc", version = "2.28" }`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Libc {
    pub family: String,
    pub version: String,
}

impl SystemRequirements {
    /// The lines that describe these requirements, for the inputs hash.
    pub fn describe(&self) -> Vec<String> {
        virtual_packages(self)
            .into_iter()
            .map(|(n, v)| format!("{n}={v}"))
            .collect()
    }

    /// Whether this machine meets them; `host_cuda` is the driver's CUDA version if known.
    pub fn check_host(&self, host_cuda: Option<&str>) -> Result<(), CondaError> {
        let need = |what: &str, wanted: &str, have: Option<String>, how: &str| {
            let ok = have.as_deref().is_some_and(|h| at_least(h, wanted));
            if ok {
                return Ok(());
            }
            let have = have.unwrap_or_else(|| "none".to_string());
            Err(CondaError::System(format!(
                "[system-requirements] asks for {what} {wanted}, and this machine has {have} \
                 ({how})"
            )))
        };
        if let Some(v) = &self.linux {
            need(
                "Linux",
                v,
                host_linux(),
                "its kernel; CONDA_OVERRIDE_LINUX overrides",
            )?;
        }
        if let Some(l) = &self.libc {
            if l.family != "glibc" {
                return Err(CondaError::System(format!(
                    "[system-requirements] asks for the C library {}, and this machine's is glibc",
                    l.family
                )));
            }
            need(
                "glibc",
                &l.version,
                host_glibc(),
                "CONDA_OVERRIDE_GLIBC overrides",
            )?;
        }
        if let Some(v) = &self.cuda {
            let have = std::env::var("CONDA_OVERRIDE_CUDA")
                .ok()
                .filter(|s| !s.is_empty())
                .or_else(|| host_cuda.map(str::to_string));
            need(
                "a CUDA driver of version",
                v,
                have,
                "the NVIDIA driver's; CONDA_OVERRIDE_CUDA overrides",
            )?;
        }
        Ok(())
    }
}

/// The virtual packages a solve assumes: `(name, version)`.
pub fn virtual_packages(req: &SystemRequirements) -> Vec<(String, String)> {
    let mut out = vec![
        ("__unix".to_string(), "0".to_string()),
        (
            "__linux".to_string(),
            req.linux.clone().unwrap_or_else(|| DEFAULT_LINUX.into()),
        ),
        (
            "__glibc".to_string(),
            req.libc
                .as_ref()
                .map(|l| l.version.clone())
                .unwrap_or_else(|| DEFAULT_GLIBC.into()),
        ),
    ];
    if let Some(c) = &req.cuda {
        out.push(("__cuda".into(), c.clone()));
    }
    out.push(("__archspec".into(), "1".into()));
    out
}

pub(crate) fn generic(req: &SystemRequirements) -> Result<Vec<GenericVirtualPackage>, CondaError> {
    let arch = req
        .archspec
        .clone()
        .unwrap_or_else(|| std::env::consts::ARCH.to_string());
    virtual_packages(req)
        .into_iter()
        .map(|(name, version)| {
            let bad = |why: String| {
                CondaError::System(format!("[system-requirements] {name} = {version:?}: {why}"))
            };
            let build = if name == "__archspec" {
                arch.clone()
            } else {
                "0".into()
            };
            Ok(GenericVirtualPackage {
                name: PackageName::from_str(&name).map_err(|e| bad(e.to_string()))?,
                version: Version::from_str(&version).map_err(|e| bad(e.to_string()))?,
                build_string: build
                    .parse()
                    .map_err(|e: <BuildString as FromStr>::Err| bad(e.to_string()))?,
            })
        })
        .collect()
}

fn at_least(have: &str, wanted: &str) -> bool {
    match (Version::from_str(have), Version::from_str(wanted)) {
        (Ok(h), Ok(w)) => h >= w,
        _ => false,
    }
}

fn overridden(var: &str) -> Option<String> {
    std::env::var(var).ok().filter(|s| !s.is_empty())
}

/// The running kernel's version (`6.1.0` of `6.1.0-13-amd64`).
pub fn host_linux() -> Option<String> {
    if let Some(v) = overridden("CONDA_OVERRIDE_LINUX") {
        return Some(v);
    }
    // SAFETY: uname fills a plain struct; release is NUL-terminated on success.
    let release = unsafe {
        let mut u: libc::utsname = std::mem::zeroed();
        if libc::uname(&mut u) != 0 {
            return None;
        }
        CStr::from_ptr(u.release.as_ptr())
            .to_string_lossy()
            .into_owned()
    };
    let v: String = release
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    (!v.is_empty()).then(|| v.trim_end_matches('.').to_string())
}

/// The C library's version, when it is glibc.
pub fn host_glibc() -> Option<String> {
    if let Some(v) = overridden("CONDA_OVERRIDE_GLIBC") {
        return Some(v);
    }
    // SAFETY: gnu_get_libc_version returns a static NUL-terminated string.
    let v = unsafe { CStr::from_ptr(libc::gnu_get_libc_version()) };
    Some(v.to_string_lossy().into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_declared_virtual_packages() {
        let d = virtual_packages(&SystemRequirements::default());
        assert!(d.contains(&("__linux".into(), "4.18".into())));
        assert!(d.contains(&("__glibc".into(), "2.28".into())));
        assert!(!d.iter().any(|(n, _)| n == "__cuda"));
        let r = SystemRequirements {
            cuda: Some("12".into()),
            libc: Some(Libc {
                family: "glibc".into(),
                version: "2.17".into(),
            }),
            ..Default::default()
        };
        let v = virtual_packages(&r);
        assert!(v.contains(&("__cuda".into(), "12".into())));
        assert!(v.contains(&("__glibc".into(), "2.17".into())));
        assert_eq!(generic(&r).unwrap().len(), v.len());
    }

    #[test]
    fn host_check_names_what_is_missing() {
        assert!(host_glibc().is_some() && host_linux().is_some());
        let ok = SystemRequirements {
            linux: Some("2.6".into()),
            libc: Some(Libc {
                family: "glibc".into(),
                version: "2.5".into(),
            }),
            ..Default::default()
        };
        ok.check_host(None).unwrap();
        let cuda = SystemRequirements {
            cuda: Some("12".into()),
            ..Default::default()
        };
        // No driver known (and no override in this test's environment unless set).
        if std::env::var_os("CONDA_OVERRIDE_CUDA").is_none() {
            let e = cuda.check_host(None).unwrap_err().to_string();
            assert!(
                e.contains("CUDA driver of version 12, and this machine has none"),
                "{e}"
            );
        }
        cuda.check_host(Some("12.4")).unwrap();
        assert!(cuda.check_host(Some("11.8")).is_err());
        let future = SystemRequirements {
            libc: Some(Libc {
                family: "glibc".into(),
                version: "99.0".into(),
            }),
            ..Default::default()
        };
        let e = future.check_host(None).unwrap_err().to_string();
        assert!(e.contains("glibc 99.0"), "{e}");
    }
}
