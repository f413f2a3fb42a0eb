//! Values that cross the boundary: a closed set of types, never pickle.
//!
//! On the wire a [`Value`] is a flat, prefix-ordered list of nodes in which containers carry
//! their child count. Decoding that list needs no recursion, so a peer cannot overflow our stack
//! with deep nesting, and the tree is rebuilt with an explicit stack bounded by
//! [`MAX_VALUE_DEPTH`].

use std::fmt;
use std::marker::PhantomData;

use serde::de::{self, SeqAccess, Visitor};
use serde::ser::{self, SerializeSeq};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::error::ValueError;
use crate::limits::{MAX_FRAME_VALUES, MAX_VALUE_DEPTH, MAX_VALUE_NODES};
use crate::tensor::{Blob, TensorDesc};

/// A value crossing the boundary.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum Value {
    #[default]
    None,
    Bool(bool),
    Int(i64),
    /// An integer beyond `i64`: its two's-complement bytes, least significant first (Python's
    /// `int.to_bytes(n, "little", signed=True)`). Bytes, not decimal text: decimal conversion
    /// is quadratic, and Python refuses it past 4 300 digits. Bounded by the frame's length.
    BigInt(Vec<u8>),
    Float(f64),
    Str(String),
    Bytes(Vec<u8>),
    List(Vec<Value>),
    Tuple(Vec<Value>),
    /// Key/value pairs in insertion order; keys may be any value.
    Dict(Vec<(Value, Value)>),
    Tensor(TensorDesc),
    /// A value of a type registered as a codec on both sides: the codec's name and its payload.
    Ext(String, Box<Value>),
    /// `bytes` or `str` that travel in shared memory.
    Blob(Blob),
}

/// One node of the flat encoding.
#[derive(Serialize, Deserialize)]
enum Node {
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
    Blob(Blob),
}

/// The same node borrowed from a [`Value`] being encoded; serializes exactly as [`Node`].
#[derive(Serialize)]
#[serde(rename = "Node")]
enum NodeRef<'a> {
    None,
    Bool(bool),
    Int(i64),
    BigInt(#[serde(with = "serde_bytes")] &'a [u8]),
    Float(f64),
    Str(&'a str),
    Bytes(#[serde(with = "serde_bytes")] &'a [u8]),
    List(u32),
    Tuple(u32),
    Dict(u32),
    Tensor(&'a TensorDesc),
    Ext(&'a str),
    Blob(&'a Blob),
}

const EMPTY_BIG_INT: &str = "big integer has no bytes";

fn count(n: usize) -> Result<u32, ValueError> {
    u32::try_from(n).map_err(|_| ValueError::ContainerTooLarge(n))
}

/// Flattens `value` in prefix order, checking the limits a peer will enforce, exactly as
/// [`unflatten`] does: a container (non-empty, or an `Ext`) may have at most
/// [`MAX_VALUE_DEPTH`] containers above it.
fn flatten(value: &Value) -> Result<Vec<NodeRef<'_>>, ValueError> {
    let mut out = Vec::new();
    let mut stack: Vec<(&Value, usize)> = vec![(value, 0)];
    while let Some((v, depth)) = stack.pop() {
        if out.len() >= MAX_VALUE_NODES {
            return Err(ValueError::TooManyNodes {
                max: MAX_VALUE_NODES,
            });
        }
        let opens = match v {
            Value::List(items) | Value::Tuple(items) => !items.is_empty(),
            Value::Dict(pairs) => !pairs.is_empty(),
            Value::Ext(..) => true,
            _ => false,
        };
        if opens && depth >= MAX_VALUE_DEPTH {
            return Err(ValueError::TooDeep {
                max: MAX_VALUE_DEPTH,
            });
        }
        let d = depth + 1;
        out.push(match v {
            Value::None => NodeRef::None,
            Value::Bool(b) => NodeRef::Bool(*b),
            Value::Int(i) => NodeRef::Int(*i),
            Value::BigInt(b) => {
                if b.is_empty() {
                    return Err(ValueError::BadBigInt);
                }
                NodeRef::BigInt(b)
            }
            Value::Float(f) => NodeRef::Float(*f),
            Value::Str(s) => NodeRef::Str(s),
            Value::Bytes(b) => NodeRef::Bytes(b),
            Value::Tensor(t) => {
                t.validate().map_err(ValueError::BadTensor)?;
                NodeRef::Tensor(t)
            }
            Value::Blob(b) => NodeRef::Blob(b),
            Value::List(items) => {
                stack.extend(items.iter().rev().map(|v| (v, d)));
                NodeRef::List(count(items.len())?)
            }
            Value::Tuple(items) => {
                stack.extend(items.iter().rev().map(|v| (v, d)));
                NodeRef::Tuple(count(items.len())?)
            }
            Value::Dict(pairs) => {
                for (k, v) in pairs.iter().rev() {
                    stack.push((v, d));
                    stack.push((k, d));
                }
                NodeRef::Dict(count(pairs.len())?)
            }
            Value::Ext(name, inner) => {
                stack.push((inner, d));
                NodeRef::Ext(name)
            }
        });
    }
    Ok(out)
}

/// Flattened nodes, serialized as the sequence a [`Value`] is on the wire.
struct Flat<'a>(&'a [NodeRef<'a>]);

impl Serialize for Flat<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(self.0.len()))?;
        for n in self.0 {
            seq.serialize_element(n)?;
        }
        seq.end()
    }
}

impl Value {
    /// The bytes this value takes in a frame, or why the peer would refuse it. A sender calls
    /// this before it writes anything, so that a value that cannot cross is the caller's error
    /// and never a broken lane.
    pub fn encoded_len(&self) -> Result<usize, ValueError> {
        let nodes = flatten(self)?;
        postcard::experimental::serialized_size(&Flat(&nodes)).map_err(|_| ValueError::TooLarge {
            len: usize::MAX,
            max: MAX_FRAME_VALUES,
        })
    }

    /// [`Value::encoded_len`] of several values that travel in one frame, against
    /// [`MAX_FRAME_VALUES`].
    pub fn check_frame(values: &[&Value]) -> Result<usize, ValueError> {
        let mut len: usize = 0;
        for v in values {
            len = len.saturating_add(v.encoded_len()?);
        }
        if len > MAX_FRAME_VALUES {
            return Err(ValueError::TooLarge {
                len,
                max: MAX_FRAME_VALUES,
            });
        }
        Ok(len)
    }
}

impl Serialize for Value {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let nodes = flatten(self).map_err(ser::Error::custom)?;
        Flat(&nodes).serialize(s)
    }
}

/// A container being rebuilt: what it becomes and how many children it still awaits.
enum Open {
    List(Vec<Value>, usize),
    Tuple(Vec<Value>, usize),
    Dict(Vec<(Value, Value)>, Option<Value>, usize),
    Ext(String, Option<Box<Value>>),
}

impl Open {
    /// Adds a finished child; true once the container has all its children.
    fn push(&mut self, child: Value) -> bool {
        match self {
            Open::List(items, left) | Open::Tuple(items, left) => {
                items.push(child);
                *left -= 1;
                *left == 0
            }
            Open::Dict(pairs, key, left) => match key.take() {
                None => {
                    *key = Some(child);
                    false
                }
                Some(k) => {
                    pairs.push((k, child));
                    *left -= 1;
                    *left == 0
                }
            },
            Open::Ext(_, payload) => {
                *payload = Some(Box::new(child));
                true
            }
        }
    }

    fn finish(self) -> Value {
        match self {
            Open::List(items, _) => Value::List(items),
            Open::Tuple(items, _) => Value::Tuple(items),
            Open::Dict(pairs, _, _) => Value::Dict(pairs),
            Open::Ext(name, payload) => Value::Ext(name, payload.unwrap_or_default()),
        }
    }
}

/// A container node about to receive its children, `depth` containers deep, with `owed`
/// children awaited by the open containers and `left` nodes still to come.
fn open(container: Node, depth: usize, owed: &mut usize, left: usize) -> Result<Open, String> {
    if depth >= MAX_VALUE_DEPTH {
        return Err(format!("value nests deeper than {MAX_VALUE_DEPTH}"));
    }
    let (claimed, slots) = match container {
        Node::List(n) | Node::Tuple(n) => (n as usize, n as usize),
        Node::Dict(n) => (n as usize, 2 * n as usize),
        _ => (1, 1),
    };
    // Children follow this node, so the nodes left bound what all open containers can
    // honestly await; a larger claim is a lie and must not size an allocation.
    *owed = owed
        .checked_add(slots)
        .filter(|&o| o <= left)
        .ok_or_else(|| format!("containers await more items than the {left} nodes that follow"))?;
    Ok(match container {
        Node::List(_) => Open::List(Vec::with_capacity(claimed), claimed),
        Node::Tuple(_) => Open::Tuple(Vec::with_capacity(claimed), claimed),
        Node::Dict(_) => Open::Dict(Vec::with_capacity(claimed), None, claimed),
        Node::Ext(name) => Open::Ext(name, None),
        _ => return Err("leaf node in container position".into()),
    })
}

/// Rebuilds the tree from prefix-ordered nodes without recursion.
fn unflatten(nodes: Vec<Node>) -> Result<Value, String> {
    let total = nodes.len();
    let mut it = nodes.into_iter();
    let mut stack: Vec<Open> = Vec::new();
    // Child nodes that the open containers still await, all together. Each needs at least one
    // node, so this never exceeds the nodes that follow; that bounds the capacity reserved
    // for all open containers at once by the node count, whatever their claims say.
    let mut owed: usize = 0;
    loop {
        let node = it
            .next()
            .ok_or("value ends before its containers are full")?;
        if !stack.is_empty() {
            // Every open container awaits at least one child, so `owed` is positive here.
            owed = owed.saturating_sub(1);
        }
        let mut done = match node {
            Node::None => Value::None,
            Node::Bool(b) => Value::Bool(b),
            Node::Int(i) => Value::Int(i),
            Node::BigInt(b) => {
                if b.is_empty() {
                    return Err(EMPTY_BIG_INT.into());
                }
                Value::BigInt(b)
            }
            Node::Float(f) => Value::Float(f),
            Node::Str(s) => Value::Str(s),
            Node::Bytes(b) => Value::Bytes(b),
            Node::Tensor(t) => {
                t.validate()?;
                Value::Tensor(t)
            }
            Node::Blob(b) => Value::Blob(b),
            Node::List(0) => Value::List(Vec::new()),
            Node::Tuple(0) => Value::Tuple(Vec::new()),
            Node::Dict(0) => Value::Dict(Vec::new()),
            container => {
                stack.push(open(container, stack.len(), &mut owed, it.len())?);
                continue;
            }
        };
        loop {
            let Some(top) = stack.last_mut() else {
                if it.len() > 0 {
                    return Err(format!(
                        "{} nodes follow a complete value of {}",
                        it.len(),
                        total - it.len()
                    ));
                }
                return Ok(done);
            };
            if !top.push(done) {
                break;
            }
            done = match stack.pop() {
                Some(open) => open.finish(),
                None => return Err("container stack underflow".into()),
            };
        }
    }
}

/// Deserializes a sequence, refusing more than `max` elements and never trusting the
/// peer's length for a pre-allocation beyond that.
pub(crate) fn bounded_vec<'de, D, T>(
    d: D,
    max: usize,
    what: &'static str,
) -> Result<Vec<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    struct V<T> {
        max: usize,
        what: &'static str,
        _t: PhantomData<T>,
    }
    impl<'de, T: Deserialize<'de>> Visitor<'de> for V<T> {
        type Value = Vec<T>;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            write!(f, "a sequence of at most {} {}", self.max, self.what)
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<T>, A::Error> {
            let hint = seq.size_hint().unwrap_or(0);
            if hint > self.max {
                return Err(de::Error::custom(format!(
                    "{} {} exceed the limit of {}",
                    hint, self.what, self.max
                )));
            }
            let mut out = Vec::with_capacity(hint.min(4096));
            while let Some(x) = seq.next_element()? {
                if out.len() == self.max {
                    return Err(de::Error::custom(format!(
                        "more than {} {}",
                        self.max, self.what
                    )));
                }
                out.push(x);
            }
            Ok(out)
        }
    }
    d.deserialize_seq(V {
        max,
        what,
        _t: PhantomData,
    })
}

impl<'de> Deserialize<'de> for Value {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Value, D::Error> {
        let nodes: Vec<Node> = bounded_vec(d, MAX_VALUE_NODES, "value nodes")?;
        unflatten(nodes).map_err(de::Error::custom)
    }
}
