//! [`Dataset::describe`]: the static report, built in named steps from the same numbers the
//! engine runs on (floors, gathers in flight, the draw order), so it cannot drift from them.

use std::collections::HashSet;

use super::{Dataset, max_batches_ahead};
use crate::describe::note_code as code;
use crate::describe::{ConfigReport, DatasetReport, MemoryReport, Note, Severity, VariableReport};
use crate::engine::ArrayReader;
use crate::error::{Error, Result};
use crate::geometry::ArrayGeometry;
use crate::plan::{PassPlan, block_bytes};
use crate::shuffle::{Split, chunk_anchors, shuffle_quality};
use crate::units::human_bytes;

/// Process baseline (interpreter, allocator arenas, code) added to the accounted bytes. No
/// share is added for allocator slack: the large buffers are recycled by the engine (see
/// `Recycler`), and the measured peaks sit below the accounted bytes (docs/lab/benchmarks.md).
const PROCESS_BASELINE_BYTES: u64 = 64 << 20;
/// A sample shorter than this makes the gather a loop of tiny copies.
const SHORT_GATHER_RUN_BYTES: u64 = 1024;
/// A single stored object per chunk larger than this makes each read in flight costly.
const FAT_CHUNK_BYTES: u64 = 64 << 20;
/// Above this, edge padding is worth a note.
const RAGGED_NOTE_THRESHOLD: f64 = 1.001;

impl Dataset {
    /// What this dataset will do, from geometry and configuration only (no store access).
    /// `iterations` is how many passes will run at once (`zip(train, val)` is two).
    ///
    /// # Errors
    /// [`Error::Config`] when `iterations` is 0.
    pub fn describe(&self, iterations: usize) -> Result<DatasetReport> {
        if iterations == 0 {
            return Err(Error::Config("iterations must be >= 1, got 0".into()));
        }
        let mut notes = Vec::new();
        let variables = self.variable_reports(&mut notes);
        notes.extend(self.dataset_notes());
        let memory = self.memory_report(iterations, &mut notes);
        Ok(DatasetReport { variables, config: self.config_report(), memory, notes })
    }

    /// An upper bound on the chunk bytes one train epoch fetches again when residency is
    /// below read-once: each use of a chunk by a block after its first may miss.
    fn reread_bytes_max(&self) -> u64 {
        let i = &self.inner;
        let Ok(pass) = self.rank_pass(Split::Train, self.epoch(), None) else { return 0 };
        let plan = PassPlan::build(&pass.order, &i.plan_vars, i.options.knobs.batch_size, self.rows_per_sample());
        let mut seen = HashSet::new();
        plan.uses
            .iter()
            .filter(|u| !seen.insert(u.key))
            .map(|u| i.engine.arrays[u.key.path as usize].charge(u.key.chunk))
            .sum()
    }

    fn reader_of(&self, path: &str) -> &ArrayReader {
        let arrays = &self.inner.engine.arrays;
        // Every variable has a reader (built with it), so the fallback is never taken.
        arrays.iter().find(|r| r.geom.path == path).unwrap_or(&arrays[0])
    }

    /// Each variable's geometry after its chunk transforms, label first: what its batches
    /// hold (`ArrayGeometry::transformed`). The Python package's `view.geometries`.
    ///
    /// # Errors
    /// [`Error::Geometry`] when a transform's declared output makes no geometry (a rank
    /// below the sample axis, a zero extent).
    pub fn output_geometries(&self) -> Result<Vec<(String, ArrayGeometry)>> {
        self.inner
            .vars
            .iter()
            .map(|v| {
                let g = self.output_geometry(&v.geometry);
                g.validate().map(|()| (v.label.clone(), g))
            })
            .collect()
    }

    /// `g` (a variable's geometry) after its array's chunk transforms.
    fn output_geometry(&self, g: &ArrayGeometry) -> ArrayGeometry {
        let r = self.reader_of(&g.path);
        let inner: Vec<u64> = r.out_inner.iter().map(|&d| d as u64).collect();
        g.transformed(&inner, r.out_dtype)
    }

    /// One report per variable, with the notes its geometry calls for.
    fn variable_reports(&self, notes: &mut Vec<Note>) -> Vec<VariableReport> {
        let mut out = Vec::new();
        for v in &self.inner.vars {
            let g = &v.geometry;
            let r = self.reader_of(&g.path);
            let output = self.output_geometry(g);
            let vr = VariableReport {
                label: v.label.clone(),
                path: g.path.clone(),
                dtype: g.dtype.to_string(),
                shape: g.shape.clone(),
                chunks: g.tile.clone(),
                shard: g.shard.clone(),
                codecs: r.zarr.codec_names(),
                sample_axis: g.sample_axis,
                sample_chunk_size: g.sample_chunk_size(),
                n_samples: g.n_samples(),
                n_chunks: g.n_chunks(),
                offset: g.offset,
                inner_shape: g.inner_shape(),
                inner_chunks: g.inner_tile(),
                stored_chunks_per_chunk: g.n_tiles(),
                stored_chunk_bytes: g.tile_bytes(),
                slot_bytes: r.max_charge(),
                ragged_multiplier: g.ragged_multiplier(),
                gather_run_bytes: r.out_sample_bytes(),
                output_inner_shape: r.out_inner.clone(),
                output_dtype: r.out_dtype.to_string(),
                logical_chunk_bytes: g.sample_chunk_size().min(g.n_samples()) * r.out_sample_bytes(),
                output_shape: output.shape,
                output_chunks: output.tile,
            };
            notes.extend(variable_notes(&vr));
            out.push(vr);
        }
        out
    }

    /// Samples a split can draw as window anchors.
    fn drawable(&self, split: Split) -> u64 {
        let i = &self.inner;
        let spc = i.manifest.sample_chunk_size;
        i.manifest
            .chunks_of(split)
            .iter()
            .map(|&c| {
                let r = chunk_anchors(c, spc, i.manifest.n_samples, i.anchor_range);
                r.end - r.start
            })
            .sum()
    }

    /// Findings about splits, the disk tier and widened blocks.
    fn dataset_notes(&self) -> Vec<Note> {
        let i = &self.inner;
        let mut notes = Vec::new();
        for s in Split::ALL.into_iter().filter(|&s| s != Split::All) {
            let n = i.manifest.chunks_of(s).len();
            if n > 0 && self.drawable(s) == 0 {
                notes.push(Note::new(
                    code::SPLIT_YIELDS_NOTHING,
                    Severity::Warn,
                    s.name(),
                    format!("{s} has {n} chunks but no anchor whose window stays inside the array"),
                ));
            }
        }
        for w in self.tier_warnings() {
            notes.push(Note::new(code::CACHE_DIR_NETWORK_FS, Severity::Warn, "cache_dir", w));
        }
        notes.extend(self.rank_notes());
        let requested = i.options.knobs.block_chunks;
        if i.block_chunks > requested {
            notes.push(Note::new(
                code::BLOCK_CHUNKS_WIDENED,
                Severity::Note,
                "dataset",
                format!(
                    "block_chunks raised from {requested} to {} so any block holds a batch of {}",
                    i.block_chunks, i.options.knobs.batch_size
                ),
            ));
        }
        notes.extend(self.patch_note());
        notes.extend(self.region_note());
        notes.extend(self.draws_note());
        notes.extend(self.mesh_note());
        if i.first_block_chunks < i.block_chunks {
            let c = self.first_block_cost(self.epoch());
            notes.push(Note::new(
                code::FIRST_BLOCK_SMALLER,
                Severity::Note,
                "train",
                format!(
                    "first_block_chunks={}: the first batch waits for fewer chunks, but the epoch's first {} samples \
                     are drawn from {} chunk(s) instead of {} (shuffle quality of the whole epoch {:.3}, specified \
                     order {:.3}); unset it for the specified order",
                    i.first_block_chunks, c.samples, c.chunks, c.specified_chunks, c.quality, c.specified_quality
                ),
            ));
        }
        notes
    }

    /// With patches: how a sample is cut, and what the patches of this train epoch read:
    /// the tiles they touch out of the tiles of the chunks they read (`PassPlan::tiles`).
    fn patch_note(&self) -> Option<Note> {
        let p = self.patcher()?;
        let field: u64 = p.extent.iter().product();
        let patch: u64 = p.size.iter().product();
        let how = match p.mode_name() {
            "grid" => format!("every patch of a grid, {} per sample", p.per_sample()),
            _ => format!("{} at random origins per sample and epoch", p.per_sample()),
        };
        let reads = match self.patch_tiles() {
            Some((read, all)) if read < all => format!(
                "train epoch {} fetches and decodes {read} of the {all} tiles of the chunks it reads ({:.0}%), only \
                 those its patches touch, each once, and holds only those (the budget counts their bytes)",
                self.epoch(),
                100.0 * read as f64 / all.max(1) as f64
            ),
            _ if self.inner.engine.tier.is_some() => {
                "with cache_dir a patch's chunk is read whole (the disk tier keeps whole chunks for later epochs), \
                 each chunk once per epoch"
                    .into()
            }
            _ => "a patch's chunk is read whole (its tiles span the patched axes, or the patches touch every tile), \
                  each chunk once per epoch; chunks tiled on the patched axes let a patch read only its tiles"
                .into(),
        };
        Some(Note::new(
            code::PATCHES,
            Severity::Note,
            "dataset",
            format!(
                "rows are patches of {:?} on {:?} ({how}); each row is {:.1}% of its sample's field; {reads}",
                p.size,
                p.dims,
                100.0 * patch as f64 / field.max(1) as f64
            ),
        ))
    }

    /// With `sel` on inner axes: the region every row is cut to, and what it reads.
    fn region_note(&self) -> Option<Note> {
        let regions = &self.inner.regions;
        if regions.is_empty() {
            return None;
        }
        let cut: Vec<String> = regions
            .iter()
            .map(|r| match &r.picks {
                Some(p) => format!("{} positions {:?} of {}", r.dim, &p[..], r.extent),
                None => format!("{} positions {}..{} of {}", r.dim, r.start, r.start + r.len, r.extent),
            })
            .collect();
        let patched = self.patcher().map_or(String::new(), |p| {
            let inside: Vec<&String> = p.dims.iter().filter(|d| regions.iter().any(|r| r.dim == **d)).collect();
            if inside.is_empty() { String::new() } else { format!("; patches on {inside:?} lie inside it") }
        });
        Some(Note::new(
            code::REGION,
            Severity::Note,
            "dataset",
            format!(
                "sel cuts every row to {}{patched}; of chunks tiled on those axes only the tiles the region touches \
                 are read and held",
                cut.join(", ")
            ),
        ))
    }

    /// Tiles this train epoch's plan reads, and the tiles of the chunks it reads.
    fn patch_tiles(&self) -> Option<(u64, u64)> {
        let epoch = self.epoch();
        let pass = self.rank_pass(Split::Train, epoch, None).ok()?;
        let plan = self.pass_plan(&pass.order, self.patching(Split::Train).as_ref(), epoch);
        let arrays = &self.inner.engine.arrays;
        let mut counts = (0u64, 0u64);
        for (u, use_) in plan.uses.iter().enumerate() {
            let all = arrays[use_.key.path as usize].geom.n_tiles();
            counts.0 += plan.tiles_of(u).map_or(all, |t| t.len() as u64);
            counts.1 += all;
        }
        Some(counts)
    }

    /// With a mask or weights: the share of samples kept, the train view's expected rows per
    /// epoch and the weights' effective sample size; read-once holds (a sample's rows share
    /// its chunk's block).
    fn draws_note(&self) -> Option<Note> {
        let d = self.draws()?;
        let i = &self.inner;
        let spc = i.manifest.sample_chunk_size;
        let train = i.manifest.chunks_of(Split::Train);
        let samples = train.iter().flat_map(|&c| chunk_anchors(c, spc, i.manifest.n_samples, i.anchor_range));
        let (expected, ess) = d.expected(samples);
        let patches = i.patcher.as_ref().map_or(1, |p| p.per_sample());
        let weights = if d.weighted() {
            format!(
                "; weights: about {:.0} train rows per epoch (the sum of the weights{}), an effective sample size of \
                 {ess:.0}, at most {} draws of one sample",
                expected * patches as f64,
                if patches > 1 { " times the patches per sample" } else { "" },
                d.copies()
            )
        } else {
            String::new()
        };
        Some(Note::new(
            code::SAMPLE_DRAWS,
            Severity::Note,
            "dataset",
            format!(
                "{:.1}% of the samples can be drawn (sample_mask and zero weights drop the rest){weights}; each chunk is \
                 still read once per epoch, as a sample's draws share its chunk's block",
                100.0 * d.kept_share()
            ),
        ))
    }

    /// Under a rank mesh: this rank's group and part, and what the group reads: each rank
    /// only its part's tiles where the chunks are tiled along the split axis (`plan_tiles`),
    /// else whole chunks, which every rank of the group then reads.
    fn mesh_note(&self) -> Option<Note> {
        let o = &self.inner.options;
        let m = o.model_parallel.as_ref()?;
        let (group, part) = m.place(o.knobs.rank);
        let reads = match self.patch_tiles() {
            Some((read, all)) if read < all => format!(
                "this rank fetches and decodes only the tiles of its part, {read} of the {all} tiles of the chunks \
                 it reads in train epoch {}",
                self.epoch()
            ),
            _ => format!(
                "each rank of the group reads whole chunks (they are not tiled along {}, or a chunk transform or \
                 cache_dir needs them whole), so a group reads them {} times (share a cache_dir per node to read \
                 them once)",
                m.axis, m.size
            ),
        };
        Some(Note::new(
            code::MODEL_PARALLEL,
            Severity::Note,
            "dataset",
            format!(
                "rank {} is part {part} of {} of data-parallel group {group} of {}: it draws its group's rows and \
                 takes part {part} of each along {}; {reads}",
                o.knobs.rank,
                m.size,
                o.knobs.world_size / m.size,
                m.axis
            ),
        ))
    }

    /// With several ranks: the samples dropped to equal shares, and the variables whose
    /// windows read a neighbour chunk another rank may also read.
    fn rank_notes(&self) -> Vec<Note> {
        let i = &self.inner;
        let world = i.options.knobs.world_size;
        if world == 1 {
            return Vec::new();
        }
        let mut notes = Vec::new();
        let epoch = self.epoch();
        for s in [Split::Train, Split::Val, Split::Test] {
            let dropped = self.dropped_samples(s, epoch);
            if dropped > 0 {
                // More than a tenth of the split unseen each epoch is worth a warning: fewer
                // ranks, a finer chunking or a larger split spreads it better.
                let severity = if dropped * 10 > self.drawable(s) { Severity::Warn } else { Severity::Note };
                notes.push(Note::new(
                    code::RANKS_DROP_REMAINDER,
                    severity,
                    s.name(),
                    format!(
                        "{dropped} of {} samples of {s} are not drawn in epoch {epoch} so that each of the {world} \
                         ranks draws {} (whole units of {} chunks go to one rank)",
                        self.drawable(s),
                        self.draw_order(s, epoch).len(),
                        i.unit_chunks
                    ),
                ));
            }
        }
        if let Some(k) = i.options.node_ranks.filter(|&k| k < world) {
            notes.push(self.node_affinity_note(k, epoch));
        }
        for (v, p) in i.vars.iter().zip(&i.plan_vars) {
            if p.offset.rem_euclid(p.spc as i64) != 0 {
                notes.push(Note::new(
                    code::RANKS_SHARE_WINDOW_CHUNKS,
                    Severity::Note,
                    &v.label,
                    format!(
                        "offset {} reaches into the neighbouring chunk, so a chunk at the edge of a rank's unit is \
                         also read by the rank that owns the neighbour",
                        p.offset
                    ),
                ));
            }
        }
        notes
    }

    /// What node affinity costs: each node draws from the same share of the train chunks in
    /// every epoch, so a rank's own batches never mix in the other nodes' chunks.
    fn node_affinity_note(&self, k: usize, epoch: u64) -> Note {
        let world = self.inner.options.knobs.world_size;
        let nodes = world / k;
        let chunks = self.inner.manifest.chunks_of(Split::Train);
        let spec = self.order_spec(Split::Train, epoch, &chunks);
        let quality = |sharding: &crate::ranks::Sharding| {
            crate::ranks::rank_pass(&spec, sharding, None).map_or(0.0, |p| shuffle_quality(&p.order.anchors))
        };
        let sharding = self.sharding();
        let ours = quality(&sharding);
        let plain = quality(&crate::ranks::Sharding { node_ranks: None, ..sharding });
        Note::new(
            code::NODE_AFFINITY,
            Severity::Note,
            Split::Train.name(),
            format!(
                "node affinity: each of the {nodes} nodes ({k} ranks each) draws from the same 1/{nodes} of the train \
                 chunks in every epoch, reshuffled, so from epoch 2 on its ranks find them in the node's cache_dir. \
                 Every sample is still drawn once per epoch and a global batch spans every node, but this rank never \
                 draws the other nodes' chunks (shuffle quality of its order {ours:.3}, {plain:.3} without node \
                 affinity); turn it off for the specified order"
            ),
        )
    }

    /// The memory model for `iterations` concurrent passes, and the notes on the budget.
    fn memory_report(&self, iterations: usize, notes: &mut Vec<Note>) -> MemoryReport {
        let i = &self.inner;
        let o = &i.options;
        let floor = Split::ALL.iter().map(|&s| self.floor(s)).max().unwrap_or(0);
        let needed = floor.saturating_mul(iterations as u64);
        let residency = o.knobs.cache_budget_bytes.unwrap_or(i.auto_residency_bytes.max(needed));
        let memory_available = i.engine.runtime.memory_available;
        let reread_bytes_max = if residency < i.read_once_bytes { self.reread_bytes_max() } else { 0 };
        let fit = BudgetFit { needed, read_once: i.read_once_bytes, reread_bytes_max, memory_available };
        match o.knobs.cache_budget_bytes {
            Some(budget) => notes.extend(budget_notes(budget, iterations, &fit)),
            None => notes.extend(auto_budget_notes(residency, &fit)),
        }
        let batch_bytes: u64 =
            i.gather_vars.iter().map(|v| v.sample_bytes as u64).sum::<u64>() * o.knobs.batch_size as u64;
        let parallelism = i.engine.runtime.pool.parallelism().get();
        // The pass's batches plus two the caller holds: `for b in loader` keeps the last one
        // until the next is returned.
        let queue_bytes = (max_batches_ahead(o.knobs.prefetch_depth, parallelism) + 2) as u64 * batch_bytes;
        let arrays = &i.engine.arrays;
        // The pool never holds more than every chunk of the selected arrays, whatever the
        // budget: a budget beyond the store is room the run cannot use.
        let store_bytes = block_bytes(&i.floor_arrays, i.manifest.n_chunks, i.manifest.sample_chunk_size);
        let resident_max_bytes = residency.min(store_bytes.max(needed));
        // A slot goes idle in the recycler when a chunk is evicted or a chunk transform
        // replaces its input; with neither, reads ahead never sit beside an idle slot.
        let slots_go_idle = resident_max_bytes < store_bytes || !i.chunk_transform_labels.is_empty();
        let reads = ReadsHeld {
            decoding: parallelism,
            ahead: i.engine.reads.window.reach(i.engine.storage.reads_are_local()),
            idle_slots_max: if slots_go_idle { i.engine.recycler.cap_bytes() as u64 } else { 0 },
            residency,
        };
        let inflight_bytes = arrays.iter().map(|r| inflight_beyond_charge(r, &reads, floor)).max().unwrap_or(0);
        let scratch_bytes = if i.chunk_transform_labels.is_empty() {
            0
        } else {
            parallelism as u64 * arrays.iter().map(ArrayReader::max_charge).max().unwrap_or(0)
        };
        // Idle batch buffers are buffers the queue term already counts at their peak (a new one
        // is allocated only when none is idle); idle chunk buffers can outlast a size change,
        // so count two chunks of slack.
        let recycled_bytes = 2 * i.floor_arrays.iter().map(|a| a.max_slot_bytes).max().unwrap_or(0);
        let read_ahead_bytes = i.engine.reads.ahead.budget();
        let accounted =
            resident_max_bytes + inflight_bytes + read_ahead_bytes + queue_bytes + scratch_bytes + recycled_bytes;
        let estimated_peak_bytes = accounted + PROCESS_BASELINE_BYTES;
        notes.extend(peak_note(estimated_peak_bytes, memory_available));
        MemoryReport {
            iterations,
            floor_bytes: floor,
            read_once_bytes: i.read_once_bytes,
            residency_bytes: residency,
            resident_max_bytes,
            budget_is_automatic: o.knobs.cache_budget_bytes.is_none(),
            automatic_budget_bytes: i.auto_residency_bytes,
            memory_available_bytes: memory_available,
            reread_bytes_max,
            inflight_bytes,
            read_ahead_bytes,
            queue_bytes,
            scratch_bytes,
            recycled_bytes,
            accounted_bytes: accounted,
            estimated_peak_bytes,
        }
    }

    /// The configuration as resolved, with per-split counts and this epoch's mixing score.
    fn config_report(&self) -> ConfigReport {
        let i = &self.inner;
        let o = &i.options;
        let splits = [Split::Train, Split::Val, Split::Test];
        let drawable: Vec<(String, u64)> = splits.iter().map(|&s| (s.name().to_string(), self.drawable(s))).collect();
        let epoch = self.epoch();
        let shares: Vec<(String, u64)> =
            splits.iter().map(|&s| (s.name().to_string(), self.draw_order(s, epoch).len() as u64)).collect();
        let dropped: Vec<(String, u64)> =
            splits.iter().map(|&s| (s.name().to_string(), self.dropped_samples(s, epoch))).collect();
        let order = self.draw_order(Split::Train, epoch);
        ConfigReport {
            batch_size: o.knobs.batch_size,
            block_chunks: i.block_chunks,
            block_chunks_requested: o.knobs.block_chunks,
            first_block_chunks: i.first_block_chunks,
            max_inflight: o.knobs.max_inflight,
            prefetch_depth: o.knobs.prefetch_depth,
            shuffle: o.knobs.shuffle,
            seed: o.knobs.seed,
            epoch: self.epoch(),
            cache_budget_bytes: o.knobs.cache_budget_bytes,
            budget_bytes: o.knobs.cache_budget_bytes.unwrap_or(i.auto_residency_bytes),
            disk_tier: i.engine.tier.as_ref().map(|t| t.describe()),
            on_bad_chunk: o.knobs.on_bad_chunk.name().into(),
            chunk_transforms: i.chunk_transform_labels.clone(),
            batch_transforms: i.batch_transforms.iter().map(|t| t.name()).collect(),
            windowed: i.vars.iter().any(|v| v.geometry.offset != 0),
            offsets: i.vars.iter().map(|v| (v.label.clone(), v.geometry.offset)).collect(),
            samples_per_chunk: i.manifest.sample_chunk_size,
            n_chunks: i.manifest.n_chunks,
            variable_chunks: i.vars.iter().map(|v| (v.label.clone(), v.geometry.n_chunks())).collect(),
            split_chunks: splits.iter().map(|&s| (s.name().to_string(), i.manifest.chunks_of(s).len())).collect(),
            rank: o.knobs.rank,
            world_size: o.knobs.world_size,
            unit_chunks: i.unit_chunks,
            rank_samples: shares.clone(),
            dropped_samples: dropped,
            batches_per_epoch: shares
                .iter()
                .map(|(name, n)| (name.clone(), n.div_ceil(o.knobs.batch_size as u64) as usize))
                .collect(),
            drawable_samples: drawable,
            shuffle_quality: (order.len() >= 2).then(|| shuffle_quality(&order)),
        }
    }
}

/// Notes a variable's geometry calls for: edge padding, short gathers, fat single-object chunks.
fn variable_notes(vr: &VariableReport) -> Vec<Note> {
    let mut notes = Vec::new();
    if vr.ragged_multiplier > RAGGED_NOTE_THRESHOLD {
        notes.push(Note::new(
            code::RAGGED_GRID,
            Severity::Note,
            &vr.label,
            format!(
                "the chunk grid does not divide the array: {:.3}x of decoded bytes are edge padding (decode work \
                 only; the pool holds clipped chunks)",
                vr.ragged_multiplier
            ),
        ));
    }
    if vr.gather_run_bytes < SHORT_GATHER_RUN_BYTES {
        notes.push(Note::new(
            code::SHORT_GATHER_RUN,
            Severity::Warn,
            &vr.label,
            format!("one sample is only {} bytes; per-row overhead will dominate the gather", vr.gather_run_bytes),
        ));
    }
    if vr.stored_chunks_per_chunk == 1 && vr.stored_chunk_bytes > FAT_CHUNK_BYTES {
        notes.push(Note::new(
            code::SINGLE_INNER_FAT_CHUNK,
            Severity::Note,
            &vr.label,
            format!(
                "each chunk is one stored object of {}: concurrency costs whole chunks; chunking the inner axes \
                 makes max_inflight cheap",
                human_bytes(vr.stored_chunk_bytes)
            ),
        ));
    }
    notes
}

/// What a budget is measured against in the notes.
struct BudgetFit {
    /// The floors of the concurrent iterations.
    needed: u64,
    /// Residency that reads every chunk once.
    read_once: u64,
    /// Chunk bytes an epoch may fetch again below read-once.
    reread_bytes_max: u64,
    /// The runtime's memory, when known.
    memory_available: Option<u64>,
}

impl BudgetFit {
    fn reread_note(&self, what: &str) -> Note {
        Note::new(
            code::BUDGET_BELOW_READ_ONCE,
            Severity::Note,
            "dataset",
            format!(
                "{what}: chunks shared between shuffle blocks (windows or coarser chunking) may be evicted and \
                 re-read, up to {} more fetched per train epoch; {} keeps every chunk read once",
                human_bytes(self.reread_bytes_max),
                human_bytes(self.read_once)
            ),
        )
    }
}

/// Notes on the automatic budget: capped below read-once by the machine.
fn auto_budget_notes(residency: u64, fit: &BudgetFit) -> Option<Note> {
    let available = fit.memory_available.filter(|_| residency < fit.read_once)?;
    Some(fit.reread_note(&format!(
        "the automatic budget is capped at {} (half of the {} available)",
        human_bytes(residency),
        human_bytes(available)
    )))
}

/// A warning when the estimated peak is more than the runtime's memory.
fn peak_note(peak: u64, memory_available: Option<u64>) -> Option<Note> {
    let available = memory_available.filter(|&a| peak > a)?;
    Some(Note::new(
        code::PEAK_ABOVE_MEMORY,
        Severity::Warn,
        "dataset",
        format!(
            "the estimated peak of {} is more than the {} available: lower batch_size, prefetch_depth, \
             max_inflight or block_chunks, or run fewer iterations at once",
            human_bytes(peak),
            human_bytes(available)
        ),
    ))
}

/// Notes on an explicit budget: too small for the iterations, or for reading every chunk once.
fn budget_notes(budget: u64, iterations: usize, fit: &BudgetFit) -> Vec<Note> {
    let BudgetFit { needed, read_once, .. } = *fit;
    let mut notes = Vec::new();
    if budget < needed {
        notes.push(Note::new(
            code::BUDGET_BELOW_ITERATIONS,
            Severity::Warn,
            "dataset",
            format!(
                "{iterations} concurrent iterations need cache_budget_bytes >= {needed}; the second will be refused \
                 at start"
            ),
        ));
    }
    if budget < read_once {
        notes.push(fit.reread_note(&format!("cache_budget_bytes={budget}")));
    }
    notes
}

/// Reads holding their encoded bytes at once: one per running decode, plus those the read
/// window lets ahead of the decoders (fetching, or fetched and waiting for a thread).
struct ReadsHeld {
    decoding: usize,
    ahead: usize,
    /// The most bytes of freed slots that can wait in the recycler during a pass: its cap,
    /// or 0 when no slot is freed during a pass (see `memory_report`).
    idle_slots_max: u64,
    /// The pool's budget: no read starts without its chunk's decoded size charged to it.
    residency: u64,
}

/// Bytes reads hold beyond what the pool already charged for them. A chunk's decoded size
/// is charged when it is admitted, before its read starts, and its encoded bytes are
/// smaller than that charge (compression), so the charge covers them until the chunk's slot
/// exists: from its decode on (each running decode holds its encoded input beside its
/// output), or from the start when an evicted chunk's slot waits in the recycler for the
/// next decode. Then every read the window lets ahead, no more than the budget's chunks,
/// can sit beside a slot the residency term already counts, as far as the recycler's cap
/// lets slots wait. Measured: 32 reads ahead on 1-sample chunks held 57 MB beyond the
/// model (docs/lab/benchmarks.md). A chunk assembled from several tiles holds its slot from its
/// first tile's decode, so its tiles still waiting are always extra, as is a decoded
/// scratch tile per running decode.
fn inflight_beyond_charge(r: &ArrayReader, reads: &ReadsHeld, floor: u64) -> u64 {
    let tile = r.geom.tile_bytes();
    let decoding = reads.decoding as u64;
    if r.geom.n_tiles() <= 1 {
        let chunks_in_budget = reads.residency / r.max_charge().max(1);
        let ahead = (reads.ahead as u64).min(chunks_in_budget.saturating_sub(decoding));
        return decoding * tile + (ahead * tile).min(reads.idle_slots_max);
    }
    ((2 * decoding + reads.ahead as u64) * tile).min(floor * 2)
}
