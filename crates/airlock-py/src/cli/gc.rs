//! `airlock gc`: environments and caches no current pack uses, listed (a dry run) or removed.

use std::path::PathBuf;

use airlock_env::{EnvOptions, GcPlan, plan_gc};

use super::{Place, discover};

pub(crate) fn gc(opts: &EnvOptions, place: &Place, delete: bool) -> i32 {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(human(512), "512 B");
        assert_eq!(human(1536), "1.5 KiB");
        assert_eq!(human(3 * 1024 * 1024 * 1024), "3.0 GiB");
    }
}
