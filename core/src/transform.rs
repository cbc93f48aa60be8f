//! Chunk transforms (per array, per chunk, cached with the chunk) and batch transforms
//! (per batch, all variables, never cached).
//!
//! Placement rule: per-variable, per-chunk, deterministic work goes in the chunk stage
//! (scaling, unit conversion, regrid); cross-variable or random work in the batch stage.

use std::sync::Arc;

use crate::array::{DType, NdArray};
use crate::batch::Batch;
use crate::error::{Error, Result};
use crate::geometry::ArrayGeometry;
use crate::runtime::{MaybeSend, MaybeSync};

/// A decoded chunk as a transform sees it: logical, clipped, sample-first.
#[derive(Debug, Clone)]
pub struct DecodedChunk {
    /// Array path.
    pub array: String,
    /// Chunk index along the sample axis.
    pub chunk_index: u64,
    /// Global index of the chunk's first sample.
    pub sample_offset: u64,
    /// `(rows, *inner)`; a short final chunk arrives short, edge tiles arrive clipped.
    pub data: NdArray,
}

/// Per-chunk work, run on the thread pool, cached with the chunk.
pub trait ChunkTransform: MaybeSend + MaybeSync + std::fmt::Debug {
    /// A short name for reports (`scale`, `coarsen2`).
    fn name(&self) -> String;
    /// Transform one chunk. Must not change the row count.
    ///
    /// # Errors
    /// Any error fails the chunk (and the pass) with the transform's message.
    fn apply(&self, chunk: DecodedChunk) -> Result<DecodedChunk>;
    /// The output dtype and inner shape for an input; override when reshaping or recasting.
    /// `geom` is the array's real geometry (its path, sample axis and chunking); `dtype` and
    /// `inner` are what the transforms before this one produce.
    fn output(&self, _geom: &ArrayGeometry, dtype: DType, inner: &[usize]) -> Result<(DType, Vec<usize>)> {
        Ok((dtype, inner.to_vec()))
    }
    /// What identifies this transform's output on `array` to a persisted cache: two
    /// transforms with the same token must produce the same bytes there. The default is the
    /// name and the full `Debug` form (all parameters, never summarized); override it when
    /// `Debug` leaves out something that changes the output, to keep per-array parameters
    /// from invalidating other arrays, or to declare a version you bump on every re-fit.
    fn cache_token(&self, _array: &str) -> String {
        format!("{}:{self:?}", self.name())
    }
    /// Reject a scope this transform cannot serve (called by [`applies`]).
    ///
    /// # Errors
    /// [`Error::Config`] naming the arrays it cannot handle.
    fn validate_scope(&self, _arrays: &[String]) -> Result<()> {
        Ok(())
    }
}

/// Per-batch work, run on the thread pool after gather, never cached.
pub trait BatchTransform: MaybeSend + MaybeSync + std::fmt::Debug {
    /// A short name for reports.
    fn name(&self) -> String;
    /// Transform one batch.
    ///
    /// # Errors
    /// Any error fails the pass with the transform's message.
    fn apply(&self, batch: Batch) -> Result<Batch>;
}

/// A chunk transform restricted to some array paths.
#[derive(Debug, Clone)]
pub struct Scoped {
    /// The array paths it runs on; `None` = every array.
    pub arrays: Option<Vec<String>>,
    /// The transform.
    pub transform: Arc<dyn ChunkTransform>,
}

impl Scoped {
    /// True when this transform runs on `array`.
    pub fn covers(&self, array: &str) -> bool {
        self.arrays.as_ref().is_none_or(|a| a.iter().any(|x| x == array))
    }
    /// `name[a,b]` for scoped, `name` for bare.
    pub fn label(&self) -> String {
        match &self.arrays {
            Some(a) => format!("{}[{}]", self.transform.name(), a.join(",")),
            None => self.transform.name(),
        }
    }
}

/// Apply `transform` to every array.
pub fn everywhere(transform: Arc<dyn ChunkTransform>) -> Scoped {
    Scoped { arrays: None, transform }
}

/// Restrict `transform` to the named array paths (not labels).
///
/// # Errors
/// [`Error::Config`] for an empty scope or one the transform rejects.
pub fn applies(arrays: &[&str], transform: Arc<dyn ChunkTransform>) -> Result<Scoped> {
    if arrays.is_empty() {
        return Err(Error::Config(format!(
            "applies([], {}) has an empty scope; name at least one array",
            transform.name()
        )));
    }
    let arrays: Vec<String> = arrays.iter().map(|s| (*s).to_string()).collect();
    transform.validate_scope(&arrays)?;
    Ok(Scoped { arrays: Some(arrays), transform })
}

/// Block-mean regrid of the last two axes by `factor`, trimming ragged edges: a reshaping
/// chunk transform that declares its output shape.
#[derive(Debug, Clone, Copy)]
pub struct Coarsen {
    /// The block edge.
    pub factor: usize,
}

impl ChunkTransform for Coarsen {
    fn name(&self) -> String {
        format!("coarsen{}", self.factor)
    }
    fn output(&self, geom: &ArrayGeometry, dtype: DType, inner: &[usize]) -> Result<(DType, Vec<usize>)> {
        self.output_for(&geom.path, dtype, inner)
    }
    fn apply(&self, chunk: DecodedChunk) -> Result<DecodedChunk> {
        self.coarsen(chunk)
    }
}

impl Coarsen {
    fn output_for(self, array: &str, dtype: DType, inner: &[usize]) -> Result<(DType, Vec<usize>)> {
        if dtype != DType::Float32 || inner.len() < 2 || self.factor == 0 {
            return Err(Error::Config(format!(
                "Coarsen({}) needs float32 data with at least two inner axes and a positive factor; array {array} is {dtype} {inner:?}",
                self.factor
            )));
        }
        let mut out = inner.to_vec();
        let n = out.len();
        out[n - 2] /= self.factor;
        out[n - 1] /= self.factor;
        if out[n - 2] == 0 || out[n - 1] == 0 {
            return Err(Error::Config(format!(
                "Coarsen({}) leaves nothing of inner shape {inner:?}; array {array}",
                self.factor
            )));
        }
        Ok((dtype, out))
    }

    fn coarsen(self, chunk: DecodedChunk) -> Result<DecodedChunk> {
        let f = self.factor;
        let inner = &chunk.data.shape[1..];
        let (_, out_inner) = self.output_for(&chunk.array, chunk.data.dtype, inner)?;
        let n = inner.len();
        let (h, w) = (inner[n - 2], inner[n - 1]);
        let (oh, ow) = (out_inner[n - 2], out_inner[n - 1]);
        let planes = chunk.data.shape[0] * inner[..n - 2].iter().product::<usize>();
        let src = chunk
            .data
            .as_slice::<f32>()
            .ok_or_else(|| Error::Transform { name: self.name(), message: "unaligned data".into() })?;
        let mut out = crate::array::zeroed_bytes(planes * oh * ow * 4);
        {
            let dst: &mut [f32] = bytemuck::cast_slice_mut(&mut out);
            let norm = 1.0 / (f * f) as f32;
            for p in 0..planes {
                for i in 0..oh {
                    for j in 0..ow {
                        let mut acc = 0.0f32;
                        for di in 0..f {
                            let row = &src[p * h * w + (i * f + di) * w + j * f..][..f];
                            acc += row.iter().sum::<f32>();
                        }
                        dst[p * oh * ow + i * ow + j] = acc * norm;
                    }
                }
            }
        }
        let mut shape = vec![chunk.data.shape[0]];
        shape.extend(out_inner);
        Ok(DecodedChunk { data: NdArray::new(DType::Float32, shape, out).map_err(Error::Config)?, ..chunk })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // On wasm32 the tests run under wasm-bindgen-test (scripts/test-wasm.sh), whose attribute
    // takes the place of libtest's `#[test]`.
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    fn chunk(shape: Vec<usize>, values: Vec<f32>) -> DecodedChunk {
        let mut data = crate::array::zeroed_bytes(values.len() * 4);
        data.copy_from_slice(bytemuck::cast_slice(&values));
        DecodedChunk {
            array: "t2m".into(),
            chunk_index: 0,
            sample_offset: 0,
            data: NdArray::new(DType::Float32, shape, data).unwrap(),
        }
    }

    #[test]
    fn coarsen_block_means_and_trims() {
        let c = Coarsen { factor: 2 };
        let out = c.apply(chunk(vec![1, 3, 4], (0..12).map(|x| x as f32).collect())).unwrap();
        assert_eq!(out.data.shape, vec![1, 1, 2]);
        assert_eq!(out.data.as_slice::<f32>().unwrap(), &[2.5, 4.5]);
        assert_eq!(c.output_for("a", DType::Float32, &[3, 4]).unwrap().1, vec![1, 2]);
    }
}
