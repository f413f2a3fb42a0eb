//! The short fuzz run of `make test`, without libFuzzer: the checked-in seed corpus
//! (`fuzz/seeds/`), mutated by a seeded RNG for a fixed number of inputs, through exactly the
//! target functions the libFuzzer campaign runs (`fuzz/fuzz_targets/checks.rs`). It needs no
//! nightly flags, no cargo-fuzz and no sanitizer runtime, so it runs on a clean clone in CI;
//! it is deterministic for a given `AIRLOCK_FUZZ_SEED` (printed), and bounded by
//! `AIRLOCK_FUZZ_INPUTS` (default 250 000 per target, about 2 s each in a debug build).
//!
//! Not coverage-guided: inputs that decode join the pool (so later mutations start from valid
//! structure more often), which is the only feedback. The long, coverage-guided campaign is
//! `make fuzz` (docs/reliability.md has its figures).
//!
//! Asserted: no input panics (a panic fails the test and prints the input in hex), every
//! rejection is a typed `WireError` (the target functions count them by kind), and the run
//! reaches both outcomes: inputs that decode and inputs refused for each of the main reasons.

#[path = "../../../fuzz/fuzz_targets/checks.rs"]
mod checks;

use std::path::PathBuf;

use checks::{KIND_NAMES, KINDS, Outcome};

/// splitmix64: small, seedable, good enough to pick mutations.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }
}

/// Values that sit on the edges of lengths, counts and varints.
const INTERESTING: [u8; 10] = [0, 1, 2, 0x7f, 0x80, 0xff, 0xfe, 0x40, 0x3f, 0x10];
const INTERESTING_U32: [u32; 8] = [
    0,
    1,
    0x7f,
    0xffff,
    (64 << 20) - 1,
    64 << 20,
    (64 << 20) + 1,
    u32::MAX,
];
const MAX_INPUT: usize = 4096;

fn mutate(rng: &mut Rng, input: &mut Vec<u8>, pool: &[Vec<u8>]) {
    let rounds = 1 + rng.below(4);
    for _ in 0..rounds {
        let len = input.len();
        match rng.below(10) {
            0 if len > 0 => {
                let i = rng.below(len);
                input[i] ^= 1 << rng.below(8);
            }
            1 if len > 0 => {
                let i = rng.below(len);
                input[i] = INTERESTING[rng.below(INTERESTING.len())];
            }
            2 if len > 0 => {
                let i = rng.below(len);
                input[i] = rng.next() as u8;
            }
            3 => {
                let i = rng.below(len + 1);
                let n = 1 + rng.below(16);
                let bytes: Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
                input.splice(i..i, bytes);
            }
            4 if len > 0 => {
                let i = rng.below(len);
                let n = 1 + rng.below((len - i).min(32));
                input.drain(i..i + n);
            }
            5 if len > 0 => {
                // Duplicate a slice (repeated frames, repeated nodes).
                let i = rng.below(len);
                let n = 1 + rng.below((len - i).min(64));
                let copy = input[i..i + n].to_vec();
                let at = rng.below(input.len() + 1);
                input.splice(at..at, copy);
            }
            6 if len >= 4 => {
                // A length or count field with an edge value (frame headers are u32 LE).
                let i = rng.below(len - 3);
                let v = INTERESTING_U32[rng.below(INTERESTING_U32.len())];
                input[i..i + 4].copy_from_slice(&v.to_le_bytes());
            }
            7 if !pool.is_empty() => {
                // Splice: the head of this input, the tail of another.
                let other = &pool[rng.below(pool.len())];
                let cut = rng.below(len + 1);
                let from = rng.below(other.len() + 1);
                input.truncate(cut);
                input.extend_from_slice(&other[from..]);
            }
            8 if len > 0 => input.truncate(rng.below(len)),
            _ => {
                // An overlong varint: where postcard expects one, a peer may pad it.
                let i = rng.below(len + 1);
                input.splice(i..i, [0x80, 0x80, 0x00]);
            }
        }
    }
    input.truncate(MAX_INPUT);
}

fn seeds(target: &str) -> Vec<Vec<u8>> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/seeds")
        .join(target);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("seed corpus {}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    let corpus: Vec<Vec<u8>> = files.iter().map(|p| std::fs::read(p).unwrap()).collect();
    assert!(!corpus.is_empty(), "no seeds in {}", dir.display());
    corpus
}

fn env_u64(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(v) => v
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v:?} is not a number")),
        Err(_) => default,
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[derive(Default, Debug)]
struct Tally {
    inputs: u64,
    decoded: u64,
    rejected: [u64; KINDS],
}

/// Runs `target` on the seeds, then on `inputs` mutants of them; returns the tallies.
fn campaign(name: &str, target: fn(&[u8]) -> Outcome, seed: u64, inputs: u64) -> Tally {
    let mut pool = seeds(name);
    let seeded = pool.len();
    let mut rng = Rng(seed ^ name.len() as u64);
    let mut tally = Tally::default();
    let run = |input: &[u8], tally: &mut Tally| -> Outcome {
        let out = std::panic::catch_unwind(|| target(input)).unwrap_or_else(|_| {
            panic!(
                "{name}: input {} (seed {seed}) panicked; hex: {}",
                tally.inputs,
                hex(input)
            )
        });
        tally.inputs += 1;
        tally.decoded += u64::from(out.decoded);
        for (t, r) in tally.rejected.iter_mut().zip(out.rejected) {
            *t += u64::from(r);
        }
        out
    };
    for s in pool.clone() {
        run(&s, &mut tally);
    }
    for _ in 0..inputs {
        let mut input = pool[rng.below(pool.len())].clone();
        mutate(&mut rng, &mut input, &pool);
        let out = run(&input, &mut tally);
        // The only feedback: inputs that decode become seeds (bounded, oldest mutants out).
        if out.decoded > 0 {
            if pool.len() >= seeded + 512 {
                pool.remove(seeded + rng.below(512));
            }
            pool.push(input);
        }
    }
    let rejections: Vec<String> = KIND_NAMES
        .iter()
        .zip(tally.rejected)
        .map(|(k, n)| format!("{k}={n}"))
        .collect();
    println!(
        "fuzz_short {name}: seed {seed}, {} inputs, {} decoded, rejected: {}",
        tally.inputs,
        tally.decoded,
        rejections.join(" ")
    );
    tally
}

fn seed() -> u64 {
    env_u64("AIRLOCK_FUZZ_SEED", 0x00A1_4C0C)
}

fn inputs() -> u64 {
    env_u64("AIRLOCK_FUZZ_INPUTS", 250_000)
}

#[test]
fn frame_decoder_short_run() {
    let t = campaign("frame_decoder", checks::frame_decoder, seed(), inputs());
    assert!(
        t.decoded > 0,
        "no input decoded: the mutator lost the seeds' structure"
    );
    // The refusals a hostile peer can provoke at the frame level were all reached.
    for kind in [
        "frame_too_large",
        "truncated",
        "malformed",
        "trailing_bytes",
    ] {
        let i = KIND_NAMES.iter().position(|k| *k == kind).unwrap();
        assert!(t.rejected[i] > 0, "no {kind} rejection in {t:?}");
    }
}

#[test]
fn value_decoder_short_run() {
    let t = campaign("value_decoder", checks::value_decoder, seed(), inputs());
    assert!(
        t.decoded > 0,
        "no input decoded: the mutator lost the seeds' structure"
    );
    assert!(
        t.rejected.iter().sum::<u64>() > 0,
        "nothing was refused: {t:?}"
    );
}
