use thiserror::Error;

/// Why bytes from a peer could not be turned into a [`crate::Message`].
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum WireError {
    #[error("frame of {len} bytes exceeds the limit of {max} bytes")]
    FrameTooLarge { len: usize, max: usize },
    #[error("stream ended inside a frame ({have} of {want} bytes received)")]
    Truncated { have: usize, want: usize },
    #[error("malformed frame body: {0}")]
    Malformed(String),
    #[error("{what} exceeds the limit of {max}")]
    LimitExceeded { what: &'static str, max: usize },
    #[error("frame has {0} trailing bytes after the message")]
    TrailingBytes(usize),
    /// Our own message could not be encoded (a value over the limits the peer enforces); found
    /// before anything was written.
    #[error("cannot send a {kind}: {reason}")]
    Unencodable { kind: &'static str, reason: String },
}

/// Why a [`crate::Value`] cannot be sent: it breaks a limit the peer's decoder enforces.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum ValueError {
    #[error("it has more than {max} items, the most one value may have")]
    TooManyNodes { max: usize },
    #[error("it nests containers more than {max} levels deep")]
    TooDeep { max: usize },
    #[error("a container of {0} items is too large")]
    ContainerTooLarge(usize),
    #[error("a big integer has no bytes")]
    BadBigInt,
    #[error("{0}")]
    BadTensor(String),
    #[error(
        "it encodes to {len} bytes, more than the {max} bytes of values one frame may carry \
         (bytes and str over 1 MiB travel in shared memory; many smaller items do not)"
    )]
    TooLarge { len: usize, max: usize },
}

impl From<postcard::Error> for WireError {
    fn from(e: postcard::Error) -> Self {
        WireError::Malformed(e.to_string())
    }
}
