//! The memory budget, decided once at build: blocks widened so each holds a batch, the
//! residency floor over every split (its arithmetic is `plan.rs`'s, shared with
//! `describe()`), the automatic budget (read-once, within a share of the memory the runtime
//! has), the checks on a budget given, what read-ahead may hold and what the buffer
//! recycler keeps. A chunk's charge when passes read it in part is the pass's
//! (`pass::part_charge_max`).

use std::sync::Arc;

use super::assembly::Assembly;
use crate::dataset::DatasetOptions;
use crate::draws::Draws;
use crate::engine::ArrayReader;
use crate::error::{Error, Result};
use crate::pass::{GatherVar, part_charge_max};
use crate::patch::Patcher;
use crate::plan::{FloorArray, PlanVar, block_bytes, residency_floor, widen_block_chunks_over};
use crate::shuffle::Split;
use crate::shuffle::chunk_anchors;
use crate::tier::ChunkTier;
use crate::units::human_bytes;

/// What a chunk holds in rows: its drawable samples, their patches and weighted copies.
pub(super) struct ChunkRows<'a> {
    pub(super) anchor_range: (u64, u64),
    pub(super) patches: u64,
    pub(super) draws: Option<&'a Draws>,
}

impl ChunkRows<'_> {
    /// The rows chunk `c` draws in every epoch (`None`: it can never draw one, so no block
    /// holds it).
    fn guaranteed(&self, c: u64, ref_spc: u64, n_samples: u64) -> Option<u64> {
        let samples = chunk_anchors(c, ref_spc, n_samples, self.anchor_range);
        let n = match self.draws {
            None if samples.is_empty() => return None,
            None => samples.end - samples.start,
            Some(d) if !samples.clone().any(|t| d.keeps(t)) => return None,
            Some(d) => samples.map(|t| d.guaranteed(t)).sum(),
        };
        Some(n * self.patches)
    }
}

/// The residency arithmetic fixed at construction.
pub(super) struct Residency {
    pub(super) block_chunks: usize,
    pub(super) first_block_chunks: usize,
    pub(super) floor_arrays: Vec<FloorArray>,
    pub(super) floor_max: u64,
    pub(super) shares_chunks: bool,
}

impl Assembly {
    /// Block size (widened so a block holds a batch of rows) and the residency floor over
    /// every view.
    pub(super) fn residency(
        &self,
        readers: &[ArrayReader],
        (plan_vars, gather_vars, patcher): (&[PlanVar], &[GatherVar], Option<&Patcher>),
        rows: &ChunkRows<'_>,
    ) -> Residency {
        let m = &self.manifest;
        let o = &self.options;
        let ref_spc = m.sample_chunk_size;
        let all_chunks = m.chunks_of(Split::All);
        // Blocks are widened on the rows each chunk draws in every epoch.
        let guaranteed: Vec<u64> =
            all_chunks.iter().filter_map(|&c| rows.guaranteed(c, ref_spc, m.n_samples)).collect();
        let widen = |asked: usize| widen_block_chunks_over(asked, o.knobs.batch_size, guaranteed.clone());
        let block_chunks = widen(o.knobs.block_chunks);
        if block_chunks > o.knobs.block_chunks {
            tracing::info!(
                requested = o.knobs.block_chunks,
                block_chunks,
                "block_chunks widened so a block holds a batch"
            );
        }
        // A smaller first block must hold a batch too, or the first batch would reach into
        // the second block and wait for its chunks after all.
        let first_block_chunks =
            o.knobs.first_block_chunks.map_or(block_chunks, |asked| widen(asked).min(block_chunks));
        let floor_arrays: Vec<FloorArray> = (0u32..)
            .zip(readers)
            .map(|(i, r)| FloorArray {
                n_chunks: r.geom.n_chunks(),
                max_slot_bytes: self.slot_bytes_max((i, r), gather_vars, patcher, rows),
                vars: plan_vars.iter().filter(|v| v.path == i).cloned().collect(),
            })
            .collect();
        let floor_max = Split::ALL
            .iter()
            .map(|&s| residency_floor(&floor_arrays, block_chunks as u64, m.chunks_of(s).len() as u64, ref_spc))
            .max()
            .unwrap_or(0);
        let shares_chunks = plan_vars.iter().any(|v| v.shares_chunks(ref_spc));
        Residency { block_chunks, first_block_chunks, floor_arrays, floor_max, shares_chunks }
    }

    /// The most one chunk of array `i` holds: all of it, or, where passes read it in part
    /// (`pass::plan_tiles`), the tiles its rows can touch. Not under a disk tier (whole
    /// chunks) nor with weights (a sample drawn several times puts more rows in a block).
    fn slot_bytes_max(
        &self,
        (i, r): (u32, &ArrayReader),
        gather_vars: &[GatherVar],
        patcher: Option<&Patcher>,
        rows: &ChunkRows<'_>,
    ) -> u64 {
        let whole = r.max_charge();
        if self.options.tier.is_some() || rows.draws.is_some() {
            return whole;
        }
        let vars: Vec<&GatherVar> = gather_vars.iter().filter(|v| v.path == i).collect();
        if vars.is_empty() {
            return whole;
        }
        let chunk_rows = r.geom.sample_chunk_size().saturating_mul(rows.patches);
        part_charge_max(r, &vars, patcher, chunk_rows).map_or(whole, |part| part.min(whole))
    }

    /// The automatic budget that keeps every chunk read once per epoch.
    ///
    /// Windows under shuffle read a chunk from several blocks. Holding it from first use to
    /// last costs about the whole split; with a persisting tier a block's chunks are let go
    /// as it drains and revived locally, so the floor is enough.
    pub(super) fn read_once_bytes(&self, r: &Residency, tier: Option<&Arc<dyn ChunkTier>>) -> u64 {
        let revivable = tier.is_some_and(|t| t.persists());
        if r.shares_chunks && self.options.knobs.shuffle && !revivable {
            let train_chunks = self.manifest.chunks_of(Split::Train).len() as u64;
            block_bytes(&r.floor_arrays, train_chunks, self.manifest.sample_chunk_size).max(r.floor_max)
        } else {
            r.floor_max
        }
    }

    /// The automatic residency: read-once, but within [`auto_budget_cap`] of the memory the
    /// runtime has; never below the floor, which every pass needs. Below read-once the plan
    /// re-reads chunks shared between blocks, and `describe()` says how much.
    pub(super) fn auto_residency(&self, read_once: u64, floor_max: u64) -> u64 {
        match auto_budget_cap(self.runtime.memory_available) {
            Some(cap) => read_once.min(cap).max(floor_max),
            None => read_once,
        }
    }

    pub(super) fn check_budget(&self, floor_max: u64) -> Result<()> {
        let Some(budget) = self.options.knobs.cache_budget_bytes else { return Ok(()) };
        if budget < floor_max {
            return Err(Error::option(
                "cache_budget_bytes",
                format!(
                    "`cache_budget_bytes`={budget} is below this run's residency floor of {floor_max} bytes ({}): two \
                     shuffle blocks of chunks must fit. Raise it, lower `block_chunks` or `batch_size`, or leave it \
                     unset to size it automatically",
                    human_bytes(floor_max)
                ),
            ));
        }
        match self.runtime.memory_available {
            Some(available) if budget > available => Err(Error::option(
                "cache_budget_bytes",
                format!(
                    "`cache_budget_bytes`={budget} ({}) is more than the {available} bytes ({}) of memory available to \
                     this process: pass at most {available}, or leave it unset to size it automatically",
                    human_bytes(budget),
                    human_bytes(available)
                ),
            )),
            _ => Ok(()),
        }
    }
}

/// The automatic budget plans within half the memory the runtime has: the other half is
/// for batches, reads in flight, the caller's model and framework.
const AUTO_BUDGET_SHARE_DIVISOR: u64 = 2;

/// The most an automatic budget may take of `memory_available` (`None`: no cap known).
pub(super) fn auto_budget_cap(memory_available: Option<u64>) -> Option<u64> {
    memory_available.map(|m| m / AUTO_BUDGET_SHARE_DIVISOR)
}

/// What read-ahead may hold: the policy's figure, or a quarter of the residency floor for a
/// store with sharded arrays (none without: only inner chunks are read ahead).
pub(crate) fn read_ahead_budget(policy: &crate::retry::ReadPolicy, sharded: bool, floor: u64) -> u64 {
    match policy.read_ahead_bytes {
        Some(b) => b,
        None if sharded => floor / 4,
        None => 0,
    }
}

/// Free buffers kept for reuse: a few chunks and a few batches (see [`Recycler`]).
pub(super) fn recycle_cap_bytes(arrays: &[FloorArray], vars: &[GatherVar], o: &DatasetOptions) -> u64 {
    let chunk = arrays.iter().map(|a| a.max_slot_bytes).max().unwrap_or(0);
    let batch: u64 = vars.iter().map(|v| v.sample_bytes as u64).sum::<u64>() * o.knobs.batch_size as u64;
    4 * chunk + (o.knobs.prefetch_depth as u64 + 2) * batch
}
