//! Solving a [`CondaRequest`]: the channels' indexes through rattler's gateway (cached in
//! `<cache>/repodata`), then the resolvo solver.

use std::path::Path;

use rattler_conda_types::{Channel, MatchSpec, Subdir};
use rattler_repodata_gateway::{Gateway, GatewayError};
use rattler_solve::{SolverImpl, SolverTask, resolvo};

use crate::error::{CondaError, chain};
use crate::lock::CondaLock;
use crate::request::CondaRequest;
use crate::{Report, block_on, channels, client, system};

/// Solves `req` for this platform. Reads (and caches under `cache_dir`) the channels' indexes;
/// an unreachable channel is an error naming it and the packages it was read for.
pub fn solve(
    req: &CondaRequest,
    cache_dir: &Path,
    report: &dyn Report,
) -> Result<CondaLock, CondaError> {
    let subdir = Subdir::current().ok_or_else(|| CondaError::Unsolvable {
        platform: std::env::consts::ARCH.to_string(),
        message: "conda has no platform for this machine".into(),
    })?;
    let config = channels::config(&req.root_dir)?;
    let names = req.all_channels();
    let channels: Vec<Channel> = names
        .iter()
        .map(|c| channels::parse(c, &config))
        .collect::<Result<_, _>>()?;
    let specs: Vec<MatchSpec> = req
        .specs
        .iter()
        .map(|s| s.match_spec())
        .collect::<Result<_, _>>()?;
    let virtual_packages = system::generic(&req.system)?;
    report.line(&format!(
        "solving {} conda package{} from {} for {}",
        specs.len(),
        if specs.len() == 1 { "" } else { "s" },
        names.join(", "),
        subdir.as_str()
    ));
    let gateway = Gateway::builder()
        .with_cache_dir(cache_dir.join("repodata"))
        .with_client(client::client())
        .finish();
    let platforms = [subdir, Subdir::NoArch];
    let query = |chs: Vec<Channel>| {
        gateway
            .query(chs, platforms, specs.clone())
            .recursive(true)
            .execute()
    };
    let output = match block_on(query(channels.clone()))? {
        Ok(o) => o,
        Err(e) => {
            // Which channel failed: each one alone (what was read is cached by now).
            for (name, ch) in names.iter().zip(&channels) {
                if let Err(one) = block_on(query(vec![ch.clone()]))? {
                    return Err(unreachable(req, name, ch, &one));
                }
            }
            return Err(unreachable(req, &names.join(", "), &channels[0], &e));
        }
    };
    let n: usize = output.repodata.iter().map(|r| r.len()).sum();
    report.line(&format!("read {n} candidate records"));
    let task = SolverTask {
        virtual_packages,
        specs,
        ..SolverTask::from_iter(output.repodata.iter().map(|r| r.iter()))
    };
    let solved = resolvo::Solver
        .solve(task)
        .map_err(|e| CondaError::Unsolvable {
            platform: subdir.as_str().to_string(),
            message: e.to_string(),
        })?;
    report.line(&format!("solved: {} conda packages", solved.records.len()));
    Ok(CondaLock::new(subdir.as_str(), solved.records))
}

fn unreachable(req: &CondaRequest, name: &str, ch: &Channel, e: &GatewayError) -> CondaError {
    let mut packages = req.packages_from(name);
    if packages.is_empty() {
        packages = req.specs.iter().map(|s| s.name.clone()).collect();
    }
    CondaError::Unreachable {
        channel: name.to_string(),
        url: ch.base_url.to_string(),
        packages: packages.join(", "),
        cause: chain(e),
    }
}
