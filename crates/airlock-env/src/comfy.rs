//! Whether a pack needs ComfyUI itself in its environment, and what that adds.
//!
//! A worker imports the pack from the same ComfyUI tree as the host, so a pack that does
//! `import comfy.model_management`, `import folder_paths` or `import nodes` needs ComfyUI's own
//! requirements (torch, safetensors, einops, ...) in its env. And native packs rely on what
//! ComfyUI installs (torch, numpy, Pillow) without listing it. So every env gets ComfyUI's
//! requirements by default, at the host's versions (`host_pins`); `comfy = false` in the config
//! opts out (a pack that must not have torch, or needs a numpy ComfyUI's cannot live with). An
//! import of a ComfyUI module is still looked for, to say why an env without a known ComfyUI
//! folder cannot be built, and why `comfy = false` will fail.
//!
//! From ComfyUI's `requirements.txt` we drop what only the browser UI needs (the frontend
//! package, workflow templates, embedded docs: together over 100 MB and no use in a worker).
//! We keep the "non essential" section: `comfy_extras` imports kornia and spandrel at module
//! level, and `comfy_api` needs pydantic, so a pack that imports them would fail without it.
//! The pack's own pins are passed to uv together with these, so a pack that needs an older
//! torch gets it when the two can be satisfied together, and a clear resolver error otherwise.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use crate::requirement::{self, normalize_name};

/// ComfyUI's top-level modules: importing any of them means the pack needs ComfyUI's
/// requirements.
pub const COMFY_MODULES: &[&str] = &[
    "comfy",
    "comfy_extras",
    "comfy_api",
    "comfy_execution",
    "folder_paths",
    "node_helpers",
    "latent_preview",
    "nodes",
    "server",
    "execution",
];

/// Requirements of ComfyUI that only its browser UI uses (matched as name prefixes).
const UI_ONLY: &[&str] = &[
    "comfyui-frontend-package",
    "comfyui-workflow-templates",
    "comfyui-embedded-docs",
];

/// Where a ComfyUI import was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ComfyImport {
    pub module: String,
    pub file: PathBuf,
    pub line: usize,
}

/// Why an env gets ComfyUI's requirements.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ComfyReason {
    /// The default: the config does not say `comfy = false`.
    Default,
    /// The config says `comfy = true`.
    Forced,
    /// The pack imports a ComfyUI module.
    Imports(ComfyImport),
}

impl std::fmt::Display for ComfyReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ComfyReason::Default => write!(
                f,
                "every environment has ComfyUI's requirements unless its config sets comfy = false"
            ),
            ComfyReason::Forced => write!(f, "its config sets comfy = true"),
            ComfyReason::Imports(i) => write!(
                f,
                "it imports ComfyUI ({} in {}:{})",
                i.module,
                i.file.display(),
                i.line
            ),
        }
    }
}

/// Folders that hold no pack source: caches, VCS metadata, virtual environments, JS modules.
fn skip_dir(dir: &Path) -> bool {
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy())
        .unwrap_or_default();
    name.starts_with('.')
        || matches!(
            name.as_ref(),
            "__pycache__" | "node_modules" | "site-packages" | "venv" | "env"
        )
        || dir.join("pyvenv.cfg").exists()
}

/// The first import of a ComfyUI module in the pack's `.py` files, if any.
pub fn find_comfy_import(pack_dir: &Path) -> io::Result<Option<ComfyImport>> {
    let mut stack = vec![pack_dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let mut entries: Vec<_> = fs::read_dir(&dir)?.filter_map(Result::ok).collect();
        entries.sort_by_key(|e| e.file_name());
        for entry in entries {
            let path = entry.path();
            // No symlinks: a link to ComfyUI's own tree would find ComfyUI's imports.
            let Ok(ft) = entry.file_type() else { continue };
            if ft.is_dir() {
                if !skip_dir(&path) {
                    stack.push(path);
                }
            } else if ft.is_file() && path.extension().is_some_and(|e| e == "py") {
                // Generated or vendored giants are not where a pack's imports are.
                if entry.metadata().map(|m| m.len() > 4 << 20).unwrap_or(true) {
                    continue;
                }
                let Ok(bytes) = fs::read(&path) else { continue };
                let text = String::from_utf8_lossy(&bytes);
                if let Some((line, module)) = comfy_import_in(&text) {
                    return Ok(Some(ComfyImport {
                        module,
                        file: path,
                        line,
                    }));
                }
            }
        }
    }
    Ok(None)
}

/// The first line of `source` that imports a ComfyUI module: `(line number, module)`.
pub fn comfy_import_in(source: &str) -> Option<(usize, String)> {
    for (i, raw) in source.lines().enumerate() {
        let line = raw.trim_start();
        let modules: Vec<&str> = if let Some(rest) = line.strip_prefix("import ") {
            rest.split('#')
                .next()
                .unwrap_or("")
                .split(',')
                .filter_map(|item| item.split_whitespace().next())
                .collect()
        } else if let Some(rest) = line.strip_prefix("from ") {
            match rest.split_whitespace().collect::<Vec<_>>().as_slice() {
                [module, "import", ..] => vec![*module],
                _ => continue,
            }
        } else {
            continue;
        };
        for m in modules {
            let top = m.split('.').next().unwrap_or("");
            if COMFY_MODULES.contains(&top) {
                return Some((i + 1, m.to_string()));
            }
        }
    }
    None
}

/// The requirements an env needs to import ComfyUI's modules: ComfyUI's `requirements.txt`
/// without comments, options and the UI-only packages.
pub fn core_requirements(comfyui_dir: &Path) -> io::Result<Vec<String>> {
    let text = fs::read_to_string(requirements_path(comfyui_dir))?;
    Ok(parse_requirements(&text))
}

/// ComfyUI's requirements above its `#non essential dependencies:` line (all of them when it
/// has none): what a comfy-env pack's env gets.
pub fn essential_requirements(comfyui_dir: &Path) -> io::Result<Vec<String>> {
    let text = fs::read_to_string(requirements_path(comfyui_dir))?;
    let essential: Vec<&str> = text
        .lines()
        .take_while(|l| {
            let l = l.trim().to_ascii_lowercase();
            !(l.starts_with('#') && l.replace('-', " ").contains("non essential"))
        })
        .collect();
    Ok(parse_requirements(&essential.join("\n")))
}

/// Where ComfyUI keeps its requirements.
pub fn requirements_path(comfyui_dir: &Path) -> PathBuf {
    comfyui_dir.join("requirements.txt")
}

fn parse_requirements(text: &str) -> Vec<String> {
    text.lines()
        .map(|l| {
            // A '#' starts a comment at the line's start or after whitespace (not in a URL).
            match l.find(" #").or_else(|| l.find("\t#")) {
                Some(i) => &l[..i],
                None if l.trim_start().starts_with('#') => "",
                None => l,
            }
            .trim()
        })
        .filter(|l| !l.is_empty() && requirement::check(l).is_ok())
        .filter(|l| requirement::name_of(l).is_none_or(|n| !is_ui_only(&n)))
        .map(str::to_string)
        .collect()
}

/// Whether `name` (any spelling) is one of ComfyUI's UI-only packages.
pub fn is_ui_only(name: &str) -> bool {
    let n = normalize_name(name);
    UI_ONLY
        .iter()
        .any(|ui| n == *ui || n.starts_with(&format!("{ui}-")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn essential_requirements_stop_at_the_non_essential_line() {
        let dir = tempfile::tempdir().unwrap();
        let text = "torch\ntokenizers>=0.13.3\n\n#non essential dependencies:\nPyOpenGL>=3.1.8\n";
        fs::write(requirements_path(dir.path()), text).unwrap();
        assert_eq!(
            essential_requirements(dir.path()).unwrap(),
            ["torch", "tokenizers>=0.13.3"]
        );
        assert_eq!(core_requirements(dir.path()).unwrap().len(), 3);
    }

    #[test]
    fn detects_imports_of_comfy_modules() {
        assert_eq!(
            comfy_import_in("import comfy.model_management\n"),
            Some((1, "comfy.model_management".into()))
        );
        assert_eq!(
            comfy_import_in("x = 1\n    from comfy_extras.nodes_mask import X\n").map(|r| r.0),
            Some(2)
        );
        assert_eq!(
            comfy_import_in("import os, folder_paths as fp\n").map(|r| r.1),
            Some("folder_paths".into())
        );
        assert_eq!(
            comfy_import_in("from comfy_api.latest import io\n").map(|r| r.1),
            Some("comfy_api.latest".into())
        );
        assert!(comfy_import_in("import node_helpers  # for masks\n").is_some());
        assert!(comfy_import_in("import latent_preview\n").is_some());
        assert!(comfy_import_in("from comfy_execution.graph import X\n").is_some());
        // ComfyUI's own nodes.py, as native packs import it.
        assert_eq!(
            comfy_import_in("import nodes\n").map(|r| r.1),
            Some("nodes".into())
        );
        assert!(comfy_import_in("from nodes import MAX_RESOLUTION\n").is_some());
        assert!(comfy_import_in("from server import PromptServer\n").is_some());
        // Not ComfyUI: other names, relative imports, words in text.
        assert_eq!(
            comfy_import_in("import comfyui_helpers\nfrom .comfy import x\n"),
            None
        );
        assert_eq!(
            comfy_import_in("# we import comfy later\nimportant = 1\n"),
            None
        );
        assert_eq!(
            comfy_import_in("from comfy_airlock import register_nodes\n"),
            None
        );
    }

    #[test]
    fn scans_the_pack_but_not_its_venvs_or_caches() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path();
        fs::write(p.join("__init__.py"), "import os\n").unwrap();
        for skipped in [".git", "__pycache__", "node_modules", ".venv"] {
            fs::create_dir_all(p.join(skipped)).unwrap();
            fs::write(p.join(skipped).join("x.py"), "import comfy\n").unwrap();
        }
        fs::create_dir_all(p.join("myenv")).unwrap();
        fs::write(p.join("myenv/pyvenv.cfg"), "").unwrap();
        fs::write(p.join("myenv/y.py"), "import folder_paths\n").unwrap();
        assert_eq!(find_comfy_import(p).unwrap(), None);

        fs::create_dir_all(p.join("nodes")).unwrap();
        fs::write(
            p.join("nodes/depth.py"),
            "import torch\nimport comfy.utils\n",
        )
        .unwrap();
        let found = find_comfy_import(p).unwrap().unwrap();
        assert_eq!(found.module, "comfy.utils");
        assert_eq!(found.line, 2);
        assert!(found.file.ends_with("nodes/depth.py"));
    }

    #[test]
    fn core_requirements_drop_the_ui_and_comments() {
        let text = "comfyui-frontend-package==1.28.8\ncomfyui-workflow-templates==0.2.11\n\
                    comfyui_workflow_templates_core==0.1\ncomfyui-embedded-docs==0.3.0\ntorch\n\
                    numpy>=1.25.0\n\n#non essential dependencies:\nkornia>=0.7.1\n\
                    spandrel # upscalers\n--extra-index-url https://x\n";
        assert_eq!(
            parse_requirements(text),
            ["torch", "numpy>=1.25.0", "kornia>=0.7.1", "spandrel"]
        );
        assert!(is_ui_only("ComfyUI_Frontend_Package"));
        assert!(!is_ui_only("comfy-kitchen"));
    }
}
