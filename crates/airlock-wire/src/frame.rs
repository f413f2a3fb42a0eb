//! Length-prefixed framing over a byte stream.

use crate::error::WireError;
use crate::limits::MAX_FRAME_LEN;
use crate::message::Message;

const HEADER_LEN: usize = 4;

/// Appends one frame (header and body) holding `msg` to `out`.
///
/// Fails only when the encoded message would exceed [`MAX_FRAME_LEN`], which the peer would
/// refuse anyway.
pub fn encode_frame(msg: &Message, out: &mut Vec<u8>) -> Result<(), WireError> {
    let start = out.len();
    out.extend_from_slice(&[0; HEADER_LEN]);
    // Serialize in place; on failure `out` is restored to what the caller had queued.
    if let Err(e) = postcard::to_extend(msg, AppendTo(out)) {
        out.truncate(start);
        return Err(unencodable(msg).unwrap_or_else(|| e.into()));
    }
    let len = out.len() - start - HEADER_LEN;
    if len > MAX_FRAME_LEN {
        out.truncate(start);
        return Err(WireError::FrameTooLarge {
            len,
            max: MAX_FRAME_LEN,
        });
    }
    out[start..start + HEADER_LEN].copy_from_slice(&(len as u32).to_le_bytes());
    Ok(())
}

/// Why `msg` cannot be encoded, in words: postcard keeps only "Serde Serialization Error" of
/// the reason a value gave, so the value is checked again (on this failure path only).
fn unencodable(msg: &Message) -> Option<WireError> {
    msg.values().into_iter().find_map(|v| {
        v.encoded_len().err().map(|e| WireError::Unencodable {
            kind: msg.kind(),
            reason: e.to_string(),
        })
    })
}

/// Lets postcard append to a borrowed buffer, so an encoding error cannot take the caller's
/// earlier frames with it.
struct AppendTo<'a>(&'a mut Vec<u8>);

impl Extend<u8> for AppendTo<'_> {
    fn extend<I: IntoIterator<Item = u8>>(&mut self, iter: I) {
        self.0.extend(iter);
    }
}

/// Splits a byte stream into messages.
///
/// Bytes are written into [`FrameDecoder::spare`] (straight from `recv`, without a copy) and
/// committed with [`FrameDecoder::commit`]; complete frames come out of
/// [`FrameDecoder::next_message`]. A frame header announcing more than [`MAX_FRAME_LEN`] is an
/// error as soon as its four bytes arrive, before any of its body is buffered.
#[derive(Debug, Default)]
pub struct FrameDecoder {
    /// Received bytes are `buf[start..filled]`; `buf[filled..]` is scratch for the next read
    /// and never counts as data until committed.
    buf: Vec<u8>,
    start: usize,
    filled: usize,
}

impl FrameDecoder {
    pub fn new() -> Self {
        Self::default()
    }

    /// A writable tail of at least `min` bytes for the next read. Calling it again without a
    /// commit (a read that failed) discards nothing and counts nothing.
    pub fn spare(&mut self, min: usize) -> &mut [u8] {
        if self.start == self.filled {
            self.start = 0;
            self.filled = 0;
        } else if self.start > self.buf.len() / 2 {
            self.buf.copy_within(self.start..self.filled, 0);
            self.filled -= self.start;
            self.start = 0;
        }
        if self.buf.len() < self.filled + min {
            self.buf.resize(self.filled + min, 0);
        }
        &mut self.buf[self.filled..]
    }

    /// Marks the first `n` bytes of the last [`FrameDecoder::spare`] slice (of length
    /// `spare_len`) as received.
    pub fn commit(&mut self, n: usize, spare_len: usize) {
        debug_assert!(n <= spare_len && self.filled + spare_len <= self.buf.len());
        self.filled += n.min(self.buf.len() - self.filled);
    }

    /// Bytes buffered but not yet returned as messages.
    pub fn pending(&self) -> usize {
        self.filled - self.start
    }

    /// The next complete message, `Ok(None)` when more bytes are needed.
    pub fn next_message(&mut self) -> Result<Option<Message>, WireError> {
        let avail = &self.buf[self.start..self.filled];
        if avail.len() < HEADER_LEN {
            return Ok(None);
        }
        let len = u32::from_le_bytes([avail[0], avail[1], avail[2], avail[3]]) as usize;
        if len > MAX_FRAME_LEN {
            return Err(WireError::FrameTooLarge {
                len,
                max: MAX_FRAME_LEN,
            });
        }
        if avail.len() < HEADER_LEN + len {
            return Ok(None);
        }
        let body = &avail[HEADER_LEN..HEADER_LEN + len];
        self.start += HEADER_LEN + len;
        decode_body(body).map(Some)
    }

    /// Called at end of stream: an error if a frame was cut short.
    pub fn finish(&self) -> Result<(), WireError> {
        let have = self.pending();
        if have == 0 {
            return Ok(());
        }
        let want = if have >= HEADER_LEN {
            let a = &self.buf[self.start..self.filled];
            HEADER_LEN + u32::from_le_bytes([a[0], a[1], a[2], a[3]]) as usize
        } else {
            HEADER_LEN
        };
        Err(WireError::Truncated { have, want })
    }
}

fn decode_body(body: &[u8]) -> Result<Message, WireError> {
    let (msg, rest) = postcard::take_from_bytes::<Message>(body)?;
    if !rest.is_empty() {
        return Err(WireError::TrailingBytes(rest.len()));
    }
    Ok(msg)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn feed(dec: &mut FrameDecoder, bytes: &[u8]) {
        let spare = dec.spare(bytes.len());
        let spare_len = spare.len();
        spare[..bytes.len()].copy_from_slice(bytes);
        dec.commit(bytes.len(), spare_len);
    }

    #[test]
    fn frames_split_anywhere_decode_in_order() {
        let msgs = [
            Message::Ping { seq: 1 },
            Message::Shutdown,
            Message::Pong { seq: 7 },
        ];
        let mut wire = Vec::new();
        for m in &msgs {
            encode_frame(m, &mut wire).unwrap();
        }
        for split in 0..wire.len() {
            let mut dec = FrameDecoder::new();
            let mut out = Vec::new();
            for chunk in [&wire[..split], &wire[split..]] {
                feed(&mut dec, chunk);
                while let Some(m) = dec.next_message().unwrap() {
                    out.push(m);
                }
            }
            assert_eq!(out, msgs);
            dec.finish().unwrap();
        }
    }

    #[test]
    fn oversize_header_is_refused_before_the_body() {
        let mut dec = FrameDecoder::new();
        feed(&mut dec, &u32::MAX.to_le_bytes());
        assert!(matches!(
            dec.next_message(),
            Err(WireError::FrameTooLarge { .. })
        ));
    }

    #[test]
    fn a_value_over_the_limits_is_refused_in_words_before_anything_is_written() {
        let mut out = b"earlier".to_vec();
        let msg = Message::Reply {
            id: 1,
            value: crate::Value::List(vec![crate::Value::Int(1); crate::limits::MAX_VALUE_NODES]),
        };
        let err = encode_frame(&msg, &mut out).unwrap_err().to_string();
        assert!(err.contains("cannot send a Reply"), "{err}");
        assert!(err.contains("more than 1048576 items"), "{err}");
        assert_eq!(out, b"earlier", "the caller's earlier frames are untouched");
    }

    #[test]
    fn truncated_stream_is_reported() {
        let mut wire = Vec::new();
        encode_frame(&Message::Ping { seq: 3 }, &mut wire).unwrap();
        let mut dec = FrameDecoder::new();
        feed(&mut dec, &wire[..wire.len() - 1]);
        assert_eq!(dec.next_message(), Ok(None));
        assert!(matches!(dec.finish(), Err(WireError::Truncated { .. })));
    }

    #[test]
    fn trailing_bytes_inside_a_frame_are_refused() {
        let mut wire = Vec::new();
        encode_frame(&Message::Shutdown, &mut wire).unwrap();
        wire.push(0);
        let len = u32::from_le_bytes(wire[..4].try_into().unwrap()) + 1;
        wire[..4].copy_from_slice(&len.to_le_bytes());
        let mut dec = FrameDecoder::new();
        feed(&mut dec, &wire);
        assert_eq!(dec.next_message(), Err(WireError::TrailingBytes(1)));
    }
}
