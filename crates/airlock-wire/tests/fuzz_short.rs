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

use airlock_wire::{
    Admission, Answer, FrameDecoder, LoadRequest, Message, ModelKind, ModelOp, ModelOutcome,
    ModelRow, Notice, Question, Setting, Value, WorkerReport, encode_frame,
};
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

// ---------------------------------------------------------------------------------------------
// The seed corpus names every message, so every message's decoding is where the mutator
// starts (a variant with no seed is reached only by chance mutations of another's bytes).

/// The variant's position in [`Message`]; exhaustive, so a new variant must be added here, and
/// then [`every_message_has_a_seed`] asks for its seed.
fn variant(m: &Message) -> usize {
    match m {
        Message::Hello(_) => 0,
        Message::Welcome { .. } => 1,
        Message::Reject { .. } => 2,
        Message::Call { .. } => 3,
        Message::Reply { .. } => 4,
        Message::Error { .. } => 5,
        Message::Segment { .. } => 6,
        Message::Retire { .. } => 7,
        Message::Release { .. } => 8,
        Message::Ping { .. } => 9,
        Message::Pong { .. } => 10,
        Message::Shutdown => 11,
        Message::Event { .. } => 12,
        Message::Model { .. } => 13,
        Message::CommandDone { .. } => 14,
        Message::Heartbeat { .. } => 15,
        Message::Report { .. } => 16,
        Message::Ask { .. } => 17,
        Message::Answer { .. } => 18,
        Message::Notice { .. } => 19,
        Message::Set { .. } => 20,
    }
}
const VARIANTS: usize = 21;

/// Every message a seed's stream decodes to.
fn seeded_messages() -> Vec<Message> {
    let mut out = Vec::new();
    for seed in seeds("frame_decoder") {
        let Some(stream) = seed.get(2..) else {
            continue;
        };
        let mut dec = FrameDecoder::new();
        let spare = dec.spare(stream.len());
        let spare_len = spare.len();
        spare[..stream.len()].copy_from_slice(stream);
        dec.commit(stream.len(), spare_len);
        while let Ok(Some(m)) = dec.next_message() {
            out.push(m);
        }
    }
    out
}

#[test]
fn every_message_has_a_seed() {
    let mut seen = [false; VARIANTS];
    for m in seeded_messages() {
        seen[variant(&m)] = true;
    }
    let missing: Vec<usize> = (0..VARIANTS).filter(|&i| !seen[i]).collect();
    assert!(
        missing.is_empty(),
        "no seed in fuzz/seeds/frame_decoder decodes to message variant(s) {missing:?}: \
         run `cargo test -p airlock-wire --test fuzz_short -- --ignored write_missing_seeds`"
    );
}

/// One plausible message of each variant that the memory protocol and the control lane added.
fn samples() -> Vec<Message> {
    let report = WorkerReport {
        pid: 4242,
        seq: 7,
        reserved: 1 << 30,
        models: vec![ModelRow {
            id: 3,
            name: "UNetModel".into(),
            kind: ModelKind::Patcher,
            device: "cuda:0".into(),
            size: 2 << 30,
            resident: 1 << 30,
            seq: 6,
            last_used: 1.7e9,
            in_use: false,
        }],
        pinned: 0,
        rss: Some(3 << 30),
        floor: Some(300 << 20),
        device_uuid: Some("GPU-5a1c0b2e-0000-1111-2222-333344445555".into()),
    };
    let load = LoadRequest {
        device: "cuda:0".into(),
        need: 3 << 30,
        minimum: 1 << 30,
        models: vec![3, 4],
    };
    vec![
        Message::Event {
            id: 1,
            topic: "progress".into(),
            payload: Value::Tuple(vec![Value::Int(1), Value::Int(2), Value::None]),
        },
        Message::Model {
            seq: 1,
            generation: 1,
            model: 3,
            op: ModelOp::PartiallyUnload { bytes: 1 << 20 },
        },
        Message::CommandDone {
            seq: 1,
            outcome: ModelOutcome::Done { bytes: 1 << 20 },
            report: Some(report.clone()),
        },
        Message::Heartbeat { seq: 2 },
        Message::Report {
            seq: 2,
            report: Some(report.clone()),
        },
        Message::Ask {
            id: 1,
            question: Question::Admit(load.clone()),
        },
        Message::Answer {
            id: 1,
            answer: Answer::Decided(Admission {
                granted: true,
                hold: Some(9),
                need: 3 << 30,
                free_before: 4 << 30,
                held: 0,
                free: 4 << 30,
            }),
        },
        Message::Notice {
            id: 1,
            notice: Notice::Telemetry(report),
        },
        Message::Notice {
            id: 1,
            notice: Notice::Loaded { holds: vec![9] },
        },
        Message::Set {
            seq: 3,
            generation: 1,
            setting: Setting::PinCeiling { bytes: 1 << 30 },
        },
    ]
}

/// Writes a seed (`kind-<Kind>`: chunk size 16, no "would block" reads, one frame) for each
/// sample whose variant no seed covers yet.
#[test]
#[ignore = "writes fuzz/seeds; run by hand when a message variant is added"]
fn write_missing_seeds() {
    let mut seen = [false; VARIANTS];
    for m in seeded_messages() {
        seen[variant(&m)] = true;
    }
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/seeds/frame_decoder");
    for m in samples() {
        if seen[variant(&m)] {
            continue;
        }
        seen[variant(&m)] = true;
        let mut seed = vec![15, 0];
        encode_frame(&m, &mut seed).unwrap();
        std::fs::write(dir.join(format!("kind-{}", m.kind())), seed).unwrap();
    }
}
