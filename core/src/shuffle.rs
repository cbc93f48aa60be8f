//! The epoch's draw order: a pure function of `(seed, epoch, split)`.
//!
//! Specification (ARCHITECTURE.md repeats it; every target runs this code, and any
//! reimplementation must match it bit for bit):
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

use rand_core::Rng;
use rand_pcg::Pcg64;

/// The PCG stream constant (PCG's default increment).
pub const STREAM: u128 = 0x0a02_bdbf_7bb3_c0a7_ac28_fa16_a64a_bf96;

/// Purpose word for the per-epoch chunk permutation.
pub const PURPOSE_CHUNKS: u64 = 1;
/// Purpose word for the in-block anchor shuffle.
pub const PURPOSE_BLOCK: u64 = 2;
/// Purpose word for `split_by_chunk(contiguous = false)`.
pub const PURPOSE_SPLIT: u64 = 3;

/// SplitMix64's output function (Steele, Lea, Flood 2014).
pub fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A random stream keyed by `words`.
pub fn stream(words: &[u64]) -> Pcg64 {
    let h = words.iter().fold(0u64, |h, &w| splitmix64(h ^ w));
    let state = (u128::from(splitmix64(h ^ 1)) << 64) | u128::from(splitmix64(h ^ 2));
    Pcg64::new(state, STREAM)
}

/// A uniform integer in `0..n` (`n >= 1`), by Lemire's multiply-shift with rejection.
// Hand-written rather than `rand::Rng::random_range`: rand reserves the right to change its
// sampling algorithm between versions, and this order is a written, cross-target contract.
pub fn below(rng: &mut Pcg64, n: u64) -> u64 {
    debug_assert!(n > 0);
    let mut m = u128::from(rng.next_u64()) * u128::from(n);
    if (m as u64) < n {
        let threshold = n.wrapping_neg() % n;
        while (m as u64) < threshold {
            m = u128::from(rng.next_u64()) * u128::from(n);
        }
    }
    (m >> 64) as u64
}

/// Fisher–Yates, from the back.
pub fn shuffle<T>(items: &mut [T], rng: &mut Pcg64) {
    for i in (1..items.len()).rev() {
        let j = below(rng, i as u64 + 1) as usize;
        items.swap(i, j);
    }
}

/// Which view an order is for; part of the random key so splits draw independent streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Split {
    /// Shuffled when the dataset shuffles.
    Train,
    /// Always sequential.
    Val,
    /// Always sequential.
    Test,
    /// The union of the three, sequential.
    All,
}

impl Split {
    /// Every view, the three splits first.
    pub const ALL: [Split; 4] = [Split::Train, Split::Val, Split::Test, Split::All];

    /// The split's word in the random key.
    pub fn tag(self) -> u64 {
        match self {
            Self::Train => 1,
            Self::Val => 2,
            Self::Test => 3,
            Self::All => 4,
        }
    }
    /// Lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Train => "train",
            Self::Val => "val",
            Self::Test => "test",
            Self::All => "all",
        }
    }
}

/// The split word was not one of `train`, `val`, `test`, `all`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown split {0:?}; use \"train\", \"val\", \"test\" or \"all\"")]
pub struct UnknownSplit(pub String);

/// The one parser of split names (the CLI, Python and JS all pass strings).
impl std::str::FromStr for Split {
    type Err = UnknownSplit;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Split::ALL.into_iter().find(|x| x.name() == s).ok_or_else(|| UnknownSplit(s.to_string()))
    }
}

impl std::fmt::Display for Split {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

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
}

/// Drawable anchors of chunk `c`.
pub fn chunk_anchors(c: u64, ref_spc: u64, n_samples: u64, (lo, hi): (u64, u64)) -> std::ops::Range<u64> {
    let start = (c * ref_spc).max(lo);
    let end = ((c + 1) * ref_spc).min(n_samples).min(hi);
    if start >= end { start..start } else { start..end }
}

/// Build the draw order described in the module docs (one rank: `world_size = 1`).
pub fn draw_order(spec: &OrderSpec<'_>) -> DrawOrder {
    let chunks = permuted_chunks(spec);
    blocked_order(spec, &chunks, |b| b as u64)
}

/// Steps 1–2 of the order: the split's drawable chunk ids, ascending, permuted for shuffled
/// views with (purpose 1, index 0).
pub fn permuted_chunks(spec: &OrderSpec<'_>) -> Vec<u64> {
    let mut chunks: Vec<u64> = spec.chunk_ids.to_vec();
    chunks.sort_unstable();
    chunks.dedup();
    chunks.retain(|&c| !chunk_anchors(c, spec.ref_spc, spec.n_samples, spec.anchor_range).is_empty());
    if spec.shuffle {
        shuffle(&mut chunks, &mut stream(&spec.key(PURPOSE_CHUNKS, 0)));
    }
    chunks
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
            order.anchors.extend(chunk_anchors(c, spec.ref_spc, spec.n_samples, spec.anchor_range));
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
        [self.seed, self.epoch, self.split.tag(), purpose, index]
    }
}

/// How well an order mixes its samples, 0..1: the mean absolute gap in source rank between
/// consecutive draws, over `n / 3` (the expected gap of a uniform shuffle), capped at 1.
pub fn shuffle_quality(anchors: &[u64]) -> f64 {
    let n = anchors.len();
    if n < 2 {
        return 0.0;
    }
    let mut sorted: Vec<(u64, usize)> = anchors.iter().copied().zip(0..).collect();
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
