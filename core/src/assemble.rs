//! Placing a decoded tile (physical axis order, padded) into its chunk's slot
//! (sample-first, clipped): the one physical→logical permutation in the engine.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

use crate::array::{AlignedBytes, Recycler};
use crate::geometry::{ArrayGeometry, Placement, placement, slot_shape};

/// Copy the in-bounds part of `tile` (full tile shape, physical order) into `slot`: the safe
/// form of [`TiledSlot::place`], which the tests check it against.
#[cfg(test)]
pub(crate) fn place_tile(g: &ArrayGeometry, c: u64, inner: &[u64], tile: &[u8], slot: &mut [u8]) {
    let p = placement(g, c, inner);
    let dest = Dest::whole(g, c, &p);
    for_each_run(g, &p, &dest, |src, dst, n| slot[dst..dst + n].copy_from_slice(&tile[src..src + n]));
}

/// Where a tile's elements go: a sample-first box of `shape` (slot axis order) starting
/// `base` elements into the buffer, the tile's first element at `origin` (per physical axis).
struct Dest {
    shape: Vec<usize>,
    origin: Vec<usize>,
    base: usize,
}

impl Dest {
    /// The whole chunk's slot: the tile lands at its place in the chunk.
    fn whole(g: &ArrayGeometry, c: u64, p: &Placement) -> Self {
        Self { shape: slot_shape(g, c), origin: p.slot_origin.clone(), base: 0 }
    }

    /// The tile's own region of a compact slot ([`TileLayout`]), starting at `base`.
    fn region(g: &ArrayGeometry, p: &Placement, base: usize) -> Self {
        let shape = std::iter::once(g.sample_axis).chain(g.inner_axes()).map(|a| p.extent[a]).collect();
        Self { shape, origin: vec![0; p.extent.len()], base }
    }
}

/// Call `copy(src, dst, bytes)` for each contiguous run of the tile placed at `p`: `bytes` at
/// byte offset `src` of the tile land at byte offset `dst` of the buffer `dest` describes.
/// The runs of one tile are disjoint, and so are those of two tiles of one chunk (see
/// [`TiledSlot`]).
fn for_each_run(g: &ArrayGeometry, p: &Placement, dest: &Dest, mut copy: impl FnMut(usize, usize, usize)) {
    let item = g.dtype.size();
    let rank = g.shape.len();
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
        acc *= dest.shape[pos];
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
        let dst: usize = dest.base + (0..rank).map(|a| (idx[a] + dest.origin[a]) * slot_stride[a]).sum::<usize>();
        if contiguous {
            copy(src * item, dst * item, run * item);
        } else {
            for k in 0..run {
                copy((src + k) * item, (dst + k * slot_stride[last]) * item, item);
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

/// A chunk held in part (the tiles a patched pass reads, `PassPlan::tiles`): each tile's
/// region of the sample-first slot, `(rows, in-bounds tile extents)` in C order, stored one
/// after another in the order of `tiles`. So a chunk read in part takes the bytes of its
/// tiles in memory and in the budget, not those of the whole chunk, and no byte of it is
/// left unwritten (the regions fill the buffer exactly).
#[derive(Debug)]
pub(crate) struct TileLayout {
    rows: usize,
    /// The sample's inner shape and the tile extents on it (slot order).
    inner: Vec<usize>,
    tile: Vec<usize>,
    /// Tiles per inner axis (the numbering of `ArrayGeometry::inner_coord`).
    grid: Vec<u64>,
    /// The tile numbers held, ascending.
    tiles: std::sync::Arc<[u64]>,
    /// Per held tile, the element offset of its region; then the total.
    offsets: Vec<usize>,
}

impl TileLayout {
    /// The layout of tiles `tiles` (ascending tile numbers) of chunk `c`.
    pub(crate) fn new(g: &ArrayGeometry, c: u64, tiles: std::sync::Arc<[u64]>) -> Self {
        let rows = slot_shape(g, c)[0];
        let inner: Vec<usize> = g.inner_shape().iter().map(|&d| d as usize).collect();
        let tile: Vec<usize> = g.inner_tile().iter().map(|&d| d as usize).collect();
        let grid = g.inner_grid();
        let mut offsets = Vec::with_capacity(tiles.len() + 1);
        let mut at = 0usize;
        for &t in tiles.iter() {
            offsets.push(at);
            let k = crate::geometry::unravel_index(t, &grid);
            at += rows * region_extent(&inner, &tile, &k).iter().product::<usize>();
        }
        offsets.push(at);
        Self { rows, inner, tile, grid, tiles, offsets }
    }

    /// Elements held.
    pub(crate) fn len(&self) -> usize {
        self.offsets.last().copied().unwrap_or(0)
    }

    /// The tile numbers held, ascending.
    pub(crate) fn tiles(&self) -> &std::sync::Arc<[u64]> {
        &self.tiles
    }

    /// The element offset of tile `t`'s region, if held.
    fn offset_of(&self, t: u64) -> Option<usize> {
        self.tiles.binary_search(&t).ok().map(|i| self.offsets[i])
    }

    /// Copy the elements at `positions` (per inner axis, in order; `patch::row_positions`)
    /// of row `row` out of `data` (this layout's buffer, `item` bytes per element) through
    /// `push`, run by run in C order; a run crossing tiles is pushed piece by piece.
    ///
    /// # Errors
    /// A message when a position lies in a tile not held or outside the buffer: a bug of the
    /// tile plan, never bad input.
    pub(crate) fn copy_positions(
        &self,
        data: &[u8],
        item: usize,
        row: usize,
        positions: &[Vec<usize>],
        mut push: impl FnMut(&[u8]),
    ) -> Result<(), String> {
        if self.inner.is_empty() || row >= self.rows {
            return Err(format!("row {row} of {} or a box of rank 0 is not in a chunk held in part", self.rows));
        }
        let last = self.inner.len() - 1;
        crate::patch::for_each_run_in(positions, |at, n| {
            let mut pos = at.to_vec();
            let (mut p, end) = (at[last], at[last] + n);
            while p < end {
                pos[last] = p;
                let piece = (self.tile[last] - p % self.tile[last]).min(end - p);
                let from = self.element(row, &pos).ok_or_else(|| format!("position {pos:?} is in no tile held"))?;
                let bytes = data
                    .get(from * item..(from + piece) * item)
                    .ok_or_else(|| format!("position {pos:?} lies outside the {} bytes held", data.len()))?;
                push(bytes);
                p += piece;
            }
            Ok(())
        })
    }

    /// The element offset of inner position `pos` of row `row`, when its tile is held.
    fn element(&self, row: usize, pos: &[usize]) -> Option<usize> {
        let k: Vec<u64> = pos.iter().zip(&self.tile).map(|(p, t)| (p / t) as u64).collect();
        let t = crate::geometry::ravel_index(&k, &self.grid);
        let base = self.offset_of(t)?;
        let extent = region_extent(&self.inner, &self.tile, &k);
        let local = pos.iter().zip(&self.tile).zip(&extent).fold(row, |acc, ((p, t), e)| acc * e + p % t);
        Some(base + local)
    }
}

/// Elements of the tiles `tiles` of chunk `c` (their regions of its slot): what a chunk read
/// in part holds ([`TileLayout::len`]).
pub(crate) fn held_elements(g: &ArrayGeometry, c: u64, tiles: &[u64]) -> usize {
    let rows = slot_shape(g, c)[0];
    let inner: Vec<usize> = g.inner_shape().iter().map(|&d| d as usize).collect();
    let tile: Vec<usize> = g.inner_tile().iter().map(|&d| d as usize).collect();
    let grid = g.inner_grid();
    let region =
        |&t: &u64| region_extent(&inner, &tile, &crate::geometry::unravel_index(t, &grid)).iter().product::<usize>();
    rows * tiles.iter().map(region).sum::<usize>()
}

/// The in-bounds extents of the tile at inner grid coordinate `k`.
fn region_extent(inner: &[usize], tile: &[usize], k: &[u64]) -> Vec<usize> {
    inner.iter().zip(tile).zip(k).map(|((&s, &t), &k)| t.min(s.saturating_sub(k as usize * t))).collect()
}

/// A chunk's slot while its tiles are placed into it, from several pool threads at once.
///
/// The tiles of one chunk decode on different threads. Behind one `Mutex` their copies into
/// the slot took turns, and a buffer that safe Rust writes piece by piece must be
/// initialized first, so every fresh slot was zeroed (a pass over tens of MiB) only to be
/// overwritten. Here each tile claims its index once and copies its region without a lock,
/// and the slot is handed out only once every tile has been placed.
///
/// Why that is sound: the regions of two tiles of one chunk are disjoint (the tiles differ in
/// their grid coordinate `k` on some inner axis, and there each covers `[k·t, k·t + e)` with
/// `e <= t`), so concurrent copies never touch the same byte; and together they cover the
/// slot (their in-bounds sizes add up to it, which [`TiledSlot::new`] checks), so once all
/// are placed every byte has been written once.
pub(crate) struct TiledSlot {
    /// The slot's length in bytes.
    len: usize,
    /// One tile that is the whole chunk (sample axis first, untiled inner axes): its decoded
    /// buffer becomes the slot, with no copy.
    whole: bool,
    /// The tiles' regions add up to the slot. Always, for a valid geometry; if not, the slot
    /// is zeroed when allocated, so that no byte is left unwritten.
    covers: bool,
    claimed: Vec<AtomicBool>,
    /// Tiles to be placed before the slot is done: all, or the few a patch needs.
    expected: usize,
    /// With only some tiles: where each lands in the compact slot.
    layout: Option<std::sync::Arc<TileLayout>>,
    placed: AtomicUsize,
    /// The buffer: allocated by the first tile placed (a chunk's reads can wait long before
    /// its first decode), taken by [`TiledSlot::finish`].
    buf: Mutex<Option<AlignedBytes>>,
    /// Where `buf`'s allocation starts, set once when it is allocated.
    base: OnceLock<Base>,
}

/// The start of a slot's allocation, written through by [`TiledSlot::place`] only.
struct Base(*mut u8);

// SAFETY: `Base` is only written through, by `TiledSlot::place`, at byte ranges that no other
// thread writes (the tiles' regions are disjoint, see `TiledSlot`), and the allocation it
// points into lives in `TiledSlot::buf` for as long as the `TiledSlot` does.
unsafe impl Send for Base {}
// SAFETY: as for `Send`.
unsafe impl Sync for Base {}

impl TiledSlot {
    /// The slot of chunk `c`, empty.
    pub(crate) fn new(g: &ArrayGeometry, c: u64) -> Self {
        let shape = slot_shape(g, c);
        let n_tiles = g.n_tiles();
        let whole =
            n_tiles == 1 && g.sample_axis == 0 && g.inner_tile().iter().zip(g.inner_shape()).all(|(t, s)| *t == s);
        let covered: usize =
            (0..n_tiles).map(|t| placement(g, c, &g.inner_coord(t)).extent.iter().product::<usize>()).sum();
        Self {
            len: shape.iter().product::<usize>() * g.dtype.size(),
            whole,
            covers: covered == shape.iter().product::<usize>(),
            claimed: (0..n_tiles).map(|_| AtomicBool::new(false)).collect(),
            expected: n_tiles as usize,
            layout: None,
            placed: AtomicUsize::new(0),
            buf: Mutex::new(None),
            base: OnceLock::new(),
        }
    }

    /// The slot of the chunk `layout` was made for, of which only its tiles are placed (a patched
    /// pass's subset, `PassPlan::tiles`): compact, each tile's region after the other's.
    pub(crate) fn some_tiles(g: &ArrayGeometry, layout: std::sync::Arc<TileLayout>) -> Self {
        Self {
            len: layout.len() * g.dtype.size(),
            whole: false,
            covers: true,
            claimed: (0..g.n_tiles()).map(|_| AtomicBool::new(false)).collect(),
            expected: layout.tiles().len(),
            layout: Some(layout),
            placed: AtomicUsize::new(0),
            buf: Mutex::new(None),
            base: OnceLock::new(),
        }
    }

    /// Place tile number `t` (its decoded bytes, full tile shape, physical order); the tile's
    /// buffer goes back to `recycler` unless it became the slot.
    ///
    /// # Errors
    /// A message when `t` is out of range, was placed before, or `tile` is too short: a bug,
    /// never bad input (the decoder checked the tile's length).
    pub(crate) fn place(
        &self,
        g: &ArrayGeometry,
        c: u64,
        t: u64,
        mut tile: AlignedBytes,
        recycler: &Recycler,
    ) -> Result<(), String> {
        let claim = usize::try_from(t).ok().and_then(|i| self.claimed.get(i));
        let Some(claim) = claim else { return Err(format!("tile {t} of chunk {c} is out of range")) };
        if claim.swap(true, Ordering::AcqRel) {
            return Err(format!("tile {t} of chunk {c} was placed twice"));
        }
        if self.whole {
            if tile.len() < self.len {
                return Err(format!("tile {t} of chunk {c} has {} bytes, the slot {}", tile.len(), self.len));
            }
            tile.truncate(self.len);
            *self.buf.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(tile);
        } else {
            let p = placement(g, c, &g.inner_coord(t));
            let dest = match &self.layout {
                None => Dest::whole(g, c, &p),
                Some(l) => match l.offset_of(t) {
                    Some(at) => Dest::region(g, &p, at),
                    None => return Err(format!("tile {t} of chunk {c} is not among the tiles planned")),
                },
            };
            let base = self.base.get_or_init(|| self.allocate(recycler)).0;
            let mut short = false;
            for_each_run(g, &p, &dest, |src, dst, n| {
                if src + n > tile.len() || dst + n > self.len {
                    short = true;
                    return;
                }
                // SAFETY: `src..src + n` is inside `tile` and `dst..dst + n` inside the slot's
                // allocation (checked just above; its capacity is at least `len`), and no other
                // thread writes `dst..dst + n`: it is this tile's region, claimed once (above).
                unsafe { std::ptr::copy_nonoverlapping(tile.as_ptr().add(src), base.add(dst), n) };
            });
            recycler.give(tile);
            if short {
                return Err(format!("tile {t} of chunk {c} is shorter than its placement"));
            }
        }
        self.placed.fetch_add(1, Ordering::Release);
        Ok(())
    }

    fn allocate(&self, recycler: &Recycler) -> Base {
        let mut b = recycler.take(self.len);
        if !self.covers {
            b.resize(self.len, 0);
        }
        let base = Base(b.as_mut_ptr());
        *self.buf.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(b);
        base
    }

    /// The assembled slot, once every tile has been placed.
    ///
    /// # Errors
    /// A message when a tile is missing or the slot was taken before: a bug, never bad input.
    pub(crate) fn finish(&self) -> Result<AlignedBytes, String> {
        let placed = self.placed.load(Ordering::Acquire);
        if placed != self.expected {
            return Err(format!("{placed} of {} tiles placed", self.expected));
        }
        let taken = self.buf.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
        let mut b = taken.ok_or_else(|| "the slot was taken before".to_string())?;
        if !self.whole && b.len() < self.len {
            // SAFETY: every expected tile has been placed, each once, and their writes happened
            // before the `Acquire` load above; their regions cover `0..len` (`covers`; a
            // compact slot's regions fill it by construction), and where they might not, the
            // buffer was zeroed to `len` when allocated.
            unsafe { b.set_len(self.len) };
        }
        Ok(b)
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

    /// Element values encode their physical index; out-of-bounds padding is `u32::MAX`.
    fn value(shape: &[u64], p: &[u64]) -> u32 {
        p.iter().zip(shape).fold(0u64, |acc, (i, n)| acc * n + i) as u32
    }

    /// The decoded bytes of tile `t` of chunk `c` (full tile shape, physical order).
    fn tile_bytes(g: &ArrayGeometry, c: u64, t: u64) -> AlignedBytes {
        let coord = g.physical_tile_coord(c, &g.inner_coord(t));
        let n: usize = g.tile.iter().product::<u64>() as usize;
        let mut buf = AlignedBytes::with_capacity(crate::array::BUFFER_ALIGN, n * 4);
        for e in 0..n {
            let local = crate::geometry::unravel_index(e as u64, &g.tile);
            let p: Vec<u64> = local.iter().zip(&coord).zip(&g.tile).map(|((l, c), t)| c * t + l).collect();
            let inb = p.iter().zip(&g.shape).all(|(i, s)| i < s);
            buf.extend_from_slice(&(if inb { value(&g.shape, &p) } else { u32::MAX }).to_ne_bytes());
        }
        buf
    }

    /// Check an assembled slot against a direct sample-first read of the array.
    fn assert_slot(g: &ArrayGeometry, c: u64, slot: &[u8]) {
        let got: Vec<u32> = slot.chunks(4).map(|b| u32::from_ne_bytes(b.try_into().unwrap())).collect();
        let n_inner: u64 = g.inner_shape().iter().product();
        assert_eq!(got.len() as u64, (g.samples_in_chunk(c).end - g.samples_in_chunk(c).start) * n_inner);
        let mut i = 0;
        for s in g.samples_in_chunk(c) {
            for e in 0..n_inner {
                let flat = crate::geometry::sample_element_index(&g.shape, g.sample_axis, s, e);
                assert_eq!(u64::from(got[i]), flat, "chunk {c} sample {s} element {e}");
                i += 1;
            }
        }
    }

    /// A recycler holding one buffer of `len` bytes filled with 0xAB, so that a slot region
    /// no tile writes shows up as a wrong value rather than as lucky zeros.
    fn dirty_recycler(len: usize) -> std::sync::Arc<Recycler> {
        let r = Recycler::new(usize::MAX);
        let mut b = AlignedBytes::with_capacity(crate::array::BUFFER_ALIGN, len);
        b.resize(len, 0xAB);
        r.give(b);
        r
    }

    /// Place every tile of every chunk, last tile first, through [`TiledSlot`] and through
    /// [`place_tile`], and check both.
    fn check(shape: Vec<u64>, tile: Vec<u64>, sample_axis: usize) {
        let g = ArrayGeometry::new("a", shape, tile, DType::Uint32, sample_axis).unwrap();
        for c in 0..g.n_chunks() {
            let len = slot_shape(&g, c).iter().product::<usize>() * 4;
            let recycler = dirty_recycler(len);
            let slot = TiledSlot::new(&g, c);
            for t in (0..g.n_tiles()).rev() {
                slot.place(&g, c, t, tile_bytes(&g, c, t), &recycler).unwrap();
            }
            assert_slot(&g, c, &slot.finish().unwrap());
            let mut plain = vec![0u8; len];
            for t in 0..g.n_tiles() {
                place_tile(&g, c, &g.inner_coord(t), &tile_bytes(&g, c, t), &mut plain);
            }
            assert_slot(&g, c, &plain);
        }
    }

    #[test]
    fn places_ragged_tiles_on_any_sample_axis() {
        check(vec![10, 4, 6], vec![3, 4, 6], 0);
        check(vec![37, 13, 17], vec![5, 6, 6], 0);
        check(vec![1, 2, 9, 5, 4], vec![1, 1, 4, 2, 3], 2);
        check(vec![5, 7], vec![2, 3], 1);
        // Slots past the recycler's minimum, so the dirty buffer is the one written.
        check(vec![7, 150, 130], vec![3, 64, 50], 0);
        check(vec![150, 7, 130], vec![64, 3, 50], 1);
    }

    /// Every tile of a chunk placed from a thread of its own at once, as the pool does.
    #[cfg(not(target_arch = "wasm32"))] // threads
    #[test]
    #[allow(
        clippy::disallowed_methods,
        reason = "the test needs real threads writing into one slot at once, as the pool's threads do"
    )]
    fn tiles_placed_from_many_threads_at_once_assemble_the_slot() {
        let g = ArrayGeometry::new("a", vec![9, 301, 257], vec![4, 64, 50], DType::Uint32, 0).unwrap();
        for c in 0..g.n_chunks() {
            let len = slot_shape(&g, c).iter().product::<usize>() * 4;
            let recycler = dirty_recycler(len);
            let slot = TiledSlot::new(&g, c);
            let tiles: Vec<AlignedBytes> = (0..g.n_tiles()).map(|t| tile_bytes(&g, c, t)).collect();
            let start = std::sync::Barrier::new(tiles.len());
            std::thread::scope(|s| {
                for (t, bytes) in tiles.into_iter().enumerate() {
                    let (g, slot, recycler, start) = (&g, &slot, &recycler, &start);
                    s.spawn(move || {
                        start.wait();
                        slot.place(g, c, t as u64, bytes, recycler).unwrap();
                    });
                }
            });
            assert_slot(&g, c, &slot.finish().unwrap());
        }
    }

    #[test]
    fn a_tile_placed_twice_or_missing_is_an_error_not_a_slot() {
        let g = ArrayGeometry::new("a", vec![10, 4, 6], vec![3, 2, 6], DType::Uint32, 0).unwrap();
        let recycler = Recycler::new(usize::MAX);
        let slot = TiledSlot::new(&g, 0);
        slot.place(&g, 0, 0, tile_bytes(&g, 0, 0), &recycler).unwrap();
        let twice = slot.place(&g, 0, 0, tile_bytes(&g, 0, 0), &recycler).unwrap_err();
        assert!(twice.contains("placed twice"), "{twice}");
        let missing = slot.finish().unwrap_err();
        assert!(missing.contains("1 of 2 tiles placed"), "{missing}");
        let out = slot.place(&g, 0, 2, tile_bytes(&g, 0, 0), &recycler).unwrap_err();
        assert!(out.contains("out of range"), "{out}");
        let short = TiledSlot::new(&g, 0).place(&g, 0, 1, AlignedBytes::new(crate::array::BUFFER_ALIGN), &recycler);
        assert!(short.unwrap_err().contains("shorter"));
        slot.place(&g, 0, 1, tile_bytes(&g, 0, 1), &recycler).unwrap();
        assert_slot(&g, 0, &slot.finish().unwrap());
        assert!(slot.finish().unwrap_err().contains("taken before"));
    }

    #[test]
    fn a_tile_that_is_the_whole_chunk_becomes_the_slot_without_a_copy() {
        let g = ArrayGeometry::new("a", vec![10, 4, 6], vec![3, 4, 6], DType::Uint32, 0).unwrap();
        let recycler = Recycler::new(usize::MAX);
        // The last chunk has 1 row of the tile's 3: the slot is the tile clipped to it.
        let slot = TiledSlot::new(&g, 3);
        let tile = tile_bytes(&g, 3, 0);
        let at = tile.as_ptr();
        slot.place(&g, 3, 0, tile, &recycler).unwrap();
        let out = slot.finish().unwrap();
        assert_eq!(out.as_ptr(), at);
        assert_slot(&g, 3, &out);
    }
    /// Chunk `c`'s whole slot, every tile placed by [`place_tile`].
    fn whole_slot(g: &ArrayGeometry, c: u64) -> Vec<u8> {
        let mut whole = vec![0u8; slot_shape(g, c).iter().product::<usize>() * 4];
        for t in 0..g.n_tiles() {
            place_tile(g, c, &g.inner_coord(t), &tile_bytes(g, c, t), &mut whole);
        }
        whole
    }

    /// Place every other tile of every chunk into a compact slot (`TileLayout`), dirty
    /// recycled buffers and all, and check each box inside the held tiles against the same
    /// box of the whole slot: the layout's copy equals slicing, and a box reaching a tile
    /// not held is an error.
    fn check_part(shape: Vec<u64>, tile: Vec<u64>, sample_axis: usize) {
        let g = ArrayGeometry::new("a", shape, tile, DType::Uint32, sample_axis).unwrap();
        let inner: Vec<usize> = g.inner_shape().iter().map(|&d| d as usize).collect();
        let tiles_per = g.inner_tile().iter().map(|&t| t as usize).collect::<Vec<_>>();
        for c in 0..g.n_chunks() {
            let held: std::sync::Arc<[u64]> = (0..g.n_tiles()).filter(|t| t % 2 == 0).collect();
            let layout = std::sync::Arc::new(TileLayout::new(&g, c, std::sync::Arc::clone(&held)));
            assert_eq!(layout.len(), held_elements(&g, c, &held));
            let recycler = dirty_recycler(layout.len() * 4);
            let part = TiledSlot::some_tiles(&g, std::sync::Arc::clone(&layout));
            for &t in held.iter().rev() {
                part.place(&g, c, t, tile_bytes(&g, c, t), &recycler).unwrap();
            }
            assert!(part.place(&g, c, 1, tile_bytes(&g, c, 1), &recycler).is_err(), "tile 1 is not planned");
            let part = part.finish().unwrap();
            let whole = whole_slot(&g, c);
            let row_len = inner.iter().product::<usize>() * 4;
            for row in 0..slot_shape(&g, c)[0] {
                for t in 0..g.n_tiles() {
                    // The box of tile t, cut one short at its far edge where it can be.
                    let k = g.inner_coord(t);
                    let start: Vec<usize> = k.iter().zip(&tiles_per).map(|(&k, &n)| k as usize * n).collect();
                    let len: Vec<usize> = (start.iter().zip(&tiles_per).zip(&inner))
                        .map(|((&s, &n), &d)| n.min(d - s).saturating_sub(1).max(1))
                        .collect();
                    let mut got = Vec::new();
                    let dims: Vec<usize> = (0..inner.len()).collect();
                    let origin: Vec<u64> = start.iter().map(|&s| s as u64).collect();
                    let size: Vec<u64> = len.iter().map(|&l| l as u64).collect();
                    let positions = crate::patch::row_positions(&inner, (&dims, &origin, &size), &[]);
                    let r = layout.copy_positions(&part, 4, row, &positions, |run| got.extend_from_slice(run));
                    if held.contains(&t) {
                        r.unwrap();
                        let mut want = Vec::new();
                        let src = &whole[row * row_len..(row + 1) * row_len];
                        let cut = (&crate::patch::PatchedDims(dims), origin.as_slice(), size.as_slice());
                        crate::patch::copy_patch(src, &inner, 4, cut, |run| want.extend_from_slice(run));
                        assert_eq!(got, want, "chunk {c} row {row} tile {t}");
                    } else {
                        assert!(r.is_err(), "tile {t} is not held");
                    }
                }
            }
        }
    }

    #[test]
    fn a_chunk_held_in_part_copies_boxes_like_the_whole_slot() {
        check_part(vec![10, 4, 6], vec![3, 2, 3], 0);
        check_part(vec![9, 5, 7], vec![2, 4, 3], 1);
        check_part(vec![5, 7, 4], vec![2, 3, 4], 2);
        check_part(vec![1, 2, 9, 5, 4], vec![1, 1, 4, 2, 3], 2);
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 64, ..Default::default() })]
        /// Any geometry, a ragged last chunk, any box with or without a list of positions
        /// (out of order, repeated) on one axis: a chunk holding just the tiles they touch
        /// (and some others) copies every row exactly as the whole slot does.
        #[test]
        fn held_tiles_copy_any_box_and_picks_like_the_whole_slot(
            inner in proptest::collection::vec((1u64..9, 1u64..5), 1..4),
            rows in 1u64..4,
            seed in 0u64..u64::MAX,
        ) {
            use crate::shuffle::{Split, below, key, stream};
            let mut rng = stream(&key(seed, 0, Split::Train, 0, 0));
            let short = below(&mut rng, rows);
            let shape: Vec<u64> = std::iter::once(2 * rows - short).chain(inner.iter().map(|p| p.0)).collect();
            let tile: Vec<u64> = std::iter::once(rows).chain(inner.iter().map(|p| p.1)).collect();
            let g = ArrayGeometry::new("a", shape, tile, DType::Uint32, 0).unwrap();
            let extents: Vec<usize> = inner.iter().map(|p| p.0 as usize).collect();
            let (mut origin, mut size) = (Vec::new(), Vec::new());
            for &e in &inner {
                let start = below(&mut rng, e.0);
                origin.push(start);
                size.push(1 + below(&mut rng, e.0 - start));
            }
            let dims: Vec<usize> = (0..inner.len()).collect();
            let mut picks = Vec::new();
            if below(&mut rng, 2) == 1 {
                let a = below(&mut rng, inner.len() as u64) as usize;
                let n = 1 + below(&mut rng, 2 * inner[a].0);
                picks.push(crate::patch::AxisPicks::new(a, (0..n).map(|_| below(&mut rng, inner[a].0)).collect()));
            }
            let positions = crate::patch::row_positions(&extents, (&dims, &origin, &size), &picks);
            // The tiles the positions touch, and every third other tile.
            let mut held = std::collections::BTreeSet::new();
            let _ = crate::patch::for_each_run_in::<()>(&positions, |at, n| {
                for k in 0..n {
                    let mut p: Vec<u64> = at.iter().map(|&x| x as u64).collect();
                    *p.last_mut().unwrap() += k as u64;
                    let coord: Vec<u64> = p.iter().zip(g.inner_tile()).map(|(x, t)| x / t).collect();
                    held.insert(crate::geometry::ravel_index(&coord, &g.inner_grid()));
                }
                Ok(())
            });
            held.extend((0..g.n_tiles()).filter(|t| t % 3 == 2));
            let c = 1;
            let held: std::sync::Arc<[u64]> = held.into_iter().collect();
            let layout = std::sync::Arc::new(TileLayout::new(&g, c, std::sync::Arc::clone(&held)));
            let recycler = dirty_recycler(layout.len() * 4);
            let part = TiledSlot::some_tiles(&g, std::sync::Arc::clone(&layout));
            for &t in held.iter() {
                part.place(&g, c, t, tile_bytes(&g, c, t), &recycler).unwrap();
            }
            let part = part.finish().unwrap();
            let whole = whole_slot(&g, c);
            let row_len = extents.iter().product::<usize>() * 4;
            for row in 0..slot_shape(&g, c)[0] {
                let (mut got, mut want) = (Vec::new(), Vec::new());
                layout.copy_positions(&part, 4, row, &positions, |run| got.extend_from_slice(run)).unwrap();
                let src = &whole[row * row_len..(row + 1) * row_len];
                crate::patch::copy_positions(src, &extents, 4, &positions, &mut |run: &[u8]| want.extend_from_slice(run));
                proptest::prop_assert_eq!(got, want, "row {}", row);
            }
        }
    }
}
