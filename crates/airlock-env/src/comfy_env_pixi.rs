//! The pixi sections of a `comfy-env.toml`, read as comfy-env passes them to pixi: conda
//! `[dependencies]`, channels (`[workspace] channels`), `[target.<platform>]` (the running
//! platform's tables merged over the base ones, most specific last), `[activation] env`,
//! `[system-requirements]` and `[pypi-options]`. What pixi would do and we do not (tasks,
//! activation scripts, build dependencies, comfy-env's removed `[apt]`/`[brew]`) is kept as a
//! notice the build log and `airlock doctor` show, never dropped silently.

use std::collections::BTreeMap;

use airlock_conda::{CondaSpec, Libc, SystemRequirements};
use serde::Serialize;
use toml::de::DeValue;

use crate::config::find_link;
use crate::error::ConfigError;
use crate::toml_doc::{Doc, Table, Value, sorted};

/// The conda part of a pack's env.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct CondaConfig {
    /// As written, in priority order; empty: conda-forge.
    pub channels: Vec<String>,
    /// Every conda dependency but `python`.
    pub dependencies: Vec<CondaSpec>,
    pub system: SystemRequirements,
    /// `python` among the conda dependencies, as written.
    pub python: Option<String>,
}

/// What the sections add up to while a file is read.
#[derive(Default)]
pub(crate) struct Parts {
    pub conda: BTreeMap<String, CondaSpec>,
    pub pypi: BTreeMap<String, String>,
    pub channels: Vec<String>,
    pub system: SystemRequirements,
    pub activation: BTreeMap<String, String>,
    pub extra_index_urls: Vec<String>,
    pub index_url: Option<String>,
    pub find_links: Vec<String>,
    pub notices: Vec<String>,
}

/// The `[target.*]` selectors that apply here, least specific first (pixi's precedence).
fn selectors() -> [&'static str; 3] {
    ["unix", "linux", airlock_conda::current_platform()]
}

/// `[dependencies]` (conda).
pub(crate) fn conda_dependencies(
    doc: &Doc<'_>,
    key: &str,
    v: &Value<'_>,
    parts: &mut Parts,
) -> Result<(), ConfigError> {
    for (name, full, spec) in doc.entries(key, v)? {
        let mut s = CondaSpec::new(name, "*");
        match spec.get_ref() {
            DeValue::String(text) => s.version = text.trim().to_string(),
            DeValue::Table(t) => {
                for (k, fv) in sorted(t) {
                    let field = format!("{full}.{}", k.get_ref());
                    match k.get_ref().as_ref() {
                        "version" => s.version = doc.string(&field, fv)?.trim().to_string(),
                        "build" => s.build = Some(doc.nonempty(&field, fv)?),
                        "channel" => s.channel = Some(doc.nonempty(&field, fv)?),
                        _ => return Err(doc.unknown_key(k, Some(&full))),
                    }
                }
            }
            _ => return Err(doc.wrong_type(&full, spec, "a version string or a table")),
        }
        parts.conda.insert(name.to_string(), s);
    }
    Ok(())
}

/// Reads one section (name, full key, value) into the parts; false: not a section it knows.
pub(crate) type Section<'s> =
    dyn FnMut(&str, &str, &Value<'_>, &mut Parts) -> Result<bool, ConfigError> + 's;

/// `[target.<platform>]`: the tables of the platforms this machine is, in pixi's order.
pub(crate) fn targets(
    doc: &Doc<'_>,
    v: &Value<'_>,
    parts: &mut Parts,
    section: &mut Section<'_>,
) -> Result<(), ConfigError> {
    let table = doc.table("target", v)?;
    for selector in selectors() {
        let Some((_, t)) = table.iter().find(|(k, _)| k.get_ref().as_ref() == selector) else {
            continue;
        };
        let prefix = format!("target.{selector}");
        for (k, tv) in sorted(doc.table(&prefix, t)?) {
            let name = k.get_ref().as_ref();
            let full = format!("{prefix}.{name}");
            if !section(name, &full, tv, parts)? {
                return Err(doc.unknown_key(k, Some(&prefix)));
            }
        }
    }
    Ok(())
}

/// `[activation]`: `env` is set in the worker; scripts are not run (noted).
pub(crate) fn activation(
    doc: &Doc<'_>,
    key: &str,
    v: &Value<'_>,
    parts: &mut Parts,
) -> Result<(), ConfigError> {
    for (k, av) in sorted(doc.table(key, v)?) {
        match k.get_ref().as_ref() {
            "env" => {
                let vars = scalar_env_vars(doc, &format!("{key}.env"), av)?;
                parts.activation.extend(vars);
            }
            "scripts" => parts.notices.push(format!(
                "[{key}] scripts are not run (comfy-airlock sets [{key}] env and the \
                 prefix's PATH only)"
            )),
            _ => return Err(doc.unknown_key(k, Some(key))),
        }
    }
    Ok(())
}

/// `[env_vars]` as comfy-env reads it: any scalar, written as text (`OMP_NUM_THREADS = 1`).
pub(crate) fn scalar_env_vars(
    doc: &Doc<'_>,
    key: &str,
    v: &Value<'_>,
) -> Result<BTreeMap<String, String>, ConfigError> {
    let mut out = BTreeMap::new();
    for (k, val) in sorted(doc.table(key, v)?) {
        let name = k.get_ref().to_string();
        let full = format!("{key}.{name}");
        if name.is_empty() || name.contains(['=', '\0']) {
            return Err(doc.invalid(&full, val, &name, "not a valid environment variable name"));
        }
        let value = match val.get_ref() {
            DeValue::String(s) => s.to_string(),
            DeValue::Integer(i) => i.to_string(),
            DeValue::Float(f) => f.to_string(),
            DeValue::Boolean(b) => if *b { "True" } else { "False" }.to_string(),
            _ => return Err(doc.wrong_type(&full, val, "a string or a number")),
        };
        if value.contains('\0') {
            return Err(doc.invalid(&full, val, &value, "must not contain NUL"));
        }
        out.insert(name, value);
    }
    Ok(out)
}

/// `[system-requirements]`: `linux`, `libc`, `cuda`, `archspec`; `macos` does not apply here.
pub(crate) fn system_requirements(
    doc: &Doc<'_>,
    key: &str,
    v: &Value<'_>,
    parts: &mut Parts,
) -> Result<(), ConfigError> {
    for (k, sv) in sorted(doc.table(key, v)?) {
        let field = format!("{key}.{}", k.get_ref());
        let text = |sv: &Value<'_>| match sv.get_ref() {
            DeValue::String(s) => Ok(s.trim().to_string()),
            DeValue::Integer(i) => Ok(i.to_string()),
            DeValue::Float(f) => Ok(f.to_string()),
            _ => Err(doc.wrong_type(&field, sv, "a version")),
        };
        match k.get_ref().as_ref() {
            "linux" => parts.system.linux = Some(text(sv)?),
            "cuda" => parts.system.cuda = Some(text(sv)?),
            "archspec" => parts.system.archspec = Some(text(sv)?),
            "macos" => {}
            "libc" => {
                parts.system.libc = Some(match sv.get_ref() {
                    DeValue::Table(t) => libc_table(doc, &field, t)?,
                    _ => Libc {
                        family: "glibc".into(),
                        version: text(sv)?,
                    },
                })
            }
            _ => return Err(doc.unknown_key(k, Some(key))),
        }
    }
    Ok(())
}

fn libc_table(doc: &Doc<'_>, key: &str, t: &Table<'_>) -> Result<Libc, ConfigError> {
    let mut l = Libc {
        family: "glibc".into(),
        version: String::new(),
    };
    for (k, v) in sorted(t) {
        let field = format!("{key}.{}", k.get_ref());
        match k.get_ref().as_ref() {
            "family" => l.family = doc.nonempty(&field, v)?,
            "version" => l.version = doc.nonempty(&field, v)?,
            _ => return Err(doc.unknown_key(k, Some(key))),
        }
    }
    Ok(l)
}

/// `[workspace]` (or pixi's older `[project]`): the channels; the rest is pixi's business.
pub(crate) fn workspace(
    doc: &Doc<'_>,
    key: &str,
    v: &Value<'_>,
    parts: &mut Parts,
) -> Result<(), ConfigError> {
    for (k, wv) in sorted(doc.table(key, v)?) {
        let name = k.get_ref().as_ref();
        match name {
            "channels" => {
                let field = format!("{key}.channels");
                let channels = doc.array(&field, wv, |item| match item.get_ref() {
                    DeValue::String(_) => doc.nonempty(&field, item),
                    DeValue::Table(t) => t
                        .iter()
                        .find(|(k, _)| k.get_ref().as_ref() == "channel")
                        .map(|(_, c)| doc.nonempty(&field, c))
                        .unwrap_or_else(|| Err(doc.wrong_type(&field, item, "a channel"))),
                    _ => Err(doc.wrong_type(&field, item, "an array of channels")),
                })?;
                parts.channels.extend(channels);
            }
            _ => parts
                .notices
                .push(format!("[{key}] {name} is pixi's setting and is not used")),
        }
    }
    Ok(())
}

/// `[pypi-options]`: the indexes and find-links uv gets; other options are noted.
pub(crate) fn pypi_options(
    doc: &Doc<'_>,
    key: &str,
    v: &Value<'_>,
    pack_dir: &std::path::Path,
    parts: &mut Parts,
) -> Result<(), ConfigError> {
    for (k, ov) in sorted(doc.table(key, v)?) {
        let name = k.get_ref().as_ref();
        let field = format!("{key}.{name}");
        match name {
            "index-url" => parts.index_url = Some(doc.nonempty(&field, ov)?),
            "extra-index-urls" => parts.extra_index_urls.extend(doc.string_array(&field, ov)?),
            "find-links" => {
                let links = doc.array(&field, ov, |item| match item.get_ref() {
                    DeValue::Table(t) => t
                        .iter()
                        .find(|(k, _)| matches!(k.get_ref().as_ref(), "path" | "url"))
                        .map(|(_, p)| doc.nonempty(&field, p))
                        .unwrap_or_else(|| {
                            Err(doc.wrong_type(&field, item, "{ path } or { url }"))
                        }),
                    DeValue::String(_) => doc.nonempty(&field, item),
                    _ => Err(doc.wrong_type(&field, item, "an array of { path } or { url }")),
                })?;
                parts
                    .find_links
                    .extend(links.iter().map(|l| find_link(pack_dir, l)));
            }
            _ => parts
                .notices
                .push(format!("[{key}] {name} is not passed to uv")),
        }
    }
    Ok(())
}

/// comfy-env's removed `[apt]` and `[brew]`: what to install by hand instead.
pub(crate) fn system_packages(
    doc: &Doc<'_>,
    key: &str,
    v: &Value<'_>,
    parts: &mut Parts,
) -> Result<(), ConfigError> {
    let mut packages = Vec::new();
    for (k, pv) in sorted(doc.table(key, v)?) {
        if k.get_ref().as_ref() == "packages" {
            packages = doc.string_array(&format!("{key}.packages"), pv)?;
        }
    }
    parts.notices.push(format!(
        "[{key}] is not installed by comfy-airlock (comfy-env removed it too; a conda package \
         such as mesalib replaces most): install {} yourself if the pack needs it",
        if packages.is_empty() {
            "its packages".to_string()
        } else {
            packages.join(", ")
        }
    ));
    Ok(())
}

/// `[cuda]`: `packages` (a list, or one name), as comfy-env reads it.
pub(crate) fn cuda(
    doc: &Doc<'_>,
    key: &str,
    v: &Value<'_>,
    parts: &mut Parts,
) -> Result<Vec<String>, ConfigError> {
    let mut out = Vec::new();
    for (k, cv) in sorted(doc.table(key, v)?) {
        let field = format!("{key}.{}", k.get_ref());
        match k.get_ref().as_ref() {
            "packages" => match cv.get_ref() {
                DeValue::String(_) => out.push(doc.nonempty(&field, cv)?),
                _ => out = doc.string_array(&field, cv)?,
            },
            other => parts.notices.push(format!(
                "[cuda] {other} is not a comfy-env key and is not used"
            )),
        }
    }
    Ok(out)
}
