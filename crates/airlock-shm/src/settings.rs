//! The limits a user sets for shared memory, read from the environment when a pool is
//! configured (a worker spawn in the host, the connect in a worker).
//!
//! Both sides read the same variables (a worker inherits `AIRLOCK_*`), and each side holds its
//! own pool to what it lets its peer map: an honest peer's pool is refused on its own side, with
//! an error of its own, before it could announce more than the other side accepts.

/// Caps each side's pool, in MiB (default 64 GiB): for hosts and containers with less memory to
/// lend, and for tests that fill the pool.
pub const LIMIT_ENV: &str = "AIRLOCK_SHM_LIMIT_MIB";
/// Caps the bytes of the peer's segments one side maps at once, in MiB (default 64 GiB): what a
/// worker can make the host commit by announcing segments and referencing them.
pub const PEER_MAP_ENV: &str = "AIRLOCK_MAX_PEER_MAP_MIB";
/// Caps the peer's segments one side holds at once (default 256): each is a file descriptor.
pub const PEER_SEGMENTS_ENV: &str = "AIRLOCK_MAX_PEER_SEGMENTS";

const DEFAULT_LIMIT: u64 = 64 << 30;
/// Segments are at least 32 MiB, so an honest pool reaches 256 only with 8 GiB or more in
/// live tensors; 256 descriptors per worker leave room under the usual 1024 of a host.
const DEFAULT_PEER_SEGMENTS: usize = 256;

/// What one side accepts of its peer's segments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerLimits {
    /// Most bytes of the peer's segments held (and so mappable) at once.
    pub bytes: u64,
    /// Most segments of the peer held at once.
    pub segments: usize,
}

impl PeerLimits {
    /// The limits the environment sets (a value that is not a positive integer is ignored).
    pub fn from_env() -> PeerLimits {
        PeerLimits {
            bytes: mib_from_env(PEER_MAP_ENV).unwrap_or(DEFAULT_LIMIT),
            segments: positive_from_env(PEER_SEGMENTS_ENV)
                .and_then(|n| usize::try_from(n).ok())
                .unwrap_or(DEFAULT_PEER_SEGMENTS),
        }
    }
}

impl Default for PeerLimits {
    fn default() -> Self {
        PeerLimits::from_env()
    }
}

/// The pool limit of [`LIMIT_ENV`], in bytes.
pub(crate) fn pool_limit_from_env() -> u64 {
    mib_from_env(LIMIT_ENV).unwrap_or(DEFAULT_LIMIT)
}

fn positive_from_env(name: &str) -> Option<u64> {
    parse_positive(&std::env::var(name).ok()?)
}

fn mib_from_env(name: &str) -> Option<u64> {
    positive_from_env(name)?.checked_mul(1 << 20)
}

fn parse_positive(v: &str) -> Option<u64> {
    v.trim().parse::<u64>().ok().filter(|&n| n > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_positive_integers_count() {
        assert_eq!(parse_positive(" 12 "), Some(12));
        for bad in ["0", "-3", "1.5", "", "lots"] {
            assert_eq!(parse_positive(bad), None, "{bad:?}");
        }
    }
}
