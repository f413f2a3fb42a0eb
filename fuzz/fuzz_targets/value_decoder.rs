//! Arbitrary bytes straight into the `Value` decoder; what decodes must round-trip (see
//! `checks.rs`).
#![no_main]

use libfuzzer_sys::fuzz_target;

mod checks;

fuzz_target!(|data: &[u8]| {
    checks::value_decoder(data);
});
