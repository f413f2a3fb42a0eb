//! Pack configs, discovery and environments for Python (`comfy_airlock.env` wraps these).
//!
//! Builds run with the GIL released: a build can take minutes, and ComfyUI's other threads
//! (its web server) must keep running meanwhile. Progress comes back through the caller's
//! callable, or a spinner on a terminal.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use airlock_env::{
    DiscoveredPack, EnvError as CoreEnvError, EnvInfo, EnvOptions, Home, PackConfig, Progress,
    Silent, Spinner, UvLocator, WorkerPolicy, stderr_is_terminal,
};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use crate::errors::{ConfigError, EnvError, EnvMissing};

/// The Python exception for an environment error, with `pack`, `requirement`, `log_path` and
/// `uv_message` attributes.
pub fn env_error(py: Python<'_>, e: &CoreEnvError) -> PyErr {
    let msg = e.to_string();
    let err = match e {
        CoreEnvError::Config(_) => ConfigError::new_err(msg),
        _ if e.is_missing() => EnvMissing::new_err(msg),
        _ => EnvError::new_err(msg),
    };
    let v = err.value(py);
    let _ = v.setattr("pack", e.pack());
    let _ = v.setattr("requirement", e.requirement());
    let _ = v.setattr("log_path", e.log().map(|p| p.display().to_string()));
    let _ = v.setattr("uv_message", e.uv_message().map(<[String]>::to_vec));
    err
}

fn path_str(p: &Path) -> String {
    p.display().to_string()
}

fn map<'py>(py: Python<'py>, m: &BTreeMap<String, String>) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    for (k, v) in m {
        d.set_item(k, v)?;
    }
    Ok(d)
}

/// A config as a dict (the keys of `comfy_airlock.env.PackConfig`).
pub fn config_dict<'py>(py: Python<'py>, c: &PackConfig) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("name", &c.name)?;
    d.set_item("dir", path_str(&c.dir))?;
    d.set_item("file", path_str(&c.file))?;
    d.set_item("format", c.format.file_name())?;
    d.set_item("python", &c.python)?;
    d.set_item("dependencies", &c.dependencies)?;
    d.set_item(
        "requirements_file",
        c.requirements_file.as_deref().map(path_str),
    )?;
    d.set_item("index_url", &c.index_url)?;
    d.set_item("extra_index_urls", &c.extra_index_urls)?;
    d.set_item("find_links", &c.find_links)?;
    d.set_item("env_vars", map(py, &c.env_vars)?)?;
    d.set_item("entry", &c.entry)?;
    d.set_item("members", &c.members)?;
    d.set_item("comfy", c.comfy)?;
    d.set_item(
        "conda",
        c.conda.as_ref().map(|k| {
            k.dependencies
                .iter()
                .map(|s| s.match_spec_text())
                .collect::<Vec<_>>()
        }),
    )?;
    d.set_item(
        "channels",
        c.conda
            .as_ref()
            .map(|k| k.channels.clone())
            .unwrap_or_default(),
    )?;
    d.set_item("cuda_packages", &c.cuda_packages)?;
    d.set_item("notices", &c.notices)?;
    policy_items(py, &d, &c.policy)?;
    Ok(d)
}

fn pack_dict<'py>(py: Python<'py>, p: &DiscoveredPack) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("name", &p.name)?;
    d.set_item("dir", path_str(&p.dir))?;
    d.set_item("placement", p.placement.as_str())?;
    d.set_item("opted_in", p.opted_in)?;
    match &p.config {
        Ok(c) => {
            d.set_item("config", config_dict(py, c)?)?;
            d.set_item("error", py.None())?;
        }
        Err(e) => {
            d.set_item("config", py.None())?;
            d.set_item("error", e.to_string())?;
        }
    }
    Ok(d)
}

fn info_dict<'py>(py: Python<'py>, i: &EnvInfo) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("name", &i.name)?;
    d.set_item("pack_dir", path_str(&i.pack_dir))?;
    d.set_item("python", path_str(&i.python))?;
    d.set_item("env_dir", path_str(&i.env_dir))?;
    d.set_item("key", &i.key)?;
    d.set_item("lock_path", path_str(&i.lock_path))?;
    d.set_item("log_path", path_str(&i.log_path))?;
    d.set_item("built", i.built)?;
    d.set_item("env_vars", map(py, &i.env_vars)?)?;
    d.set_item("entry", &i.entry)?;
    d.set_item("members", &i.members)?;
    d.set_item("comfy", i.comfy)?;
    d.set_item("python_version", &i.interpreter.version)?;
    d.set_item("conda", i.conda)?;
    d.set_item("notices", &i.notices)?;
    policy_items(py, &d, &i.policy)?;
    Ok(d)
}

/// `call_deadline` (seconds or None), `sandbox` (a dict), `pickle` (a list of names),
/// `prestart` and `comfy_nodes`.
fn policy_items(py: Python<'_>, d: &Bound<'_, PyDict>, p: &WorkerPolicy) -> PyResult<()> {
    d.set_item("call_deadline", p.call_deadline.map(|t| t.as_secs_f64()))?;
    let s = PyDict::new(py);
    s.set_item("enabled", p.sandbox.enabled)?;
    s.set_item("network", p.sandbox.network)?;
    s.set_item("read", &p.sandbox.read)?;
    s.set_item("write", &p.sandbox.write)?;
    d.set_item("sandbox", s)?;
    d.set_item("pickle", &p.pickle)?;
    d.set_item("prestart", p.prestart)?;
    d.set_item("comfy_nodes", p.comfy_nodes)?;
    Ok(())
}

/// Reads the config of the pack in `pack_dir`.
/// The modules `pickle = [...]` may never name (one list for the config check and the codec).
#[pyfunction]
pub fn pickle_denied_modules() -> Vec<&'static str> {
    airlock_env::PICKLE_DENIED_MODULES.to_vec()
}

#[pyfunction]
#[pyo3(signature = (pack_dir, config = None))]
pub fn pack_config<'py>(
    py: Python<'py>,
    pack_dir: PathBuf,
    config: Option<PathBuf>,
) -> PyResult<Bound<'py, PyDict>> {
    match airlock_env::load_config(&pack_dir, config.as_deref()) {
        Ok(c) => config_dict(py, &c),
        Err(e) => Err(env_error(py, &e)),
    }
}

/// The packs under `<base_dir>/isolated_nodes/`, `extra_roots` and `<base_dir>/custom_nodes/`.
#[pyfunction]
#[pyo3(signature = (base_dir, extra_roots = Vec::new()))]
pub fn discover_packs<'py>(
    py: Python<'py>,
    base_dir: PathBuf,
    extra_roots: Vec<PathBuf>,
) -> PyResult<Bound<'py, PyList>> {
    let packs =
        crate::exit_gate::detach(py, || airlock_env::discover_packs(&base_dir, &extra_roots));
    let list = PyList::empty(py);
    for p in &packs {
        list.append(pack_dict(py, p)?)?;
    }
    Ok(list)
}

/// Calls a Python callable with each progress line.
struct PyProgress(Py<PyAny>);

impl Progress for PyProgress {
    fn phase(&self, pack: &str, phase: &str) {
        let line = format!("{pack}: {phase}");
        // Builds may report from threads of their own: none attaches once Python exits.
        crate::exit_gate::with_python(|py| {
            if let Err(e) = self.0.call1(py, (line,)) {
                e.write_unraisable(py, Some(self.0.bind(py)));
            }
        });
    }
}

/// The interpreter running this module (`sys.executable`).
fn running_python(py: Python<'_>) -> Option<PathBuf> {
    let exe: String = py
        .import("sys")
        .ok()?
        .getattr("executable")
        .ok()?
        .extract()
        .ok()?;
    (!exe.is_empty()).then(|| PathBuf::from(exe))
}

/// Makes sure the pack in `pack_dir` has its environment; see `comfy_airlock.env.ensure_env`.
#[pyfunction]
#[pyo3(signature = (
    pack_dir, *, comfyui_dir = None, home = None, uv = None, host_python = None, build = true,
    progress = None, config = None
))]
#[allow(clippy::too_many_arguments)]
pub fn ensure_env<'py>(
    py: Python<'py>,
    pack_dir: PathBuf,
    comfyui_dir: Option<PathBuf>,
    home: Option<PathBuf>,
    uv: Option<PathBuf>,
    host_python: Option<PathBuf>,
    build: bool,
    progress: Option<Py<PyAny>>,
    config: Option<PathBuf>,
) -> PyResult<Bound<'py, PyDict>> {
    let host_python = host_python.or_else(|| running_python(py));
    let Some(home) = Home::resolve(home.as_deref()) else {
        let pack = airlock_env::BuildError::NoHome;
        let folder = pack_dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned());
        return Err(EnvError::new_err(format!(
            "{}: {pack}",
            folder.unwrap_or_default()
        )));
    };
    let opts = EnvOptions {
        home,
        comfyui_dir: comfyui_dir.or_else(|| std::env::var_os("COMFYUI_DIR").map(PathBuf::from)),
        uv: UvLocator {
            explicit: uv,
            from_package: None,
            host_python: host_python.clone(),
        },
        host_python,
    };
    let reporter: Box<dyn Progress> = match progress {
        Some(cb) => Box::new(PyProgress(cb)),
        None if stderr_is_terminal() => Box::new(Spinner::new()),
        None => Box::new(Silent),
    };
    let result = crate::exit_gate::detach(py, || {
        airlock_env::ensure_env_at(
            &pack_dir,
            config.as_deref(),
            &opts,
            build,
            reporter.as_ref(),
        )
    });
    match result {
        Ok(info) => info_dict(py, &info),
        Err(e) => Err(env_error(py, &e)),
    }
}

/// The `comfy-env.toml` files of the pack in `pack_dir` as comfy-env binds them (each its own
/// env): `nodes/comfy-env.toml`, else each `nodes/<sub>/comfy-env.toml`.
#[pyfunction]
pub fn comfy_env_configs(pack_dir: PathBuf) -> Vec<String> {
    airlock_env::comfy_env_configs(&pack_dir)
        .iter()
        .map(|p| path_str(p))
        .collect()
}

/// The scan cache's key for a pack with the env `env_key` (`comfy_airlock.host.scan_cache`);
/// `airlock doctor` computes the same key to find what ComfyUI's last start cached.
#[pyfunction]
#[pyo3(signature = (pack_dir, env_key, comfyui_dir=None, runtime_dir=None))]
pub fn scan_key(
    py: Python<'_>,
    pack_dir: PathBuf,
    env_key: &str,
    comfyui_dir: Option<PathBuf>,
    runtime_dir: Option<PathBuf>,
) -> PyResult<String> {
    crate::exit_gate::detach(py, || {
        airlock_env::scan_key(
            &pack_dir,
            env_key,
            comfyui_dir.as_deref(),
            runtime_dir.as_deref(),
            airlock_wire::PROTOCOL_VERSION,
        )
    })
    .map_err(PyErr::from)
}
