//! What a pass yields.

use std::collections::BTreeMap;

use crate::array::NdArray;
use crate::error::{Error, Result};

/// A model-ready batch: one `(rows, *inner)` array per variable label, aligned on rows.
#[derive(Debug, Clone)]
pub struct Batch {
    /// Label → array; row `i` of every label belongs to anchor `sample_indices[i]`.
    pub arrays: BTreeMap<String, NdArray>,
    /// The anchor sample index of each row (provenance; determinism checks).
    pub sample_indices: Vec<u64>,
    /// Label → window offset: label `v` of row `i` was read at `sample_indices[i] + offsets[v]`.
    pub offsets: BTreeMap<String, i64>,
    /// Position of this batch in its epoch.
    pub index: usize,
    /// The epoch it belongs to.
    pub epoch: u64,
    /// Where each row's patch lies, when the dataset cuts patches (`None`: whole samples).
    pub patches: Option<BatchPatches>,
    /// This rank's part of every row under model parallelism (`mesh.rs`; `None`: whole rows).
    pub part: Option<BatchPart>,
    /// The sample axis's coordinate value of each row's anchor (`coords.rs`), by name, and
    /// with patches each patched axis's coordinate values that each row's patch covers (rows
    /// × patch extent, row by row); empty unless the dataset reads coordinates.
    pub coords: BTreeMap<String, crate::coords::CoordValues>,
}

/// A model-parallel rank's part of its rows: the slice `start .. start + len` of each row's
/// box (the field, or the row's patch) along `dim`, for the variables that have `dim`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchPart {
    /// The split axis (a dimension name, or `axis{k}`).
    pub dim: String,
    /// This rank's part, `0..of`.
    pub index: usize,
    /// Parts per row: the model-parallel group size.
    pub of: usize,
    /// Where the part starts in the row's box.
    pub start: u64,
    /// Its length.
    pub len: u64,
}

/// The patches of a batch's rows: row `i` of every patched label is the box starting at
/// `origins[i * dims.len()..][..dims.len()]` with extent `size` on the patched axes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchPatches {
    /// The patched axes, by dimension name (or `axis{k}` for an unnamed axis).
    pub dims: Vec<String>,
    /// The patch extent on each patched axis.
    pub size: Vec<u64>,
    /// Per row, the start index on each patched axis (row-major: `rows × dims.len()`).
    pub origins: Vec<u64>,
}

impl BatchPatches {
    /// Row `i`'s patch origin, one start per patched axis.
    pub fn origin(&self, i: usize) -> &[u64] {
        let n = self.dims.len();
        &self.origins[i * n..(i + 1) * n]
    }
}

impl Batch {
    /// Rows; only the epoch's last batch is short.
    pub fn len(&self) -> usize {
        self.sample_indices.len()
    }

    /// True for an empty batch (never yielded by a pass).
    pub fn is_empty(&self) -> bool {
        self.sample_indices.is_empty()
    }

    /// Where each row of `label` was read: anchor + offset.
    pub fn read_indices(&self, label: &str) -> Vec<i64> {
        let off = self.offsets.get(label).copied().unwrap_or(0);
        self.sample_indices.iter().map(|&t| t as i64 + off).collect()
    }

    /// A zero-copy `ndarray` view of one label's `(rows, *inner)` array.
    ///
    /// # Errors
    /// [`Error::Config`] for an unknown label or a `T` that is not the array's dtype.
    pub fn view<T: crate::array::Element>(&self, label: &str) -> Result<ndarray::ArrayViewD<'_, T>> {
        let array = self.arrays.get(label).ok_or_else(|| Error::Config(format!("batch has no label {label:?}")))?;
        array.view().map_err(|e| Error::Config(format!("label {label:?}: {e}")))
    }

    /// [`Batch::stack`] as an owned `ndarray` array of `T`.
    ///
    /// # Errors
    /// As [`Batch::stack`], and [`Error::Config`] when `T` is not the arrays' dtype.
    pub fn stack_array<T: crate::array::Element>(&self, labels: &[&str]) -> Result<ndarray::ArrayD<T>> {
        let stacked = self.stack(labels)?;
        stacked.to_ndarray().map_err(|e| Error::Config(format!("stack {labels:?}: {e}")))
    }

    /// Stack `labels` along a new axis 1: `(rows, len(labels), *inner)`.
    ///
    /// # Errors
    /// [`Error::Config`] for an unknown label or labels of different shape or dtype.
    pub fn stack(&self, labels: &[&str]) -> Result<NdArray> {
        let arrays: Vec<&NdArray> = labels
            .iter()
            .map(|l| self.arrays.get(*l).ok_or_else(|| Error::Config(format!("batch has no label {l:?}"))))
            .collect::<Result<_>>()?;
        let Some(first) = arrays.first() else {
            return Err(Error::Config("stack needs at least one label".into()));
        };
        if arrays.iter().any(|a| a.shape != first.shape || a.dtype != first.dtype) {
            return Err(Error::Config(format!("cannot stack {labels:?}: shapes or dtypes differ")));
        }
        let rows = self.len();
        let row = first.row_bytes();
        let mut data = crate::array::zeroed_bytes(rows * row * arrays.len());
        for r in 0..rows {
            for (k, a) in arrays.iter().enumerate() {
                let dst = (r * arrays.len() + k) * row;
                data[dst..dst + row].copy_from_slice(&a.data[r * row..(r + 1) * row]);
            }
        }
        let mut shape = vec![rows, arrays.len()];
        shape.extend_from_slice(&first.shape[1..]);
        NdArray::new(first.dtype, shape, data).map_err(Error::Config)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::array::{DType, NdArray, zeroed_bytes};
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    fn f32_array(shape: &[usize], first: f32) -> NdArray {
        let n: usize = shape.iter().product();
        let mut a = NdArray::new(DType::Float32, shape.to_vec(), zeroed_bytes(n * 4)).unwrap();
        for (i, v) in a.as_mut_slice::<f32>().unwrap().iter_mut().enumerate() {
            *v = first + i as f32;
        }
        a
    }

    fn batch() -> Batch {
        let arrays =
            BTreeMap::from([("x".to_string(), f32_array(&[2, 3], 0.0)), ("y".to_string(), f32_array(&[2, 3], 100.0))]);
        Batch {
            arrays,
            sample_indices: vec![4, 9],
            offsets: BTreeMap::new(),
            index: 0,
            epoch: 0,
            patches: None,
            part: None,
            coords: BTreeMap::new(),
        }
    }

    #[test]
    fn a_view_is_the_batch_buffer_itself_in_its_shape() {
        let b = batch();
        let v = b.view::<f32>("x").unwrap();
        assert_eq!(v.shape(), &[2, 3]);
        assert_eq!(v[[1, 2]], 5.0);
        assert!(std::ptr::eq(v.as_ptr().cast::<u8>(), b.arrays["x"].data.as_ptr()), "no copy");
    }

    #[test]
    fn a_wrong_element_type_or_label_is_an_error_naming_it() {
        let b = batch();
        let err = b.view::<f64>("x").unwrap_err().to_string();
        assert!(err.contains("float32") && err.contains("float64"), "{err}");
        assert!(b.view::<f32>("z").unwrap_err().to_string().contains("\"z\""));
    }

    #[test]
    fn stack_array_interleaves_labels_on_axis_one() {
        let s = batch().stack_array::<f32>(&["x", "y"]).unwrap();
        assert_eq!(s.shape(), &[2, 2, 3]);
        assert_eq!(s[[1, 0, 0]], 3.0);
        assert_eq!(s[[1, 1, 2]], 105.0);
    }
}
