//! The two content keys: the inputs hash, which names a resolution, and the env key, which
//! names an environment.
//!
//! The inputs hash covers everything that decides what uv resolves: the Python request and
//! the interpreter that met it, the requirements (normalized and sorted, ComfyUI's included),
//! the indexes and find-links, and the platform. Its resolution is cached, so a ComfyUI start
//! with unchanged packs runs neither uv nor anything on the network.
//!
//! The env key covers what decides what is installed: the lock text (exact pins and the index
//! lines uv emitted into it), the interpreter's implementation and full version, and the
//! platform. Two packs whose requirements resolve to the same lock share one environment, and a
//! changed requirement that resolves to the same pins rebuilds nothing.

use crate::hash::ContentHash;
use crate::interpreter::Interpreter;
use crate::requirement;

/// Length of an env key (hex characters): 80 bits.
pub const ENV_KEY_LEN: usize = 20;

/// Everything that decides a resolution.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inputs {
    pub python_request: Option<String>,
    pub interpreter: Interpreter,
    /// The pack's requirements, as written.
    pub pack_requirements: Vec<String>,
    /// ComfyUI's core requirements, when the pack needs them.
    pub comfy_requirements: Vec<String>,
    pub index_url: Option<String>,
    pub extra_index_urls: Vec<String>,
    pub find_links: Vec<String>,
    /// Versions uv must keep to if it installs the project (the host's torch family).
    pub constraints: Vec<String>,
    /// Inputs of the conda and `[cuda]` steps, one line each (channels, specs, system
    /// requirements, wheel index, host torch and CUDA); empty for a PyPI-only env.
    pub extra: Vec<String>,
}

impl Inputs {
    /// All requirements, the pack's first.
    pub fn requirements(&self) -> impl Iterator<Item = &String> {
        self.pack_requirements
            .iter()
            .chain(&self.comfy_requirements)
    }

    /// The requirements file handed to `uv pip compile`.
    pub fn requirements_in(&self) -> String {
        let mut s = String::new();
        for r in self.requirements() {
            s.push_str(r);
            s.push('\n');
        }
        s
    }

    /// The constraints file's text (`uv pip compile --constraint`); `None` without any.
    pub fn constraints_txt(&self) -> Option<String> {
        if self.constraints.is_empty() {
            return None;
        }
        Some(self.constraints.iter().map(|l| format!("{l}\n")).collect())
    }

    /// uv's index and find-links arguments for these inputs.
    pub fn index_args(&self) -> Vec<std::ffi::OsString> {
        let mut args = Vec::new();
        if let Some(url) = &self.index_url {
            args.extend(["--index-url".into(), url.into()]);
        }
        for url in &self.extra_index_urls {
            args.extend(["--extra-index-url".into(), url.into()]);
        }
        for link in &self.find_links {
            args.extend(["--find-links".into(), link.into()]);
        }
        args
    }

    /// The inputs hash, 64 hex characters.
    pub fn hash(&self) -> String {
        let mut reqs: Vec<String> = self
            .requirements()
            .map(|r| requirement::normalize(r))
            .collect();
        reqs.sort();
        reqs.dedup();
        let i = &self.interpreter;
        let mut h = ContentHash::new("airlock-inputs-v1");
        h.opt("python-request", self.python_request.as_deref())
            .field("implementation", &i.implementation)
            .field("version", &i.version)
            .field("platform", &i.platform)
            .field("abiflags", &i.abiflags)
            .list("requirements", &reqs)
            .opt("index-url", self.index_url.as_deref())
            .list("extra-index-urls", &self.extra_index_urls)
            .list("find-links", &self.find_links);
        // Added only when present, so that the hashes of PyPI-only envs stay what they were.
        if !self.constraints.is_empty() {
            h.list("constraints", &self.constraints);
        }
        if !self.extra.is_empty() {
            h.list("extra", &self.extra);
        }
        h.hex()
    }
}

/// The env key of a lock resolved for `interpreter`.
pub fn env_key(lock_text: &str, interpreter: &Interpreter) -> String {
    let mut key = ContentHash::new("airlock-env-v1")
        .field("lock", lock_text)
        .field("implementation", &interpreter.implementation)
        .field("version", &interpreter.version)
        .field("platform", &interpreter.platform)
        .field("abiflags", &interpreter.abiflags)
        .hex();
    key.truncate(ENV_KEY_LEN);
    key
}

/// The number of packages a lock pins (lines that are neither comments nor options).
pub fn lock_packages(lock_text: &str) -> usize {
    lock_text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#') && !l.starts_with('-'))
        .count()
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    fn interp(version: &str) -> Interpreter {
        Interpreter {
            path: PathBuf::from("/usr/bin/python3"),
            implementation: "cpython".into(),
            version: version.into(),
            platform: "linux-x86_64".into(),
            abiflags: String::new(),
        }
    }

    fn inputs() -> Inputs {
        Inputs {
            python_request: Some("3.10".into()),
            interpreter: interp("3.10.13"),
            pack_requirements: vec!["six".into(), "Numpy >= 1.25".into()],
            comfy_requirements: vec![],
            index_url: None,
            extra_index_urls: vec![],
            find_links: vec![],
            constraints: vec![],
            extra: vec![],
        }
    }

    #[test]
    fn inputs_hash_is_stable_across_cosmetic_changes() {
        let a = inputs();
        let mut b = inputs();
        b.pack_requirements = vec!["numpy>=1.25".into(), "six".into(), "six".into()];
        b.interpreter.path = PathBuf::from("/elsewhere/python3.10");
        assert_eq!(a.hash(), b.hash());
        // Pinned: changing what goes into the hash must change the domain's version.
        assert_eq!(a.hash(), inputs().hash());
    }

    #[test]
    fn inputs_hash_sees_every_input() {
        let base = inputs().hash();
        let variants: Vec<fn(&mut Inputs)> = vec![
            |i| i.python_request = None,
            |i| i.interpreter.version = "3.10.14".into(),
            |i| i.interpreter.platform = "linux-aarch64".into(),
            |i| i.interpreter.implementation = "pypy".into(),
            |i| i.pack_requirements.push("idna".into()),
            |i| i.pack_requirements[0] = "six==1.16".into(),
            |i| i.comfy_requirements.push("torch".into()),
            |i| i.index_url = Some("https://x/simple".into()),
            |i| i.extra_index_urls.push("https://y".into()),
            |i| i.find_links.push("/wheels".into()),
            |i| i.constraints.push("torch==2.15.0".into()),
            |i| i.extra.push("conda: cgal *".into()),
        ];
        for (n, change) in variants.iter().enumerate() {
            let mut i = inputs();
            change(&mut i);
            assert_ne!(i.hash(), base, "variant {n} did not change the hash");
        }
    }

    #[test]
    fn env_key_follows_lock_and_interpreter() {
        let lock = "--index-url https://pypi.org/simple\n\nsix==1.17.0\n";
        let k = env_key(lock, &interp("3.10.13"));
        assert_eq!(k.len(), ENV_KEY_LEN);
        assert_eq!(k, env_key(lock, &interp("3.10.13")));
        assert_ne!(k, env_key("six==1.16.0\n", &interp("3.10.13")));
        assert_ne!(k, env_key(lock, &interp("3.10.14")));
        assert_eq!(lock_packages(lock), 1);
    }
}
