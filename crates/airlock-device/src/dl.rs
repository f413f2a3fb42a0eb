//! The one place that calls `dlopen`: NVML is loaded at run time, never linked, so a machine
//! without the NVIDIA driver runs everything else unchanged.

use std::ffi::{CStr, CString, c_void};
use std::ptr::NonNull;

/// A loaded shared library, closed on drop.
#[derive(Debug)]
pub struct Library {
    handle: NonNull<c_void>,
}

// SAFETY: a dlopen handle may be used and closed from any thread.
unsafe impl Send for Library {}
unsafe impl Sync for Library {}

/// `dlerror()`'s text, or a stand-in when it has none.
fn last_error() -> String {
    // SAFETY: dlerror returns null or a NUL-terminated string valid until the next dl* call on
    // this thread; we copy it at once.
    unsafe {
        let e = libc::dlerror();
        if e.is_null() {
            "unknown dlopen error".to_owned()
        } else {
            CStr::from_ptr(e).to_string_lossy().into_owned()
        }
    }
}

impl Library {
    /// Loads `name`: a file name searched the way the dynamic linker does, or a path. The
    /// error is `dlerror()`'s text.
    pub fn open(name: &str) -> Result<Library, String> {
        let c = CString::new(name).map_err(|_| "library name contains NUL".to_owned())?;
        // SAFETY: a valid NUL-terminated name. RTLD_LOCAL keeps its symbols out of the global
        // namespace; RTLD_NOW surfaces missing dependencies here rather than at a call.
        let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        NonNull::new(h)
            .map(|handle| Library { handle })
            .ok_or_else(last_error)
    }

    /// The address of `symbol`, or `None` if the library lacks it.
    pub fn symbol(&self, symbol: &CStr) -> Option<NonNull<c_void>> {
        // SAFETY: a live handle and a NUL-terminated name; the address is only returned.
        NonNull::new(unsafe { libc::dlsym(self.handle.as_ptr(), symbol.as_ptr()) })
    }
}

impl Drop for Library {
    fn drop(&mut self) {
        // SAFETY: the handle came from dlopen and nothing resolved from it outlives `self`
        // (the NVML reader keeps its function pointers beside the library and drops both).
        unsafe {
            libc::dlclose(self.handle.as_ptr());
        }
    }
}
