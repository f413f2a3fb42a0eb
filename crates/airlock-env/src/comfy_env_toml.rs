//! Reading the `comfy-env.toml` of a pack written for comfy-env, so such packs run without
//! their author adding an `airlock.toml`.
//!
//! comfy-env owns `python`, `[cuda]`, `[env_vars]` and `[options]` and passes the rest to pixi
//! (`comfy_env_pixi`). We read all of it: PyPI requirements go to uv, conda packages to rattler
//! (`airlock-conda`), `[cuda] packages` to the wheel lookup (`cuda_wheels`). What neither
//! comfy-env nor pixi would act on here is a notice; what comfy-env itself refuses
//! (`[feature.*]`, `[environments]`, root-only sections) stays an error.

use std::path::Path;

use toml::de::DeValue;

use crate::comfy_env_pixi::{self as pixi, CondaConfig, Parts};
use crate::config::{PackConfig, find_link, pack_name};
use crate::error::ConfigError;
use crate::requirement;
use crate::toml_doc::{Doc, Table, Value, sorted};

pub(crate) fn parse(doc: &Doc<'_>, c: &mut PackConfig) -> Result<(), ConfigError> {
    let table = doc.parse()?;
    // comfy-env's layouts keep the nodes next to the file: `nodes/` or `nodes/<sub>/`.
    if let Some(entry) = entry_of(&c.dir, &c.file) {
        c.entry = Some(entry);
    }
    let mut parts = Parts::default();
    let dir = c.dir.clone();
    let mut section = |name: &str, full: &str, v: &Value<'_>, parts: &mut Parts| {
        match name {
            "dependencies" => pixi::conda_dependencies(doc, full, v, parts)?,
            "pypi-dependencies" => pypi_dependencies(doc, &dir, full, v, parts)?,
            "activation" => pixi::activation(doc, full, v, parts)?,
            "host-dependencies" | "build-dependencies" | "tasks" => parts.notices.push(format!(
                "[{full}] is for building or tasks and is not installed"
            )),
            _ => return Ok(false),
        }
        Ok(true)
    };
    for (key, v) in sorted(&table) {
        let k = key.get_ref().as_ref();
        let unsupported = |hint: &'static str| ConfigError::Unsupported {
            pack: doc.pack.to_string(),
            file: doc.file.to_path_buf(),
            line: doc.line_of(key),
            section: k.to_string(),
            hint,
        };
        if section(k, k, v, &mut parts)? {
            continue;
        }
        match k {
            "name" => c.name = pack_name(doc, k, v)?,
            "python" => c.python = Some(doc.nonempty(k, v)?),
            "env_vars" => c.env_vars = pixi::scalar_env_vars(doc, k, v)?,
            // comfy-env's runtime options (a health-check timeout); ours are not per pack.
            "options" => {
                doc.table(k, v)?;
            }
            "cuda" => c.cuda_packages = pixi::cuda(doc, k, v, &mut parts)?,
            "target" => pixi::targets(doc, v, &mut parts, &mut section)?,
            "channels" => parts.channels.extend(doc.string_array(k, v)?),
            "workspace" | "project" => pixi::workspace(doc, k, v, &mut parts)?,
            "system-requirements" => pixi::system_requirements(doc, k, v, &mut parts)?,
            "pypi-options" => pixi::pypi_options(doc, k, v, &c.dir, &mut parts)?,
            "apt" | "brew" => pixi::system_packages(doc, k, v, &mut parts)?,
            "feature" | "environments" => {
                return Err(unsupported(
                    "comfy-env builds one environment per file and refuses it too",
                ));
            }
            "node_packs" | "node_reqs" | "types" | "serializers" => {
                return Err(unsupported(
                    "it belongs in comfy-env-root.toml at the pack's root (comfy-env refuses it \
                     here too)",
                ));
            }
            _ => return Err(doc.unknown_key(key, None)),
        }
    }
    finish(c, parts);
    Ok(())
}

/// The module a comfy-env config's nodes are in: `nodes` for `<pack>/nodes/comfy-env.toml`,
/// `nodes.<sub>` for `<pack>/nodes/<sub>/comfy-env.toml`, none for one at the pack's root.
fn entry_of(pack_dir: &Path, file: &Path) -> Option<String> {
    let rel = file.parent()?.strip_prefix(pack_dir).ok()?;
    let parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    (!parts.is_empty()).then(|| parts.join("."))
}

fn finish(c: &mut PackConfig, mut parts: Parts) {
    c.env_vars.extend(std::mem::take(&mut parts.activation));
    c.dependencies = parts.pypi.into_values().collect();
    c.extra_index_urls.append(&mut parts.extra_index_urls);
    if parts.index_url.is_some() {
        c.index_url = parts.index_url;
    }
    c.find_links.append(&mut parts.find_links);
    c.notices.append(&mut parts.notices);
    let conda_python = parts.conda.remove("python").map(|s| s.version);
    if parts.conda.is_empty() {
        // pixi puts the interpreter among the conda dependencies: alone, it is a version.
        if c.python.is_none() {
            c.python = conda_python;
        }
        if !parts.channels.is_empty() || parts.system != Default::default() {
            c.notices.push(
                "channels and [system-requirements] apply to conda packages, and this env \
                 has none"
                    .into(),
            );
        }
        return;
    }
    let mut seen = Vec::new();
    parts.channels.retain(|ch| {
        let new = !seen.contains(ch);
        seen.push(ch.clone());
        new
    });
    c.conda = Some(CondaConfig {
        channels: parts.channels,
        dependencies: parts.conda.into_values().collect(),
        system: parts.system,
        python: conda_python,
    });
}

/// `[pypi-dependencies]`: `name = "spec"` or `name = { version, extras, url, path, git,
/// index, ... }`. A package's own `index` joins the extra indexes (uv has no per-package
/// index in its pip interface).
fn pypi_dependencies(
    doc: &Doc<'_>,
    pack_dir: &Path,
    key: &str,
    v: &Value<'_>,
    parts: &mut Parts,
) -> Result<(), ConfigError> {
    for (name, full, spec) in doc.entries(key, v)? {
        let req = match spec.get_ref() {
            DeValue::String(s) => format!("{name}{}", version(s)),
            DeValue::Table(t) => from_table(doc, pack_dir, &full, name, t, parts)?,
            _ => return Err(doc.wrong_type(&full, spec, "a version string or a table")),
        };
        requirement::check(&req).map_err(|bad| doc.invalid(&full, spec, &req, bad.why()))?;
        parts.pypi.insert(requirement::normalize_name(name), req);
    }
    Ok(())
}

/// A pixi version: `*` is any, a bare version means `==`.
fn version(spec: &str) -> String {
    let s = spec.trim();
    if s.is_empty() || s == "*" {
        String::new()
    } else if s.starts_with(|c: char| c.is_ascii_digit()) {
        format!("=={s}")
    } else {
        s.to_string()
    }
}

fn from_table(
    doc: &Doc<'_>,
    pack_dir: &Path,
    key: &str,
    name: &str,
    t: &Table<'_>,
    parts: &mut Parts,
) -> Result<String, ConfigError> {
    let (mut ver, mut extras, mut url, mut git) = (String::new(), Vec::new(), None, None);
    let (mut rev, mut subdir) = (None, None);
    for (k, v) in sorted(t) {
        let field = format!("{key}.{}", k.get_ref());
        match k.get_ref().as_ref() {
            "version" => ver = version(&doc.string(&field, v)?),
            "extras" => extras = doc.string_array(&field, v)?,
            "url" => url = Some(doc.nonempty(&field, v)?),
            "path" => {
                url = Some(format!(
                    "file://{}",
                    find_link(pack_dir, &doc.nonempty(&field, v)?)
                ))
            }
            "git" => git = Some(doc.nonempty(&field, v)?),
            "rev" | "branch" | "tag" => rev = Some(doc.nonempty(&field, v)?),
            "subdirectory" => subdir = Some(doc.nonempty(&field, v)?),
            "index" => {
                let index = doc.nonempty(&field, v)?;
                if !parts.extra_index_urls.contains(&index) {
                    parts.extra_index_urls.push(index);
                }
            }
            "editable" => {}
            _ => return Err(doc.unknown_key(k, Some(key))),
        }
    }
    let extras = if extras.is_empty() {
        String::new()
    } else {
        format!("[{}]", extras.join(","))
    };
    if let Some(g) = git {
        let mut u = format!("git+{g}");
        if let Some(r) = rev {
            u = format!("{u}@{r}");
        }
        url = Some(u);
    }
    Ok(match url {
        Some(mut u) => {
            if let Some(s) = subdir {
                u = format!("{u}#subdirectory={s}");
            }
            format!("{name}{extras} @ {u}")
        }
        None => format!("{name}{extras}{ver}"),
    })
}

#[cfg(test)]
mod tests {
    use std::fs;

    use crate::config::{ConfigFormat, PackConfig, comfy_env_configs};
    use crate::error::ConfigError;

    fn load(path: &str, text: &str) -> (tempfile::TempDir, Result<PackConfig, ConfigError>) {
        let d = tempfile::Builder::new().prefix("cepack").tempdir().unwrap();
        let p = d.path().join(path);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, text).unwrap();
        let r = PackConfig::load(d.path());
        (d, r)
    }

    #[test]
    fn pypi_dependencies_python_and_env_vars() {
        let (d, r) = load(
            "nodes/comfy-env.toml",
            r#"
python = "3.11"

[pypi-dependencies]
trimesh = "*"
numpy = ">=1.26,<2"
pillow = "10.4.0"
opencv-python = { version = ">=4.9", extras = ["contrib"] }
mylib = { git = "https://example.org/mylib.git", rev = "v1" }
local = { path = "vendor/local" }
pyquadwild = { version = ">=0.1.0", index = "https://example.org/pyquadwild/simple/" }

[env_vars]
KMP_DUPLICATE_LIB_OK = "TRUE"
OMP_NUM_THREADS = 1

[options]
health_check_timeout = 10
"#,
        );
        let c = r.unwrap();
        assert_eq!(c.format, ConfigFormat::ComfyEnv);
        assert_eq!(c.python.as_deref(), Some("3.11"));
        assert_eq!(c.entry.as_deref(), Some("nodes"));
        assert!(c.conda.is_none());
        let want_local = format!("local @ file://{}", d.path().join("vendor/local").display());
        let mut deps = c.dependencies.clone();
        deps.sort();
        let mut want = vec![
            "trimesh".to_string(),
            "numpy>=1.26,<2".into(),
            "pillow==10.4.0".into(),
            "opencv-python[contrib]>=4.9".into(),
            "mylib @ git+https://example.org/mylib.git@v1".into(),
            "pyquadwild>=0.1.0".into(),
            want_local,
        ];
        want.sort();
        assert_eq!(deps, want);
        assert_eq!(
            c.extra_index_urls,
            ["https://example.org/pyquadwild/simple/"]
        );
        assert_eq!(c.env_vars["KMP_DUPLICATE_LIB_OK"], "TRUE");
        assert_eq!(c.env_vars["OMP_NUM_THREADS"], "1");
    }

    #[test]
    fn conda_packages_channels_targets_and_system_requirements() {
        let (_d, r) = load(
            "nodes/comfy-env.toml",
            r#"
[workspace]
channels = ["conda-forge", "pozzettiandrea"]

[dependencies]
cgal = "*"
scipy = ">=1.11,<1.17"
bpy = {version = "*", channel = "pozzettiandrea"}

[target.linux-64.dependencies]
mesalib = "*"
scipy = "1.14.*"

[target.win-64.dependencies]
vs2019_win-64 = "*"

[target.linux-64.pypi-dependencies]
embreex = "*"

[target.osx-arm64.pypi-dependencies]
mmgpy = "*"

[system-requirements]
cuda = "12"
libc = { family = "glibc", version = "2.28" }

[activation.env]
MESA_GL_VERSION_OVERRIDE = "4.5"

[cuda]
packages = ["cumesh", "torch"]

[apt]
packages = ["libgl1"]
"#,
        );
        let c = r.unwrap();
        let conda = c.conda.as_ref().expect("conda packages");
        assert_eq!(conda.channels, ["conda-forge", "pozzettiandrea"]);
        let specs: Vec<String> = conda
            .dependencies
            .iter()
            .map(|s| s.match_spec_text())
            .collect();
        assert_eq!(
            specs,
            [
                "pozzettiandrea::bpy *",
                "cgal *",
                "mesalib *",
                "scipy 1.14.*"
            ]
        );
        assert!(conda.python.is_none());
        assert_eq!(conda.system.cuda.as_deref(), Some("12"));
        assert_eq!(conda.system.libc.as_ref().unwrap().version, "2.28");
        assert_eq!(c.dependencies, ["embreex"]);
        assert_eq!(c.env_vars["MESA_GL_VERSION_OVERRIDE"], "4.5");
        assert_eq!(c.cuda_packages, ["cumesh", "torch"]);
        assert!(
            c.notices
                .iter()
                .any(|n| n.contains("[apt]") && n.contains("libgl1")),
            "{:?}",
            c.notices
        );
    }

    #[test]
    fn conda_python_alone_is_a_version_request() {
        let (_d, r) = load("comfy-env.toml", "[dependencies]\npython = \"3.10.*\"\n");
        let c = r.unwrap();
        assert_eq!(c.python.as_deref(), Some("3.10.*"));
        assert!(c.conda.is_none());
        let (_d, r) = load(
            "comfy-env.toml",
            "[dependencies]\npython = \"3.11.*\"\nffmpeg = \"*\"\n",
        );
        let c = r.unwrap();
        assert_eq!(c.conda.unwrap().python.as_deref(), Some("3.11.*"));
    }

    #[test]
    fn what_comfy_env_refuses_is_refused() {
        let (_d, r) = load("comfy-env.toml", "pyhton = \"3.10\"\n");
        assert!(matches!(r, Err(ConfigError::UnknownKey { line: 1, .. })));
        let (_d, r) = load(
            "comfy-env.toml",
            "[pypi-dependencies]\na = { verison = \"1\" }\n",
        );
        let msg = r.unwrap_err().to_string();
        assert!(
            msg.contains(":2: unknown key `verison` in [pypi-dependencies.a]"),
            "{msg}"
        );
        for section in ["feature.gpu", "environments", "node_packs", "types"] {
            let (_d, r) = load("comfy-env.toml", &format!("[{section}]\nx = \"y\"\n"));
            assert!(
                matches!(r, Err(ConfigError::Unsupported { .. })),
                "{section}: {r:?}"
            );
        }
        let (_d, r) = load("comfy-env.toml", "[tasks]\nx = \"y\"\n");
        assert!(r.unwrap().notices[0].contains("[tasks]"));
    }

    #[test]
    fn one_env_per_subfolder_as_comfy_env_binds_them() {
        let d = tempfile::Builder::new().prefix("Pack").tempdir().unwrap();
        let w = |p: &str, t: &str| {
            let p = d.path().join(p);
            fs::create_dir_all(p.parent().unwrap()).unwrap();
            fs::write(p, t).unwrap();
        };
        w("nodes/__init__.py", "");
        for sub in ["mesh", "render", "_private", "plain"] {
            w(&format!("nodes/{sub}/__init__.py"), "");
        }
        w(
            "nodes/mesh/comfy-env.toml",
            "[dependencies]\ncgal = \"*\"\n",
        );
        w(
            "nodes/render/comfy-env.toml",
            "[pypi-dependencies]\nsix = \"*\"\n",
        );
        w("nodes/_private/comfy-env.toml", "");
        w("nodes/nopkg/comfy-env.toml", "");
        let files = comfy_env_configs(d.path());
        let rel: Vec<String> = files
            .iter()
            .map(|f| f.strip_prefix(d.path()).unwrap().display().to_string())
            .collect();
        assert_eq!(
            rel,
            ["nodes/mesh/comfy-env.toml", "nodes/render/comfy-env.toml"]
        );
        let folder = d.path().file_name().unwrap().to_string_lossy().into_owned();
        let mesh = PackConfig::load_comfy_env(d.path(), &files[0]).unwrap();
        assert_eq!(mesh.name, format!("{folder}/mesh"));
        assert_eq!(mesh.entry.as_deref(), Some("nodes.mesh"));
        assert!(mesh.conda.is_some());
        let render = PackConfig::load_comfy_env(d.path(), &files[1]).unwrap();
        assert_eq!(render.entry.as_deref(), Some("nodes.render"));
        // nodes/comfy-env.toml makes nodes/ itself the one env.
        w("nodes/comfy-env.toml", "");
        let files = comfy_env_configs(d.path());
        assert_eq!(files, [d.path().join("nodes/comfy-env.toml")]);
        let c = PackConfig::load_comfy_env(d.path(), &files[0]).unwrap();
        assert_eq!(
            (c.name.as_str(), c.entry.as_deref()),
            (folder.as_str(), Some("nodes"))
        );
    }
}
