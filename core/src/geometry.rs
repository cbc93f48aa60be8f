//! What the engine needs to know about one array: shapes, the sample axis, and chunk math.
//!
//! `shape` and `tile` are in physical (zarr) axis order. The engine works sample-first: the
//! one physical→logical permutation happens when a decoded tile is placed into its slot.

use serde::{Deserialize, Serialize};

use crate::array::DType;
use crate::error::{Error, Result};

/// Largest chunk (one sample-axis chunk, all inner tiles) the engine will hold: 1 TiB.
/// A store declaring more is hostile or broken; refusing it beats an allocation abort.
pub const MAX_CHUNK_BYTES: u64 = 1 << 40;

/// The geometry of one array (or one windowed view of it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArrayGeometry {
    /// Array path inside the store, e.g. `t2m` or `group/t2m`.
    pub path: String,
    /// Array shape, physical order.
    pub shape: Vec<u64>,
    /// The fetch unit ("tile"): the stored chunk, or the inner chunk of a sharded array.
    pub tile: Vec<u64>,
    /// The shard shape when the array is sharded (reporting only; reads are per tile).
    pub shard: Option<Vec<u64>>,
    /// Element type.
    pub dtype: DType,
    /// Which physical axis is the sample axis.
    pub sample_axis: usize,
    /// Window offset: this view reads `array[anchor + offset]`.
    pub offset: i64,
}

impl ArrayGeometry {
    /// Build and validate a geometry: every extent and product must be sane.
    ///
    /// # Errors
    /// [`Error::Geometry`] when the sample axis is out of range, a chunk extent is zero,
    /// ranks differ, or one chunk would exceed [`MAX_CHUNK_BYTES`].
    pub fn new(
        path: impl Into<String>,
        shape: Vec<u64>,
        tile: Vec<u64>,
        dtype: DType,
        sample_axis: usize,
    ) -> Result<Self> {
        let g = Self { path: path.into(), shape, tile, shard: None, dtype, sample_axis, offset: 0 };
        g.validate()?;
        Ok(g)
    }

    /// Check the invariants `new` promises (also used after deserializing).
    ///
    /// # Errors
    /// [`Error::Geometry`] naming what is wrong, with the array path last.
    pub fn validate(&self) -> Result<()> {
        let bad = |what: String| Err(Error::Geometry(format!("{what}; array {}", self.path)));
        if self.shape.is_empty() {
            return bad("a 0-d array has no sample axis".into());
        }
        if self.shape.len() != self.tile.len() {
            return bad(format!("shape {:?} and chunk shape {:?} differ in rank", self.shape, self.tile));
        }
        if self.sample_axis >= self.shape.len() {
            return bad(format!(
                "sample_axis {} out of range for {}-D array with shape {:?}",
                self.sample_axis,
                self.shape.len(),
                self.shape
            ));
        }
        if self.tile.contains(&0) {
            return bad(format!("chunk shape {:?} has a zero extent", self.tile));
        }
        let checked = |dims: &[u64]| dims.iter().try_fold(self.dtype.size() as u64, |acc, &d| acc.checked_mul(d));
        let chunk_bytes = checked(&self.tile).and_then(|tile| tile.checked_mul(self.n_tiles_checked()?));
        match chunk_bytes {
            Some(b) if b <= MAX_CHUNK_BYTES => {}
            _ => {
                return bad(format!(
                    "one chunk of shape {:?} over shape {:?} would exceed {} bytes",
                    self.tile, self.shape, MAX_CHUNK_BYTES
                ));
            }
        }
        if checked(&self.shape).is_none() {
            return bad(format!("shape {:?} overflows 64-bit byte counts", self.shape));
        }
        if let Some(shard) = &self.shard
            && (shard.len() != self.tile.len() || shard.iter().zip(&self.tile).any(|(s, t)| *s == 0 || s % t != 0))
        {
            return bad(format!("shard shape {shard:?} is not a multiple of inner chunk shape {:?}", self.tile));
        }
        Ok(())
    }

    fn n_tiles_checked(&self) -> Option<u64> {
        self.inner_axes().try_fold(1u64, |acc, ax| acc.checked_mul(self.shape[ax].div_ceil(self.tile[ax]).max(1)))
    }

    /// A view of the same array read `k` samples later; shifts compose.
    #[must_use]
    pub fn shift(&self, k: i64) -> Self {
        Self { offset: self.offset + k, ..self.clone() }
    }

    /// The geometry of what this array's chunk transforms hand on (the batches' geometry):
    /// `inner` per sample in `dtype`, each sample-axis chunk one tile (a transform returns its
    /// chunk whole, never sharded), the sample axis where it was; `self` unchanged, tiles and
    /// shard as stored, when the transforms kept the sample's shape and type. Not validated:
    /// [`ArrayGeometry::validate`] says whether the declared shape makes a geometry (one of a
    /// rank below the sample axis does not).
    #[must_use]
    pub fn transformed(&self, inner: &[u64], dtype: DType) -> Self {
        if dtype == self.dtype && inner == self.inner_shape().as_slice() {
            return self.clone();
        }
        let at = self.sample_axis.min(inner.len());
        let with_samples = |along: u64| {
            let mut dims = inner.to_vec();
            dims.insert(at, along);
            dims
        };
        Self {
            path: self.path.clone(),
            shape: with_samples(self.n_samples()),
            tile: with_samples(self.sample_chunk_size()),
            shard: None,
            dtype,
            sample_axis: self.sample_axis,
            offset: self.offset,
        }
    }

    /// Physical indices of the inner (non-sample) axes, in order.
    pub fn inner_axes(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.shape.len()).filter(move |&a| a != self.sample_axis)
    }

    /// Length of the sample axis.
    pub fn n_samples(&self) -> u64 {
        self.shape[self.sample_axis]
    }

    /// Samples per chunk along the sample axis.
    pub fn sample_chunk_size(&self) -> u64 {
        self.tile[self.sample_axis]
    }

    /// Number of chunks along the sample axis.
    pub fn n_chunks(&self) -> u64 {
        self.n_samples().div_ceil(self.sample_chunk_size())
    }

    /// The chunk holding sample `i`.
    pub fn chunk_of(&self, sample: u64) -> u64 {
        sample / self.sample_chunk_size()
    }

    /// Half-open sample range of chunk `c`, clipped at `n_samples` (a chunk past the end is
    /// empty, however large `c`).
    pub fn samples_in_chunk(&self, c: u64) -> std::ops::Range<u64> {
        let spc = self.sample_chunk_size();
        let start = c.saturating_mul(spc);
        start.min(self.n_samples())..start.saturating_add(spc).min(self.n_samples())
    }

    /// Shape of one sample: the inner axes, physical order.
    pub fn inner_shape(&self) -> Vec<u64> {
        self.inner_axes().map(|a| self.shape[a]).collect()
    }

    /// Tile extents on the inner axes, physical order.
    pub fn inner_tile(&self) -> Vec<u64> {
        self.inner_axes().map(|a| self.tile[a]).collect()
    }

    /// Tiles per inner axis.
    pub fn inner_grid(&self) -> Vec<u64> {
        self.inner_axes().map(|a| self.shape[a].div_ceil(self.tile[a]).max(1)).collect()
    }

    /// Tiles that compose one sample-axis chunk.
    pub fn n_tiles(&self) -> u64 {
        self.n_tiles_checked().unwrap_or(u64::MAX)
    }

    /// The row-major inner tile coordinate of tile number `i` (the on-disk cache order).
    pub fn inner_coord(&self, i: u64) -> Vec<u64> {
        unravel_index(i, &self.inner_grid())
    }

    /// Call `visit` with the number of every tile holding part of the box `origin .. origin +
    /// size` on inner axes `dims` (inner positions, sample axis left out; the other inner
    /// axes whole): the tiles a patch, or a rank's part of a row, needs. Ascending.
    pub fn tiles_in_box(&self, (dims, origin, size): (&[usize], &[u64], &[u64]), mut visit: impl FnMut(u64)) {
        let grid = self.inner_grid();
        let tile = self.inner_tile();
        let mut lo = vec![0u64; grid.len()];
        let mut hi = grid.clone();
        for ((&d, &o), &s) in dims.iter().zip(origin).zip(size) {
            if s == 0 || d >= grid.len() {
                return;
            }
            lo[d] = o / tile[d];
            hi[d] = ((o + s - 1) / tile[d] + 1).min(grid[d]);
        }
        if lo.iter().zip(&hi).any(|(l, h)| l >= h) {
            return;
        }
        let mut at = lo.clone();
        loop {
            visit(ravel_index(&at, &grid));
            if !step_in_box(&mut at, &lo, &hi) {
                return;
            }
        }
    }

    /// The most tiles a box of `size` on inner axes `dims` can touch, wherever it lies: on
    /// a boxed axis `s` elements starting `r` into a tile of `t` reach `(r + s - 1) / t + 1`
    /// tiles, at most `(s + t - 2) / t + 1` (and the axis's tiles); other axes whole.
    pub fn most_tiles_in_box(&self, dims: &[usize], size: &[u64]) -> u64 {
        let (grid, tile) = (self.inner_grid(), self.inner_tile());
        let mut per_axis = grid.clone();
        for (&d, &s) in dims.iter().zip(size) {
            if let Some(n) = per_axis.get_mut(d) {
                *n = (*n).min((s.max(1) + tile[d] - 2) / tile[d] + 1);
            }
        }
        per_axis.iter().product()
    }

    /// The tile number of inner coordinate `inner`: the inverse of [`Self::inner_coord`].
    ///
    /// # Errors
    /// [`Error::Geometry`] when `inner` has another number of axes than the inner grid.
    pub fn inner_index(&self, inner: &[u64]) -> Result<u64> {
        self.check_inner_coord(inner)?;
        Ok(ravel_index(inner, &self.inner_grid()))
    }

    /// Check that `inner` names one tile coordinate per inner axis, as
    /// [`Self::physical_tile_coord`] and [`placement`] assume (the engine builds its
    /// coordinates from [`Self::inner_coord`]; a binding passes its caller's).
    ///
    /// # Errors
    /// [`Error::Geometry`] when `inner` has another number of axes than the inner grid.
    pub fn check_inner_coord(&self, inner: &[u64]) -> Result<()> {
        let axes = self.shape.len() - 1;
        if inner.len() == axes {
            return Ok(());
        }
        Err(Error::Geometry(format!(
            "inner_coord {inner:?} has {} axes, the inner grid {axes}; array {}",
            inner.len(),
            self.path
        )))
    }

    /// The full physical tile-grid coordinate for chunk `c` and inner tile `inner`.
    pub fn physical_tile_coord(&self, c: u64, inner: &[u64]) -> Vec<u64> {
        let mut out = Vec::with_capacity(self.shape.len());
        out.extend_from_slice(&inner[..self.sample_axis]);
        out.push(c);
        out.extend_from_slice(&inner[self.sample_axis..]);
        out
    }

    /// Elements in one sample.
    pub fn sample_elements(&self) -> u64 {
        self.inner_shape().iter().product()
    }

    /// Bytes of one sample.
    pub fn sample_bytes(&self) -> u64 {
        self.sample_elements() * self.dtype.size() as u64
    }

    /// Bytes of one stored tile, padding included (what a fetch decodes to).
    pub fn tile_bytes(&self) -> u64 {
        self.tile.iter().product::<u64>() * self.dtype.size() as u64
    }

    /// Bytes the stored tiles of one chunk occupy, edge padding included
    /// (insitubatch 0.2.0's `chunk_bytes`; what a tile-holding pool would charge).
    pub fn stored_chunk_bytes(&self) -> u64 {
        self.tile_bytes() * self.n_tiles()
    }

    /// Bytes of chunk `c` once assembled: its real rows × one sample. This is what the pool
    /// holds and charges (assembly clips edge padding), so it is the residency unit.
    pub fn slot_bytes(&self, c: u64) -> u64 {
        let r = self.samples_in_chunk(c);
        (r.end - r.start) * self.sample_bytes()
    }

    /// The largest `slot_bytes` over all chunks: a full chunk.
    pub fn max_slot_bytes(&self) -> u64 {
        self.sample_chunk_size().min(self.n_samples()) * self.sample_bytes()
    }

    /// Padded tiles over logical bytes for a full chunk (1.248 for 721 rows at 180).
    pub fn ragged_multiplier(&self) -> f64 {
        let logical = self.sample_chunk_size() * self.sample_bytes();
        if logical == 0 { 1.0 } else { self.stored_chunk_bytes() as f64 / logical as f64 }
    }

    /// Contiguous bytes a gather copies per run from a *stored tile* layout: walk inward
    /// from the last axis while the tile spans the axis. (Our pool assembles chunks, so
    /// our own gather always copies whole samples; this is reported for layout advice.)
    pub fn gather_run_bytes(&self) -> u64 {
        let mut run = self.dtype.size() as u64;
        for ax in (0..self.shape.len()).rev() {
            if ax == self.sample_axis {
                continue;
            }
            run *= self.tile[ax].min(self.shape[ax]);
            if self.tile[ax] < self.shape[ax] {
                break;
            }
        }
        run
    }
}

/// Where one tile lands in its chunk's slot: assembly copies by it (`assemble.rs`), and the
/// bindings' tile arithmetic asks it (the Python package's `tile_placement`).
#[derive(Debug, Clone)]
pub struct Placement {
    /// Per physical axis: the in-bounds extent of the tile.
    pub extent: Vec<usize>,
    /// Per physical axis: the tile's first index inside the slot's coordinates.
    pub slot_origin: Vec<usize>,
}

/// The placement of tile `inner` of chunk `c` (`inner` has one coordinate per inner axis:
/// [`ArrayGeometry::check_inner_coord`]; a tile past the array's end has nothing in bounds).
pub fn placement(g: &ArrayGeometry, c: u64, inner: &[u64]) -> Placement {
    let coord = g.physical_tile_coord(c, inner);
    let mut extent = Vec::with_capacity(coord.len());
    let mut slot_origin = Vec::with_capacity(coord.len());
    for (ax, &k) in coord.iter().enumerate() {
        let origin = k.saturating_mul(g.tile[ax]);
        extent.push((g.tile[ax].min(g.shape[ax].saturating_sub(origin))) as usize);
        // The slot spans the whole array on inner axes and the chunk on the sample axis.
        slot_origin.push(if ax == g.sample_axis { 0 } else { origin as usize });
    }
    Placement { extent, slot_origin }
}

/// Shape of chunk `c`'s slot: `(rows, *inner_shape)`.
pub fn slot_shape(g: &ArrayGeometry, c: u64) -> Vec<usize> {
    let r = g.samples_in_chunk(c);
    std::iter::once((r.end - r.start) as usize).chain(g.inner_shape().iter().map(|&d| d as usize)).collect()
}

/// Row-major (C-order) coordinates of flat index `i` in `shape`.
pub fn unravel_index(mut i: u64, shape: &[u64]) -> Vec<u64> {
    let mut coord = vec![0; shape.len()];
    for (k, d) in shape.iter().enumerate().rev() {
        coord[k] = i % d;
        i /= d;
    }
    coord
}

/// The physical row-major flat index of element `e` of sample `s`, where samples are taken
/// along `sample_axis` and a sample's elements are in physical order (how batches lay out
/// a row). The inverse of what assembly does; tests use it to find expected values.
pub fn sample_element_index(shape: &[u64], sample_axis: usize, s: u64, e: u64) -> u64 {
    let inner: Vec<u64> = (0..shape.len()).filter(|&a| a != sample_axis).map(|a| shape[a]).collect();
    let mut p = unravel_index(e, &inner);
    p.insert(sample_axis, s);
    ravel_index(&p, shape)
}

/// Step `at` to the next coordinate of the box `lo .. hi` in C order (the last axis
/// fastest); `false` once the box is done (`at` is then back at `lo`).
pub fn step_in_box<T>(at: &mut [T], lo: &[T], hi: &[T]) -> bool
where
    T: Copy + PartialOrd + std::ops::AddAssign + From<u8>,
{
    for ax in (0..at.len()).rev() {
        at[ax] += T::from(1);
        if at[ax] < hi[ax] {
            return true;
        }
        at[ax] = lo[ax];
    }
    false
}

/// The row-major (C-order) flat index of `coord` in `shape`: the inverse of [`unravel_index`].
pub fn ravel_index(coord: &[u64], shape: &[u64]) -> u64 {
    coord.iter().zip(shape).fold(0u64, |acc, (i, d)| acc * d + i)
}

#[cfg(test)]
mod tests {
    use super::*;

    // On wasm32 the tests run under wasm-bindgen-test (scripts/test-wasm.sh), whose attribute
    // takes the place of libtest's `#[test]`.
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    fn era5() -> ArrayGeometry {
        ArrayGeometry::new("t2m", vec![100, 721, 1440], vec![8, 180, 360], DType::Float32, 0).unwrap()
    }

    #[test]
    fn chunk_math() {
        let g = era5();
        assert_eq!(g.n_chunks(), 13);
        assert_eq!(g.samples_in_chunk(12), 96..100);
        assert_eq!(g.inner_grid(), vec![5, 4]);
        assert_eq!(g.n_tiles(), 20);
        assert_eq!(g.slot_bytes(12), 4 * 721 * 1440 * 4);
        assert!((g.ragged_multiplier() - 900.0 / 721.0).abs() < 1e-9);
        assert_eq!(g.inner_coord(7), vec![1, 3]);
    }

    #[test]
    fn sample_axis_and_shift() {
        let g = ArrayGeometry::new("raw", vec![1, 2, 30, 16, 15], vec![1, 1, 4, 8, 8], DType::Uint16, 2).unwrap();
        assert_eq!(g.n_samples(), 30);
        assert_eq!(g.inner_shape(), vec![1, 2, 16, 15]);
        assert_eq!(g.physical_tile_coord(3, &[0, 1, 1, 0]), vec![0, 1, 3, 1, 0]);
        assert_eq!(g.shift(1).shift(1).offset, 2);
        let err = ArrayGeometry::new("raw", vec![4, 4], vec![2, 2], DType::Uint16, 2).unwrap_err();
        assert!(err.to_string().contains("sample_axis 2 out of range"), "{err}");
    }

    #[test]
    fn hostile_shapes_are_refused() {
        assert!(ArrayGeometry::new("a", vec![10, 4], vec![0, 4], DType::Float32, 0).is_err());
        let e =
            ArrayGeometry::new("a", vec![u64::MAX, 1 << 40], vec![1 << 30, 1 << 30], DType::Float64, 0).unwrap_err();
        assert!(e.to_string().contains("would exceed"), "{e}");
    }

    #[test]
    fn inner_index_inverts_inner_coord_and_checks_axes() {
        let g = ArrayGeometry::new("t2m", vec![37, 13, 17], vec![5, 6, 6], DType::Float32, 0).unwrap();
        for t in 0..g.n_tiles() {
            assert_eq!(g.inner_index(&g.inner_coord(t)).unwrap(), t);
        }
        assert_eq!(g.inner_index(&[2, 1]).unwrap(), 7);
        let e = g.inner_index(&[1, 2, 3]).unwrap_err().to_string();
        assert!(e.contains("inner_coord [1, 2, 3] has 3 axes, the inner grid 2"), "{e}");
        assert!(g.check_inner_coord(&[0]).is_err() && g.check_inner_coord(&[0, 0]).is_ok());
        assert_eq!(g.samples_in_chunk(7), 35..37);
        assert_eq!(g.samples_in_chunk(u64::MAX), 37..37, "no overflow past the end");
        let p = placement(&g, u64::MAX, &[9, 9]);
        assert_eq!(p.extent, vec![0, 0, 0], "a tile past the end has nothing in bounds");
    }

    #[test]
    fn a_transformed_geometry_has_one_tile_per_chunk_at_the_sample_axis() {
        let g = ArrayGeometry::new("raw", vec![1, 2, 30, 16, 15], vec![1, 1, 4, 8, 8], DType::Uint16, 2).unwrap();
        let g = ArrayGeometry { shard: Some(vec![1, 1, 4, 16, 16]), ..g.shift(3) };
        assert_eq!(g.transformed(&[1, 2, 16, 15], DType::Uint16), g, "kept shape and type: the stored tiles and shard");
        let out = g.transformed(&[2, 3, 3], DType::Float32);
        assert_eq!((out.shape.clone(), out.tile.clone()), (vec![2, 3, 30, 3], vec![2, 3, 4, 3]));
        assert_eq!((out.sample_axis, out.offset, out.shard.clone(), out.dtype), (2, 3, None, DType::Float32));
        out.validate().unwrap();
        assert_eq!(g.transformed(&[1, 2, 16, 15], DType::Float32).tile, vec![1, 2, 4, 16, 15], "a new type alone");
        let e = g.transformed(&[5], DType::Uint16).validate().unwrap_err().to_string();
        assert!(e.contains("sample_axis 2 out of range for 2-D array with shape [5, 30]"), "{e}");
    }

    #[test]
    fn gather_run() {
        assert_eq!(era5().gather_run_bytes(), 360 * 4);
        let g = ArrayGeometry::new("a", vec![10, 4, 6], vec![2, 4, 6], DType::Float32, 0).unwrap();
        assert_eq!(g.gather_run_bytes(), 4 * 6 * 4);
    }
}
