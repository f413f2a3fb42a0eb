//! `airlock doctor`: what this machine offers (home, ComfyUI, uv, NVML, Landlock), then every
//! pack's report, as text or JSON, with what to do about each pack that is not ready.

use std::path::Path;
use std::time::Duration;

use airlock_env::{EnvOptions, NodesState, PackReport, ReportState, Uv, nvml_present, report_pack};

use super::{NO_BASE, Place, discover, where_packs_go};

/// What this machine offers a pack, read once for the whole report.
struct Machine {
    uv: Option<Uv>,
    nvml: bool,
    landlock: Result<u32, String>,
}

pub(crate) fn doctor(opts: &EnvOptions, place: &Place, json: bool, runtime: Option<&Path>) -> i32 {
    let Some(base) = place.base() else {
        eprintln!("{NO_BASE}");
        return 2;
    };
    let machine = Machine {
        uv: opts.uv.locate().ok(),
        nvml: nvml_present(),
        landlock: airlock_sandbox::check(true).map_err(|e| e.to_string()),
    };
    let packs = discover(&base);
    let limit = Duration::from_secs(120);
    let reports: Vec<PackReport> = packs
        .iter()
        .map(|p| report_pack(p, opts, limit, runtime))
        .collect();
    let ready = reports.iter().all(|r| r.ready);
    if json {
        print_json(opts, &base, &machine, ready, &reports);
        return i32::from(!ready);
    }
    print_machine(opts, &machine);
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

fn print_json(opts: &EnvOptions, base: &Path, m: &Machine, ready: bool, reports: &[PackReport]) {
    let doc = serde_json::json!({
        "home": opts.home.root(),
        "comfyui": opts.comfyui_dir,
        "base": base,
        "uv": m.uv.as_ref().map(|u| serde_json::json!({"path": u.path, "version": u.version()})),
        "nvml": m.nvml,
        "landlock": match &m.landlock {
            Ok(abi) => serde_json::json!({"abi": abi, "network_rules": *abi >= 4}),
            Err(e) => serde_json::json!({"abi": 0, "error": e}),
        },
        "ready": ready,
        "packs": reports,
    });
    println!("{}", serde_json::to_string_pretty(&doc).unwrap_or_default());
}

fn print_machine(opts: &EnvOptions, m: &Machine) {
    println!("home     {}", opts.home.root().display());
    match &opts.comfyui_dir {
        Some(d) => println!("ComfyUI  {}", d.display()),
        None => println!("ComfyUI  unknown (packs that import ComfyUI cannot be checked)"),
    }
    match &m.uv {
        Some(u) => println!(
            "uv       {} ({})",
            u.path.display(),
            u.version().unwrap_or("unknown version")
        ),
        None => println!(
            "uv       not found: install the `uv` package or set {}",
            airlock_env::UV_ENV
        ),
    }
    println!(
        "NVML     {}",
        if m.nvml {
            "found (libnvidia-ml.so.1)"
        } else {
            "absent"
        }
    );
    // The sandbox a pack's `[sandbox]` asks for (ADR 0011): whether this kernel can give it.
    match &m.landlock {
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
    if !r.members.is_empty() {
        println!(
            "  packs      {} (a group: one env, one worker)",
            r.members.join(", ")
        );
    }
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
