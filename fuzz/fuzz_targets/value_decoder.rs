//! Arbitrary bytes straight into the `Value` decoder; what decodes must round-trip.
#![no_main]

use airlock_wire::Value;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok((value, rest)) = postcard::take_from_bytes::<Value>(data) else {
        return;
    };
    let consumed = data.len() - rest.len();
    let bytes = postcard::to_allocvec(&value).expect("a decoded value must re-encode");
    let back: Value = postcard::from_bytes(&bytes).expect("a re-encoded value must decode");
    // Compare encodings rather than values: NaN != NaN, but its bits must survive.
    let again = postcard::to_allocvec(&back).unwrap();
    assert_eq!(bytes, again);
    // Our encoding is minimal; the peer's may use overlong varints, never fewer bytes.
    assert!(
        bytes.len() <= consumed,
        "{} bytes re-encoded from {consumed}",
        bytes.len()
    );
});
