//! The NVML reader: device truth read in-process, by UUID, from a library loaded at run time.
//!
//! NVML is the only device-wide view of a card's memory that sees every allocator (torch,
//! TensorRT, cuPy, NVENC...) and creates no CUDA context. It is read through `dlopen` so no
//! package and no link-time dependency is needed, and any failure to load or initialise it is an
//! error that [`NvmlError::is_unavailable`] recognises: callers then degrade to upstream's own
//! semantics. Devices are resolved by UUID, on which CUDA and NVML agree (their orders differ).
//!
//! The unsafe surface is the symbol table ([`Api`]) and one call per method; every pointer
//! handed to NVML points at a local buffer of the size the call is told.

use std::ffi::{CStr, CString, c_char, c_uint};
use std::path::Path;

use crate::dl::Library;
use crate::error::{NvmlCode, NvmlError};
use crate::nvml_abi::{
    NAME_BUFFER, NvmlDevice, NvmlMemory, NvmlProcessInfo, NvmlReturn, UUID_BUFFER,
    VALUE_NOT_AVAILABLE, code, sig,
};
use crate::uuid::normalize_uuid;

/// The library the driver installs.
pub const NVML_LIBRARY: &str = "libnvidia-ml.so.1";
/// An environment variable naming another library (a path) for [`Nvml::open`]: how tests
/// point a whole process, host or worker, at the fake NVML.
pub const NVML_LIBRARY_ENV: &str = "AIRLOCK_NVML_LIBRARY";

/// A device's memory, in bytes, as `nvmlDeviceGetMemoryInfo` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryInfo {
    pub total: u64,
    pub free: u64,
    pub used: u64,
}

/// One process with a compute context on a device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcessMemory {
    /// A pid of the host's pid namespace.
    pub pid: u32,
    /// `None` where the driver does not account per process (Windows WDDM).
    pub used: Option<u64>,
}

/// A snapshot of one device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceInfo {
    pub uuid: String,
    pub name: String,
    pub memory: MemoryInfo,
    /// `None` where the driver cannot list processes.
    pub processes: Option<Vec<ProcessMemory>>,
}

/// The NVML functions we call, resolved once.
struct Api {
    init: sig::Init,
    shutdown: sig::Shutdown,
    error_string: sig::ErrorString,
    count: sig::GetCount,
    by_index: sig::GetHandleByIndex,
    by_uuid: sig::GetHandleByUuid,
    uuid: sig::GetText,
    name: sig::GetText,
    memory: sig::GetMemoryInfo,
    /// Missing from drivers older than 510.
    processes: Option<sig::GetProcesses>,
}

/// Resolves `$name` in `$lib` as a function of type `$ty`, or `None`.
macro_rules! symbol {
    ($lib:expr, $name:literal, $ty:ty) => {
        $lib.symbol($name)
            // SAFETY: `nvml.h` declares this symbol as a function of exactly this signature,
            // and function and data pointers have the same size on every target we build.
            .map(|p| unsafe { std::mem::transmute::<*mut std::ffi::c_void, $ty>(p.as_ptr()) })
    };
}

impl Api {
    fn resolve(lib: &Library, library: &str) -> Result<Api, NvmlError> {
        let missing = |symbol: &'static str| NvmlError::MissingSymbol {
            library: library.to_owned(),
            symbol,
        };
        Ok(Api {
            init: symbol!(lib, c"nvmlInit_v2", sig::Init).ok_or_else(|| missing("nvmlInit_v2"))?,
            shutdown: symbol!(lib, c"nvmlShutdown", sig::Shutdown)
                .ok_or_else(|| missing("nvmlShutdown"))?,
            error_string: symbol!(lib, c"nvmlErrorString", sig::ErrorString)
                .ok_or_else(|| missing("nvmlErrorString"))?,
            count: symbol!(lib, c"nvmlDeviceGetCount_v2", sig::GetCount)
                .ok_or_else(|| missing("nvmlDeviceGetCount_v2"))?,
            by_index: symbol!(lib, c"nvmlDeviceGetHandleByIndex_v2", sig::GetHandleByIndex)
                .ok_or_else(|| missing("nvmlDeviceGetHandleByIndex_v2"))?,
            by_uuid: symbol!(lib, c"nvmlDeviceGetHandleByUUID", sig::GetHandleByUuid)
                .ok_or_else(|| missing("nvmlDeviceGetHandleByUUID"))?,
            uuid: symbol!(lib, c"nvmlDeviceGetUUID", sig::GetText)
                .ok_or_else(|| missing("nvmlDeviceGetUUID"))?,
            name: symbol!(lib, c"nvmlDeviceGetName", sig::GetText)
                .ok_or_else(|| missing("nvmlDeviceGetName"))?,
            memory: symbol!(lib, c"nvmlDeviceGetMemoryInfo", sig::GetMemoryInfo)
                .ok_or_else(|| missing("nvmlDeviceGetMemoryInfo"))?,
            processes: symbol!(
                lib,
                c"nvmlDeviceGetComputeRunningProcesses_v3",
                sig::GetProcesses
            ),
        })
    }

    fn code(&self, rc: NvmlReturn) -> NvmlCode {
        // SAFETY: nvmlErrorString takes any code and returns null or a static NUL-terminated
        // string, which we copy.
        let message = unsafe {
            let p = (self.error_string)(rc);
            if p.is_null() {
                String::new()
            } else {
                CStr::from_ptr(p).to_string_lossy().into_owned()
            }
        };
        NvmlCode { code: rc, message }
    }
}

/// An initialised NVML; shut down (and the library closed) on drop.
pub struct Nvml {
    api: Api,
    library: String,
    /// Declared after `api`: the functions must not outlive the library.
    _lib: Library,
}

// SAFETY: NVML is thread-safe (its documentation: "all NVML functions are thread safe"); the
// rest is plain data.
unsafe impl Send for Nvml {}
unsafe impl Sync for Nvml {}

impl std::fmt::Debug for Nvml {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Nvml")
            .field("library", &self.library)
            .finish()
    }
}

impl Nvml {
    /// Loads and initialises the library named by [`NVML_LIBRARY_ENV`], else [`NVML_LIBRARY`].
    pub fn open() -> Result<Nvml, NvmlError> {
        match std::env::var_os(NVML_LIBRARY_ENV).filter(|v| !v.is_empty()) {
            Some(path) => Nvml::open_at(Path::new(&path)),
            None => Nvml::open_at(Path::new(NVML_LIBRARY)),
        }
    }

    /// Loads and initialises the library at `library` (a path, or a bare name searched the
    /// way the dynamic linker does).
    pub fn open_at(library: &Path) -> Result<Nvml, NvmlError> {
        let library = library.to_string_lossy().into_owned();
        let lib = Library::open(&library).map_err(|reason| NvmlError::LibraryNotFound {
            library: library.clone(),
            reason,
        })?;
        let api = Api::resolve(&lib, &library)?;
        // SAFETY: nvmlInit_v2 takes no arguments.
        let rc = unsafe { (api.init)() };
        if rc != code::SUCCESS {
            let code = api.code(rc);
            return Err(NvmlError::Init { library, code });
        }
        Ok(Nvml {
            api,
            library,
            _lib: lib,
        })
    }

    /// What was loaded, as it was asked for.
    pub fn library(&self) -> &str {
        &self.library
    }

    fn check(&self, function: &'static str, rc: NvmlReturn) -> Result<(), NvmlError> {
        if rc == code::SUCCESS {
            Ok(())
        } else {
            Err(NvmlError::Call {
                function,
                code: self.api.code(rc),
            })
        }
    }

    pub fn device_count(&self) -> Result<u32, NvmlError> {
        let mut n: c_uint = 0;
        // SAFETY: writes one unsigned int.
        let rc = unsafe { (self.api.count)(&mut n) };
        self.check("nvmlDeviceGetCount_v2", rc)?;
        Ok(n)
    }

    /// The device at NVML's `index` (not CUDA's ordinal: resolve by UUID where it matters).
    pub fn device(&self, index: u32) -> Result<Device<'_>, NvmlError> {
        let mut handle: NvmlDevice = std::ptr::null_mut();
        // SAFETY: writes one handle.
        let rc = unsafe { (self.api.by_index)(index, &mut handle) };
        self.check("nvmlDeviceGetHandleByIndex_v2", rc)?;
        Ok(Device { nvml: self, handle })
    }

    /// The device with this UUID, in NVML's (`GPU-...`) or torch's (no prefix) spelling.
    pub fn device_by_uuid(&self, uuid: &str) -> Result<Device<'_>, NvmlError> {
        let uuid = normalize_uuid(uuid);
        let no_device = || NvmlError::NoDevice { uuid: uuid.clone() };
        let c = CString::new(uuid.as_str()).map_err(|_| no_device())?;
        let mut handle: NvmlDevice = std::ptr::null_mut();
        // SAFETY: reads a NUL-terminated string, writes one handle.
        let rc = unsafe { (self.api.by_uuid)(c.as_ptr(), &mut handle) };
        match rc {
            code::ERROR_NOT_FOUND | code::ERROR_INVALID_ARGUMENT => Err(no_device()),
            _ => {
                self.check("nvmlDeviceGetHandleByUUID", rc)?;
                Ok(Device { nvml: self, handle })
            }
        }
    }

    /// Every device, in NVML's order.
    pub fn devices(&self) -> Result<Vec<Device<'_>>, NvmlError> {
        (0..self.device_count()?).map(|i| self.device(i)).collect()
    }
}

impl Drop for Nvml {
    fn drop(&mut self) {
        // SAFETY: balances our nvmlInit_v2 (NVML counts them); no device handle outlives us.
        unsafe {
            (self.api.shutdown)();
        }
    }
}

/// A device handle, valid while its [`Nvml`] lives.
#[derive(Debug)]
pub struct Device<'a> {
    nvml: &'a Nvml,
    handle: NvmlDevice,
}

impl Device<'_> {
    fn text(
        &self,
        function: &'static str,
        f: sig::GetText,
        size: usize,
    ) -> Result<String, NvmlError> {
        let mut buf = vec![0 as c_char; size];
        // SAFETY: NVML writes at most `size` bytes, NUL included, into our buffer.
        let rc = unsafe { f(self.handle, buf.as_mut_ptr(), size as c_uint) };
        self.nvml.check(function, rc)?;
        let bytes: Vec<u8> = buf
            .iter()
            .take_while(|&&c| c != 0)
            .map(|&c| c as u8)
            .collect();
        String::from_utf8(bytes).map_err(|_| NvmlError::BadText { function })
    }

    /// The UUID, `GPU-...` (or `MIG-...`).
    pub fn uuid(&self) -> Result<String, NvmlError> {
        self.text("nvmlDeviceGetUUID", self.nvml.api.uuid, UUID_BUFFER)
    }

    pub fn name(&self) -> Result<String, NvmlError> {
        self.text("nvmlDeviceGetName", self.nvml.api.name, NAME_BUFFER)
    }

    /// Device-wide memory: what every process together holds.
    pub fn memory(&self) -> Result<MemoryInfo, NvmlError> {
        let mut m = NvmlMemory::default();
        // SAFETY: writes one nvmlMemory_t.
        let rc = unsafe { (self.nvml.api.memory)(self.handle, &mut m) };
        self.nvml.check("nvmlDeviceGetMemoryInfo", rc)?;
        Ok(MemoryInfo {
            total: m.total,
            free: m.free,
            used: m.used,
        })
    }

    /// The processes with a compute context here; `None` where the driver cannot tell.
    pub fn processes(&self) -> Result<Option<Vec<ProcessMemory>>, NvmlError> {
        const FUNCTION: &str = "nvmlDeviceGetComputeRunningProcesses_v3";
        let Some(f) = self.nvml.api.processes else {
            return Ok(None);
        };
        let mut infos: Vec<NvmlProcessInfo> = Vec::new();
        // Processes may start between the sizing call and the reading one: a few tries.
        for _ in 0..5 {
            let mut count = infos.len() as c_uint;
            let ptr = if infos.is_empty() {
                std::ptr::null_mut()
            } else {
                infos.as_mut_ptr()
            };
            // SAFETY: NVML writes at most `count` entries into `infos` (none through null),
            // then the number it has (or needs) into `count`.
            let rc = unsafe { f(self.handle, &mut count, ptr) };
            match rc {
                code::SUCCESS => {
                    infos.truncate(count as usize);
                    let list = infos
                        .iter()
                        .map(|p| ProcessMemory {
                            pid: p.pid,
                            used: (p.used_gpu_memory != VALUE_NOT_AVAILABLE)
                                .then_some(p.used_gpu_memory),
                        })
                        .collect();
                    return Ok(Some(list));
                }
                code::ERROR_INSUFFICIENT_SIZE => {
                    infos = vec![NvmlProcessInfo::default(); count as usize + 8];
                }
                code::ERROR_NOT_SUPPORTED => return Ok(None),
                _ => return self.nvml.check(FUNCTION, rc).map(|()| None),
            }
        }
        self.nvml
            .check(FUNCTION, code::ERROR_INSUFFICIENT_SIZE)
            .map(|()| None)
    }

    /// Everything above, in one snapshot.
    pub fn info(&self) -> Result<DeviceInfo, NvmlError> {
        Ok(DeviceInfo {
            uuid: self.uuid()?,
            name: self.name()?,
            memory: self.memory()?,
            processes: self.processes()?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_library_is_unavailable_not_a_panic() {
        let e = Nvml::open_at(Path::new("/nonexistent/libnvidia-ml.so.1")).unwrap_err();
        assert!(e.is_unavailable(), "{e}");
        assert!(matches!(e, NvmlError::LibraryNotFound { .. }));
    }

    #[test]
    fn a_library_without_nvml_is_unavailable() {
        let e = Nvml::open_at(Path::new("libc.so.6")).unwrap_err();
        assert!(
            matches!(
                e,
                NvmlError::MissingSymbol {
                    symbol: "nvmlInit_v2",
                    ..
                }
            ),
            "{e}"
        );
        assert!(e.is_unavailable());
    }
}
