//! The Landlock ruleset: which rights are handled (denied unless a rule grants them) and the
//! rules that grant them beneath each allowed path.
//!
//! Handled rights are pinned to ABI 5 (the last that added filesystem rights before ABI 9's
//! UNIX-socket right), so a newer kernel never starts denying something this code was not
//! tested with. On older kernels the crate drops what they lack (best effort) and the report
//! says the ruleset is only partly enforced; network rules, when asked for, are a hard
//! requirement.

use std::path::Path;

use landlock::{
    ABI, Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, PathBeneath, PathFd,
    Ruleset, RulesetAttr, RulesetCreated, RulesetCreatedAttr, RulesetStatus, Scope,
};

use crate::error::SandboxError;
use crate::{Report, Rules};

const FS_ABI: ABI = ABI::V5;

fn read_rights() -> BitFlags<AccessFs> {
    AccessFs::from_read(FS_ABI)
}

/// Everything but execution, device nodes and device ioctls.
fn write_rights() -> BitFlags<AccessFs> {
    AccessFs::from_all(FS_ABI)
        & !(AccessFs::Execute | AccessFs::MakeChar | AccessFs::MakeBlock | AccessFs::IoctlDev)
}

fn device_rights() -> BitFlags<AccessFs> {
    AccessFs::ReadFile
        | AccessFs::ReadDir
        | AccessFs::WriteFile
        | AccessFs::Truncate
        | AccessFs::IoctlDev
}

pub(crate) fn restrict(rules: &Rules, abi: u32) -> Result<Report, SandboxError> {
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(AccessFs::from_all(FS_ABI))?
        .scope(Scope::from_all(ABI::V6))?;
    if !rules.network {
        ruleset = ruleset
            .set_compatibility(CompatLevel::HardRequirement)
            .handle_access(AccessNet::from_all(ABI::V4))?;
    }
    let mut created = ruleset.create()?;
    let mut skipped = Vec::new();
    let groups = [
        (&rules.read, read_rights()),
        (&rules.list, AccessFs::ReadDir.into()),
        (&rules.write, write_rights()),
        (&rules.devices, device_rights()),
    ];
    for (paths, rights) in groups {
        for path in paths {
            created = match allow(created, path, rights)? {
                (c, true) => c,
                (c, false) => {
                    skipped.push(path.clone());
                    c
                }
            };
        }
    }
    let status = created.restrict_self()?;
    let fully_enforced = match status.ruleset {
        RulesetStatus::FullyEnforced => true,
        RulesetStatus::PartiallyEnforced => false,
        RulesetStatus::NotEnforced => return Err(SandboxError::NotEnforced),
    };
    Ok(Report {
        abi,
        fully_enforced,
        network_blocked: false,
        scoped: abi >= 6,
        skipped,
    })
}

/// Grants `rights` beneath `path`; a path that does not exist is skipped (`false`). Rights that
/// only make sense for directories are dropped for a file.
fn allow(
    created: RulesetCreated,
    path: &Path,
    rights: BitFlags<AccessFs>,
) -> Result<(RulesetCreated, bool), SandboxError> {
    let fd = match PathFd::new(path) {
        Ok(fd) => fd,
        Err(_) if !path.exists() => return Ok((created, false)),
        Err(e) => {
            return Err(SandboxError::Path {
                path: path.to_path_buf(),
                source: std::io::Error::other(e),
            });
        }
    };
    let rights = if path.is_dir() {
        rights
    } else {
        rights & AccessFs::from_file(FS_ABI)
    };
    Ok((created.add_rule(PathBeneath::new(fd, rights))?, true))
}
