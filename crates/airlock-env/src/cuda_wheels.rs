//! comfy-env's `[cuda] packages`: each resolved to the prebuilt wheel that matches the host's
//! torch, CUDA and the env's Python, and inlined as a pinned requirement (`name @ url`).
//!
//! The index is comfy-env's cuda-wheels layout: a PEP 503 page per package
//! (`<index>/<package>/`, the name as written, with `_` or with `-`), whose links' text carries
//! the build's tags, e.g. `flash_attn-2.8.3+cu128torch2.8-cp311-cp311-linux_x86_64.whl`. A
//! wheel matches when its text has `+cu<XYZ>torch<M.m>` (or `+pt<M.m>cu<XYZ>`), `cp<XY>` and
//! this machine's architecture; manylinux builds are preferred. The link is kept with its
//! `#sha256=` fragment, which uv then checks.
//!
//! Where: `AIRLOCK_CUDA_WHEELS` (a URL, or a folder laid out the same way, or a flat folder of
//! wheels), else comfy-env's `COMFY_ENV_CUDA_WHEELS_INDEX`, else comfy-env's default index.
//! What: the host's torch `major.minor` and the CUDA version its torch was built for, or
//! `AIRLOCK_CUDA_VERSION` (conda's `CONDA_OVERRIDE_CUDA` is read too). A host torch without
//! CUDA means no `[cuda]` wheels, as in comfy-env; the build log says so.

use std::fs;
use std::path::Path;

use crate::error::BuildError;

/// The index to look wheels up in (a URL or a folder).
pub const WHEELS_ENV: &str = "AIRLOCK_CUDA_WHEELS";
/// The CUDA version to match instead of the host torch's.
pub const VERSION_ENV: &str = "AIRLOCK_CUDA_VERSION";

/// comfy-env's default index.
pub const DEFAULT_INDEX: &str = "https://comfy-forge.github.io/cuda-wheels/";

/// What a `[cuda]` wheel must have been built for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// `12.8`
    pub cuda: String,
    /// `2.8`
    pub torch: String,
    /// `3.11`
    pub python: String,
    /// `x86_64`
    pub arch: String,
}

impl Target {
    /// The host's, for an env on Python `python`; None when the host's torch has no CUDA.
    pub fn of_host(
        torch_version: Option<&str>,
        torch_cuda: Option<&str>,
        python: &str,
    ) -> Option<Target> {
        let env = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
        let cuda = env(VERSION_ENV)
            .or_else(|| env("CONDA_OVERRIDE_CUDA"))
            .or_else(|| torch_cuda.map(str::to_string))?;
        let torch = torch_version?;
        Some(Target {
            cuda: major_minor(&cuda),
            torch: major_minor(torch.split('+').next().unwrap_or(torch)),
            python: major_minor(python),
            arch: std::env::consts::ARCH.to_string(),
        })
    }

    /// What a matching wheel's name carries, for messages.
    pub fn describe(&self) -> String {
        format!(
            "CUDA {} (+cu{}), torch {}, CPython {} (cp{}), {}",
            self.cuda,
            self.cuda_short(),
            self.torch,
            self.python,
            self.python.replace('.', ""),
            self.arch
        )
    }

    fn cuda_short(&self) -> String {
        self.cuda.replace('.', "").chars().take(3).collect()
    }

    fn matches(&self, text: &str) -> bool {
        let locals = [
            format!("+cu{}torch{}", self.cuda_short(), self.torch),
            format!("+pt{}cu{}", self.torch, self.cuda_short()),
        ];
        let py = format!("cp{}", self.python.replace('.', ""));
        locals.iter().any(|l| text.contains(l))
            && text.contains(&py)
            && text.contains(&format!("_{}", self.arch))
    }
}

fn major_minor(v: &str) -> String {
    v.split('.').take(2).collect::<Vec<_>>().join(".")
}

/// Where the wheels are looked up.
pub fn index_location() -> String {
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
    env(WHEELS_ENV)
        .or_else(|| env("COMFY_ENV_CUDA_WHEELS_INDEX"))
        .unwrap_or_else(|| DEFAULT_INDEX.to_string())
}

/// The requirement (`name @ url`) of the wheel of `package` that matches `target`.
pub fn resolve(package: &str, target: &Target, index: &str) -> Result<String, BuildError> {
    let mut unreachable = Vec::new();
    let mut candidates: Vec<(String, String)> = Vec::new();
    for dir in variants(package) {
        match links(index, &dir) {
            Ok(found) => candidates.extend(found.into_iter().filter(|(_, t)| target.matches(t))),
            Err(why) => unreachable.push(why),
        }
    }
    if candidates.is_empty() && !is_url(index) {
        // A flat folder of wheels (find-links style).
        if let Ok(found) = folder_links(Path::new(index)) {
            let names = variants(package);
            candidates.extend(found.into_iter().filter(|(_, t)| {
                target.matches(t)
                    && names.iter().any(|n| {
                        t.starts_with(&format!("{}-", n.replace('-', "_")))
                            || t.starts_with(&format!("{n}-"))
                    })
            }));
        }
    }
    let best = candidates
        .iter()
        .find(|(_, t)| t.contains("manylinux"))
        .or_else(|| candidates.first());
    match best {
        Some((url, _)) => Ok(format!("{} @ {url}", package.replace('_', "-"))),
        None if unreachable.len() == variants(package).len() && is_url(index) => {
            // One cause is enough: the pages differ only in how the name is spelt.
            let (pages, causes): (Vec<String>, Vec<String>) = unreachable
                .into_iter()
                .map(|u| match u.split_once(": ") {
                    Some((page, why)) => (page.to_string(), why.to_string()),
                    None => (String::new(), u),
                })
                .unzip();
            Err(BuildError::CudaIndex {
                package: package.to_string(),
                index: index.to_string(),
                cause: format!("{} (tried {})", causes[0], pages.join(", ")),
            })
        }
        None => Err(BuildError::CudaWheel {
            package: package.to_string(),
            wanted: target.describe(),
            index: index.to_string(),
        }),
    }
}

/// The folder names the package may be under: as written, with `_`, with `-`.
fn variants(package: &str) -> Vec<String> {
    let mut v = vec![package.to_string()];
    for alt in [package.replace('-', "_"), package.replace('_', "-")] {
        if !v.contains(&alt) {
            v.push(alt);
        }
    }
    v
}

fn is_url(index: &str) -> bool {
    index.contains("://") && !index.starts_with("file://")
}

/// `(url, text)` of each wheel link on the package's page.
fn links(index: &str, package: &str) -> Result<Vec<(String, String)>, String> {
    let base = if index.ends_with('/') {
        index.to_string()
    } else {
        format!("{index}/")
    };
    if !is_url(index) {
        let dir = Path::new(base.strip_prefix("file://").unwrap_or(&base)).join(package);
        return folder_links(&dir);
    }
    let page_url = format!("{base}{package}/");
    let page = airlock_conda::fetch_text(&page_url).map_err(|e| format!("{page_url}: {e}"))?;
    Ok(parse_page(&page)
        .into_iter()
        .map(|(href, text)| {
            let url = if href.contains("://") {
                href
            } else {
                format!("{page_url}{href}")
            };
            (url, text)
        })
        .collect())
}

fn folder_links(dir: &Path) -> Result<Vec<(String, String)>, String> {
    let entries = fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut out: Vec<(String, String)> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "whl"))
        .map(|p| {
            let name = p
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            (format!("file://{}", p.display()), name)
        })
        .collect();
    out.sort();
    Ok(out)
}

/// `href="..."` and the anchor text of each `.whl` link of a PEP 503 page.
fn parse_page(html: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut rest = html;
    while let Some(at) = rest.find("href=\"") {
        rest = &rest[at + 6..];
        let Some(end) = rest.find('"') else { break };
        let href = &rest[..end];
        rest = &rest[end..];
        let text = rest
            .find('>')
            .and_then(|gt| {
                rest[gt + 1..]
                    .find('<')
                    .map(|lt| &rest[gt + 1..gt + 1 + lt])
            })
            .unwrap_or("")
            .trim();
        let path = href.split('#').next().unwrap_or(href);
        if path.ends_with(".whl") {
            out.push((href.to_string(), text.to_string()));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target() -> Target {
        Target {
            cuda: "12.8".into(),
            torch: "2.8".into(),
            python: "3.11".into(),
            arch: "x86_64".into(),
        }
    }

    #[test]
    fn pages_and_matches() {
        let html = r#"<a href="flash_attn-2.8.3%2Bcu128torch2.8-cp311-cp311-linux_x86_64.whl#sha256=ab">flash_attn-2.8.3+cu128torch2.8-cp311-cp311-linux_x86_64.whl</a>
<a href="https://x/flash_attn-2.8.3+cu128torch2.8-cp311-cp311-manylinux_2_28_x86_64.whl">flash_attn-2.8.3+cu128torch2.8-cp311-cp311-manylinux_2_28_x86_64.whl</a>
<a href="flash_attn-2.8.3+cu128torch2.8-cp312-cp312-linux_x86_64.whl">flash_attn-2.8.3+cu128torch2.8-cp312-cp312-linux_x86_64.whl</a>
<a href="flash_attn-2.8.3+cu124torch2.8-cp311-cp311-linux_aarch64.whl">x</a>"#;
        let links = parse_page(html);
        assert_eq!(links.len(), 4);
        assert!(links[0].0.ends_with("#sha256=ab"));
        let t = target();
        let ok: Vec<_> = links.iter().filter(|(_, x)| t.matches(x)).collect();
        assert_eq!(ok.len(), 2);
        assert!(t.matches("spconv-2.3+pt2.8cu128-cp311-cp311-manylinux_2_28_x86_64.whl"));
        assert!(!t.matches("spconv-2.3+pt2.8cu128-cp311-cp311-linux_aarch64.whl"));
        assert_eq!(variants("flash-attn"), ["flash-attn", "flash_attn"]);
        assert_eq!(variants("cc_torch"), ["cc_torch", "cc-torch"]);
    }

    #[test]
    fn a_folder_index_and_what_no_match_says() {
        let d = tempfile::tempdir().unwrap();
        let pkg = d.path().join("tiny_cuda");
        fs::create_dir_all(&pkg).unwrap();
        for name in [
            "tiny_cuda-1.0+cu128torch2.8-cp311-cp311-linux_x86_64.whl",
            "tiny_cuda-1.0+cu128torch2.8-cp311-cp311-manylinux_2_28_x86_64.whl",
            "tiny_cuda-1.0+cu124torch2.4-cp311-cp311-linux_x86_64.whl",
        ] {
            fs::write(pkg.join(name), b"").unwrap();
        }
        let index = d.path().display().to_string();
        let req = resolve("tiny-cuda", &target(), &index).unwrap();
        assert!(req.starts_with("tiny-cuda @ file://"), "{req}");
        assert!(req.ends_with("manylinux_2_28_x86_64.whl"), "{req}");
        let mut other = target();
        other.torch = "2.9".into();
        let e = resolve("tiny-cuda", &other, &index)
            .unwrap_err()
            .to_string();
        assert!(e.contains("no prebuilt wheel of tiny-cuda"), "{e}");
        assert!(
            e.contains("torch 2.9") && e.contains("+cu128") && e.contains("cp311"),
            "{e}"
        );
        assert!(e.contains(&index), "{e}");
    }
}
