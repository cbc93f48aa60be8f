//! The probe: a few real reads and decodes, timed, and the epoch they predict.
//!
//! Before a long run on a remote store a user wants to know what an epoch will cost and
//! what limits it. The static report (`describe`) reads nothing; the probe reads a little:
//! one byte of an object (the store's time to first byte), the first chunk of the epoch
//! alone (one request's time, so the rate of one connection), then the next `chunks`
//! chunks at once through the engine's own read path (coalescing, the read window and
//! `max_inflight` included), which shows whether the reads share a link that caps them, and
//! how fast the decoders go. The prediction is a model over those figures (see
//! [`Dataset::probe`]); `bench/run.py cloud` compares it with real passes.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use super::Dataset;
use crate::engine::load_tiles;
use crate::error::{Error, Result};
use crate::plan::{ChunkKey, PassPlan};
use crate::runtime::ByteRange;
use crate::shuffle::Split;
use crate::stats::{LimitingStage, PassRecorder, Recorded};
use crate::zarr::TileLocation;

/// Chunks the probe loads at once after the first, unless told otherwise.
pub const PROBE_CHUNKS: usize = 16;

/// What the probe measured, what it predicts for one epoch, and what it suggests.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ProbeReport {
    /// The split and epoch predicted.
    #[cfg_attr(feature = "schema", schemars(with = "crate::Split"))]
    pub split: String,
    /// The epoch predicted.
    pub epoch: u64,
    /// Storage requests the probe made (shard indexes included).
    pub requests: u64,
    /// Stored bytes the probe read.
    pub bytes_read: u64,
    /// Seconds to read one byte of an object: the store's time to first byte.
    pub first_byte_s: f64,
    /// Seconds one request of the epoch's typical size took, alone.
    pub request_s: f64,
    /// That typical request's stored bytes (the probe's mean).
    pub request_bytes: u64,
    /// Stored bytes per second of one connection, after its first byte.
    pub connection_bytes_per_s: f64,
    /// Requests the concurrent part made at once (at most `max_inflight`).
    pub concurrent_requests: u64,
    /// Stored bytes per second those requests reached together.
    pub concurrent_bytes_per_s: f64,
    /// True when the concurrent requests together went markedly slower than as many single
    /// ones would (below 80%): a shared link (or the store) caps the rate, at about
    /// `concurrent_bytes_per_s`. False: no cap seen up to that rate.
    pub link_capped: bool,
    /// Decoded bytes per second of one decode thread (decode and assembly), measured while
    /// the concurrent reads ran.
    pub decode_bytes_per_s_per_thread: f64,
    /// Decode threads.
    pub decode_threads: usize,
    /// Decoded ÷ stored bytes of what the probe read.
    pub compression_ratio: f64,
    /// The predicted epoch.
    pub predicted: EpochPrediction,
    /// A `max_inflight` that fills what the store and the decoders can take (Little's law:
    /// the rate wanted × a request's time ÷ its bytes, with a quarter to spare).
    pub suggested_max_inflight: usize,
    /// A `block_chunks` whose two admitted blocks hold that many requests (never below the
    /// current one).
    pub suggested_block_chunks: usize,
    /// What the figures mean, in words.
    pub notes: Vec<String>,
}

impl ProbeReport {
    /// The probe as text: what was measured, the predicted epoch, the suggestions.
    pub fn render(&self) -> String {
        use std::fmt::Write;
        let p = &self.predicted;
        let mut s = format!(
            "probe ({} requests, {} read):\n  store: first byte {:.0} ms, one request of {} in {:.0} ms ({:.0} MB/s per \
             connection), {} at once {:.0} MB/s{}\n  decode: {:.0} MB/s per thread x {}, ratio {:.2}\n",
            self.requests,
            crate::units::human_bytes(self.bytes_read),
            self.first_byte_s * 1e3,
            crate::units::human_bytes(self.request_bytes),
            self.request_s * 1e3,
            self.connection_bytes_per_s / 1e6,
            self.concurrent_requests,
            self.concurrent_bytes_per_s / 1e6,
            if self.link_capped { " (capped)" } else { "" },
            self.decode_bytes_per_s_per_thread / 1e6,
            self.decode_threads,
            self.compression_ratio,
        );
        let _ = writeln!(
            s,
            "  predicted epoch {} ({}): {:.1} s, {:.0} MB/s, first batch {:.2} s, {} requests, limited by {}",
            self.epoch, self.split, p.seconds, p.mb_per_s, p.first_batch_s, p.requests, p.limiting_stage
        );
        let _ = writeln!(
            s,
            "  suggested: max_inflight={} block_chunks={}",
            self.suggested_max_inflight, self.suggested_block_chunks
        );
        for n in &self.notes {
            let _ = writeln!(s, "  - {n}");
        }
        s
    }
}

/// One epoch, as the probe predicts it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct EpochPrediction {
    /// Seconds from the pass's start to its last batch.
    pub seconds: f64,
    /// Decoded megabytes (10^6 bytes) per second delivered.
    pub mb_per_s: f64,
    /// Seconds to the first batch.
    pub first_batch_s: f64,
    /// `store` or `decode`: the slower of the two rates.
    #[cfg_attr(feature = "schema", schemars(with = "String", extend("enum" = ["store", "decode"])))]
    pub limiting_stage: LimitingStage,
    /// Decoded bytes the epoch's chunks hold.
    pub decoded_bytes: u64,
    /// Stored bytes they take (decoded ÷ the measured ratio).
    pub stored_bytes: u64,
    /// Storage requests, shard indexes included (from the probe's requests per chunk).
    pub requests: u64,
    /// Decoded bytes per second the store can deliver at `max_inflight` (the network's side).
    pub store_bytes_per_s: f64,
    /// Decoded bytes per second the decode threads can produce.
    pub decode_bytes_per_s: f64,
}

/// The epoch's chunks, as the pass would admit them.
struct EpochChunks {
    keys: Vec<ChunkKey>,
    decoded_bytes: u64,
    /// What the first batch reads (it waits for these chunks only).
    first_batch_bytes: u64,
    shard_objects: u64,
}

/// The probe's measurements.
struct Measured {
    first_byte_s: f64,
    /// The first chunk, loaded alone.
    alone: Recorded,
    /// The next chunks, loaded at once, and how many.
    together: Recorded,
    together_chunks: usize,
    /// Stored bytes per second they reached together.
    concurrent: f64,
}

impl Dataset {
    /// Probe the store with a few real reads and decodes, and predict an epoch of `split`
    /// at the current epoch: `chunks` chunks are loaded at once after the first (at least 1;
    /// [`PROBE_CHUNKS`] is a good default). The probe reads outside the pool (nothing it
    /// loads is kept), so a pass after it starts cold.
    ///
    /// The model: a request of `b` stored bytes takes `first_byte + b / connection rate`;
    /// with `max_inflight` of them in flight the store delivers `max_inflight × b / time`,
    /// capped at the concurrent rate when the probe saw a cap. The decoders deliver `threads
    /// × their measured rate`. The slower of the two (in decoded bytes) is the limiting
    /// stage, and the epoch takes one request's time, its decoded bytes at that rate, and
    /// one more request at one connection's rate (the last requests run alone).
    ///
    /// # Errors
    /// [`Error::Config`] when the split draws nothing; storage and decode errors of the reads.
    pub async fn probe(&self, split: Split, chunks: usize) -> Result<ProbeReport> {
        let epoch = self.epoch();
        let plan = self.epoch_chunks(split, epoch)?;
        let engine = Arc::clone(&self.inner.engine);
        let Some(&first) = plan.keys.first() else {
            return Err(Error::Config(format!("the {split} split draws no sample at epoch {epoch}: nothing to probe")));
        };
        let first_byte_s = self.time_first_byte(first).await?;
        let batch: Vec<ChunkKey> = plan.keys.iter().copied().skip(1).take(chunks.max(1)).collect();
        // The probe's chunks are wanted as a pass's would be, so its requests coalesce and
        // read ahead as a pass's do (`ahead.rs`); what is left wanted is unmarked after.
        let mark = |want: bool| {
            std::iter::once(first).chain(batch.iter().copied()).for_each(|k| engine.want_chunk(k, None, want));
        };
        mark(true);
        let measured = self.time_loads(first, &batch).await;
        mark(false);
        let (alone, together, concurrent) = measured?;
        let measured = Measured { first_byte_s, alone, together, together_chunks: batch.len(), concurrent };
        Ok(self.predict(split, epoch, &plan, &measured))
    }

    /// Load `first` alone, then `batch` at once, outside the pool: what each part recorded,
    /// and the stored bytes per second the batch's reads reached together.
    async fn time_loads(&self, first: ChunkKey, batch: &[ChunkKey]) -> Result<(Recorded, Recorded, f64)> {
        let engine = &self.inner.engine;
        let alone = Arc::new(PassRecorder::default());
        let _ = load_tiles(engine, first, None, &alone, 0).await?;
        let together = Arc::new(PassRecorder::default());
        let t0 = engine.now();
        let loads = batch.iter().enumerate().map(|(i, &k)| load_tiles(engine, k, None, &together, 1 + i as u64));
        let loaded = futures::future::try_join_all(loads).await?;
        let fetched_by = loaded.iter().map(|(_, t, _)| t.fetched).max().unwrap_or(t0);
        let span = fetched_by.saturating_sub(t0).max(Duration::from_micros(1));
        let together = together.snapshot();
        let rate = together.bytes_fetched as f64 / span.as_secs_f64();
        Ok((alone.snapshot(), together, rate))
    }

    /// The distinct chunks of this rank's pass over `split` at `epoch`, in admission order.
    fn epoch_chunks(&self, split: Split, epoch: u64) -> Result<EpochChunks> {
        let i = &self.inner;
        let pass = self.rank_pass(split, epoch, None)?;
        let plan = PassPlan::build(&pass.order, &i.plan_vars, i.options.knobs.batch_size, self.rows_per_sample());
        let mut seen = HashSet::new();
        let keys: Vec<ChunkKey> = plan.uses.iter().map(|u| u.key).filter(|k| seen.insert(*k)).collect();
        let charge = |k: &ChunkKey| i.engine.arrays[k.path as usize].charge(k.chunk);
        let first_batch: HashSet<ChunkKey> = plan
            .batch_uses
            .first()
            .map_or_else(HashSet::new, |uses| uses.iter().map(|&u| plan.uses[u as usize].key).collect());
        let mut shards = HashSet::new();
        for k in &keys {
            let r = &i.engine.arrays[k.path as usize];
            for t in 0..r.geom.n_tiles() {
                if let TileLocation::InShard { key, .. } =
                    r.zarr.tile_location(&r.geom.physical_tile_coord(k.chunk, &r.geom.inner_coord(t)))
                {
                    shards.insert(key);
                }
            }
        }
        Ok(EpochChunks {
            decoded_bytes: keys.iter().map(charge).sum(),
            first_batch_bytes: first_batch.iter().map(charge).sum(),
            shard_objects: shards.len() as u64,
            keys,
        })
    }

    /// Seconds to read the first byte of chunk `key`'s first tile (its object): the store's
    /// time to first byte.
    async fn time_first_byte(&self, key: ChunkKey) -> Result<f64> {
        let engine = &self.inner.engine;
        let r = &engine.arrays[key.path as usize];
        let location = r.zarr.tile_location(&r.geom.physical_tile_coord(key.chunk, &r.geom.inner_coord(0)));
        let t0 = engine.now();
        engine.reads.fetch(location.key(), Some(ByteRange::Bounded { start: 0, end: 1 }), 1, None).await?;
        Ok(engine.now().saturating_sub(t0).as_secs_f64())
    }

    /// The report: the model of [`Self::probe`] over what was measured.
    fn predict(&self, split: Split, epoch: u64, plan: &EpochChunks, m: &Measured) -> ProbeReport {
        let Measured { first_byte_s, alone, together, together_chunks, concurrent } = m;
        let first_byte_s = *first_byte_s;
        let i = &self.inner;
        let o = &i.options;
        let threads = i.engine.runtime.pool.parallelism().get();
        let per = |a: f64, b: u64| if b == 0 { 0.0 } else { a / b as f64 };
        let request_bytes = per(alone.bytes_fetched as f64, alone.storage_reads.max(1)).max(1.0);
        let request_s = per(alone.times.fetch_wait_s, alone.storage_reads.max(1)).max(first_byte_s).max(1e-6);
        let connection = request_bytes / (request_s - first_byte_s).max(1e-6);
        let concurrent_requests = together.storage_reads.min(o.knobs.max_inflight as u64).max(1);
        let concurrent = *concurrent;
        let expected = concurrent_requests as f64 * request_bytes / request_s;
        let link_capped = concurrent < 0.8 * expected;
        let decode_s =
            alone.times.decode_s + alone.times.assemble_s + together.times.decode_s + together.times.assemble_s;
        let decoded = alone.decoded_bytes + together.decoded_bytes;
        let per_thread = per(decoded as f64, 1).max(1.0) / decode_s.max(1e-9);
        let fetched = alone.bytes_fetched + together.bytes_fetched;
        // Bytes between coalesced ranges are not the tiles': the ratio is the tiles' own.
        let needed = fetched - alone.gap_bytes - together.gap_bytes;
        let ratio = if needed == 0 { 1.0 } else { decoded as f64 / needed as f64 };
        let mut store = o.knobs.max_inflight as f64 * request_bytes / request_s;
        if link_capped {
            store = store.min(concurrent);
        }
        let (store, decode) = (store * ratio, per_thread * threads as f64);
        let rate = store.min(decode).max(1.0);
        let loaded = (1 + together_chunks) as f64;
        let requests_per_chunk = (alone.storage_reads + together.storage_reads) as f64 / loaded;
        let first_batch_s = request_s + plan.first_batch_bytes as f64 / rate;
        // The last requests of an epoch run alone, each at one connection's rate: a pass's
        // requests are the probe's, or for a shard its coalesced ranges (a chunk's inner
        // chunks and their neighbours read ahead), up to coalesce_max_bytes.
        let pass_request = if plan.shard_objects > 0 {
            let chunk_stored = plan.decoded_bytes as f64 / plan.keys.len().max(1) as f64 / ratio;
            (2.0 * chunk_stored).min(o.read_policy.coalesce_max_bytes as f64).max(request_bytes)
        } else {
            request_bytes
        };
        let seconds = request_s + plan.decoded_bytes as f64 / rate + pass_request / connection;
        let predicted = EpochPrediction {
            seconds,
            mb_per_s: plan.decoded_bytes as f64 / 1e6 / seconds,
            first_batch_s: first_batch_s.min(seconds),
            limiting_stage: if store < decode { LimitingStage::Store } else { LimitingStage::Decode },
            decoded_bytes: plan.decoded_bytes,
            stored_bytes: (plan.decoded_bytes as f64 / ratio) as u64,
            requests: (plan.keys.len() as f64 * requests_per_chunk).round() as u64 + plan.shard_objects,
            store_bytes_per_s: store,
            decode_bytes_per_s: decode,
        };
        // Little's law: requests in flight = the stored rate wanted × a request's time ÷ its bytes.
        let wanted = if link_capped { (decode / ratio).min(concurrent) } else { decode / ratio };
        let suggested_max_inflight =
            ((1.25 * wanted * request_s / request_bytes).ceil() as usize).clamp(threads + 1, 256);
        let per_block = (2.0 * requests_per_chunk.max(1.0)).max(1.0);
        let suggested_block_chunks = ((suggested_max_inflight as f64 / per_block).ceil() as usize).max(i.block_chunks);
        let mut report = ProbeReport {
            split: split.name().to_string(),
            epoch,
            requests: alone.storage_reads + alone.index_reads + together.storage_reads + together.index_reads + 1,
            bytes_read: fetched,
            first_byte_s,
            request_s,
            request_bytes: request_bytes as u64,
            connection_bytes_per_s: connection,
            concurrent_requests,
            concurrent_bytes_per_s: concurrent,
            link_capped,
            decode_bytes_per_s_per_thread: per_thread,
            decode_threads: threads,
            compression_ratio: ratio,
            predicted,
            suggested_max_inflight,
            suggested_block_chunks,
            notes: Vec::new(),
        };
        report.notes = probe_notes(&report, o.knobs.max_inflight);
        report
    }
}

fn probe_notes(r: &ProbeReport, max_inflight: usize) -> Vec<String> {
    let mb = |b: f64| b / 1e6;
    let p = &r.predicted;
    let mut notes = vec![format!(
        "the store answers in {:.0} ms and sends {:.0} MB/s per connection; {} requests at once reached {:.0} MB/s{}",
        r.first_byte_s * 1e3,
        mb(r.connection_bytes_per_s),
        r.concurrent_requests,
        mb(r.concurrent_bytes_per_s),
        if r.link_capped { ", a cap (the link or the store)" } else { ", no cap seen" }
    )];
    notes.push(format!(
        "an epoch should take {:.1} s at {:.0} MB/s decoded, limited by {} (store {:.0} MB/s, decode {:.0} MB/s on {} threads)",
        p.seconds,
        p.mb_per_s,
        p.limiting_stage,
        mb(p.store_bytes_per_s),
        mb(p.decode_bytes_per_s),
        r.decode_threads
    ));
    if r.suggested_max_inflight != max_inflight {
        notes.push(format!(
            "max_inflight={} fills what the {} can take at this latency (now {max_inflight})",
            r.suggested_max_inflight,
            if r.link_capped { "link" } else { "decoders" }
        ));
    }
    notes
}
