//! What a pack's worker may do at run time, as opposed to what its environment contains: a
//! per-call deadline, an optional Landlock sandbox, the types it may send with pickle, and
//! whether it starts with ComfyUI.
//!
//! ```toml
//! call-deadline = 300            # seconds; a call running longer fails (default: none)
//! pickle = ["datetime.datetime"] # types that may cross with pickle (default: none)
//! prestart = true                # start the worker with ComfyUI (default: at first need)
//! comfy-nodes = false            # do not import ComfyUI's own nodes before the pack (default: do)
//!
//! [sandbox]
//! enabled = true                 # default false
//! network = false                # default true
//! read = ["~/.cache/huggingface"]
//! write = ["scratch"]            # relative paths are inside the pack's folder
//! ```
//!
//! None of these keys changes the environment, so none of them is part of its hash: editing
//! them takes effect at the worker's next start without a rebuild.

use std::path::Path;
use std::time::Duration;

use serde::{Serialize, Serializer};
use toml::de::DeValue;

use crate::error::ConfigError;
use crate::toml_doc::{Doc, Value, sorted};

/// A pack's run-time policy; the default is what a pack that says nothing gets.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WorkerPolicy {
    /// How long one call may run; `None`: no deadline (liveness still applies).
    #[serde(serialize_with = "secs")]
    pub call_deadline: Option<Duration>,
    pub sandbox: Sandbox,
    /// `module.QualName` of each type that may cross with pickle, in both directions.
    pub pickle: Vec<String>,
    /// Start the worker (and import the pack) when ComfyUI starts, not when a prompt first
    /// needs it.
    pub prestart: bool,
    /// Import ComfyUI's own nodes and builtin extra nodes in the worker before the pack, as
    /// ComfyUI has before any custom node (ADR 0005); `false` for a pack that does not rely on
    /// them: its worker starts seconds sooner (ADR 0060).
    pub comfy_nodes: bool,
}

impl Default for WorkerPolicy {
    fn default() -> Self {
        WorkerPolicy {
            call_deadline: None,
            sandbox: Sandbox::default(),
            pickle: Vec::new(),
            prestart: false,
            comfy_nodes: true,
        }
    }
}

/// `[sandbox]`: Landlock rules the worker applies to itself before it imports the pack.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Sandbox {
    pub enabled: bool,
    /// Whether TCP connect and bind are allowed.
    pub network: bool,
    /// Extra paths readable (besides the env, the pack, ComfyUI and its folders). Absolute,
    /// or starting with `~` (expanded by the worker's host); relative ones were made absolute
    /// against the pack's folder.
    pub read: Vec<String>,
    /// Extra paths writable (besides ComfyUI's output and temp folders and the worker's own
    /// temp dir).
    pub write: Vec<String>,
}

impl Default for Sandbox {
    fn default() -> Self {
        Sandbox {
            enabled: false,
            network: true,
            read: Vec::new(),
            write: Vec::new(),
        }
    }
}

fn secs<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
    d.map(|d| d.as_secs_f64()).serialize(s)
}

/// Modules whose classes have effects when constructed (processes, files, sockets, code
/// objects, imports): a pickle naming one of them is a way to run code in the receiver, so
/// `pickle` may not list them. `comfy_airlock/values.py` refuses the same modules.
pub const PICKLE_DENIED_MODULES: &[&str] = &[
    "_ctypes",
    "_io",
    "_pickle",
    "builtins",
    "code",
    "codeop",
    "comfy_airlock",
    "copyreg",
    "ctypes",
    "gc",
    "importlib",
    "inspect",
    "io",
    "marshal",
    "multiprocessing",
    "nt",
    "os",
    "pickle",
    "posix",
    "pty",
    "runpy",
    "shutil",
    "signal",
    "socket",
    "subprocess",
    "sys",
    "tempfile",
    "types",
    "webbrowser",
];

/// `call-deadline`: a positive number of seconds.
pub(crate) fn call_deadline(
    doc: &Doc<'_>,
    key: &str,
    v: &Value<'_>,
) -> Result<Duration, ConfigError> {
    let (text, secs) = match v.get_ref() {
        DeValue::Integer(i) => (
            i.to_string(),
            i64::from_str_radix(i.as_str(), i.radix())
                .ok()
                .map(|n| n as f64),
        ),
        DeValue::Float(f) => (f.to_string(), f.as_str().parse::<f64>().ok()),
        _ => return Err(doc.wrong_type(key, v, "a number of seconds")),
    };
    match secs {
        Some(s) if s.is_finite() && s > 0.0 => {
            Duration::try_from_secs_f64(s).map_err(|_| doc.invalid(key, v, &text, "is too large"))
        }
        _ => Err(doc.invalid(key, v, &text, "must be a positive number of seconds")),
    }
}

/// `[sandbox]`.
pub(crate) fn sandbox(
    doc: &Doc<'_>,
    key: &str,
    v: &Value<'_>,
    pack_dir: &Path,
) -> Result<Sandbox, ConfigError> {
    let mut s = Sandbox::default();
    for (k, val) in sorted(doc.table(key, v)?) {
        let name = k.get_ref().as_ref();
        let full = format!("{key}.{name}");
        match name {
            "enabled" => s.enabled = doc.bool(&full, val)?,
            "network" => s.network = doc.bool(&full, val)?,
            "read" => s.read = paths(doc, &full, val, pack_dir)?,
            "write" => s.write = paths(doc, &full, val, pack_dir)?,
            _ => return Err(doc.unknown_key(k, Some(key))),
        }
    }
    Ok(s)
}

/// Paths as written, relative ones made absolute against the pack's folder; `~` stays for the
/// host to expand (the worker runs as the same user).
fn paths(
    doc: &Doc<'_>,
    key: &str,
    v: &Value<'_>,
    pack_dir: &Path,
) -> Result<Vec<String>, ConfigError> {
    doc.array(key, v, |item| {
        let p = doc.string(key, item)?;
        let p = p.trim();
        if p.is_empty() || p.contains('\0') {
            return Err(doc.invalid(key, item, p, "must be a non-empty path"));
        }
        if p == "~" || p.starts_with("~/") || p.starts_with('/') {
            return Ok(p.to_string());
        }
        if p.starts_with('~') {
            return Err(doc.invalid(key, item, p, "only `~/` (this user's home) is expanded"));
        }
        Ok(pack_dir.join(p).display().to_string())
    })
}

/// `pickle`: `module.QualName` names, outside [`PICKLE_DENIED_MODULES`].
pub(crate) fn pickle(doc: &Doc<'_>, key: &str, v: &Value<'_>) -> Result<Vec<String>, ConfigError> {
    doc.array(key, v, |item| {
        let name = doc.string(key, item)?;
        let name = name.trim();
        let parts: Vec<&str> = name.split('.').collect();
        let identifiers = parts.iter().all(|part| {
            let mut chars = part.chars();
            chars.next().is_some_and(|c| c.is_alphabetic() || c == '_')
                && chars.all(|c| c.is_alphanumeric() || c == '_')
        });
        if parts.len() < 2 || !identifiers {
            return Err(doc.invalid(
                key,
                item,
                name,
                "must be a type's `module.QualName`, e.g. `datetime.datetime`",
            ));
        }
        if PICKLE_DENIED_MODULES.contains(&parts[0]) {
            return Err(doc.invalid(
                key,
                item,
                name,
                "types of this module run code or touch files when unpickled; send them with \
                 a codec instead",
            ));
        }
        Ok(name.to_string())
    })
}

#[cfg(test)]
mod tests {
    use std::fs;

    use crate::config::PackConfig;
    use crate::error::ConfigError;

    use super::*;

    fn load(text: &str) -> (tempfile::TempDir, Result<PackConfig, ConfigError>) {
        let d = tempfile::Builder::new().prefix("pack").tempdir().unwrap();
        fs::write(d.path().join("airlock.toml"), text).unwrap();
        let c = PackConfig::load(d.path());
        (d, c)
    }

    #[test]
    fn all_keys() {
        let (d, c) = load(
            r#"
call-deadline = 2.5
pickle = ["datetime.datetime", "my_pack.types.Result"]
prestart = true
comfy-nodes = false

[sandbox]
enabled = true
network = false
read = ["/data/models", "~/.cache/huggingface", "~"]
write = ["scratch"]
"#,
        );
        let p = c.unwrap().policy;
        assert_eq!(p.call_deadline, Some(Duration::from_millis(2500)));
        assert_eq!(p.pickle, ["datetime.datetime", "my_pack.types.Result"]);
        assert!(p.prestart);
        assert!(!p.comfy_nodes);
        assert!(p.sandbox.enabled);
        assert!(!p.sandbox.network);
        assert_eq!(
            p.sandbox.read,
            ["/data/models", "~/.cache/huggingface", "~"]
        );
        assert_eq!(
            p.sandbox.write,
            [d.path().join("scratch").display().to_string()]
        );
    }

    #[test]
    fn integer_deadline_and_defaults() {
        let (_d, c) = load("call-deadline = 300\n");
        let p = c.unwrap().policy;
        assert_eq!(p.call_deadline, Some(Duration::from_secs(300)));
        assert_eq!(p.sandbox, Sandbox::default());
        assert!(!p.sandbox.enabled && p.sandbox.network);
        assert!(p.pickle.is_empty());
        assert!(!p.prestart);
        assert!(
            p.comfy_nodes,
            "ComfyUI's nodes are imported unless a pack says not"
        );

        let (_d, c) = load("[sandbox]\nenabled = true\n");
        let s = c.unwrap().policy.sandbox;
        assert!(s.enabled && s.network, "network stays on unless turned off");
        let (_d, c) = load("");
        assert_eq!(c.unwrap().policy, WorkerPolicy::default());
    }

    #[test]
    fn errors_name_file_line_and_key() {
        let cases = [
            (
                "call-deadline = \"10\"\n",
                1,
                "`call-deadline` must be a number of seconds, not string",
            ),
            ("call-deadline = 0\n", 1, "must be a positive number"),
            ("\ncall-deadline = -1.5\n", 2, "must be a positive number"),
            ("call-deadline = nan\n", 1, "must be a positive number"),
            ("call-deadline = inf\n", 1, "must be a positive number"),
            ("call-deadline = 1e300\n", 1, "is too large"),
            (
                "sandbox = true\n",
                1,
                "`sandbox` must be a table, not boolean",
            ),
            (
                "[sandbox]\nenabled = \"yes\"\n",
                2,
                "`sandbox.enabled` must be true or false, not string",
            ),
            (
                "[sandbox]\nnetwork = 0\n",
                2,
                "`sandbox.network` must be true or false, not integer",
            ),
            (
                "[sandbox]\nread = \"/data\"\n",
                2,
                "`sandbox.read` must be an array, not string",
            ),
            (
                "[sandbox]\nwrite = [\"\"]\n",
                2,
                "`sandbox.write` = \"\": must be a non-empty path",
            ),
            (
                "[sandbox]\nread = [\"~bob/x\"]\n",
                2,
                "only `~/` (this user's home) is expanded",
            ),
            (
                "pickle = \"datetime.datetime\"\n",
                1,
                "`pickle` must be an array",
            ),
            ("pickle = [\"Result\"]\n", 1, "module.QualName"),
            ("pickle = [\"my-pack.X\"]\n", 1, "module.QualName"),
            ("pickle = [\"os.system\"]\n", 1, "run code or touch files"),
            (
                "pickle = [\n  \"datetime.date\",\n  \"subprocess.Popen\",\n]\n",
                3,
                "run code or touch files",
            ),
            (
                "pickle = [\"builtins.eval\"]\n",
                1,
                "run code or touch files",
            ),
        ];
        for (text, line, needle) in cases {
            let (_d, c) = load(text);
            let msg = c.unwrap_err().to_string();
            assert!(
                msg.contains(&format!("airlock.toml:{line}: ")),
                "{text:?}: {msg}"
            );
            assert!(msg.contains(needle), "{text:?}: {msg}");
        }
    }

    #[test]
    fn unknown_key_in_sandbox_names_the_table() {
        let (d, c) = load("[sandbox]\nenabled = true\nnetwrok = false\n");
        let e = c.unwrap_err();
        match &e {
            ConfigError::UnknownKey {
                key, line, table, ..
            } => {
                assert_eq!(key, "netwrok");
                assert_eq!(*line, 3);
                assert_eq!(table.as_deref(), Some("sandbox"));
            }
            other => panic!("{other:?}"),
        }
        let msg = e.to_string();
        let folder = crate::config::folder_name(d.path());
        assert!(msg.starts_with(&format!("{folder}: ")), "{msg}");
        assert!(
            msg.ends_with("airlock.toml:3: unknown key `netwrok` in [sandbox]"),
            "{msg}"
        );
    }

    #[test]
    fn deadline_serializes_as_seconds() {
        let p = WorkerPolicy {
            call_deadline: Some(Duration::from_millis(1500)),
            ..WorkerPolicy::default()
        };
        let json = serde_json::to_value(&p).unwrap();
        assert_eq!(json["call_deadline"], 1.5);
        assert_eq!(json["sandbox"]["network"], true);
    }
}
