//! Placing a decoded tile (physical axis order, padded) into its chunk's slot
//! (sample-first, clipped): the one physical→logical permutation in the engine.

use crate::geometry::ArrayGeometry;

/// Where one tile lands in a slot.
#[derive(Debug, Clone)]
pub struct Placement {
    /// Per physical axis: the in-bounds extent of the tile.
    pub extent: Vec<usize>,
    /// Per physical axis: the tile's first index inside the slot's coordinates.
    pub slot_origin: Vec<usize>,
}

/// The placement of tile `inner` of chunk `c`.
pub fn placement(g: &ArrayGeometry, c: u64, inner: &[u64]) -> Placement {
    let coord = g.physical_tile_coord(c, inner);
    let mut extent = Vec::with_capacity(coord.len());
    let mut slot_origin = Vec::with_capacity(coord.len());
    for (ax, &k) in coord.iter().enumerate() {
        let origin = k * g.tile[ax];
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

/// Copy the in-bounds part of `tile` (full tile shape, physical order) into `slot`.
pub fn place_tile(g: &ArrayGeometry, c: u64, inner: &[u64], tile: &[u8], slot: &mut [u8]) {
    let item = g.dtype.size();
    let p = placement(g, c, inner);
    let rank = g.shape.len();
    let sshape = slot_shape(g, c);
    // Element strides of the tile (physical, C order) and of the slot, per physical axis.
    let mut tile_stride = vec![0usize; rank];
    let mut acc = 1usize;
    for ax in (0..rank).rev() {
        tile_stride[ax] = acc;
        acc *= g.tile[ax] as usize;
    }
    // Slot axis order: sample axis first, then inner axes in physical order.
    let slot_axes: Vec<usize> = std::iter::once(g.sample_axis).chain(g.inner_axes()).collect();
    let mut slot_stride = vec![0usize; rank];
    let mut acc = 1usize;
    for (pos, &ax) in slot_axes.iter().enumerate().rev() {
        slot_stride[ax] = acc;
        acc *= sshape[pos];
    }
    if p.extent.contains(&0) {
        return;
    }
    let last = rank - 1;
    let run = p.extent[last];
    let contiguous = slot_stride[last] == 1;
    let mut idx = vec![0usize; rank];
    loop {
        let src: usize = (0..rank).map(|a| idx[a] * tile_stride[a]).sum();
        let dst: usize = (0..rank).map(|a| (idx[a] + p.slot_origin[a]) * slot_stride[a]).sum();
        if contiguous {
            slot[dst * item..(dst + run) * item].copy_from_slice(&tile[src * item..(src + run) * item]);
        } else {
            for k in 0..run {
                let (s, d) = ((src + k) * item, (dst + k * slot_stride[last]) * item);
                slot[d..d + item].copy_from_slice(&tile[s..s + item]);
            }
        }
        // Advance the multi-index over all axes but the last.
        let mut ax = last;
        loop {
            if ax == 0 {
                return;
            }
            ax -= 1;
            idx[ax] += 1;
            if idx[ax] < p.extent[ax] {
                break;
            }
            idx[ax] = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::array::DType;

    // On wasm32 the tests run under wasm-bindgen-test (scripts/test-wasm.sh), whose attribute
    // takes the place of libtest's `#[test]`.
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    /// Build an array whose element value encodes its physical index, tile it, place every
    /// tile, and check the slot against a direct sample-first read.
    fn check(shape: Vec<u64>, tile: Vec<u64>, sample_axis: usize) {
        let g = ArrayGeometry::new("a", shape.clone(), tile.clone(), DType::Uint32, sample_axis).unwrap();
        let value = |p: &[u64]| p.iter().zip(&shape).fold(0u64, |acc, (i, n)| acc * n + i) as u32;
        for c in 0..g.n_chunks() {
            let sshape = slot_shape(&g, c);
            let mut slot = vec![0u8; sshape.iter().product::<usize>() * 4];
            for t in 0..g.n_tiles() {
                let inner = g.inner_coord(t);
                let coord = g.physical_tile_coord(c, &inner);
                let n: usize = tile.iter().product::<u64>() as usize;
                let mut buf = Vec::with_capacity(n * 4);
                for e in 0..n {
                    let local = crate::geometry::unravel_index(e as u64, &tile);
                    let p: Vec<u64> = local.iter().zip(&coord).zip(&tile).map(|((l, c), t)| c * t + l).collect();
                    let inb = p.iter().zip(&shape).all(|(i, s)| i < s);
                    buf.extend_from_slice(&(if inb { value(&p) } else { u32::MAX }).to_ne_bytes());
                }
                place_tile(&g, c, &inner, &buf, &mut slot);
            }
            let got: Vec<u32> = slot.chunks(4).map(|b| u32::from_ne_bytes(b.try_into().unwrap())).collect();
            let n_inner: u64 = g.inner_shape().iter().product();
            let mut i = 0;
            for s in g.samples_in_chunk(c) {
                for e in 0..n_inner {
                    let flat = crate::geometry::sample_element_index(&shape, sample_axis, s, e);
                    assert_eq!(u64::from(got[i]), flat, "chunk {c} sample {s} element {e}");
                    i += 1;
                }
            }
        }
    }

    #[test]
    fn places_ragged_tiles_on_any_sample_axis() {
        check(vec![10, 4, 6], vec![3, 4, 6], 0);
        check(vec![37, 13, 17], vec![5, 6, 6], 0);
        check(vec![1, 2, 9, 5, 4], vec![1, 1, 4, 2, 3], 2);
        check(vec![5, 7], vec![2, 3], 1);
    }
}
