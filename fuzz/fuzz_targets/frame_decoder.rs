//! Arbitrary bytes into a `FrameDecoder`, in chunks whose sizes the input also chooses. Every
//! message that decodes must re-encode and decode to itself.
#![no_main]

use airlock_wire::{FrameDecoder, Message, Value, WireError, encode_frame};
use libfuzzer_sys::fuzz_target;

/// Equality with floats compared by bit pattern (NaN payloads survive the wire).
fn value_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Float(x), Value::Float(y)) => x.to_bits() == y.to_bits(),
        (Value::List(x), Value::List(y)) | (Value::Tuple(x), Value::Tuple(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| value_eq(a, b))
        }
        (Value::Dict(x), Value::Dict(y)) => {
            x.len() == y.len()
                && x.iter()
                    .zip(y)
                    .all(|((ka, va), (kb, vb))| value_eq(ka, kb) && value_eq(va, vb))
        }
        (Value::Ext(na, pa), Value::Ext(nb, pb)) => na == nb && value_eq(pa, pb),
        _ => a == b,
    }
}

fn message_eq(a: &Message, b: &Message) -> bool {
    match (a, b) {
        (
            Message::Call {
                id: ia,
                target: ta,
                args: aa,
                kwargs: ka,
            },
            Message::Call {
                id: ib,
                target: tb,
                args: ab,
                kwargs: kb,
            },
        ) => ia == ib && ta == tb && value_eq(aa, ab) && value_eq(ka, kb),
        (Message::Reply { id: ia, value: va }, Message::Reply { id: ib, value: vb }) => {
            ia == ib && value_eq(va, vb)
        }
        (Message::Error { id: ia, error: ea }, Message::Error { id: ib, error: eb }) => {
            ia == ib
                && (&ea.module, &ea.qualname, &ea.message, &ea.traceback)
                    == (&eb.module, &eb.qualname, &eb.message, &eb.traceback)
                && value_eq(&ea.args, &eb.args)
        }
        _ => a == b,
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
    assert!(
        message_eq(msg, &back),
        "round trip changed {msg:?} into {back:?}"
    );
    assert_eq!(dec.next_message(), Ok(None));
    assert_eq!(dec.finish(), Ok(()));
    // The encoding is canonical.
    let mut again = Vec::new();
    encode_frame(&back, &mut again).unwrap();
    assert_eq!(wire, again);
}

fuzz_target!(|data: &[u8]| {
    // The first byte picks the chunk size (1..=256), the second whether reads sometimes
    // "would block" (spare without commit); the rest is the stream.
    let (Some(&c), Some(&flags)) = (data.first(), data.get(1)) else {
        return;
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
                Ok(Some(msg)) => check_roundtrip(&msg),
                Err(WireError::FrameTooLarge { .. }) => return,
                Err(_) => {}
            }
        }
    }
    let _ = dec.finish();
});
