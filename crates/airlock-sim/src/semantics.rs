//! How a process's free-memory reading relates to a card's bookings: device-wide (Linux) or a
//! per-process budget (Windows WDDM), chosen when a card is created and stored in its header.
//!
//! The WDDM parameters are the seed's measurements (RTX 4060 Ti 16 GB, Windows 11, driver
//! 581.57): a budget pinned at the process's own start reads 583 MB below the device's true free
//! memory, one set by a re-partition 533 MB above it. Both are kept as parameters, not baked in,
//! because they were measured on one card and driver. See `docs/adr/0008-wddm-simulation.md`.
//!
//! A card's semantics are spelled `device_wide`, `wddm`, or `wddm:` followed by `key=value`
//! pairs overriding the seed's figures, e.g. `wddm:pinned_bias=-583MiB,repartition_below=1GiB`.
//! Tests pick the semantics of the cards they create with [`SIM_SEMANTICS_ENV`], so one suite
//! runs on both.

use std::fmt;

use crate::error::SimError;

/// The environment variable with the semantics of cards created without explicit ones (unset:
/// device-wide).
pub const SIM_SEMANTICS_ENV: &str = "AIRLOCK_SIM_SEMANTICS";

const MIB: i64 = 1 << 20;

/// The per-process budget of Windows WDDM, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WddmParams {
    /// Reading minus true free memory while a process's budget is the one set at its own start
    /// (pinned). Seed: −583 MB, four reproductions, independent of the caller's own usage.
    pub pinned_bias: i64,
    /// Reading minus true free memory just after a re-partition set the budget. Seed: about
    /// +533 MB.
    pub repartition_bias: i64,
    /// An allocation that leaves the device's true free memory below this many bytes
    /// re-partitions every budget; 0: never. Unmeasured: the seed saw no re-partition with
    /// 1,331 MB free, nor with 109 MB free, so the default is off.
    pub repartition_below: u64,
}

impl WddmParams {
    /// The seed's measurements (MB read as MiB, the unit torch and nvidia-smi report).
    pub const SEED: WddmParams = WddmParams {
        pinned_bias: -583 * MIB,
        repartition_bias: 533 * MIB,
        repartition_below: 0,
    };
}

impl Default for WddmParams {
    fn default() -> WddmParams {
        WddmParams::SEED
    }
}

/// How a process's free-memory reading relates to the card's bookings. [`crate::SimGpu::free`]
/// is always the device's truth (what NVML reports); [`crate::SimGpu::free_seen_by`] is what a
/// process's `torch.cuda.mem_get_info` reads, and depends on this.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Semantics {
    /// Linux: every process sees every allocation; a reading is `total - used`.
    #[default]
    DeviceWide,
    /// Windows WDDM: a process's reading debits its own allocations 1:1 and is blind to other
    /// processes' until a re-partition (a process attaching or exiting, or an allocation taking
    /// true free memory below [`WddmParams::repartition_below`]). Growth past the card's total
    /// never fails: it demotes other processes' memory to shared system memory, which is
    /// counted per process.
    Wddm(WddmParams),
}

impl Semantics {
    /// WDDM with the seed's measured biases.
    pub const WDDM: Semantics = Semantics::Wddm(WddmParams::SEED);

    pub(crate) fn code(self) -> u32 {
        match self {
            Semantics::DeviceWide => 0,
            Semantics::Wddm(_) => 1,
        }
    }

    pub(crate) fn params(self) -> (i64, i64, u64) {
        match self {
            Semantics::DeviceWide => (0, 0, 0),
            Semantics::Wddm(p) => (p.pinned_bias, p.repartition_bias, p.repartition_below),
        }
    }

    /// From a header's code and parameters. Unknown codes come only from another layout, which
    /// `open` refuses by version.
    pub(crate) fn from_header(code: u32, params: (i64, i64, u64)) -> Semantics {
        match code {
            1 => Semantics::Wddm(WddmParams {
                pinned_bias: params.0,
                repartition_bias: params.1,
                repartition_below: params.2,
            }),
            _ => Semantics::DeviceWide,
        }
    }

    /// `"device_wide"` or `"wddm"`, without parameters.
    pub fn as_str(self) -> &'static str {
        match self {
            Semantics::DeviceWide => "device_wide",
            Semantics::Wddm(_) => "wddm",
        }
    }

    /// Parses `device_wide`, `wddm`, or `wddm:key=value,...` (keys `pinned_bias`,
    /// `repartition_bias`, `repartition_below`; values in bytes, optionally suffixed `KiB`,
    /// `MiB` or `GiB`, biases signed).
    pub fn parse(spec: &str) -> Result<Semantics, SimError> {
        let bad = |reason: String| SimError::BadSemantics {
            spec: spec.to_owned(),
            reason,
        };
        let (kind, args) = match spec.trim().split_once(':') {
            Some((k, a)) => (k.trim(), Some(a)),
            None => (spec.trim(), None),
        };
        match (kind, args) {
            ("device_wide", None) => Ok(Semantics::DeviceWide),
            ("device_wide", Some(_)) => Err(bad("device_wide takes no parameters".into())),
            ("wddm", args) => {
                let mut p = WddmParams::SEED;
                for pair in args
                    .unwrap_or("")
                    .split(',')
                    .filter(|s| !s.trim().is_empty())
                {
                    let (key, value) = pair
                        .split_once('=')
                        .ok_or_else(|| bad(format!("{pair:?} is not key=value")))?;
                    let key = key.trim();
                    if !matches!(
                        key,
                        "pinned_bias" | "repartition_bias" | "repartition_below"
                    ) {
                        return Err(bad(format!("unknown parameter {key:?}")));
                    }
                    let n = parse_bytes(value.trim()).ok_or_else(|| {
                        bad(format!("{value:?} is not a byte count (like -583MiB)"))
                    })?;
                    match key {
                        "pinned_bias" => p.pinned_bias = n,
                        "repartition_bias" => p.repartition_bias = n,
                        _ => {
                            p.repartition_below = u64::try_from(n)
                                .map_err(|_| bad("repartition_below is negative".into()))?;
                        }
                    }
                }
                Ok(Semantics::Wddm(p))
            }
            _ => Err(bad("expected device_wide or wddm[:key=value,...]".into())),
        }
    }

    /// The semantics named by [`SIM_SEMANTICS_ENV`]; device-wide when it is unset or empty.
    pub fn from_env() -> Result<Semantics, SimError> {
        match std::env::var(SIM_SEMANTICS_ENV) {
            Ok(v) if !v.trim().is_empty() => Semantics::parse(&v),
            _ => Ok(Semantics::DeviceWide),
        }
    }
}

/// The spelling [`Semantics::parse`] reads back, parameters in bytes.
impl fmt::Display for Semantics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Semantics::DeviceWide => f.write_str("device_wide"),
            Semantics::Wddm(p) => write!(
                f,
                "wddm:pinned_bias={},repartition_bias={},repartition_below={}",
                p.pinned_bias, p.repartition_bias, p.repartition_below
            ),
        }
    }
}

/// A signed byte count with an optional binary suffix.
fn parse_bytes(s: &str) -> Option<i64> {
    let (num, unit) = [("GiB", 1i64 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)]
        .iter()
        .find_map(|(suffix, unit)| s.strip_suffix(suffix).map(|n| (n.trim(), *unit)))
        .unwrap_or((s, 1));
    num.parse::<i64>().ok()?.checked_mul(unit)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spellings_parse_and_round_trip() {
        assert_eq!(
            Semantics::parse("device_wide").unwrap(),
            Semantics::DeviceWide
        );
        assert_eq!(Semantics::parse(" wddm ").unwrap(), Semantics::WDDM);
        let s = Semantics::parse("wddm:pinned_bias=-1GiB, repartition_below=512MiB").unwrap();
        assert_eq!(
            s,
            Semantics::Wddm(WddmParams {
                pinned_bias: -(1 << 30),
                repartition_bias: 533 * MIB,
                repartition_below: 512 << 20,
            })
        );
        assert_eq!(Semantics::parse(&s.to_string()).unwrap(), s);
        assert_eq!(
            Semantics::parse(&Semantics::DeviceWide.to_string()).unwrap(),
            Semantics::DeviceWide
        );
    }

    #[test]
    fn bad_spellings_are_typed_errors() {
        for spec in [
            "linux",
            "wddm:pinned_bias",
            "wddm:pinned_bias=lots",
            "wddm:colour=3",
            "wddm:repartition_below=-1",
            "device_wide:x=1",
        ] {
            assert!(
                matches!(Semantics::parse(spec), Err(SimError::BadSemantics { .. })),
                "{spec}"
            );
        }
    }

    #[test]
    fn the_seed_figures_are_the_default() {
        assert_eq!(WddmParams::default().pinned_bias, -611_319_808);
        assert_eq!(WddmParams::default().repartition_bias, 558_891_008);
    }
}
