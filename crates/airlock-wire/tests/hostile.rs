//! Hostile input: whatever bytes a peer sends, decoding returns (never panics, never recurses
//! on peer-chosen depth) and allocates in proportion to what was actually sent.

mod strategies;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use airlock_wire::limits::{
    MAX_DIMS, MAX_FRAME_LEN, MAX_MEMORY_ITEMS, MAX_RELEASES, MAX_VALUE_DEPTH,
};
use airlock_wire::{
    ArrayKind, DType, FrameDecoder, Message, Notice, Region, Side, TensorDesc, Value, WireError,
    WorkerReport, encode_frame,
};
use proptest::collection::vec;
use proptest::prelude::*;
use serde::Serialize;
use strategies::*;

// ---------------------------------------------------------------------------------------------
// A global allocator that records, per thread and only while asked to, the largest single
// allocation and the peak of live bytes.

struct Counting;

thread_local! {
    static TRACKING: Cell<bool> = const { Cell::new(false) };
    static LARGEST: Cell<usize> = const { Cell::new(0) };
    static LIVE: Cell<isize> = const { Cell::new(0) };
    static PEAK: Cell<isize> = const { Cell::new(0) };
}

fn note_alloc(size: usize) {
    let _ = TRACKING.try_with(|t| {
        if t.get() {
            LARGEST.with(|l| l.set(l.get().max(size)));
            LIVE.with(|l| {
                let now = l.get() + size as isize;
                l.set(now);
                PEAK.with(|p| p.set(p.get().max(now)));
            });
        }
    });
}

fn note_dealloc(size: usize) {
    let _ = TRACKING.try_with(|t| {
        if t.get() {
            LIVE.with(|l| l.set(l.get() - size as isize));
        }
    });
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note_alloc(layout.size());
        // SAFETY: forwarded unchanged.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note_alloc(layout.size());
        // SAFETY: forwarded unchanged.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        note_dealloc(layout.size());
        // SAFETY: forwarded unchanged.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note_dealloc(layout.size());
        note_alloc(new_size);
        // SAFETY: forwarded unchanged.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// Allocation figures of one closure run on this thread.
#[derive(Debug)]
struct Usage {
    largest: usize,
    peak_live: isize,
}

fn measure<R>(f: impl FnOnce() -> R) -> (R, Usage) {
    LARGEST.with(|l| l.set(0));
    LIVE.with(|l| l.set(0));
    PEAK.with(|p| p.set(0));
    TRACKING.with(|t| t.set(true));
    let r = f();
    TRACKING.with(|t| t.set(false));
    let usage = Usage {
        largest: LARGEST.with(Cell::get),
        peak_live: PEAK.with(Cell::get),
    };
    (r, usage)
}

/// The bound the brief sets for decoding a small hostile input.
fn small_bound(input: usize) -> usize {
    2 * input + (1 << 20)
}

// ---------------------------------------------------------------------------------------------
// Hand-crafted encodings. postcard encodes an enum as the varint variant index then the
// payload, so these mirrors (same variant order as the private `Node` and as `Message`)
// produce exactly the bytes a peer could send, including ones our encoder refuses to make.

#[derive(Serialize, Clone)]
#[allow(dead_code)]
enum RawNode {
    None,
    Bool(bool),
    Int(i64),
    BigInt(#[serde(with = "serde_bytes")] Vec<u8>),
    Float(f64),
    Str(String),
    Bytes(#[serde(with = "serde_bytes")] Vec<u8>),
    List(u32),
    Tuple(u32),
    Dict(u32),
    Tensor(TensorDesc),
    Ext(String),
}

/// Variant indices of [`Message`].
const REPLY: u8 = 4;
const RELEASE: u8 = 8;
const NOTICE: u8 = 19;
/// Variant index of `Notice::Loaded`.
const LOADED: u8 = 0;

fn varint(mut n: u64, out: &mut Vec<u8>) {
    loop {
        let b = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            out.push(b);
            return;
        }
        out.push(b | 0x80);
    }
}

fn nodes_bytes(nodes: &[RawNode]) -> Vec<u8> {
    postcard::to_allocvec(nodes).unwrap()
}

/// A whole frame: `Reply { id: 1, value: <value_bytes> }`.
fn reply_frame(value_bytes: &[u8]) -> Vec<u8> {
    let mut body = vec![REPLY, 1];
    body.extend_from_slice(value_bytes);
    framed(&body)
}

fn framed(body: &[u8]) -> Vec<u8> {
    let mut out = (body.len() as u32).to_le_bytes().to_vec();
    out.extend_from_slice(body);
    out
}

/// Decodes every frame of `wire`, fed in one piece.
fn decode_all(wire: &[u8]) -> Vec<Result<Message, WireError>> {
    let mut dec = FrameDecoder::new();
    feed_chunked(&mut dec, wire, &[wire.len().max(1)], 1)
}

fn decode_one(wire: &[u8]) -> Result<Message, WireError> {
    let mut got = decode_all(wire);
    assert_eq!(got.len(), 1, "expected one frame");
    got.pop().unwrap()
}

fn decode_value(bytes: &[u8]) -> Result<Value, postcard::Error> {
    postcard::from_bytes::<Value>(bytes)
}

/// Asserts a frame was refused as malformed. postcard drops the text of custom serde errors
/// (they all read "Serde Deserialization Error"), so `why` only labels the failure; each test
/// pairs its hostile input with an honest control that decodes.
fn assert_malformed(r: Result<Message, WireError>, why: &str) {
    assert!(
        matches!(r, Err(WireError::Malformed(_))),
        "expected a Malformed error ({why}), got {r:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// Arbitrary bytes.

/// Decodes `bytes` every way a peer can reach, checking only that it returns with bounded
/// allocation. Run under `measure`.
fn poke(bytes: &[u8]) {
    let _ = decode_all(bytes);
    let _ = decode_all(&framed(bytes));
    let _ = decode_value(bytes);
    let _ = postcard::from_bytes::<Message>(bytes);
}

fn mutate(mut wire: Vec<u8>, edits: &[(usize, u8, u8)], cut: Option<usize>) -> Vec<u8> {
    for &(at, op, byte) in edits {
        if wire.is_empty() {
            wire.push(byte);
            continue;
        }
        let at = at % wire.len();
        match op % 4 {
            0 => wire[at] = byte,
            1 => wire[at] ^= 1 << (byte % 8),
            2 => wire.insert(at, byte),
            _ => {
                wire.remove(at);
            }
        }
    }
    if let Some(cut) = cut {
        wire.truncate(cut % (wire.len() + 1));
    }
    wire
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in vec(any::<u8>(), 0..512)) {
        let ((), usage) = measure(|| poke(&bytes));
        prop_assert!(usage.largest < small_bound(bytes.len() + 4), "{usage:?}");
    }

    #[test]
    fn arbitrary_chunked_streams_never_panic(
        bytes in vec(any::<u8>(), 0..512),
        chunks in vec(1usize..40, 1..6),
    ) {
        let mut dec = FrameDecoder::new();
        let _ = feed_chunked(&mut dec, &bytes, &chunks, 8);
        let _ = dec.finish();
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn mutated_frames_never_panic(
        msgs in vec(message(), 1..3),
        edits in vec((any::<usize>(), any::<u8>(), any::<u8>()), 0..6),
        cut in proptest::option::of(any::<usize>()),
        chunks in vec(1usize..64, 1..4),
    ) {
        let wire = mutate(encode_all(&msgs), &edits, cut);
        let (_, usage) = measure(|| {
            let mut dec = FrameDecoder::new();
            let out = feed_chunked(&mut dec, &wire, &chunks, 16);
            let _ = dec.finish();
            out
        });
        // Values hold up to ~100 bytes per node of input; bound generously but finitely.
        prop_assert!(usage.largest < 256 * wire.len() + (1 << 20), "{usage:?}");
        // The bodies alone (fed straight to the value and message decoders).
        for m in &msgs {
            if let Message::Reply { value, .. } = m {
                let bytes = mutate(postcard::to_allocvec(value).unwrap(), &edits, cut);
                let _ = decode_value(&bytes);
            }
        }
    }

    #[test]
    fn whatever_decodes_reencodes_to_itself(
        msgs in vec(message(), 1..3),
        edits in vec((any::<usize>(), any::<u8>(), any::<u8>()), 1..4),
    ) {
        // A mutation that still decodes must give a message that round-trips exactly.
        let wire = mutate(encode_all(&msgs), &edits, None);
        for m in decode_all(&wire).into_iter().flatten() {
            let mut again = Vec::new();
            encode_frame(&m, &mut again).unwrap();
            let back = decode_one(&again).unwrap();
            prop_assert!(message_eq(&back, &m));
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Depth.

fn nested_lists(depth: usize, leaf: Value) -> Value {
    (0..depth).fold(leaf, |v, _| Value::List(vec![v]))
}

fn nested_nodes(depth: usize, leaf: RawNode) -> Vec<RawNode> {
    let mut nodes = vec![RawNode::List(1); depth];
    nodes.push(leaf);
    nodes
}

#[test]
fn too_deep_value_is_refused_when_encoding() {
    let mut out = Vec::new();
    encode_frame(&Message::Ping { seq: 1 }, &mut out).unwrap();
    let queued = out.clone();
    let deep = Message::Reply {
        id: 1,
        value: nested_lists(MAX_VALUE_DEPTH + 1, Value::Int(0)),
    };
    assert!(encode_frame(&deep, &mut out).is_err());
    // A failed encode leaves the frames already queued in `out` untouched.
    assert_eq!(out, queued);
    // Exactly the limit is fine, and so is one more level when it is empty.
    for v in [
        nested_lists(MAX_VALUE_DEPTH, Value::Int(0)),
        nested_lists(MAX_VALUE_DEPTH, Value::List(vec![])),
    ] {
        encode_frame(&Message::Reply { id: 1, value: v }, &mut out).unwrap();
    }
    let got = decode_all(&out);
    assert_eq!(got.len(), 3);
    assert!(got.iter().all(Result::is_ok));
}

#[test]
fn too_deep_node_list_is_refused_when_decoding() {
    let ok = nodes_bytes(&nested_nodes(MAX_VALUE_DEPTH, RawNode::None));
    assert!(decode_value(&ok).is_ok());
    assert!(decode_one(&reply_frame(&ok)).is_ok());
    // An empty container at the next level is a leaf, as the encoder allows.
    let ok_empty = nodes_bytes(&nested_nodes(MAX_VALUE_DEPTH, RawNode::Dict(0)));
    assert!(decode_value(&ok_empty).is_ok());

    for leaf in [RawNode::None, RawNode::Ext("e".into())] {
        let deep = nodes_bytes(&nested_nodes(MAX_VALUE_DEPTH + 1, leaf));
        assert!(decode_value(&deep).is_err());
        assert_malformed(decode_one(&reply_frame(&deep)), "deeper");
    }
    // Far deeper than any stack would bear if decoding recursed.
    let very_deep = nodes_bytes(&nested_nodes(200_000, RawNode::None));
    let (r, usage) = measure(|| decode_one(&reply_frame(&very_deep)));
    assert_malformed(r, "deeper");
    assert!(usage.largest < 128 * very_deep.len(), "{usage:?}");
}

// ---------------------------------------------------------------------------------------------
// Lying counts.

#[test]
fn huge_child_counts_in_a_tiny_frame_are_refused_without_allocating() {
    for claim in [
        RawNode::List(u32::MAX),
        RawNode::Tuple(u32::MAX),
        RawNode::Dict(u32::MAX),
        RawNode::List(2),
    ] {
        let bytes = nodes_bytes(&[claim, RawNode::None]);
        let honest = nodes_bytes(&[RawNode::List(1), RawNode::None]);
        assert!(decode_one(&reply_frame(&honest)).is_ok());
        let frame = reply_frame(&bytes);
        let (r, usage) = measure(|| decode_one(&frame));
        assert_malformed(r, "await more items");
        assert!(usage.largest < small_bound(frame.len()), "{usage:?}");
        let (r, usage) = measure(|| decode_value(&bytes));
        assert!(r.is_err());
        assert!(usage.largest < small_bound(bytes.len()), "{usage:?}");
    }
    // A node list claiming u32::MAX nodes (beyond MAX_VALUE_NODES) with two bytes following.
    let mut bytes = Vec::new();
    varint(u32::MAX as u64, &mut bytes);
    bytes.extend([0, 0]);
    let (r, usage) = measure(|| decode_one(&reply_frame(&bytes)));
    assert_malformed(r, "exceed the limit");
    assert!(usage.largest < small_bound(bytes.len()), "{usage:?}");
    // Strings, byte strings and tensor shapes claiming u32::MAX elements.
    for variant in [3u8, 5, 6] {
        let mut bytes = vec![1, variant];
        varint(u32::MAX as u64, &mut bytes);
        let (r, usage) = measure(|| decode_value(&bytes));
        assert!(r.is_err());
        assert!(usage.largest < small_bound(bytes.len()), "{usage:?}");
    }
    let mut bytes = vec![1, 10, 0, 0]; // one Tensor node: Torch, Bool, then the shape length
    varint(u32::MAX as u64, &mut bytes);
    let (r, usage) = measure(|| decode_value(&bytes));
    assert!(r.is_err());
    assert!(usage.largest < small_bound(bytes.len()), "{usage:?}");
}

#[test]
fn nested_containers_cannot_each_reserve_the_whole_remainder() {
    // Each container claims (nearly) every node that follows. Each claim alone is possible,
    // together they are not; a decoder that sized every container by the nodes left would
    // reserve depth × nodes × size_of::<Value>() bytes for an input of a few KiB.
    let leaves = 20_000usize;
    let depth = MAX_VALUE_DEPTH - 1;
    let mut nodes = Vec::new();
    for d in 0..depth {
        nodes.push(RawNode::List((leaves + depth - d - 1) as u32));
    }
    nodes.extend(std::iter::repeat_n(RawNode::None, leaves));
    let frame = reply_frame(&nodes_bytes(&nodes));
    let (r, usage) = measure(|| decode_one(&frame));
    assert_malformed(r, "await more items");
    // Honest worst case: a Vec<Node> and a Vec<Value> per node (~104 B each), doubled for
    // growth by reallocation. Reserving per claim would be ~127 × 20 000 × 104 B ≈ 264 MB.
    let honest = 4 * (leaves + depth) * std::mem::size_of::<Value>() + (1 << 20);
    assert!(usage.peak_live < honest as isize, "{usage:?}");

    // The honest version of the same shape decodes.
    let mut nodes: Vec<RawNode> = (0..depth).map(|_| RawNode::List(1)).collect();
    nodes.push(RawNode::List(leaves as u32));
    nodes.extend(std::iter::repeat_n(RawNode::None, leaves));
    assert!(decode_one(&reply_frame(&nodes_bytes(&nodes))).is_ok());
}

#[test]
fn truncated_and_overlong_node_lists_are_refused() {
    let full = [RawNode::Dict(1), RawNode::Int(1), RawNode::Str("x".into())];
    assert!(decode_value(&nodes_bytes(&full)).is_ok());
    // The node count covers only part of the tree.
    let mut short = nodes_bytes(&full[..2]);
    short.extend(&nodes_bytes(&full[2..])[1..]);
    assert!(decode_value(&short).is_err());
    // Nodes after a complete value.
    let mut extra = full.to_vec();
    extra.push(RawNode::None);
    assert_malformed(decode_one(&reply_frame(&nodes_bytes(&extra))), "follow");
    // An empty node list.
    assert!(decode_value(&nodes_bytes(&[])).is_err());
}

#[test]
fn big_integers_without_bytes_are_refused() {
    let bytes = nodes_bytes(&[RawNode::BigInt(Vec::new())]);
    assert!(
        decode_value(&bytes).is_err(),
        "an empty big integer decoded"
    );
    let msg = Message::Reply {
        id: 0,
        value: Value::BigInt(Vec::new()),
    };
    assert!(encode_frame(&msg, &mut Vec::new()).is_err());
    // Any bytes are an integer (two's complement); their number is bounded by the frame.
    for good in [vec![0], vec![0xff], vec![0; 9], vec![0x80; 4096]] {
        let bytes = nodes_bytes(&[RawNode::BigInt(good.clone())]);
        assert_eq!(decode_value(&bytes), Ok(Value::BigInt(good)));
    }
}

// ---------------------------------------------------------------------------------------------
// Releases.

fn region(i: u32) -> Region {
    Region {
        side: Side::Host,
        segment: i,
        offset: 0,
        len: 1,
    }
}

#[test]
fn release_lists_over_the_limit_are_refused() {
    let at_limit = Message::Release {
        regions: (0..MAX_RELEASES as u32).map(region).collect(),
    };
    assert_eq!(
        decode_one(&encode_all(std::slice::from_ref(&at_limit))),
        Ok(at_limit)
    );

    let over = Message::Release {
        regions: (0..=MAX_RELEASES as u32).map(region).collect(),
    };
    let mut wire = Vec::new();
    // The encoder does not check this limit (message.rs); the decoder must.
    if encode_frame(&over, &mut wire).is_ok() {
        assert_malformed(decode_one(&wire), "regions");
    }

    // A tiny frame claiming u32::MAX regions.
    let mut body = vec![RELEASE];
    varint(u32::MAX as u64, &mut body);
    body.extend(postcard::to_allocvec(&region(1)).unwrap());
    let frame = framed(&body);
    let (r, usage) = measure(|| decode_one(&frame));
    assert_malformed(r, "regions");
    assert!(usage.largest < small_bound(frame.len()), "{usage:?}");
}

#[test]
fn memory_lists_over_the_limit_are_refused() {
    let loaded = |n: u64| Message::Notice {
        id: 1,
        notice: Notice::Loaded {
            holds: (0..n).collect(),
        },
    };
    let at_limit = loaded(MAX_MEMORY_ITEMS as u64);
    assert_eq!(
        decode_one(&encode_all(std::slice::from_ref(&at_limit))),
        Ok(at_limit)
    );
    let mut wire = Vec::new();
    // The encoder does not check this limit (the binding checks what Python hands it); the
    // decoder must.
    if encode_frame(&loaded(MAX_MEMORY_ITEMS as u64 + 1), &mut wire).is_ok() {
        assert_malformed(decode_one(&wire), "holds");
    }

    // A tiny frame claiming u32::MAX holds, then one claiming u32::MAX model rows in a report.
    let mut body = vec![NOTICE, 1, LOADED];
    varint(u32::MAX as u64, &mut body);
    body.push(7);
    let frame = framed(&body);
    let (r, usage) = measure(|| decode_one(&frame));
    assert_malformed(r, "holds");
    assert!(usage.largest < small_bound(frame.len()), "{usage:?}");

    let report = WorkerReport {
        pid: 1,
        seq: 1,
        reserved: 0,
        models: Vec::new(),
        pinned: 0,
        rss: None,
        floor: None,
        device_uuid: None,
    };
    let honest = Message::Report {
        seq: 1,
        report: Some(report),
    };
    let mut wire = encode_all(std::slice::from_ref(&honest));
    assert_eq!(decode_one(&wire), Ok(honest));
    // Report { seq: 1, Some(pid 1, seq 1, reserved 0, models: <count>) }: the count is the
    // byte after the frame header, variant, seq, Some, pid, seq and reserved.
    let at = 4 + 6;
    assert_eq!(wire[at], 0, "the empty models list's count");
    let mut count = Vec::new();
    varint(u32::MAX as u64, &mut count);
    wire.splice(at..=at, count);
    let body = wire[4..].to_vec();
    let frame = framed(&body);
    let (r, usage) = measure(|| decode_one(&frame));
    assert_malformed(r, "models");
    assert!(usage.largest < small_bound(frame.len()), "{usage:?}");
}

// ---------------------------------------------------------------------------------------------
// Frame headers.

#[test]
fn oversize_frame_headers_are_refused_before_the_body() {
    for len in [u32::MAX, MAX_FRAME_LEN as u32 + 1] {
        let mut dec = FrameDecoder::new();
        let (r, usage) = measure(|| feed_chunked(&mut dec, &len.to_le_bytes(), &[1], 1));
        assert!(
            matches!(r.as_slice(), [Err(WireError::FrameTooLarge { .. })]),
            "{r:?}"
        );
        assert!(usage.largest < 4096, "{usage:?}");
        // The decoder stays refused rather than resynchronising on garbage.
        assert!(dec.next_message().is_err());
    }
    // Exactly the limit is a frame still to come, not an error.
    let mut dec = FrameDecoder::new();
    let r = feed_chunked(&mut dec, &(MAX_FRAME_LEN as u32).to_le_bytes(), &[4], 4);
    assert!(r.is_empty());
    assert!(matches!(dec.finish(), Err(WireError::Truncated { .. })));
}

#[test]
fn zero_length_and_garbage_frames_are_errors_not_panics() {
    let mut wire = framed(&[]);
    wire.extend(framed(&[0xff; 9]));
    wire.extend(framed(&[REPLY])); // a Reply missing its fields
    encode_frame(&Message::Shutdown, &mut wire).unwrap();
    let got = decode_all(&wire);
    assert_eq!(got.len(), 4);
    assert!(got[..3].iter().all(Result::is_err));
    // A bad frame costs only itself: the stream resynchronises on the next header.
    assert_eq!(got[3], Ok(Message::Shutdown));
}

// ---------------------------------------------------------------------------------------------
// Tensor descriptors.

fn desc(shape: Vec<u64>, strides: Vec<i64>, region_len: Option<u64>) -> TensorDesc {
    TensorDesc {
        kind: ArrayKind::Torch,
        dtype: DType::Float32,
        shape,
        strides,
        region: region_len.map(|len| Region {
            side: Side::Worker,
            segment: 0,
            offset: 0,
            len,
        }),
        device: "cpu".into(),
    }
}

#[test]
fn bad_tensor_descriptors_are_refused() {
    let good = desc(vec![2, 3], vec![3, 1], Some(24));
    assert_eq!(good.validate(), Ok(()));
    let bad = [
        (
            "reaches past its region",
            desc(vec![2, 3], vec![3, 1], Some(23)),
        ),
        (
            "stride past its region",
            desc(vec![2, 3], vec![4, 1], Some(24)),
        ),
        (
            "shape/strides lengths differ",
            desc(vec![2, 3], vec![3], Some(24)),
        ),
        (
            "strides longer than shape",
            desc(vec![2], vec![1, 1], Some(24)),
        ),
        (
            "too many dims",
            desc(vec![1; MAX_DIMS + 1], vec![1; MAX_DIMS + 1], Some(4)),
        ),
        ("negative stride", desc(vec![2], vec![-1], Some(8))),
        ("elements without a region", desc(vec![1], vec![1], None)),
        (
            "element count overflows",
            desc(vec![u64::MAX, 2], vec![0, 0], Some(4)),
        ),
        (
            "reach overflows",
            desc(vec![3], vec![i64::MAX], Some(u64::MAX)),
        ),
        (
            "bytes overflow",
            desc(vec![u64::MAX / 2], vec![1], Some(u64::MAX)),
        ),
        // The last element's index is exactly u64::MAX, so its count (index + 1) overflows.
        (
            "element index at u64::MAX",
            desc(vec![2, 2, 2], vec![i64::MAX, i64::MAX, 1], None),
        ),
        (
            "element index at u64::MAX with a region",
            desc(vec![2, 2, 2], vec![i64::MAX, i64::MAX, 1], Some(4)),
        ),
    ];
    for (why, t) in bad {
        assert!(t.validate().is_err(), "{why}: validate accepted {t:?}");
        // Refused when encoding ...
        let msg = Message::Reply {
            id: 1,
            value: Value::Tensor(t.clone()),
        };
        assert!(
            encode_frame(&msg, &mut Vec::new()).is_err(),
            "{why}: encoded"
        );
        // ... and when a peer sends it anyway, alone or inside a container.
        let alone = nodes_bytes(&[RawNode::Tensor(t.clone())]);
        assert!(decode_value(&alone).is_err(), "{why}: decoded");
        let inside = nodes_bytes(&[RawNode::List(2), RawNode::None, RawNode::Tensor(t)]);
        assert_malformed(decode_one(&reply_frame(&inside)), "tensor");
    }
    // Edge cases that are valid.
    for t in [
        desc(vec![0, 5], vec![5, 1], None),
        desc(vec![], vec![], Some(4)),
        desc(vec![4], vec![0], Some(4)),
        desc(vec![1; MAX_DIMS], vec![7; MAX_DIMS], Some(4)),
    ] {
        assert_eq!(t.validate(), Ok(()), "{t:?}");
        let bytes = nodes_bytes(&[RawNode::Tensor(t.clone())]);
        assert_eq!(decode_value(&bytes), Ok(Value::Tensor(t)));
    }
}
