//! The bounds a decoder enforces on peer input. Each is far above what ComfyUI values need and
//! far below what would let a peer exhaust the host's memory or stack.

/// Largest frame body accepted. Frames carry control data and small values only.
pub const MAX_FRAME_LEN: usize = 64 << 20;
/// Most nodes in one [`crate::Value`] tree.
pub const MAX_VALUE_NODES: usize = 1 << 20;
/// Deepest nesting of containers in one [`crate::Value`].
pub const MAX_VALUE_DEPTH: usize = 128;
/// Most dimensions of one tensor.
pub const MAX_DIMS: usize = 64;
/// Most regions released by one message.
pub const MAX_RELEASES: usize = 1 << 16;
/// Most entries in one list of the memory protocol: a report's models, a load's models, the
/// holds of a finished load.
pub const MAX_MEMORY_ITEMS: usize = 1 << 16;
/// Longest string field outside values (names, versions, messages, tracebacks).
pub const MAX_TEXT: usize = 1 << 20;
/// Most bytes the values of one frame may encode to: the frame limit, less room for the
/// frame's other fields (a call's target, an event's topic). Senders check it before sending.
pub const MAX_FRAME_VALUES: usize = MAX_FRAME_LEN - (1 << 20);
