//! NVML's C ABI as `nvml.h` declares it: the types, return codes and function signatures the
//! reader calls and the fake library (`airlock-fake-nvml`) implements. Layouts are checked at
//! compile time against the header's.

use std::ffi::{c_char, c_uint, c_void};

/// `nvmlReturn_t`.
pub type NvmlReturn = c_uint;
/// `nvmlDevice_t`: an opaque handle.
pub type NvmlDevice = *mut c_void;

/// `nvmlMemory_t` (`nvmlDeviceGetMemoryInfo`), in bytes.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct NvmlMemory {
    pub total: u64,
    pub free: u64,
    pub used: u64,
}

/// `nvmlProcessInfo_t` as filled by `nvmlDeviceGetComputeRunningProcesses_v3` (the "v2" struct
/// of `nvml.h`).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct NvmlProcessInfo {
    pub pid: c_uint,
    /// Bytes, or [`VALUE_NOT_AVAILABLE`] (always, under Windows WDDM).
    pub used_gpu_memory: u64,
    pub gpu_instance_id: c_uint,
    pub compute_instance_id: c_uint,
}

const _: () = {
    assert!(size_of::<NvmlMemory>() == 24);
    assert!(size_of::<NvmlProcessInfo>() == 24);
    assert!(std::mem::offset_of!(NvmlProcessInfo, used_gpu_memory) == 8);
    assert!(std::mem::offset_of!(NvmlProcessInfo, gpu_instance_id) == 16);
    assert!(std::mem::offset_of!(NvmlProcessInfo, compute_instance_id) == 20);
};

/// `NVML_VALUE_NOT_AVAILABLE`.
pub const VALUE_NOT_AVAILABLE: u64 = u64::MAX;
/// `NVML_DEVICE_UUID_V2_BUFFER_SIZE`.
pub const UUID_BUFFER: usize = 96;
/// `NVML_DEVICE_NAME_V2_BUFFER_SIZE`.
pub const NAME_BUFFER: usize = 96;

/// The return codes the reader tells apart.
pub mod code {
    use super::NvmlReturn;
    pub const SUCCESS: NvmlReturn = 0;
    pub const ERROR_UNINITIALIZED: NvmlReturn = 1;
    pub const ERROR_INVALID_ARGUMENT: NvmlReturn = 2;
    pub const ERROR_NOT_SUPPORTED: NvmlReturn = 3;
    pub const ERROR_NOT_FOUND: NvmlReturn = 6;
    pub const ERROR_INSUFFICIENT_SIZE: NvmlReturn = 7;
    pub const ERROR_DRIVER_NOT_LOADED: NvmlReturn = 9;
    pub const ERROR_UNKNOWN: NvmlReturn = 999;
}

/// The name of a return code in `nvml.h`.
pub fn code_name(c: NvmlReturn) -> &'static str {
    match c {
        0 => "NVML_SUCCESS",
        1 => "NVML_ERROR_UNINITIALIZED",
        2 => "NVML_ERROR_INVALID_ARGUMENT",
        3 => "NVML_ERROR_NOT_SUPPORTED",
        4 => "NVML_ERROR_NO_PERMISSION",
        5 => "NVML_ERROR_ALREADY_INITIALIZED",
        6 => "NVML_ERROR_NOT_FOUND",
        7 => "NVML_ERROR_INSUFFICIENT_SIZE",
        8 => "NVML_ERROR_INSUFFICIENT_POWER",
        9 => "NVML_ERROR_DRIVER_NOT_LOADED",
        10 => "NVML_ERROR_TIMEOUT",
        11 => "NVML_ERROR_IRQ_ISSUE",
        12 => "NVML_ERROR_LIBRARY_NOT_FOUND",
        13 => "NVML_ERROR_FUNCTION_NOT_FOUND",
        14 => "NVML_ERROR_CORRUPTED_INFOROM",
        15 => "NVML_ERROR_GPU_IS_LOST",
        16 => "NVML_ERROR_RESET_REQUIRED",
        17 => "NVML_ERROR_OPERATING_SYSTEM",
        18 => "NVML_ERROR_LIB_RM_VERSION_MISMATCH",
        19 => "NVML_ERROR_IN_USE",
        20 => "NVML_ERROR_MEMORY",
        21 => "NVML_ERROR_NO_DATA",
        22 => "NVML_ERROR_VGPU_ECC_NOT_ENABLED",
        23 => "NVML_ERROR_INSUFFICIENT_RESOURCES",
        24 => "NVML_ERROR_FREQ_NOT_SUPPORTED",
        25 => "NVML_ERROR_ARGUMENT_VERSION_MISMATCH",
        26 => "NVML_ERROR_DEPRECATED",
        27 => "NVML_ERROR_NOT_READY",
        28 => "NVML_ERROR_GPU_NOT_FOUND",
        29 => "NVML_ERROR_INVALID_STATE",
        _ => "NVML_ERROR_UNKNOWN",
    }
}

/// The signatures of the functions we call.
pub mod sig {
    use super::*;
    pub type Init = unsafe extern "C" fn() -> NvmlReturn;
    pub type Shutdown = unsafe extern "C" fn() -> NvmlReturn;
    pub type ErrorString = unsafe extern "C" fn(NvmlReturn) -> *const c_char;
    pub type GetCount = unsafe extern "C" fn(*mut c_uint) -> NvmlReturn;
    pub type GetHandleByIndex = unsafe extern "C" fn(c_uint, *mut NvmlDevice) -> NvmlReturn;
    pub type GetHandleByUuid = unsafe extern "C" fn(*const c_char, *mut NvmlDevice) -> NvmlReturn;
    pub type GetText = unsafe extern "C" fn(NvmlDevice, *mut c_char, c_uint) -> NvmlReturn;
    pub type GetMemoryInfo = unsafe extern "C" fn(NvmlDevice, *mut NvmlMemory) -> NvmlReturn;
    pub type GetProcesses =
        unsafe extern "C" fn(NvmlDevice, *mut c_uint, *mut NvmlProcessInfo) -> NvmlReturn;
}
