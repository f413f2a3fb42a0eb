//! Python objects ↔ [`Value`]: builtins natively, everything else through the hooks.

use airlock_wire::{ArrayKind, DType, Region, TensorDesc, Value};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};

use crate::hooks::hooks;
use crate::lane::{Lane, region_tuple, side_from};

/// Encodes values for one frame, remembering the regions it leased so that a failure half
/// way gives them back.
pub struct Encoder<'a, 'py> {
    lane: &'a Bound<'py, Lane>,
    leased: Vec<Region>,
}

impl<'a, 'py> Encoder<'a, 'py> {
    pub fn new(lane: &'a Bound<'py, Lane>) -> Self {
        Encoder {
            lane,
            leased: Vec::new(),
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
        self.encode_at(obj, 0)
    }

    fn encode_at(&mut self, obj: &Bound<'py, PyAny>, depth: usize) -> PyResult<Value> {
        if depth > airlock_wire::limits::MAX_VALUE_DEPTH {
            return Err(PyValueError::new_err("value nests too deeply to send"));
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
                Err(_) => Value::BigInt(i.str()?.to_string()),
            });
        }
        if let Ok(f) = obj.cast_exact::<PyFloat>() {
            return Ok(Value::Float(f.value()));
        }
        if let Ok(s) = obj.cast_exact::<PyString>() {
            return Ok(Value::Str(s.to_str()?.to_owned()));
        }
        if let Ok(b) = obj.cast_exact::<PyBytes>() {
            return Ok(Value::Bytes(b.as_bytes().to_vec()));
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
        Value::BigInt(s) => py.get_type::<PyInt>().call1((s,))?,
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
    })
}
