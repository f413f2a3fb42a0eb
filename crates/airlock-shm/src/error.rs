use thiserror::Error;

use crate::settings::{LIMIT_ENV, PEER_MAP_ENV, PEER_SEGMENTS_ENV};

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
         {limit} bytes in segments are taken ({LIMIT_ENV} sets the limit, and so does \
         {PEER_MAP_ENV}, which the peer holds us to)"
    )]
    PoolLimit {
        len: u64,
        limit: u64,
        in_use: u64,
        pool: String,
    },
    #[error(
        "shared-memory pool '{pool}' is full: {len} more bytes need a new segment, and it holds \
         the most segments the peer accepts, {limit} ({PEER_SEGMENTS_ENV})"
    )]
    SegmentLimit {
        len: u64,
        limit: usize,
        pool: String,
    },
    #[error(
        "segment {id} of {len} bytes would make {total} bytes of the peer's shared memory mapped \
         here, more than the {limit} it may make us map ({PEER_MAP_ENV})"
    )]
    PeerBytes {
        id: u32,
        len: u64,
        total: u64,
        limit: u64,
    },
    #[error(
        "segment {id} would be the peer's segment number {count} held here, more than the \
         {limit} it may hold ({PEER_SEGMENTS_ENV}; each is a file descriptor)"
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limit_errors_name_the_variable_that_sets_the_limit() {
        let full = ShmError::PoolLimit {
            len: 1,
            limit: 2,
            in_use: 2,
            pool: "p".into(),
        };
        let text = full.to_string();
        assert!(
            text.contains("(AIRLOCK_SHM_LIMIT_MIB sets the limit"),
            "{text}"
        );
        assert!(text.contains("AIRLOCK_MAX_PEER_MAP_MIB, which"), "{text}");
        let segments = ShmError::PeerSegments {
            id: 1,
            count: 2,
            limit: 1,
        };
        assert!(
            segments
                .to_string()
                .contains("(AIRLOCK_MAX_PEER_SEGMENTS; each"),
            "{segments}"
        );
    }
}
