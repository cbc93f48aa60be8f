//! `--resume` and `--checkpoint`: the first train pass resumes a checkpoint file, and a
//! signal writes the checkpoint of the pass in progress and exits.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use anyhow::{Context, Result};
use clap::Args;
use insitubatch_native::core::Split;
use insitubatch_native::{Batch, BatchIter, Checkpoint, NativeDataset};

use super::pausing::block_forever;

/// Resuming and checkpointing the train pass of a command that runs epochs (`demo`, `bench`).
#[derive(Args, Debug, Clone)]
pub(crate) struct ResumeArgs {
    /// Continue the pass a checkpoint file holds (JSON: written by --checkpoint, or Python's
    /// `state_dict()` / JS's `checkpoint()` saved to a file) from where it stopped; the run
    /// starts at its epoch. Give the options it was taken with (seed, batch size, ranks,
    /// fractions): another seed or batch size is refused.
    #[arg(long, value_name = "FILE", conflicts_with = "epoch")]
    pub(super) resume: Option<PathBuf>,
    /// On SIGINT or SIGTERM, write the checkpoint of the pass in progress to FILE (after the
    /// last finished batch), say so on stderr, and exit with status 130 (SIGINT) or 143
    /// (SIGTERM); `--resume FILE` continues from there.
    #[arg(long, value_name = "FILE")]
    pub(super) checkpoint: Option<PathBuf>,
    /// For tests, hidden from --help: print `samples EPOCH BATCH i,j,...` after each batch.
    #[arg(long, hide = true)]
    pub(super) print_sample_indices: bool,
    /// For tests, hidden from --help: after N batches, print `paused after N batches` and
    /// block until a signal ends the process (a known point to interrupt it at).
    #[arg(long, hide = true, value_name = "N")]
    pub(super) pause_after_batches: Option<u64>,
}

/// The train passes of a run as `--resume` and `--checkpoint` see them: the first pass resumes
/// the checkpoint file, and after each finished batch the pass's checkpoint is recorded where
/// a signal finds it.
pub(super) struct Session {
    /// The checkpoint the first pass resumes.
    pub(super) resume: Option<Checkpoint>,
    /// The checkpoint of the pass in progress after its last finished batch. A signal takes
    /// it and holds the lock until the process exits, so no batch is finished (or printed)
    /// after the checkpoint that is written.
    pub(super) at: Arc<Mutex<Option<Checkpoint>>>,
    pub(super) print_sample_indices: bool,
    pub(super) pause_after_batches: Option<u64>,
    /// Batches finished in this run.
    pub(super) finished: u64,
}

impl Session {
    /// Reads the `--resume` file.
    pub(super) fn new(args: &ResumeArgs) -> Result<Self> {
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
    pub(super) fn first_epoch(&self, epoch: u64) -> u64 {
        self.resume.as_ref().map_or(epoch, |c| c.epoch)
    }

    /// With `--checkpoint FILE`: on SIGINT or SIGTERM (Ctrl-C elsewhere), write the checkpoint
    /// of the pass in progress to FILE and exit. Call before the first pass.
    pub(super) fn on_signal_write(&self, ds: &NativeDataset, path: Option<&Path>) -> Result<()> {
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
    pub(super) fn pass(&mut self, ds: &NativeDataset) -> Result<BatchIter> {
        let it = match self.resume.take() {
            Some(c) => ds.resume(&c)?,
            None => ds.train()?,
        };
        *lock(&self.at) = it.checkpoint();
        Ok(it)
    }

    /// The caller finished its step on `b`, the latest batch of `it`: record where the pass
    /// stands (and print the batch's samples, hidden), then the hidden pause.
    pub(super) fn finished(&mut self, it: &BatchIter, b: &Batch) {
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

pub(super) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A signal's end of a run with `--checkpoint`: write the pass's checkpoint (core's JSON, to a
/// temporary file renamed over `path`), say where, and exit with `status` (1 if it could not
/// be written). The lock is held to the end, so the run finishes no batch after it.
pub(super) fn exit_with_checkpoint(at: &Mutex<Option<Checkpoint>>, path: &Path, name: &str, status: i32) -> ! {
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
