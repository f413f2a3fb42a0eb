//! Shared memory for tensors: memfd segments, a pool that hands out leased regions, and the
//! passing of segment fds over a Unix socket.
//!
//! Each side of a worker connection owns a [`Pool`] of segments it created. A producer copies a
//! tensor into a region of its own pool once; the consumer maps the segment (whose fd it got
//! once, with the frame announcing it) and reads the region in place. The region stays leased
//! until the consumer says it has dropped every view of it ([`Pool::release`]); no timers.
//!
//! Segments are pre-allocated with `fallocate` and reused, because first-touch page faults on a
//! fresh 1 GiB mapping cost ten times the copy itself (see `docs/benchmarks.md`).

mod error;
mod fdpass;
mod mapping;
mod pages;
mod pid;
mod pool;
mod segment;
mod settings;

pub use error::ShmError;
pub use fdpass::{
    MAX_FDS_PER_READ, borrow_all, recv_with_fds, send_with_fds, try_recv_with_fds,
    try_send_with_fds,
};
pub use mapping::copy_nonoverlapping;
pub use pages::{WriteWatch, private_pages, private_watched, watch_private, write_watch_supported};
pub use pid::current_pid;
pub use pool::{Alloc, Lease, Pool, PoolConfig, PoolStats, Released};
pub use segment::{Segment, read_at};
pub use settings::{LIMIT_ENV, PEER_MAP_ENV, PEER_SEGMENTS_ENV, PeerLimits};
