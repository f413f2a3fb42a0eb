//! The `airlock` command: `build`, `doctor`, `plan`, `gc`.
//!
//! It lives in the extension module (`comfy_airlock.cli` calls [`cli_main`]) so that the CLI
//! and ComfyUI use the same builder, and no second binary has to be shipped per platform.
//! Results go to stdout, progress and errors to stderr. Exit status: 0 when everything asked
//! for is ready, 1 when a pack failed or is not ready, 2 for usage errors.

mod build;
mod doctor;
mod gc;
mod plan;

use std::env;
use std::path::{Path, PathBuf};

use airlock_env::{DiscoveredPack, EnvOptions, Home, UvLocator, discover_packs};
use clap::{Args, Parser, Subcommand};
use pyo3::prelude::*;

use build::build;
use doctor::doctor;
use gc::gc;
use plan::plan;

/// Environments for ComfyUI node packs isolated by comfy-airlock.
#[derive(Debug, Parser)]
#[command(name = "airlock", version)]
struct Cli {
    #[arg(
        long,
        global = true,
        value_name = "DIR",
        help = format!("Where environments live [default: {}]", airlock_env::HOME_DEFAULTS)
    )]
    home: Option<PathBuf>,
    #[arg(
        long,
        global = true,
        value_name = "PATH",
        help = format!("The uv binary to use [default: {}]", airlock_env::UV_DEFAULTS)
    )]
    uv: Option<PathBuf>,
    /// uv as found by the `uv` Python package (passed by comfy_airlock.cli).
    #[arg(long, global = true, hide = true, value_name = "PATH")]
    bundled_uv: Option<PathBuf>,
    /// The Python running the CLI (passed by comfy_airlock.cli): the default interpreter.
    #[arg(long, global = true, hide = true, value_name = "PATH")]
    host_python: Option<PathBuf>,
    /// The `comfy_airlock` package (passed by comfy_airlock.cli): part of the scan cache's key.
    #[arg(long, global = true, hide = true, value_name = "DIR")]
    airlock_package: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Build the environments of every pack, or of the named ones (names or folders)
    Build {
        #[command(flatten)]
        place: Place,
        /// Packs to build (default: every pack found)
        #[arg(value_name = "PACK")]
        packs: Vec<String>,
    },
    /// Report every pack: placement, config, environment, torch/CUDA and numpy inside it
    Doctor {
        #[command(flatten)]
        place: Place,
        /// Print the report as JSON
        #[arg(long)]
        json: bool,
    },
    /// Resolve each env's conda, PyPI and [cuda] requirements without installing anything
    Plan {
        #[command(flatten)]
        place: Place,
        /// Print the result as JSON
        #[arg(long)]
        json: bool,
        /// Packs (or `<pack>/<sub>` envs) to plan (default: every one found)
        #[arg(value_name = "PACK")]
        packs: Vec<String>,
    },
    /// List environments and caches no current pack uses (remove them with --delete)
    Gc {
        #[command(flatten)]
        place: Place,
        /// Remove what is listed (default: only list it)
        #[arg(long)]
        delete: bool,
    },
}

#[derive(Debug, Args)]
pub(crate) struct Place {
    /// ComfyUI's folder [default: the current folder if it holds main.py and comfy/, else
    /// $COMFYUI_DIR]
    #[arg(long, value_name = "DIR")]
    comfyui: Option<PathBuf>,
    /// The folder holding isolated_nodes/ and custom_nodes/ [default: the ComfyUI folder]
    #[arg(long, value_name = "DIR")]
    base: Option<PathBuf>,
}

impl Place {
    pub(crate) fn comfyui(&self) -> Option<PathBuf> {
        if let Some(d) = &self.comfyui {
            return Some(d.clone());
        }
        let cwd = env::current_dir().ok()?;
        if cwd.join("main.py").is_file() && cwd.join("comfy").is_dir() {
            return Some(cwd);
        }
        env::var_os("COMFYUI_DIR")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    }

    pub(crate) fn base(&self) -> Option<PathBuf> {
        self.base.clone().or_else(|| self.comfyui())
    }
}

pub(crate) const NO_BASE: &str = "airlock: cannot tell where ComfyUI is: run this in ComfyUI's folder, \
                       pass --comfyui DIR (or --base DIR), or set COMFYUI_DIR";

/// Runs the CLI with `argv` (program name first); returns the exit status. `interrupted` is
/// asked between packs (Ctrl-C in Python); `refresh` runs before each pack's build.
pub fn run(argv: Vec<String>, interrupted: &dyn Fn() -> bool, refresh: build::Refresh<'_>) -> i32 {
    let cli = match Cli::try_parse_from(argv) {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return e.exit_code();
        }
    };
    let Some(home) = Home::resolve(cli.home.as_deref()) else {
        eprintln!("airlock: {}", airlock_env::BuildError::NoHome);
        return 2;
    };
    let place = match &cli.command {
        Command::Build { place, .. }
        | Command::Doctor { place, .. }
        | Command::Plan { place, .. }
        | Command::Gc { place, .. } => place,
    };
    let opts = EnvOptions {
        home,
        comfyui_dir: place.comfyui(),
        host_python: cli.host_python.clone(),
        uv: UvLocator {
            explicit: cli.uv.clone(),
            from_package: cli.bundled_uv.clone(),
            host_python: cli.host_python.clone(),
        },
    };
    match &cli.command {
        Command::Build { place, packs } => build(&opts, place, packs, interrupted, refresh),
        Command::Doctor { place, json } => {
            doctor(&opts, place, *json, cli.airlock_package.as_deref())
        }
        Command::Plan { place, json, packs } => plan(&opts, place, packs, *json),
        Command::Gc { place, delete } => gc(&opts, place, *delete),
    }
}

pub(crate) fn discover(base: &Path) -> Vec<DiscoveredPack> {
    discover_packs(base, &airlock_env::packs_path_from_env())
}

pub(crate) fn where_packs_go(base: &Path) -> String {
    format!(
        "no packs found: put packs in {}, in a folder listed in {}, or give a pack in {} an \
         airlock.toml",
        base.join("isolated_nodes").display(),
        airlock_env::PACKS_PATH_ENV,
        base.join("custom_nodes").display()
    )
}

/// `comfy_airlock._native.cli_main(argv)`: runs `airlock` with the GIL released.
#[pyfunction]
pub fn cli_main(py: Python<'_>, argv: Vec<String>) -> i32 {
    let interrupted = || Python::attach(|py| py.check_signals().is_err());
    let refresh = |dir: &Path, name: &str| {
        Python::attach(|py| {
            let notices = || -> PyResult<Vec<String>> {
                let path = py.import("pathlib")?.getattr("Path")?.call1((dir,))?;
                py.import("comfy_airlock.isolated_toml")?
                    .call_method1("refresh_before_env", (path, name))?
                    .getattr("notices")?
                    .extract()
            };
            notices().unwrap_or_else(|e| {
                vec![format!(
                    "its airlock.toml could not be compared with its requirements: {e}"
                )]
            })
        })
    };
    crate::exit_gate::detach(py, || run(argv, &interrupted, &refresh))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_commands() {
        let c = Cli::try_parse_from(["airlock", "build", "--comfyui", "/c", "a", "b"]).unwrap();
        assert!(matches!(c.command, Command::Build { ref packs, .. } if packs.len() == 2));
        let c = Cli::try_parse_from(["airlock", "--home", "/h", "doctor", "--json"]).unwrap();
        assert!(matches!(c.command, Command::Doctor { json: true, .. }));
        let c = Cli::try_parse_from(["airlock", "gc", "--delete", "--base", "/b"]).unwrap();
        assert!(matches!(c.command, Command::Gc { delete: true, .. }));
        let c = Cli::try_parse_from(["airlock", "plan", "--json", "p/nodes"]).unwrap();
        assert!(
            matches!(c.command, Command::Plan { json: true, ref packs, .. } if packs.len() == 1)
        );
        assert!(Cli::try_parse_from(["airlock", "nope"]).is_err());
    }
}
