//! The rank partition and resumes as properties: over random geometries, world sizes 1–8 and
//! cut points, no sample is served twice or lost (besides the counted remainder), ranks get
//! equal shares, and each unit (so each aligned stored chunk) has one rank per segment.

use std::collections::{BTreeSet, HashMap};

use proptest::prelude::*;

use super::*;
use crate::shuffle::chunk_anchors;
// On wasm32 the tests run under wasm-bindgen-test (scripts/test-wasm.sh), whose attribute
// takes the place of libtest's `#[test]`.
#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test;

#[derive(Debug, Clone)]
struct Geo {
    chunks: Vec<u64>,
    ref_spc: u64,
    n_samples: u64,
    anchor_range: (u64, u64),
    block_chunks: usize,
    first_block_chunks: usize,
    shuffle: bool,
    seed: u64,
    epoch: u64,
    unit: u64,
    batch: usize,
}

impl Geo {
    fn spec(&self) -> OrderSpec<'_> {
        OrderSpec {
            chunk_ids: &self.chunks,
            ref_spc: self.ref_spc,
            n_samples: self.n_samples,
            anchor_range: self.anchor_range,
            block_chunks: self.block_chunks,
            first_block_chunks: self.first_block_chunks,
            shuffle: self.shuffle,
            seed: self.seed,
            epoch: self.epoch,
            split: if self.shuffle { Split::Train } else { Split::Val },
            draws: None,
        }
    }
    fn sharding(&self, rank: usize, world_size: usize) -> Sharding {
        Sharding { rank, world_size, unit_chunks: self.unit, batch_size: self.batch, node_ranks: None }
    }
    fn drawable(&self) -> BTreeSet<u64> {
        self.chunks.iter().flat_map(|&c| chunk_anchors(c, self.ref_spc, self.n_samples, self.anchor_range)).collect()
    }
    /// Every rank's pass for one job of `world` ranks resuming from `cp`.
    fn job(&self, world: usize, cp: Option<&Checkpoint>) -> Vec<RankPass> {
        (0..world).map(|r| rank_pass(&self.spec(), &self.sharding(r, world), cp).unwrap()).collect()
    }
}

fn geometry() -> impl Strategy<Value = Geo> {
    (1u64..30, 1u64..9, 0u64..3, 0u64..3, 1usize..5, any::<bool>(), 0u64..4, 1u64..4, 1usize..20, any::<u64>())
        .prop_flat_map(|(n_chunks, spc, short, lo, bc, sh, epoch, unit, batch, seed)| {
            let n_samples = (n_chunks * spc).saturating_sub(short.min(spc - 1)).max(1);
            let subset = proptest::collection::vec(any::<bool>(), n_chunks as usize);
            (Just((n_chunks, spc, n_samples, lo, bc, sh, epoch, unit, batch, seed)), subset, 0u64..3, 1usize..=bc)
        })
        .prop_map(|((_, spc, n, lo, bc, sh, epoch, unit, batch, seed), subset, hi_cut, first)| Geo {
            chunks: subset.iter().enumerate().filter(|(_, k)| **k).map(|(c, _)| c as u64).collect(),
            ref_spc: spc,
            n_samples: n,
            anchor_range: (lo.min(n), n.saturating_sub(hi_cut).max(lo.min(n))),
            block_chunks: bc,
            first_block_chunks: first,
            shuffle: sh,
            seed,
            epoch,
            unit,
            batch,
        })
}

/// The structural checks of one segment; returns what it serves, per rank.
fn check_segment(g: &Geo, passes: &[RankPass]) -> Vec<Vec<u64>> {
    let share = passes[0].order.len() + passes[0].skipped as usize;
    let mut unit_owner: HashMap<u64, usize> = HashMap::new();
    for (r, p) in passes.iter().enumerate() {
        let o = &p.order;
        assert_eq!(o.len() + p.skipped as usize, share, "rank {r}: unequal share");
        assert_eq!(p.dropped, passes[0].dropped, "rank {r}: ranks disagree on the remainder");
        assert_eq!(*o.bounds.last().unwrap(), o.len());
        assert_eq!(o.block_chunks.len(), o.n_blocks());
        for b in 0..o.n_blocks() {
            assert!(!o.block(b).is_empty(), "empty block");
            for &a in o.block(b) {
                assert!(o.block_chunks[b].contains(&(a / g.ref_spc)), "anchor {a} outside its block's chunks");
                let owner = *unit_owner.entry(a / g.ref_spc / g.unit).or_insert(r);
                assert_eq!(owner, r, "unit {} drawn by two ranks in one segment", a / g.ref_spc / g.unit);
            }
        }
        if !g.shuffle {
            assert!(o.anchors.windows(2).all(|w| w[0] < w[1]), "sequential share out of order");
        }
    }
    passes.iter().map(|p| p.order.anchors.clone()).collect()
}

fn checkpoint(g: &Geo, world: usize, position: u64, history: Vec<Cut>) -> Checkpoint {
    let s = g.spec();
    Checkpoint {
        version: CHECKPOINT_VERSION,
        seed: g.seed,
        epoch: g.epoch,
        split: s.split,
        batch_size: g.batch,
        world_size: world,
        position,
        batches: position.div_ceil(g.batch as u64),
        history,
        node_ranks: None,
        rows_per_sample: None,
        draws: None,
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn partition_and_resumes_serve_each_sample_once(
        g in geometry(), n in 1usize..=8, m in 1usize..=8, k in 1usize..=8, c1 in 0.0f64..=1.0, c2 in 0.0f64..=1.0,
    ) {
        let all = g.drawable();
        // Segment 0: disjoint equal shares that cover the split minus the remainder.
        let seg0 = g.job(n, None);
        let shares = check_segment(&g, &seg0);
        let share = shares[0].len() as u64;
        let mut served: Vec<u64> = shares.iter().flatten().copied().collect();
        prop_assert_eq!(served.len() as u64 + seg0[0].dropped, all.len() as u64);
        let set: BTreeSet<u64> = served.iter().copied().collect();
        prop_assert_eq!(set.len(), served.len(), "a sample drawn twice");
        prop_assert!(set.is_subset(&all));
        if n == 1 {
            prop_assert_eq!(&shares[0], &crate::shuffle::draw_order(&g.spec()).anchors);
        }

        // Same world, cut at p: exactly the rest of each rank's share.
        let p = (c1 * share as f64) as u64;
        let same = g.job(n, Some(&checkpoint(&g, n, p, Vec::new())));
        for (r, pass) in same.iter().enumerate() {
            prop_assert_eq!(&pass.order.anchors[..], &shares[r][p as usize..]);
        }

        // N -> M at p, then M -> K at q: what old and new runs serve, each once.
        served = shares.iter().flat_map(|s| s[..p as usize].iter().copied()).collect();
        let mut dropped = seg0[0].dropped;
        let cp1 = checkpoint(&g, n, p, Vec::new());
        let seg1 = g.job(m, Some(&cp1));
        let s1 = check_segment(&g, &seg1);
        if m == n {
            prop_assert_eq!(seg1[0].skipped, p);
        } else {
            prop_assert_eq!(seg1[0].skipped, 0);
            dropped += seg1[0].dropped;
        }
        let share1 = s1[0].len() as u64;
        let q = (c2 * share1 as f64) as u64;
        served.extend(s1.iter().flat_map(|s| s[..q as usize].iter().copied()));
        let cp2 = {
            let start = &seg1[0].start;
            Checkpoint { position: start.position + q, ..start.clone() }
        };
        let seg2 = g.job(k, Some(&cp2));
        let s2 = check_segment(&g, &seg2);
        if k != m {
            dropped += seg2[0].dropped;
        }
        served.extend(s2.iter().flatten().copied());
        let set: BTreeSet<u64> = served.iter().copied().collect();
        prop_assert_eq!(set.len(), served.len(), "a sample served twice across the cuts");
        prop_assert!(set.is_subset(&all));
        prop_assert_eq!(served.len() as u64 + dropped, all.len() as u64, "a sample lost across the cuts");
    }
}

/// Every rank's pass of a job of `world` ranks in nodes of `k`, at `epoch`.
fn affinity_job(g: &Geo, world: usize, k: usize, epoch: u64, cp: Option<&Checkpoint>) -> Vec<RankPass> {
    let g = Geo { epoch, ..g.clone() };
    (0..world)
        .map(|r| rank_pass(&g.spec(), &Sharding { node_ranks: Some(k), ..g.sharding(r, world) }, cp).unwrap())
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn node_affinity_serves_each_sample_once_and_keeps_each_nodes_units(
        g in geometry(), nodes in 1usize..=4, k in 1usize..=3, c in 0.0f64..=1.0, m in 1usize..=6,
    ) {
        let world = nodes * k;
        let all = g.drawable();
        let seg0 = affinity_job(&g, world, k, g.epoch, None);
        let shares = check_segment(&g, &seg0);
        let served: Vec<u64> = shares.iter().flatten().copied().collect();
        let set: BTreeSet<u64> = served.iter().copied().collect();
        prop_assert_eq!(set.len(), served.len(), "a sample drawn twice");
        prop_assert_eq!(served.len() as u64 + seg0[0].dropped, all.len() as u64);
        if nodes == 1 {
            // One node is the default partition.
            let plain = g.job(world, None);
            for (a, b) in seg0.iter().zip(&plain) {
                prop_assert_eq!(&a.order, &b.order);
            }
        }
        // Before equal shares cut tails, each node's units are the same in the next epoch.
        let units_of = |epoch: u64| {
            let g = Geo { epoch, ..g.clone() };
            let lists = assign_by_node(&g.spec(), &permuted_chunks(&g.spec()), g.unit, world, k);
            lists.chunks(k).map(|node| node.iter().flatten().map(|c| c / g.unit).collect()).collect::<Vec<BTreeSet<u64>>>()
        };
        prop_assert_eq!(units_of(g.epoch), units_of(g.epoch + 1));

        // A resume, same world or another, partitions segment 0 as it was and loses nothing.
        let share = shares[0].len() as u64;
        let p = (c * share as f64) as u64;
        let cp = Checkpoint { node_ranks: Some(k), ..checkpoint(&g, world, p, Vec::new()) };
        let rest = g.job(m, Some(&cp));
        let mut total: Vec<u64> = shares.iter().flat_map(|s| s[..p as usize].iter().copied()).collect();
        total.extend(check_segment(&g, &rest).iter().flatten().copied());
        let set: BTreeSet<u64> = total.iter().copied().collect();
        prop_assert_eq!(set.len(), total.len(), "a sample served twice across the cut");
        let dropped = seg0[0].dropped + if m == world { 0 } else { rest[0].dropped };
        prop_assert_eq!(total.len() as u64 + dropped, all.len() as u64, "a sample lost across the cut");
    }
}

/// A shuffled epoch 0 of `n_chunks` chunks of 8 samples (`n_samples` of them), in blocks of
/// `block_chunks`, with unit 1 and batches of 4.
fn shuffled(n_chunks: u64, n_samples: u64, block_chunks: usize, seed: u64) -> Geo {
    Geo {
        chunks: (0..n_chunks).collect(),
        ref_spc: 8,
        n_samples,
        anchor_range: (0, n_samples),
        block_chunks,
        first_block_chunks: block_chunks,
        shuffle: true,
        seed,
        epoch: 0,
        unit: 1,
        batch: 4,
    }
}

#[test]
fn a_checkpoint_with_node_ranks_that_do_not_divide_its_world_is_refused() {
    let g = shuffled(10, 80, 2, 1);
    let cp = Checkpoint { node_ranks: Some(3), ..checkpoint(&g, 4, 0, Vec::new()) };
    let e = rank_pass(&g.spec(), &g.sharding(0, 4), Some(&cp)).unwrap_err().to_string();
    assert!(e.contains("node_ranks 3 does not divide") && e.contains("world size 4"), "{e}");
    assert!(check_node_ranks(3, 4).is_err() && check_node_ranks(0, 4).is_err() && check_node_ranks(2, 4).is_ok());
}

/// Fuzzing found it: a checkpoint whose history names 300 billion ranks (3 billion here, which
/// wasm32's usize holds) allocated a list per rank while the pass was rebuilt.
#[test]
fn a_checkpoint_naming_more_ranks_than_any_job_is_refused() {
    let g = shuffled(10, 80, 2, 1);
    let cp = checkpoint(&g, 1, 6, vec![Cut { world_size: 3_000_000_000, position: 3 }]);
    let e = rank_pass(&g.spec(), &g.sharding(0, 1), Some(&cp)).unwrap_err().to_string();
    assert!(e.contains("a world of 3000000000 ranks") && e.contains("corrupted"), "{e}");
}

#[test]
fn one_rank_is_the_draw_order_and_a_checkpoint_round_trips() {
    let g = shuffled(10, 77, 3, 7);
    let one = rank_pass(&g.spec(), &g.sharding(0, 1), None).unwrap();
    assert_eq!(one.order, crate::shuffle::draw_order(&g.spec()));
    assert_eq!(one.dropped, 0);
    let cp = checkpoint(&g, 3, 8, vec![Cut { world_size: 2, position: 4 }]);
    assert_eq!(Checkpoint::from_json(&cp.to_json()).unwrap(), cp);
    assert!(cp.to_json().len() < 200, "{}", cp.to_json());
    // Three ranks over ten chunks: 4/3/3 chunks, so the remainder is rank 0's extra chunk.
    let job = g.job(3, None);
    let counts: Vec<usize> = job.iter().map(|p| p.order.len()).collect();
    assert!(counts.iter().all(|&c| c == counts[0]));
    assert_eq!(counts[0] as u64 * 3 + job[0].dropped, 77);
}

#[test]
fn a_resumed_segment_starts_with_the_smaller_first_block() {
    let g = Geo {
        chunks: (0..24).collect(),
        ref_spc: 4,
        n_samples: 96,
        anchor_range: (0, 96),
        block_chunks: 4,
        first_block_chunks: 1,
        shuffle: true,
        seed: 3,
        epoch: 1,
        unit: 1,
        batch: 4,
    };
    let fresh = g.job(2, None);
    assert!(fresh.iter().all(|p| p.order.block_chunks[0].len() == 1 && p.order.block_chunks[1].len() == 4));
    // Two ranks cut after 6 samples each, resumed on three: each new rank's first block is as
    // few chunks as hold a batch (partly drawn chunks are short), the next one 4 chunks.
    let resumed = g.job(3, Some(&checkpoint(&g, 2, 6, Vec::new())));
    for p in &resumed {
        let o = &p.order;
        let first = &o.block_chunks[0];
        let without_last = o.block(0).iter().filter(|&&a| a / 4 != *first.last().unwrap()).count();
        assert!(o.block(0).len() >= 4 && without_last < 4, "{:?}", o.block_chunks);
        assert!(first.len() < 4 && o.block_chunks[1].len() == 4, "{:?}", o.block_chunks);
    }
    let plain = Geo { first_block_chunks: 4, ..g.clone() };
    let resumed_plain = plain.job(3, Some(&checkpoint(&plain, 2, 6, Vec::new())));
    assert!(resumed_plain.iter().all(|p| p.order.block_chunks[0].len() >= 4));
}

#[test]
fn refusals_name_what_differs() {
    let g = Geo {
        chunks: (0..4).collect(),
        ref_spc: 4,
        n_samples: 16,
        anchor_range: (0, 16),
        block_chunks: 1,
        first_block_chunks: 1,
        shuffle: true,
        seed: 1,
        epoch: 2,
        unit: 1,
        batch: 4,
    };
    let err = |cp: Checkpoint| rank_pass(&g.spec(), &g.sharding(0, 2), Some(&cp)).unwrap_err().to_string();
    assert!(err(Checkpoint { seed: 9, ..checkpoint(&g, 2, 0, vec![]) }).contains("seed 9"));
    assert!(err(Checkpoint { epoch: 1, ..checkpoint(&g, 2, 0, vec![]) }).contains("epoch 1"));
    assert!(err(Checkpoint { batch_size: 3, ..checkpoint(&g, 2, 0, vec![]) }).contains("batch_size 3"));
    assert!(err(checkpoint(&g, 2, 9, vec![])).contains("past the end"));
    assert!(err(checkpoint(&g, 3, 99, vec![])).contains("past the end"));
    assert!(err(Checkpoint { version: 7, ..checkpoint(&g, 2, 0, vec![]) }).contains("version 7"));
    let bad = rank_pass(&g.spec(), &g.sharding(2, 2), None).unwrap_err().to_string();
    assert!(bad.contains("rank=2 world_size=2"), "{bad}");
    assert!(Checkpoint::from_json("{").is_err());
}

#[test]
fn units_cover_coarser_aligned_variables_only() {
    assert_eq!(unit_chunks(8, [(8, 0)]), 1);
    assert_eq!(unit_chunks(8, [(8, 0), (16, 0)]), 2);
    assert_eq!(unit_chunks(8, [(4, 0), (12, -12)]), 3);
    assert_eq!(unit_chunks(8, [(8, 0), (8, 1)]), 1, "a window cannot be aligned");
    assert_eq!(unit_chunks(6, [(4, 0)]), 2);
}
