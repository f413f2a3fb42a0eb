//! What a value points at in shared memory: tensor descriptors (element types, layout) and
//! blobs of bytes too large for a frame.

use serde::{Deserialize, Serialize};

use crate::limits::MAX_DIMS;
use crate::message::Region;

/// Whether the producer handed over a `torch.Tensor` or a `numpy.ndarray`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ArrayKind {
    Torch,
    Numpy,
}

/// Element types a tensor may have. Names match torch's (`torch.float32` → `"float32"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum DType {
    Bool,
    UInt8,
    Int8,
    Int16,
    UInt16,
    Int32,
    UInt32,
    Int64,
    UInt64,
    Float16,
    BFloat16,
    Float32,
    Float64,
    Complex64,
    Complex128,
    Float8E4M3Fn,
    Float8E5M2,
}

impl DType {
    pub const ALL: [DType; 17] = [
        DType::Bool,
        DType::UInt8,
        DType::Int8,
        DType::Int16,
        DType::UInt16,
        DType::Int32,
        DType::UInt32,
        DType::Int64,
        DType::UInt64,
        DType::Float16,
        DType::BFloat16,
        DType::Float32,
        DType::Float64,
        DType::Complex64,
        DType::Complex128,
        DType::Float8E4M3Fn,
        DType::Float8E5M2,
    ];

    /// Bytes per element.
    pub fn itemsize(self) -> u64 {
        match self {
            DType::Bool | DType::UInt8 | DType::Int8 => 1,
            DType::Float8E4M3Fn | DType::Float8E5M2 => 1,
            DType::Int16 | DType::UInt16 | DType::Float16 | DType::BFloat16 => 2,
            DType::Int32 | DType::UInt32 | DType::Float32 => 4,
            DType::Int64 | DType::UInt64 | DType::Float64 | DType::Complex64 => 8,
            DType::Complex128 => 16,
        }
    }

    /// torch's name for the type.
    pub fn name(self) -> &'static str {
        match self {
            DType::Bool => "bool",
            DType::UInt8 => "uint8",
            DType::Int8 => "int8",
            DType::Int16 => "int16",
            DType::UInt16 => "uint16",
            DType::Int32 => "int32",
            DType::UInt32 => "uint32",
            DType::Int64 => "int64",
            DType::UInt64 => "uint64",
            DType::Float16 => "float16",
            DType::BFloat16 => "bfloat16",
            DType::Float32 => "float32",
            DType::Float64 => "float64",
            DType::Complex64 => "complex64",
            DType::Complex128 => "complex128",
            DType::Float8E4M3Fn => "float8_e4m3fn",
            DType::Float8E5M2 => "float8_e5m2",
        }
    }

    pub fn from_name(name: &str) -> Option<DType> {
        DType::ALL.into_iter().find(|d| d.name() == name)
    }
}

/// Where a tensor's bytes are and how to read them.
///
/// `strides` are in elements. The bytes of the elements lie in `region` from its start; a
/// tensor of zero bytes has no region.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TensorDesc {
    pub kind: ArrayKind,
    pub dtype: DType,
    pub shape: Vec<u64>,
    pub strides: Vec<i64>,
    pub region: Option<Region>,
    /// The producer's device, e.g. `"cpu"` or `"cuda:0"`.
    pub device: String,
}

impl TensorDesc {
    /// Checks what a decoder can check without the segment: dims within bounds, shape and
    /// strides agreeing, and every element inside the region.
    pub fn validate(&self) -> Result<(), String> {
        if self.shape.len() > MAX_DIMS {
            return Err(format!(
                "tensor has {} dims, limit {MAX_DIMS}",
                self.shape.len()
            ));
        }
        if self.shape.len() != self.strides.len() {
            return Err("tensor shape and strides differ in length".into());
        }
        let mut numel: u64 = 1;
        let mut last: u64 = 0;
        for (&n, &s) in self.shape.iter().zip(&self.strides) {
            numel = numel
                .checked_mul(n)
                .ok_or("tensor element count overflows")?;
            if s < 0 {
                return Err("negative tensor stride".into());
            }
            if n > 0 {
                let reach = (n - 1)
                    .checked_mul(s as u64)
                    .ok_or("tensor stride overflows")?;
                last = last.checked_add(reach).ok_or("tensor stride overflows")?;
            }
        }
        let needed = if numel == 0 {
            0
        } else {
            last.checked_add(1)
                .and_then(|elements| elements.checked_mul(self.dtype.itemsize()))
                .ok_or("tensor byte size overflows")?
        };
        match (&self.region, needed) {
            (None, 0) => Ok(()),
            (None, _) => Err("tensor with elements has no region".into()),
            (Some(r), n) if r.len < n => Err(format!(
                "tensor needs {n} bytes but its region holds {}",
                r.len
            )),
            (Some(_), _) => Ok(()),
        }
    }
}

/// What a [`Blob`]'s bytes are on the Python side.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum BlobKind {
    Bytes,
    /// UTF-8 text (a `str`); the receiver checks the encoding.
    Str,
}

/// Bytes or text too large for a frame: they lie in a shared-memory region from its start, as
/// a tensor's do, and are copied out (the region released) by the receiver.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Blob {
    pub kind: BlobKind,
    pub region: Region,
}
