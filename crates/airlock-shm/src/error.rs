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
         {limit} bytes in segments are taken (AIRLOCK_SHM_LIMIT_MIB sets the limit)"
    )]
    PoolLimit {
        len: u64,
        limit: u64,
        in_use: u64,
        pool: String,
    },
    #[error(transparent)]
    Io(#[from] std::io::Error),
}
