//! Element types and the owned, 128-byte-aligned n-d buffers batches are made of.

use std::sync::{Arc, Mutex};

use aligned_vec::{AVec, ConstAlign};
use serde::{Deserialize, Serialize};

/// Alignment of every buffer the engine hands out: XLA:CPU needs 128 for zero-copy DLPack.
pub const BUFFER_ALIGN: usize = 128;

/// Raw bytes aligned to [`BUFFER_ALIGN`].
pub type AlignedBytes = AVec<u8, ConstAlign<BUFFER_ALIGN>>;

/// The fixed-size numeric element types the engine moves (native endianness in memory).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema), schemars(rename = "DTypeName"))]
#[serde(rename_all = "lowercase")]
#[allow(missing_docs, reason = "each variant is the numpy dtype of its name")]
pub enum DType {
    Bool,
    Int8,
    Int16,
    Int32,
    Int64,
    Uint8,
    Uint16,
    Uint32,
    Uint64,
    Float16,
    Bfloat16,
    Float32,
    Float64,
}

impl DType {
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            Self::Bool | Self::Int8 | Self::Uint8 => 1,
            Self::Int16 | Self::Uint16 | Self::Float16 | Self::Bfloat16 => 2,
            Self::Int32 | Self::Uint32 | Self::Float32 => 4,
            Self::Int64 | Self::Uint64 | Self::Float64 => 8,
        }
    }

    /// The numpy name (`float32`), also the name in reports and JSON.
    pub fn name(self) -> &'static str {
        match self {
            Self::Bool => "bool",
            Self::Int8 => "int8",
            Self::Int16 => "int16",
            Self::Int32 => "int32",
            Self::Int64 => "int64",
            Self::Uint8 => "uint8",
            Self::Uint16 => "uint16",
            Self::Uint32 => "uint32",
            Self::Uint64 => "uint64",
            Self::Float16 => "float16",
            Self::Bfloat16 => "bfloat16",
            Self::Float32 => "float32",
            Self::Float64 => "float64",
        }
    }

    /// Parse a zarr v3 data type name (`float32`, `uint8`, ...).
    pub fn from_zarr_name(name: &str) -> Option<Self> {
        Some(match name {
            "bool" => Self::Bool,
            "int8" => Self::Int8,
            "int16" => Self::Int16,
            "int32" => Self::Int32,
            "int64" => Self::Int64,
            "uint8" => Self::Uint8,
            "uint16" => Self::Uint16,
            "uint32" => Self::Uint32,
            "uint64" => Self::Uint64,
            "float16" => Self::Float16,
            "bfloat16" => Self::Bfloat16,
            "float32" => Self::Float32,
            "float64" => Self::Float64,
            _ => return None,
        })
    }

    /// True for floating-point types (a NaN exists to mark a bad chunk).
    pub fn is_float(self) -> bool {
        matches!(self, Self::Float16 | Self::Bfloat16 | Self::Float32 | Self::Float64)
    }

    /// The bytes of one NaN in native endianness, for float types.
    pub fn nan_bytes(self) -> Option<Vec<u8>> {
        Some(match self {
            Self::Float16 => 0x7e00u16.to_ne_bytes().to_vec(),
            Self::Bfloat16 => 0x7fc0u16.to_ne_bytes().to_vec(),
            Self::Float32 => f32::NAN.to_ne_bytes().to_vec(),
            Self::Float64 => f64::NAN.to_ne_bytes().to_vec(),
            _ => return None,
        })
    }
}

impl std::fmt::Display for DType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Allocate `len` zeroed, aligned bytes.
pub fn zeroed_bytes(len: usize) -> AlignedBytes {
    let mut out = AVec::with_capacity(BUFFER_ALIGN, len);
    out.resize(len, 0);
    out
}

/// Allocate `len` aligned bytes filled by repeating `element` (a fill value or a NaN).
pub(crate) fn filled_bytes(len_elements: usize, element: &[u8]) -> AlignedBytes {
    let mut out = AVec::with_capacity(BUFFER_ALIGN, len_elements * element.len());
    if element.iter().all(|b| *b == 0) {
        out.resize(len_elements * element.len(), 0);
    } else {
        for _ in 0..len_elements {
            out.extend_from_slice(element);
        }
    }
    out
}

/// Keeps large freed buffers for reuse.
///
/// Decoded chunks and batches are tens to hundreds of MiB each, allocated and freed at a
/// steady rate. Fresh allocations of that size are mapped afresh by the allocator and cost a
/// page fault per 4 KiB on first write, which on a small machine costs as much as the decode
/// itself. Buffers handed back here (by dropping an [`NdArray`] that carries a recycler)
/// are reused by the next allocation of a similar size.
#[derive(Debug)]
pub struct Recycler {
    free: Mutex<Vec<AlignedBytes>>,
    cap_bytes: usize,
    prefault: Option<Prefault>,
}

/// Faults in a fresh buffer's pages before it is written (see [`crate::Runtime::prefault`]):
/// called with a fresh, empty buffer whose capacity is about to be written. It may do
/// nothing; it must not change the buffer's length or contents. Defined here, beside the
/// recycler that applies it, so the buffer module depends on nothing of the runtime's.
pub type Prefault = fn(&mut AlignedBytes);

/// Buffers smaller than this are not worth recycling.
const RECYCLE_MIN: usize = 1 << 16;

impl Recycler {
    /// A recycler holding at most `cap_bytes` of free buffers.
    pub fn new(cap_bytes: usize) -> Arc<Self> {
        Arc::new(Self { free: Mutex::new(Vec::new()), cap_bytes, prefault: None })
    }

    /// A recycler that hands each fresh buffer to `prefault` (see [`crate::Runtime::prefault`]).
    pub fn with_prefault(cap_bytes: usize, prefault: Option<Prefault>) -> Arc<Self> {
        Arc::new(Self { free: Mutex::new(Vec::new()), cap_bytes, prefault })
    }

    /// An empty buffer with capacity for `len` bytes: a recycled one when one fits
    /// (capacity between `len` and `2 * len`), else a fresh allocation.
    pub fn take(&self, len: usize) -> AlignedBytes {
        let mut b = self.take_keeping(len);
        b.clear();
        b
    }

    fn take_keeping(&self, len: usize) -> AlignedBytes {
        if len >= RECYCLE_MIN {
            let mut free = self.free.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            let best = free
                .iter()
                .enumerate()
                .filter(|(_, b)| b.capacity() >= len && b.capacity() <= len.saturating_mul(2))
                .min_by_key(|(_, b)| b.capacity())
                .map(|(i, _)| i);
            if let Some(i) = best {
                return free.swap_remove(i);
            }
        }
        let mut fresh = AVec::with_capacity(BUFFER_ALIGN, len);
        if let Some(prefault) = self.prefault.filter(|_| len >= RECYCLE_MIN) {
            prefault(&mut fresh);
        }
        fresh
    }

    /// Hand a buffer back; dropped instead when the recycler is full.
    pub fn give(&self, buf: AlignedBytes) {
        if buf.capacity() < RECYCLE_MIN || buf.capacity() > self.cap_bytes {
            return;
        }
        let mut free = self.free.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut held: usize = free.iter().map(AVec::capacity).sum();
        while held + buf.capacity() > self.cap_bytes && !free.is_empty() {
            held -= free.remove(0).capacity();
        }
        free.push(buf);
    }

    /// The most bytes it holds for reuse.
    pub fn cap_bytes(&self) -> usize {
        self.cap_bytes
    }

    /// Bytes held for reuse.
    pub fn held_bytes(&self) -> usize {
        self.free.lock().unwrap_or_else(std::sync::PoisonError::into_inner).iter().map(AVec::capacity).sum()
    }
}

/// An owned, C-contiguous n-d array of one dtype in native endianness.
#[derive(Debug, Clone)]
pub struct NdArray {
    /// Element type.
    pub dtype: DType,
    /// Extent of each axis; the sample axis first wherever the engine produces one.
    pub shape: Vec<usize>,
    /// `product(shape) * dtype.size()` bytes, 128-byte aligned.
    pub data: AlignedBytes,
    /// Where the buffer goes when the array is dropped.
    pub(crate) recycler: Option<Arc<Recycler>>,
}

impl Drop for NdArray {
    fn drop(&mut self) {
        if let Some(r) = self.recycler.take() {
            r.give(std::mem::replace(&mut self.data, AVec::new(BUFFER_ALIGN)));
        }
    }
}

impl NdArray {
    /// Wrap `data`, checking its length against `shape` and `dtype`.
    pub fn new(dtype: DType, shape: Vec<usize>, data: AlignedBytes) -> Result<Self, String> {
        let expected = shape.iter().product::<usize>() * dtype.size();
        if data.len() != expected {
            return Err(format!(
                "buffer of {} bytes does not hold a {dtype} array of shape {shape:?} ({expected} bytes)",
                data.len()
            ));
        }
        Ok(Self { dtype, shape, data, recycler: None })
    }

    /// Return the buffer to `recycler` when this array is dropped.
    #[must_use]
    pub fn recycled_by(mut self, recycler: &Arc<Recycler>) -> Self {
        self.recycler = Some(Arc::clone(recycler));
        self
    }

    /// Take the buffer out (it will not be recycled).
    pub fn into_data(mut self) -> AlignedBytes {
        self.recycler = None;
        std::mem::replace(&mut self.data, AVec::new(BUFFER_ALIGN))
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.shape.iter().product()
    }

    /// True when the array holds no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes of one row along axis 0 (one sample).
    pub fn row_bytes(&self) -> usize {
        self.shape.iter().skip(1).product::<usize>() * self.dtype.size()
    }

    /// The elements as a typed slice, if `T` has the dtype's element size.
    pub fn as_slice<T: bytemuck::Pod>(&self) -> Option<&[T]> {
        (std::mem::size_of::<T>() == self.dtype.size()).then(|| bytemuck::try_cast_slice(&self.data).ok()).flatten()
    }

    /// The elements as a mutable typed slice, if `T` has the dtype's element size.
    pub fn as_mut_slice<T: bytemuck::Pod>(&mut self) -> Option<&mut [T]> {
        (std::mem::size_of::<T>() == self.dtype.size())
            .then(|| bytemuck::try_cast_slice_mut(&mut self.data).ok())
            .flatten()
    }
}

/// A Rust element type that some [`DType`] stores, so an [`NdArray`] of that dtype can be
/// viewed as `ndarray` arrays of it.
pub trait Element: bytemuck::Pod {
    /// The dtype whose elements this type reads.
    const DTYPE: DType;
}

macro_rules! elements {
    ($($t:ty => $d:ident),* $(,)?) => {
        $(impl Element for $t { const DTYPE: DType = DType::$d; })*
    };
}
elements!(
    i8 => Int8, i16 => Int16, i32 => Int32, i64 => Int64,
    u8 => Uint8, u16 => Uint16, u32 => Uint32, u64 => Uint64,
    half::f16 => Float16, half::bf16 => Bfloat16, f32 => Float32, f64 => Float64,
);

impl NdArray {
    /// A zero-copy `ndarray` view of the elements, valid while this array lives.
    ///
    /// # Errors
    /// When `T` is not this array's element type (the message names both).
    pub fn view<T: Element>(&self) -> Result<ndarray::ArrayViewD<'_, T>, String> {
        if T::DTYPE != self.dtype {
            return Err(format!("the array holds {}, not {}: view it as its own dtype", self.dtype, T::DTYPE));
        }
        let elements: &[T] =
            bytemuck::try_cast_slice(&self.data).map_err(|e| format!("cannot view the buffer: {e}"))?;
        ndarray::ArrayViewD::from_shape(self.shape.as_slice(), elements).map_err(|e| e.to_string())
    }

    /// An owned `ndarray` copy of the elements (a view's `to_owned`, for callers who keep it).
    ///
    /// # Errors
    /// As [`NdArray::view`].
    pub fn to_ndarray<T: Element>(&self) -> Result<ndarray::ArrayD<T>, String> {
        self.view().map(|v| v.to_owned())
    }
}
