//! A group: several packs in one environment and one worker (`packs = [...]`, ADR 0054).
//!
//! Packs call each other's code: Inspire Pack's regional samplers call Impact Pack's
//! `RegionalSampler.separated_sample` through `nodes.NODE_CLASS_MAPPINGS`, Easy-Use calls
//! Impact's detailers and IPAdapter's nodes, and their nodes pass each other objects of their
//! own classes (Impact's SEGS). Natively they share ComfyUI's process. Isolated one pack per
//! worker, a call into the other pack's class cannot run, and a value of one pack's class
//! cannot reach the other's nodes. A group folder holds such packs as subfolders, in the order
//! they are imported; its `airlock.toml` names them:
//!
//! ```toml
//! packs = ["ComfyUI-Impact-Pack", "ComfyUI-Inspire-Pack"]
//! ```
//!
//! The environment is the group's (without `dependencies`, every member's `requirements.txt`
//! in turn); the worker imports each member as ComfyUI imports a custom node folder.

use std::path::Path;

use crate::error::ConfigError;
use crate::requirements_txt;
use crate::toml_doc::{Doc, Value};

/// Why `entry` and `packs` do not go together.
pub(crate) const NO_ENTRY: &str =
    "cannot go with `packs`: each member is imported as a pack (`entry` is for a single pack)";

/// The members named by `packs`: folder names inside `dir`, each a pack (`__init__.py`), in
/// the order given, none twice.
pub(crate) fn members(
    doc: &Doc<'_>,
    key: &str,
    v: &Value<'_>,
    dir: &Path,
) -> Result<Vec<String>, ConfigError> {
    let mut names: Vec<String> = Vec::new();
    doc.array(key, v, |item| {
        let name = doc.nonempty(key, item)?;
        if name.contains(['/', '\\', '\0']) || name.starts_with('.') {
            return Err(doc.invalid(
                key,
                item,
                &name,
                "must be a folder name in the group's folder",
            ));
        }
        if names.contains(&name) {
            return Err(doc.invalid(key, item, &name, "is named twice"));
        }
        let member = dir.join(&name);
        if !member.is_dir() {
            return Err(doc.invalid(key, item, &name, "is not a folder in the group's folder"));
        }
        if !member.join("__init__.py").is_file() {
            return Err(doc.invalid(
                key,
                item,
                &name,
                "has no __init__.py: not a pack ComfyUI could import",
            ));
        }
        names.push(name);
        Ok(())
    })?;
    if names.is_empty() {
        return Err(doc.invalid(key, v, "[]", "must name at least one pack"));
    }
    Ok(names)
}

/// The group's requirements without a `dependencies` key: each member's `requirements.txt`,
/// in member order, a line already taken once left out.
pub(crate) fn requirements(
    group: &str,
    dir: &Path,
    members: &[String],
) -> Result<Vec<String>, ConfigError> {
    let mut reqs: Vec<String> = Vec::new();
    for m in members {
        let found = requirements_txt::read(&format!("{group}/{m}"), &dir.join(m))?;
        for line in found.map(|(_, lines)| lines).unwrap_or_default() {
            if !reqs.contains(&line) {
                reqs.push(line);
            }
        }
    }
    Ok(reqs)
}

#[cfg(test)]
mod tests {
    use std::fs;

    use crate::config::PackConfig;

    fn group(files: &[(&str, &str)]) -> tempfile::TempDir {
        let d = tempfile::Builder::new().prefix("group").tempdir().unwrap();
        for (name, text) in files {
            let p = d.path().join(name);
            fs::create_dir_all(p.parent().unwrap()).unwrap();
            fs::write(p, text).unwrap();
        }
        d
    }

    #[test]
    fn members_in_order_with_their_requirements_once() {
        let d = group(&[
            ("airlock.toml", "packs = [\"Impact\", \"Inspire\"]\n"),
            ("Impact/__init__.py", ""),
            ("Impact/requirements.txt", "numpy<2\nscipy\n"),
            ("Inspire/__init__.py", ""),
            (
                "Inspire/requirements.txt",
                "# same numpy\nnumpy<2\nwebcolors\n",
            ),
            ("requirements.txt", "never-read\n"),
        ]);
        let c = PackConfig::load(d.path()).unwrap();
        assert_eq!(c.members, ["Impact", "Inspire"]);
        assert_eq!(c.dependencies, ["numpy<2", "scipy", "webcolors"]);
        assert_eq!(c.requirements_file, None);
    }

    #[test]
    fn dependencies_replace_the_members_files() {
        let d = group(&[
            (
                "airlock.toml",
                "dependencies = [\"six\"]\npacks = [\"A\"]\n",
            ),
            ("A/__init__.py", ""),
            ("A/requirements.txt", "numpy\n"),
        ]);
        let c = PackConfig::load(d.path()).unwrap();
        assert_eq!(c.dependencies, ["six"]);
    }

    #[test]
    fn bad_members_are_named_with_their_line() {
        let cases = [
            ("packs = []\n", "must name at least one pack"),
            ("packs = [\"A\", \"A\"]\n", "is named twice"),
            ("packs = [\"../A\"]\n", "must be a folder name"),
            ("packs = [\"B\"]\n", "is not a folder in the group's folder"),
            ("packs = [\"NoInit\"]\n", "has no __init__.py"),
            ("packs = \"A\"\n", "must be an array"),
            (
                "entry = \"nodes\"\npacks = [\"A\"]\n",
                "cannot go with `packs`",
            ),
            (
                "packs = [\"A\"]\nentry = \"nodes\"\n",
                "cannot go with `packs`",
            ),
        ];
        for (text, needle) in cases {
            let d = group(&[
                ("airlock.toml", text),
                ("A/__init__.py", ""),
                ("NoInit/x.py", ""),
            ]);
            let msg = PackConfig::load(d.path()).unwrap_err().to_string();
            assert!(msg.contains(needle), "{text:?}: {msg}");
            assert!(msg.contains("airlock.toml:"), "{text:?}: {msg}");
        }
    }

    #[test]
    fn a_members_bad_requirements_line_names_the_member() {
        let d = group(&[
            ("airlock.toml", "packs = [\"A\"]\n"),
            ("A/__init__.py", ""),
            ("A/requirements.txt", "-e .\n"),
        ]);
        let msg = PackConfig::load(d.path()).unwrap_err().to_string();
        assert!(msg.contains("A/requirements.txt"), "{msg}");
    }
}
