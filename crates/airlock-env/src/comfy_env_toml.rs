//! Reading the `comfy-env.toml` of a pack written for comfy-env (at the pack's root or in
//! `nodes/`), so such packs run without their author adding an `airlock.toml`.
//!
//! comfy-env builds with pixi and passes most sections through to it. We build with uv, so we
//! take what maps onto a PyPI-only environment (`python`, `[pypi-dependencies]`,
//! `[env_vars]`) and refuse the rest by name rather than building an env that silently lacks
//! something: conda packages, comfy-env's `[cuda]` wheel lookup and pixi's own settings each
//! get an error that says so and what to write instead.

use std::path::Path;

use toml::de::DeValue;

use crate::config::{PackConfig, find_link, pack_name};
use crate::error::ConfigError;
use crate::requirement;
use crate::toml_doc::{Doc, Table, Value, is_empty, sorted};

pub(crate) fn parse(doc: &Doc<'_>, c: &mut PackConfig) -> Result<(), ConfigError> {
    let table = doc.parse()?;
    // comfy-env's layout keeps the nodes in `nodes/` next to the file.
    if c.file.parent() != Some(c.dir.as_path()) {
        c.entry = Some("nodes".to_string());
    }
    let mut conda_python = None;
    for (key, v) in sorted(&table) {
        let k = key.get_ref().as_ref();
        let conda = |line: usize| ConfigError::Conda {
            pack: doc.pack.to_string(),
            file: doc.file.to_path_buf(),
            line,
            section: k.to_string(),
        };
        let unsupported = |hint: &'static str| ConfigError::Unsupported {
            pack: doc.pack.to_string(),
            file: doc.file.to_path_buf(),
            line: doc.line_of(key),
            section: k.to_string(),
            hint,
        };
        match k {
            "name" => c.name = pack_name(doc, k, v)?,
            "python" => c.python = Some(doc.nonempty(k, v)?),
            "pypi-dependencies" => c.dependencies = pypi_dependencies(doc, &c.dir, v)?,
            "env_vars" => c.env_vars = doc.env_vars(k, v)?,
            // comfy-env's runtime options (a health-check timeout); ours are not per pack.
            "options" => {
                doc.table(k, v)?;
            }
            "cuda" => {
                return Err(ConfigError::Cuda {
                    pack: doc.pack.to_string(),
                    file: doc.file.to_path_buf(),
                    line: doc.line_of(key),
                });
            }
            // pixi puts the interpreter among the conda dependencies; that one we understand.
            "dependencies" => {
                for (dk, dv) in sorted(doc.table(k, v)?) {
                    if dk.get_ref().as_ref() == "python" {
                        conda_python = Some(doc.nonempty("dependencies.python", dv)?);
                    } else {
                        return Err(conda(doc.line_of(dk)));
                    }
                }
            }
            "channels" | "system-requirements" | "target" | "activation" | "host-dependencies" => {
                if !is_empty(v.get_ref()) {
                    return Err(conda(doc.line_of(key)));
                }
            }
            "tasks" | "pypi-options" | "feature" | "environments" | "workspace" | "project" => {
                return Err(unsupported(
                    "a pixi setting; airlock builds environments with uv",
                ));
            }
            "node_packs" | "types" | "serializers" => {
                return Err(unsupported(
                    "a comfy-env feature that airlock does not have",
                ));
            }
            _ => return Err(doc.unknown_key(key, None)),
        }
    }
    if c.python.is_none() {
        c.python = conda_python;
    }
    Ok(())
}

/// `[pypi-dependencies]`: `name = "spec"` or `name = { version, extras, url, path, git, ... }`.
fn pypi_dependencies(
    doc: &Doc<'_>,
    pack_dir: &Path,
    v: &Value<'_>,
) -> Result<Vec<String>, ConfigError> {
    let mut out = Vec::new();
    for (name, spec) in sorted(doc.table("pypi-dependencies", v)?) {
        let name = name.get_ref().as_ref();
        let key = format!("pypi-dependencies.{name}");
        let req = match spec.get_ref() {
            DeValue::String(s) => format!("{name}{}", version(s)),
            DeValue::Table(t) => from_table(doc, pack_dir, &key, name, t)?,
            _ => return Err(doc.wrong_type(&key, spec, "a version string or a table")),
        };
        requirement::check(&req).map_err(|bad| doc.invalid(&key, spec, &req, bad.why()))?;
        out.push(req);
    }
    Ok(out)
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

    use crate::config::{ConfigFormat, PackConfig};
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

[env_vars]
KMP_DUPLICATE_LIB_OK = "TRUE"

[options]
health_check_timeout = 10
"#,
        );
        let c = r.unwrap();
        assert_eq!(c.format, ConfigFormat::ComfyEnv);
        assert_eq!(c.python.as_deref(), Some("3.11"));
        assert_eq!(c.entry.as_deref(), Some("nodes"));
        let want_local = format!("local @ file://{}", d.path().join("vendor/local").display());
        let mut deps = c.dependencies.clone();
        deps.sort();
        let mut want = vec![
            "trimesh".to_string(),
            "numpy>=1.26,<2".into(),
            "pillow==10.4.0".into(),
            "opencv-python[contrib]>=4.9".into(),
            "mylib @ git+https://example.org/mylib.git@v1".into(),
            want_local,
        ];
        want.sort();
        assert_eq!(deps, want);
        assert_eq!(c.env_vars["KMP_DUPLICATE_LIB_OK"], "TRUE");
    }

    #[test]
    fn conda_dependencies_are_refused_by_name() {
        let (_d, r) = load(
            "comfy-env.toml",
            "python = \"3.11\"\n\n[dependencies]\nmesalib = \"*\"\n",
        );
        let msg = r.unwrap_err().to_string();
        assert!(
            msg.contains("comfy-env.toml:4: conda dependencies are not supported yet"),
            "{msg}"
        );
        assert!(msg.contains("[dependencies]"), "{msg}");

        let (_d, r) = load("comfy-env.toml", "channels = [\"conda-forge\"]\n");
        assert!(matches!(r, Err(ConfigError::Conda { .. })));
        let (_d, r) = load("comfy-env.toml", "[system-requirements]\ncuda = \"12\"\n");
        assert!(matches!(r, Err(ConfigError::Conda { line: 1, .. })));
    }

    #[test]
    fn conda_python_alone_is_understood() {
        let (_d, r) = load("comfy-env.toml", "[dependencies]\npython = \"3.10.*\"\n");
        assert_eq!(r.unwrap().python.as_deref(), Some("3.10.*"));
    }

    #[test]
    fn cuda_section_says_what_to_do_instead() {
        let (_d, r) = load("comfy-env.toml", "[cuda]\npackages = [\"flash-attn\"]\n");
        let e = r.unwrap_err();
        assert!(matches!(e, ConfigError::Cuda { line: 1, .. }), "{e:?}");
        assert!(e.to_string().contains("find-links"));
    }

    #[test]
    fn unknown_keys_and_pixi_sections() {
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
        let (_d, r) = load("comfy-env.toml", "[tasks]\nx = \"y\"\n");
        assert!(matches!(r, Err(ConfigError::Unsupported { .. })));
    }
}
