//! `describe()`: what a dataset will do, from geometry and configuration alone — it never
//! touches the store. The residency numbers come from the same functions the engine uses
//! ([`crate::plan::residency_floor`]), so the report cannot drift from the behaviour.
//!
//! These types are also the one definition of the report in JS and Python: with the `schema`
//! feature they derive `schemars::JsonSchema`, and tools/boundary-types writes
//! `js/src/reports.d.ts` and the Python package's `_reports.py` from it. An `x-python`
//! extension says where the Python package shows a field otherwise (insitubatch 0.2.0's shapes:
//! `tuple` for a list, `dict` for `[name, value]` pairs, its `name`, an `alias` it is also
//! shown under, `omit` where another field takes its name, a Python `type` where the package
//! replaces the value; on a struct, `extra` fields it adds (`= value` where the value is
//! fixed), `total`, a Python `doc`), so adding a field here and regenerating updates every
//! binding (CONTRIBUTING.md). Every value is computed here: the Python package only reshapes.

use serde::Serialize;

use crate::units::human_bytes;

/// One variable's geometry and per-chunk bytes.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[cfg_attr(feature = "schema", schemars(extend("x-python" = {"total": false})))]
pub struct VariableReport {
    /// Label.
    pub label: String,
    /// Array path.
    pub path: String,
    /// Element type.
    #[cfg_attr(feature = "schema", schemars(with = "crate::DType"))]
    pub dtype: String,
    /// Array shape (physical order).
    #[cfg_attr(feature = "schema", schemars(extend("x-python" = {"tuple": true})))]
    pub shape: Vec<u64>,
    /// Fetch unit: stored chunk, or inner chunk when sharded.
    #[cfg_attr(feature = "schema", schemars(extend("x-python" = {"tuple": true})))]
    pub chunks: Vec<u64>,
    /// Shard shape, when sharded.
    #[cfg_attr(feature = "schema", schemars(extend("x-python" = {"tuple": true})))]
    pub shard: Option<Vec<u64>>,
    /// Codec chain.
    pub codecs: Vec<String>,
    /// Sample axis (physical).
    pub sample_axis: usize,
    /// Samples per chunk.
    pub sample_chunk_size: u64,
    /// Samples.
    pub n_samples: u64,
    /// Chunks along the sample axis.
    pub n_chunks: u64,
    /// Window offset.
    pub offset: i64,
    /// One sample's shape.
    #[cfg_attr(feature = "schema", schemars(extend("x-python" = {"tuple": true})))]
    pub inner_shape: Vec<u64>,
    /// Tile extents on the inner axes.
    #[cfg_attr(feature = "schema", schemars(extend("x-python" = {"tuple": true})))]
    pub inner_chunks: Vec<u64>,
    /// Stored tiles per chunk.
    pub stored_chunks_per_chunk: u64,
    /// Bytes of one decoded tile (padding included).
    pub stored_chunk_bytes: u64,
    /// Bytes of one full assembled chunk (what the pool holds).
    pub slot_bytes: u64,
    /// Padded tiles over logical bytes: decode work spent on edge padding.
    pub ragged_multiplier: f64,
    /// Contiguous bytes per gather copy (one sample).
    pub gather_run_bytes: u64,
    /// Per-sample shape after chunk transforms.
    #[cfg_attr(feature = "schema", schemars(extend("x-python" = {"tuple": true})))]
    pub output_inner_shape: Vec<usize>,
    /// Element type after chunk transforms.
    #[cfg_attr(feature = "schema", schemars(with = "crate::DType"))]
    pub output_dtype: String,
    /// Bytes of the first chunk after chunk transforms, without edge padding: its rows times
    /// `gather_run_bytes` (insitubatch 0.2.0's).
    pub logical_chunk_bytes: u64,
    /// Array shape after chunk transforms (physical order): `output_inner_shape` with the
    /// sample axis put back where it was; `shape` when they keep the sample's shape and type.
    #[cfg_attr(feature = "schema", schemars(extend("x-python" = {"tuple": true})))]
    pub output_shape: Vec<u64>,
    /// Fetch unit after chunk transforms (physical order): a transform returns its chunk
    /// whole, so one tile per sample-axis chunk; `chunks` when they keep the sample's shape
    /// and type. The Python package's `view.geometries` are these.
    #[cfg_attr(feature = "schema", schemars(extend("x-python" = {"tuple": true})))]
    pub output_chunks: Vec<u64>,
}

/// What the dataset resolved to.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[cfg_attr(
    feature = "schema",
    schemars(extend("x-python" = {"total": false, "extra": {
        "cache_dir": "str | None",
        "persist": "bool",
        "readonly_cache": "bool",
        "reset_stale_cache": "bool",
        "shared_cache": "bool  # ours: several processes fill this cache_dir together",
        "assembles": "bool = True  # every chunk is assembled into one sample-first slot, transform or not"
    }}))
)]
pub struct ConfigReport {
    /// Rows per batch.
    pub batch_size: usize,
    /// Chunks per shuffle block after widening.
    pub block_chunks: usize,
    /// As requested.
    pub block_chunks_requested: usize,
    /// Chunks in each epoch's first block (widened; `block_chunks` unless a smaller first
    /// block was asked for).
    pub first_block_chunks: usize,
    /// Storage reads in flight at most.
    pub max_inflight: usize,
    /// Batches queued ahead.
    pub prefetch_depth: usize,
    /// Train shuffles.
    pub shuffle: bool,
    /// Seed.
    pub seed: u64,
    /// Current epoch.
    pub epoch: u64,
    /// Explicit budget, if any.
    #[cfg_attr(feature = "schema", schemars(extend("x-python" = {"omit": true})))]
    pub cache_budget_bytes: Option<u64>,
    /// The residency budget in force for one iteration: `cache_budget_bytes`, or without one
    /// the automatic budget (`memory.automatic_budget_bytes`).
    #[cfg_attr(feature = "schema", schemars(extend("x-python" = {"name": "cache_budget_bytes"})))]
    pub budget_bytes: u64,
    /// The disk tier (`cache_dir` and its mode), if any.
    #[serde(default)]
    pub disk_tier: Option<String>,
    /// `raise` or `nan`.
    #[cfg_attr(feature = "schema", schemars(with = "crate::OnBadChunk"))]
    pub on_bad_chunk: String,
    /// Chunk transforms with their scopes (`scale[t2m]`).
    #[cfg_attr(feature = "schema", schemars(extend("x-python" = {"tuple": true})))]
    pub chunk_transforms: Vec<String>,
    /// Batch transforms.
    #[cfg_attr(feature = "schema", schemars(extend("x-python" = {"tuple": true})))]
    pub batch_transforms: Vec<String>,
    /// Any variable has a non-zero offset.
    pub windowed: bool,
    /// Label → offset.
    #[cfg_attr(feature = "schema", schemars(extend("x-python" = {"dict": true})))]
    pub offsets: Vec<(String, i64)>,
    /// Reference samples per chunk (the anchor grid).
    pub samples_per_chunk: u64,
    /// Reference chunks.
    #[cfg_attr(feature = "schema", schemars(extend("x-python" = {"omit": true})))]
    pub n_chunks: u64,
    /// Label → chunks along its sample axis (each variable's `n_chunks`; insitubatch 0.2.0's
    /// `n_chunks`).
    #[cfg_attr(feature = "schema", schemars(extend("x-python" = {"dict": true, "name": "n_chunks"})))]
    pub variable_chunks: Vec<(String, u64)>,
    /// Chunks per split.
    #[cfg_attr(feature = "schema", schemars(extend("x-python" = {"dict": true})))]
    pub split_chunks: Vec<(String, usize)>,
    /// Drawable anchors per split.
    #[cfg_attr(feature = "schema", schemars(extend("x-python" = {"dict": true})))]
    pub drawable_samples: Vec<(String, u64)>,
    /// This process's rank.
    pub rank: usize,
    /// Ranks sharing each epoch.
    pub world_size: usize,
    /// Reference chunks per rank-assignment unit (1 unless a variable is chunked more coarsely).
    pub unit_chunks: u64,
    /// Samples this rank draws per split this epoch (the drawable samples with one rank).
    pub rank_samples: Vec<(String, u64)>,
    /// Samples per split no rank draws this epoch, so every rank draws as many (0 with one rank).
    pub dropped_samples: Vec<(String, u64)>,
    /// Batches per epoch per split, for this rank.
    #[cfg_attr(feature = "schema", schemars(extend("x-python" = {"dict": true})))]
    pub batches_per_epoch: Vec<(String, usize)>,
    /// Mixing score of this epoch's train order (0..1); none (`null`, `None`) when this
    /// rank's train order has under two anchors, which have no order to score.
    pub shuffle_quality: Option<f64>,
}

/// The memory model evaluated for this configuration.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[cfg_attr(feature = "schema", schemars(extend("x-python" = {"total": false})))]
pub struct MemoryReport {
    /// Concurrent iterations assumed.
    pub iterations: usize,
    /// One iteration's residency floor (its reservation): two blocks of chunks.
    pub floor_bytes: u64,
    /// Residency that keeps every chunk read once per epoch when chunks are shared between
    /// blocks (windows, coarser chunking) under shuffle; equal to the floor otherwise.
    pub read_once_bytes: u64,
    /// The pool budget that will be in force.
    pub residency_bytes: u64,
    /// The most the pool can hold: the budget, or every chunk of the selected arrays when
    /// that is less (a budget beyond the store is room the run cannot use). The estimate
    /// counts this, not the budget.
    pub resident_max_bytes: u64,
    /// True when no budget was given.
    pub budget_is_automatic: bool,
    /// What an automatic budget holds for one iteration: read-once, capped at half the
    /// memory available, never below the floor.
    #[cfg_attr(feature = "schema", schemars(extend("x-python" = {"alias": "working_set_bytes"})))]
    pub automatic_budget_bytes: u64,
    /// The memory the runtime said the engine can have (available memory, cgroup-aware,
    /// natively; the instance's room in wasm); the automatic budget takes at most half.
    pub memory_available_bytes: Option<u64>,
    /// Below read-once: an upper bound on the chunk bytes a train epoch fetches again
    /// (0 when every chunk is read once).
    pub reread_bytes_max: u64,
    /// What reads hold beyond their chunks' residency charge: the encoded bytes of each
    /// running decode and of each read the read window lets ahead of the decoders (their
    /// freed slots wait in the recycler meanwhile), and, for chunks assembled from tiles,
    /// scratch and waiting tiles.
    pub inflight_bytes: u64,
    /// Stored bytes of inner chunks read ahead for chunks a pass needs soon (sharded arrays:
    /// a shard's neighbouring chunks, interleaved in Morton order, come with one request),
    /// at most `read_ahead_bytes` of the read policy.
    pub read_ahead_bytes: u64,
    /// Batches queued, being gathered, and the two the caller holds while asking for the next.
    pub queue_bytes: u64,
    /// Transform scratch on the thread pool.
    pub scratch_bytes: u64,
    /// Slack for freed chunk buffers kept for reuse (idle batch buffers are within `queue_bytes`).
    pub recycled_bytes: u64,
    /// `resident_max_bytes` + in flight + read ahead + queue + scratch + recycled.
    pub accounted_bytes: u64,
    /// Accounted + 64 MiB process baseline: an upper bound for a caller slower than the loader.
    pub estimated_peak_bytes: u64,
}

/// How much a finding matters; serialized as `warn` / `note` (the dashboard styles by it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Something will go wrong or cost a lot: act on it.
    Warn,
    /// Worth knowing; nothing to do unless it surprises you.
    Note,
}

impl Severity {
    /// The serialized word.
    pub fn name(self) -> &'static str {
        match self {
            Self::Warn => "warn",
            Self::Note => "note",
        }
    }
}

impl std::fmt::Display for Severity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// One finding.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Note {
    /// Stable code, e.g. `block-chunks-widened`.
    pub code: String,
    /// Warn or note.
    pub severity: Severity,
    /// The variable label, or `dataset`.
    pub subject: String,
    /// What it means and what to do.
    pub message: String,
}

impl Note {
    /// A finding about `subject` (a variable label, a split, `dataset` or `cache_dir`).
    pub fn new(code: &str, severity: Severity, subject: impl Into<String>, message: impl Into<String>) -> Self {
        Self { code: code.into(), severity, subject: subject.into(), message: message.into() }
    }
}

/// The code of every note `describe()` can emit, each explained once, here. Every
/// `Note::new` names one of these constants, and the note table of
/// `docs/reference/describe.md` is generated from their doc comments
/// (`examples/tests/reference.rs`, which fails when a code lacks one), so the page and the
/// messages cannot drift apart. A doc comment says what the note means and what to do;
/// its links are relative to `docs/reference/`.
pub(crate) mod note_code {
    /// `block_chunks` was raised so that any block holds a whole batch (otherwise a batch
    /// could need three blocks and the floor would not hold). Lower `batch_size` or accept the
    /// wider block; the shuffle only gets better.
    pub(crate) const BLOCK_CHUNKS_WIDENED: &str = "block-chunks-widened";
    /// `first_block_chunks` asked for a smaller first shuffle block, so the first batch waits
    /// for fewer chunks; the message says how many samples open each epoch drawn from how few
    /// chunks (instead of the specified order's), and the shuffle quality of the epoch with and
    /// without it. Unset `first_block_chunks` for the specified order.
    pub(crate) const FIRST_BLOCK_SMALLER: &str = "first-block-smaller";
    /// The chunk grid does not divide the array, so the edge chunks are padded when decoded.
    /// Only decode work is wasted; the pool holds the clipped chunks.
    pub(crate) const RAGGED_GRID: &str = "ragged-grid";
    /// One sample is so small that the per-row copy overhead of gather dominates. Rechunk so
    /// that a sample is larger, or batch larger.
    pub(crate) const SHORT_GATHER_RUN: &str = "short-gather-run";
    /// Each chunk is one large stored object, so every read in flight costs a whole chunk of
    /// memory. Chunking the inner axes makes `max_inflight` cheap.
    pub(crate) const SINGLE_INNER_FAT_CHUNK: &str = "single-inner-fat-chunk";
    /// A split has chunks but no sample whose window fits inside the array. Use larger
    /// fractions or a smaller window shift.
    pub(crate) const SPLIT_YIELDS_NOTHING: &str = "split-yields-nothing";
    /// What the disk tier warns about (subject `cache_dir`). Natively: the `cache_dir` is on a
    /// network filesystem, where the locking and memory-mapping the tier relies on may not
    /// hold; use a local disk. In the browser: the tier stopped writing (a full quota, say;
    /// batches are unchanged), or a chunk file failed its check and was read from the store
    /// instead. The message says which.
    pub(crate) const CACHE_DIR_NETWORK_FS: &str = "cache-dir-network-fs";
    /// The explicit `cache_budget_bytes` is smaller than one floor per concurrent iteration,
    /// so the second iteration will be refused when it starts. Raise the budget to the number
    /// the message gives.
    pub(crate) const BUDGET_BELOW_ITERATIONS: &str = "budget-below-iterations";
    /// The budget (explicit, or automatic but capped at half the memory available) is below
    /// read-once residency, so chunks shared between shuffle blocks may be evicted and fetched
    /// again. The message bounds the extra bytes per epoch. See
    /// [budgets and tiers](../concepts.md#budgets-and-tiers).
    pub(crate) const BUDGET_BELOW_READ_ONCE: &str = "budget-below-read-once";
    /// Under `model_parallel`: this rank's data-parallel group and its part in it, and what
    /// the group reads (each rank fetches only the tiles of its part where chunks are tiled
    /// along the split axis, else whole chunks). See
    /// [the rank mesh](../distributed.md#model-parallelism-a-rank-mesh).
    pub(crate) const MODEL_PARALLEL: &str = "model-parallel";
    /// With `node_affinity`, each node draws from the same share of the train chunks in every
    /// epoch (so a node's second epoch reads its own cache); the message gives the shuffle
    /// quality of this rank's order with and without it. See
    /// [the disk tier with several ranks](../distributed.md#the-disk-tier-on-a-machine-with-several-ranks).
    pub(crate) const NODE_AFFINITY: &str = "node-affinity";
    /// With `patch=`: how each sample is cut (grid positions, or random patches per sample),
    /// what share of a sample's field one patch is, and how many of the tiles of the chunks
    /// this train epoch reads its patches touch (only those are fetched, decoded and held), or
    /// why its chunks are read whole. See [spatial patches](../patches.md#what-a-patch-costs).
    pub(crate) const PATCHES: &str = "patches";
    /// With `sel` on inner dimensions: the positions every row is cut to (a range, or the
    /// listed labels' positions in their order), and that of chunks tiled on those axes only
    /// the tiles they touch are read and held. See
    /// [coordinates](../coordinates.md#a-region-on-inner-axes).
    pub(crate) const REGION: &str = "region";
    /// With `sample_mask` or `sample_weights`: the share of samples that can be drawn and,
    /// with weights, the train view's expected rows per epoch, their effective sample size and
    /// the most draws of one sample; each chunk is still read once per epoch. See
    /// [masks and weighted sampling](../sampling.md).
    pub(crate) const SAMPLE_DRAWS: &str = "sample-draws";
    /// The estimated peak is more than the memory available. Lower `batch_size`,
    /// `prefetch_depth`, `max_inflight` or `block_chunks`, or run fewer iterations.
    pub(crate) const PEAK_ABOVE_MEMORY: &str = "peak-above-memory";
    /// With several ranks, some samples of a split are not drawn this epoch so that every rank
    /// yields the same number of batches (chunks are dealt to ranks a unit at a time): a note
    /// for any dropped sample, a warning when more than a tenth of the split is dropped. Fewer
    /// ranks, or a store chunked more finely along the sample axis, draws more. See
    /// [ranks](../distributed.md#how-an-epoch-is-partitioned).
    pub(crate) const RANKS_DROP_REMAINDER: &str = "ranks-drop-remainder";
    /// A window reaches into the neighbouring chunk, so where that chunk belongs to another
    /// rank both ranks read it: read-once holds per rank, not across the job, for those edge
    /// chunks.
    pub(crate) const RANKS_SHARE_WINDOW_CHUNKS: &str = "ranks-share-window-chunks";
}

/// The whole static picture.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[cfg_attr(
    feature = "schema",
    schemars(extend("x-python" = {
        "total": true,
        "extra": {"probe?": "ProbeReport  # with describe(probe=True)"},
        "doc": concat!(
            "The whole static picture, returned by ``InSituDataset.describe``; with ``probe=True``\n",
            "also ``probe``: what a few timed reads measured and the epoch they predict (the engine's\n",
            "``ProbeReport``, docs/cloud.md)."
        )
    }))
)]
pub struct DatasetReport {
    /// Per variable.
    #[cfg_attr(feature = "schema", schemars(extend("x-python" = {"type": "dict[str, VariableReport]  # by label"})))]
    pub variables: Vec<VariableReport>,
    /// Resolved configuration.
    pub config: ConfigReport,
    /// Memory model.
    pub memory: MemoryReport,
    /// Findings, per-variable first.
    pub notes: Vec<Note>,
}

/// Two lines per variable: its geometry and codecs, then its per-chunk bytes.
fn render_variable(s: &mut String, v: &VariableReport) {
    use std::fmt::Write;
    let _ = writeln!(
        s,
        "  {} ({}{}): {} {:?} chunks {:?}{} [{}], sample axis {} ({} samples, {}/chunk, {} chunks)",
        v.label,
        v.path,
        if v.offset != 0 { format!(" shift {:+}", v.offset) } else { String::new() },
        v.dtype,
        v.shape,
        v.chunks,
        v.shard.as_ref().map(|sh| format!(" in shards {sh:?}")).unwrap_or_default(),
        v.codecs.join(", "),
        v.sample_axis,
        v.n_samples,
        v.sample_chunk_size,
        v.n_chunks
    );
    let _ = writeln!(
        s,
        "      chunk {} resident ({} tiles of {}), ragged {:.3}x, gather run {}",
        human_bytes(v.slot_bytes),
        v.stored_chunks_per_chunk,
        human_bytes(v.stored_chunk_bytes),
        v.ragged_multiplier,
        human_bytes(v.gather_run_bytes)
    );
}

impl DatasetReport {
    /// The human rendering printed by `print_summary` and the CLI.
    pub fn render(&self) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        let c = &self.config;
        let _ = writeln!(s, "insitubatch dataset");
        for v in &self.variables {
            render_variable(&mut s, v);
        }
        let _ = writeln!(
            s,
            "  batch {} | block_chunks {}{} | max_inflight {} | prefetch {} | seed {} epoch {} | shuffle quality {}",
            c.batch_size,
            c.block_chunks,
            match (c.block_chunks != c.block_chunks_requested, c.first_block_chunks < c.block_chunks) {
                (false, false) => String::new(),
                (true, false) => format!(" (asked {})", c.block_chunks_requested),
                (false, true) => format!(" (first block {})", c.first_block_chunks),
                (true, true) => format!(" (asked {}; first block {})", c.block_chunks_requested, c.first_block_chunks),
            },
            c.max_inflight,
            c.prefetch_depth,
            c.seed,
            c.epoch,
            c.shuffle_quality.map_or_else(|| "n/a".to_string(), |q| format!("{q:.2}"))
        );
        let splits: Vec<String> = c
            .split_chunks
            .iter()
            .zip(&c.drawable_samples)
            .zip(&c.batches_per_epoch)
            .map(|(((n, ch), (_, d)), (_, b))| format!("{n} {ch} chunks/{d} samples/{b} batches"))
            .collect();
        let _ = writeln!(s, "  splits: {}", splits.join(", "));
        if c.world_size > 1 {
            let shares: Vec<String> = c
                .rank_samples
                .iter()
                .zip(&c.dropped_samples)
                .map(|((n, r), (_, d))| format!("{n} {r} samples here, {d} dropped"))
                .collect();
            let _ = writeln!(
                s,
                "  rank {} of {} (units of {} chunks): {}",
                c.rank,
                c.world_size,
                c.unit_chunks,
                shares.join(", ")
            );
        }
        if let Some(tier) = &c.disk_tier {
            let _ = writeln!(s, "  disk tier: {tier}");
        }
        let m = &self.memory;
        let _ = writeln!(
            s,
            "  memory ({} iteration{}): residency {}{}{} (floor {} per iteration, read-once {}) + in flight {}{} + queue {} + scratch {} + recycled {} = {}; estimated peak {}{}",
            m.iterations,
            if m.iterations == 1 { "" } else { "s" },
            human_bytes(m.residency_bytes),
            if m.budget_is_automatic { " (automatic)" } else { "" },
            if m.resident_max_bytes < m.residency_bytes {
                format!(", of which the store fills {}", human_bytes(m.resident_max_bytes))
            } else {
                String::new()
            },
            human_bytes(m.floor_bytes),
            human_bytes(m.read_once_bytes),
            human_bytes(m.inflight_bytes),
            if m.read_ahead_bytes > 0 {
                format!(" + read ahead {}", human_bytes(m.read_ahead_bytes))
            } else {
                String::new()
            },
            human_bytes(m.queue_bytes),
            human_bytes(m.scratch_bytes),
            human_bytes(m.recycled_bytes),
            human_bytes(m.accounted_bytes),
            human_bytes(m.estimated_peak_bytes),
            m.memory_available_bytes.map(|a| format!(" of {} available", human_bytes(a))).unwrap_or_default()
        );
        for n in &self.notes {
            let _ = writeln!(s, "  [{}] {} ({}): {}", n.severity, n.code, n.subject, n.message);
        }
        s
    }
}
