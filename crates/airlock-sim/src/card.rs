//! A card's file: creating one (written under a temporary name, then linked, so nobody maps a
//! half-written card), opening one (magic, layout version and length checked), and the
//! environment variable by which tests hand cards to workers and to the fake NVML.

use std::fs::OpenOptions;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering::SeqCst;

use crate::error::SimError;
use crate::layout::{self, Header, MAGIC, NAME_MAX, VERSION};
use crate::mapping::Mapping;
use crate::semantics::Semantics;
use crate::sim::SimGpu;
use crate::uuid::{check_uuid, new_uuid};

/// The environment variable holding a card's path, by which tests hand the card to workers and
/// to the fake NVML. Several paths separated by `:` make several cards for the fake NVML, in
/// that order; [`SimGpu::from_env`] opens the first.
pub const SIM_GPU_ENV: &str = "AIRLOCK_SIM_GPU";

/// What a new card looks like.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CardSpec {
    /// What NVML reports as the device name.
    pub name: String,
    /// Memory in bytes.
    pub total: u64,
    /// `None`: a fresh random one. Kept for the card's life.
    pub uuid: Option<String>,
    pub semantics: Semantics,
}

impl CardSpec {
    /// A device-wide card.
    pub fn new(name: impl Into<String>, total: u64) -> CardSpec {
        CardSpec {
            name: name.into(),
            total,
            uuid: None,
            semantics: Semantics::DeviceWide,
        }
    }

    /// A card with these semantics.
    pub fn with_semantics(self, semantics: Semantics) -> CardSpec {
        CardSpec { semantics, ..self }
    }
}

impl SimGpu {
    /// Creates a device-wide card of `total` bytes at `path` (which must not exist).
    pub fn create(path: impl AsRef<Path>, name: &str, total: u64) -> Result<SimGpu, SimError> {
        SimGpu::create_with(path, &CardSpec::new(name, total))
    }

    /// Creates a card at `path`. The file is written under a temporary name and then linked
    /// at `path`, so no process opens a half-written card, and an existing file is never
    /// replaced.
    pub fn create_with(path: impl AsRef<Path>, spec: &CardSpec) -> Result<SimGpu, SimError> {
        let path = path.as_ref().to_path_buf();
        if spec.name.len() > NAME_MAX {
            return Err(SimError::NameTooLong {
                len: spec.name.len(),
                max: NAME_MAX,
            });
        }
        let uuid = match &spec.uuid {
            Some(u) => {
                check_uuid(u)?;
                u.clone()
            }
            None => new_uuid(),
        };
        let err = |source: std::io::Error| SimError::Create {
            path: path.clone(),
            source,
        };
        let file_name = path.file_name().ok_or_else(|| {
            err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "no file name",
            ))
        })?;
        let tmp = path.with_file_name(format!(
            ".{}.{}.tmp",
            file_name.to_string_lossy(),
            std::process::id()
        ));
        let result = (|| {
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&tmp)
                .map_err(err)?;
            let len = layout::file_len(layout::SLOT_COUNT, layout::PROC_COUNT);
            file.set_len(len as u64).map_err(err)?;
            let map = Mapping::new(&file, len).map_err(err)?;
            let header = Header::new(
                spec.semantics.code(),
                spec.semantics.params(),
                spec.total,
                &spec.name,
                &uuid,
            );
            // SAFETY: our own fresh mapping of a full-length file nobody else has opened.
            unsafe {
                map.write_header(header);
                map.header().magic.store(MAGIC, SeqCst);
            }
            std::fs::hard_link(&tmp, &path).map_err(|e| {
                if e.kind() == std::io::ErrorKind::AlreadyExists {
                    SimError::Exists { path: path.clone() }
                } else {
                    err(e)
                }
            })?;
            Ok(SimGpu {
                path: path.clone(),
                map,
                slot_count: layout::SLOT_COUNT as usize,
                proc_count: layout::PROC_COUNT as usize,
            })
        })();
        let _ = std::fs::remove_file(&tmp);
        result
    }

    /// Opens the card at `path`, checking that it is one, of this layout version.
    pub fn open(path: impl AsRef<Path>) -> Result<SimGpu, SimError> {
        let path = path.as_ref().to_path_buf();
        let err = |source: std::io::Error| SimError::Open {
            path: path.clone(),
            source,
        };
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .map_err(err)?;
        let len = file.metadata().map_err(err)?.len();
        if len < size_of::<Header>() as u64 {
            return Err(SimError::NotACard { path });
        }
        let map = Mapping::new(&file, len as usize).map_err(err)?;
        // SAFETY: the mapping holds a header (checked above); published cards never change
        // their non-atomic fields.
        let h = unsafe { map.header() };
        if h.magic.load(SeqCst) != MAGIC {
            return Err(SimError::NotACard { path });
        }
        if h.version != VERSION {
            return Err(SimError::Version {
                path,
                found: h.version,
                expected: VERSION,
            });
        }
        let expected = layout::file_len(h.slot_count, h.proc_count) as u64;
        if len != expected {
            return Err(SimError::Truncated {
                path,
                len,
                expected,
            });
        }
        let slot_count = h.slot_count as usize;
        let proc_count = h.proc_count as usize;
        Ok(SimGpu {
            path,
            map,
            slot_count,
            proc_count,
        })
    }

    /// Opens the first card named by [`SIM_GPU_ENV`]; `None` when it is unset or empty.
    pub fn from_env() -> Result<Option<SimGpu>, SimError> {
        match paths_from_env().into_iter().next() {
            Some(p) => SimGpu::open(p).map(Some),
            None => Ok(None),
        }
    }
}

/// The card paths named by [`SIM_GPU_ENV`], in order (none when unset or empty).
pub fn paths_from_env() -> Vec<PathBuf> {
    std::env::var_os(SIM_GPU_ENV)
        .map(|v| {
            std::env::split_paths(&v)
                .filter(|p| !p.as_os_str().is_empty())
                .collect()
        })
        .unwrap_or_default()
}
