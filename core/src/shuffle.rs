//! The epoch's draw order: a pure function of `(seed, epoch, split)`.
//!
//! Specification (ARCHITECTURE.md repeats it; every target runs this code, and any
//! reimplementation must match it bit for bit; steps 1-3 are in `random.rs`, re-exported here):
//! 1. Random streams: `h = 0; for w in words { h = splitmix64(h ^ w) }`, then a PCG64
//!    (XSL-RR 128/64, `rand_pcg::Pcg64::new(state, STREAM)`) with
//!    `state = splitmix64(h ^ 1) << 64 | splitmix64(h ^ 2)`. `words` are
//!    `[seed, epoch, split_tag, purpose, index]`.
//! 2. `below(n)`: Lemire's multiply-shift with rejection over `next_u64`.
//! 3. Shuffle: Fisher–Yates from the back: `for i in (1..len).rev() { swap(i, below(i + 1)) }`.
//! 4. Draw order: the split's chunk ids (ascending) minus chunks with no drawable anchor,
//!    permuted with purpose 1 / index 0 (train only); cut into blocks of consecutive chunks,
//!    the first of `first_block_chunks` (equal to `block_chunks` unless the caller asked for a
//!    smaller first block) and the rest of `block_chunks`; each block's anchors (chunk order,
//!    then sample order) shuffled with purpose 2 / index = block number. Sequential views skip
//!    both shuffles.

use crate::draws::Draws;
use crate::error::{Error, Result};
// Steps 1-3, and the split's word in the key: in their own module, which `draws.rs` keys its
// weighted draws with too. Named here, the cross-target rules' namespace.
pub use crate::random::{STREAM, Split, UnknownSplit, below, key, shuffle, splitmix64, stream};

/// Purpose word for the per-epoch chunk permutation.
pub const PURPOSE_CHUNKS: u64 = 1;
/// Purpose word for the in-block anchor shuffle.
pub const PURPOSE_BLOCK: u64 = 2;
/// Purpose word for `split_by_chunk(contiguous = false)`.
pub const PURPOSE_SPLIT: u64 = 3;

/// One epoch's anchors in draw order, and the shuffle blocks holding them.
///
/// Anchors are global sample indices on the reference (manifest) grid. Block `i` is
/// `anchors[bounds[i]..bounds[i + 1]]`; blocks are contiguous, gapless and non-empty.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DrawOrder {
    /// Anchor sample indices in the order they are drawn.
    pub anchors: Vec<u64>,
    /// `n_blocks + 1` offsets into `anchors`.
    pub bounds: Vec<usize>,
    /// The chunk ids of each block, in block order.
    pub block_chunks: Vec<Vec<u64>>,
}

impl DrawOrder {
    /// Number of blocks.
    pub fn n_blocks(&self) -> usize {
        self.bounds.len().saturating_sub(1)
    }
    /// The anchors of block `i`.
    pub fn block(&self, i: usize) -> &[u64] {
        &self.anchors[self.bounds[i]..self.bounds[i + 1]]
    }
    /// Total anchors.
    pub fn len(&self) -> usize {
        self.anchors.len()
    }
    /// True when nothing is drawn.
    pub fn is_empty(&self) -> bool {
        self.anchors.is_empty()
    }
}

/// What an order is built from.
#[derive(Debug, Clone)]
pub struct OrderSpec<'a> {
    /// The split's chunk ids on the reference grid (any order; sorted here).
    pub chunk_ids: &'a [u64],
    /// Reference samples per chunk.
    pub ref_spc: u64,
    /// Samples on the sample axis.
    pub n_samples: u64,
    /// Drawable anchors: `[lo, hi)` (edge anchors whose window leaves the array are dropped).
    pub anchor_range: (u64, u64),
    /// Chunks per shuffle block (already widened).
    pub block_chunks: usize,
    /// Chunks in the first block (already widened; `block_chunks` for the specified order):
    /// the first batch waits for these chunks only, at a cost in mixing `describe()` reports.
    pub first_block_chunks: usize,
    /// Shuffle (train) or walk in order.
    pub shuffle: bool,
    /// The dataset seed.
    pub seed: u64,
    /// The epoch.
    pub epoch: u64,
    /// The view.
    pub split: Split,
    /// Masks and weights (`draws.rs`): which rows of each sample this epoch draws; `None`:
    /// every row.
    pub draws: Option<DrawRows<'a>>,
}

/// A dataset's draws over its rows: sample `t`'s rows are `t * copies * patches ..`, copy `k`
/// being rows `(t * copies + k) * patches ..` (its patches, `patch.rs`).
#[derive(Debug, Clone, Copy)]
pub struct DrawRows<'a> {
    /// The mask and weights.
    pub draws: &'a Draws,
    /// Rows per copy: the patches per sample (1 without patches).
    pub patches: u64,
}

impl DrawRows<'_> {
    /// Rows per sample.
    pub fn per_sample(&self) -> u64 {
        self.draws.copies() * self.patches
    }
}

/// Drawable anchors of chunk `c` (saturating: a chunk id past the end has none, however large).
pub fn chunk_anchors(c: u64, ref_spc: u64, n_samples: u64, (lo, hi): (u64, u64)) -> std::ops::Range<u64> {
    let start = c.saturating_mul(ref_spc).max(lo);
    let end = c.saturating_add(1).saturating_mul(ref_spc).min(n_samples).min(hi);
    if start >= end { start..start } else { start..end }
}

/// Build the draw order described in the module docs (one rank: `world_size = 1`).
pub fn draw_order(spec: &OrderSpec<'_>) -> DrawOrder {
    let chunks = permuted_chunks(spec);
    blocked_order(spec, &chunks, |b| b as u64)
}

/// Steps 1–2 of the order: the split's drawable chunk ids, ascending, permuted for shuffled
/// views by [`chunk_permutation`].
pub fn permuted_chunks(spec: &OrderSpec<'_>) -> Vec<u64> {
    let drawable: Vec<u64> = spec.chunk_ids.iter().copied().filter(|&c| spec.may_draw(c)).collect();
    if spec.shuffle { chunk_permutation(&drawable, spec.seed, spec.epoch, spec.split) } else { chunk_set(&drawable) }
}

/// Step 2 on any chunk ids: the set of `chunk_ids` (ascending, each once), permuted for
/// `(seed, epoch, split)` with (purpose 1, index 0). [`permuted_chunks`] applies it to a
/// split's drawable chunks; the Python package's `chunk_permutation` to the ids it is given.
pub fn chunk_permutation(chunk_ids: &[u64], seed: u64, epoch: u64, split: Split) -> Vec<u64> {
    let mut chunks = chunk_set(chunk_ids);
    shuffle(&mut chunks, &mut stream(&key(seed, epoch, split, PURPOSE_CHUNKS, 0)));
    chunks
}

/// `ids` ascending, each once: the order is a function of the set of chunks.
fn chunk_set(ids: &[u64]) -> Vec<u64> {
    let mut ids = ids.to_vec();
    ids.sort_unstable();
    ids.dedup();
    ids
}

/// Steps 3–4: `chunks` cut into blocks (the first of `first_block_chunks`, the rest of
/// `block_chunks`), each block's anchors shuffled (for shuffled views) with (purpose 2,
/// index = `block_index(block number)`).
pub fn blocked_order(spec: &OrderSpec<'_>, chunks: &[u64], block_index: impl Fn(usize) -> u64) -> DrawOrder {
    let per_block = spec.block_chunks.max(1);
    let (first, rest) = chunks.split_at(spec.first_block_chunks.clamp(1, per_block).min(chunks.len()));
    let blocks = std::iter::once(first).filter(|b| !b.is_empty()).chain(rest.chunks(per_block));
    let mut order = DrawOrder { anchors: Vec::new(), bounds: vec![0], block_chunks: Vec::new() };
    for (b, block) in blocks.enumerate() {
        let start = order.anchors.len();
        for &c in block {
            spec.extend_rows(c, &mut order.anchors);
        }
        if spec.shuffle {
            shuffle(&mut order.anchors[start..], &mut stream(&spec.key(PURPOSE_BLOCK, block_index(b))));
        }
        order.bounds.push(order.anchors.len());
        order.block_chunks.push(block.to_vec());
    }
    order
}

impl OrderSpec<'_> {
    /// The words of a random stream of this epoch and view.
    pub fn key(&self, purpose: u64, index: u64) -> [u64; 5] {
        key(self.seed, self.epoch, self.split, purpose, index)
    }

    /// Chunk `c` has rows some epoch may draw (the mask and zero weights aside, a static
    /// property: the chunk permutation does not change with an epoch's weighted draws).
    pub fn may_draw(&self, c: u64) -> bool {
        let rows = chunk_anchors(c, self.ref_spc, self.n_samples, self.anchor_range);
        match self.draws {
            None => !rows.is_empty(),
            Some(d) => (rows.start / d.per_sample()..rows.end.div_ceil(d.per_sample())).any(|t| d.draws.keeps(t)),
        }
    }

    /// Append the rows of chunk `c` this epoch draws, ascending.
    pub fn extend_rows(&self, c: u64, out: &mut Vec<u64>) {
        let rows = chunk_anchors(c, self.ref_spc, self.n_samples, self.anchor_range);
        let Some(d) = self.draws else {
            out.extend(rows);
            return;
        };
        let per = d.per_sample();
        // The rows of a chunk are whole samples' rows (the ranges are multiples of `per`).
        for t in rows.start / per..rows.end.div_ceil(per) {
            let n = d.draws.drawn(t, self.seed, self.epoch, self.split);
            let first = t * per;
            out.extend(first..first + n * d.patches);
        }
    }
}

/// A whole number a binding was given (Python's integers are unbounded; a JS number is
/// converted first), checked to lie in `min..=u64::MAX`; else an [`Error::Config`] naming it,
/// so every binding refuses the same values in the same words.
///
/// # Errors
/// [`Error::Config`] when `value` is below `min` or above `u64::MAX`.
pub fn checked_count(name: &str, value: i128, min: u64) -> Result<u64> {
    if value < i128::from(min) {
        return Err(Error::Config(format!("{name} must be >= {min}, got {value}")));
    }
    u64::try_from(value)
        .map_err(|_| Error::Config(format!("{name} must be at most {} (2**64 - 1), got {value}", u64::MAX)))
}

/// Chunk ids a binding was given, every one checked to be `>= 0`.
///
/// # Errors
/// [`Error::Config`] naming the smallest negative id.
pub fn checked_chunk_ids(ids: &[i64]) -> Result<Vec<u64>> {
    match ids.iter().copied().min() {
        Some(min) if min < 0 => Err(Error::Config(format!("chunk ids must be >= 0, got {min}"))),
        _ => Ok(ids.iter().map(|&c| c as u64).collect()),
    }
}

/// The arguments of one epoch's order over any chunk ids, as a binding received them (the
/// Python package's `block_shuffled_order` and `sequential_order`): signed and unchecked.
/// [`OrderArgs::draw_order`] checks them and builds the order with [`draw_order`], the
/// dataset's own builder, so the free functions and the dataset cannot disagree.
#[derive(Debug, Clone, Default)]
pub struct OrderArgs<'a> {
    /// Chunk ids on the reference grid (any order, repeats allowed).
    pub chunk_ids: &'a [i64],
    /// Samples per chunk: at least 1.
    pub samples_per_chunk: i128,
    /// Samples on the sample axis: at least 0 (a short final chunk is short).
    pub n_samples: i128,
    /// Chunks per shuffle block: at least 1.
    pub block_chunks: i128,
    /// Chunks in the first block (at least 1; more than `block_chunks` is `block_chunks`);
    /// `None`: `block_chunks`.
    pub first_block_chunks: Option<i128>,
    /// Drawable anchors `[lo, hi)` (a negative bound is 0); `None`: every sample.
    pub anchor_range: Option<(i128, i128)>,
    /// `(seed, epoch, split)` for a shuffled order (seed and epoch at least 0); `None` walks
    /// the chunks in order.
    pub shuffle: Option<(i128, i128, Split)>,
}

impl OrderArgs<'_> {
    /// The checked arguments' order.
    ///
    /// # Errors
    /// [`Error::Config`] naming the first argument out of range: `samples_per_chunk < 1`,
    /// `n_samples < 0`, `block_chunks < 1`, `first_block_chunks < 1`, a negative chunk id,
    /// `seed < 0` or `epoch < 0`.
    pub fn draw_order(&self) -> Result<DrawOrder> {
        let ref_spc = checked_count("samples_per_chunk", self.samples_per_chunk, 1)?;
        let n_samples = checked_count("n_samples", self.n_samples, 0)?;
        let to_usize = |v: u64| usize::try_from(v).unwrap_or(usize::MAX);
        let block_chunks = to_usize(checked_count("block_chunks", self.block_chunks, 1)?);
        let first_block_chunks = match self.first_block_chunks {
            None => block_chunks,
            Some(first) => to_usize(checked_count("first_block_chunks", first, 1)?),
        };
        let chunk_ids = checked_chunk_ids(self.chunk_ids)?;
        let (seed, epoch, split) = match self.shuffle {
            None => (0, 0, Split::All),
            Some((seed, epoch, split)) => (checked_count("seed", seed, 0)?, checked_count("epoch", epoch, 0)?, split),
        };
        let bound = |b: i128| u64::try_from(b.max(0)).unwrap_or(u64::MAX);
        let anchor_range = self.anchor_range.map_or((0, n_samples), |(lo, hi)| (bound(lo), bound(hi)));
        Ok(draw_order(&OrderSpec {
            chunk_ids: &chunk_ids,
            ref_spc,
            n_samples,
            anchor_range,
            block_chunks,
            first_block_chunks: first_block_chunks.min(block_chunks),
            shuffle: self.shuffle.is_some(),
            seed,
            epoch,
            split,
            draws: None,
        }))
    }
}

/// How well an order mixes its samples, 0..1: the mean absolute gap in source rank between
/// consecutive draws, over `n / 3` (the expected gap of a uniform shuffle), capped at 1.
/// Equal anchors rank in draw order. Any ordered anchors (the Python package passes `i64`).
pub fn shuffle_quality<T: Ord + Copy>(anchors: &[T]) -> f64 {
    let n = anchors.len();
    if n < 2 {
        return 0.0;
    }
    let mut sorted: Vec<(T, usize)> = anchors.iter().copied().zip(0..).collect();
    sorted.sort_unstable();
    let mut rank = vec![0u64; n];
    for (r, (_, i)) in sorted.iter().enumerate() {
        rank[*i] = r as u64;
    }
    let total: f64 = rank.windows(2).map(|w| w[0].abs_diff(w[1]) as f64).sum();
    let mean = total / (n - 1) as f64;
    (mean / (n as f64 / 3.0)).min(1.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    // On wasm32 the tests run under wasm-bindgen-test (scripts/test-wasm.sh), whose attribute
    // takes the place of libtest's `#[test]`.
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    fn spec(chunks: &[u64], shuffle: bool, epoch: u64) -> OrderSpec<'_> {
        OrderSpec {
            chunk_ids: chunks,
            ref_spc: 8,
            n_samples: 77,
            anchor_range: (0, 77),
            block_chunks: 3,
            first_block_chunks: 3,
            shuffle,
            seed: 7,
            epoch,
            split: Split::Train,
            draws: None,
        }
    }

    #[test]
    fn covers_every_anchor_once_and_is_deterministic() {
        let chunks: Vec<u64> = (0..10).collect();
        let a = draw_order(&spec(&chunks, true, 0));
        let mut sorted = a.anchors.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..77).collect::<Vec<_>>());
        assert_eq!(a, draw_order(&spec(&chunks, true, 0)));
        assert_ne!(a.anchors, draw_order(&spec(&chunks, true, 1)).anchors);
        assert_eq!(a.n_blocks(), 4);
        for b in 0..a.n_blocks() {
            for &t in a.block(b) {
                assert!(a.block_chunks[b].contains(&(t / 8)));
            }
        }
    }

    /// A smaller first block takes the first chunks of the permuted list; the rest are cut
    /// from there in blocks of `block_chunks`, and every anchor is still drawn once. Asking for
    /// a first block of `block_chunks` (or more) is the specified order, unchanged.
    #[test]
    fn a_smaller_first_block_draws_its_chunks_first() {
        let chunks: Vec<u64> = (0..10).collect();
        let plain = draw_order(&spec(&chunks, true, 0));
        for asked in [3, 4, 100] {
            assert_eq!(draw_order(&OrderSpec { first_block_chunks: asked, ..spec(&chunks, true, 0) }), plain);
        }
        let permuted = permuted_chunks(&spec(&chunks, true, 0));
        let o = draw_order(&OrderSpec { first_block_chunks: 1, ..spec(&chunks, true, 0) });
        assert_eq!(o.n_blocks(), 4, "1 + 3 + 3 + 2 chunks");
        assert_eq!(o.block_chunks[0], permuted[..1]);
        assert_eq!(o.block_chunks[1], permuted[1..4]);
        assert!(o.block(0).iter().all(|&t| t / 8 == permuted[0]), "the first block is one chunk's anchors");
        let mut sorted = o.anchors.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..77).collect::<Vec<_>>());
    }

    #[test]
    fn sequential_is_in_order_and_empty_is_fine() {
        let chunks: Vec<u64> = (0..10).collect();
        let s = draw_order(&spec(&chunks, false, 3));
        assert_eq!(s.anchors, (0..77).collect::<Vec<_>>());
        let e = draw_order(&spec(&[], true, 0));
        assert!(e.is_empty());
        assert_eq!(e.n_blocks(), 0);
    }

    #[test]
    fn window_edges_drop_anchors_and_empty_chunks() {
        let chunks: Vec<u64> = (0..10).collect();
        let mut sp = spec(&chunks, true, 0);
        sp.anchor_range = (9, 70);
        let o = draw_order(&sp);
        let mut sorted = o.anchors.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (9..70).collect::<Vec<_>>());
        assert!(o.block_chunks.iter().flatten().all(|&c| c != 9));
    }

    #[test]
    fn below_is_uniform_enough_and_pinned() {
        let mut r = stream(&[1, 2, 3]);
        let mut counts = [0u32; 6];
        for _ in 0..6000 {
            counts[below(&mut r, 6) as usize] += 1;
        }
        assert!(counts.iter().all(|&c| (850..1150).contains(&c)), "{counts:?}");
        // Pinned values: a change here changes every epoch's order on every target.
        let mut r = stream(&[0, 0, 1, PURPOSE_CHUNKS, 0]);
        let mut v: Vec<u64> = (0..10).collect();
        shuffle(&mut v, &mut r);
        assert_eq!(v, PINNED_ORDER.to_vec(), "the shuffle specification changed");
    }

    const PINNED_ORDER: [u64; 10] = [1, 2, 8, 4, 3, 6, 9, 7, 5, 0];

    /// The permutation of any ids is the order's step 2: the same stream as the pinned one,
    /// a function of the set, and what `permuted_chunks` draws for a split's drawable chunks.
    #[test]
    fn chunk_permutation_is_step_two_on_the_set() {
        let ids: Vec<u64> = (0..10).collect();
        assert_eq!(chunk_permutation(&ids, 0, 0, Split::Train), PINNED_ORDER.to_vec());
        assert_eq!(chunk_permutation(&[9, 0, 3, 3, 1, 2, 4, 5, 6, 7, 8, 0], 0, 0, Split::Train), PINNED_ORDER.to_vec());
        assert_eq!(chunk_permutation(&ids, 7, 1, Split::Val), vec![7, 6, 5, 3, 8, 2, 9, 4, 1, 0]);
        assert_eq!(chunk_permutation(&[9, 3, 3, 12, 0], 1 << 63, 5, Split::All), vec![0, 12, 3, 9]);
        assert_eq!(permuted_chunks(&spec(&ids, true, 0)), chunk_permutation(&ids, 7, 0, Split::Train));
        // Chunk 9 of spec() holds anchors 72..77; past the anchor range it is dropped first.
        let clipped = OrderSpec { anchor_range: (0, 72), ..spec(&ids, true, 0) };
        assert_eq!(permuted_chunks(&clipped), chunk_permutation(&ids[..9], 7, 0, Split::Train));
        assert!(chunk_anchors(u64::MAX, 8, 77, (0, 77)).is_empty(), "no overflow past the end");
    }

    /// A binding's arguments: checked in core's words, then the dataset's own builder. The
    /// pinned orders were drawn by the Python package's former reimplementation of the spec.
    #[test]
    fn order_args_check_then_build_the_specified_order() {
        let ids = [0, 1, 2, 3, 4];
        let args = OrderArgs {
            chunk_ids: &ids,
            samples_per_chunk: 4,
            n_samples: 18,
            block_chunks: 2,
            shuffle: Some((0, 0, Split::Train)),
            ..OrderArgs::default()
        };
        let o = args.draw_order().unwrap();
        assert_eq!(o.anchors, vec![17, 5, 7, 6, 16, 4, 11, 9, 10, 12, 14, 8, 15, 13, 2, 3, 1, 0]);
        assert_eq!(o.bounds, vec![0, 6, 14, 18]);
        assert_eq!(shuffle_quality(&o.anchors), 0.794_117_647_058_823_5);
        let six = [5, 4, 3, 2, 1, 0, 0];
        let windowed = OrderArgs {
            chunk_ids: &six,
            n_samples: 22,
            block_chunks: 3,
            first_block_chunks: Some(1),
            anchor_range: Some((2, 21)),
            shuffle: Some((3, 2, Split::Train)),
            ..args.clone()
        };
        let o = windowed.draw_order().unwrap();
        assert_eq!(o.anchors, vec![4, 5, 7, 6, 2, 20, 18, 19, 16, 3, 17, 15, 13, 12, 10, 11, 14, 8, 9]);
        assert_eq!(o.bounds, vec![0, 4, 11, 19]);
        let seq = OrderArgs { chunk_ids: &[4, 1, 1, 3], anchor_range: Some((5, 17)), shuffle: None, ..args.clone() };
        let o = seq.draw_order().unwrap();
        assert_eq!((o.anchors, o.bounds), (vec![5, 6, 7, 12, 13, 14, 15, 16], vec![0, 7, 8]));
        let wide = OrderArgs { anchor_range: Some((-5, i128::MAX)), first_block_chunks: Some(99), ..args.clone() };
        assert_eq!(wide.draw_order().unwrap(), args.draw_order().unwrap());
        assert!(OrderArgs { chunk_ids: &[], ..args.clone() }.draw_order().unwrap().is_empty());

        let refused = |a: OrderArgs<'_>| a.draw_order().unwrap_err().to_string();
        assert_eq!(
            refused(OrderArgs { samples_per_chunk: 0, ..args.clone() }),
            "samples_per_chunk must be >= 1, got 0"
        );
        assert_eq!(refused(OrderArgs { n_samples: -1, ..args.clone() }), "n_samples must be >= 0, got -1");
        assert_eq!(refused(OrderArgs { block_chunks: 0, ..args.clone() }), "block_chunks must be >= 1, got 0");
        let first = OrderArgs { first_block_chunks: Some(0), ..args.clone() };
        assert_eq!(refused(first), "first_block_chunks must be >= 1, got 0");
        assert_eq!(refused(OrderArgs { chunk_ids: &[3, -2, -7], ..args.clone() }), "chunk ids must be >= 0, got -7");
        let seed = OrderArgs { shuffle: Some((-1, 0, Split::Train)), ..args.clone() };
        assert_eq!(refused(seed), "seed must be >= 0, got -1");
        let epoch = OrderArgs { shuffle: Some((0, -3, Split::Train)), ..args.clone() };
        assert_eq!(refused(epoch), "epoch must be >= 0, got -3");
        let big = OrderArgs { shuffle: Some((1 << 64, 0, Split::Train)), ..args };
        assert!(refused(big).starts_with("seed must be at most 18446744073709551615"));
        assert_eq!(checked_count("seed", i128::from(u64::MAX), 0).unwrap(), u64::MAX);
    }

    #[test]
    fn quality_ranks_any_ordered_anchors() {
        let drawn: [u64; 8] = [3, 1, 4, 1, 5, 9, 2, 6];
        let signed: Vec<i64> = drawn.iter().map(|&a| a as i64 - 4).collect();
        assert_eq!(shuffle_quality(&drawn), shuffle_quality(&signed));
        assert_eq!(shuffle_quality(&drawn), 1.0);
        assert_eq!(shuffle_quality::<u64>(&[]), 0.0);
        assert_eq!(shuffle_quality(&[7u64]), 0.0);
    }

    #[test]
    fn quality_grows_with_block_size() {
        let chunks: Vec<u64> = (0..40).collect();
        let q = |bc| {
            let mut sp = spec(&chunks, true, 0);
            sp.n_samples = 320;
            sp.anchor_range = (0, 320);
            sp.block_chunks = bc;
            shuffle_quality(&draw_order(&sp).anchors)
        };
        assert!(q(1) < q(4) && q(4) < q(40), "{} {} {}", q(1), q(4), q(40));
        assert!(shuffle_quality(&(0..100).collect::<Vec<_>>()) < 0.05);
    }
}
