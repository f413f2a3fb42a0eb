//! Proptest strategies and comparison helpers shared by the integration tests
//! (`mod strategies;` in `roundtrip.rs` and `hostile.rs`). Built alone it has no tests.
#![allow(dead_code)]

use airlock_wire::limits::MAX_DIMS;
use airlock_wire::{
    Admission, Answer, ArrayKind, Blob, BlobKind, DType, FrameDecoder, Hello, Lane, LoadRequest,
    Message, ModelKind, ModelOp, ModelOutcome, ModelRow, Notice, Question, Region, RemoteException,
    Setting, Side, TOKEN_LEN, TensorDesc, Token, Value, WorkerReport, encode_frame,
};
use proptest::collection::vec;
use proptest::option;
use proptest::prelude::*;

pub fn side() -> impl Strategy<Value = Side> {
    prop_oneof![Just(Side::Host), Just(Side::Worker)]
}

pub fn region() -> impl Strategy<Value = Region> {
    (side(), any::<u32>(), any::<u64>(), any::<u64>()).prop_map(|(side, segment, offset, len)| {
        Region {
            side,
            segment,
            offset,
            len,
        }
    })
}

pub fn dtype() -> impl Strategy<Value = DType> {
    proptest::sample::select(DType::ALL.to_vec())
}

pub fn array_kind() -> impl Strategy<Value = ArrayKind> {
    prop_oneof![Just(ArrayKind::Torch), Just(ArrayKind::Numpy)]
}

/// Bytes a tensor of this layout needs, as [`TensorDesc::validate`] counts them.
pub fn needed_bytes(dtype: DType, shape: &[u64], strides: &[i64]) -> u64 {
    if shape.contains(&0) {
        return 0;
    }
    let last: u64 = shape
        .iter()
        .zip(strides)
        .map(|(&n, &s)| (n - 1) * s as u64)
        .sum();
    (last + 1) * dtype.itemsize()
}

/// Valid tensor descriptors: small shapes (sometimes empty, sometimes up to [`MAX_DIMS`] dims
/// of size 1), non-negative strides, and a region at least as long as the elements reach.
pub fn tensor_desc() -> impl Strategy<Value = TensorDesc> {
    let dims = prop_oneof![
        4 => vec((0u64..6, 0i64..40), 0..5),
        1 => vec((1u64..2, 0i64..1000), MAX_DIMS..=MAX_DIMS),
    ];
    (
        array_kind(),
        dtype(),
        dims,
        region(),
        0u64..64,
        any::<bool>(),
        prop_oneof![Just("cpu".to_string()), "cuda:[0-9]", ".{0,8}"],
    )
        .prop_map(
            |(kind, dtype, dims, mut r, extra, keep_empty_region, device)| {
                let (shape, strides): (Vec<u64>, Vec<i64>) = dims.into_iter().unzip();
                let needed = needed_bytes(dtype, &shape, &strides);
                let region = if needed == 0 && !keep_empty_region {
                    None
                } else {
                    r.len = needed + extra;
                    Some(r)
                };
                let t = TensorDesc {
                    kind,
                    dtype,
                    shape,
                    strides,
                    region,
                    device,
                };
                assert_eq!(
                    t.validate(),
                    Ok(()),
                    "strategy built an invalid tensor: {t:?}"
                );
                t
            },
        )
}

/// Floats including NaNs with arbitrary payloads, infinities and signed zeros.
pub fn float() -> impl Strategy<Value = f64> {
    prop_oneof![
        any::<u64>().prop_map(f64::from_bits),
        proptest::sample::select(vec![
            f64::NAN,
            -f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
            0.0,
            -0.0,
            f64::MIN_POSITIVE,
            f64::EPSILON,
        ]),
        any::<f64>(),
    ]
}

pub fn leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::None),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::Int),
        vec(any::<u8>(), 9..40).prop_map(Value::BigInt),
        float().prop_map(Value::Float),
        any::<String>().prop_map(Value::Str),
        vec(any::<u8>(), 0..24).prop_map(Value::Bytes),
        tensor_desc().prop_map(Value::Tensor),
        (any::<bool>(), region()).prop_map(|(text, region)| Value::Blob(Blob {
            kind: if text { BlobKind::Str } else { BlobKind::Bytes },
            region,
        })),
    ]
}

/// Arbitrary value trees of every variant, a few levels deep.
pub fn value() -> impl Strategy<Value = Value> {
    leaf().prop_recursive(5, 48, 6, |inner| {
        prop_oneof![
            vec(inner.clone(), 0..6).prop_map(Value::List),
            vec(inner.clone(), 0..6).prop_map(Value::Tuple),
            vec((inner.clone(), inner.clone()), 0..4).prop_map(Value::Dict),
            ("[a-z_.:]{0,12}", inner).prop_map(|(name, v)| Value::Ext(name, Box::new(v))),
        ]
    })
}

pub fn text() -> impl Strategy<Value = String> {
    prop_oneof![".{0,16}", any::<String>()]
}

pub fn hello() -> impl Strategy<Value = Hello> {
    (
        any::<u32>(),
        any::<[u8; TOKEN_LEN]>(),
        prop_oneof![
            Just(Lane::Call),
            Just(Lane::Control),
            Just(Lane::Route),
            Just(Lane::Events)
        ],
        any::<u32>(),
        text(),
        option::of(text()),
        option::of(text()),
    )
        .prop_map(|(protocol, token, lane, pid, python, torch, numpy)| Hello {
            protocol,
            token: Token(token),
            lane,
            pid,
            python,
            torch,
            numpy,
        })
}

pub fn message() -> impl Strategy<Value = Message> {
    prop_oneof![
        hello().prop_map(Message::Hello),
        (any::<u64>(), text()).prop_map(|(generation, name)| Message::Welcome { generation, name }),
        text().prop_map(|reason| Message::Reject { reason }),
        (any::<u64>(), text(), value(), value()).prop_map(|(id, target, args, kwargs)| {
            Message::Call {
                id,
                target,
                args,
                kwargs,
            }
        }),
        (any::<u64>(), value()).prop_map(|(id, value)| Message::Reply { id, value }),
        (any::<u64>(), text(), text(), text(), value(), text()).prop_map(
            |(id, module, qualname, message, args, traceback)| Message::Error {
                id,
                error: RemoteException {
                    module,
                    qualname,
                    message,
                    args,
                    traceback,
                },
            }
        ),
        (any::<u32>(), any::<u64>()).prop_map(|(id, len)| Message::Segment { id, len }),
        any::<u32>().prop_map(|id| Message::Retire { id }),
        vec(region(), 0..12).prop_map(|regions| Message::Release { regions }),
        any::<u64>().prop_map(|seq| Message::Ping { seq }),
        any::<u64>().prop_map(|seq| Message::Pong { seq }),
        Just(Message::Shutdown),
        (any::<u64>(), text(), value()).prop_map(|(id, topic, payload)| Message::Event {
            id,
            topic,
            payload
        }),
        (any::<u64>(), any::<u64>(), any::<u64>(), model_op()).prop_map(
            |(seq, generation, model, op)| Message::Model {
                seq,
                generation,
                model,
                op
            }
        ),
        (any::<u64>(), model_outcome(), option::of(report())).prop_map(|(seq, outcome, report)| {
            Message::CommandDone {
                seq,
                outcome,
                report,
            }
        }),
        any::<u64>().prop_map(|seq| Message::Heartbeat { seq }),
        (any::<u64>(), option::of(report()))
            .prop_map(|(seq, report)| Message::Report { seq, report }),
        (any::<u64>(), question()).prop_map(|(id, question)| Message::Ask { id, question }),
        (any::<u64>(), answer()).prop_map(|(id, answer)| Message::Answer { id, answer }),
        (any::<u64>(), notice()).prop_map(|(id, notice)| Message::Notice { id, notice }),
        (any::<u64>(), any::<u64>(), setting()).prop_map(|(seq, generation, setting)| {
            Message::Set {
                seq,
                generation,
                setting,
            }
        }),
    ]
}

/// Finite floats: a report's `last_used` compares with `==` in [`message_eq`].
fn finite() -> impl Strategy<Value = f64> {
    prop_oneof![Just(0.0), -1e12f64..1e12f64, 1.6e9f64..1.9e9f64]
}

pub fn model_row() -> impl Strategy<Value = ModelRow> {
    (
        (any::<u64>(), text(), any::<bool>(), text()),
        (
            any::<u64>(),
            any::<u64>(),
            any::<u64>(),
            finite(),
            any::<bool>(),
        ),
    )
        .prop_map(
            |((id, name, patcher, device), (size, resident, seq, last_used, in_use))| ModelRow {
                id,
                name,
                kind: if patcher {
                    ModelKind::Patcher
                } else {
                    ModelKind::Module
                },
                device,
                size,
                resident,
                seq,
                last_used,
                in_use,
            },
        )
}

pub fn report() -> impl Strategy<Value = WorkerReport> {
    (
        (
            any::<u32>(),
            any::<u64>(),
            any::<u64>(),
            vec(model_row(), 0..5),
        ),
        (
            any::<u64>(),
            option::of(any::<u64>()),
            option::of(any::<u64>()),
            option::of(text()),
        ),
    )
        .prop_map(
            |((pid, seq, reserved, models), (pinned, rss, floor, device_uuid))| WorkerReport {
                pid,
                seq,
                reserved,
                models,
                pinned,
                rss,
                floor,
                device_uuid,
            },
        )
}

pub fn load_request() -> impl Strategy<Value = LoadRequest> {
    (text(), any::<u64>(), any::<u64>(), vec(any::<u64>(), 0..6)).prop_map(
        |(device, need, minimum, models)| LoadRequest {
            device,
            need,
            minimum,
            models,
        },
    )
}

pub fn question() -> impl Strategy<Value = Question> {
    prop_oneof![
        load_request().prop_map(Question::Admit),
        load_request().prop_map(Question::Oom),
    ]
}

pub fn answer() -> impl Strategy<Value = Answer> {
    prop_oneof![
        (
            any::<bool>(),
            option::of(any::<u64>()),
            any::<u64>(),
            any::<u64>(),
            any::<u64>(),
            any::<u64>()
        )
            .prop_map(|(granted, hold, need, free_before, held, free)| {
                Answer::Decided(Admission {
                    granted,
                    hold,
                    need,
                    free_before,
                    held,
                    free,
                })
            }),
        text().prop_map(|reason| Answer::Unanswered { reason }),
    ]
}

pub fn notice() -> impl Strategy<Value = Notice> {
    prop_oneof![
        vec(any::<u64>(), 0..6).prop_map(|holds| Notice::Loaded { holds }),
        report().prop_map(Notice::Telemetry),
    ]
}

fn setting() -> impl Strategy<Value = Setting> {
    prop_oneof![
        any::<u64>().prop_map(|bytes| Setting::PinCeiling { bytes }),
        any::<u64>().prop_map(|bytes| Setting::CacheHeadroom { bytes }),
    ]
}

fn model_op() -> impl Strategy<Value = ModelOp> {
    prop_oneof![
        Just(ModelOp::Unload),
        any::<u64>().prop_map(|bytes| ModelOp::PartiallyUnload { bytes }),
        // Finite extras only: NaN never equals itself, and the host never sends one.
        (-1e33f64..1e33f64).prop_map(|extra| ModelOp::PartiallyLoad { extra }),
    ]
}

fn model_outcome() -> impl Strategy<Value = ModelOutcome> {
    prop_oneof![
        any::<u64>().prop_map(|bytes| ModelOutcome::Done { bytes }),
        text().prop_map(|reason| ModelOutcome::Refused { reason }),
    ]
}

/// Structural equality in which floats compare by bit pattern, so NaN equals the same NaN.
pub fn value_eq(a: &Value, b: &Value) -> bool {
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
        (Value::Float(_), _)
        | (Value::List(_), _)
        | (Value::Tuple(_), _)
        | (Value::Dict(_), _)
        | (Value::Ext(..), _) => false,
        _ => a == b,
    }
}

/// [`value_eq`] lifted to messages.
pub fn message_eq(a: &Message, b: &Message) -> bool {
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
                && ea.module == eb.module
                && ea.qualname == eb.qualname
                && ea.message == eb.message
                && ea.traceback == eb.traceback
                && value_eq(&ea.args, &eb.args)
        }
        (
            Message::Event {
                id: ia,
                topic: ta,
                payload: pa,
            },
            Message::Event {
                id: ib,
                topic: tb,
                payload: pb,
            },
        ) => ia == ib && ta == tb && value_eq(pa, pb),
        _ => a == b,
    }
}

/// Writes `bytes` into the decoder through [`FrameDecoder::spare`] / [`FrameDecoder::commit`]
/// in chunks of the given sizes (cycled), asking for `spare_min` bytes of room each time, and
/// collects every result `next_message` produces until it wants more bytes. Stops at the first
/// error that leaves the decoder stuck (an oversize header).
pub fn feed_chunked(
    dec: &mut FrameDecoder,
    bytes: &[u8],
    chunks: &[usize],
    spare_min: usize,
) -> Vec<Result<Message, airlock_wire::WireError>> {
    let mut out = Vec::new();
    let mut pos = 0;
    let mut i = 0;
    while pos < bytes.len() {
        let want = chunks
            .get(i % chunks.len().max(1))
            .copied()
            .unwrap_or(1)
            .max(1);
        i += 1;
        let spare = dec.spare(spare_min.max(1));
        let spare_len = spare.len();
        let n = want.min(bytes.len() - pos).min(spare_len);
        spare[..n].copy_from_slice(&bytes[pos..pos + n]);
        dec.commit(n, spare_len);
        pos += n;
        if drain(dec, &mut out) {
            return out;
        }
    }
    drain(dec, &mut out);
    out
}

/// Pulls messages until more bytes are needed; true when the decoder is stuck on an error.
fn drain(dec: &mut FrameDecoder, out: &mut Vec<Result<Message, airlock_wire::WireError>>) -> bool {
    loop {
        match dec.next_message() {
            Ok(None) => return false,
            Ok(Some(m)) => out.push(Ok(m)),
            Err(e @ airlock_wire::WireError::FrameTooLarge { .. }) => {
                out.push(Err(e));
                return true;
            }
            Err(e) => out.push(Err(e)),
        }
    }
}

/// One frame per message, concatenated.
pub fn encode_all(msgs: &[Message]) -> Vec<u8> {
    let mut wire = Vec::new();
    for m in msgs {
        encode_frame(m, &mut wire).expect("strategy messages encode");
    }
    wire
}
