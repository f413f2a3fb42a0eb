//! Tiny conda channels made at test time (feature `test-channel`): packages written as
//! `.tar.bz2` archives and indexed with `rattler_index`, as a real channel is. conda-forge is
//! not reachable from the machines tests run on, so every test that installs conda packages
//! installs them from one of these.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use rattler_conda_types::compression_level::CompressionLevel;
use rattler_index::{IndexFsConfig, index_fs};
use serde_json::json;

/// A package to put in a test channel.
#[derive(Debug, Clone)]
pub struct TestPackage {
    pub name: String,
    pub version: String,
    pub build: String,
    /// `linux-64` or `noarch`.
    pub subdir: String,
    pub depends: Vec<String>,
    /// Regular files: path in the prefix, content.
    pub files: Vec<(String, Vec<u8>)>,
    /// Symbolic links: path in the prefix, target.
    pub links: Vec<(String, String)>,
}

impl TestPackage {
    pub fn new(name: &str, version: &str, subdir: &str) -> TestPackage {
        TestPackage {
            name: name.into(),
            version: version.into(),
            build: "0".into(),
            subdir: subdir.into(),
            depends: Vec::new(),
            files: Vec::new(),
            links: Vec::new(),
        }
    }

    pub fn depends(mut self, spec: &str) -> TestPackage {
        self.depends.push(spec.into());
        self
    }

    pub fn file(mut self, path: &str, content: &str) -> TestPackage {
        self.files.push((path.into(), content.as_bytes().to_vec()));
        self
    }

    pub fn link(mut self, path: &str, target: &str) -> TestPackage {
        self.links.push((path.into(), target.into()));
        self
    }

    /// A `python` package that stands for a CPython build: the prefix becomes a venv of the
    /// interpreter `base` (its `bin/python` links there, `pyvenv.cfg` names its folder), so
    /// that `uv` and a worker run it as the env's Python. A real CPython conda package cannot
    /// be downloaded here; everything else about the env (solve, link, uv into the prefix) is
    /// what a real one gets.
    pub fn python_standing_for(base: &Path, version: &str) -> TestPackage {
        let minor: Vec<&str> = version.split('.').take(2).collect();
        let minor = minor.join(".");
        let home = base
            .parent()
            .unwrap_or(Path::new("/"))
            .display()
            .to_string();
        let target = base.display().to_string();
        TestPackage::new("python", version, "linux-64")
            .link("bin/python", &target)
            .link("bin/python3", &target)
            .link(&format!("bin/python{minor}"), &target)
            .file(
                "pyvenv.cfg",
                &format!(
                    "home = {home}\ninclude-system-site-packages = false\nversion = {version}\n"
                ),
            )
            .file(
                &format!("lib/python{minor}/site-packages/_test_channel_python.pth"),
                "",
            )
    }

    fn file_name(&self) -> String {
        format!("{}-{}-{}.tar.bz2", self.name, self.version, self.build)
    }
}

/// Writes `packages` into the channel folder `channel` and indexes it (noarch always exists).
pub fn make_channel(channel: &Path, packages: &[TestPackage]) -> io::Result<()> {
    fs::create_dir_all(channel.join("noarch"))?;
    let work = tempfile_dir(channel)?;
    for p in packages {
        let sub = channel.join(&p.subdir);
        fs::create_dir_all(&sub)?;
        write_package(p, &work.join(p.file_name()), &sub.join(p.file_name()))?;
    }
    let _ = fs::remove_dir_all(&work);
    let config = IndexFsConfig {
        channel: channel.to_path_buf(),
        target_platform: None,
        repodata_patch: None,
        write_zst: false,
        write_shards: false,
        repodata_revisions: Vec::new(),
        package_revision_assignment: Default::default(),
        force: true,
        max_parallel: 2,
        multi_progress: None,
    };
    crate::block_on(index_fs(config))
        .map_err(io::Error::other)?
        .map_err(io::Error::other)
}

fn tempfile_dir(channel: &Path) -> io::Result<PathBuf> {
    let d = channel.join(".work");
    fs::create_dir_all(&d)?;
    Ok(d)
}

fn write_package(p: &TestPackage, root: &Path, out: &Path) -> io::Result<()> {
    let _ = fs::remove_dir_all(root);
    fs::create_dir_all(root.join("info"))?;
    let mut entries = Vec::new();
    let mut rels = Vec::new();
    for (path, content) in &p.files {
        let f = root.join(path);
        fs::create_dir_all(f.parent().unwrap_or(root))?;
        fs::write(&f, content)?;
        entries.push(json!({
            "_path": path,
            "path_type": "hardlink",
            "sha256": sha256(content),
            "size_in_bytes": content.len(),
        }));
        rels.push(PathBuf::from(path));
    }
    for (path, target) in &p.links {
        let f = root.join(path);
        fs::create_dir_all(f.parent().unwrap_or(root))?;
        std::os::unix::fs::symlink(target, &f)?;
        entries.push(json!({"_path": path, "path_type": "softlink"}));
        rels.push(PathBuf::from(path));
    }
    let mut index = json!({
        "name": p.name,
        "version": p.version,
        "build": p.build,
        "build_number": 0,
        "depends": p.depends,
        "license": "MIT",
        "subdir": p.subdir,
        "timestamp": 1_700_000_000_000u64,
    });
    if p.subdir == "noarch" {
        index["noarch"] = json!("generic");
    } else {
        index["arch"] = json!("x86_64");
        index["platform"] = json!("linux");
    }
    let info = [
        ("info/index.json", index.to_string()),
        (
            "info/paths.json",
            json!({"paths": entries, "paths_version": 1}).to_string(),
        ),
        (
            "info/files",
            rels.iter()
                .map(|r| format!("{}\n", r.display()))
                .collect::<String>(),
        ),
    ];
    for (path, text) in info {
        fs::write(root.join(path), text)?;
        rels.push(PathBuf::from(path));
    }
    let file = fs::File::create(out)?;
    let paths: Vec<PathBuf> = rels.iter().map(|r| root.join(r)).collect();
    rattler_package_streaming::write::write_tar_bz2_package(
        file,
        root,
        &paths,
        CompressionLevel::Lowest,
        None,
        None,
    )
}

fn sha256(data: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    Sha256::digest(data)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}
