//! Ranks and resumes: each rank's share of an epoch, and where a resumed pass starts.
//!
//! Specification (a cross-target contract like the draw order; ARCHITECTURE.md repeats it).
//! With `world_size = 1` and no checkpoint a rank's order is [`draw_order`], unchanged.
//! Otherwise, for `world_size = N` and rank `r`:
//! 1. **Units.** Reference chunk `c` belongs to unit `c / unit_chunks`. `unit_chunks` is the
//!    smallest count of reference chunks that every variable with a chunk-aligned offset tiles
//!    exactly ([`unit_chunks`]), so such a variable's stored chunk never spans two units and
//!    is read by one rank. A variable whose window offset is not a multiple of its chunk size
//!    reads its neighbour's chunk too: at a unit edge owned by another rank, both read it.
//! 2. **Partition.** Walk the permuted chunk list ([`permuted_chunks`]: the split's drawable
//!    chunks, permuted for shuffled views); number the units in order of first appearance;
//!    unit `i` goes to rank `i mod N`. A rank's chunk list is its units in that order, each
//!    unit's chunks in their permuted order.
//!    **Node affinity** (opt-in, `node_ranks = k`, `k` dividing `N`; ranks `n*k .. n*k+k` are
//!    node `n`, as launchers number them): the split's units, ascending, are permuted with
//!    (purpose 5, index 0) under epoch word 0, so the same in every epoch, and the unit at
//!    position `i` belongs to node `i mod (N/k)`. Each node walks the permuted chunk list
//!    keeping its own units' chunks and deals them as above to its `k` ranks (unit `j` of the
//!    node to its rank `j mod k`). A node therefore reads the same chunks in every epoch, in a
//!    new order, and from the second epoch on finds them in its own cache.
//! 3. **Blocks.** Each rank cuts its chunk list into blocks of `block_chunks` chunks (the
//!    first of `first_block_chunks`, [`blocked_order`]) and shuffles block `b`'s anchors with
//!    (purpose 2, index `b * N + r`); with one rank this is
//!    the draw order. Sequential views (val, test, all) skip the shuffles, so each rank's share
//!    is ascending.
//! 4. **Equal shares.** Each rank keeps the first `m` anchors of its order, `m` the smallest
//!    share; the others' tails (`dropped` samples, counted job-wide) are not drawn this epoch.
//!    Every rank therefore yields the same number of batches.
//! 5. **Resume.** A [`Checkpoint`] holds the epoch's segments: each segment's world size and
//!    the samples each rank consumed in it (`position`, equal on every rank). Loaded with the
//!    same world size, a rank's order is its segment order minus its first `position` anchors
//!    (so batches are cut where the uninterrupted epoch cut them). Loaded with world size `M`,
//!    the segment is cut: the remaining anchors (rank 0's tail, then rank 1's, ...) are
//!    re-partitioned. Units are numbered in order of first appearance in that sequence, unit
//!    `i` goes to rank `i mod M`, and a rank's chunks are its units' chunks, unit by unit, each
//!    in order of first appearance (ascending for sequential views), each chunk's remaining
//!    anchors in sequence order. Blocks are cut greedily: a block closes once it holds
//!    `block_chunks` chunks (the segment's first block: `first_block_chunks`, so a resumed
//!    pass starts as fast as a fresh one) and a batch of anchors. For shuffled views block
//!    `b` is shuffled with the words `[seed, epoch, split_tag, 4, segment, b * M + r]`. Step
//!    4 then applies again.
//!
//! Everything is a pure function of `(seed, epoch, split, world sizes, cut positions)`.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::shuffle::{DrawOrder, OrderSpec, Split, blocked_order, draw_order, key, permuted_chunks, shuffle, stream};

/// Purpose word of the in-block shuffle of a re-partitioned (elastic) segment.
pub(crate) const PURPOSE_RESUME: u64 = 4;

/// Purpose word of node affinity's assignment of units to nodes (epoch word 0, so it holds
/// across epochs).
pub(crate) const PURPOSE_NODES: u64 = 5;

/// The checkpoint format this build writes and reads.
pub(crate) const CHECKPOINT_VERSION: u32 = 1;

/// The most ranks a checkpoint's world sizes may name: far beyond any training job, so a
/// larger figure is an edited or corrupted file, which is refused rather than allocated for
/// (each rank of a segment gets its list while the pass is rebuilt).
const MAX_CHECKPOINT_WORLD: usize = 1 << 20;

/// A rank's place in the job, and the grain of its share.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Sharding {
    /// This process's rank, `0..world_size`.
    pub rank: usize,
    /// Processes sharing each epoch.
    pub world_size: usize,
    /// Reference chunks per unit ([`unit_chunks`]).
    pub unit_chunks: u64,
    /// Rows per batch (the elastic blocks hold at least one).
    pub batch_size: usize,
    /// Ranks per node under node affinity (step 2); `None`: every rank from the whole list.
    pub node_ranks: Option<usize>,
}

/// One finished segment of an epoch: its world size and the samples each rank consumed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Cut {
    /// Ranks in that segment.
    pub world_size: usize,
    /// Samples each rank had consumed when it was cut.
    pub position: u64,
}

/// Where a pass stands: small (no sample lists), serializable, the same on every rank.
///
/// Take it between batches ([`crate::BatchStream::checkpoint`]); start a pass from it with
/// [`crate::Dataset::resume`], with any world size.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Checkpoint {
    /// The checkpoint format's version (1); a checkpoint of another version is refused.
    pub version: u32,
    /// The dataset seed (a resume under another seed is refused).
    pub seed: u64,
    /// The epoch.
    pub epoch: u64,
    /// The view.
    pub split: Split,
    /// Rows per batch (a resume under another batch size is refused).
    pub batch_size: usize,
    /// Ranks in the current segment.
    pub world_size: usize,
    /// Samples each rank consumed in the current segment.
    pub position: u64,
    /// Batches each rank yielded in the current segment.
    pub batches: u64,
    /// Earlier segments of this epoch (elastic resumes), oldest first.
    #[serde(default)]
    pub history: Vec<Cut>,
    /// Ranks per node of the epoch's first segment under node affinity (absent without it):
    /// a resume partitions that segment as it was, whatever the dataset says now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_ranks: Option<usize>,
    /// Rows per sample when the dataset cuts patches (absent without): positions count rows,
    /// so a resume under other patch options is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rows_per_sample: Option<u64>,
    /// The fingerprint of the sample mask and weights (hex; absent without them): a resume
    /// under other draws is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub draws: Option<String>,
}

impl Checkpoint {
    /// Serialize to JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Parse from JSON.
    ///
    /// # Errors
    /// [`Error::Config`] on malformed JSON or an unknown version.
    pub fn from_json(json: &str) -> Result<Self> {
        let c: Self =
            serde_json::from_str(json).map_err(|e| Error::Config(format!("malformed checkpoint JSON: {e}")))?;
        c.check_version()?;
        Ok(c)
    }

    fn check_version(&self) -> Result<()> {
        if self.version != CHECKPOINT_VERSION {
            return Err(Error::Config(format!(
                "checkpoint version {} is not {CHECKPOINT_VERSION}, the one this build reads; resume with the \
                 version that wrote it",
                self.version
            )));
        }
        Ok(())
    }
}

/// One rank's pass: its order (already resumed), and what the stats and checkpoints need.
#[derive(Debug, Clone)]
pub(crate) struct RankPass {
    /// The anchors this pass draws, in blocks.
    pub order: DrawOrder,
    /// Samples of this segment no rank draws (job-wide; the same on every rank).
    pub dropped: u64,
    /// Samples this rank had consumed before the pass started (same-world resume).
    pub skipped: u64,
    /// Where the pass starts: history, world size, position and batches so far.
    pub start: Checkpoint,
}

/// Greatest common divisor (1 for zeros, so it can divide).
fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a.max(1)
}

/// The smallest number of reference chunks (of `ref_spc` samples) that each variable
/// `(spc, offset)` with a chunk-aligned offset tiles exactly. Variables whose offset is not a
/// multiple of their chunk size (windows reaching into a neighbour) cannot be aligned by any
/// unit and are left out.
pub(crate) fn unit_chunks(ref_spc: u64, vars: impl IntoIterator<Item = (u64, i64)>) -> u64 {
    let mut unit = 1u64;
    for (spc, offset) in vars {
        if spc == 0 || offset.rem_euclid(spc as i64) != 0 {
            continue;
        }
        let need = spc / gcd(spc, ref_spc);
        unit = (unit / gcd(unit, need)).saturating_mul(need);
    }
    unit
}

/// This rank's pass for `spec`, resumed from `resume` when given.
///
/// # Errors
/// [`Error::Config`] for a rank outside the world, or a checkpoint of another seed, epoch,
/// view or batch size, or whose positions are past the end of their segment.
pub(crate) fn rank_pass(spec: &OrderSpec<'_>, sh: &Sharding, resume: Option<&Checkpoint>) -> Result<RankPass> {
    if sh.world_size == 0 || sh.rank >= sh.world_size {
        return Err(Error::Config(format!(
            "rank must be in 0..world_size, got rank={} world_size={}",
            sh.rank, sh.world_size
        )));
    }
    let fresh = Checkpoint {
        version: CHECKPOINT_VERSION,
        seed: spec.seed,
        epoch: spec.epoch,
        split: spec.split,
        batch_size: sh.batch_size,
        world_size: sh.world_size,
        position: 0,
        batches: 0,
        history: Vec::new(),
        node_ranks: sh.node_ranks,
        rows_per_sample: None,
        draws: None,
    };
    let start = match resume {
        None => fresh,
        Some(c) => {
            check_matches(c, &fresh)?;
            if c.world_size == sh.world_size {
                c.clone()
            } else {
                let mut history = c.history.clone();
                history.push(Cut { world_size: c.world_size, position: c.position });
                Checkpoint { history, node_ranks: c.node_ranks, ..fresh }
            }
        }
    };
    if sh.world_size == 1 && start.history.is_empty() {
        let mut order = draw_order(spec);
        skip(&mut order, start.position, spec.ref_spc)?;
        return Ok(RankPass { order, dropped: 0, skipped: start.position, start });
    }
    let first_world = start.history.first().map_or(sh.world_size, |c| c.world_size);
    let (mut orders, mut dropped) = partition(spec, sh.unit_chunks, first_world, start.node_ranks);
    for (s, cut) in start.history.iter().enumerate() {
        let remaining = tails(&orders, cut.position)?;
        let world = start.history.get(s + 1).map_or(sh.world_size, |c| c.world_size);
        (orders, dropped) = repartition(spec, sh, &remaining, world, s as u64 + 1);
    }
    let mut order = orders.swap_remove(sh.rank);
    skip(&mut order, start.position, spec.ref_spc)?;
    Ok(RankPass { order, dropped, skipped: start.position, start })
}

/// A checkpoint resumes only the epoch and view it was taken in, under the same seed and
/// batch size.
fn check_matches(c: &Checkpoint, now: &Checkpoint) -> Result<()> {
    c.check_version()?;
    let mismatch = |what: &str, theirs: String, ours: String| {
        Err(Error::Config(format!(
            "the checkpoint was taken with {what} {theirs} but this pass has {what} {ours}; open the dataset with the \
             checkpoint's {what} (or set_epoch to it) before resuming"
        )))
    };
    if c.seed != now.seed {
        return mismatch("seed", c.seed.to_string(), now.seed.to_string());
    }
    if c.epoch != now.epoch {
        return mismatch("epoch", c.epoch.to_string(), now.epoch.to_string());
    }
    if c.split != now.split {
        return mismatch("split", c.split.to_string(), now.split.to_string());
    }
    if c.batch_size != now.batch_size {
        return mismatch("batch_size", c.batch_size.to_string(), now.batch_size.to_string());
    }
    if c.world_size == 0 || c.history.iter().any(|h| h.world_size == 0) {
        return Err(Error::Config("a checkpoint's world sizes must be at least 1".into()));
    }
    let worlds = std::iter::once(c.world_size).chain(c.history.iter().map(|h| h.world_size));
    if let Some(w) = worlds.filter(|&w| w > MAX_CHECKPOINT_WORLD).max() {
        return Err(Error::Config(format!(
            "the checkpoint names a world of {w} ranks, more than the {MAX_CHECKPOINT_WORLD} any job has: it was \
             edited or corrupted; resume from another checkpoint"
        )));
    }
    let first_world = c.history.first().map_or(c.world_size, |h| h.world_size);
    if let Some(k) = c.node_ranks.filter(|&k| k == 0 || !first_world.is_multiple_of(k)) {
        return Err(Error::Config(format!(
            "the checkpoint's node_ranks {k} does not divide its first segment's world size {first_world}: it was \
             edited or corrupted; resume from another checkpoint"
        )));
    }
    Ok(())
}

/// Node affinity needs whole nodes: `node_ranks` at least 1 and dividing `world_size`.
///
/// # Errors
/// [`Error::Config`] saying what to pass.
pub(crate) fn check_node_ranks(node_ranks: usize, world_size: usize) -> Result<()> {
    if node_ranks == 0 || !world_size.is_multiple_of(node_ranks) {
        return Err(Error::option(
            "node_ranks",
            format!(
                "node affinity needs ranks per node (`node_ranks`, the launcher's LOCAL_WORLD_SIZE) that divide \
                 `world_size`, got {node_ranks} ranks per node and world_size={world_size}; pass the launcher's \
                 LOCAL_WORLD_SIZE, or turn node affinity off"
            ),
        ));
    }
    Ok(())
}

/// Steps 2–4 of the module spec: every rank's order for segment 0, and the samples dropped.
/// `node_ranks`: node affinity's ranks per node (checked to divide `world` by the caller).
pub(crate) fn partition(
    spec: &OrderSpec<'_>,
    unit_chunks: u64,
    world: usize,
    node_ranks: Option<usize>,
) -> (Vec<DrawOrder>, u64) {
    if world == 1 {
        return (vec![draw_order(spec)], 0);
    }
    let chunks = permuted_chunks(spec);
    let lists = match node_ranks.filter(|&k| k > 0 && k < world && world.is_multiple_of(k)) {
        Some(k) => assign_by_node(spec, &chunks, unit_chunks.max(1), world, k),
        None => assign_units(&chunks, unit_chunks.max(1), world),
    };
    let mut orders: Vec<DrawOrder> =
        lists.iter().enumerate().map(|(r, list)| blocked_order(spec, list, |b| (b * world + r) as u64)).collect();
    let dropped = equalize(&mut orders, spec.ref_spc);
    (orders, dropped)
}

/// Units of `chunks` in order of first appearance, dealt round-robin; each rank's chunk list
/// is its units' chunks, unit by unit, each in its order in `chunks`.
fn assign_units(chunks: &[u64], unit_chunks: u64, world: usize) -> Vec<Vec<u64>> {
    let mut unit_index: HashMap<u64, usize> = HashMap::new();
    let mut units: Vec<Vec<u64>> = Vec::new();
    for &c in chunks {
        let i = *unit_index.entry(c / unit_chunks).or_insert_with(|| {
            units.push(Vec::new());
            units.len() - 1
        });
        units[i].push(c);
    }
    let mut lists = vec![Vec::new(); world];
    for (i, unit) in units.into_iter().enumerate() {
        lists[i % world].extend(unit);
    }
    lists
}

/// Step 2 under node affinity: each node's units, fixed across epochs, dealt to its ranks;
/// lists in rank order (node-major).
fn assign_by_node(spec: &OrderSpec<'_>, chunks: &[u64], unit_chunks: u64, world: usize, k: usize) -> Vec<Vec<u64>> {
    let nodes = world / k;
    let mut units: Vec<u64> = chunks.iter().map(|c| c / unit_chunks).collect();
    units.sort_unstable();
    units.dedup();
    // Permuted, not cut in runs: a node of a time series then holds every period, not one.
    shuffle(&mut units, &mut stream(&key(spec.seed, 0, spec.split, PURPOSE_NODES, 0)));
    let node_of: HashMap<u64, usize> = units.into_iter().enumerate().map(|(i, u)| (u, i % nodes)).collect();
    let mut per_node: Vec<Vec<u64>> = vec![Vec::new(); nodes];
    for &c in chunks {
        per_node[node_of[&(c / unit_chunks)]].push(c);
    }
    per_node.iter().flat_map(|own| assign_units(own, unit_chunks, k)).collect()
}

/// Step 4: truncate every order to the shortest; the samples cut off, summed.
fn equalize(orders: &mut [DrawOrder], ref_spc: u64) -> u64 {
    let m = orders.iter().map(DrawOrder::len).min().unwrap_or(0);
    let mut dropped = 0u64;
    for o in orders.iter_mut() {
        dropped += (o.len() - m) as u64;
        truncate(o, m, ref_spc);
    }
    dropped
}

/// Keep the first `m` anchors, dropping emptied blocks and chunks no longer drawn.
fn truncate(o: &mut DrawOrder, m: usize, ref_spc: u64) {
    if m >= o.len() {
        return;
    }
    o.anchors.truncate(m);
    let keep = o.bounds.iter().take_while(|&&b| b < m).count();
    o.bounds.truncate(keep);
    o.bounds.push(m);
    o.block_chunks.truncate(keep);
    retain_drawn_chunks(o, ref_spc);
}

/// Drop the first `k` anchors (a same-world resume), with the blocks and chunks they empty.
fn skip(o: &mut DrawOrder, k: u64, ref_spc: u64) -> Result<()> {
    let k = usize::try_from(k).unwrap_or(usize::MAX);
    if k > o.len() {
        return Err(Error::Config(format!(
            "the checkpoint's position {k} is past the end of this rank's share of {} samples; was it saved by \
             another dataset or split?",
            o.len()
        )));
    }
    if k == 0 {
        return Ok(());
    }
    o.anchors.drain(..k);
    // Blocks whose every anchor was consumed go; the block the cut falls in starts at 0.
    let consumed = o.bounds[1..].iter().take_while(|&&b| b <= k).count();
    o.block_chunks.drain(..consumed);
    o.bounds.drain(..consumed);
    for b in &mut o.bounds {
        *b = b.saturating_sub(k);
    }
    retain_drawn_chunks(o, ref_spc);
    Ok(())
}

/// Each block lists only the chunks its anchors still read (after a cut at either end).
fn retain_drawn_chunks(o: &mut DrawOrder, ref_spc: u64) {
    for b in 0..o.n_blocks() {
        let drawn: std::collections::HashSet<u64> = o.block(b).iter().map(|&a| a / ref_spc).collect();
        o.block_chunks[b].retain(|c| drawn.contains(c));
    }
}

/// The anchors no rank consumed by `position`: rank 0's tail, then rank 1's, ...
fn tails(orders: &[DrawOrder], position: u64) -> Result<Vec<u64>> {
    let p = usize::try_from(position).unwrap_or(usize::MAX);
    let share = orders.first().map_or(0, DrawOrder::len);
    if p > share {
        return Err(Error::Config(format!(
            "the checkpoint's position {p} is past the end of the ranks' shares of {share} samples; was it saved by \
             another dataset or split?"
        )));
    }
    Ok(orders.iter().flat_map(|o| o.anchors[p..].iter().copied()).collect())
}

/// Step 5: re-partition `remaining` over `world` ranks for segment `segment`.
fn repartition(
    spec: &OrderSpec<'_>,
    sh: &Sharding,
    remaining: &[u64],
    world: usize,
    segment: u64,
) -> (Vec<DrawOrder>, u64) {
    let ref_spc = spec.ref_spc.max(1);
    let mut by_chunk: HashMap<u64, Vec<u64>> = HashMap::new();
    let mut chunks: Vec<u64> = Vec::new();
    for &a in remaining {
        let c = a / ref_spc;
        by_chunk
            .entry(c)
            .or_insert_with(|| {
                chunks.push(c);
                Vec::new()
            })
            .push(a);
    }
    let mut lists = assign_units(&chunks, sh.unit_chunks.max(1), world);
    let mut orders = Vec::with_capacity(world);
    for (r, list) in lists.iter_mut().enumerate() {
        if !spec.shuffle {
            list.sort_unstable();
        }
        let per_block = spec.block_chunks.max(1);
        let sizes = BlockSizes { first: spec.first_block_chunks.clamp(1, per_block), rest: per_block };
        let mut o = greedy_blocks(list, &by_chunk, sizes, sh.batch_size.max(1));
        if spec.shuffle {
            for b in 0..o.n_blocks() {
                let words = [spec.seed, spec.epoch, spec.split.tag(), PURPOSE_RESUME, segment, (b * world + r) as u64];
                let (lo, hi) = (o.bounds[b], o.bounds[b + 1]);
                shuffle(&mut o.anchors[lo..hi], &mut stream(&words));
            }
        }
        orders.push(o);
    }
    let dropped = equalize(&mut orders, ref_spc);
    (orders, dropped)
}

/// Chunks per block of a re-partitioned segment: its first block, and every later one.
#[derive(Debug, Clone, Copy)]
struct BlockSizes {
    first: usize,
    rest: usize,
}

/// Blocks over `chunks`, each closed once it holds its chunk count (`sizes`) and `batch`
/// anchors (partly consumed chunks are short, so counting chunks alone could leave a block
/// without a batch, and a batch could then meet more than two blocks).
fn greedy_blocks(chunks: &[u64], anchors: &HashMap<u64, Vec<u64>>, sizes: BlockSizes, batch: usize) -> DrawOrder {
    let mut o = DrawOrder { anchors: Vec::new(), bounds: vec![0], block_chunks: Vec::new() };
    let mut current: Vec<u64> = Vec::new();
    let mut start = 0usize;
    for &c in chunks {
        o.anchors.extend_from_slice(&anchors[&c]);
        current.push(c);
        let want = if o.block_chunks.is_empty() { sizes.first } else { sizes.rest };
        if current.len() >= want && o.anchors.len() - start >= batch {
            o.bounds.push(o.anchors.len());
            o.block_chunks.push(std::mem::take(&mut current));
            start = o.anchors.len();
        }
    }
    if !current.is_empty() {
        o.bounds.push(o.anchors.len());
        o.block_chunks.push(current);
    }
    o
}

#[cfg(test)]
mod tests;
