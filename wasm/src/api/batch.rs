//! A batch as a JS object: its arrays copied into typed arrays, or as views into wasm memory
//! (`batchViews`), with its indices, offsets, coordinates, part and patches.

use insitubatch_core::coords::CoordValues;
use insitubatch_core::{Batch, DType, NdArray};
use js_sys::{Array, Object, Uint8Array};
use wasm_bindgen::prelude::*;

use super::convert::set;

/// A copy of `a`'s bytes in a fresh typed array of its dtype.
fn typed_array(a: &NdArray) -> JsValue {
    let bytes: &[u8] = &a.data[..];
    let u8a = Uint8Array::new_with_length(bytes.len() as u32);
    u8a.copy_from(bytes);
    typed_over(a.dtype, &u8a.buffer().into(), 0, (bytes.len() / a.dtype.size()) as u32)
}

/// The typed array of `dtype` over `n` elements of `buf` from `byte_offset` (float16 and
/// bfloat16 as raw `Uint16Array` bits, bool as `Uint8Array`).
fn typed_over(dtype: DType, buf: &JsValue, byte_offset: u32, n: u32) -> JsValue {
    match dtype {
        DType::Bool | DType::Uint8 => Uint8Array::new_with_byte_offset_and_length(buf, byte_offset, n).into(),
        DType::Int8 => js_sys::Int8Array::new_with_byte_offset_and_length(buf, byte_offset, n).into(),
        DType::Int16 => js_sys::Int16Array::new_with_byte_offset_and_length(buf, byte_offset, n).into(),
        DType::Uint16 | DType::Float16 | DType::Bfloat16 => {
            js_sys::Uint16Array::new_with_byte_offset_and_length(buf, byte_offset, n).into()
        }
        DType::Int32 => js_sys::Int32Array::new_with_byte_offset_and_length(buf, byte_offset, n).into(),
        DType::Uint32 => js_sys::Uint32Array::new_with_byte_offset_and_length(buf, byte_offset, n).into(),
        DType::Int64 => js_sys::BigInt64Array::new_with_byte_offset_and_length(buf, byte_offset, n).into(),
        DType::Uint64 => js_sys::BigUint64Array::new_with_byte_offset_and_length(buf, byte_offset, n).into(),
        DType::Float32 => js_sys::Float32Array::new_with_byte_offset_and_length(buf, byte_offset, n).into(),
        DType::Float64 => js_sys::Float64Array::new_with_byte_offset_and_length(buf, byte_offset, n).into(),
    }
}

/// `{ arrays: { label: { data, shape, dtype } }, sampleIndices, offsets, index, epoch }`, with
/// `patchOrigins` and `patchDims` when patched: the one batch encoding every JS stream
/// (dataset, explorer, worker) receives.
pub(crate) fn batch_to_js(b: &Batch) -> Result<JsValue, JsValue> {
    batch_object(b, |a, o| set(o, "data", &typed_array(a)))
}

/// `batchViews`: each array's `data` is a typed array over wasm memory, at `byteOffset` with
/// `length` elements, instead of a copy. The batch must stay alive (and its buffers out of
/// the recycler) while JS reads it ([`PassCursor::next_view`] holds it). Non-shared memory
/// detaches its `ArrayBuffer` when it grows, which any allocation of the engine's background
/// tasks may do, so `data` is only right at creation: the facade re-derives it from
/// `byteOffset`, `length` and the current `wasmMemory().buffer` (js/src/facade.js).
pub(crate) fn batch_view_to_js(b: &Batch) -> Result<JsValue, JsValue> {
    let buf = wasm_memory().unchecked_into::<js_sys::WebAssembly::Memory>().buffer();
    batch_object(b, |a, o| {
        // wasm32: pointers are 32-bit offsets into the one linear memory.
        let byte_offset = a.data.as_ptr() as usize as u32;
        let n = (a.data.len() / a.dtype.size()) as u32;
        set(o, "data", &typed_over(a.dtype, &buf, byte_offset, n))?;
        set(o, "byteOffset", &JsValue::from_f64(f64::from(byte_offset)))?;
        set(o, "length", &JsValue::from_f64(f64::from(n)))
    })
}

/// The instance's `WebAssembly.Memory`, over which `batchViews` batches are views.
#[wasm_bindgen(js_name = wasmMemory)]
pub fn wasm_memory() -> JsValue {
    wasm_bindgen::memory()
}

/// A batch as a JS object; `array_fields` adds each array's data under its own name.
pub(crate) fn batch_object(
    b: &Batch,
    array_fields: impl Fn(&NdArray, &Object) -> Result<(), JsValue>,
) -> Result<JsValue, JsValue> {
    let arrays = Object::new();
    for (label, a) in &b.arrays {
        let o = Object::new();
        array_fields(a, &o)?;
        let shape: Array = a.shape.iter().map(|&d| JsValue::from_f64(d as f64)).collect();
        set(&o, "shape", &shape)?;
        set(&o, "dtype", &JsValue::from_str(a.dtype.name()))?;
        set(&arrays, label, &o)?;
    }
    let offsets = Object::new();
    for (label, off) in &b.offsets {
        set(&offsets, label, &JsValue::from_f64(*off as f64))?;
    }
    let idx = js_sys::BigUint64Array::new_with_length(b.sample_indices.len() as u32);
    idx.copy_from(&b.sample_indices);
    let out = Object::new();
    set(&out, "arrays", &arrays)?;
    set(&out, "sampleIndices", &idx)?;
    set(&out, "offsets", &offsets)?;
    set(&out, "index", &JsValue::from_f64(b.index as f64))?;
    set(&out, "epoch", &JsValue::from_f64(b.epoch as f64))?;
    if let Some(p) = &b.patches {
        set_patches(&out, p)?;
    }
    if !b.coords.is_empty() {
        set(&out, "coords", &coords_to_js(&b.coords)?.into())?;
    }
    if let Some(p) = &b.part {
        set(&out, "part", &part_to_js(p)?.into())?;
    }
    Ok(out.into())
}

/// `batch.coords`: each coordinate's value per row, CF time as nanoseconds since 1970 in a
/// `BigInt64Array`, numbers in a `Float64Array` (fresh arrays, the batch's own).
fn coords_to_js(coords: &std::collections::BTreeMap<String, CoordValues>) -> Result<Object, JsValue> {
    let out = Object::new();
    for (name, values) in coords {
        let v: JsValue = match values {
            CoordValues::Time(ns) => {
                let a = js_sys::BigInt64Array::new_with_length(ns.len() as u32);
                a.copy_from(ns);
                a.into()
            }
            CoordValues::Number(x) => js_sys::Float64Array::from(x.as_slice()).into(),
        };
        set(&out, name, &v)?;
    }
    Ok(out)
}

/// `batch.part` under a rank mesh: `{ dim, index, of, start, len }`, this rank's slice of
/// every row along `dim` (as Python's `batch.model_part`).
fn part_to_js(p: &insitubatch_core::BatchPart) -> Result<Object, JsValue> {
    let out = Object::new();
    set(&out, "dim", &JsValue::from_str(&p.dim))?;
    set(&out, "index", &JsValue::from_f64(p.index as f64))?;
    set(&out, "of", &JsValue::from_f64(p.of as f64))?;
    set(&out, "start", &JsValue::from_f64(p.start as f64))?;
    set(&out, "len", &JsValue::from_f64(p.len as f64))?;
    Ok(out)
}

/// A patched batch's `patchOrigins` (row-major `rows × patchDims.length`, a fresh
/// `BigUint64Array` as `sampleIndices`, so both are the batch's own under `batchViews` and
/// can be transferred by the worker) and `patchDims`; absent for whole samples.
fn set_patches(out: &Object, p: &insitubatch_core::BatchPatches) -> Result<(), JsValue> {
    let origins = js_sys::BigUint64Array::new_with_length(p.origins.len() as u32);
    origins.copy_from(&p.origins);
    let dims: Array = p.dims.iter().map(|d| JsValue::from_str(d)).collect();
    set(out, "patchOrigins", &origins)?;
    set(out, "patchDims", &dims)
}
