//! The CLI's commands, one file per concern:
//!
//! - this file: the command line ([`Cli`], [`Command`]) and [`run`], which dispatches it
//!   (`describe` is run here: it opens, reports and prints);
//! - `args.rs`: the flags every command that opens a store takes ([`RunArgs`]: core's
//!   `DatasetSpec` as flags, and what only the command line has), their parsers, and
//!   opening the store they name;
//! - `resume.rs`: `--resume` and `--checkpoint` ([`ResumeArgs`], `Session`): the first pass
//!   resumes a checkpoint file, a signal writes the pass's checkpoint and exits;
//! - `demo.rs`, `bench.rs`, `decode_limit.rs`: the `demo` and `bench` commands, and
//!   `bench --decode-limit`;
//! - `output.rs`: what the CLI prints: errors (kinds, options as flags, exit statuses), the
//!   run's configuration, `describe --sweep-block-chunks`'s table;
//! - `pausing.rs`: a disk tier for tests only, reached by the hidden `bench
//!   --pause-after-chunks` (native/tests/disk_tier.rs SIGKILLs a writer it paused).

/// `println!` that ignores a closed stdout (`| head`) instead of panicking.
macro_rules! outln {
    ($($arg:tt)*) => {{
        let mut o = std::io::stdout().lock();
        let _ = writeln!(o, $($arg)*);
    }};
}

mod args;
mod bench;
mod decode_limit;
mod demo;
mod output;
mod pausing;
mod resume;

pub(crate) use output::report_error;

use std::io::Write;

use anyhow::Result;
use clap::{Parser, Subcommand};
use insitubatch_native::core::Split;

use self::args::{RunArgs, open_ds, spec};
use self::bench::{BenchRun, cmd_bench};
use self::decode_limit::cmd_decode_limit;
use self::demo::cmd_demo;
use self::output::render_quality_curve;
use self::resume::ResumeArgs;

#[derive(Parser, Debug)]
#[command(name = "insitubatch", version, about = "Shuffled, split-aware training batches straight from Zarr stores")]
pub(crate) struct Cli {
    /// Log progress (info level); RUST_LOG overrides.
    #[arg(short, long, global = true)]
    pub(crate) verbose: bool,
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Subcommand, Debug)]
pub(crate) enum Command {
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

pub(crate) fn run(cmd: Command) -> Result<()> {
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
