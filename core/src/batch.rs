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
