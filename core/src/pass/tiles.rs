//! Reading chunks in part: which inner tiles each use of a chunk reads where its rows need
//! only part of it ([`plan_tiles`]), and what such a chunk holds at most, which the
//! residency floor counts ([`part_charge_max`]).

use super::Patching;
use super::vars::GatherVar;
use crate::engine::{ArrayReader, Engine};
use crate::patch::Patcher;
use crate::plan::PassPlan;

/// A chunk of more tiles than this is always read whole (planning its tiles would cost more
/// than it saves).
const MAX_PLANNED_TILES: u64 = 1 << 16;

/// Whether passes read `reader`'s chunks in part where rows need only part of them: not
/// with a chunk transform (its output need not match the tiles), and only for a chunk of
/// several tiles, not too many. (A disk tier, which keeps whole chunks, rules it out for
/// the whole dataset: `plan_tiles`.)
fn reads_in_part(reader: &ArrayReader) -> bool {
    reader.transforms.is_empty() && (2..=MAX_PLANNED_TILES).contains(&reader.geom.n_tiles())
}

/// What one use of a chunk of `reader` can hold at most when passes read it in part (`None`
/// when they read whole chunks): the tiles `rows` rows of each of `vars` (its variables) can
/// touch, at most all. The residency floor counts this instead of the whole chunk, so a
/// patched dataset's budget counts the tiles its patches read.
pub(crate) fn part_charge_max(
    reader: &ArrayReader,
    vars: &[&GatherVar],
    patcher: Option<&Patcher>,
    rows: u64,
) -> Option<u64> {
    if !reads_in_part(reader) {
        return None;
    }
    let g = &reader.geom;
    let zeros = vec![0u64; patcher.map_or(0, |p| p.size.len())];
    let mut tiles = 0u64;
    for v in vars {
        for (dims, _, size) in v.row_boxes(patcher.map(|p| (zeros.as_slice(), p))) {
            if dims.is_empty() {
                return None;
            }
            tiles = tiles.saturating_add(rows.saturating_mul(g.most_tiles_in_box(&dims, &size)));
        }
    }
    let region = g.sample_chunk_size().min(g.n_samples()) * g.inner_tile().iter().product::<u64>();
    Some(tiles.min(g.n_tiles()).saturating_mul(region).saturating_mul(g.dtype.size() as u64))
}

/// What a use reads of its chunk: nothing asked yet, all of it, or these tiles (ascending,
/// once each after `settle`).
enum Touched {
    Unasked,
    Whole,
    Tiles { tiles: Vec<u64>, settled: usize },
}

impl Touched {
    /// Add the tiles of one row's box; the list is sorted and deduplicated whenever it has
    /// doubled, so it stays within twice the distinct tiles.
    fn add(&mut self, geom: &crate::geometry::ArrayGeometry, row_box: (&[usize], &[u64], &[u64])) {
        if row_box.0.is_empty() {
            *self = Self::Whole;
            return;
        }
        if let Self::Unasked = self {
            *self = Self::Tiles { tiles: Vec::new(), settled: 0 };
        }
        if let Self::Tiles { tiles, settled } = self {
            geom.tiles_in_box(row_box, |t| tiles.push(t));
            if tiles.len() > 2 * (*settled).max(64) {
                tiles.sort_unstable();
                tiles.dedup();
                *settled = tiles.len();
            }
        }
    }

    /// The tiles, when not every tile of a chunk of `n_tiles`.
    fn into_part(self, n_tiles: u64) -> Option<std::sync::Arc<[u64]>> {
        let Self::Tiles { mut tiles, .. } = self else { return None };
        tiles.sort_unstable();
        tiles.dedup();
        (!tiles.is_empty() && (tiles.len() as u64) < n_tiles).then(|| tiles.into())
    }
}

/// Restrict each use of `plan` to the inner tiles its rows' boxes touch (patches, or a
/// rank's part of each row), where that is not all of them: the load then fetches and
/// decodes those tiles only, holds only their regions (`assemble::TileLayout`), and each
/// use's key gets the set's fingerprint ([`ChunkKey::part`]). Each use is one chunk in one
/// block, so every tile is still read at most once per block. Arrays that `reads_in_part`
/// refuses, and every array under a disk tier (which keeps whole chunks for later epochs),
/// are read whole.
pub(crate) fn plan_tiles(
    plan: &mut PassPlan,
    vars: &[GatherVar],
    engine: &Engine,
    patching: Option<&Patching>,
    epoch: u64,
) {
    let whole_rows = vars.iter().all(|v| v.part.is_none() && v.region.is_empty() && v.picks.is_empty());
    if (patching.is_none() && whole_rows) || engine.tier.is_some() {
        return;
    }
    let eligible: Vec<bool> = vars.iter().map(|v| reads_in_part(&engine.arrays[v.path as usize])).collect();
    if !eligible.contains(&true) {
        return;
    }
    let mut touched: Vec<Touched> = (0..plan.uses.len()).map(|_| Touched::Unasked).collect();
    let mut origin = Vec::new();
    for (r, &row) in plan.anchors.iter().enumerate() {
        origin.clear();
        if let Some(p) = patching {
            p.patcher.origin(row, p.seed, epoch, p.split, &mut origin);
        }
        for (vi, v) in vars.iter().enumerate() {
            let u = plan.row_uses[r * vars.len() + vi] as usize;
            if !eligible[vi] {
                touched[u] = Touched::Whole;
                continue;
            }
            for (dims, o, size) in v.row_boxes(patching.map(|p| (origin.as_slice(), p.patcher.as_ref()))) {
                touched[u].add(&engine.arrays[v.path as usize].geom, (&dims, &o, &size));
            }
        }
    }
    plan.tiles = (touched.into_iter().zip(&plan.uses))
        .map(|(t, use_)| t.into_part(engine.arrays[use_.key.path as usize].geom.n_tiles()))
        .collect();
    for (u, tiles) in plan.tiles.iter().enumerate() {
        if let Some(t) = tiles {
            plan.uses[u].key.part = fingerprint(t);
        }
    }
}

/// A tile set's fingerprint, never 0 (0 is the whole chunk).
fn fingerprint(tiles: &[u64]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    tiles.hash(&mut h);
    h.finish().max(1)
}
