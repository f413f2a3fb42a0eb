//! `airlock plan`: each env's requirements resolved, nothing installed (see
//! `airlock_env::dry_run`). Exit status 0 when every requirement of every env resolved, 1
//! otherwise (a refused config, or a requirement with an error).

use airlock_env::{DiscoveredPack, EnvDryRun, EnvOptions, Lines, Outcome, dry_run};

use super::{NO_BASE, Place, discover};

/// `airlock plan [PACK...]`: the packs found under `place`'s base, or a usage error.
pub(crate) fn plan(opts: &EnvOptions, place: &Place, names: &[String], json: bool) -> i32 {
    match place.base() {
        Some(base) => plan_found(opts, &discover(&base), names, json),
        None => {
            eprintln!("{NO_BASE}");
            2
        }
    }
}

fn plan_found(opts: &EnvOptions, found: &[DiscoveredPack], names: &[String], json: bool) -> i32 {
    let wanted = |p: &&DiscoveredPack| {
        names.is_empty()
            || names.iter().any(|n| {
                &p.name == n
                    || p.name.split('/').next() == Some(n.as_str())
                    || p.dir.file_name().is_some_and(|f| f == n.as_str())
            })
    };
    let progress = Lines(|line: &str| eprintln!("{line}"));
    let runs: Vec<EnvDryRun> = found
        .iter()
        .filter(wanted)
        .map(|p| dry_run(p, opts, &progress))
        .collect();
    if runs.is_empty() {
        eprintln!("airlock plan: no pack matches {}", names.join(", "));
        return 1;
    }
    let ok = runs.iter().all(EnvDryRun::resolved);
    if json {
        let doc = serde_json::json!({"resolved": ok, "envs": runs});
        println!("{}", serde_json::to_string_pretty(&doc).unwrap_or_default());
        return i32::from(!ok);
    }
    for r in &runs {
        print_run(r);
    }
    let bad = runs.iter().filter(|r| !r.resolved()).count();
    println!(
        "\n{} envs, {} fully resolved, {bad} not",
        runs.len(),
        runs.len() - bad
    );
    i32::from(!ok)
}

fn print_run(r: &EnvDryRun) {
    println!("\n{} ({})", r.name, r.dir.display());
    if let Some(f) = &r.config_file {
        println!("  config   {} ({})", f.display(), r.format.unwrap_or("?"));
    }
    if let Some(why) = &r.refused {
        println!("  REFUSED  {why}");
        return;
    }
    println!("  python   {}", r.python.as_deref().unwrap_or("?"));
    for (what, list) in [("conda", &r.conda), ("pypi", &r.pypi), ("cuda", &r.cuda)] {
        for o in list.iter() {
            print_outcome(what, o);
        }
    }
    for n in &r.notices {
        println!("  note     {n}");
    }
}

fn print_outcome(what: &str, o: &Outcome) {
    match (&o.resolved, &o.error) {
        (Some(v), _) => println!("  {what:<8} {} -> {v}", o.requirement),
        (None, Some(e)) => println!("  {what:<8} {} ERROR {e}", o.requirement),
        (None, None) => println!("  {what:<8} {}", o.requirement),
    }
}
