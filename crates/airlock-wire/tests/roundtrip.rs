//! Property: whatever messages we encode come back out of a [`FrameDecoder`] unchanged and in
//! order, however the byte stream is cut into reads.

mod strategies;

use airlock_wire::limits::MAX_VALUE_DEPTH;
use airlock_wire::{FrameDecoder, Message, Value, encode_frame};
use proptest::collection::vec;
use proptest::prelude::*;
use strategies::*;

fn assert_same(got: &[Message], want: &[Message]) -> Result<(), TestCaseError> {
    prop_assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(want) {
        prop_assert!(message_eq(g, w), "decoded {:?}\nexpected {:?}", g, w);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(192))]

    #[test]
    fn messages_survive_any_chunking(
        msgs in vec(message(), 1..6),
        chunks in vec(1usize..97, 1..8),
        spare_min in 1usize..300,
    ) {
        let wire = encode_all(&msgs);
        let mut dec = FrameDecoder::new();
        let got = feed_chunked(&mut dec, &wire, &chunks, spare_min)
            .into_iter()
            .collect::<Result<Vec<_>, _>>();
        let got = got.map_err(|e| TestCaseError::fail(format!("decode failed: {e}")))?;
        assert_same(&got, &msgs)?;
        prop_assert_eq!(dec.pending(), 0);
        prop_assert_eq!(dec.finish(), Ok(()));
    }

    #[test]
    fn values_survive_a_reply(value in value(), id in any::<u64>()) {
        let msg = Message::Reply { id, value };
        let mut wire = Vec::new();
        encode_frame(&msg, &mut wire).unwrap();
        let mut dec = FrameDecoder::new();
        let got = feed_chunked(&mut dec, &wire, &[wire.len()], wire.len())
            .into_iter()
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| TestCaseError::fail(format!("decode failed: {e}")))?;
        assert_same(&got, std::slice::from_ref(&msg))?;
        // The encoding is canonical: re-encoding the decoded message gives the same bytes.
        let mut again = Vec::new();
        encode_frame(&got[0], &mut again).unwrap();
        prop_assert_eq!(again, wire);
    }

    #[test]
    fn uncommitted_spare_never_counts_as_data(
        msgs in vec(message(), 1..4),
        chunks in vec(1usize..64, 1..6),
        skips in vec(any::<bool>(), 1..6),
    ) {
        // A read that fails or would block leaves its spare tail uncommitted.
        let wire = encode_all(&msgs);
        let mut dec = FrameDecoder::new();
        let mut got = Vec::new();
        let (mut pos, mut i, mut skipped) = (0, 0, false);
        while pos < wire.len() {
            let spare = dec.spare(64);
            spare.fill(0xAA);
            // Skip at most once in a row, so the loop always makes progress.
            skipped = skips[i % skips.len()] && !skipped;
            if skipped {
                i += 1;
                continue;
            }
            let spare_len = spare.len();
            let n = chunks[i % chunks.len()].min(wire.len() - pos).min(spare_len);
            spare[..n].copy_from_slice(&wire[pos..pos + n]);
            dec.commit(n, spare_len);
            pos += n;
            i += 1;
            while let Some(m) = dec.next_message().unwrap() {
                got.push(m);
            }
        }
        assert_same(&got, &msgs)?;
        prop_assert_eq!(dec.finish(), Ok(()));
    }
}

fn nested(depth: usize, leaf: Value) -> Value {
    (0..depth).fold(leaf, |v, i| match i % 4 {
        0 => Value::List(vec![v]),
        1 => Value::Tuple(vec![Value::Int(1), v]),
        2 => Value::Dict(vec![(Value::None, v)]),
        _ => Value::Ext("ext".into(), Box::new(v)),
    })
}

#[test]
fn deepest_allowed_value_round_trips() {
    for leaf in [Value::Float(f64::NAN), Value::List(vec![])] {
        // MAX_VALUE_DEPTH containers around a leaf (an empty container counts as a leaf).
        let msg = Message::Reply {
            id: 9,
            value: nested(MAX_VALUE_DEPTH, leaf),
        };
        let wire = encode_all(std::slice::from_ref(&msg));
        let mut dec = FrameDecoder::new();
        let got: Vec<_> = feed_chunked(&mut dec, &wire, &[7, 1, 300], 16)
            .into_iter()
            .map(Result::unwrap)
            .collect();
        assert_eq!(got.len(), 1);
        assert!(message_eq(&got[0], &msg));
    }
}

#[test]
fn every_message_variant_round_trips() {
    // Covers each variant deterministically, independent of the strategy's sampling.
    use airlock_wire::{
        ArrayKind, DType, Hello, Lane, PROTOCOL_VERSION, Region, RemoteException, Side, TensorDesc,
        Token,
    };
    let region = Region {
        side: Side::Worker,
        segment: 3,
        offset: 4096,
        len: 48,
    };
    let tensor = Value::Tensor(TensorDesc {
        kind: ArrayKind::Numpy,
        dtype: DType::Float32,
        shape: vec![3, 4],
        strides: vec![4, 1],
        region: Some(region),
        device: "cpu".into(),
    });
    let value = Value::Dict(vec![
        (Value::Str("t".into()), tensor),
        (
            Value::BigInt(vec![
                46, 245, 192, 177, 17, 31, 140, 60, 9, 240, 22, 113, 254,
            ]),
            Value::Float(-0.0),
        ),
        (
            Value::Bytes(vec![0, 255]),
            Value::Ext("x".into(), Box::new(Value::Bool(true))),
        ),
    ]);
    let msgs = vec![
        Message::Hello(Hello {
            protocol: PROTOCOL_VERSION,
            token: Token([5; 32]),
            lane: Lane::Control,
            pid: 42,
            python: "3.12.1".into(),
            torch: Some("2.5.0".into()),
            numpy: None,
        }),
        Message::Welcome {
            generation: 2,
            name: "w".into(),
        },
        Message::Reject {
            reason: "no".into(),
        },
        Message::Call {
            id: 1,
            target: "m:f".into(),
            args: Value::Tuple(vec![value.clone()]),
            kwargs: Value::Dict(vec![]),
        },
        Message::Reply {
            id: 1,
            value: value.clone(),
        },
        Message::Error {
            id: 2,
            error: RemoteException {
                module: "builtins".into(),
                qualname: "ValueError".into(),
                message: "bad".into(),
                args: Value::Tuple(vec![Value::Str("bad".into())]),
                traceback: "Traceback ...".into(),
            },
        },
        Message::Segment {
            id: 3,
            len: 1 << 30,
        },
        Message::Retire { id: 3 },
        Message::Release {
            regions: vec![region; 3],
        },
        Message::Ping { seq: u64::MAX },
        Message::Pong { seq: 0 },
        Message::Shutdown,
        Message::Event {
            id: 7,
            topic: "progress".into(),
            payload: Value::Tuple(vec![Value::Int(1), Value::Int(4)]),
        },
    ];
    let wire = encode_all(&msgs);
    for chunk in [1, 2, 3, 5, 64, wire.len()] {
        let mut dec = FrameDecoder::new();
        let got: Vec<_> = feed_chunked(&mut dec, &wire, &[chunk], 1)
            .into_iter()
            .map(Result::unwrap)
            .collect();
        assert_eq!(got, msgs);
        dec.finish().unwrap();
    }
}
