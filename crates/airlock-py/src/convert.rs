//! Python objects ↔ [`Value`]: builtins natively, everything else through the hooks.

use airlock_wire::limits::MAX_FRAME_VALUES;
use airlock_wire::{ArrayKind, Blob, BlobKind, DType, Region, TensorDesc, Value, ValueError};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{
    PyBool, PyByteArray, PyBytes, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple,
};

use crate::errors::{ProtocolError, ValueTooLarge};
use crate::hooks::hooks;
use crate::lane::{Lane, region_tuple, side_from};

/// `bytes` and `str` of this many bytes or more travel in shared memory, as tensors do.
const BLOB_MIN: usize = 1 << 20;
/// Inline bytes and text one frame may carry before smaller items go to shared memory too.
const INLINE_BUDGET: usize = 16 << 20;
/// Items under this always stay inline: a region for each would cost more than its bytes.
const BLOB_ALWAYS_INLINE: usize = 64 << 10;

/// Encodes values for one frame, remembering the regions it leased so that a failure half
/// way gives them back. Each value is checked against the limits the peer enforces, and all of
/// them against the frame's, before anything is sent: a value that cannot cross is the
/// caller's error ([`ValueTooLarge`]), never a broken lane.
pub struct Encoder<'a, 'py> {
    lane: &'a Bound<'py, Lane>,
    leased: Vec<Region>,
    /// Bytes of `bytes` and `str` kept inline so far.
    inline: usize,
    /// Encoded bytes of the values so far.
    frame: usize,
}

impl<'a, 'py> Encoder<'a, 'py> {
    pub fn new(lane: &'a Bound<'py, Lane>) -> Self {
        Encoder {
            lane,
            leased: Vec::new(),
            inline: 0,
            frame: 0,
        }
    }

    /// Gives back every region leased so far (the frame will not be sent).
    pub fn abandon(self) {
        let lane = self.lane.get();
        for r in self.leased {
            lane.inner.unalloc(r);
        }
    }

    pub fn encode(&mut self, obj: &Bound<'py, PyAny>) -> PyResult<Value> {
        let value = self.encode_at(obj, 0)?;
        let len = value.encoded_len().map_err(too_large)?;
        self.frame = self.frame.saturating_add(len);
        if self.frame > MAX_FRAME_VALUES {
            return Err(too_large(ValueError::TooLarge {
                len: self.frame,
                max: MAX_FRAME_VALUES,
            }));
        }
        Ok(value)
    }

    fn encode_at(&mut self, obj: &Bound<'py, PyAny>, depth: usize) -> PyResult<Value> {
        // Bounds our recursion; `encode` checks the exact rule of the peer's decoder.
        if depth > airlock_wire::limits::MAX_VALUE_DEPTH {
            return Err(too_large(ValueError::TooDeep {
                max: airlock_wire::limits::MAX_VALUE_DEPTH,
            }));
        }
        if obj.is_none() {
            return Ok(Value::None);
        }
        if let Ok(b) = obj.cast_exact::<PyBool>() {
            return Ok(Value::Bool(b.is_true()));
        }
        if let Ok(i) = obj.cast_exact::<PyInt>() {
            return Ok(match i.extract::<i64>() {
                Ok(v) => Value::Int(v),
                Err(_) => Value::BigInt(big_int_bytes(i)?),
            });
        }
        if let Ok(f) = obj.cast_exact::<PyFloat>() {
            return Ok(Value::Float(f.value()));
        }
        if let Ok(s) = obj.cast_exact::<PyString>() {
            let text = s.to_str()?;
            if self.goes_to_shm(text.len()) {
                // SAFETY: a str's UTF-8 buffer is immutable and lives as long as `s`.
                return unsafe { self.blob(obj.py(), text.as_bytes(), BlobKind::Str, true) };
            }
            return Ok(Value::Str(text.to_owned()));
        }
        if let Ok(b) = obj.cast_exact::<PyBytes>() {
            let data = b.as_bytes();
            if self.goes_to_shm(data.len()) {
                // SAFETY: bytes are immutable and live as long as `b`.
                return unsafe { self.blob(obj.py(), data, BlobKind::Bytes, true) };
            }
            return Ok(Value::Bytes(data.to_vec()));
        }
        if let Ok(b) = obj.cast_exact::<PyByteArray>() {
            // SAFETY: no Python code runs while we hold the GIL and read it (the copy below
            // keeps the GIL: another thread could resize a bytearray under a detached copy).
            let data = unsafe { b.as_bytes() };
            if self.goes_to_shm(data.len()) {
                return unsafe { self.blob(obj.py(), data, BlobKind::Bytes, false) };
            }
            return Ok(Value::Bytes(data.to_vec()));
        }
        if let Ok(l) = obj.cast_exact::<PyList>() {
            let mut out = Vec::with_capacity(l.len());
            for item in l.iter() {
                out.push(self.encode_at(&item, depth + 1)?);
            }
            return Ok(Value::List(out));
        }
        if let Ok(t) = obj.cast_exact::<PyTuple>() {
            let mut out = Vec::with_capacity(t.len());
            for item in t.iter() {
                out.push(self.encode_at(&item, depth + 1)?);
            }
            return Ok(Value::Tuple(out));
        }
        if let Ok(d) = obj.cast_exact::<PyDict>() {
            let mut out = Vec::with_capacity(d.len());
            for (k, v) in d.iter() {
                out.push((
                    self.encode_at(&k, depth + 1)?,
                    self.encode_at(&v, depth + 1)?,
                ));
            }
            return Ok(Value::Dict(out));
        }
        self.encode_other(obj, depth)
    }

    /// Whether `n` bytes of `bytes` or `str` go to shared memory; counts them if not.
    fn goes_to_shm(&mut self, n: usize) -> bool {
        let shm = n >= BLOB_MIN || (n >= BLOB_ALWAYS_INLINE && self.inline + n > INLINE_BUDGET);
        if !shm {
            self.inline += n;
        }
        shm
    }

    /// Copies `data` into a region of our pool (without the GIL when `detach`).
    ///
    /// # Safety
    /// `data` must stay valid and unchanged for the call; with `detach`, also while other
    /// Python threads run.
    unsafe fn blob(
        &mut self,
        py: Python<'_>,
        data: &[u8],
        kind: BlobKind,
        detach: bool,
    ) -> PyResult<Value> {
        let inner = self.lane.get().inner.clone();
        let lease = |e: airlock_supervisor::LaneError| {
            ProtocolError::new_err(format!("cannot lease shared memory: {e}"))
        };
        let len = data.len() as u64;
        let region = crate::exit_gate::detach(py, || inner.alloc(len)).map_err(lease)?;
        self.leased.push(region);
        let (src, n) = (data.as_ptr() as usize, len);
        // SAFETY: the region is ours, leased for `n` bytes and not yet sent; the caller
        // vouches for `data`.
        let copy = move || unsafe { inner.write(region, src as *const u8, n) };
        let written = if detach {
            crate::exit_gate::detach(py, copy)
        } else {
            copy()
        };
        written.map_err(|e| ProtocolError::new_err(format!("cannot write shared memory: {e}")))?;
        Ok(Value::Blob(Blob { kind, region }))
    }

    fn encode_other(&mut self, obj: &Bound<'py, PyAny>, depth: usize) -> PyResult<Value> {
        let py = obj.py();
        let h = hooks(py)?;
        let spec = h.encode_other.bind(py).call1((self.lane, obj))?;
        let spec = spec.cast_into::<PyTuple>()?;
        let tag: String = spec.get_item(0)?.extract()?;
        match tag.as_str() {
            "t" => {
                let region: Option<(u8, u32, u64, u64)> = spec.get_item(5)?.extract()?;
                let region = match region {
                    Some((side, segment, offset, len)) => {
                        let r = Region {
                            side: side_from(side)?,
                            segment,
                            offset,
                            len,
                        };
                        self.leased.push(r);
                        Some(r)
                    }
                    None => None,
                };
                let kind = match spec.get_item(1)?.extract::<String>()?.as_str() {
                    "torch" => ArrayKind::Torch,
                    _ => ArrayKind::Numpy,
                };
                let dtype_name: String = spec.get_item(2)?.extract()?;
                let dtype = DType::from_name(&dtype_name).ok_or_else(|| {
                    PyTypeError::new_err(format!("dtype {dtype_name} cannot cross the boundary"))
                })?;
                let desc = TensorDesc {
                    kind,
                    dtype,
                    shape: spec.get_item(3)?.extract()?,
                    strides: spec.get_item(4)?.extract()?,
                    region,
                    device: spec.get_item(6)?.extract()?,
                };
                desc.validate().map_err(PyValueError::new_err)?;
                Ok(Value::Tensor(desc))
            }
            "x" => {
                let name: String = spec.get_item(1)?.extract()?;
                let payload = self.encode_at(&spec.get_item(2)?, depth + 1)?;
                Ok(Value::Ext(name, Box::new(payload)))
            }
            "p" => self.encode_at(&spec.get_item(1)?, depth + 1),
            other => Err(PyTypeError::new_err(format!(
                "encode hook returned unknown tag {other:?}"
            ))),
        }
    }
}

/// Most bytes of one int: a frame's, less room for the message around it.
const MAX_BIG_INT_BYTES: u64 = airlock_wire::limits::MAX_FRAME_LEN as u64 - 4096;

/// An int beyond `i64` as its two's-complement bytes, least significant first: linear in its
/// size, unlike decimal text (which Python refuses past 4 300 digits). One that could not fit
/// in a frame is refused before any bytes are made.
fn big_int_bytes(i: &Bound<'_, PyInt>) -> PyResult<Vec<u8>> {
    let bits: u64 = i.call_method0("bit_length")?.extract()?;
    // One more bit for the sign.
    let len = bits / 8 + 1;
    if len > MAX_BIG_INT_BYTES {
        return Err(PyValueError::new_err(format!(
            "an int of {bits} bits ({len} bytes) cannot be sent: one int may take at most \
             {MAX_BIG_INT_BYTES} bytes (a frame holds {} bytes)",
            airlock_wire::limits::MAX_FRAME_LEN
        )));
    }
    let bytes = i.call_method("to_bytes", (len, "little"), Some(&signed(i.py())?))?;
    Ok(bytes.cast_into::<PyBytes>()?.as_bytes().to_vec())
}

fn signed(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let kw = PyDict::new(py);
    kw.set_item("signed", true)?;
    Ok(kw)
}

/// Builds the Python object for a received value. If that fails half way, the regions of
/// tensors not yet turned into views are released at once (no view will ever release them).
pub fn decode<'py>(
    py: Python<'py>,
    lane: &Bound<'py, Lane>,
    value: Value,
) -> PyResult<Bound<'py, PyAny>> {
    let mut regions = Vec::new();
    collect_regions(&value, &mut regions);
    let inner = &lane.get().inner;
    let own = lane.get().side;
    // A region the peer does not have is refused before anything is mapped: counted, and in
    // the host the worker is ended (the lane's guard). Nothing is released for such a value:
    // its regions may be forged too.
    let refused = |e| crate::errors::ProtocolError::new_err(inner.refuse(e).to_string());
    for r in regions.iter().filter(|r| r.side != own) {
        inner.check_peer_region(*r).map_err(refused)?;
    }
    // Our own regions, referenced back by the peer, are held before any view is made, so the
    // failure path below can release every region alike.
    for (i, r) in regions.iter().enumerate() {
        if r.side == own
            && let Err(e) = inner.acquire_returned(*r)
        {
            for (j, r) in regions.iter().enumerate() {
                if r.side != own || j < i {
                    inner.release(*r);
                }
            }
            return Err(refused(e));
        }
    }
    let mut claimed = 0;
    let out = decode_at(py, lane, value, &mut claimed);
    if out.is_err() {
        for r in regions.into_iter().skip(claimed) {
            lane.get().inner.release(r);
        }
    }
    out
}

/// Tensor regions in the order [`decode_at`] reaches them.
fn collect_regions(value: &Value, out: &mut Vec<Region>) {
    let mut stack = vec![value];
    while let Some(v) = stack.pop() {
        match v {
            Value::Tensor(t) => out.extend(t.region),
            Value::Blob(b) => out.push(b.region),
            Value::List(items) | Value::Tuple(items) => stack.extend(items.iter().rev()),
            Value::Dict(pairs) => {
                for (k, v) in pairs.iter().rev() {
                    stack.push(v);
                    stack.push(k);
                }
            }
            Value::Ext(_, inner) => stack.push(inner),
            _ => {}
        }
    }
}

fn decode_at<'py>(
    py: Python<'py>,
    lane: &Bound<'py, Lane>,
    value: Value,
    claimed: &mut usize,
) -> PyResult<Bound<'py, PyAny>> {
    Ok(match value {
        Value::None => py.None().into_bound(py),
        Value::Bool(b) => PyBool::new(py, b).to_owned().into_any(),
        Value::Int(i) => i.into_pyobject(py)?.into_any(),
        Value::BigInt(b) => py.get_type::<PyInt>().call_method(
            "from_bytes",
            (PyBytes::new(py, &b), "little"),
            Some(&signed(py)?),
        )?,
        Value::Float(f) => PyFloat::new(py, f).into_any(),
        Value::Str(s) => PyString::new(py, &s).into_any(),
        Value::Bytes(b) => PyBytes::new(py, &b).into_any(),
        Value::List(items) => {
            let l = PyList::empty(py);
            for v in items {
                l.append(decode_at(py, lane, v, claimed)?)?;
            }
            l.into_any()
        }
        Value::Tuple(items) => {
            let mut objs = Vec::with_capacity(items.len());
            for v in items {
                objs.push(decode_at(py, lane, v, claimed)?);
            }
            PyTuple::new(py, objs)?.into_any()
        }
        Value::Dict(pairs) => {
            let d = PyDict::new(py);
            for (k, v) in pairs {
                let k = decode_at(py, lane, k, claimed)?;
                let v = decode_at(py, lane, v, claimed)?;
                d.set_item(k, v)?;
            }
            d.into_any()
        }
        Value::Tensor(t) => {
            let h = hooks(py)?;
            let kind = match t.kind {
                ArrayKind::Torch => "torch",
                ArrayKind::Numpy => "numpy",
            };
            let region = t.region.as_ref().map(region_tuple);
            // Counted before the call: from here the hook owns the region (it releases it
            // itself if it fails after mapping).
            if t.region.is_some() {
                *claimed += 1;
            }
            h.decode_tensor.bind(py).call1((
                lane,
                kind,
                t.dtype.name(),
                PyTuple::new(py, &t.shape)?,
                PyTuple::new(py, &t.strides)?,
                region,
                t.device,
            ))?
        }
        Value::Ext(name, payload) => {
            let h = hooks(py)?;
            let inner = decode_at(py, lane, *payload, claimed)?;
            h.decode_ext.bind(py).call1((name, inner))?
        }
        Value::Blob(b) => {
            // Claimed here, and released whether or not it reads: nothing keeps a view of it.
            *claimed += 1;
            let out = read_blob(py, lane, &b);
            lane.get().inner.release(b.region);
            out?
        }
    })
}

/// Copies a blob out of its region (with `pread`: nothing of the peer's segment is mapped).
fn read_blob<'py>(
    py: Python<'py>,
    lane: &Bound<'py, Lane>,
    b: &Blob,
) -> PyResult<Bound<'py, PyAny>> {
    let r = b.region;
    let bad = |e: String| ProtocolError::new_err(format!("bytes in shared memory: {e}"));
    let (fd, seg_len) = lane
        .get()
        .inner
        .segment_fd(r.side, r.segment)
        .map_err(|e| bad(e.to_string()))?;
    // Checked before anything is allocated for it: the region lies in its segment.
    if r.offset.checked_add(r.len).is_none_or(|end| end > seg_len) {
        return Err(bad(format!(
            "{} bytes at offset {} lie outside segment {} ({seg_len} bytes)",
            r.len, r.offset, r.segment
        )));
    }
    let read = |buf: &mut [u8]| {
        crate::exit_gate::detach(py, || {
            airlock_shm::read_at(std::os::fd::AsFd::as_fd(&fd), seg_len, r.offset, buf)
        })
        .map_err(|e| bad(e.to_string()))
    };
    let len = r.len as usize;
    match b.kind {
        BlobKind::Bytes => Ok(PyBytes::new_with(py, len, |buf| read(buf))?.into_any()),
        BlobKind::Str => {
            let mut buf = vec![0u8; len];
            read(&mut buf)?;
            let text =
                String::from_utf8(buf).map_err(|e| bad(format!("text that is not UTF-8 ({e})")))?;
            Ok(PyString::new(py, &text).into_any())
        }
    }
}

/// The error for a value that cannot be sent; nothing was written.
fn too_large(e: ValueError) -> PyErr {
    ValueTooLarge::new_err(format!(
        "cannot send this value across the process boundary: {e}; nothing was sent"
    ))
}
