//! Calls into Python from threads the core started, closed before the interpreter finalizes.
//!
//! Why: the host forwards each worker's output into Python's `logging` from a thread of its own
//! (`airlock-out-*`), and a worker answers model commands from its control thread. When Python
//! exits while such a thread still has work, the thread attaches to an interpreter that is
//! finalizing or already gone: a CPython thread state is torn down under it and it jumps into
//! freed runtime state. ComfyUI exiting while a worker was still printing segfaulted that way
//! (`airlock-out-<pack>: segfault ... in libpython`): 22 exits of 30 with a chatty worker.
//! `Python::try_attach` alone does not prevent it: it checks, then attaches, and finalization
//! can start in between.
//!
//! So every such call enters [`with_python`], and the module registers [`close`] with `atexit`
//! when it is imported. Python runs `atexit` callbacks before it starts finalizing, while other
//! threads can still take the GIL, and in reverse order of registration: hooks registered
//! after this module's import, the loader's `_close_all` (which stops the workers) among them,
//! run first. [`close`] shuts the gate and waits,
//! without the GIL, for the calls already inside to end. A thread that comes later does not
//! touch Python; the output sink writes its line to the process's stderr instead.
//!
//! The other way back into Python is the end of a detached call ([`detach`]): a Python thread
//! that released the GIL (reading NVML on the heartbeat, waiting for a worker's reply) takes it
//! back. Python before 3.14 ends a thread that does so once finalization has begun with
//! `pthread_exit`, whose forced unwind runs through our frames; the wheel is linked by zig,
//! whose own unwinder sits in `_native` beside the system's, and the unwind crashes there
//! (ADR 0038). So a detached call that ends after the gate closed, on any thread but the one
//! that closed it, never takes the GIL back: the thread parks until the process ends, as
//! Python 3.14 itself does. [`close`] also waits for the calls that ended just before it and
//! are taking the GIL back, so none is caught between.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::thread::{self, ThreadId};
use std::time::{Duration, Instant};

use pyo3::prelude::*;

/// Calls that entered the gate and have not left it.
static INSIDE: AtomicUsize = AtomicUsize::new(0);
/// Detached calls that ended with the gate open and are taking the GIL back.
static RETURNING: AtomicUsize = AtomicUsize::new(0);
/// Set once by [`close`]; never opened again in this process.
static CLOSED: AtomicBool = AtomicBool::new(false);
/// The thread that ran [`close`]: the one that finalizes Python, which keeps detaching.
static CLOSER: OnceLock<ThreadId> = OnceLock::new();

/// How long [`close`] waits for calls already inside (a model command may take a while); past
/// that the interpreter exits regardless, as it would have without the gate.
const DRAIN: Duration = Duration::from_secs(5);

/// Runs `f` attached to Python, or returns None when the interpreter is exiting (or not
/// running at all).
pub fn with_python<T>(f: impl for<'py> FnOnce(Python<'py>) -> T) -> Option<T> {
    // Announce first, then look: with `close` storing CLOSED before it reads INSIDE (both
    // SeqCst), either `close` waits for this call or this call sees the gate shut.
    INSIDE.fetch_add(1, SeqCst);
    let out = if CLOSED.load(SeqCst) {
        None
    } else {
        Python::try_attach(f)
    };
    INSIDE.fetch_sub(1, SeqCst);
    out
}

/// Runs `f` with the GIL released, as `Python::detach` does (clippy refuses that one outside
/// this module): after the gate closed, a thread other than the closer does not come back.
pub fn detach<T, F>(py: Python<'_>, f: F) -> T
where
    // pyo3's `Ungil` is `Send` on stable Rust.
    F: Send + FnOnce() -> T,
    T: Send,
{
    #[allow(clippy::disallowed_methods)]
    let out = py.detach(|| {
        let out = f();
        // Announce, then look, as `with_python` does: `close` waits for this thread to take
        // the GIL back, or this thread sees the gate shut.
        RETURNING.fetch_add(1, SeqCst);
        if CLOSED.load(SeqCst) && !is_closer() {
            RETURNING.fetch_sub(1, SeqCst);
            park_forever();
        }
        out
    });
    RETURNING.fetch_sub(1, SeqCst);
    out
}

fn is_closer() -> bool {
    CLOSER.get() == Some(&thread::current().id())
}

/// Why not return an error instead: the caller would take the GIL to raise it.
fn park_forever() -> ! {
    loop {
        thread::park();
    }
}

/// Shuts the gate and waits for the calls inside to leave; registered with `atexit`.
#[pyfunction]
pub fn close(py: Python<'_>) {
    let _ = CLOSER.set(thread::current().id());
    CLOSED.store(true, SeqCst);
    // The calls inside, and the detached calls taking the GIL back, need the GIL to finish.
    #[allow(clippy::disallowed_methods)]
    py.detach(|| {
        let start = Instant::now();
        while (INSIDE.load(SeqCst) > 0 || RETURNING.load(SeqCst) > 0) && start.elapsed() < DRAIN {
            thread::sleep(Duration::from_millis(1));
        }
    });
}

/// Registers [`close`] with `atexit`; called when the module is imported.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    let close = wrap_pyfunction!(close, m)?;
    py.import("atexit")?.call_method1("register", (close,))?;
    Ok(())
}
