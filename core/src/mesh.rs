//! A rank mesh: data-parallel groups × a model-parallel group size.
//!
//! With `model_parallel = k`, ranks `g·k .. g·k + k` form group `g`. The ranks of a group
//! draw the same rows in the same order (the order is dealt to the `world_size / k` groups as
//! it is dealt to ranks, `ranks.rs`), and rank `g·k + p` takes part `p` of every row along
//! one axis: the row's box (the whole field, or its patch, `patch.rs`) split in `k` as
//! `numpy.array_split` splits it (the first `len % k` parts one longer). So the union over a
//! group is the full row, and a model sharded over the group's devices gets its slices
//! without a scatter. Where a chunk is tiled along that axis, a rank fetches, decodes and
//! holds only the tiles its part touches (`pass::plan_tiles`, as for patches); a chunk of one
//! tile there, a chunk transform or a disk tier makes every rank of the group read it whole.

use crate::error::{Error, Result};
use crate::patch::PatchAxis;

/// The model-parallel side of the mesh.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelParallel {
    /// Ranks per group (consecutive ranks), at least 1 and dividing `world_size`.
    pub size: usize,
    /// The axis each row is split along: a dimension name or a physical axis index.
    pub axis: PatchAxis,
}

impl ModelParallel {
    /// Check the group size against the world (and node affinity's ranks per node, which
    /// must hold whole groups).
    ///
    /// # Errors
    /// [`Error::Config`] saying what to pass.
    pub fn check(&self, world_size: usize, node_ranks: Option<usize>) -> Result<()> {
        if self.size == 0 || !world_size.is_multiple_of(self.size) {
            return Err(Error::option(
                "model_parallel",
                format!(
                    "`model_parallel`={} must be at least 1 and divide `world_size`={world_size}; the ranks of a group \
                     are consecutive",
                    self.size
                ),
            ));
        }
        if let Some(k) = node_ranks.filter(|k| !k.is_multiple_of(self.size)) {
            return Err(Error::option(
                "node_ranks",
                format!(
                    "node affinity's {k} ranks per node (`node_ranks`) do not hold whole model-parallel groups of {}; \
                     make the ranks per node a multiple of `model_parallel`",
                    self.size
                ),
            ));
        }
        Ok(())
    }

    /// This rank's data-parallel group and its part in it.
    pub fn place(&self, rank: usize) -> (usize, usize) {
        (rank / self.size, rank % self.size)
    }
}

/// Part `p` of `k` of a length `len`: `(start, len)`, as `numpy.array_split` cuts it.
pub(crate) fn part(p: usize, k: usize, len: u64) -> (u64, u64) {
    let (k, p) = (k as u64, p as u64);
    let (base, extra) = (len / k, len % k);
    (p * base + p.min(extra), base + u64::from(p < extra))
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    #[test]
    fn parts_cut_like_numpy_array_split_and_cover_the_length() {
        assert_eq!((0..3).map(|p| part(p, 3, 10)).collect::<Vec<_>>(), [(0, 4), (4, 3), (7, 3)]);
        assert_eq!((0..2).map(|p| part(p, 2, 6)).collect::<Vec<_>>(), [(0, 3), (3, 3)]);
        assert_eq!(part(3, 4, 2), (2, 0), "a part may be empty when the axis is shorter than the group");
    }

    #[test]
    fn groups_must_divide_the_world_and_fit_a_node() {
        let mp = ModelParallel { size: 2, axis: PatchAxis::Name("lat".into()) };
        assert!(mp.check(4, None).is_ok() && mp.check(4, Some(2)).is_ok());
        assert!(mp.check(3, None).unwrap_err().to_string().contains("divide world_size=3"));
        assert!(mp.check(4, Some(1)).unwrap_err().to_string().contains("multiple of model_parallel"));
        assert_eq!(mp.place(3), (1, 1));
    }
}
