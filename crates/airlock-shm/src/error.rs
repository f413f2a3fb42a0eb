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
    #[error("allocation of {len} bytes exceeds the pool limit of {limit} bytes")]
    PoolLimit { len: u64, limit: u64 },
    #[error(transparent)]
    Io(#[from] std::io::Error),
}
