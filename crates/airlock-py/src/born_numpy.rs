//! numpy arrays born in shared memory too (ADR 0045).
//!
//! numpy takes its arrays' data from `malloc`, which the preload library leaves alone, so an
//! output a node makes with numpy (an image through PIL or OpenCV, turned into a tensor with
//! `torch.from_numpy`) was copied into the pool on its way out. numpy has an extension point
//! for exactly this, its data allocator (NEP 49): a `PyDataMem_Handler` set with
//! `PyDataMem_SetHandler`, for the current context. `libairlock_born.so` holds such a handler
//! (`airlock_born_numpy`), which lets a large block on the armed thread come from
//! `posix_memalign`, where births happen, and defers everything else to numpy's default
//! allocator. This module puts it in through numpy's C API table (`_ARRAY_API`), as a
//! compiled extension would through `import_array`.
//!
//! A handler someone else set (a pack's own allocator) is left in place; so is numpy before
//! 1.22, which has no handlers.

use std::ffi::{CStr, c_char, c_uint, c_void};

use pyo3::exceptions::PyRuntimeError;
use pyo3::ffi;
use pyo3::prelude::*;

/// `PyArray_GetNDArrayCFeatureVersion`, `PyDataMem_SetHandler`, `PyDataMem_GetHandler`: their
/// fixed places in numpy's API table (numpy's `__multiarray_api.h`, 1.22 through 2.x).
const FEATURE_VERSION: usize = 211;
const SET_HANDLER: usize = 304;
const GET_HANDLER: usize = 305;
/// `NPY_1_22_API_VERSION`: the first feature version with data allocators.
const HANDLERS_SINCE: c_uint = 0x0f;
/// The capsule name numpy requires of a handler.
const CAPSULE: &CStr = c"mem_handler";
const DEFAULT: &[u8] = b"default_allocator";
const OURS: &[u8] = b"airlock_born";

/// numpy's `PyDataMem_Handler`, version 1 (`ndarraytypes.h`); the allocator is only passed on.
#[repr(C)]
struct Handler {
    name: [c_char; 127],
    version: u8,
    allocator: [*mut c_void; 5],
}

type FeatureVersion = unsafe extern "C" fn() -> c_uint;
type SetHandler = unsafe extern "C" fn(*mut ffi::PyObject) -> *mut ffi::PyObject;
type GetHandler = unsafe extern "C" fn() -> *mut ffi::PyObject;

/// What [`install`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Our handler is numpy's in the current context (now, or already).
    Installed,
    /// Another handler is set (a pack's own): left alone.
    Foreign,
    /// numpy before 1.22, or the library without its handler: nothing to do.
    Unsupported,
}

fn error(py: Python<'_>, what: &str) -> PyErr {
    PyErr::take(py).unwrap_or_else(|| PyRuntimeError::new_err(what.to_owned()))
}

fn name_of(h: *const Handler) -> Vec<u8> {
    // SAFETY: numpy's handlers carry a NUL-terminated name in their first 127 bytes.
    unsafe { CStr::from_ptr((*h).name.as_ptr()) }
        .to_bytes()
        .to_vec()
}

/// Installs our handler for the current context, given numpy's `_ARRAY_API` capsule;
/// `ours` is the library's `airlock_born_numpy`.
///
/// # Safety
/// `ours` must be `libairlock_born.so`'s `airlock_born_numpy`.
pub unsafe fn install(
    py: Python<'_>,
    api: &Bound<'_, PyAny>,
    ours: unsafe extern "C" fn(*const c_void) -> *mut c_void,
) -> PyResult<Outcome> {
    // SAFETY: a capsule without a name (numpy's `_ARRAY_API`); checked for null below.
    let table = unsafe { ffi::PyCapsule_GetPointer(api.as_ptr(), std::ptr::null()) };
    if table.is_null() {
        return Err(error(py, "numpy's _ARRAY_API is not its API table"));
    }
    let table = table as *const *const c_void;
    // SAFETY: entries of numpy's table at their fixed places (see the constants); the setter
    // and getter are only read once the feature version says the table has them.
    unsafe {
        let feature: FeatureVersion = std::mem::transmute(*table.add(FEATURE_VERSION));
        if feature() < HANDLERS_SINCE {
            return Ok(Outcome::Unsupported);
        }
        let get: GetHandler = std::mem::transmute(*table.add(GET_HANDLER));
        let set: SetHandler = std::mem::transmute(*table.add(SET_HANDLER));
        let current = get();
        if current.is_null() {
            return Err(error(py, "numpy has no data allocator"));
        }
        let current = Bound::from_owned_ptr(py, current);
        let h = ffi::PyCapsule_GetPointer(current.as_ptr(), CAPSULE.as_ptr()) as *const Handler;
        if h.is_null() {
            return Err(error(py, "numpy's data allocator is not a handler"));
        }
        match name_of(h).as_slice() {
            OURS => return Ok(Outcome::Installed),
            DEFAULT => {}
            _ => return Ok(Outcome::Foreign),
        }
        let handler = ours((*h).allocator.as_ptr().cast());
        if handler.is_null() {
            return Ok(Outcome::Unsupported);
        }
        let capsule = ffi::PyCapsule_New(handler, CAPSULE.as_ptr(), None);
        if capsule.is_null() {
            return Err(error(py, "cannot make numpy's handler capsule"));
        }
        let capsule = Bound::from_owned_ptr(py, capsule);
        let previous = set(capsule.as_ptr());
        if previous.is_null() {
            return Err(error(py, "numpy refused the data allocator"));
        }
        drop(Bound::from_owned_ptr(py, previous));
    }
    Ok(Outcome::Installed)
}
