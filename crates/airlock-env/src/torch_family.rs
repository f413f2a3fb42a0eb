//! The host's torch family as the default of every env: `torch`, `torchvision` and
//! `torchaudio` pinned to the versions the host has, as uv constraints, unless the pack
//! constrains one itself.
//!
//! comfy-env forces the host's torch into every env because its tensors cross through torch's
//! private sharing ABI. Ours cross as raw buffers, so another torch stays allowed; but a pack
//! that pins nothing gets the host's, and all such envs then hard-link one copy from uv's
//! cache instead of resolving a new torch each. A constraint installs nothing by itself: an env
//! that never pulls torch in does not get it. A host torch with a local version (`+cu121`,
//! `+cpu`) came from PyTorch's index, which is then added so the pin can be met.

use crate::host_pins::{HostPackages, constrains_version};
use crate::requirement::name_of;

/// The projects of the family.
pub const TORCH_FAMILY: [&str; 3] = ["torch", "torchvision", "torchaudio"];

/// The constraints and the extra index an env on Python `version` gets.
pub fn constraints(
    host: &HostPackages,
    env_python: &str,
    pack_requirements: &[String],
) -> (Vec<String>, Option<String>) {
    let installed = host.for_python(env_python);
    let pinned_by_pack: Vec<String> = pack_requirements
        .iter()
        .filter(|r| constrains_version(r))
        .filter_map(|r| name_of(r))
        .collect();
    let mut out = Vec::new();
    let mut index = None;
    for name in TORCH_FAMILY {
        let Some(version) = installed.get(name) else {
            continue;
        };
        if pinned_by_pack.iter().any(|p| p == name) {
            continue;
        }
        if let Some((_, local)) = version.split_once('+')
            && (local.starts_with("cu") || local == "cpu" || local.starts_with("rocm"))
        {
            index = Some(format!("https://download.pytorch.org/whl/{local}"));
        }
        out.push(format!("{name}=={version}"));
    }
    (out, index)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(torch: &str) -> HostPackages {
        HostPackages {
            python: "3.11".into(),
            installed: [
                ("torch", torch),
                ("torchvision", "0.29.2"),
                ("numpy", "2.1"),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
            torch_cuda: None,
        }
    }

    #[test]
    fn the_host_family_unless_the_pack_pins_it() {
        let (c, index) = constraints(&host("2.15.0"), "3.11.7", &[]);
        assert_eq!(c, ["torch==2.15.0", "torchvision==0.29.2"]);
        assert_eq!(index, None);
        let (c, _) = constraints(
            &host("2.15.0"),
            "3.11",
            &["torch>=2.4".into(), "torchvision".into()],
        );
        assert_eq!(c, ["torchvision==0.29.2"], "a bare name pins nothing");
        let (c, _) = constraints(&host("2.15.0"), "3.10.4", &[]);
        assert!(
            c.is_empty(),
            "another Python: the host's versions may not exist there"
        );
        let (_, index) = constraints(&host("2.5.1+cu121"), "3.11", &[]);
        assert_eq!(
            index.as_deref(),
            Some("https://download.pytorch.org/whl/cu121")
        );
    }
}
