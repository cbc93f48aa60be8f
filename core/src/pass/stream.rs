//! The consumer's side of a pass: [`BatchStream`] yields batches, reports the pass's
//! stats and checkpoints, and ends the pass when dropped.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::AbortHandle;

use super::Delivered;
use crate::batch::Batch;
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::pool::PassId;
use crate::ranks::Checkpoint;
use crate::stats::{Depths, PassObserver, PassRecorder, PassStats, verdict};

/// The rank's side of a pass: what its stats report and where its checkpoints start.
#[derive(Debug, Clone)]
pub(crate) struct ShardInfo {
    pub rank: usize,
    /// Samples of this segment no rank draws (job-wide).
    pub dropped: u64,
    /// Samples consumed before this pass started (a same-world resume).
    pub skipped: u64,
    /// The checkpoint this pass started from (position 0 for a fresh pass).
    pub start: Checkpoint,
}

/// Where a finished pass leaves its stats.
pub(crate) type StatsSink = Arc<Mutex<Option<PassStats>>>;

/// The consumer's side of a pass: a stream of batches. Dropping it ends the pass.
pub struct BatchStream {
    pub(crate) rx: async_channel::Receiver<Result<Delivered>>,
    pub(crate) engine: Arc<Engine>,
    pub(crate) pass: PassId,
    pub(crate) abort: AbortHandle,
    pub(crate) recorder: Arc<PassRecorder>,
    pub(crate) started: Duration,
    pub(crate) last_returned: Option<Duration>,
    pub(crate) split: String,
    pub(crate) epoch: u64,
    pub(crate) prefetch_depth: usize,
    pub(crate) sink: StatsSink,
    /// Told of the report when the pass ends.
    pub(crate) observers: Arc<[Arc<dyn PassObserver>]>,
    pub(crate) finished: bool,
    pub(crate) n_batches: usize,
    pub(crate) shard: ShardInfo,
}

impl std::fmt::Debug for BatchStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BatchStream").field("split", &self.split).field("epoch", &self.epoch).finish()
    }
}

impl BatchStream {
    /// This pass as a `futures::Stream` of batches, for async callers (`StreamExt::next`,
    /// `try_for_each`, `tokio::select!`). Dropping the stream ends the pass. Boxed, so it is
    /// `Unpin` and `stream.next().await` works without pinning it first.
    pub fn into_stream(self) -> impl futures::Stream<Item = Result<Batch>> + Unpin {
        Box::pin(futures::stream::unfold(self, |mut s| async move { s.next_batch().await.map(|b| (b, s)) }))
    }

    /// Batches this pass will yield.
    pub fn len(&self) -> usize {
        self.n_batches
    }

    /// True when the pass yields nothing.
    pub fn is_empty(&self) -> bool {
        self.n_batches == 0
    }

    /// Batches gathered and waiting for the caller now (0 to `prefetch_depth`): the live
    /// queue depth a dashboard charts.
    pub fn queued(&self) -> usize {
        self.rx.len()
    }

    /// The next batch; `None` at the end of the epoch. After an error the stream ends.
    pub async fn next_batch(&mut self) -> Option<Result<Batch>> {
        if self.finished {
            return None;
        }
        let asked = self.engine.now();
        if let Some(prev) = self.last_returned {
            self.recorder.with(|r| r.times.consumer_s += asked.saturating_sub(prev).as_secs_f64());
        }
        let queued = self.rx.len();
        self.recorder.with(|r| {
            r.queue_samples += 1;
            r.queue_empty += u64::from(queued == 0);
            r.queue_full_enough += u64::from(queued * 2 >= self.prefetch_depth);
            r.queue_peak = r.queue_peak.max(queued);
        });
        let item = self.rx.recv().await;
        let got = self.engine.now();
        self.recorder.with(|r| r.times.consumer_wait_s += got.saturating_sub(asked).as_secs_f64());
        match item {
            Ok(Ok(d)) => {
                let fetch_share = self.recorder.with(|r| {
                    let (f, dec) = (r.times.fetch_wait_s, r.times.decode_s + r.times.assemble_s);
                    if f + dec > 0.0 { f / (f + dec) } else { 0.5 }
                });
                self.recorder.with(|r| {
                    d.timeline.attribute(asked, got, fetch_share, &mut r.blocked);
                    if r.batches > 0 {
                        r.batch_waits.record(got.saturating_sub(asked).as_secs_f64());
                    }
                    r.batches += 1;
                    r.samples += d.batch.len() as u64;
                    r.batch_bytes += d.batch.arrays.values().map(|a| a.data.len() as u64).sum::<u64>();
                    r.first_batch_at.get_or_insert(got);
                    r.last_batch_at = Some(got);
                });
                self.last_returned = Some(self.engine.now());
                Some(Ok(d.batch))
            }
            Ok(Err(e)) => {
                self.finish();
                Some(Err(e))
            }
            Err(_) => {
                let received = self.recorder.with(|r| r.batches);
                self.finish();
                // The driver closes the channel only after its last batch or an error it sent;
                // closing early means it died (a panic, a runtime shut down). Never end an epoch
                // short without saying so.
                (received < self.n_batches).then(|| {
                    Err(Error::Cancelled(format!(
                        "the loader stopped after {received} of {} batches of epoch {} ({}); the runtime shut down \
                         or the driver failed unexpectedly",
                        self.n_batches, self.epoch, self.split
                    )))
                })
            }
        }
    }

    /// Where this pass stands, between batches: a resume from it (any world size, in a fresh
    /// process) continues after the last batch this stream returned. Every rank of a job that
    /// steps in lockstep takes the same checkpoint.
    pub fn checkpoint(&self) -> Checkpoint {
        let r = self.recorder.snapshot();
        let s = &self.shard.start;
        Checkpoint { position: s.position + r.samples, batches: s.batches + r.batches as u64, ..s.clone() }
    }

    /// Stats of this pass so far.
    pub fn stats(&self) -> PassStats {
        let r = self.recorder.snapshot();
        let counters = self.engine.pool.counters();
        let (limiting_stage, advice, consumer_idle) = verdict(&r, self.engine.max_inflight);
        let end = r.last_batch_at.unwrap_or(self.started);
        PassStats {
            split: self.split.clone(),
            epoch: self.epoch,
            rank: self.shard.rank,
            world_size: self.shard.start.world_size,
            dropped_samples: self.shard.dropped,
            resumed_at: self.shard.skipped,
            batches: r.batches,
            samples: r.samples,
            batch_bytes: r.batch_bytes,
            cache_hits: r.hits,
            cache_misses: r.misses,
            reread_chunks: r.reread_chunks,
            revived_chunks: r.revived_chunks,
            storage_reads: r.storage_reads,
            index_reads: r.index_reads,
            tiles_read: r.tiles_read,
            bytes_fetched: r.bytes_fetched,
            gap_bytes: r.gap_bytes,
            tiles_read_ahead: r.tiles_read_ahead,
            hedged_reads: r.hedged_reads,
            hedge_wins: r.hedge_wins,
            decoded_bytes: r.decoded_bytes,
            bad_chunks: r.bad_chunks,
            wall_s: (end.saturating_sub(self.started)).as_secs_f64(),
            ttfb_s: r.first_batch_at.map(|t| (t.saturating_sub(self.started)).as_secs_f64()),
            batch_wait_p50_s: r.batch_waits.quantile(0.50),
            batch_wait_p95_s: r.batch_waits.quantile(0.95),
            batch_wait_p99_s: r.batch_waits.quantile(0.99),
            blocked_s: crate::stats::Stage::ALL.iter().copied().zip(r.blocked).collect(),
            depths: Depths {
                queue_capacity: self.prefetch_depth,
                queue_now: self.queued(),
                queue_peak: r.queue_peak,
                queue_samples: r.queue_samples,
                queue_empty: r.queue_empty,
                queue_full_enough: r.queue_full_enough,
                decode_queue_peak: r.decode_queue_peak,
                inflight_peak: r.inflight_peak,
                max_inflight: self.engine.max_inflight,
                read_window: self.engine.reads.window.target(),
                read_window_reason: self.engine.reads.window.reason(),
                decode_threads: self.engine.runtime.pool.parallelism().get(),
                read_ahead_peak_bytes: self.engine.reads.ahead.peak(),
                resident_peak_chunks: counters.resident_peak_chunks,
                resident_peak_bytes: counters.resident_peak_bytes,
                budget_bytes: self.engine.pool.budget(),
                starved_frac: Depths::share(r.queue_empty as f64, r.queue_samples as f64),
                fed_frac: Depths::share(r.queue_full_enough as f64, r.queue_samples as f64),
            },
            times: r.times.totalled(),
            limiting_stage,
            advice,
            consumer_idle,
        }
    }

    fn finish(&mut self) {
        if self.finished {
            return;
        }
        self.finished = true;
        self.abort.abort();
        self.engine.pool.close_pass(self.pass);
        let stats = self.stats();
        tracing::info!("{}", stats.summary());
        for o in self.observers.iter() {
            o.pass_ended(&stats);
        }
        *self.sink.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(stats);
    }

    /// End the pass now (also what dropping the stream does).
    pub fn close(mut self) {
        self.finish();
    }
}

impl Drop for BatchStream {
    fn drop(&mut self) {
        self.finish();
    }
}
