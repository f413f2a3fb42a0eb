//! A fake `libnvidia-ml.so.1`: the NVML functions comfy-airlock reads, answered from the
//! simulated cards named by the variable [`airlock_sim::SIM_GPU_ENV`], so NVML tells the
//! same truth as the simulator: total, used and free memory, and per-process usage.
//!
//! Cargo builds it as `target/<profile>/libairlock_fake_nvml.so` (also in `deps/`). A test
//! loads that path with `Nvml::open_at`, points [`airlock_device::NVML_LIBRARY_ENV`] at it, or symlinks it
//! as `libnvidia-ml.so.1` in a directory on `LD_LIBRARY_PATH` to be found by the driver's own
//! name. `tests/fake_nvml.rs` finds it next to its own executable; the Python tests ask
//! `cargo build -p airlock-fake-nvml` for it.
//!
//! The cards are opened at the first `nvmlInit_v2`, so the variable must be set before it; with
//! no variable, init fails with `NVML_ERROR_DRIVER_NOT_LOADED`, like a machine without the
//! driver. Device handles are the device's index plus one. Structs have the real `nvml.h`
//! layouts (`airlock_device::nvml_abi`). Nothing here panics across the C boundary.
//!
//! Whatever the card's semantics, memory info is the device's truth, as real NVML's is: on a
//! WDDM card a process's own reading (`SimGpu::free_seen_by`) is its budget, NVML's is not.
//! Like real NVML under WDDM, a WDDM card lists its processes with their memory
//! `NVML_VALUE_NOT_AVAILABLE`: per-process accounting is off the table there.

use std::ffi::{CStr, c_char, c_uint};
use std::sync::{Mutex, MutexGuard};

use airlock_device::nvml_abi::{
    NvmlDevice, NvmlMemory, NvmlProcessInfo, NvmlReturn, VALUE_NOT_AVAILABLE, code,
};
use airlock_sim::{Semantics, SimGpu, paths_from_env};

/// What `nvml.h` puts in the instance ids of a process outside any MIG instance.
const NO_INSTANCE: c_uint = u32::MAX;

struct State {
    /// `nvmlInit_v2` calls not yet balanced by `nvmlShutdown`.
    inits: u32,
    cards: Vec<SimGpu>,
}

static STATE: Mutex<State> = Mutex::new(State {
    inits: 0,
    cards: Vec::new(),
});

fn state() -> MutexGuard<'static, State> {
    STATE.lock().unwrap_or_else(|p| p.into_inner())
}

/// Runs `f` on the card behind `device`, if NVML is initialised and the handle is one of ours.
fn with_card(device: NvmlDevice, f: impl FnOnce(&SimGpu) -> NvmlReturn) -> NvmlReturn {
    let st = state();
    if st.inits == 0 {
        return code::ERROR_UNINITIALIZED;
    }
    match device.addr().checked_sub(1).and_then(|i| st.cards.get(i)) {
        Some(card) => f(card),
        None => code::ERROR_INVALID_ARGUMENT,
    }
}

fn handle(index: usize) -> NvmlDevice {
    std::ptr::without_provenance_mut(index + 1)
}

/// Copies `text` and its NUL into `buf` of `len` bytes.
///
/// # Safety
/// `buf` must be null or writable for `len` bytes.
unsafe fn put_text(text: &str, buf: *mut c_char, len: c_uint) -> NvmlReturn {
    if buf.is_null() {
        return code::ERROR_INVALID_ARGUMENT;
    }
    if text.len() + 1 > len as usize {
        return code::ERROR_INSUFFICIENT_SIZE;
    }
    // SAFETY: the caller's contract; text.len() + 1 <= len.
    unsafe {
        std::ptr::copy_nonoverlapping(text.as_ptr().cast::<c_char>(), buf, text.len());
        *buf.add(text.len()) = 0;
    }
    code::SUCCESS
}

/// # Safety
/// None: takes no arguments. Declared unsafe to match `nvml.h`'s function type.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlInit_v2() -> NvmlReturn {
    let mut st = state();
    if st.inits == 0 {
        let paths = paths_from_env();
        if paths.is_empty() {
            return code::ERROR_DRIVER_NOT_LOADED;
        }
        match paths
            .iter()
            .map(SimGpu::open)
            .collect::<Result<Vec<_>, _>>()
        {
            Ok(cards) => st.cards = cards,
            Err(_) => return code::ERROR_UNKNOWN,
        }
    }
    st.inits += 1;
    code::SUCCESS
}

/// # Safety
/// None: takes no arguments.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlShutdown() -> NvmlReturn {
    let mut st = state();
    if st.inits == 0 {
        return code::ERROR_UNINITIALIZED;
    }
    st.inits -= 1;
    if st.inits == 0 {
        st.cards.clear();
    }
    code::SUCCESS
}

/// # Safety
/// None: returns a static string for any code.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlErrorString(result: NvmlReturn) -> *const c_char {
    let s: &'static CStr = match result {
        code::SUCCESS => c"Success",
        code::ERROR_UNINITIALIZED => c"Uninitialized",
        code::ERROR_INVALID_ARGUMENT => c"Invalid Argument",
        code::ERROR_NOT_SUPPORTED => c"Not Supported",
        code::ERROR_NOT_FOUND => c"Not Found",
        code::ERROR_INSUFFICIENT_SIZE => c"Insufficient Size",
        code::ERROR_DRIVER_NOT_LOADED => c"Driver Not Loaded",
        _ => c"Unknown Error",
    };
    s.as_ptr()
}

/// # Safety
/// `count` must be null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetCount_v2(count: *mut c_uint) -> NvmlReturn {
    let st = state();
    if st.inits == 0 {
        return code::ERROR_UNINITIALIZED;
    }
    if count.is_null() {
        return code::ERROR_INVALID_ARGUMENT;
    }
    // SAFETY: the caller's contract.
    unsafe { *count = st.cards.len() as c_uint };
    code::SUCCESS
}

/// # Safety
/// `device` must be null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetHandleByIndex_v2(
    index: c_uint,
    device: *mut NvmlDevice,
) -> NvmlReturn {
    let st = state();
    if st.inits == 0 {
        return code::ERROR_UNINITIALIZED;
    }
    if device.is_null() || index as usize >= st.cards.len() {
        return code::ERROR_INVALID_ARGUMENT;
    }
    // SAFETY: the caller's contract.
    unsafe { *device = handle(index as usize) };
    code::SUCCESS
}

/// # Safety
/// `uuid` must be null or NUL-terminated; `device` null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetHandleByUUID(
    uuid: *const c_char,
    device: *mut NvmlDevice,
) -> NvmlReturn {
    let st = state();
    if st.inits == 0 {
        return code::ERROR_UNINITIALIZED;
    }
    if uuid.is_null() || device.is_null() {
        return code::ERROR_INVALID_ARGUMENT;
    }
    // SAFETY: the caller's contract.
    let wanted = unsafe { CStr::from_ptr(uuid) }.to_bytes();
    match st.cards.iter().position(|c| c.uuid().as_bytes() == wanted) {
        Some(i) => {
            // SAFETY: the caller's contract.
            unsafe { *device = handle(i) };
            code::SUCCESS
        }
        None => code::ERROR_NOT_FOUND,
    }
}

/// # Safety
/// `uuid` must be null or writable for `length` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetUUID(
    device: NvmlDevice,
    uuid: *mut c_char,
    length: c_uint,
) -> NvmlReturn {
    // SAFETY: the caller's contract.
    with_card(device, |c| unsafe { put_text(&c.uuid(), uuid, length) })
}

/// # Safety
/// `name` must be null or writable for `length` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetName(
    device: NvmlDevice,
    name: *mut c_char,
    length: c_uint,
) -> NvmlReturn {
    // SAFETY: the caller's contract.
    with_card(device, |c| unsafe { put_text(&c.name(), name, length) })
}

/// Device-wide memory. An overbooked card (the simulator allows it, silicon does not) reports
/// everything used and nothing free.
///
/// # Safety
/// `memory` must be null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo(
    device: NvmlDevice,
    memory: *mut NvmlMemory,
) -> NvmlReturn {
    with_card(device, |c| {
        if memory.is_null() {
            return code::ERROR_INVALID_ARGUMENT;
        }
        let total = c.total();
        let used = c.used().min(total);
        // SAFETY: the caller's contract.
        unsafe {
            *memory = NvmlMemory {
                total,
                free: total - used,
                used,
            }
        };
        code::SUCCESS
    })
}

/// One entry per pid with bookings, its bytes summed over tags (not available on WDDM).
///
/// # Safety
/// `count` must be null or writable; `infos` null or writable for `*count` entries.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetComputeRunningProcesses_v3(
    device: NvmlDevice,
    count: *mut c_uint,
    infos: *mut NvmlProcessInfo,
) -> NvmlReturn {
    with_card(device, |c| {
        if count.is_null() {
            return code::ERROR_INVALID_ARGUMENT;
        }
        let procs = c.processes();
        let wddm = matches!(c.semantics(), Semantics::Wddm(_));
        // SAFETY: the caller's contract.
        let room = unsafe { *count } as usize;
        // SAFETY: the caller's contract.
        unsafe { *count = procs.len() as c_uint };
        if procs.is_empty() {
            return code::SUCCESS;
        }
        if infos.is_null() || room < procs.len() {
            return code::ERROR_INSUFFICIENT_SIZE;
        }
        for (i, &(pid, used)) in procs.iter().enumerate() {
            // SAFETY: i < procs.len() <= room entries, the caller's contract.
            unsafe {
                *infos.add(i) = NvmlProcessInfo {
                    pid,
                    used_gpu_memory: if wddm { VALUE_NOT_AVAILABLE } else { used },
                    gpu_instance_id: NO_INSTANCE,
                    compute_instance_id: NO_INSTANCE,
                }
            };
        }
        code::SUCCESS
    })
}
