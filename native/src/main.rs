//! The `insitubatch` CLI: `demo`, `describe`, `bench`.

#[cfg(all(feature = "jemalloc", target_os = "linux", not(target_env = "musl")))]
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// Keep freed pages (no decay) in one arena: decoded chunks and batches are large and move
/// between threads (read on tokio, decoded and gathered on rayon, dropped by the caller), so
/// this makes every steady-state allocation reuse already-faulted memory. Peak memory is
/// still bounded by the pool budget; it is just not handed back to the OS between epochs.
/// Huge pages are left to the system (`thp:default`): asking for them (`thp:always`) made
/// the cold epoch's system time bimodal (0.1 s to 5 s on the same run, see
/// docs/lab/benchmarks.md "Where the cold spread came from"): a 2 MiB fault costs little when
/// the memory behind it is already backed, and seconds per GiB when a VM's free page
/// reporting has handed it back to the host or the kernel must reclaim page cache for it.
#[cfg(all(feature = "jemalloc", target_os = "linux", not(target_env = "musl")))]
#[allow(non_upper_case_globals, reason = "jemalloc reads this exact symbol name")]
#[unsafe(export_name = "_rjem_malloc_conf")]
pub static _rjem_malloc_conf: &[u8] = b"dirty_decay_ms:-1,muzzy_decay_ms:-1,narenas:1,thp:default\0";

use std::borrow::Cow;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use anyhow::{Context, Result, anyhow, bail};
use clap::{Args, Parser, Subcommand};
use insitubatch_native::core::coords::{LabelSel, Sel};
use insitubatch_native::core::{ArrayIdentity, ChunkTier, TierCounters, TierOpener};
use insitubatch_native::core::{AxisSizes, DType, HedgeSpec, OnBadChunk, Result as CoreResult, Split, Storage};
use insitubatch_native::core::{PatchAxis, PatchPlacement, parse_axis_sizes as parse_patch_axis_sizes};
use insitubatch_native::{
    Batch, BatchIter, Checkpoint, DatasetSpec, JoinPart, NativeDataset, OpenOptions, ReadPolicySpec, VariablesSpec,
    demo, open, open_concat, open_concat_storage, open_joined, open_joined_storage, open_storage,
};
use rayon::prelude::*;
use serde_json::json;

/// `println!` that ignores a closed stdout (`| head`) instead of panicking.
macro_rules! outln {
    ($($arg:tt)*) => {{
        let mut o = std::io::stdout().lock();
        let _ = writeln!(o, $($arg)*);
    }};
}

#[derive(Parser, Debug)]
#[command(name = "insitubatch", version, about = "Shuffled, split-aware training batches straight from Zarr stores")]
struct Cli {
    /// Log progress (info level); RUST_LOG overrides.
    #[arg(short, long, global = true)]
    verbose: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Write (once) and stream a small ERA5-like demo store, or stream --url.
    Demo {
        /// Use this store instead of the demo store.
        #[arg(long)]
        url: Option<String>,
        #[command(flatten)]
        resume: ResumeArgs,
        #[command(flatten)]
        knobs: RunArgs,
    },
    /// Print the static report: geometry, splits, memory model, notes.
    Describe {
        /// Store URL or local path.
        url: String,
        /// Concurrent iterations the memory model assumes.
        #[arg(long, default_value_t = 1)]
        iterations: usize,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
        /// Also time a few real reads and decodes, and predict an epoch of the train view:
        /// its time, throughput, limiting stage, and the max_inflight and block_chunks that fit
        /// the measured latency (reads one chunk, then this many more at once).
        #[arg(long, value_name = "CHUNKS", num_args = 0..=1, default_missing_value = "16")]
        probe: Option<usize>,
        /// Also answer "what if block_chunks were N?" for each N: the shuffle quality, the
        /// residency floor and the estimated peak, built from the same metadata (no reads).
        #[arg(long, value_name = "N,...", value_delimiter = ',')]
        sweep_block_chunks: Vec<usize>,
        #[command(flatten)]
        knobs: RunArgs,
    },
    /// Time epochs of the train view over the whole array (or the decode limit).
    Bench {
        /// Store URL or local path.
        url: String,
        /// Epochs to time (the first is cold).
        #[arg(long, default_value_t = 2)]
        epochs: u64,
        /// Measure the decode limit instead: fetch all chunks of the first variable, then decode them on all cores.
        #[arg(long)]
        decode_limit: bool,
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
        /// Add a digest of every epoch (sample order and every byte) to the report.
        #[arg(long)]
        digest: bool,
        /// After opening, print `opened <pid>` and wait for stdin to close before reading
        /// (holds the cache_dir lock; for multi-process tests and scripts).
        #[arg(long)]
        hold: bool,
        /// Sleep this long after each batch (a stand-in for a training step).
        #[arg(long, default_value_t = 0)]
        step_ms: u64,
        /// For tests, hidden from --help: once N chunks are written to the cache_dir (and
        /// logged, with --persist), print `paused after N chunks` and block until killed.
        #[arg(long, hide = true, value_name = "N", requires = "cache_dir", conflicts_with = "readonly_cache")]
        pause_after_chunks: Option<u64>,
        #[command(flatten)]
        resume: ResumeArgs,
        #[command(flatten)]
        knobs: RunArgs,
    },
}

/// Resuming and checkpointing the train pass of a command that runs epochs (`demo`, `bench`).
#[derive(Args, Debug, Clone)]
struct ResumeArgs {
    /// Continue the pass a checkpoint file holds (JSON: written by --checkpoint, or Python's
    /// `state_dict()` / JS's `checkpoint()` saved to a file) from where it stopped; the run
    /// starts at its epoch. Give the options it was taken with (seed, batch size, ranks,
    /// fractions): another seed or batch size is refused.
    #[arg(long, value_name = "FILE", conflicts_with = "epoch")]
    resume: Option<PathBuf>,
    /// On SIGINT or SIGTERM, write the checkpoint of the pass in progress to FILE (after the
    /// last finished batch), say so on stderr, and exit with status 130 (SIGINT) or 143
    /// (SIGTERM); `--resume FILE` continues from there.
    #[arg(long, value_name = "FILE")]
    checkpoint: Option<PathBuf>,
    /// For tests, hidden from --help: print `samples EPOCH BATCH i,j,...` after each batch.
    #[arg(long, hide = true)]
    print_sample_indices: bool,
    /// For tests, hidden from --help: after N batches, print `paused after N batches` and
    /// block until a signal ends the process (a known point to interrupt it at).
    #[arg(long, hide = true, value_name = "N")]
    pause_after_batches: Option<u64>,
}

/// The train passes of a run as `--resume` and `--checkpoint` see them: the first pass resumes
/// the checkpoint file, and after each finished batch the pass's checkpoint is recorded where
/// a signal finds it.
struct Session {
    /// The checkpoint the first pass resumes.
    resume: Option<Checkpoint>,
    /// The checkpoint of the pass in progress after its last finished batch. A signal takes
    /// it and holds the lock until the process exits, so no batch is finished (or printed)
    /// after the checkpoint that is written.
    at: Arc<Mutex<Option<Checkpoint>>>,
    print_sample_indices: bool,
    pause_after_batches: Option<u64>,
    /// Batches finished in this run.
    finished: u64,
}

impl Session {
    /// Reads the `--resume` file.
    fn new(args: &ResumeArgs) -> Result<Self> {
        let resume = match &args.resume {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .with_context(|| format!("cannot read the checkpoint file {}", path.display()))?;
                Some(Checkpoint::from_json(&text).with_context(|| format!("--resume {}", path.display()))?)
            }
            None => None,
        };
        Ok(Self {
            resume,
            at: Arc::default(),
            print_sample_indices: args.print_sample_indices,
            pause_after_batches: args.pause_after_batches,
            finished: 0,
        })
    }

    /// The run's first epoch: the resumed checkpoint's, else `epoch`.
    fn first_epoch(&self, epoch: u64) -> u64 {
        self.resume.as_ref().map_or(epoch, |c| c.epoch)
    }

    /// With `--checkpoint FILE`: on SIGINT or SIGTERM (Ctrl-C elsewhere), write the checkpoint
    /// of the pass in progress to FILE and exit. Call before the first pass.
    fn on_signal_write(&self, ds: &NativeDataset, path: Option<&Path>) -> Result<()> {
        let Some(path) = path else { return Ok(()) };
        let path = path.to_path_buf();
        let start =
            self.resume.clone().unwrap_or_else(|| ds.dataset().fresh_checkpoint(Split::Train, ds.dataset().epoch()));
        *lock(&self.at) = Some(start);
        let at = Arc::clone(&self.at);
        let handle = ds.runtime().handle();
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            let _enter = handle.enter();
            let mut interrupt = signal(SignalKind::interrupt()).context("cannot watch SIGINT")?;
            let mut terminate = signal(SignalKind::terminate()).context("cannot watch SIGTERM")?;
            handle.spawn(async move {
                let (name, status) = tokio::select! {
                    _ = interrupt.recv() => ("SIGINT", 130),
                    _ = terminate.recv() => ("SIGTERM", 143),
                };
                exit_with_checkpoint(&at, &path, name, status);
            });
        }
        #[cfg(not(unix))]
        handle.spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                exit_with_checkpoint(&at, &path, "Ctrl-C", 130);
            }
        });
        Ok(())
    }

    /// The next train pass: the resumed one first, then a fresh one at the current epoch.
    fn pass(&mut self, ds: &NativeDataset) -> Result<BatchIter> {
        let it = match self.resume.take() {
            Some(c) => ds.resume(&c)?,
            None => ds.train()?,
        };
        *lock(&self.at) = it.checkpoint();
        Ok(it)
    }

    /// The caller finished its step on `b`, the latest batch of `it`: record where the pass
    /// stands (and print the batch's samples, hidden), then the hidden pause.
    fn finished(&mut self, it: &BatchIter, b: &Batch) {
        let mut at = lock(&self.at);
        if self.print_sample_indices {
            let list: Vec<String> = b.sample_indices.iter().map(u64::to_string).collect();
            outln!("samples {} {} {}", b.epoch, b.index, list.join(","));
            if let Some(p) = &b.patches {
                let rows: Vec<String> = (0..b.len()).map(|i| format!("{:?}", p.origin(i))).collect();
                outln!("patches {} {} {}", b.epoch, b.index, rows.join(";").replace(' ', ""));
            }
            let _ = std::io::stdout().flush();
        }
        *at = it.checkpoint();
        drop(at);
        self.finished += 1;
        if self.pause_after_batches == Some(self.finished) {
            outln!("paused after {} batches", self.finished);
            let _ = std::io::stdout().flush();
            block_forever();
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A signal's end of a run with `--checkpoint`: write the pass's checkpoint (core's JSON, to a
/// temporary file renamed over `path`), say where, and exit with `status` (1 if it could not
/// be written). The lock is held to the end, so the run finishes no batch after it.
fn exit_with_checkpoint(at: &Mutex<Option<Checkpoint>>, path: &Path, name: &str, status: i32) -> ! {
    let at = lock(at);
    let mut err = std::io::stderr().lock();
    let code = match at.as_ref() {
        None => {
            let _ = writeln!(err, "{name}: no pass had started; no checkpoint written");
            status
        }
        Some(c) => {
            let tmp = path.with_extension("insitu-tmp");
            match std::fs::write(&tmp, c.to_json() + "\n").and_then(|()| std::fs::rename(&tmp, path)) {
                Ok(()) => {
                    let p = path.display();
                    let _ = writeln!(
                        err,
                        "{name}: wrote the checkpoint of epoch {} of the {} view ({} batches done) to {p}; continue \
                         with --resume {p}",
                        c.epoch, c.split, c.batches
                    );
                    status
                }
                Err(e) => {
                    let _ = writeln!(err, "error: {name}: cannot write the checkpoint to {}: {e}", path.display());
                    1
                }
            }
        }
    };
    let _ = std::io::stdout().flush();
    std::process::exit(code)
}

/// `bench` options beyond the knobs.
struct BenchRun {
    epochs: u64,
    as_json: bool,
    digest: bool,
    hold: bool,
    step_ms: u64,
    pause_after_chunks: Option<u64>,
}

/// What every command that opens a store takes: core's [`DatasetSpec`] as flags (each named
/// as its field, in kebab-case; [`RunArgs::spec`] fills the spec, whose `resolve` decides),
/// and what only the command line has (files of per-sample values, joins, scaling, the epoch).
// Defaults are the spec's (`DatasetSpec::default()`), restated nowhere; a flag without one is
// the spec's `None`. No `requires` between the spec's flags: which combinations work is the
// spec's rule (`DatasetSpec::resolve`), with its message.
#[derive(Args, Debug, Clone)]
struct RunArgs {
    /// Array to read (repeatable); default: every non-coordinate array.
    #[arg(long = "var")]
    variables: Vec<String>,
    /// The sample axis of every variable.
    #[arg(long, default_value_t = spec().sample_axis)]
    sample_axis: usize,
    /// Rows per batch.
    #[arg(long, default_value_t = spec().batch_size)]
    batch_size: usize,
    /// Chunks per shuffle block (raised so a block holds a batch).
    #[arg(long, default_value_t = spec().block_chunks)]
    block_chunks: usize,
    /// Chunks in each epoch's first shuffle block: fewer for a faster first batch, at a cost
    /// in mixing that `describe` reports; default: block_chunks (the specified order).
    #[arg(long)]
    first_block_chunks: Option<usize>,
    /// Storage reads in flight.
    #[arg(long, default_value_t = spec().max_inflight)]
    max_inflight: usize,
    /// Shuffle seed.
    #[arg(long, default_value_t = spec().seed)]
    seed: u64,
    /// Batches queued ahead.
    #[arg(long, default_value_t = spec().prefetch_depth)]
    prefetch_depth: usize,
    /// Pool byte budget; default: sized automatically.
    #[arg(long)]
    cache_budget_bytes: Option<u64>,
    /// Do not shuffle the train view.
    #[arg(long = "no-shuffle", action = clap::ArgAction::SetFalse)]
    shuffle: bool,
    /// A chunk that cannot be fetched or decoded: raise (stop with an error naming it) or
    /// nan (fill its tiles, record it in the report, go on).
    // Words are read by core's parser in `RunArgs::spec`, so a wrong one is core's refusal.
    #[arg(long, value_name = "raise|nan", default_value = spec().on_bad_chunk.name())]
    on_bad_chunk: String,
    /// Carry the sample axis's coordinate in every batch.
    #[arg(long)]
    coords: bool,
    /// Decode threads; default: available parallelism.
    #[arg(long)]
    threads: Option<usize>,
    /// Train, val, test fractions of sample-axis chunks (default 0.8,0.1,0.1; `bench`'s
    /// default is 1,0,0, the whole array).
    #[arg(long, value_parser = parse_fractions)]
    fractions: Option<Fractions>,
    /// Shuffle chunks between the splits (default: contiguous runs, safe for time series).
    #[arg(long)]
    shuffle_splits: bool,
    /// The seed of --shuffle-splits; default: --seed.
    #[arg(long)]
    split_seed: Option<u64>,
    /// Split only the chunks overlapping samples START..STOP.
    #[arg(long, value_name = "START,STOP", value_parser = parse_range)]
    sample_range: Option<(u64, u64)>,
    /// The (first) epoch.
    #[arg(long, default_value_t = 0)]
    epoch: u64,
    /// This process's rank: it reads and yields only its share of each epoch.
    #[arg(long, default_value_t = spec().rank)]
    rank: usize,
    /// Processes sharing each epoch (each reads its own chunks; shares are equal).
    #[arg(long, default_value_t = spec().world_size)]
    world_size: usize,
    /// Node affinity with K ranks per node: each node draws the same chunks in every epoch,
    /// reshuffled, so with a --shared-cache per node later epochs read from it.
    #[arg(long, value_name = "K", alias = "node-affinity")]
    node_ranks: Option<usize>,
    /// Cut each sample into patches: AXIS=SIZE per patched axis (a dimension name or an axis
    /// index), e.g. lat=128,lon=128. Batch rows are then patches; each chunk is still read once.
    #[arg(long, value_name = "AXIS=SIZE,...", value_parser = parse_axis_sizes)]
    patch: Option<AxisSizes>,
    /// grid: every patch of a grid (stepping --patch-stride); random: --patches-per-sample
    /// patches at random origins per sample and epoch (default grid).
    #[arg(long, value_name = "grid|random")]
    patch_mode: Option<String>,
    /// The grid's step per axis, AXIS=STEP (default: the patch size; smaller overlaps).
    #[arg(long, value_name = "AXIS=STEP,...", value_parser = parse_axis_sizes)]
    patch_stride: Option<AxisSizes>,
    /// Random patches per sample and epoch (default 1).
    #[arg(long)]
    patches_per_sample: Option<u64>,
    /// Serve the pass reports as Prometheus metrics at IP:PORT, or PORT alone on loopback
    /// (port 0: a free one; the address is printed to stderr).
    #[arg(long, value_name = "IP:PORT")]
    metrics_address: Option<String>,
    /// The one web origin allowed to read the metrics endpoint from a browser (the
    /// dashboard's); default: none.
    #[arg(long, value_name = "ORIGIN")]
    metrics_cors_origin: Option<String>,
    /// A rank mesh: groups of K consecutive ranks draw the same rows, each rank taking its
    /// part of every row along --model-parallel-axis (1: none).
    #[arg(long, value_name = "K", default_value_t = spec().model_parallel)]
    model_parallel: usize,
    /// The axis a model-parallel group splits its rows along (a dimension name or index).
    #[arg(long, value_name = "AXIS", value_parser = parse_axis)]
    model_parallel_axis: Option<PatchAxis>,
    /// Draw only the samples whose entry is non-zero: a text file of one number per sample
    /// (separated by whitespace or commas), e.g. written by `numpy.savetxt`.
    #[arg(long, value_name = "FILE")]
    sample_mask: Option<std::path::PathBuf>,
    /// Per-sample weights (expected draws per epoch, 0 to 1024), a text file as for
    /// --sample-mask: a weight of 2 is drawn twice as often as one of 1.
    #[arg(long, value_name = "FILE")]
    sample_weights: Option<std::path::PathBuf>,
    /// Select by label (repeatable, one per dimension): DIM=LO,HI from LO to HI inclusive, or
    /// DIM=[A,B,...] exactly those labels in that order. On the sample axis's coordinate, the
    /// samples drawn; on an inner dimension's, what every row is cut to (e.g. lat=30,60, or
    /// two pressure levels listed in brackets). Dates (YYYY-MM-DD, optionally THH:MM:SS, UTC)
    /// or numbers, e.g. time=2010-01-01,2019-12-31 (CF time is decoded).
    #[arg(long, value_name = "DIM=LO,HI|DIM=[A,B,...]", value_parser = parse_sel)]
    sel: Vec<LabelSel>,
    /// object_store option KEY=VALUE (repeatable), e.g. aws_region=us-east-1.
    #[arg(long = "storage-option", value_parser = parse_kv)]
    storage_options: Vec<(String, String)>,
    /// Join another store on the same sample axis, NAME=URL (repeatable): its arrays are
    /// NAME/path. The positional store is then named too, as NAME=URL.
    #[arg(long = "join", value_name = "NAME=URL", value_parser = parse_kv)]
    join: Vec<(String, String)>,
    /// Concatenate another store after the positional one along the sample axis (repeatable,
    /// in order): every array with the dimension --concat-dim is the stores end to end.
    #[arg(long = "concat", value_name = "URL")]
    concat: Vec<String>,
    /// The dimension --concat concatenates along (arrays without dimension names: the
    /// sample axis).
    #[arg(long, value_name = "NAME", default_value_t = spec().concat_dim)]
    concat_dim: String,
    /// Keep decoded chunks in memory-mapped files in this directory (local disk).
    #[arg(long)]
    cache_dir: Option<std::path::PathBuf>,
    /// Keep the cache_dir's chunks across epochs, evictions and runs.
    #[arg(long)]
    persist: bool,
    /// Read a complete warm cache_dir without writing; a miss is an error.
    #[arg(long)]
    readonly_cache: bool,
    /// Drop the cached chunks of arrays whose pipeline changed instead of refusing.
    #[arg(long)]
    reset_stale_cache: bool,
    /// Fill and read the cache_dir together with other processes (a machine's ranks): each
    /// chunk is written once, by whichever process fetched it first.
    #[arg(long)]
    shared_cache: bool,
    #[command(flatten)]
    read_policy: ReadPolicyArgs,
    /// Standardize every array, `(x - MEAN) / (STD + 1e-8)` as numpy computes it with Python
    /// floats (the data keeps its dtype): the StandardScaler chunk transform, cached with the chunk.
    #[arg(long, value_parser = parse_scale, conflicts_with = "scaler")]
    scale: Option<(f64, f64)>,
    /// Standardize with a StandardScaler saved by `StandardScaler.save` (JSON, or
    /// insitubatch 0.2.0's npz of `<array>.mean` and `<array>.std`).
    #[arg(long, value_name = "FILE")]
    scaler: Option<std::path::PathBuf>,
}

/// The spec's `read_policy` as flags (durations in seconds, as on every surface).
#[derive(Args, Debug, Clone)]
struct ReadPolicyArgs {
    /// Attempts after the first for a transient failure.
    #[arg(long, default_value_t = spec().read_policy.retries)]
    retries: u32,
    /// First backoff, seconds; doubles per attempt.
    #[arg(long, default_value_t = spec().read_policy.backoff_s)]
    backoff_s: f64,
    /// A request with no answer after this many seconds is a transient failure.
    #[arg(long, default_value_t = spec().read_policy.request_timeout_s)]
    request_timeout_s: f64,
    /// Ranges of one shard at most this many bytes apart are read by one request.
    #[arg(long, default_value_t = spec().read_policy.coalesce_gap_bytes)]
    coalesce_gap_bytes: u64,
    /// A coalesced request spans at most this many bytes (0: every inner chunk alone).
    #[arg(long, default_value_t = spec().read_policy.coalesce_max_bytes)]
    coalesce_max_bytes: u64,
    /// Stored bytes read ahead for a shard's inner chunks a pass needs soon (0: off);
    /// default: a quarter of the residency floor.
    #[arg(long)]
    read_ahead_bytes: Option<u64>,
    /// Never send a second request for a slow read (hedging is on for remote stores).
    #[arg(long = "no-hedge", action = clap::ArgAction::SetFalse)]
    hedge: bool,
}

/// The spec's defaults, which the flags show and start from.
fn spec() -> DatasetSpec {
    DatasetSpec::default()
}

fn parse_scale(s: &str) -> Result<(f64, f64), String> {
    let parts: Vec<&str> = s.split(',').collect();
    let [m, sd] = parts.as_slice() else { return Err(format!("expected MEAN,STD, got {s:?}")) };
    let m: f64 = m.trim().parse().map_err(|e| format!("mean {m:?}: {e}"))?;
    let sd: f64 = sd.trim().parse().map_err(|e| format!("std {sd:?}: {e}"))?;
    Ok((m, sd))
}

/// Train, val and test fractions, shown and parsed as `0.8,0.1,0.1`.
#[derive(Debug, Clone, Copy)]
struct Fractions((f64, f64, f64));

fn parse_fractions(s: &str) -> Result<Fractions, String> {
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
fn parse_range(s: &str) -> Result<(u64, u64), String> {
    let parse = |x: &str| x.trim().parse::<u64>().map_err(|e| format!("{x:?} is not a sample index ({e})"));
    match s.split_once(',') {
        Some((a, b)) => Ok((parse(a)?, parse(b)?)),
        None => Err(format!("expected START,STOP, got {s:?}")),
    }
}

/// The numbers of a per-sample text file (whitespace or commas between them); the engine
/// checks their count and range.
fn per_sample_numbers(path: &Path) -> Result<Vec<f64>> {
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
fn parse_axis_sizes(s: &str) -> Result<AxisSizes, String> {
    parse_patch_axis_sizes(s).map(AxisSizes).map_err(|e| e.to_string())
}

/// An axis word, read by core's one rule (digits: an index; else a dimension name).
#[allow(clippy::unnecessary_wraps, reason = "clap's value parsers return a Result")]
fn parse_axis(s: &str) -> Result<PatchAxis, String> {
    Ok(PatchAxis::parse(s))
}

fn parse_kv(s: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .map(|(k, v)| (k.trim().to_string(), v.to_string()))
        .ok_or_else(|| format!("expected KEY=VALUE, got {s:?}"))
}

/// `--sel DIM=LO,HI` or `DIM=[A,B,...]` as core's selection (`LabelSel::from_arg`).
fn parse_sel(s: &str) -> Result<LabelSel, String> {
    LabelSel::from_arg(s).map_err(|e| e.to_string())
}

/// An engine error as the CLI says it: option names as flags (`--patch-mode`), through core's
/// one rendering of an option error's text.
fn render_error(e: &insitubatch_native::core::Error) -> String {
    e.message_in(&flag_of)
}

/// The flag of a spec option (`read_policy.backoff_s` → `--backoff-s`, `shuffle` →
/// `--no-shuffle`), read from clap's own definition: the flags are the spec's fields, so a
/// field's flag is the argument with its name. A path the CLI has no flag for stays as it is.
fn flag_of(path: &str) -> String {
    use clap::CommandFactory;
    let name = path.rsplit('.').next().unwrap_or(path);
    let cli = Cli::command();
    let flag = cli
        .get_subcommands()
        .flat_map(clap::Command::get_arguments)
        .find(|a| a.get_id() == name)
        .and_then(clap::Arg::get_long)
        .map(|long| format!("--{long}"));
    flag.unwrap_or_else(|| path.to_string())
}

impl RunArgs {
    /// The spec these flags describe (`bench`'s fractions default to the whole array); the
    /// files of per-sample values are read here.
    fn spec(&self, default_fractions: (f64, f64, f64)) -> Result<DatasetSpec> {
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
    fn storage(&self, url: &str) -> Result<Arc<dyn Storage>> {
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
    fn concatenated(&self, url: &str) -> Result<Option<Vec<JoinPart>>> {
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
    fn joined(&self, url: &str) -> Result<Option<Vec<(String, JoinPart)>>> {
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
    fn chunk_transforms(&self) -> Result<Vec<insitubatch_native::core::transform::Scoped>> {
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

/// The run's configuration as JSON: the spec as serde writes it, with the threads the pool
/// has and the epoch the run starts at.
fn config_json(spec: &DatasetSpec, threads: usize, epoch: u64) -> Result<serde_json::Value> {
    let mut config = serde_json::to_value(spec)?;
    if let Some(o) = config.as_object_mut() {
        o.insert("threads".to_owned(), json!(threads));
        o.insert("epoch".to_owned(), json!(epoch));
    }
    Ok(config)
}

/// Open the store these flags name with `spec` (and a caller's own disk tier, if given).
fn open_ds(url: &str, knobs: &RunArgs, spec: DatasetSpec, tier: Option<Arc<dyn TierOpener>>) -> Result<NativeDataset> {
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

fn main() -> ExitCode {
    std::panic::set_hook(Box::new(|info| {
        let _ = writeln!(std::io::stderr(), "error: internal error: {info}");
    }));
    let cli = Cli::parse();
    let default = if cli.verbose { "info" } else { "warn" };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).init();
    match run(cli.command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => report_error(&e),
    }
}

/// The exit of a failed command: an engine error names its kind (`error[invalid_option]: ...`)
/// and its options as flags, and exits with 2 where a flag's value was refused (an option
/// out of bounds, an array the store lacks: as clap does for a bad flag), else 1; any other
/// error as it is, with 1.
/// The engine's error `c` is (or holds, as `NativeError::Core`), if any.
fn engine_error<'a>(c: &'a (dyn std::error::Error + 'static)) -> Option<&'a insitubatch_native::core::Error> {
    c.downcast_ref::<insitubatch_native::core::Error>().or_else(|| match c.downcast_ref() {
        Some(insitubatch_native::NativeError::Core(e)) => Some(e),
        _ => None,
    })
}

fn report_error(e: &anyhow::Error) -> ExitCode {
    use insitubatch_native::core::ErrorKind;
    // The chain's contexts (`--resume FILE: ...`), then the engine's error as the CLI says it.
    let mut parts = Vec::new();
    let mut kind = None;
    for c in e.chain() {
        if let Some(err) = engine_error(c) {
            parts.push(render_error(err));
            kind = Some(err.kind());
            break;
        }
        parts.push(c.to_string());
    }
    let Some(kind) = kind else {
        let _ = writeln!(std::io::stderr(), "error: {e:#}");
        return ExitCode::from(1);
    };
    let _ = writeln!(std::io::stderr(), "error[{kind}]: {}", parts.join(": "));
    let input = [ErrorKind::InvalidOption, ErrorKind::ArrayNotFound, ErrorKind::NotAnArray];
    ExitCode::from(if input.contains(&kind) { 2 } else { 1 })
}

fn run(cmd: Command) -> Result<()> {
    match cmd {
        Command::Demo { url, resume, knobs } => cmd_demo(url, &resume, &knobs),
        Command::Describe { url, iterations, json, probe, sweep_block_chunks, knobs } => {
            let ds = open_ds(&url, &knobs, knobs.spec(spec().fractions)?, None)?;
            let report = ds.describe(iterations)?;
            let probed = probe.map(|chunks| ds.probe(Split::Train, chunks)).transpose()?;
            let curve = ds.quality_curve(&sweep_block_chunks)?;
            if json {
                let mut doc = serde_json::to_value(&report)?;
                if let Some(p) = &probed {
                    doc["probe"] = serde_json::to_value(p)?;
                }
                if !curve.is_empty() {
                    doc["quality_curve"] = serde_json::to_value(&curve)?;
                }
                outln!("{}", serde_json::to_string_pretty(&doc)?);
            } else {
                outln!("{}", report.render());
                if let Some(p) = &probed {
                    outln!("{}", p.render());
                }
                if !curve.is_empty() {
                    outln!("{}", render_quality_curve(&curve));
                }
            }
            Ok(())
        }
        Command::Bench {
            url,
            epochs,
            decode_limit,
            json,
            digest,
            hold,
            step_ms,
            pause_after_chunks,
            resume,
            knobs,
        } => {
            if decode_limit {
                cmd_decode_limit(&url, &knobs, json)
            } else {
                let run = BenchRun { epochs, as_json: json, digest, hold, step_ms, pause_after_chunks };
                cmd_bench(&url, &run, &resume, &knobs)
            }
        }
    }
}

/// `describe --sweep-block-chunks` as a table, one row per value asked.
fn render_quality_curve(curve: &[insitubatch_native::QualityPoint]) -> String {
    let mut out =
        String::from("what if block_chunks were ...\n  block_chunks  widened  quality  floor       est. peak\n");
    for p in curve {
        out.push_str(&format!(
            "  {:>12}  {:>7}  {:>7}  {:<10}  {}\n",
            p.block_chunks,
            p.block_chunks_widened,
            p.quality.map_or_else(|| "n/a".to_string(), |q| format!("{q:.3}")),
            insitubatch_native::human_bytes(p.floor_bytes),
            insitubatch_native::human_bytes(p.estimated_peak_bytes)
        ));
    }
    out
}

fn cmd_demo(url: Option<String>, resume: &ResumeArgs, knobs: &RunArgs) -> Result<()> {
    let mut session = Session::new(resume)?;
    let url = match url {
        Some(u) => u,
        None => {
            let path = demo::default_demo_path();
            if path.join(".complete").exists() {
                outln!("demo store: {}", path.display());
            } else {
                outln!("writing demo store to {} ...", path.display());
                let t = Instant::now();
                demo::write_demo_store(&path)?;
                outln!("written in {:.1}s", t.elapsed().as_secs_f64());
            }
            path.display().to_string()
        }
    };
    let ds = open_ds(&url, knobs, knobs.spec(spec().fractions)?, None)?;
    outln!("{}", ds.describe(1)?.render());
    session.on_signal_write(&ds, resume.checkpoint.as_deref())?;
    let t0 = Instant::now();
    let mut it = session.pass(&ds)?;
    let bar = indicatif::ProgressBar::new(it.n_batches() as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "train epoch {prefix} [{bar:40}] {pos}/{len} batches {per_sec} eta {eta}",
        )
        .map_err(|e| anyhow!("{e}"))?
        .progress_chars("=> "),
    );
    bar.set_prefix(session.first_epoch(knobs.epoch).to_string());
    let (mut batches, mut samples, mut bytes, mut ttfb) = (0usize, 0u64, 0u64, None);
    while let Some(b) = it.next() {
        let b = b?;
        ttfb.get_or_insert_with(|| t0.elapsed().as_secs_f64());
        batches += 1;
        samples += b.len() as u64;
        bytes += b.arrays.values().map(|a| a.data.len() as u64).sum::<u64>();
        bar.inc(1);
        session.finished(&it, &b);
    }
    bar.finish();
    let secs = t0.elapsed().as_secs_f64();
    if let Some(stats) = ds.last_pass() {
        outln!("{}", stats.summary());
    }
    outln!(
        "result: {batches} batches, {samples} samples, {:.1} MB/s, first batch after {:.3}s, {:.2}s total",
        bytes as f64 / 1e6 / secs.max(1e-9),
        ttfb.unwrap_or(0.0),
        secs
    );
    Ok(())
}

/// CPU seconds (user + system, every thread) this process has spent so far, from
/// `/proc/self/stat` in USER_HZ ticks (100 per second on Linux): what a run costs the machine
/// beside its wall time, which a parent cannot read once the process has exited. `None` off
/// Linux.
fn process_cpu_s() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command's closing parenthesis: utime and stime are the 12th and 13th.
    let mut fields = stat.get(stat.rfind(')')? + 2..)?.split(' ').skip(11);
    let ticks = fields.next()?.parse::<u64>().ok()? + fields.next()?.parse::<u64>().ok()?;
    Some(ticks as f64 / 100.0)
}

fn peak_rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse::<u64>().ok()))
        })
        .map_or(0, |kb| kb * 1024)
}

fn cmd_bench(url: &str, run: &BenchRun, resume: &ResumeArgs, knobs: &RunArgs) -> Result<()> {
    let (epochs, as_json) = (run.epochs, run.as_json);
    let mut session = Session::new(resume)?;
    let resumed = session.resume.clone();
    let first_epoch = session.first_epoch(knobs.epoch);
    // `bench` times the whole array unless told otherwise.
    let spec = knobs.spec((1.0, 0.0, 0.0))?;
    let tier: Option<Arc<dyn TierOpener>> = match run.pause_after_chunks {
        None => None,
        Some(after) => {
            let flags = spec.resolve()?.cache.ok_or_else(|| anyhow!("--pause-after-chunks needs --cache-dir"))?;
            Some(Arc::new(PauseAfter { cache: insitubatch_native::CacheOptions::from_flags(&flags)?, after }))
        }
    };
    let t_open = Instant::now();
    let ds = open_ds(url, knobs, spec.clone(), tier)?;
    let open_s = t_open.elapsed().as_secs_f64();
    // Before --hold's line: a signal after it finds a checkpoint to write.
    session.on_signal_write(&ds, resume.checkpoint.as_deref())?;
    if run.hold {
        outln!("opened {}", std::process::id());
        let _ = std::io::stdout().flush();
        let mut sink = Vec::new();
        let _ = std::io::Read::read_to_end(&mut std::io::stdin(), &mut sink);
    }
    let report = ds.describe(1)?;
    let threads = ds.runtime().pool.rayon().current_num_threads();
    let variables: Vec<String> = ds.dataset().variables().iter().map(|v| v.label.clone()).collect();
    let mut rows = Vec::new();
    for k in 0..epochs {
        let row = bench_epoch(&ds, run, &mut session, first_epoch + k, k == 0, t_open)?;
        rows.push(row);
    }
    let mut config = config_json(&spec, threads, knobs.epoch)?;
    config["epochs"] = json!(epochs);
    if let Some(c) = &resumed {
        config["epoch"] = json!(first_epoch);
        config["resume"] = serde_json::to_value(c)?;
    }
    let out = json!({
        "url": url,
        "variables": variables,
        "config": config,
        "epochs": rows,
        "peak_rss_bytes": peak_rss_bytes(),
        "process_cpu_s": process_cpu_s(),
        "open_s": open_s,
        "disk_tier": ds.dataset().tier_counters(),
        "describe_estimated_peak_bytes": report.memory.estimated_peak_bytes,
    });
    if as_json {
        outln!("{}", serde_json::to_string(&out)?);
    } else {
        outln!(
            "peak RSS {} (describe estimated {})",
            insitubatch_native::human_bytes(peak_rss_bytes()),
            insitubatch_native::human_bytes(report.memory.estimated_peak_bytes)
        );
    }
    Ok(())
}

/// One epoch of `bench`: its JSON row (printed as a line too unless `--json`).
fn bench_epoch(
    ds: &NativeDataset,
    run: &BenchRun,
    session: &mut Session,
    epoch: u64,
    first: bool,
    t_open: Instant,
) -> Result<serde_json::Value> {
    ds.set_epoch(epoch);
    let t0 = Instant::now();
    let (mut samples, mut bytes, mut ttfb) = (0u64, 0u64, None);
    let mut digest = run.digest.then(insitubatch_native::BatchDigest::default);
    let mut it = session.pass(ds)?;
    while let Some(b) = it.next() {
        let b = b?;
        ttfb.get_or_insert_with(|| t0.elapsed().as_secs_f64());
        samples += b.len() as u64;
        bytes += b.arrays.values().map(|a| a.data.len() as u64).sum::<u64>();
        if let Some(d) = &mut digest {
            d.update(&b);
        }
        if run.step_ms > 0 {
            std::thread::sleep(std::time::Duration::from_millis(run.step_ms));
        }
        session.finished(&it, &b);
    }
    let secs = t0.elapsed().as_secs_f64().max(1e-9);
    let last = ds.last_pass();
    let stage = last.as_ref().map_or_else(|| "unknown".to_string(), |s| s.limiting_stage.to_string());
    let mut row = json!({
        "epoch": epoch,
        "kind": if first { "cold" } else { "warm" },
        "seconds": secs,
        "samples": samples,
        "decoded_bytes": bytes,
        "mb_per_s": bytes as f64 / 1e6 / secs,
        "samples_per_s": samples as f64 / secs,
        "ttfb_s": ttfb.unwrap_or(0.0),
        // From the process's start of work (open included): meaningful for the first epoch only.
        "first_batch_since_start_s": first.then(|| (t0 - t_open).as_secs_f64() + ttfb.unwrap_or(0.0)),
        "limiting_stage": stage,
    });
    if let Some(p) = &last {
        row["storage_reads"] = json!(p.storage_reads);
        row["revived_chunks"] = json!(p.revived_chunks);
        row["reread_chunks"] = json!(p.reread_chunks);
        row["resident_peak_chunks"] = json!(p.depths.resident_peak_chunks);
        row["dropped_samples"] = json!(p.dropped_samples);
        row["pass"] = serde_json::to_value(p)?;
    }
    if let Some(d) = digest {
        row["digest"] = json!(d.finish());
    }
    if !run.as_json {
        outln!(
            "epoch {epoch} ({}): {samples} samples in {secs:.2}s, {:.1} MB/s, {:.0} samples/s, ttfb {:.3}s, limited by {}",
            row["kind"].as_str().unwrap_or(""),
            row["mb_per_s"].as_f64().unwrap_or(0.0),
            row["samples_per_s"].as_f64().unwrap_or(0.0),
            ttfb.unwrap_or(0.0),
            row["limiting_stage"].as_str().unwrap_or("")
        );
        if let Some(s) = ds.last_pass() {
            outln!("  {}", s.summary());
        }
    }
    Ok(row)
}

/// Opens the disk tier of `--pause-after-chunks`.
#[derive(Debug)]
struct PauseAfter {
    cache: insitubatch_native::CacheOptions,
    after: u64,
}

impl TierOpener for PauseAfter {
    fn open(&self, arrays: &[ArrayIdentity]) -> insitubatch_native::core::Result<Arc<dyn ChunkTier>> {
        let inner = self.cache.open(arrays)?;
        Ok(Arc::new(PausingTier { inner, after: self.after, admitted: AtomicU64::new(0), written: AtomicU64::new(0) }))
    }
}

/// The disk tier, stopped at a known point so a test can SIGKILL a writer with exactly
/// `after` chunks in the cache, instead of sleeping and hoping the kill lands mid-epoch.
/// Only the first `after` writes reach the tier; the one that completes the count prints
/// `paused after N chunks`, and it and every later write block forever, so nothing touches
/// the directory after the announcement.
#[derive(Debug)]
struct PausingTier {
    inner: Arc<dyn ChunkTier>,
    after: u64,
    admitted: AtomicU64,
    written: AtomicU64,
}

fn block_forever() -> ! {
    loop {
        std::thread::park();
    }
}

impl ChunkTier for PausingTier {
    fn revive(&self, array: u32, chunk: u64, dtype: DType, shape: &[usize]) -> CoreResult<Option<bytes::Bytes>> {
        self.inner.revive(array, chunk, dtype, shape)
    }

    fn store(
        &self,
        array: u32,
        chunk: u64,
        dtype: DType,
        shape: &[usize],
        data: &[u8],
    ) -> CoreResult<Option<bytes::Bytes>> {
        if self.admitted.fetch_add(1, Ordering::SeqCst) >= self.after {
            block_forever();
        }
        let stored = self.inner.store(array, chunk, dtype, shape, data)?;
        if self.written.fetch_add(1, Ordering::SeqCst) + 1 == self.after {
            outln!("paused after {} chunks", self.after);
            let _ = std::io::stdout().flush();
            block_forever();
        }
        Ok(stored)
    }

    fn persists(&self) -> bool {
        self.inner.persists()
    }

    fn counters(&self) -> TierCounters {
        self.inner.counters()
    }

    fn describe(&self) -> String {
        self.inner.describe()
    }

    fn warnings(&self) -> Vec<String> {
        self.inner.warnings()
    }
}

/// Fetch every stored chunk of the first variable, then decode them all with zarrs on all
/// cores: the ceiling any loader can reach on this machine.
fn cmd_decode_limit(url: &str, knobs: &RunArgs, as_json: bool) -> Result<()> {
    use zarrs::array::{Array, ArrayMetadata, ArrayToBytesCodecTraits, CodecOptions};
    let rt = insitubatch_native::NativeRuntime::new(knobs.threads)?;
    let storage = knobs.storage(url)?;
    let first = match knobs.variables.first() {
        Some(v) => v.clone(),
        None => {
            let arrays = rt.block_on(insitubatch_native::core::internals::open_arrays(storage.as_ref(), None))?;
            arrays.first().map(|a| a.path().to_string()).ok_or_else(|| anyhow!("no arrays: {url}"))?
        }
    };
    let path = first.trim_matches('/').to_string();
    let key = |name: &str| if path.is_empty() { name.to_string() } else { format!("{path}/{name}") };
    let meta: ArrayMetadata = match rt.block_on(storage.get(&key("zarr.json"))).map_err(|e| anyhow!("{e}: {url}"))? {
        Some(b) => serde_json::from_slice(&b).context("malformed zarr.json")?,
        None => match rt.block_on(storage.get(&key(".zarray"))).map_err(|e| anyhow!("{e}: {url}"))? {
            Some(b) => serde_json::from_slice(&b).context("malformed .zarray")?,
            None => bail!("no zarr array {first:?}: {url}"),
        },
    };
    let array =
        Array::new_with_metadata(Arc::new(zarrs::storage::store::MemoryStore::new()), &format!("/{path}"), meta)
            .map_err(|e| anyhow!("cannot read array {first:?} ({e}): {url}"))?;
    let grid = array.chunk_grid_shape().to_vec();
    let n: u64 = grid.iter().product();
    let coords: Vec<Vec<u64>> = (0..n)
        .map(|mut i| {
            let mut c = vec![0; grid.len()];
            for k in (0..grid.len()).rev() {
                c[k] = i % grid[k];
                i /= grid[k];
            }
            c
        })
        .collect();
    // 1. Fetch everything (not timed), concurrently on tokio.
    let keys: Vec<String> = coords.iter().map(|c| array.chunk_key(c).as_str().to_string()).collect();
    let fetched: Vec<Option<bytes::Bytes>> = rt
        .block_on(async {
            use futures::stream::{self, StreamExt, TryStreamExt};
            stream::iter(keys.iter().map(|k| storage.get(k))).buffered(knobs.max_inflight.max(1)).try_collect().await
        })
        .map_err(|e| anyhow!("{e}: {url}"))?;
    let chunks: Vec<(Vec<u64>, bytes::Bytes)> =
        coords.into_iter().zip(fetched).filter_map(|(c, b)| b.map(|b| (c, b))).collect();
    // 2. Decode everything, timed.
    let codecs = array.codecs();
    let opts = CodecOptions::default().with_concurrent_target(1);
    let pool = rt.pool.rayon();
    let threads = pool.current_num_threads();
    let t0 = Instant::now();
    let decoded: u64 = pool.install(|| {
        chunks
            .par_iter()
            .map(|(c, b)| -> Result<u64> {
                let shape = array.chunk_shape(c).map_err(|e| anyhow!("{e}"))?;
                let out = codecs
                    .decode(Cow::Borrowed(&b[..]), &shape, array.data_type(), array.fill_value(), &opts)
                    .map_err(|e| anyhow!("cannot decode chunk {c:?} ({e}): {url}"))?;
                let raw = out.into_fixed().map_err(|e| anyhow!("{e}"))?;
                Ok(raw.len() as u64)
            })
            .try_reduce(|| 0, |a, b| Ok(a + b))
    })?;
    let secs = t0.elapsed().as_secs_f64().max(1e-9);
    let mbs = decoded as f64 / 1e6 / secs;
    if as_json {
        outln!(
            "{}",
            json!({"decode_limit_mb_per_s": mbs, "threads": threads, "variable": first, "chunks": chunks.len(), "decoded_bytes": decoded, "seconds": secs})
        );
    } else {
        outln!(
            "decode limit: {mbs:.1} MB/s on {threads} threads ({} chunks of {first}, {decoded} bytes in {secs:.2}s)",
            chunks.len()
        );
    }
    Ok(())
}
