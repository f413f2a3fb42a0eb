//! The fuzz targets' bodies, shared by the libFuzzer binaries (`frame_decoder.rs`,
//! `value_decoder.rs`) and the libFuzzer-free short run in `make test`
//! (`crates/airlock-wire/tests/fuzz_short.rs`, which includes this file by path), so both
//! exercise exactly the same code and the same properties:
//!
//! - nothing panics, whatever the bytes;
//! - every rejection is a [`WireError`] (returned, and counted by the caller);
//! - what decodes re-encodes canonically and decodes to the same message. Equality is checked
//!   on the encoding and on the `Debug` text, so NaN payloads and signed zeros count as equal
//!   exactly when their bits are (a `PartialEq` comparison calls two identical NaNs different,
//!   the false positive the first long campaign found in `ModelOp::PartiallyLoad`).

// Each includer uses only part of this file.
#![allow(dead_code)]

use airlock_wire::{FrameDecoder, Message, Value, WireError, encode_frame};

/// What one input did, for the caller's tallies.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Outcome {
    /// Messages (or values) decoded and round-tripped.
    pub decoded: u32,
    /// Inputs or frames refused, by [`WireError`] kind (see [`kind_index`]).
    pub rejected: [u32; KINDS],
}

/// The [`WireError`] kinds, in [`kind_index`] order.
pub const KIND_NAMES: [&str; KINDS] = [
    "frame_too_large",
    "truncated",
    "malformed",
    "limit_exceeded",
    "trailing_bytes",
];
pub const KINDS: usize = 5;

pub fn kind_index(e: &WireError) -> usize {
    match e {
        WireError::FrameTooLarge { .. } => 0,
        WireError::Truncated { .. } => 1,
        WireError::Malformed(_) => 2,
        WireError::LimitExceeded { .. } => 3,
        WireError::TrailingBytes(_) => 4,
        WireError::Unencodable { .. } => unreachable!("only encoding reports Unencodable"),
    }
}

fn check_roundtrip(msg: &Message) {
    let mut wire = Vec::new();
    encode_frame(msg, &mut wire).expect("a decoded message must re-encode");
    let mut dec = FrameDecoder::new();
    let spare = dec.spare(wire.len());
    let spare_len = spare.len();
    spare[..wire.len()].copy_from_slice(&wire);
    dec.commit(wire.len(), spare_len);
    let back = dec
        .next_message()
        .expect("a re-encoded message must decode")
        .expect("a whole frame was fed");
    assert_eq!(
        format!("{msg:?}"),
        format!("{back:?}"),
        "the round trip changed the message"
    );
    assert_eq!(dec.next_message(), Ok(None));
    assert_eq!(dec.finish(), Ok(()));
    // The encoding is canonical (this also compares float bits).
    let mut again = Vec::new();
    encode_frame(&back, &mut again).unwrap();
    assert_eq!(wire, again);
}

/// Arbitrary bytes into a [`FrameDecoder`], in chunks whose sizes the input also chooses: the
/// first byte picks the chunk size (1..=256), the second whether reads sometimes "would block"
/// (spare without commit); the rest is the stream.
pub fn frame_decoder(data: &[u8]) -> Outcome {
    let mut out = Outcome::default();
    let (Some(&c), Some(&flags)) = (data.first(), data.get(1)) else {
        return out;
    };
    let chunk = c as usize + 1;
    let stream = &data[2..];
    let mut dec = FrameDecoder::new();
    let mut pos = 0;
    let mut round = 0u32;
    while pos < stream.len() {
        round += 1;
        let spare = dec.spare(chunk);
        if flags & 1 == 1 && round % 3 == 0 {
            spare.fill(0xA5); // a read that would block: nothing committed
            continue;
        }
        let spare_len = spare.len();
        let n = chunk.min(stream.len() - pos).min(spare_len);
        spare[..n].copy_from_slice(&stream[pos..pos + n]);
        dec.commit(n, spare_len);
        pos += n;
        loop {
            match dec.next_message() {
                Ok(None) => break,
                Ok(Some(msg)) => {
                    check_roundtrip(&msg);
                    out.decoded += 1;
                }
                // The stream cannot be resynchronised after an impossible header: a lane
                // closes here.
                Err(e @ WireError::FrameTooLarge { .. }) => {
                    out.rejected[kind_index(&e)] += 1;
                    return out;
                }
                Err(e) => out.rejected[kind_index(&e)] += 1,
            }
        }
    }
    if let Err(e) = dec.finish() {
        out.rejected[kind_index(&e)] += 1;
    }
    out
}

/// Arbitrary bytes straight into the [`Value`] decoder; what decodes must round-trip.
pub fn value_decoder(data: &[u8]) -> Outcome {
    let mut out = Outcome::default();
    let (value, rest) = match postcard::take_from_bytes::<Value>(data) {
        Ok(v) => v,
        Err(e) => {
            out.rejected[kind_index(&WireError::from(e))] += 1;
            return out;
        }
    };
    let consumed = data.len() - rest.len();
    let bytes = postcard::to_allocvec(&value).expect("a decoded value must re-encode");
    let back: Value = postcard::from_bytes(&bytes).expect("a re-encoded value must decode");
    assert_eq!(format!("{value:?}"), format!("{back:?}"));
    let again = postcard::to_allocvec(&back).unwrap();
    assert_eq!(bytes, again);
    // Our encoding is minimal; the peer's may use overlong varints, never fewer bytes.
    assert!(
        bytes.len() <= consumed,
        "{} bytes re-encoded from {consumed}",
        bytes.len()
    );
    out.decoded = 1;
    out
}
