//! Page-level questions for the tensor codec's kept copies (`comfy_airlock/kept.py`, ADR 0027):
//! has a tensor's memory been written since we copied it, and which pages of a private mapping
//! of a frozen segment are this process's own copies.

use pyo3::prelude::*;

/// Watches `[addr, addr + nbytes)` of this process's private memory for writes by any route.
#[pyclass(frozen, module = "comfy_airlock._native")]
pub struct WriteWatch {
    inner: std::sync::Mutex<airlock_shm::WriteWatch>,
}

#[pymethods]
impl WriteWatch {
    /// A watch of that memory, or None when it cannot be watched (not private anonymous memory,
    /// or a kernel without userfaultfd's async write-protection and `PAGEMAP_SCAN`). Private to
    /// the codec, which passes the data pointer and size of a tensor or array it holds.
    #[staticmethod]
    fn start(py: Python<'_>, addr: usize, nbytes: usize) -> Option<WriteWatch> {
        // SAFETY: the codec's contract above: the memory is readable for the call.
        crate::exit_gate::detach(py, || unsafe { airlock_shm::WriteWatch::new(addr, nbytes) }).map(
            |inner| WriteWatch {
                inner: std::sync::Mutex::new(inner),
            },
        )
    }

    /// True when nothing wrote the memory since the watch started or last answered False.
    /// Private to the codec, which calls it only while it holds a tensor or array spanning the
    /// watched memory (it reads the partial pages at either end).
    fn unchanged(&self, py: Python<'_>) -> bool {
        crate::exit_gate::detach(py, || {
            let mut w = self.inner.lock().unwrap_or_else(|p| p.into_inner());
            // SAFETY: the codec's contract above.
            unsafe { w.unchanged() }
        })
    }
}

/// `[(start, end), ...]`: the pages of `[addr, addr + nbytes)`, in a private mapping of a shared
/// segment, that this process wrote (its own copies); None when the kernel cannot say.
#[pyfunction]
pub fn private_pages(py: Python<'_>, addr: usize, nbytes: usize) -> Option<Vec<(usize, usize)>> {
    crate::exit_gate::detach(py, || airlock_shm::private_pages(addr, nbytes))
}

/// Write-protects a private mapping of a frozen segment (`mappings.py`) so that
/// [`private_pages`] finds the pages written through it with the kernel's written-only scan;
/// called again on pages dropped since. False when the kernel cannot (then it walks).
#[pyfunction]
pub fn watch_private(py: Python<'_>, addr: usize, nbytes: usize) -> bool {
    // SAFETY: the codec passes the address and size of its own private mapping of a segment
    // (or a page range of one), which it keeps mapped.
    crate::exit_gate::detach(py, || unsafe { airlock_shm::watch_private(addr, nbytes) })
}

/// Whether [`watch_private`] armed all of the span (tests: a view of a kept copy is asked
/// the fast way).
#[pyfunction]
pub fn private_watched(py: Python<'_>, addr: usize, nbytes: usize) -> bool {
    crate::exit_gate::detach(py, || airlock_shm::private_watched(addr, nbytes))
}

/// Whether write watches work here at all.
#[pyfunction]
pub fn write_watch_supported(py: Python<'_>) -> bool {
    crate::exit_gate::detach(py, airlock_shm::write_watch_supported)
}
