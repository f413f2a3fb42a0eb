//! Arbitrary bytes into a `FrameDecoder`, in chunks whose sizes the input also chooses. Every
//! message that decodes must re-encode and decode to itself (see `checks.rs`).
#![no_main]

use libfuzzer_sys::fuzz_target;

mod checks;

fuzz_target!(|data: &[u8]| {
    checks::frame_decoder(data);
});
