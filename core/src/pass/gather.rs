//! The gather: each row's sample (or its patch, its `sel` picks, its rank's part) copied
//! out of its chunk into the batch, on the thread pool.

use std::collections::HashMap;
use std::sync::Arc;

use super::Patching;
use super::vars::GatherVar;
use crate::array::NdArray;
use crate::batch::{Batch, BatchPart, BatchPatches};
use crate::coords::Coordinate;
use crate::error::{Error, Result};
use crate::patch::{PatchedDims, copy_patch, copy_positions, row_positions};
use crate::plan::ChunkKey;
use crate::pool::Chunk;

/// Where a batch sits: its index and epoch, and how its rows are cut.
pub(super) struct BatchAt<'a> {
    pub(super) index: usize,
    pub(super) epoch: u64,
    /// Rows per sample (patches times weighted copies): row `r` reads sample `r / per_sample`.
    pub(super) per_sample: u64,
    /// This rank's part and the group size under a rank mesh.
    pub(super) mesh: Option<&'a (usize, usize)>,
    /// The sample axis's coordinate, when the dataset reads it.
    pub(super) coordinate: Option<&'a Coordinate>,
    pub(super) patching: Option<&'a Patching>,
}

/// Copy each row's sample (or its patch) out of its chunk: one contiguous copy per row and
/// variable, or one per row of the patch. `uses` names the use each row reads per variable
/// (`PassPlan::row_uses`), and `chunks` holds each use's chunk.
pub(super) fn gather(
    (rows, uses): (&[u64], &[u32]),
    vars: &[GatherVar],
    chunks: &HashMap<u32, Arc<Chunk>>,
    at: &BatchAt<'_>,
    recycler: &Arc<crate::array::Recycler>,
) -> Result<Batch> {
    let patcher = at.patching.map(|p| p.patcher.as_ref());
    let anchors: Vec<u64> = rows.iter().map(|&r| r / at.per_sample.max(1)).collect();
    let patches = at.patching.map(|p| {
        let mut origins = Vec::with_capacity(rows.len() * p.patcher.dims.len());
        for &r in rows {
            p.patcher.origin(r, p.seed, at.epoch, p.split, &mut origins);
        }
        BatchPatches { dims: p.patcher.dims.clone(), size: p.patcher.size.clone(), origins }
    });
    let mut batch = Batch {
        arrays: Default::default(),
        sample_indices: anchors,
        offsets: vars.iter().map(|v| (v.label.clone(), v.offset)).collect(),
        index: at.index,
        epoch: at.epoch,
        patches: None,
        part: None,
        coords: Default::default(),
    };
    if let Some(c) = at.coordinate {
        batch.coords.insert(c.name.clone(), c.take(&batch.sample_indices));
    }
    if let (Some(p), Some(bp)) = (patcher, &patches) {
        // Each patched axis's coordinate: the values each row's patch covers (rows × size).
        for (k, c) in p.coordinates.iter().enumerate() {
            if let Some(c) = c {
                let starts = (0..rows.len()).map(|i| bp.origin(i)[k]);
                batch.coords.insert(c.name.clone(), c.runs(starts, p.size[k]));
            }
        }
    }
    for (vi, v) in vars.iter().enumerate() {
        let row = v.sample_bytes;
        let inner = v.out_inner(patcher);
        let out_row = inner.iter().product::<usize>() * v.dtype.size();
        let mut out = recycler.take(out_row * rows.len());
        for (i, &t) in batch.sample_indices.iter().enumerate() {
            let s = (i128::from(t) + i128::from(v.offset)) as u64;
            let key = ChunkKey { path: v.path, chunk: s / v.spc, part: 0 };
            let w = (s % v.spc) as usize;
            let u = uses[i * vars.len() + vi];
            let chunk = chunks.get(&u).ok_or_else(|| Error::Internal(format!("chunk {key:?} missing at gather")))?;
            let (dims, origin, size) = v.row_box(patches.as_ref().zip(patcher).map(|(bp, p)| (bp.origin(i), p)));
            let mut push = |run: &[u8]| out.extend_from_slice(run);
            if let Some(layout) = &chunk.layout {
                let positions = row_positions(&v.inner, (&dims, &origin, &size), &v.picks);
                layout
                    .copy_positions(chunk.data.bytes(), v.dtype.size(), w, &positions, push)
                    .map_err(|m| Error::Internal(format!("chunk {key:?} held in part: {m}; please report this")))?;
                continue;
            }
            let src = chunk.data.bytes().get(w * row..(w + 1) * row).ok_or_else(|| {
                Error::Internal(format!("chunk {key:?} has no row {w} (shape {:?})", chunk.data.shape()))
            })?;
            if !v.picks.is_empty() {
                let positions = row_positions(&v.inner, (&dims, &origin, &size), &v.picks);
                copy_positions(src, &v.inner, v.dtype.size(), &positions, &mut push);
            } else if dims.is_empty() {
                push(src);
            } else {
                let cut = (&PatchedDims(dims), origin.as_slice(), size.as_slice());
                copy_patch(src, &v.inner, v.dtype.size(), cut, push);
            }
        }
        let shape = std::iter::once(rows.len()).chain(inner).collect();
        batch
            .arrays
            .insert(v.label.clone(), NdArray::new(v.dtype, shape, out).map_err(Error::Config)?.recycled_by(recycler));
    }
    batch.patches = patches;
    batch.part = vars.iter().find_map(|v| v.part.as_ref()).zip(at.mesh).map(|(p, &(index, of))| BatchPart {
        dim: p.name.clone(),
        index,
        of,
        start: p.start,
        len: p.len,
    });
    Ok(batch)
}
