use thiserror::Error;

/// What can go wrong with segments and leases.
#[derive(Debug, Error)]
pub enum ShmError {
    #[error("cannot create a {len}-byte shared-memory segment: {source}")]
    Create { len: u64, source: std::io::Error },
    #[error("segment fd is {actual} bytes, the announcement said {announced}")]
    SizeMismatch { announced: u64, actual: u64 },
    #[error("no region at offset {offset} of segment {segment} is leased")]
    UnknownRegion { segment: u32, offset: u64 },
    #[error(
        "shared-memory pool '{pool}' is full: {len} more bytes requested, {in_use} of its \
         {limit} bytes in segments are taken (AIRLOCK_SHM_LIMIT_MIB sets the limit, and so does \
         AIRLOCK_MAX_PEER_MAP_MIB, which the peer holds us to)"
    )]
    PoolLimit {
        len: u64,
        limit: u64,
        in_use: u64,
        pool: String,
    },
    #[error(
        "shared-memory pool '{pool}' is full: {len} more bytes need a new segment, and it holds \
         the most segments the peer accepts, {limit} (AIRLOCK_MAX_PEER_SEGMENTS)"
    )]
    SegmentLimit {
        len: u64,
        limit: usize,
        pool: String,
    },
    #[error(
        "segment {id} of {len} bytes would make {total} bytes of the peer's shared memory mapped \
         here, more than the {limit} it may make us map (AIRLOCK_MAX_PEER_MAP_MIB)"
    )]
    PeerBytes {
        id: u32,
        len: u64,
        total: u64,
        limit: u64,
    },
    #[error(
        "segment {id} would be the peer's segment number {count} held here, more than the \
         {limit} it may hold (AIRLOCK_MAX_PEER_SEGMENTS; each is a file descriptor)"
    )]
    PeerSegments { id: u32, count: usize, limit: usize },
    #[error(
        "{len} bytes at offset {offset} reach past the end of a segment of {segment_len} bytes"
    )]
    OutOfSegment {
        offset: u64,
        len: u64,
        segment_len: u64,
    },
    #[error(transparent)]
    Io(#[from] std::io::Error),
}
