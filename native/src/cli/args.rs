//! The flags every command that opens a store takes ([`RunArgs`]: core's `DatasetSpec` as
//! flags, each named as its field), the read policy's ([`ReadPolicyArgs`]), their parsers, and
//! opening the store they name.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result, anyhow};
use clap::Args;
use insitubatch_native::core::TierOpener;
use insitubatch_native::core::coords::{LabelSel, Sel};
use insitubatch_native::core::{AxisSizes, HedgeSpec, OnBadChunk, Storage};
use insitubatch_native::core::{PatchAxis, PatchPlacement, parse_axis_sizes as parse_patch_axis_sizes};
use insitubatch_native::{
    DatasetSpec, JoinPart, NativeDataset, OpenOptions, ReadPolicySpec, VariablesSpec, open, open_concat,
    open_concat_storage, open_joined, open_joined_storage, open_storage,
};

/// What every command that opens a store takes: core's [`DatasetSpec`] as flags (each named
/// as its field, in kebab-case; [`RunArgs::spec`] fills the spec, whose `resolve` decides),
/// and what only the command line has (files of per-sample values, joins, scaling, the epoch).
// Defaults are the spec's (`DatasetSpec::default()`), restated nowhere; a flag without one is
// the spec's `None`. No `requires` between the spec's flags: which combinations work is the
// spec's rule (`DatasetSpec::resolve`), with its message.
#[derive(Args, Debug, Clone)]
pub(crate) struct RunArgs {
    /// Array to read (repeatable); default: every non-coordinate array.
    #[arg(long = "var")]
    pub(super) variables: Vec<String>,
    /// The sample axis of every variable.
    #[arg(long, default_value_t = spec().sample_axis)]
    pub(super) sample_axis: usize,
    /// Rows per batch.
    #[arg(long, default_value_t = spec().batch_size)]
    pub(super) batch_size: usize,
    /// Chunks per shuffle block (raised so a block holds a batch).
    #[arg(long, default_value_t = spec().block_chunks)]
    pub(super) block_chunks: usize,
    /// Chunks in each epoch's first shuffle block: fewer for a faster first batch, at a cost
    /// in mixing that `describe` reports; default: block_chunks (the specified order).
    #[arg(long)]
    pub(super) first_block_chunks: Option<usize>,
    /// Storage reads in flight.
    #[arg(long, default_value_t = spec().max_inflight)]
    pub(super) max_inflight: usize,
    /// Shuffle seed.
    #[arg(long, default_value_t = spec().seed)]
    pub(super) seed: u64,
    /// Batches queued ahead.
    #[arg(long, default_value_t = spec().prefetch_depth)]
    pub(super) prefetch_depth: usize,
    /// Pool byte budget; default: sized automatically.
    #[arg(long)]
    pub(super) cache_budget_bytes: Option<u64>,
    /// Do not shuffle the train view.
    #[arg(long = "no-shuffle", action = clap::ArgAction::SetFalse)]
    pub(super) shuffle: bool,
    /// A chunk that cannot be fetched or decoded: raise (stop with an error naming it) or
    /// nan (fill its tiles, record it in the report, go on).
    // Words are read by core's parser in `RunArgs::spec`, so a wrong one is core's refusal.
    #[arg(long, value_name = "raise|nan", default_value = spec().on_bad_chunk.name())]
    pub(super) on_bad_chunk: String,
    /// Carry the sample axis's coordinate in every batch.
    #[arg(long)]
    pub(super) coords: bool,
    /// Decode threads; default: available parallelism.
    #[arg(long)]
    pub(super) threads: Option<usize>,
    /// Train, val, test fractions of sample-axis chunks (default 0.8,0.1,0.1; `bench`'s
    /// default is 1,0,0, the whole array).
    #[arg(long, value_parser = parse_fractions)]
    pub(super) fractions: Option<Fractions>,
    /// Shuffle chunks between the splits (default: contiguous runs, safe for time series).
    #[arg(long)]
    pub(super) shuffle_splits: bool,
    /// The seed of --shuffle-splits; default: --seed.
    #[arg(long)]
    pub(super) split_seed: Option<u64>,
    /// Split only the chunks overlapping samples START..STOP.
    #[arg(long, value_name = "START,STOP", value_parser = parse_range)]
    pub(super) sample_range: Option<(u64, u64)>,
    /// The (first) epoch.
    #[arg(long, default_value_t = 0)]
    pub(super) epoch: u64,
    /// This process's rank: it reads and yields only its share of each epoch.
    #[arg(long, default_value_t = spec().rank)]
    pub(super) rank: usize,
    /// Processes sharing each epoch (each reads its own chunks; shares are equal).
    #[arg(long, default_value_t = spec().world_size)]
    pub(super) world_size: usize,
    /// Node affinity with K ranks per node: each node draws the same chunks in every epoch,
    /// reshuffled, so with a --shared-cache per node later epochs read from it.
    #[arg(long, value_name = "K", alias = "node-affinity")]
    pub(super) node_ranks: Option<usize>,
    /// Cut each sample into patches: AXIS=SIZE per patched axis (a dimension name or an axis
    /// index), e.g. lat=128,lon=128. Batch rows are then patches; each chunk is still read once.
    #[arg(long, value_name = "AXIS=SIZE,...", value_parser = parse_axis_sizes)]
    pub(super) patch: Option<AxisSizes>,
    /// grid: every patch of a grid (stepping --patch-stride); random: --patches-per-sample
    /// patches at random origins per sample and epoch (default grid).
    #[arg(long, value_name = "grid|random")]
    pub(super) patch_mode: Option<String>,
    /// The grid's step per axis, AXIS=STEP (default: the patch size; smaller overlaps).
    #[arg(long, value_name = "AXIS=STEP,...", value_parser = parse_axis_sizes)]
    pub(super) patch_stride: Option<AxisSizes>,
    /// Random patches per sample and epoch (default 1).
    #[arg(long)]
    pub(super) patches_per_sample: Option<u64>,
    /// Serve the pass reports as Prometheus metrics at IP:PORT, or PORT alone on loopback
    /// (port 0: a free one; the address is printed to stderr).
    #[arg(long, value_name = "IP:PORT")]
    pub(super) metrics_address: Option<String>,
    /// The one web origin allowed to read the metrics endpoint from a browser (the
    /// dashboard's); default: none.
    #[arg(long, value_name = "ORIGIN")]
    pub(super) metrics_cors_origin: Option<String>,
    /// A rank mesh: groups of K consecutive ranks draw the same rows, each rank taking its
    /// part of every row along --model-parallel-axis (1: none).
    #[arg(long, value_name = "K", default_value_t = spec().model_parallel)]
    pub(super) model_parallel: usize,
    /// The axis a model-parallel group splits its rows along (a dimension name or index).
    #[arg(long, value_name = "AXIS", value_parser = parse_axis)]
    pub(super) model_parallel_axis: Option<PatchAxis>,
    /// Draw only the samples whose entry is non-zero: a text file of one number per sample
    /// (separated by whitespace or commas), e.g. written by `numpy.savetxt`.
    #[arg(long, value_name = "FILE")]
    pub(super) sample_mask: Option<std::path::PathBuf>,
    /// Per-sample weights (expected draws per epoch, 0 to 1024), a text file as for
    /// --sample-mask: a weight of 2 is drawn twice as often as one of 1.
    #[arg(long, value_name = "FILE")]
    pub(super) sample_weights: Option<std::path::PathBuf>,
    /// Select by label (repeatable, one per dimension): DIM=LO,HI from LO to HI inclusive, or
    /// DIM=[A,B,...] exactly those labels in that order. On the sample axis's coordinate, the
    /// samples drawn; on an inner dimension's, what every row is cut to (e.g. lat=30,60, or
    /// two pressure levels listed in brackets). Dates (YYYY-MM-DD, optionally THH:MM:SS, UTC)
    /// or numbers, e.g. time=2010-01-01,2019-12-31 (CF time is decoded).
    #[arg(long, value_name = "DIM=LO,HI|DIM=[A,B,...]", value_parser = parse_sel)]
    pub(super) sel: Vec<LabelSel>,
    /// object_store option KEY=VALUE (repeatable), e.g. aws_region=us-east-1.
    #[arg(long = "storage-option", value_parser = parse_kv)]
    pub(super) storage_options: Vec<(String, String)>,
    /// Join another store on the same sample axis, NAME=URL (repeatable): its arrays are
    /// NAME/path. The positional store is then named too, as NAME=URL.
    #[arg(long = "join", value_name = "NAME=URL", value_parser = parse_kv)]
    pub(super) join: Vec<(String, String)>,
    /// Concatenate another store after the positional one along the sample axis (repeatable,
    /// in order): every array with the dimension --concat-dim is the stores end to end.
    #[arg(long = "concat", value_name = "URL")]
    pub(super) concat: Vec<String>,
    /// The dimension --concat concatenates along (arrays without dimension names: the
    /// sample axis).
    #[arg(long, value_name = "NAME", default_value_t = spec().concat_dim)]
    pub(super) concat_dim: String,
    /// Keep decoded chunks in memory-mapped files in this directory (local disk).
    #[arg(long)]
    pub(super) cache_dir: Option<std::path::PathBuf>,
    /// Keep the cache_dir's chunks across epochs, evictions and runs.
    #[arg(long)]
    pub(super) persist: bool,
    /// Read a complete warm cache_dir without writing; a miss is an error.
    #[arg(long)]
    pub(super) readonly_cache: bool,
    /// Drop the cached chunks of arrays whose pipeline changed instead of refusing.
    #[arg(long)]
    pub(super) reset_stale_cache: bool,
    /// Fill and read the cache_dir together with other processes (a machine's ranks): each
    /// chunk is written once, by whichever process fetched it first.
    #[arg(long)]
    pub(super) shared_cache: bool,
    #[command(flatten)]
    pub(super) read_policy: ReadPolicyArgs,
    /// Standardize every array, `(x - MEAN) / (STD + 1e-8)` as numpy computes it with Python
    /// floats (the data keeps its dtype): the StandardScaler chunk transform, cached with the chunk.
    #[arg(long, value_parser = parse_scale, conflicts_with = "scaler")]
    pub(super) scale: Option<(f64, f64)>,
    /// Standardize with a StandardScaler saved by `StandardScaler.save` (JSON, or
    /// insitubatch 0.2.0's npz of `<array>.mean` and `<array>.std`).
    #[arg(long, value_name = "FILE")]
    pub(super) scaler: Option<std::path::PathBuf>,
}

/// The spec's `read_policy` as flags (durations in seconds, as on every surface).
#[derive(Args, Debug, Clone)]
pub(super) struct ReadPolicyArgs {
    /// Attempts after the first for a transient failure.
    #[arg(long, default_value_t = spec().read_policy.retries)]
    pub(super) retries: u32,
    /// First backoff, seconds; doubles per attempt.
    #[arg(long, default_value_t = spec().read_policy.backoff_s)]
    pub(super) backoff_s: f64,
    /// A request with no answer after this many seconds is a transient failure.
    #[arg(long, default_value_t = spec().read_policy.request_timeout_s)]
    pub(super) request_timeout_s: f64,
    /// Ranges of one shard at most this many bytes apart are read by one request.
    #[arg(long, default_value_t = spec().read_policy.coalesce_gap_bytes)]
    pub(super) coalesce_gap_bytes: u64,
    /// A coalesced request spans at most this many bytes (0: every inner chunk alone).
    #[arg(long, default_value_t = spec().read_policy.coalesce_max_bytes)]
    pub(super) coalesce_max_bytes: u64,
    /// Stored bytes read ahead for a shard's inner chunks a pass needs soon (0: off);
    /// default: a quarter of the residency floor.
    #[arg(long)]
    pub(super) read_ahead_bytes: Option<u64>,
    /// Never send a second request for a slow read (hedging is on for remote stores).
    #[arg(long = "no-hedge", action = clap::ArgAction::SetFalse)]
    pub(super) hedge: bool,
}

/// The spec's defaults, which the flags show and start from.
pub(super) fn spec() -> DatasetSpec {
    DatasetSpec::default()
}

pub(super) fn parse_scale(s: &str) -> Result<(f64, f64), String> {
    let parts: Vec<&str> = s.split(',').collect();
    let [m, sd] = parts.as_slice() else { return Err(format!("expected MEAN,STD, got {s:?}")) };
    let m: f64 = m.trim().parse().map_err(|e| format!("mean {m:?}: {e}"))?;
    let sd: f64 = sd.trim().parse().map_err(|e| format!("std {sd:?}: {e}"))?;
    Ok((m, sd))
}

/// Train, val and test fractions, shown and parsed as `0.8,0.1,0.1`.
#[derive(Debug, Clone, Copy)]
pub(super) struct Fractions(pub(super) (f64, f64, f64));

pub(super) fn parse_fractions(s: &str) -> Result<Fractions, String> {
    let v: Vec<f64> = s
        .split(',')
        .map(|x| x.trim().parse::<f64>().map_err(|e| format!("{x:?} is not a number ({e})")))
        .collect::<Result<_, _>>()?;
    match v[..] {
        [a, b, c] => Ok(Fractions((a, b, c))),
        _ => Err(format!("expected three comma-separated fractions like 0.8,0.1,0.1, got {s:?}")),
    }
}

/// `START,STOP` of `--sample-range`.
pub(super) fn parse_range(s: &str) -> Result<(u64, u64), String> {
    let parse = |x: &str| x.trim().parse::<u64>().map_err(|e| format!("{x:?} is not a sample index ({e})"));
    match s.split_once(',') {
        Some((a, b)) => Ok((parse(a)?, parse(b)?)),
        None => Err(format!("expected START,STOP, got {s:?}")),
    }
}

/// The numbers of a per-sample text file (whitespace or commas between them); the engine
/// checks their count and range.
pub(super) fn per_sample_numbers(path: &Path) -> Result<Vec<f64>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    text.split(|c: char| c.is_whitespace() || c == ',')
        .filter(|w| !w.is_empty())
        .enumerate()
        .map(|(i, w)| {
            w.parse::<f64>()
                .map_err(|_| anyhow!("entry {i} ({w:?}) is not a number; one number per sample: {}", path.display()))
        })
        .collect()
}

/// `AXIS=N,...` parsed by core (one value: clap would take a `Vec` for a repeated flag).
pub(super) fn parse_axis_sizes(s: &str) -> Result<AxisSizes, String> {
    parse_patch_axis_sizes(s).map(AxisSizes).map_err(|e| e.to_string())
}

/// An axis word, read by core's one rule (digits: an index; else a dimension name).
#[allow(clippy::unnecessary_wraps, reason = "clap's value parsers return a Result")]
pub(super) fn parse_axis(s: &str) -> Result<PatchAxis, String> {
    Ok(PatchAxis::parse(s))
}

pub(super) fn parse_kv(s: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .map(|(k, v)| (k.trim().to_string(), v.to_string()))
        .ok_or_else(|| format!("expected KEY=VALUE, got {s:?}"))
}

/// `--sel DIM=LO,HI` or `DIM=[A,B,...]` as core's selection (`LabelSel::from_arg`).
pub(super) fn parse_sel(s: &str) -> Result<LabelSel, String> {
    LabelSel::from_arg(s).map_err(|e| e.to_string())
}

impl RunArgs {
    /// The spec these flags describe (`bench`'s fractions default to the whole array); the
    /// files of per-sample values are read here.
    pub(super) fn spec(&self, default_fractions: (f64, f64, f64)) -> Result<DatasetSpec> {
        let numbers = |path: &Option<PathBuf>| path.as_deref().map(per_sample_numbers).transpose();
        let p = &self.read_policy;
        Ok(DatasetSpec {
            variables: (!self.variables.is_empty()).then(|| VariablesSpec::Paths(self.variables.clone())),
            sample_axis: self.sample_axis,
            batch_size: self.batch_size,
            block_chunks: self.block_chunks,
            first_block_chunks: self.first_block_chunks,
            max_inflight: self.max_inflight,
            seed: self.seed,
            shuffle: self.shuffle,
            prefetch_depth: self.prefetch_depth,
            cache_budget_bytes: self.cache_budget_bytes,
            on_bad_chunk: self.on_bad_chunk.parse::<OnBadChunk>()?,
            coords: self.coords,
            threads: self.threads,
            rank: self.rank,
            world_size: self.world_size,
            node_ranks: self.node_ranks,
            model_parallel: self.model_parallel,
            model_parallel_axis: self.model_parallel_axis.clone(),
            sel: Sel(self.sel.clone()),
            sample_mask: numbers(&self.sample_mask)?.map(|v| v.iter().map(|&x| x != 0.0).collect()),
            sample_weights: numbers(&self.sample_weights)?,
            patch: self.patch.clone(),
            patch_mode: self.patch_mode.as_deref().map(str::parse::<PatchPlacement>).transpose()?,
            patch_stride: self.patch_stride.clone(),
            patches_per_sample: self.patches_per_sample,
            fractions: self.fractions.map_or(default_fractions, |f| f.0),
            shuffle_splits: self.shuffle_splits,
            split_seed: self.split_seed,
            sample_range: self.sample_range,
            read_policy: ReadPolicySpec {
                retries: p.retries,
                backoff_s: p.backoff_s,
                request_timeout_s: p.request_timeout_s,
                coalesce_gap_bytes: p.coalesce_gap_bytes,
                coalesce_max_bytes: p.coalesce_max_bytes,
                read_ahead_bytes: p.read_ahead_bytes,
                hedge: HedgeSpec::Flag(p.hedge),
            },
            storage_options: self.storage_options.iter().cloned().collect(),
            concat_dim: self.concat_dim.clone(),
            cache_dir: self.cache_dir.as_ref().map(|d| d.display().to_string()),
            persist: self.persist,
            readonly_cache: self.readonly_cache,
            reset_stale_cache: self.reset_stale_cache,
            shared_cache: self.shared_cache,
            metrics_address: self.metrics_address.clone(),
            metrics_cors_origin: self.metrics_cors_origin.clone(),
        })
    }

    /// The store to read: `url`, or with --join every store joined by name (`url` then
    /// `NAME=URL` too), or with --concat the stores end to end; storage options go to each.
    pub(super) fn storage(&self, url: &str) -> Result<Arc<dyn Storage>> {
        let resolved = self.spec(spec().fractions)?.resolve()?;
        if let Some(parts) = self.concatenated(url)? {
            let concat = (resolved.concat_dim.as_str(), resolved.sample_axis);
            let policy = &resolved.dataset.read_policy;
            return Ok(open_concat_storage(parts, concat, &resolved.storage_options, policy)?);
        }
        Ok(match self.joined(url)? {
            None => open_storage(url, &resolved.storage_options)?,
            Some(parts) => open_joined_storage(parts, &resolved.storage_options)?,
        })
    }

    /// With --concat, the positional store and then each --concat store, in order; `None`
    /// without.
    pub(super) fn concatenated(&self, url: &str) -> Result<Option<Vec<JoinPart>>> {
        if self.concat.is_empty() {
            return Ok(None);
        }
        if !self.join.is_empty() {
            return Err(anyhow!("--concat and --join cannot be combined yet; concatenate the stores or join them"));
        }
        let urls = std::iter::once(url.to_string()).chain(self.concat.iter().cloned());
        Ok(Some(urls.map(JoinPart::Url).collect()))
    }

    /// With --join, every store by name (the positional one first); `None` without.
    pub(super) fn joined(&self, url: &str) -> Result<Option<Vec<(String, JoinPart)>>> {
        if self.join.is_empty() {
            return Ok(None);
        }
        let first = parse_kv(url).map_err(|_| {
            anyhow!("with --join, name the positional store too, as NAME=URL (its arrays are then NAME/path): {url}")
        })?;
        let parts = std::iter::once(first).chain(self.join.iter().cloned());
        Ok(Some(parts.map(|(name, url)| (name, JoinPart::Url(url))).collect()))
    }

    /// The `--scale` / `--scaler` chunk transform: the one StandardScaler (core), its file
    /// format from `insitubatch_native::scaler_file`.
    pub(super) fn chunk_transforms(&self) -> Result<Vec<insitubatch_native::core::transform::Scoped>> {
        use insitubatch_native::core::scaler::{ArrayStats, StandardScaler, Stat};
        let scaler = match (&self.scale, &self.scaler) {
            (Some((mean, std)), _) => {
                let stat = |v: f64, what: &str| Stat::python(v).map_err(|e| anyhow!("--scale {what}: {e}"));
                let stats = ArrayStats::new(stat(*mean, "mean")?, stat(*std, "std")?).map_err(|e| anyhow!(e))?;
                StandardScaler::for_every_array(stats, 1e-8)?
            }
            (None, Some(path)) => insitubatch_native::scaler_file::load(path)?,
            (None, None) => return Ok(Vec::new()),
        };
        Ok(vec![insitubatch_native::core::transform::everywhere(Arc::new(scaler))])
    }
}

/// Open the store these flags name with `spec` (and a caller's own disk tier, if given).
pub(super) fn open_ds(
    url: &str,
    knobs: &RunArgs,
    spec: DatasetSpec,
    tier: Option<Arc<dyn TierOpener>>,
) -> Result<NativeDataset> {
    let opts = OpenOptions { spec, chunk_transforms: knobs.chunk_transforms()?, tier, ..OpenOptions::default() };
    let ds = match (knobs.concatenated(url)?, knobs.joined(url)?) {
        (Some(parts), _) => open_concat(parts, opts)?,
        (None, None) => open(url, opts)?,
        (None, Some(parts)) => open_joined(parts, opts)?,
    };
    if let Some(address) = ds.metrics_address() {
        let _ = writeln!(std::io::stderr(), "metrics: http://{address}/metrics");
    }
    ds.set_epoch(knobs.epoch);
    Ok(ds)
}
