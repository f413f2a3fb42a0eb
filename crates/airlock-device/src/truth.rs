//! Device truth for the memory bridge: which card the host and its workers share, and how much
//! memory that card really has free.
//!
//! The bridge arbitrates one card across processes, so every process must be talking about the
//! same one. CUDA ordinals cannot say so (each process's `CUDA_VISIBLE_DEVICES` renumbers them,
//! and NVML's order differs from CUDA's); UUIDs can. [`resolve_device`] checks that the host's
//! and each worker's device are one UUID and names the pack whose worker is elsewhere.
//!
//! [`DeviceTruth`] then reads that UUID's memory through NVML: device-wide, every allocator
//! counted, whatever the platform tells a process about its own budget. Without an NVIDIA driver
//! there is nothing to read and no contention to arbitrate: it reads `None`, and callers use
//! upstream's own semantics (its `get_free_memory`). An NVML that loads but does not know the
//! UUID is an error, not a fallback: the host would be arbitrating a card it cannot see.

use crate::error::{DeviceMismatch, NvmlError};
use crate::nvml::{MemoryInfo, Nvml};
use crate::uuid::normalize_uuid;

/// The UUID the host and every worker share, in NVML's spelling; `workers` are `(pack, uuid)`
/// with UUIDs in NVML's (`GPU-...`) or torch's (no prefix) spelling.
pub fn resolve_device<'a>(
    host_uuid: &str,
    workers: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> Result<String, DeviceMismatch> {
    let host = normalize_uuid(host_uuid);
    for (pack, uuid) in workers {
        let worker = normalize_uuid(uuid);
        if !worker.eq_ignore_ascii_case(&host) {
            return Err(DeviceMismatch {
                pack: pack.to_owned(),
                host_uuid: host,
                worker_uuid: worker,
            });
        }
    }
    Ok(host)
}

/// NVML's reading of one device, by UUID, kept open for repeated reads.
#[derive(Debug)]
pub struct DeviceTruth {
    nvml: Option<Nvml>,
    uuid: String,
}

impl DeviceTruth {
    /// The device `uuid` through the NVML that [`Nvml::open`] finds.
    pub fn open(uuid: &str) -> Result<DeviceTruth, NvmlError> {
        DeviceTruth::with(Nvml::open(), uuid)
    }

    /// The device `uuid` through `nvml` as it opened: unavailable NVML gives a truth that
    /// reads `None`; a loaded NVML without that device is [`NvmlError::NoDevice`].
    pub fn with(nvml: Result<Nvml, NvmlError>, uuid: &str) -> Result<DeviceTruth, NvmlError> {
        let uuid = normalize_uuid(uuid);
        let nvml = match nvml {
            Ok(n) => {
                n.device_by_uuid(&uuid)?;
                Some(n)
            }
            Err(e) if e.is_unavailable() => None,
            Err(e) => return Err(e),
        };
        Ok(DeviceTruth { nvml, uuid })
    }

    /// The device's UUID in NVML's spelling.
    pub fn uuid(&self) -> &str {
        &self.uuid
    }

    /// Whether NVML answers; `false`: use upstream's own semantics.
    pub fn available(&self) -> bool {
        self.nvml.is_some()
    }

    /// The device's memory now, device-wide; `None` without NVML.
    pub fn memory(&self) -> Result<Option<MemoryInfo>, NvmlError> {
        match &self.nvml {
            Some(n) => n.device_by_uuid(&self.uuid)?.memory().map(Some),
            None => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    const A: &str = "GPU-5a1c0b2e-0000-4000-8000-00000000000a";
    const B: &str = "GPU-5a1c0b2e-0000-4000-8000-00000000000b";

    #[test]
    fn one_device_for_everyone_resolves_in_any_spelling() {
        let bare = A.trim_start_matches("GPU-");
        let upper = A.to_uppercase();
        let got = resolve_device(bare, [("pack-a", A), ("pack-b", bare), ("pack-c", &upper)]);
        assert_eq!(got.unwrap(), A);
        assert_eq!(resolve_device(A, []).unwrap(), A, "no workers yet");
    }

    #[test]
    fn a_worker_elsewhere_is_a_typed_error_naming_its_pack() {
        let e = resolve_device(A, [("pack-a", A), ("pack-b", B)]).unwrap_err();
        assert_eq!(
            e,
            DeviceMismatch {
                pack: "pack-b".into(),
                host_uuid: A.into(),
                worker_uuid: B.into(),
            }
        );
        let msg = e.to_string();
        assert!(
            msg.contains("pack-b") && msg.contains(A) && msg.contains(B),
            "{msg}"
        );
    }

    #[test]
    fn without_nvml_the_truth_reads_none() {
        let nvml = Nvml::open_at(Path::new("/nonexistent/libnvidia-ml.so.1"));
        let t = DeviceTruth::with(nvml, A.trim_start_matches("GPU-")).unwrap();
        assert!(!t.available());
        assert_eq!(t.uuid(), A);
        assert_eq!(t.memory().unwrap(), None);
    }
}
