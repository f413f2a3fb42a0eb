//! The `airlock` command: `build`, `doctor`, `gc`.
//!
//! It lives in the extension module (`comfy_airlock.cli` calls [`cli_main`]) so that the CLI
//! and ComfyUI use the same builder, and no second binary has to be shipped per platform.
//! Results go to stdout, progress and errors to stderr. Exit status: 0 when everything asked
//! for is ready, 1 when a pack failed or is not ready, 2 for usage errors.

use std::env;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use airlock_env::{
    DiscoveredPack, EnvOptions, GcPlan, Home, Lines, NodesState, PackReport, Progress, ReportState,
    Spinner, UvLocator, discover_packs, ensure_env_at, nvml_present, plan_gc, report_pack,
    stderr_is_terminal,
};
use clap::{Args, Parser, Subcommand};
use pyo3::prelude::*;

/// Environments for ComfyUI node packs isolated by comfy-airlock.
#[derive(Debug, Parser)]
#[command(name = "airlock", version)]
struct Cli {
    /// Where environments live [default: $AIRLOCK_HOME, else
    /// $XDG_DATA_HOME/comfy-airlock, else ~/.local/share/comfy-airlock]
    #[arg(long, global = true, value_name = "DIR")]
    home: Option<PathBuf>,
    /// The uv binary to use [default: $AIRLOCK_UV, else the `uv` package's, else PATH]
    #[arg(long, global = true, value_name = "PATH")]
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
struct Place {
    /// ComfyUI's folder [default: the current folder if it holds main.py and comfy/, else
    /// $COMFYUI_DIR]
    #[arg(long, value_name = "DIR")]
    comfyui: Option<PathBuf>,
    /// The folder holding isolated_nodes/ and custom_nodes/ [default: the ComfyUI folder]
    #[arg(long, value_name = "DIR")]
    base: Option<PathBuf>,
}

impl Place {
    fn comfyui(&self) -> Option<PathBuf> {
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

    fn base(&self) -> Option<PathBuf> {
        self.base.clone().or_else(|| self.comfyui())
    }
}

const NO_BASE: &str = "airlock: cannot tell where ComfyUI is: run this in ComfyUI's folder, \
                       pass --comfyui DIR (or --base DIR), or set COMFYUI_DIR";

/// Runs the CLI with `argv` (program name first); returns the exit status. `interrupted` is
/// asked between packs (Ctrl-C in Python).
pub fn run(argv: Vec<String>, interrupted: &dyn Fn() -> bool) -> i32 {
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
        Command::Build { place, packs } => build(&opts, place, packs, interrupted),
        Command::Doctor { place, json } => {
            doctor(&opts, place, *json, cli.airlock_package.as_deref())
        }
        Command::Gc { place, delete } => gc(&opts, place, *delete),
    }
}

/// `AIRLOCK_PACKS_PATH`: more folders of packs, separated like `PATH`.
fn extra_roots() -> Vec<PathBuf> {
    env::var_os("AIRLOCK_PACKS_PATH")
        .map(|v| {
            env::split_paths(&v)
                .filter(|p| !p.as_os_str().is_empty())
                .collect()
        })
        .unwrap_or_default()
}

fn discover(base: &Path) -> Vec<DiscoveredPack> {
    discover_packs(base, &extra_roots())
}

fn where_packs_go(base: &Path) -> String {
    format!(
        "no packs found: put packs in {}, in a folder listed in AIRLOCK_PACKS_PATH, or give a \
         pack in {} an airlock.toml",
        base.join("isolated_nodes").display(),
        base.join("custom_nodes").display()
    )
}

fn build(
    opts: &EnvOptions,
    place: &Place,
    names: &[String],
    interrupted: &dyn Fn() -> bool,
) -> i32 {
    let base = place.base();
    let found = base.as_deref().map(discover).unwrap_or_default();
    let mut failed: Vec<String> = Vec::new();
    // (name, folder, config error) of each pack to build.
    type Todo = (String, PathBuf, Option<String>, Option<PathBuf>);
    let mut todo: Vec<Todo> = Vec::new();
    if names.is_empty() {
        let Some(base) = &base else {
            eprintln!("{NO_BASE}");
            return 2;
        };
        if found.is_empty() {
            println!("{}", where_packs_go(base));
            return 0;
        }
        for p in &found {
            if p.misplaced() {
                eprintln!("warning: {}", p.misplaced_message());
            }
            todo.push((
                p.name.clone(),
                p.dir.clone(),
                p.config.as_ref().err().map(|e| e.to_string()),
                comfy_env_file(p),
            ));
        }
    } else {
        for n in names {
            let by_name = found
                .iter()
                .find(|p| &p.name == n || p.dir.file_name().is_some_and(|f| f == n.as_str()));
            match by_name {
                Some(p) => todo.push((p.name.clone(), p.dir.clone(), None, comfy_env_file(p))),
                None if Path::new(n).is_dir() => {
                    let dir = Path::new(n)
                        .canonicalize()
                        .unwrap_or_else(|_| PathBuf::from(n));
                    todo.push((n.clone(), dir, None, None));
                }
                None => {
                    let known: Vec<&str> = found.iter().map(|p| p.name.as_str()).collect();
                    eprintln!(
                        "{n}: no such pack{} (known: {})",
                        base.as_ref()
                            .map(|b| format!(" under {}", b.display()))
                            .unwrap_or_default(),
                        if known.is_empty() {
                            "none".to_string()
                        } else {
                            known.join(", ")
                        }
                    );
                    failed.push(n.clone());
                }
            }
        }
    }
    let progress: Box<dyn Progress> = if stderr_is_terminal() {
        Box::new(Spinner::new())
    } else {
        Box::new(Lines(|line: &str| eprintln!("{line}")))
    };
    let (mut built, mut current) = (0, 0);
    for (name, dir, config_error, config_file) in todo {
        if interrupted() {
            eprintln!("airlock: interrupted");
            return 130;
        }
        if let Some(e) = config_error {
            eprintln!("{e}");
            failed.push(name);
            continue;
        }
        match ensure_env_at(&dir, config_file.as_deref(), opts, true, progress.as_ref()) {
            Ok(info) => {
                let how = if info.built {
                    built += 1;
                    "built"
                } else {
                    current += 1;
                    "up to date"
                };
                println!(
                    "{}: {how}: {} (Python {})",
                    info.name,
                    info.python.display(),
                    info.interpreter.version
                );
            }
            Err(e) => {
                eprintln!("{e}");
                failed.push(e.pack().to_string());
            }
        }
        let _ = std::io::stdout().flush();
    }
    let mut summary = format!("{built} built, {current} up to date");
    if !failed.is_empty() {
        summary.push_str(&format!(", {} failed: {}", failed.len(), failed.join(", ")));
    }
    println!("{summary}");
    i32::from(!failed.is_empty())
}

fn doctor(opts: &EnvOptions, place: &Place, json: bool, runtime: Option<&Path>) -> i32 {
    let Some(base) = place.base() else {
        eprintln!("{NO_BASE}");
        return 2;
    };
    let uv = opts.uv.locate().ok();
    let nvml = nvml_present();
    let landlock = airlock_sandbox::check(true);
    let packs = discover(&base);
    let limit = Duration::from_secs(120);
    let reports: Vec<PackReport> = packs
        .iter()
        .map(|p| report_pack(p, opts, limit, runtime))
        .collect();
    let ready = reports.iter().all(|r| r.ready);
    if json {
        let doc = serde_json::json!({
            "home": opts.home.root(),
            "comfyui": opts.comfyui_dir,
            "base": base,
            "uv": uv.as_ref().map(|u| serde_json::json!({"path": u.path, "version": u.version()})),
            "nvml": nvml,
            "landlock": match &landlock {
                Ok(abi) => serde_json::json!({"abi": abi, "network_rules": *abi >= 4}),
                Err(e) => serde_json::json!({"abi": 0, "error": e.to_string()}),
            },
            "ready": ready,
            "packs": reports,
        });
        println!("{}", serde_json::to_string_pretty(&doc).unwrap_or_default());
        return i32::from(!ready);
    }
    println!("home     {}", opts.home.root().display());
    match &opts.comfyui_dir {
        Some(d) => println!("ComfyUI  {}", d.display()),
        None => println!("ComfyUI  unknown (packs that import ComfyUI cannot be checked)"),
    }
    match &uv {
        Some(u) => println!(
            "uv       {} ({})",
            u.path.display(),
            u.version().unwrap_or("unknown version")
        ),
        None => println!("uv       not found: install the `uv` package or set AIRLOCK_UV"),
    }
    println!(
        "NVML     {}",
        if nvml {
            "found (libnvidia-ml.so.1)"
        } else {
            "absent"
        }
    );
    // The sandbox a pack's `[sandbox]` asks for (ADR 0011): whether this kernel can give it.
    match &landlock {
        Ok(abi) => println!(
            "Landlock ABI {abi}: {}",
            if *abi >= 4 {
                "files and network rules"
            } else {
                "file rules only; a pack with `network = false` cannot start"
            }
        ),
        Err(e) => println!("Landlock unavailable ({e}): a pack with `[sandbox]` cannot start"),
    }
    if reports.is_empty() {
        println!("\n{}", where_packs_go(&base));
        return 0;
    }
    for r in &reports {
        print_report(r);
    }
    let not_ready: Vec<&PackReport> = reports.iter().filter(|r| !r.ready).collect();
    println!();
    if not_ready.is_empty() {
        println!("all {} packs ready", reports.len());
        return 0;
    }
    // Each pack with what to do about its own cause (config, env, import), not one hint for all.
    println!("not ready:");
    for r in not_ready {
        println!(
            "  {}: {}",
            r.name,
            r.fix.as_deref().unwrap_or("see its problems above")
        );
    }
    1
}

/// The comfy-env config of a discovered env (a pack may have one env per file).
fn comfy_env_file(p: &airlock_env::DiscoveredPack) -> Option<PathBuf> {
    p.config
        .as_ref()
        .ok()
        .filter(|c| c.format == airlock_env::ConfigFormat::ComfyEnv)
        .map(|c| c.file.clone())
}

fn print_report(r: &PackReport) {
    let mark = if r.ready { "ok" } else { "NOT READY" };
    println!("\n{} [{}] {}", r.name, mark, r.dir.display());
    let placement = match (r.placement, r.opted_in) {
        (airlock_env::Placement::Managed, _) => "managed (ComfyUI does not import it)",
        (_, true) => "custom_nodes, opted in (its __init__.py calls register_nodes)",
        (_, false) => "custom_nodes, NOT opted in (ComfyUI imports it in-process)",
    };
    println!("  placement  {placement}");
    match (&r.config_file, r.config_ok) {
        (Some(f), true) => println!("  config     ok ({})", f.display()),
        _ => println!("  config     invalid"),
    }
    let env = match (&r.env, &r.env_dir) {
        (ReportState::Unknown, _) => "unknown".to_string(),
        (s, Some(d)) => format!("{} {}", s.as_str(), d.display()),
        (s, None) => s.as_str().to_string(),
    };
    println!("  env        {env}");
    if let (Some(py), Some(p)) = (&r.python, &r.probe) {
        println!(
            "  python     {} ({})",
            py.display(),
            p.python.as_deref().unwrap_or("?")
        );
        let torch = match (&p.torch, &p.torch_error) {
            (_, Some(e)) => format!("broken: {e}"),
            (Some(v), None) => format!(
                "{v} (CUDA {})",
                match (p.cuda_available, &p.cuda_version) {
                    (Some(true), Some(cv)) => format!("available, {cv}"),
                    (Some(true), None) => "available".to_string(),
                    (_, Some(cv)) => format!("not available; built for {cv}"),
                    _ => "not available; CPU build".to_string(),
                }
            ),
            (None, None) => "not installed".to_string(),
        };
        println!("  torch      {torch}");
        let numpy = match (&p.numpy, &p.numpy_error) {
            (_, Some(e)) => format!("broken: {e}"),
            (Some(v), None) => v.clone(),
            (None, None) => "not installed".to_string(),
        };
        println!("  numpy      {numpy}");
    }
    if let Some(nodes) = r.nodes {
        let scan = r.scan_file.as_deref().map(Path::display);
        let scan = scan.map(|p| format!(" ({p})")).unwrap_or_default();
        match nodes {
            NodesState::Read => println!("  nodes      read at ComfyUI's last start{scan}"),
            NodesState::Failed => println!("  nodes      FAILED to import{scan}"),
            NodesState::NotRead => {
                println!("  nodes      not read yet: ComfyUI reads them at its next start")
            }
        }
    }
    if let Some(log) = &r.log {
        println!("  build log  {}", log.display());
    }
    for n in &r.notices {
        println!("  note       {n}");
    }
    for p in &r.problems {
        for (i, line) in p.lines().enumerate() {
            println!(
                "  {} {line}",
                if i == 0 { "problem   " } else { "          " }
            );
        }
    }
}

fn gc(opts: &EnvOptions, place: &Place, delete: bool) -> i32 {
    let packs: Vec<PathBuf> = place
        .base()
        .map(|b| discover(&b).into_iter().map(|p| p.dir).collect())
        .unwrap_or_default();
    let plan: GcPlan = match plan_gc(opts, &packs) {
        Ok(p) => p,
        Err(e) => {
            eprintln!(
                "airlock gc: cannot scan {}: {e}",
                opts.home.root().display()
            );
            return 1;
        }
    };
    if plan.items.is_empty() {
        println!(
            "nothing to collect in {} ({} envs and {} resolutions in use)",
            opts.home.root().display(),
            plan.kept_envs,
            plan.kept_resolutions
        );
        return 0;
    }
    for i in &plan.items {
        println!(
            "{:<10} {:>10}  {}  ({})",
            i.kind.as_str(),
            human(i.size),
            i.path.display(),
            i.reason
        );
    }
    println!(
        "total {} in {} items; {} envs and {} resolutions in use are kept",
        human(plan.total_size()),
        plan.items.len(),
        plan.kept_envs,
        plan.kept_resolutions
    );
    if !delete {
        println!("dry run: nothing removed; run `airlock gc --delete` to remove these");
        return 0;
    }
    let mut failures = 0;
    for (item, result) in plan.delete(opts) {
        match result {
            Ok(()) => println!("removed {}", item.path.display()),
            Err(e) => {
                failures += 1;
                eprintln!("cannot remove {}: {e}", item.path.display());
            }
        }
    }
    i32::from(failures > 0)
}

/// Bytes as "12.3 MiB".
fn human(bytes: u64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < units.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.1} {}", units[u])
    }
}

/// `comfy_airlock._native.cli_main(argv)`: runs `airlock` with the GIL released.
#[pyfunction]
pub fn cli_main(py: Python<'_>, argv: Vec<String>) -> i32 {
    let interrupted = || Python::attach(|py| py.check_signals().is_err());
    py.detach(|| run(argv, &interrupted))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(human(512), "512 B");
        assert_eq!(human(1536), "1.5 KiB");
        assert_eq!(human(3 * 1024 * 1024 * 1024), "3.0 GiB");
    }

    #[test]
    fn parses_the_commands() {
        let c = Cli::try_parse_from(["airlock", "build", "--comfyui", "/c", "a", "b"]).unwrap();
        assert!(matches!(c.command, Command::Build { ref packs, .. } if packs.len() == 2));
        let c = Cli::try_parse_from(["airlock", "--home", "/h", "doctor", "--json"]).unwrap();
        assert!(matches!(c.command, Command::Doctor { json: true, .. }));
        let c = Cli::try_parse_from(["airlock", "gc", "--delete", "--base", "/b"]).unwrap();
        assert!(matches!(c.command, Command::Gc { delete: true, .. }));
        assert!(Cli::try_parse_from(["airlock", "nope"]).is_err());
    }
}
