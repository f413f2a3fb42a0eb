//! A pack's config: `airlock.toml` at its root, or the `comfy-env.toml` a pack written for
//! comfy-env already has (see `comfy_env_toml`).
//!
//! ```toml
//! name = "my-pack"                       # optional; default: the folder's name
//! python = "3.10"                        # optional; default: the host's interpreter
//! dependencies = ["numpy<2", "torch==2.4.1"]  # absent: the pack's requirements.txt
//! index-url = "https://pypi.org/simple"  # optional
//! extra-index-urls = ["https://download.pytorch.org/whl/cu121"]
//! find-links = ["wheels"]                # folders (relative to the pack) or URLs
//! entry = "nodes"                        # optional; module defining NODE_CLASS_MAPPINGS
//! comfy = true                           # optional; add ComfyUI's requirements (default: detect)
//! call-deadline = 600                     # optional; seconds one call may run (see `worker_policy`)
//! pickle = ["datetime.datetime"]          # optional; types that may cross with pickle
//! prestart = true                         # optional; start its worker with ComfyUI
//! comfy-nodes = false                     # optional; ComfyUI's own nodes not imported first
//! packs = ["Pack-A", "Pack-B"]            # optional; a group: these subfolders, one worker
//!
//! [env_vars]
//! KMP_DUPLICATE_LIB_OK = "TRUE"
//!
//! [sandbox]                               # optional; see `worker_policy`
//! enabled = true
//! network = false
//! ```
//!
//! Unknown keys are errors rather than warnings: a misspelt `dependecies` silently ignored
//! would build an env without the pack's packages, and the user would only learn of it when a
//! node fails to import.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::comfy_env_pixi::CondaConfig;
use crate::comfy_env_toml;
use crate::error::ConfigError;
use crate::group;
use crate::requirement;
use crate::requirements_txt;
use crate::toml_doc::{Doc, Value, sorted};
use crate::worker_policy::{self, WorkerPolicy};

/// The file name of our own config.
pub const AIRLOCK_TOML: &str = "airlock.toml";
/// The file name of comfy-env's config, read as well.
pub const COMFY_ENV_TOML: &str = "comfy-env.toml";

/// Which kind of file a config came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum ConfigFormat {
    #[serde(rename = "airlock.toml")]
    Airlock,
    #[serde(rename = "comfy-env.toml")]
    ComfyEnv,
}

impl ConfigFormat {
    pub fn file_name(self) -> &'static str {
        match self {
            ConfigFormat::Airlock => AIRLOCK_TOML,
            ConfigFormat::ComfyEnv => COMFY_ENV_TOML,
        }
    }
}

/// What a pack declares about its environment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PackConfig {
    /// The pack's name: `name` from the config, else its folder's name.
    pub name: String,
    /// The pack's folder.
    pub dir: PathBuf,
    /// The file this was read from.
    pub file: PathBuf,
    pub format: ConfigFormat,
    /// A Python version request ("3.10", "3.11.9", ">=3.10,<3.13") or an interpreter path.
    /// `None`: the host's interpreter.
    pub python: Option<String>,
    /// PEP 508 requirement strings, as written.
    pub dependencies: Vec<String>,
    /// Where `dependencies` came from when not from the config: the pack's `requirements.txt`,
    /// read when `airlock.toml` has no `dependencies` key (see `requirements_txt`).
    pub requirements_file: Option<PathBuf>,
    pub index_url: Option<String>,
    pub extra_index_urls: Vec<String>,
    /// URLs, or absolute paths (relative ones are resolved against the pack's folder).
    pub find_links: Vec<String>,
    pub env_vars: BTreeMap<String, String>,
    /// The module inside the pack that defines its nodes; `None`: the pack package itself.
    pub entry: Option<String>,
    /// A group's packs (`packs`): subfolders imported in this order into one worker, sharing
    /// this environment (`group`). Empty: the folder is one pack.
    pub members: Vec<String>,
    /// Force (`true`) or disable (`false`) ComfyUI's requirements; `None`: detect.
    pub comfy: Option<bool>,
    /// What the worker may do: `call-deadline`, `[sandbox]`, `pickle` (airlock.toml only).
    pub policy: WorkerPolicy,
    /// Conda packages (comfy-env.toml's `[dependencies]` and friends): the env is then a conda
    /// prefix, its Python from conda too.
    pub conda: Option<CondaConfig>,
    /// comfy-env.toml's `[cuda] packages`: prebuilt wheels matched to the host's torch, CUDA
    /// and Python (`cuda_wheels`).
    pub cuda_packages: Vec<String>,
    /// What the config says that is not acted on, one line each (build log, `airlock doctor`).
    pub notices: Vec<String>,
}

impl PackConfig {
    /// Reads the config of the pack in `dir`. `airlock.toml` wins over `comfy-env.toml`.
    pub fn load(dir: &Path) -> Result<PackConfig, ConfigError> {
        let folder = folder_name(dir);
        let Some((file, format)) = config_file(dir) else {
            // comfy-env's `nodes/<sub>/comfy-env.toml` layout: its first env (discovery and
            // `register_nodes()` read each one with `load_comfy_env`).
            if let Some(first) = comfy_env_configs(dir).first() {
                return PackConfig::load_comfy_env(dir, first);
            }
            return Err(ConfigError::NoConfig {
                pack: folder,
                dir: dir.to_path_buf(),
            });
        };
        let text = fs::read_to_string(&file).map_err(|source| ConfigError::Read {
            pack: folder.clone(),
            file: file.clone(),
            source,
        })?;
        let doc = Doc::new(&folder, &file, &text);
        let mut config = PackConfig::empty(dir, &file, format);
        match format {
            ConfigFormat::Airlock => parse_airlock(&doc, &mut config)?,
            ConfigFormat::ComfyEnv => comfy_env_toml::parse(&doc, &mut config)?,
        }
        Ok(config)
    }

    pub(crate) fn empty(dir: &Path, file: &Path, format: ConfigFormat) -> PackConfig {
        PackConfig {
            name: folder_name(dir),
            dir: dir.to_path_buf(),
            file: file.to_path_buf(),
            format,
            python: None,
            dependencies: Vec::new(),
            requirements_file: None,
            index_url: None,
            extra_index_urls: Vec::new(),
            find_links: Vec::new(),
            env_vars: BTreeMap::new(),
            entry: None,
            members: Vec::new(),
            comfy: None,
            policy: WorkerPolicy::default(),
            conda: None,
            cuda_packages: Vec::new(),
            notices: Vec::new(),
        }
    }

    /// Reads the comfy-env config `file` of the pack in `dir`: one of the files
    /// [`comfy_env_configs`] lists, each its own env. One in `nodes/<sub>/` is named
    /// `<pack>/<sub>`.
    pub fn load_comfy_env(dir: &Path, file: &Path) -> Result<PackConfig, ConfigError> {
        let folder = folder_name(dir);
        let text = fs::read_to_string(file).map_err(|source| ConfigError::Read {
            pack: folder.clone(),
            file: file.to_path_buf(),
            source,
        })?;
        let mut config = PackConfig::empty(dir, file, ConfigFormat::ComfyEnv);
        let sub = file
            .parent()
            .filter(|p| p.parent() == Some(dir.join("nodes").as_path()))
            .and_then(|p| p.file_name())
            .map(|n| n.to_string_lossy().into_owned());
        let name = match &sub {
            Some(sub) => format!("{folder}/{sub}"),
            None => folder,
        };
        config.name = name.clone();
        comfy_env_toml::parse(&Doc::new(&name, file, &text), &mut config)?;
        if sub.is_some() && config.name != name {
            // A `name` key names the env inside the pack.
            config.name = format!("{}/{}", folder_name(dir), config.name);
        }
        Ok(config)
    }
}

/// The `comfy-env.toml` files of a pack as comfy-env binds them, each one env: `nodes/` itself
/// when it has one, else each `nodes/<sub>/` (a package, not hidden) that has one.
pub fn comfy_env_configs(dir: &Path) -> Vec<PathBuf> {
    let nodes = dir.join("nodes");
    let root = nodes.join(COMFY_ENV_TOML);
    if root.is_file() {
        return vec![root];
    }
    let Ok(entries) = fs::read_dir(&nodes) else {
        return Vec::new();
    };
    let mut subs: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            let name = p.file_name().map(|n| n.to_string_lossy().into_owned());
            p.is_dir()
                && name.is_some_and(|n| !n.starts_with(['.', '_']))
                && p.join("__init__.py").is_file()
                && p.join(COMFY_ENV_TOML).is_file()
        })
        .map(|p| p.join(COMFY_ENV_TOML))
        .collect();
    subs.sort();
    subs
}

/// The config file of the pack in `dir`, if it has one.
pub fn config_file(dir: &Path) -> Option<(PathBuf, ConfigFormat)> {
    let candidates = [
        (dir.join(AIRLOCK_TOML), ConfigFormat::Airlock),
        (dir.join(COMFY_ENV_TOML), ConfigFormat::ComfyEnv),
        (
            dir.join("nodes").join(COMFY_ENV_TOML),
            ConfigFormat::ComfyEnv,
        ),
    ];
    candidates.into_iter().find(|(p, _)| p.is_file())
}

/// The last component of a pack's folder, which names the pack until its config is read.
pub fn folder_name(dir: &Path) -> String {
    dir.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| dir.display().to_string())
}

fn parse_airlock(doc: &Doc<'_>, c: &mut PackConfig) -> Result<(), ConfigError> {
    let table = doc.parse()?;
    let has_dependencies = table.keys().any(|k| k.get_ref().as_ref() == "dependencies");
    let is_group = table.keys().any(|k| k.get_ref().as_ref() == "packs");
    if !has_dependencies
        && !is_group
        && let Some((file, reqs)) = requirements_txt::read(&folder_name(&c.dir), &c.dir)?
    {
        c.dependencies = reqs;
        c.requirements_file = Some(file);
    }
    for (key, v) in sorted(&table) {
        let k = key.get_ref().as_ref();
        match k {
            "name" => c.name = pack_name(doc, k, v)?,
            "python" => c.python = Some(doc.nonempty(k, v)?),
            "dependencies" => c.dependencies = requirements(doc, k, v)?,
            "index-url" => c.index_url = Some(doc.nonempty(k, v)?),
            "extra-index-urls" => c.extra_index_urls = doc.string_array(k, v)?,
            "find-links" => {
                c.find_links = doc
                    .string_array(k, v)?
                    .into_iter()
                    .map(|l| find_link(&c.dir, &l))
                    .collect()
            }
            "env_vars" => c.env_vars = doc.env_vars(k, v)?,
            "entry" => {
                let e = entry(doc, k, v)?;
                if !c.members.is_empty() {
                    return Err(doc.invalid(k, v, &e, group::NO_ENTRY));
                }
                c.entry = Some(e);
            }
            "comfy" => c.comfy = Some(doc.bool(k, v)?),
            "call-deadline" => {
                c.policy.call_deadline = Some(worker_policy::call_deadline(doc, k, v)?)
            }
            "sandbox" => c.policy.sandbox = worker_policy::sandbox(doc, k, v, &c.dir)?,
            "pickle" => c.policy.pickle = worker_policy::pickle(doc, k, v)?,
            "prestart" => c.policy.prestart = doc.bool(k, v)?,
            "comfy-nodes" => c.policy.comfy_nodes = doc.bool(k, v)?,
            "packs" => {
                if let Some(e) = &c.entry {
                    return Err(doc.invalid(k, v, e, group::NO_ENTRY));
                }
                c.members = group::members(doc, k, v, &c.dir)?;
            }
            _ => return Err(doc.unknown_key(key, None)),
        }
    }
    if is_group && !has_dependencies {
        c.dependencies = group::requirements(&c.name, &c.dir, &c.members)?;
    }
    Ok(())
}

/// A pack name: it appears in file names and messages, so no path separators.
pub(crate) fn pack_name(doc: &Doc<'_>, key: &str, v: &Value<'_>) -> Result<String, ConfigError> {
    let name = doc.nonempty(key, v)?;
    if name.contains(['/', '\\', '\0']) || name.len() > 100 {
        return Err(doc.invalid(key, v, &name, "must be a short name without slashes"));
    }
    Ok(name)
}

/// A list of requirement strings, each one line that uv reads as a requirement.
pub(crate) fn requirements(
    doc: &Doc<'_>,
    key: &str,
    v: &Value<'_>,
) -> Result<Vec<String>, ConfigError> {
    doc.array(key, v, |item| {
        let r = doc.string(key, item)?;
        requirement::check(&r).map_err(|bad| doc.invalid(key, item, &r, bad.why()))?;
        Ok(r.trim().to_string())
    })
}

/// A dotted module name relative to the pack.
fn entry(doc: &Doc<'_>, key: &str, v: &Value<'_>) -> Result<String, ConfigError> {
    let e = doc.nonempty(key, v)?;
    let ok = e.split('.').all(|part| {
        let mut chars = part.chars();
        chars.next().is_some_and(|c| c.is_alphabetic() || c == '_')
            && chars.all(|c| c.is_alphanumeric() || c == '_')
    });
    if !ok {
        return Err(doc.invalid(key, v, &e, "must be a dotted module name such as `nodes`"));
    }
    Ok(e)
}

/// A find-links entry: URLs as they are, paths made absolute against the pack's folder.
pub(crate) fn find_link(pack_dir: &Path, link: &str) -> String {
    if link.contains("://") {
        link.to_string()
    } else {
        pack_dir.join(link).display().to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pack(files: &[(&str, &str)]) -> tempfile::TempDir {
        let d = tempfile::Builder::new().prefix("pack").tempdir().unwrap();
        for (name, text) in files {
            let p = d.path().join(name);
            fs::create_dir_all(p.parent().unwrap()).unwrap();
            fs::write(p, text).unwrap();
        }
        d
    }

    #[test]
    fn requirements_txt_when_no_dependencies_key() {
        let reqs = ("requirements.txt", "torch\nopencv-python>=4 # cv2\n");
        let d = pack(&[("airlock.toml", "python = \"3.11\"\n"), reqs]);
        let c = PackConfig::load(d.path()).unwrap();
        assert_eq!(c.dependencies, ["torch", "opencv-python>=4"]);
        assert_eq!(c.requirements_file, Some(d.path().join("requirements.txt")));

        // A `dependencies` key wins, even an empty one (the author says: none).
        for toml in ["dependencies = []\n", "dependencies = [\"six\"]\n"] {
            let d = pack(&[("airlock.toml", toml), reqs]);
            let c = PackConfig::load(d.path()).unwrap();
            assert!(c.requirements_file.is_none());
            assert!(!c.dependencies.iter().any(|r| r == "torch"), "{toml}");
        }
        // A line it cannot take is the pack's config error, naming the file and line.
        let d = pack(&[
            ("airlock.toml", ""),
            ("requirements.txt", "six\n-r more.txt\n"),
        ]);
        let msg = PackConfig::load(d.path()).unwrap_err().to_string();
        assert!(msg.contains("requirements.txt:2: `-r more.txt`"), "{msg}");
        // No requirements.txt: no dependencies.
        let d = pack(&[("airlock.toml", "")]);
        assert!(PackConfig::load(d.path()).unwrap().dependencies.is_empty());
    }

    #[test]
    fn full_airlock_toml() {
        let d = pack(&[(
            "airlock.toml",
            r#"
name = "depth"
python = "3.10"
dependencies = ["numpy<2", "Torch == 2.4.1"]
index-url = "https://example.org/simple"
extra-index-urls = ["https://download.pytorch.org/whl/cu121"]
find-links = ["wheels", "https://example.org/w/"]
entry = "src.nodes"
comfy = false

[env_vars]
KMP_DUPLICATE_LIB_OK = "TRUE"
"#,
        )]);
        let c = PackConfig::load(d.path()).unwrap();
        assert_eq!(c.name, "depth");
        assert_eq!(c.format, ConfigFormat::Airlock);
        assert_eq!(c.python.as_deref(), Some("3.10"));
        assert_eq!(c.dependencies, ["numpy<2", "Torch == 2.4.1"]);
        assert_eq!(c.index_url.as_deref(), Some("https://example.org/simple"));
        assert_eq!(c.extra_index_urls.len(), 1);
        assert_eq!(
            c.find_links[0],
            d.path().join("wheels").display().to_string()
        );
        assert_eq!(c.find_links[1], "https://example.org/w/");
        assert_eq!(c.entry.as_deref(), Some("src.nodes"));
        assert_eq!(c.comfy, Some(false));
        assert_eq!(c.env_vars["KMP_DUPLICATE_LIB_OK"], "TRUE");
    }

    #[test]
    fn empty_file_is_a_valid_config() {
        let d = pack(&[("airlock.toml", "")]);
        let c = PackConfig::load(d.path()).unwrap();
        assert_eq!(c.name, folder_name(d.path()));
        assert!(c.dependencies.is_empty() && c.python.is_none() && c.comfy.is_none());
    }

    #[test]
    fn unknown_key_names_pack_file_key_and_line() {
        let d = pack(&[(
            "airlock.toml",
            "python = \"3.10\"\n\ndependecies = [\"six\"]\n",
        )]);
        let e = PackConfig::load(d.path()).unwrap_err();
        match &e {
            ConfigError::UnknownKey { key, line, .. } => {
                assert_eq!(key, "dependecies");
                assert_eq!(*line, 3);
            }
            other => panic!("{other:?}"),
        }
        let msg = e.to_string();
        let folder = folder_name(d.path());
        assert!(msg.starts_with(&format!("{folder}: ")), "{msg}");
        assert!(
            msg.contains("airlock.toml:3: unknown key `dependecies`"),
            "{msg}"
        );
    }

    #[test]
    fn wrong_types_and_bad_values_have_lines() {
        let cases = [
            ("python = 3.10\n", 1, "`python` must be a string, not float"),
            (
                "dependencies = \"six\"\n",
                1,
                "`dependencies` must be an array",
            ),
            (
                "dependencies = [\n  \"six\",\n  \"--index-url x\",\n]\n",
                3,
                "options are not allowed",
            ),
            ("comfy = \"yes\"\n", 1, "`comfy` must be true or false"),
            ("prestart = 1\n", 1, "`prestart` must be true or false"),
            (
                "comfy-nodes = \"no\"\n",
                1,
                "`comfy-nodes` must be true or false",
            ),
            ("entry = \"my-nodes\"\n", 1, "dotted module name"),
            ("name = \"a/b\"\n", 1, "without slashes"),
            (
                "\n[env_vars]\nA = 1\n",
                3,
                "`env_vars.A` must be a string, not integer",
            ),
            ("python = \"3.10\"\npython = \"3.11\"\n", 2, "duplicate key"),
        ];
        for (text, line, needle) in cases {
            let d = pack(&[("airlock.toml", text)]);
            let msg = PackConfig::load(d.path()).unwrap_err().to_string();
            assert!(
                msg.contains(&format!("airlock.toml:{line}: ")),
                "{text:?}: {msg}"
            );
            assert!(msg.contains(needle), "{text:?}: {msg}");
        }
    }

    #[test]
    fn airlock_toml_wins_over_comfy_env_toml() {
        let d = pack(&[
            ("airlock.toml", "dependencies = [\"six\"]\n"),
            ("comfy-env.toml", "[dependencies]\nnumpy = \"*\"\n"),
        ]);
        let c = PackConfig::load(d.path()).unwrap();
        assert_eq!(c.format, ConfigFormat::Airlock);
        assert_eq!(c.dependencies, ["six"]);
    }

    #[test]
    fn no_config() {
        let d = pack(&[("__init__.py", "")]);
        let e = PackConfig::load(d.path()).unwrap_err();
        assert!(matches!(e, ConfigError::NoConfig { .. }), "{e}");
    }
}
