//! Installing a [`CondaLock`] into a prefix: packages fetched once into `<cache>/pkgs` (shared
//! by every env) and hard-linked from there, as conda and pixi do. Packages' post-link scripts
//! are not run (pixi's default as well).

use std::path::Path;
use std::str::FromStr;

use rattler::install::Installer;
use rattler_cache::package_cache::PackageCache;
use rattler_conda_types::Subdir;

use crate::error::{CondaError, chain};
use crate::lock::CondaLock;
use crate::{Report, block_on, client};

/// Installs every package of `lock` into `prefix` (created if missing). Returns how many.
pub fn install(
    lock: &CondaLock,
    prefix: &Path,
    cache_dir: &Path,
    report: &dyn Report,
) -> Result<usize, CondaError> {
    let err = |cause: String| CondaError::Install {
        prefix: prefix.to_path_buf(),
        cause,
    };
    let subdir = Subdir::from_str(&lock.platform).map_err(|e| err(e.to_string()))?;
    report.line(&format!(
        "installing {} conda packages into {}",
        lock.len(),
        prefix.display()
    ));
    let installer = Installer::new()
        .with_download_client(client::client())
        .with_package_cache(PackageCache::new(cache_dir.join("pkgs")))
        .with_target_platform(subdir)
        .with_execute_link_scripts(false);
    block_on(installer.install(prefix, lock.packages.clone()))?.map_err(|e| err(chain(&e)))?;
    Ok(lock.len())
}
