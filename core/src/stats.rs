//! What a pass did, and which stage limited it.
//!
//! Two kinds of numbers. *Stage totals* (fetch wait, decode, gather, ...) are summed over
//! concurrent work and can exceed wall time. The *verdict* uses something sharper: every
//! second the consumer waited for a batch is attributed to the stage that batch was
//! waiting on at that moment (its critical path: admission → permit → fetch → decode →
//! gather → batch transforms). A CPU-bound batch transform is therefore blamed on itself,
//! never on the store (insitubatch 0.2.0's open bug #95).

use std::sync::Mutex;
use std::time::Duration;

use serde::Serialize;

/// Stages a wait can be attributed to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum Stage {
    /// Waiting for a read-ahead slot in this pass's residency reservation.
    Residency,
    /// Waiting for storage (and for a `max_inflight` permit held by reads).
    Store,
    /// Waiting for decode, assembly and chunk transforms on the thread pool.
    Decode,
    /// Waiting for the gather copy.
    Gather,
    /// Waiting for batch transforms.
    BatchTransform,
}

impl Stage {
    /// Every stage, in pipeline order.
    pub const ALL: [Stage; 5] = [Stage::Residency, Stage::Store, Stage::Decode, Stage::Gather, Stage::BatchTransform];
    /// Snake-case name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Residency => "residency",
            Self::Store => "store",
            Self::Decode => "decode",
            Self::Gather => "gather",
            Self::BatchTransform => "batch_transform",
        }
    }
}

/// What limited a pass: a pipeline [`Stage`], the caller's own loop, or nothing clear.
/// Serialized as the same snake-case words (`store`, `consumer`, `unknown`, ...).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum LimitingStage {
    /// The caller's training step: the loader kept up, which is the goal.
    Consumer,
    /// Waiting for room in the residency reservation.
    Residency,
    /// Waiting for storage.
    Store,
    /// Waiting for decode and chunk transforms.
    Decode,
    /// Waiting for the gather copy.
    Gather,
    /// Waiting for batch transforms.
    BatchTransform,
    /// No batches, or no stage clearly dominates.
    #[default]
    Unknown,
}

impl LimitingStage {
    /// Every limiting stage, in declaration order (exporters set one series per stage).
    pub const ALL: [Self; 7] =
        [Self::Consumer, Self::Residency, Self::Store, Self::Decode, Self::Gather, Self::BatchTransform, Self::Unknown];

    /// Snake-case name, as serialized.
    pub fn name(self) -> &'static str {
        match self {
            Self::Consumer => "consumer",
            Self::Unknown => "unknown",
            Self::Residency => Stage::Residency.name(),
            Self::Store => Stage::Store.name(),
            Self::Decode => Stage::Decode.name(),
            Self::Gather => Stage::Gather.name(),
            Self::BatchTransform => Stage::BatchTransform.name(),
        }
    }
}

impl From<Stage> for LimitingStage {
    fn from(s: Stage) -> Self {
        match s {
            Stage::Residency => Self::Residency,
            Stage::Store => Self::Store,
            Stage::Decode => Self::Decode,
            Stage::Gather => Self::Gather,
            Stage::BatchTransform => Self::BatchTransform,
        }
    }
}

impl std::fmt::Display for LimitingStage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Summed stage seconds (task-seconds: concurrent work adds up).
// Python's `StageTimes` is a dataclass of these fields (tools/boundary-types writes it from the
// `x-python` extension), in `order`: insitubatch 0.2.0's fields, then ours as they were added
// (its signature); a field not listed goes last. `producer_s` is a property there: the
// engine's value for times from a pass, `StageTimes::producer_seconds` (through the extension)
// for times built by hand.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[cfg_attr(
    feature = "schema",
    schemars(extend("x-python" = {"order": [
        "fetch_wait_s", "admission_parked_s", "decode_s", "assemble_s", "gather_s", "batch_transform_s", "consumer_s",
        "consumer_wait_s"
    ]}))
)]
pub struct StageTimes {
    /// Storage requests, summed over concurrent tiles.
    pub fetch_wait_s: f64,
    /// Time the driver had a chunk to admit but its reservation was full.
    pub admission_parked_s: f64,
    /// Codec decode on the pool (and reviving chunks from the disk tier).
    pub decode_s: f64,
    /// Placing decoded tiles into the chunk's slot, and chunk transforms, on the pool.
    #[cfg_attr(feature = "schema", schemars(extend("x-python" = {"default": "None"})))]
    pub assemble_s: f64,
    /// Gather copies on the pool.
    pub gather_s: f64,
    /// Batch transforms on the pool.
    pub batch_transform_s: f64,
    /// The caller's time between receiving a batch and asking for the next.
    pub consumer_s: f64,
    /// Time the caller spent waiting for a batch.
    pub consumer_wait_s: f64,
    /// Accounted producer-side cost: every stage above but the caller's own (`consumer_s`,
    /// `consumer_wait_s`), the denominator of a stage's share.
    // Summed when the report is taken (`StageTimes::totalled`): the recorder's running times
    // leave it at 0.
    #[cfg_attr(feature = "schema", schemars(extend("x-python" = {"property": true})))]
    pub producer_s: f64,
}

impl StageTimes {
    /// The sum `producer_s` reports: fetch wait, admission parked, decode, assembly, gather
    /// and batch transforms.
    pub fn producer_seconds(&self) -> f64 {
        self.fetch_wait_s
            + self.admission_parked_s
            + self.decode_s
            + self.assemble_s
            + self.gather_s
            + self.batch_transform_s
    }

    /// These times as a report gives them: with `producer_s` summed.
    #[must_use]
    pub fn totalled(self) -> Self {
        Self { producer_s: self.producer_seconds(), ..self }
    }
}

/// Queue, in-flight and residency depths.
// The Python package's `Depths` names some of these as insitubatch 0.2.0 does: the `x-python`
// `name`s below (tools/boundary-types writes them into its table and its dataclass, whose
// fields come in `order`: insitubatch 0.2.0's, then ours as they were added; a field not
// listed goes last); JS and the JSON keep ours.
// A `default` of `None`: what a hand-built `Depths` says of a number it was not given. The two
// shares are properties there: the engine's values for depths from a pass, `Depths::share`
// (through the extension) for depths built by hand.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[cfg_attr(
    feature = "schema",
    schemars(extend("x-python" = {"order": [
        "batch_queue_capacity", "batch_queue_peak", "batch_queue_samples", "batch_queue_empty",
        "batch_queue_full_enough", "inflight_peak", "max_inflight", "decode_queue_peak", "decode_threads",
        "resident_peak", "resident_peak_bytes", "budget_bytes", "batch_queue_now", "read_window",
        "read_window_reason", "read_ahead_peak_bytes"
    ]}))
)]
pub struct Depths {
    /// Batch queue capacity (`prefetch_depth`).
    #[cfg_attr(feature = "schema", schemars(extend("x-python" = {"name": "batch_queue_capacity"})))]
    pub queue_capacity: usize,
    /// Batches waiting for the caller when these stats were taken (0 once the pass ended).
    #[cfg_attr(feature = "schema", schemars(extend("x-python" = {"name": "batch_queue_now"})))]
    pub queue_now: usize,
    /// Most batches ever waiting in the queue.
    #[cfg_attr(feature = "schema", schemars(extend("x-python" = {"name": "batch_queue_peak"})))]
    pub queue_peak: usize,
    /// Times the caller asked for a batch.
    #[cfg_attr(feature = "schema", schemars(extend("x-python" = {"name": "batch_queue_samples"})))]
    pub queue_samples: u64,
    /// Times the queue was empty when asked.
    #[cfg_attr(feature = "schema", schemars(extend("x-python" = {"name": "batch_queue_empty"})))]
    pub queue_empty: u64,
    /// Times the queue was at least half full when asked (the caller was fed).
    #[cfg_attr(feature = "schema", schemars(extend("x-python" = {"name": "batch_queue_full_enough", "default": "None"})))]
    pub queue_full_enough: u64,
    /// Most decode jobs waiting for a pool thread at once.
    #[cfg_attr(feature = "schema", schemars(extend("x-python" = {"default": "None"})))]
    pub decode_queue_peak: usize,
    /// Most storage reads in flight at once.
    pub inflight_peak: usize,
    /// The `max_inflight` budget.
    pub max_inflight: usize,
    /// Reads allowed ahead of the decoders when the pass ended: the adaptive read window,
    /// between `decode_threads + 1` and `max_inflight` (ARCHITECTURE.md "The read window").
    pub read_window: usize,
    /// What set `read_window` last: `start` (no read measured yet), `decoders` (what keeps
    /// the decode threads fed), `link` (what the store delivers unqueued: more requests would
    /// only wait on each other), `floor` or `ceiling` (`max_inflight`).
    #[cfg_attr(feature = "schema", schemars(extend("x-python" = {"default": "\"start\""})))]
    pub read_window_reason: crate::window::WindowReason,
    /// Thread-pool parallelism.
    pub decode_threads: usize,
    /// Most stored bytes held read ahead at once (engine-wide, since it opened).
    pub read_ahead_peak_bytes: u64,
    /// Most chunks resident at once (pool-wide).
    #[cfg_attr(feature = "schema", schemars(extend("x-python" = {"name": "resident_peak"})))]
    pub resident_peak_chunks: u64,
    /// Most bytes resident at once (pool-wide).
    pub resident_peak_bytes: u64,
    /// The pool's byte budget at the end of the pass.
    #[cfg_attr(feature = "schema", schemars(extend("x-python" = {"default": "None"})))]
    pub budget_bytes: u64,
    /// Share of the caller's requests that found the batch queue empty (`queue_empty` over
    /// `queue_samples`; 0 when it never asked).
    #[cfg_attr(feature = "schema", schemars(extend("x-python" = {"property": true})))]
    pub starved_frac: f64,
    /// Share of the caller's requests that found the queue at least half full
    /// (`queue_full_enough` over `queue_samples`; 0 when it never asked).
    #[cfg_attr(feature = "schema", schemars(extend("x-python" = {"property": true})))]
    pub fed_frac: f64,
}

impl Depths {
    /// `count` of the caller's `asked` requests for a batch, as a share: the rule of
    /// `starved_frac` and `fed_frac` (0 when it never asked). Floats, so that the Python
    /// package's hand-built depths, whose counts may be anything, get the same rule.
    pub fn share(count: f64, asked: f64) -> f64 {
        if asked == 0.0 { 0.0 } else { count / asked }
    }
}

/// Told of every pass's report when the pass ends (a Prometheus exporter, a Python callback):
/// the one stream of reports every exporter is fed by. Called on the thread that ends the pass,
/// so it should be quick (hand the report to a queue or update counters).
pub trait PassObserver: crate::runtime::MaybeSend + crate::runtime::MaybeSync + std::fmt::Debug {
    /// A pass over `stats.split` ended (finished, closed or dropped).
    fn pass_ended(&self, stats: &PassStats);
}

/// One pass over one view.
// Python's `PassStats` is a dataclass of these fields (tools/boundary-types writes it from the
// `x-python` extension), in `order`: insitubatch 0.2.0's fields, then ours as they were added
// (its signature; a field not listed goes last). The verdict's three are properties there,
// computed afresh for a hand-built copy.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[cfg_attr(
    feature = "schema",
    schemars(extend("x-python" = {"order": [
        "split", "epoch", "batches", "cache_hits", "cache_misses", "bad_chunks", "wall_s", "times", "depths",
        "samples", "batch_bytes", "reread_chunks", "revived_chunks", "storage_reads", "decoded_bytes", "ttfb_s",
        "blocked_s", "rank", "world_size", "dropped_samples", "resumed_at", "index_reads", "tiles_read",
        "bytes_fetched", "gap_bytes", "tiles_read_ahead", "hedged_reads", "hedge_wins", "batch_wait_p50_s",
        "batch_wait_p95_s", "batch_wait_p99_s"
    ]}))
)]
pub struct PassStats {
    /// `train`, `val`, `test` or `all`.
    #[cfg_attr(feature = "schema", schemars(with = "crate::Split", extend("x-python" = {"required": true})))]
    pub split: String,
    /// The epoch.
    #[cfg_attr(feature = "schema", schemars(extend("x-python" = {"required": true})))]
    pub epoch: u64,
    /// This process's rank.
    pub rank: usize,
    /// Ranks sharing the epoch (in this segment, after an elastic resume).
    #[cfg_attr(feature = "schema", schemars(extend("x-python" = {"default": "1"})))]
    pub world_size: usize,
    /// Samples of the epoch no rank draws so that every rank draws the same number (job-wide;
    /// 0 with one rank). See `ranks.rs`.
    pub dropped_samples: u64,
    /// Samples this rank had consumed before a resumed pass started (0 for a fresh pass).
    pub resumed_at: u64,
    /// Batches delivered.
    pub batches: usize,
    /// Samples delivered.
    pub samples: u64,
    /// Decoded bytes delivered in batches.
    pub batch_bytes: u64,
    /// Chunk admissions served from residency.
    pub cache_hits: u64,
    /// Chunk admissions that loaded.
    pub cache_misses: u64,
    /// Chunks loaded that an earlier block of this pass had already loaded (evicted between).
    pub reread_chunks: u64,
    /// Chunks served by the disk tier (`cache_dir` + `persist`) with no fetch or decode.
    pub revived_chunks: u64,
    /// Storage requests for chunk data (a whole object, or one range of a shard holding one
    /// or several inner chunks). Shard-index reads are counted apart.
    pub storage_reads: u64,
    /// Shard-index requests (one per shard the pass reads from, unless a shard's index is
    /// still cached from an earlier pass).
    pub index_reads: u64,
    /// Tiles (stored chunks or inner chunks) those requests brought: more than
    /// `storage_reads` where neighbouring inner chunks were coalesced into one request.
    pub tiles_read: u64,
    /// Stored (encoded) bytes those requests brought, gaps included.
    pub bytes_fetched: u64,
    /// Of `bytes_fetched`, the bytes between coalesced ranges that no tile needed
    /// (`coalesce_gap_bytes` bounds each gap).
    pub gap_bytes: u64,
    /// Tiles a load found already read: inner chunks of a shard that a request for other
    /// inner chunks of it brought ahead of their chunk's admission (Morton-ordered shards
    /// interleave neighbouring chunks), held within `read_ahead_bytes`.
    pub tiles_read_ahead: u64,
    /// Second requests sent for reads the store had not answered after a multiple of the
    /// running quantile of times to first byte (hedging; at most `max_share` of requests).
    pub hedged_reads: u64,
    /// Of those, the ones answered before the request they hedged.
    pub hedge_wins: u64,
    /// Decoded bytes produced by those reads.
    pub decoded_bytes: u64,
    /// Chunks with tiles filled under `on_bad_chunk = "nan"`.
    pub bad_chunks: u64,
    /// Wall time from the pass's start to its last batch.
    pub wall_s: f64,
    /// Time to the first batch; none (`null`, `None`) before the first batch.
    pub ttfb_s: Option<f64>,
    /// The caller's wait for a batch after the first (the first is `ttfb_s`): median, 95th
    /// and 99th percentiles, seconds (within 2%; 0 with fewer than two batches).
    pub batch_wait_p50_s: f64,
    /// The 95th percentile.
    pub batch_wait_p95_s: f64,
    /// The 99th percentile.
    pub batch_wait_p99_s: f64,
    /// Stage totals.
    pub times: StageTimes,
    /// Consumer wait attributed to each stage, seconds.
    #[cfg_attr(feature = "schema", schemars(extend("x-python" = {"dict": true})))]
    pub blocked_s: Vec<(Stage, f64)>,
    /// Depths.
    pub depths: Depths,
    /// The verdict: which stage limited the pass.
    #[cfg_attr(feature = "schema", schemars(extend("x-python" = {"property": true})))]
    pub limiting_stage: LimitingStage,
    /// What to do about it.
    #[cfg_attr(feature = "schema", schemars(extend("x-python" = {"property": true})))]
    pub advice: String,
    /// True when the caller's loop did essentially nothing (a throughput measurement).
    #[cfg_attr(feature = "schema", schemars(extend("x-python" = {"property": true})))]
    pub consumer_idle: bool,
}

impl PassStats {
    /// The one-line summary logged at the end of a pass.
    pub fn summary(&self) -> String {
        let t = &self.times;
        format!(
            "epoch {} ({}): {} batches in {:.2}s, first after {} | queue {}/{} (empty {:.0}%, fed {:.0}%) | inflight peak \
             {}/{} (read window {}, {}) | decode queue peak {} | resident peak {} chunks, {} | chunks {}/{} hit, {} re-read{}{} | consumer \
             {:.2}s waited {:.2}s | fetch {:.2}s decode {:.2}s assemble {:.2}s gather {:.2}s transform {:.2}s parked \
             {:.2}s | limited by: {} -- {}",
            self.epoch,
            self.split,
            self.batches,
            self.wall_s,
            self.ttfb_s.map_or_else(|| "no batch".to_string(), |t| format!("{t:.3}s")),
            self.depths.queue_peak,
            self.depths.queue_capacity,
            100.0 * self.depths.starved_frac,
            100.0 * self.depths.fed_frac,
            self.depths.inflight_peak,
            self.depths.max_inflight,
            self.depths.read_window,
            self.depths.read_window_reason.name(),
            self.depths.decode_queue_peak,
            self.depths.resident_peak_chunks,
            crate::units::human_bytes(self.depths.resident_peak_bytes),
            self.cache_hits,
            self.cache_hits + self.cache_misses,
            self.reread_chunks,
            if self.revived_chunks > 0 {
                format!(", {} revived from disk", self.revived_chunks)
            } else {
                String::new()
            },
            if self.bad_chunks > 0 { format!(", {} bad chunks", self.bad_chunks) } else { String::new() },
            t.consumer_s,
            t.consumer_wait_s,
            t.fetch_wait_s,
            t.decode_s,
            t.assemble_s,
            t.gather_s,
            t.batch_transform_s,
            t.admission_parked_s,
            self.limiting_stage,
            self.advice
        )
    }
}

/// The critical path of one batch, on the executor clock.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct BatchTimeline {
    /// Latest admission among its chunks.
    pub admitted: Duration,
    /// Latest `max_inflight` permit grant among its chunks' tiles.
    pub permitted: Duration,
    /// Latest fetch completion.
    pub fetched: Duration,
    /// Latest chunk ready (decoded, assembled, transformed).
    pub ready: Duration,
    /// Gather started.
    pub gather_start: Duration,
    /// Gather finished.
    pub gather_end: Duration,
    /// Batch transforms finished.
    pub transformed: Duration,
}

impl BatchTimeline {
    /// Split a consumer wait `[from, to)` over the stages this batch was in.
    pub(crate) fn attribute(&self, from: Duration, to: Duration, fetch_share_of_permit_wait: f64, out: &mut [f64; 5]) {
        let overlap = |a: Duration, b: Duration| -> f64 {
            let (a, b) = (a.max(from), b.min(to));
            b.saturating_sub(a).as_secs_f64()
        };
        let zero = Duration::ZERO;
        out[0] += overlap(zero, self.admitted);
        let permit_wait = overlap(self.admitted, self.permitted.max(self.admitted));
        out[1] += permit_wait * fetch_share_of_permit_wait + overlap(self.permitted.max(self.admitted), self.fetched);
        out[2] += permit_wait * (1.0 - fetch_share_of_permit_wait) + overlap(self.fetched, self.ready);
        out[3] += overlap(self.ready, self.gather_end) + overlap(self.transformed, to.max(self.transformed));
        out[4] += overlap(self.gather_end, self.transformed);
    }
}

/// Counters the driver, the loads and the consumer update during a pass.
#[derive(Debug, Default)]
pub(crate) struct PassRecorder {
    inner: Mutex<Recorded>,
}

/// The raw record behind [`PassStats`].
#[derive(Debug, Default, Clone)]
pub struct Recorded {
    /// Stage totals.
    pub times: StageTimes,
    /// Attributed consumer wait.
    pub blocked: [f64; 5],
    /// Queue samples.
    pub queue_samples: u64,
    /// Empty-queue samples.
    pub queue_empty: u64,
    /// Samples with the queue at least half full.
    pub queue_full_enough: u64,
    /// Decode jobs waiting for a pool thread, at most.
    pub decode_queue_peak: usize,
    /// Queue peak.
    pub queue_peak: usize,
    /// In-flight peak.
    pub inflight_peak: usize,
    /// Storage requests for chunk data.
    pub storage_reads: u64,
    /// Shard-index requests.
    pub index_reads: u64,
    /// Tiles brought by storage requests.
    pub tiles_read: u64,
    /// Stored bytes fetched, gaps included.
    pub bytes_fetched: u64,
    /// Fetched bytes no tile needed.
    pub gap_bytes: u64,
    /// Tiles found read ahead.
    pub tiles_read_ahead: u64,
    /// Hedges sent.
    pub hedged_reads: u64,
    /// Hedges that answered first.
    pub hedge_wins: u64,
    /// Decoded bytes.
    pub decoded_bytes: u64,
    /// Bad chunks.
    pub bad_chunks: u64,
    /// Re-read chunks.
    pub reread_chunks: u64,
    /// Chunks revived from the disk tier.
    pub revived_chunks: u64,
    /// Hits.
    pub hits: u64,
    /// Misses.
    pub misses: u64,
    /// Batches received.
    pub batches: usize,
    /// Samples received.
    pub samples: u64,
    /// Bytes received.
    pub batch_bytes: u64,
    /// First batch received at.
    pub first_batch_at: Option<Duration>,
    /// Last batch received at.
    pub last_batch_at: Option<Duration>,
    /// The caller's waits for the batches after the first.
    pub batch_waits: WaitHistogram,
}

/// Waits in logarithmic buckets, 2% wide, from 1 µs to about 10^4 s, counted. Written here,
/// not taken from `hdrhistogram`: the record is cloned on every stats snapshot (each
/// checkpoint and progress line), so it must stay a fixed 4.7 KB of counts whatever the pass
/// length, and 2% is all a p50/p95/p99 of waits needs.
#[derive(Debug, Clone)]
pub struct WaitHistogram {
    counts: Vec<u32>,
    total: u64,
}

/// Bucket ratio and floor of [`WaitHistogram`].
const WAIT_BUCKET_RATIO: f64 = 1.02;
const WAIT_FLOOR_S: f64 = 1e-6;
const WAIT_BUCKETS: usize = 1170; // 1.02^1170 × 1 µs ≈ 10^4 s

impl Default for WaitHistogram {
    fn default() -> Self {
        Self { counts: vec![0; WAIT_BUCKETS], total: 0 }
    }
}

impl WaitHistogram {
    /// Count one wait.
    pub fn record(&mut self, seconds: f64) {
        let b = if seconds <= WAIT_FLOOR_S { 0.0 } else { (seconds / WAIT_FLOOR_S).ln() / WAIT_BUCKET_RATIO.ln() };
        let i = (b.ceil() as usize).min(WAIT_BUCKETS - 1);
        self.counts[i] += 1;
        self.total += 1;
    }

    /// The `q` quantile (0..=1) as its bucket's upper edge, seconds; 0 with no waits.
    pub fn quantile(&self, q: f64) -> f64 {
        if self.total == 0 {
            return 0.0;
        }
        let rank = ((q * self.total as f64).ceil() as u64).clamp(1, self.total);
        let mut seen = 0u64;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += u64::from(c);
            if seen >= rank {
                return if i == 0 { WAIT_FLOOR_S } else { WAIT_FLOOR_S * WAIT_BUCKET_RATIO.powi(i as i32) };
            }
        }
        WAIT_FLOOR_S * WAIT_BUCKET_RATIO.powi(WAIT_BUCKETS as i32 - 1)
    }
}

impl PassRecorder {
    /// Update the record.
    pub(crate) fn with<R>(&self, f: impl FnOnce(&mut Recorded) -> R) -> R {
        f(&mut self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner))
    }
    /// A copy of the record.
    pub(crate) fn snapshot(&self) -> Recorded {
        self.with(|r| r.clone())
    }
}

/// Turn a record into stats with a verdict.
///
/// `max_inflight` decides the store advice: raising it helps only when reads in flight
/// reached it.
pub fn verdict(r: &Recorded, max_inflight: usize) -> (LimitingStage, String, bool) {
    let wall = r.times.consumer_s + r.times.consumer_wait_s;
    if r.queue_samples == 0 || wall <= 0.0 {
        return (LimitingStage::Unknown, "no batches were taken, so there is nothing to attribute".into(), false);
    }
    let idle = r.times.consumer_s / wall < 0.1;
    let total_blocked: f64 = r.blocked.iter().sum();
    let (best, best_s) =
        Stage::ALL.iter().copied().zip(r.blocked).max_by(|a, b| a.1.total_cmp(&b.1)).unwrap_or((Stage::Store, 0.0));
    let store_advice = if r.inflight_peak >= max_inflight {
        format!(
            "the consumer waited on storage reads with all {max_inflight} max_inflight reads in flight: raise \
             max_inflight; if throughput stops improving, the store or network is the floor"
        )
    } else {
        format!(
            "the consumer waited on storage reads, but reads in flight peaked at {} of max_inflight {max_inflight}, so \
             raising it will not help: the store itself (for local files, the disk and the few I/O threads serving \
             it) is the floor; for repeated epochs or runs, a local cache_dir with persist=True skips it",
            r.inflight_peak
        )
    };
    let advice = |s: Stage| -> &str {
        match s {
            Stage::Store => &store_advice,
            Stage::Decode => {
                "the consumer waited on decode (and chunk transforms) on the thread pool: more cores, cheaper codecs, or faster chunk transforms"
            }
            Stage::Residency => {
                "the pass waited for room in its residency reservation: raise cache_budget_bytes or lower batch_size/block_chunks"
            }
            Stage::Gather => "the consumer waited on the gather copy: check gather_run_bytes in describe()",
            Stage::BatchTransform => {
                "the consumer waited on batch transforms: make them cheaper or move per-variable work to the chunk stage (cached)"
            }
        }
    };
    if idle {
        if total_blocked <= 0.0 {
            return (LimitingStage::Unknown, "the loop body did nothing and no stage stood out".into(), true);
        }
        return (
            best.into(),
            format!(
                "{} (your loop did essentially nothing, so this is a throughput measurement: {:.0}% of the wait)",
                advice(best),
                100.0 * best_s / total_blocked
            ),
            true,
        );
    }
    if r.times.consumer_wait_s / wall < 0.2 {
        return (
            LimitingStage::Consumer,
            "the loader kept up: your training step is the constraint, which is the goal".into(),
            false,
        );
    }
    if total_blocked > 0.0 && best_s / total_blocked >= 0.4 {
        return (best.into(), advice(best).into(), false);
    }
    (LimitingStage::Unknown, "no stage clearly dominates the waits; measure with a longer pass".into(), false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wait_quantiles_are_within_two_percent_and_zero_without_waits() {
        let mut h = WaitHistogram::default();
        assert_eq!(h.quantile(0.5), 0.0);
        for ms in 1..=100 {
            h.record(f64::from(ms) / 1000.0);
        }
        for (q, want) in [(0.5, 0.050), (0.95, 0.095), (0.99, 0.099)] {
            let got = h.quantile(q);
            assert!(got >= want && got <= want * 1.02, "q{q}: {got} for {want}");
        }
        h.record(0.0);
        h.record(1e9);
        assert_eq!(h.quantile(0.0), 1e-6, "a wait under a microsecond counts in the first bucket");
        assert!(h.quantile(1.0) > 9e3, "a wait past the last bucket counts in it");
    }
    // On wasm32 the tests run under wasm-bindgen-test (scripts/test-wasm.sh), whose attribute
    // takes the place of libtest's `#[test]`.
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    /// A pass whose consumer mostly waited, all of it on the store, with `peak` reads in flight.
    fn store_bound(peak: usize) -> Recorded {
        let mut r = Recorded { queue_samples: 10, inflight_peak: peak, ..Recorded::default() };
        r.times.consumer_s = 1.0;
        r.times.consumer_wait_s = 9.0;
        r.blocked[Stage::ALL.iter().position(|s| *s == Stage::Store).unwrap()] = 9.0;
        r
    }

    #[test]
    fn store_advice_says_to_raise_max_inflight_only_when_it_was_reached() {
        let (stage, advice, _) = verdict(&store_bound(32), 32);
        assert_eq!(stage, LimitingStage::Store);
        assert!(advice.contains("raise max_inflight") && !advice.contains("will not help"), "{advice}");
        let (stage, advice, _) = verdict(&store_bound(4), 32);
        assert_eq!(stage, LimitingStage::Store);
        assert!(advice.contains("peaked at 4 of max_inflight 32") && advice.contains("will not help"), "{advice}");
    }
}
