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
}

impl From<postcard::Error> for WireError {
    fn from(e: postcard::Error) -> Self {
        WireError::Malformed(e.to_string())
    }
}
