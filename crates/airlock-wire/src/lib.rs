//! The comfy-airlock wire protocol: what host and worker say to each other.
//!
//! A lane is a byte stream (a Unix socket) carrying length-prefixed frames: a little-endian
//! `u32` body length, then a [postcard] encoding of one [`Message`]. Tensor bytes never travel
//! in frames; frames carry [`TensorDesc`]s pointing into shared-memory segments.
//!
//! The memory protocol (reports, admission questions, model commands) is typed: see
//! [`WorkerReport`], [`Question`], [`Notice`], [`ModelOp`] and [`Setting`].
//!
//! Decoding is written for a hostile peer: it never panics, never recurses on peer-chosen
//! depth, and never allocates more than [`limits`] allow, whatever the bytes say.

mod error;
mod frame;
mod handshake;
pub mod limits;
mod memory;
mod message;
mod tensor;
mod value;

pub use error::{ValueError, WireError};
pub use frame::{FrameDecoder, encode_frame};
pub use handshake::{HandshakeError, Hello, Lane, PROTOCOL_VERSION, TOKEN_LEN, Token};
pub use memory::{
    Admission, Answer, LoadRequest, ModelKind, ModelOp, ModelOutcome, ModelRow, Notice, Question,
    Setting, WorkerReport,
};
pub use message::{Message, Region, RemoteException, Side};
pub use tensor::{ArrayKind, Blob, BlobKind, DType, TensorDesc};
pub use value::Value;
