//! The read plan of one pass, and the memory arithmetic shared with `describe()`.
//!
//! A pass walks its draw order in batches of `batch_size` anchors. Every (block, chunk key)
//! pair is a *use*: the chunk is referenced from the first batch of that block that reads it
//! to the last one. Uses are admitted in first-use order and released after their last
//! batch is gathered, so the bytes a pass holds at batch `j` are exactly the distinct keys
//! of the uses live at `j` ([`PassPlan::peak_bytes`]). Blocks are widened so any block holds
//! at least one batch ([`widen_block_chunks_over`]); then a batch meets at most two blocks, and
//! [`residency_floor`] — two blocks' worth of keys — bounds every epoch's peak. That bound
//! is each pass's reservation, so a pass can always make progress inside it: a stall is
//! impossible by construction, and the driver still proves it and raises if it ever saw one.

use std::collections::HashMap;

use crate::shuffle::DrawOrder;

/// One chunk of one array: the unit of residency.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct ChunkKey {
    /// Index into the dataset's array paths.
    pub path: u32,
    /// Chunk index along that array's sample axis.
    pub chunk: u64,
    /// Which of the chunk's inner tiles a use reads: 0 for all of them, else a fingerprint of
    /// the subset a patched or model-parallel use needs ([`PassPlan::tiles`]), so the pool
    /// never serves a chunk read for one subset to a use that needs another.
    pub part: u64,
}

/// One labelled variable as the plan sees it.
#[derive(Debug, Clone)]
pub(crate) struct PlanVar {
    /// Index into the dataset's array paths.
    pub path: u32,
    /// Window offset.
    pub offset: i64,
    /// The array's samples per chunk.
    pub spc: u64,
}

impl PlanVar {
    /// The chunk anchor `t` reads.
    pub(crate) fn key_of(&self, anchor: u64) -> ChunkKey {
        let s = (i128::from(anchor) + i128::from(self.offset)) as u64;
        ChunkKey { path: self.path, chunk: s / self.spc, part: 0 }
    }

    /// Most distinct chunks of this variable one reference chunk of `ref_spc` anchors can
    /// read: the span of `ref_spc` consecutive samples starting at the worst residue.
    pub(crate) fn keys_per_ref_chunk(&self, ref_spc: u64) -> u64 {
        let g = gcd(ref_spc, self.spc);
        let worst_start = self.spc - g + self.offset.rem_euclid(g as i64) as u64;
        (worst_start + ref_spc - 1) / self.spc + 1
    }

    /// True when one of this variable's chunks can be read by two reference chunks, so by
    /// two shuffle blocks (windows, or a coarser sample-axis chunking than the reference).
    pub(crate) fn shares_chunks(&self, ref_spc: u64) -> bool {
        !ref_spc.is_multiple_of(self.spc) || self.offset.rem_euclid(self.spc as i64) != 0
    }
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a.max(1)
}

/// One referenced chunk within one block.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Use {
    /// The chunk.
    pub key: ChunkKey,
    /// First batch that reads it in this block.
    pub first_batch: usize,
    /// Last batch that reads it in this block.
    pub last_batch: usize,
}

/// Everything the driver needs to run one pass.
#[derive(Debug, Clone, Default)]
pub(crate) struct PassPlan {
    /// Rows in draw order: anchors, or with patches rows of `per_sample` per anchor.
    pub anchors: Vec<u64>,
    /// Rows per anchor (1 without patches): row `r` reads anchor `r / per_sample`.
    pub per_sample: u64,
    /// Rows per batch (the last may be short).
    pub batch_size: usize,
    /// Uses in admission (first-use) order.
    pub uses: Vec<Use>,
    /// Per batch: the uses its rows read.
    pub batch_uses: Vec<Vec<u32>>,
    /// Per batch: the uses whose last batch it is (released once it is gathered).
    pub releases: Vec<Vec<u32>>,
    /// Per row: the use it reads, per variable (`row * n_vars + var`).
    pub row_uses: Vec<u32>,
    /// Per use, the inner tiles it reads when that is not all of them (ascending tile numbers,
    /// `ArrayGeometry::inner_coord` order); empty when every use reads whole chunks.
    pub tiles: Vec<Option<std::sync::Arc<[u64]>>>,
}

impl PassPlan {
    /// Plan a pass over `order` (rows of `per_sample` per anchor) for `vars`.
    pub(crate) fn build(order: &DrawOrder, vars: &[PlanVar], batch_size: usize, per_sample: u64) -> Self {
        let bs = batch_size.max(1);
        let per_sample = per_sample.max(1);
        let n_rows = order.len();
        let n_batches = n_rows.div_ceil(bs);
        let mut uses: Vec<Use> = Vec::new();
        let mut row_uses = vec![0u32; n_rows * vars.len()];
        let mut batch_uses: Vec<Vec<u32>> = vec![Vec::new(); n_batches];
        let mut in_block: HashMap<ChunkKey, u32> = HashMap::new();
        let mut joined: Vec<usize> = Vec::new();
        for b in 0..order.n_blocks() {
            in_block.clear();
            for r in order.bounds[b]..order.bounds[b + 1] {
                let j = r / bs;
                let t = order.anchors[r] / per_sample;
                for (vi, v) in vars.iter().enumerate() {
                    let key = v.key_of(t);
                    let u = *in_block.entry(key).or_insert_with(|| {
                        uses.push(Use { key, first_batch: j, last_batch: j });
                        joined.push(usize::MAX);
                        (uses.len() - 1) as u32
                    });
                    // Rows arrive in batch order, so a use joins each batch at most once.
                    if joined[u as usize] != j {
                        joined[u as usize] = j;
                        batch_uses[j].push(u);
                    }
                    uses[u as usize].last_batch = j;
                    row_uses[r * vars.len() + vi] = u;
                }
            }
        }
        // Admission order: by first batch; creation order (block, then row) breaks ties.
        let mut perm: Vec<u32> = (0..uses.len() as u32).collect();
        perm.sort_by_key(|&u| uses[u as usize].first_batch);
        let mut rank = vec![0u32; uses.len()];
        for (new, &old) in perm.iter().enumerate() {
            rank[old as usize] = new as u32;
        }
        let uses: Vec<Use> = perm.iter().map(|&u| uses[u as usize]).collect();
        for list in &mut batch_uses {
            for u in list.iter_mut() {
                *u = rank[*u as usize];
            }
        }
        for u in &mut row_uses {
            *u = rank[*u as usize];
        }
        let mut releases: Vec<Vec<u32>> = vec![Vec::new(); n_batches];
        for (i, u) in uses.iter().enumerate() {
            releases[u.last_batch].push(i as u32);
        }
        Self {
            anchors: order.anchors.clone(),
            per_sample,
            batch_size: bs,
            uses,
            batch_uses,
            releases,
            row_uses,
            tiles: Vec::new(),
        }
    }

    /// The tiles use `u` reads, when not all of its chunk's.
    pub(crate) fn tiles_of(&self, u: usize) -> Option<&std::sync::Arc<[u64]>> {
        self.tiles.get(u).and_then(Option::as_ref)
    }

    /// Number of batches.
    pub(crate) fn n_batches(&self) -> usize {
        self.batch_uses.len()
    }

    /// Rows of batch `j`.
    pub(crate) fn batch_rows(&self, j: usize) -> std::ops::Range<usize> {
        j * self.batch_size..((j + 1) * self.batch_size).min(self.anchors.len())
    }

    /// The most bytes this pass holds at once: distinct keys over the uses live at any batch,
    /// use `u` charging `use_bytes(u)` (the uses of one key charge alike).
    pub(crate) fn peak_bytes(&self, use_bytes: impl Fn(usize) -> u64) -> u64 {
        let mut starts: Vec<Vec<u32>> = vec![Vec::new(); self.n_batches()];
        for (i, u) in self.uses.iter().enumerate() {
            starts[u.first_batch].push(i as u32);
        }
        let mut live: HashMap<ChunkKey, u32> = HashMap::new();
        let (mut bytes, mut peak) = (0u64, 0u64);
        for (start, release) in starts.iter().zip(&self.releases) {
            for &u in start {
                let key = self.uses[u as usize].key;
                let n = live.entry(key).or_insert(0);
                if *n == 0 {
                    bytes += use_bytes(u as usize);
                }
                *n += 1;
            }
            peak = peak.max(bytes);
            for &u in release {
                let key = self.uses[u as usize].key;
                let n = live.get_mut(&key).expect("released key is live");
                *n -= 1;
                if *n == 0 {
                    bytes -= use_bytes(u as usize);
                }
            }
        }
        peak
    }
}

/// The smallest `block_chunks` at which any block of full chunks holds at least one batch,
/// over each drawable chunk's rows, or the rows it draws in every epoch when that varies
/// (weights, `draws.rs`; a chunk may guarantee none): `requested`, raised until the `k`
/// chunks with the fewest sum to `batch_size` (capped at the number of chunks).
pub(crate) fn widen_block_chunks_over(requested: usize, batch_size: usize, mut rows: Vec<u64>) -> usize {
    rows.sort_unstable();
    let mut k = 0usize;
    let mut sum = 0u64;
    while k < rows.len() && sum < batch_size as u64 {
        sum += rows[k];
        k += 1;
    }
    requested.max(k).max(1)
}

/// Per-array inputs to the memory arithmetic.
#[derive(Debug, Clone)]
pub(crate) struct FloorArray {
    /// Chunks along the array's sample axis.
    pub n_chunks: u64,
    /// Bytes of one full resident chunk.
    pub max_slot_bytes: u64,
    /// The variables (views) reading this array.
    pub vars: Vec<PlanVar>,
}

/// Bytes one block can reference: per array, its keys per reference chunk times the block's
/// chunks, capped at the array's chunk count.
pub(crate) fn block_bytes(arrays: &[FloorArray], block_chunks: u64, ref_spc: u64) -> u64 {
    arrays
        .iter()
        .map(|a| {
            let per_chunk: u64 = a.vars.iter().map(|v| v.keys_per_ref_chunk(ref_spc)).sum();
            block_chunks.saturating_mul(per_chunk).min(a.n_chunks).saturating_mul(a.max_slot_bytes)
        })
        .fold(0u64, u64::saturating_add)
}

/// One iteration's residency floor: two blocks (a batch meets at most two), capped by the
/// whole split (`split_chunks` reference chunks).
pub(crate) fn residency_floor(arrays: &[FloorArray], block_chunks: u64, split_chunks: u64, ref_spc: u64) -> u64 {
    let chunks = (2 * block_chunks).min(split_chunks.max(1));
    block_bytes(arrays, chunks, ref_spc)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shuffle::chunk_anchors;
    use crate::shuffle::{OrderSpec, Split, draw_order};

    // On wasm32 the tests run under wasm-bindgen-test (scripts/test-wasm.sh), whose attribute
    // takes the place of libtest's `#[test]`.
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    #[test]
    fn keys_per_ref_chunk() {
        let v = |offset, spc| PlanVar { path: 0, offset, spc };
        assert_eq!(v(0, 8).keys_per_ref_chunk(8), 1);
        assert_eq!(v(1, 8).keys_per_ref_chunk(8), 2);
        assert_eq!(v(0, 4).keys_per_ref_chunk(8), 2);
        assert_eq!(v(0, 8).keys_per_ref_chunk(4), 1);
        assert_eq!(v(0, 8).keys_per_ref_chunk(3), 2);
        assert_eq!(v(-8, 8).keys_per_ref_chunk(8), 1);
        assert!(!v(-8, 8).shares_chunks(8));
        assert!(v(0, 16).shares_chunks(8));
    }

    #[test]
    fn uses_releases_and_peak() {
        let chunks: Vec<u64> = (0..6).collect();
        let order = draw_order(&OrderSpec {
            chunk_ids: &chunks,
            ref_spc: 4,
            n_samples: 24,
            anchor_range: (0, 23),
            block_chunks: 2,
            first_block_chunks: 2,
            shuffle: true,
            seed: 1,
            epoch: 0,
            split: Split::Train,
            draws: None,
        });
        let vars = [PlanVar { path: 0, offset: 0, spc: 4 }, PlanVar { path: 0, offset: 1, spc: 4 }];
        let plan = PassPlan::build(&order, &vars, 3, 1);
        assert_eq!(plan.n_batches(), 8);
        // Every row's uses belong to its batch and cover its keys.
        for j in 0..plan.n_batches() {
            for r in plan.batch_rows(j) {
                for (vi, v) in vars.iter().enumerate() {
                    let u = plan.row_uses[r * 2 + vi] as usize;
                    assert_eq!(plan.uses[u].key, v.key_of(plan.anchors[r]));
                    assert!(plan.batch_uses[j].contains(&(u as u32)));
                    assert!(plan.uses[u].first_batch <= j && j <= plan.uses[u].last_batch);
                }
            }
        }
        // Admission order is by first use.
        assert!(plan.uses.windows(2).all(|w| w[0].first_batch <= w[1].first_batch));
        let floor = residency_floor(&[FloorArray { n_chunks: 6, max_slot_bytes: 10, vars: vars.to_vec() }], 2, 6, 4);
        assert!(plan.peak_bytes(|_| 10) <= floor, "{} > {floor}", plan.peak_bytes(|_| 10));
    }

    #[test]
    fn widening_holds_a_batch() {
        // Ten chunks of 8 rows; the last one short when the array is.
        let rows = |n_samples: u64| -> Vec<u64> {
            (0..10).map(|c| chunk_anchors(c, 8, n_samples, (0, n_samples))).map(|r| r.end - r.start).collect()
        };
        assert_eq!(widen_block_chunks_over(1, 32, rows(80)), 4);
        assert_eq!(widen_block_chunks_over(1, 32, rows(77)), 5); // short final chunk
        assert_eq!(widen_block_chunks_over(16, 32, rows(80)), 16);
        assert_eq!(widen_block_chunks_over(1, 1000, rows(80)), 10);
        assert_eq!(
            widen_block_chunks_over(1, 32, vec![0, 0, 40]),
            3,
            "a chunk that may draw nothing counts for nothing"
        );
    }
}
