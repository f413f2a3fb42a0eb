//! Outputs born in shared memory (ADR 0044): the worker's side of `libairlock_born.so`.
//!
//! The preload library (`preload/born.c`) stands in front of `posix_memalign` and `free` in a
//! worker. While a call runs (a node, or the pack's import inside one), its thread is armed,
//! and a block of at least the threshold that torch asks for there is leased from the call lane's pool by [`birth`]: the node's kernel
//! writes its output straight into shared memory, and [`Lane::born`](crate::lane::Lane) sends
//! that region with one more hold instead of copying it. `free` of a born block drops the
//! worker's hold ([`death`]); the host's release drops the other, and the region is free once
//! both are gone.
//!
//! The hooks run inside the allocator, with or without the GIL, on any thread (a free), so
//! they touch no Python, and this module's lock is never held while the lane's is taken: code
//! holding the lane's lock may free a block of the heap that lies in a range a retired
//! segment once had, and that free asks this module. A birth past the budget of
//! live born bytes, or one the pool refuses, returns null and the block comes from glibc as
//! before; so does everything when the library is not preloaded (another OS, a user who
//! turned it off).

use std::collections::HashMap;
use std::ffi::{CStr, c_int, c_void};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use airlock_supervisor::CallLane;
use airlock_wire::Region;

type BirthHook = extern "C" fn(usize, usize) -> *mut c_void;
type DeathHook = extern "C" fn(*mut c_void) -> usize;
type LengthHook = extern "C" fn(*mut c_void) -> usize;
type Install = unsafe extern "C" fn(BirthHook, DeathHook, LengthHook, usize) -> c_int;
type Arm = unsafe extern "C" fn(c_int);
type SetRange = unsafe extern "C" fn(c_int, usize, usize) -> c_int;
type Ranges = unsafe extern "C" fn() -> c_int;
/// `airlock_born_numpy`: our numpy data allocator, given numpy's default one (ADR 0045).
pub type NumpyHandler = unsafe extern "C" fn(*const c_void) -> *mut c_void;

/// The preload library's entry points, found once.
struct Library {
    install: Install,
    arm: Arm,
    set_range: SetRange,
    ranges: usize,
    numpy: NumpyHandler,
}

fn symbol(name: &CStr) -> Option<*mut c_void> {
    // SAFETY: dlsym with a NUL-terminated name; RTLD_DEFAULT searches the global scope, where
    // a preloaded library is.
    let p = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) };
    (!p.is_null()).then_some(p)
}

fn library() -> Option<&'static Library> {
    static LIBRARY: OnceLock<Option<Library>> = OnceLock::new();
    LIBRARY
        .get_or_init(|| {
            let install = symbol(c"airlock_born_install")?;
            let arm = symbol(c"airlock_born_arm")?;
            let set_range = symbol(c"airlock_born_set_range")?;
            let ranges = symbol(c"airlock_born_ranges")?;
            let numpy = symbol(c"airlock_born_numpy")?;
            // SAFETY: the symbols are born.c's, with these signatures.
            unsafe {
                let ranges: Ranges = std::mem::transmute(ranges);
                Some(Library {
                    install: std::mem::transmute::<*mut c_void, Install>(install),
                    arm: std::mem::transmute::<*mut c_void, Arm>(arm),
                    set_range: std::mem::transmute::<*mut c_void, SetRange>(set_range),
                    ranges: ranges().max(0) as usize,
                    numpy: std::mem::transmute::<*mut c_void, NumpyHandler>(numpy),
                })
            }
        })
        .as_ref()
}

/// A born block: its region and the range slot of its segment.
struct Block {
    region: Region,
    size: u64,
    slot: usize,
}

/// One range slot of the preload library: a segment's mapping and the born blocks in it.
#[derive(Clone, Copy)]
struct Slot {
    start: usize,
    end: usize,
    live: u32,
}

/// Counters for the tests (`_native.born_stats()`, read in the worker).
#[derive(Debug, Clone, Copy, Default)]
pub struct BornStats {
    pub births: u64,
    pub sent: u64,
    pub refused: u64,
    pub live_bytes: u64,
}

struct Births {
    lane: Arc<CallLane>,
    budget: u64,
    blocks: HashMap<usize, Block>,
    slots: Vec<Slot>,
    stats: BornStats,
}

static BIRTHS: Mutex<Option<Births>> = Mutex::new(None);
/// Set once the hooks are in: arming costs one load when they are not.
static ENABLED: AtomicBool = AtomicBool::new(false);

fn births() -> MutexGuard<'static, Option<Births>> {
    BIRTHS.lock().unwrap_or_else(|p| p.into_inner())
}

impl Births {
    /// The slot for a segment mapped at `[start, end)`: its own, a free one, or none (all 64
    /// hold live blocks of other segments: the birth is refused).
    fn slot_for(&mut self, start: usize, end: usize, lib: &Library) -> Option<usize> {
        if let Some(i) = self
            .slots
            .iter()
            .position(|s| s.start == start && s.end == end)
        {
            return Some(i);
        }
        let i = match self.slots.iter().position(|s| s.live == 0) {
            Some(i) => i,
            None if self.slots.len() < lib.ranges => {
                self.slots.push(Slot {
                    start: 0,
                    end: 0,
                    live: 0,
                });
                self.slots.len() - 1
            }
            None => return None,
        };
        // SAFETY: born.c's setter; no born block lies in the slot being replaced.
        if unsafe { (lib.set_range)(i as c_int, start, end) } == 0 {
            return None;
        }
        self.slots[i] = Slot {
            start,
            end,
            live: 0,
        };
        Some(i)
    }
}

extern "C" fn birth(size: usize, _align: usize) -> *mut c_void {
    let Some(lib) = library() else {
        return std::ptr::null_mut();
    };
    let size = size as u64;
    // The budget is taken before the lease and given back if it fails: this module's lock
    // is never held while the lane's is taken (see the module docs).
    let lane = {
        let mut guard = births();
        let Some(b) = guard.as_mut() else {
            return std::ptr::null_mut();
        };
        if b.stats.live_bytes + size > b.budget {
            b.stats.refused += 1;
            return std::ptr::null_mut();
        }
        b.stats.live_bytes += size;
        b.lane.clone()
    };
    let born = lane.alloc_born(size).ok();
    let mut guard = births();
    let Some(b) = guard.as_mut() else {
        return std::ptr::null_mut(); // never: the hooks are not taken out
    };
    let slot = born.and_then(|born| {
        let start = born.segment_start as usize;
        b.slot_for(start, start + born.segment_len as usize, lib)
    });
    let (Some(born), Some(slot)) = (born, slot) else {
        b.stats.live_bytes -= size;
        b.stats.refused += 1;
        drop(guard);
        if let Some(born) = born {
            lane.unalloc(born.region);
        }
        return std::ptr::null_mut();
    };
    b.slots[slot].live += 1;
    b.blocks.insert(
        born.ptr as usize,
        Block {
            region: born.region,
            size,
            slot,
        },
    );
    b.stats.births += 1;
    born.ptr.cast()
}

extern "C" fn death(p: *mut c_void) -> usize {
    let (lane, block) = {
        let mut guard = births();
        let Some(b) = guard.as_mut() else {
            return 0;
        };
        let Some(block) = b.blocks.remove(&(p as usize)) else {
            return 0;
        };
        b.slots[block.slot].live -= 1;
        b.stats.live_bytes -= block.size;
        (b.lane.clone(), block)
    };
    // Our own region: the release drops the worker's hold; the host's, if it was sent, stays.
    lane.release(block.region);
    block.size as usize
}

extern "C" fn length(p: *mut c_void) -> usize {
    births()
        .as_ref()
        .and_then(|b| b.blocks.get(&(p as usize)))
        .map_or(0, |block| block.size as usize)
}

/// Installs the hooks for `lane` if the preload library is in this process: blocks of at
/// least `min_bytes`, up to `budget` live born bytes. False when it is not preloaded.
pub fn enable(lane: Arc<CallLane>, min_bytes: u64, budget: u64) -> bool {
    let Some(lib) = library() else {
        return false;
    };
    *births() = Some(Births {
        lane,
        budget,
        blocks: HashMap::with_capacity(256),
        slots: Vec::new(),
        stats: BornStats::default(),
    });
    // SAFETY: born.c's installer, given hooks that live as long as the process.
    let on = unsafe { (lib.install)(birth, death, length, min_bytes.max(1) as usize) != 0 };
    ENABLED.store(on, Ordering::Relaxed);
    on
}

/// The library's numpy data allocator (ADR 0045), when births are on.
pub fn numpy_handler() -> Option<NumpyHandler> {
    if !ENABLED.load(Ordering::Relaxed) {
        return None;
    }
    library().map(|lib| lib.numpy)
}

/// Arms (or disarms) the calling thread: its large blocks are born while armed.
pub fn arm(on: bool) {
    if ENABLED.load(Ordering::Relaxed)
        && let Some(lib) = library()
    {
        // SAFETY: born.c's setter of one atomic.
        unsafe { (lib.arm)(c_int::from(on)) }
    }
}

/// The region of the born block starting at `addr`, if it is one on `lane` of at least
/// `nbytes`, with one more hold taken for the peer that is about to receive it.
pub fn send(lane: &Arc<CallLane>, addr: usize, nbytes: u64) -> Option<Region> {
    if !ENABLED.load(Ordering::Relaxed) {
        return None; // every tensor a worker without the library sends asks: no lock
    }
    let region = {
        let guard = births();
        let b = guard.as_ref()?;
        let block = b.blocks.get(&addr)?;
        if !Arc::ptr_eq(&b.lane, lane) || block.size < nbytes {
            return None;
        }
        block.region
    };
    // The caller holds the tensor, so its block cannot die before the hold is taken.
    lane.hold_own(region).ok()?;
    if let Some(b) = births().as_mut() {
        b.stats.sent += 1;
    }
    Some(region)
}

/// The counters and the number of live born blocks, or None when births are off.
pub fn stats() -> Option<(BornStats, usize)> {
    births().as_ref().map(|b| (b.stats, b.blocks.len()))
}
