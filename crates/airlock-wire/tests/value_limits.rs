//! The sender's check of a value (`Value::encoded_len`, `Value::check_frame`) agrees exactly with
//! what the encoder writes and with what the peer's decoder accepts: a value it passes always
//! decodes, and one it refuses would have been refused by the peer.

use airlock_wire::limits::{MAX_FRAME_VALUES, MAX_VALUE_DEPTH, MAX_VALUE_NODES};
use airlock_wire::{Blob, BlobKind, Region, Side, Value, ValueError};

fn nested(containers: usize) -> Value {
    let mut v = Value::Int(7);
    for _ in 0..containers {
        v = Value::List(vec![v]);
    }
    v
}

#[test]
fn encoded_len_is_the_encoders_length() {
    let region = Region {
        side: Side::Worker,
        segment: 3,
        offset: 4096,
        len: 70 << 20,
    };
    let values = [
        Value::None,
        Value::Str("x".repeat(300)),
        Value::Bytes(vec![1; 70_000]),
        Value::Dict(vec![(Value::Int(-5), nested(20))]),
        Value::Blob(Blob {
            kind: BlobKind::Str,
            region,
        }),
    ];
    for v in values {
        let bytes = postcard::to_allocvec(&v).unwrap();
        assert_eq!(v.encoded_len(), Ok(bytes.len()), "{v:?}");
        assert_eq!(postcard::from_bytes::<Value>(&bytes).unwrap(), v);
    }
}

#[test]
fn depth_is_checked_as_the_decoder_checks_it() {
    // MAX_VALUE_DEPTH containers, the innermost holding a leaf: the deepest the peer accepts.
    let deepest = nested(MAX_VALUE_DEPTH);
    let bytes = postcard::to_allocvec(&deepest).unwrap();
    assert_eq!(postcard::from_bytes::<Value>(&bytes).unwrap(), deepest);
    assert!(deepest.encoded_len().is_ok());
    // One more container: refused by the sender, in words (the decoder would refuse it too).
    let deeper = nested(MAX_VALUE_DEPTH + 1);
    assert_eq!(
        deeper.encoded_len(),
        Err(ValueError::TooDeep {
            max: MAX_VALUE_DEPTH
        })
    );
    // An empty container is a leaf on the wire, at any depth the containers allow.
    let mut v = Value::List(Vec::new());
    for _ in 0..MAX_VALUE_DEPTH {
        v = Value::List(vec![v]);
    }
    assert!(v.encoded_len().is_ok());
}

#[test]
fn node_count_is_checked_as_the_decoder_checks_it() {
    let most = Value::List(vec![Value::Int(1); MAX_VALUE_NODES - 1]);
    let bytes = postcard::to_allocvec(&most).unwrap();
    assert!(postcard::from_bytes::<Value>(&bytes).is_ok());
    assert!(most.encoded_len().is_ok());
    let over = Value::List(vec![Value::Int(1); MAX_VALUE_NODES]);
    let err = over.encoded_len().unwrap_err();
    assert_eq!(
        err,
        ValueError::TooManyNodes {
            max: MAX_VALUE_NODES
        }
    );
    assert!(err.to_string().contains("more than 1048576 items"));
}

#[test]
fn a_frame_of_values_is_held_to_the_frame_budget() {
    let half = Value::Bytes(vec![0; MAX_FRAME_VALUES / 2]);
    assert!(Value::check_frame(&[&half]).is_ok());
    let err = Value::check_frame(&[&half, &half, &Value::None]).unwrap_err();
    assert!(matches!(err, ValueError::TooLarge { max, .. } if max == MAX_FRAME_VALUES));
}
