//! An opt-in Prometheus endpoint fed by the pass reports (`PassObserver`): per-stage seconds,
//! reads, bytes and batches as counters; the last pass's batch-wait quantiles, rate and
//! limiting stage as gauges; every series labelled with the split, the rank and the world
//! size, so a fleet's ranks are told apart in one query (`sum by (rank)`).
//!
//! The text format is prometheus-client's; the server is hyper on the dataset's tokio runtime,
//! answering `GET /metrics` (any path) until the dataset's runtime shuts down.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};

use http_body_util::Full;
use hyper::body::Bytes;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use insitubatch_core::{PassObserver, PassStats};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::{NativeError, Result};

/// The labels of every series.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PassLabels {
    split: String,
    rank: String,
    world_size: String,
}

/// The labels of a per-stage or per-quantile series.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KeyedLabels {
    split: String,
    rank: String,
    world_size: String,
    key: String,
}

type Counts = Family<PassLabels, Counter>;
type FloatCounts = Family<KeyedLabels, Counter<f64, std::sync::atomic::AtomicU64>>;
type Levels = Family<KeyedLabels, Gauge<f64, std::sync::atomic::AtomicU64>>;

/// The series, registered once.
#[derive(Default)]
struct Series {
    passes: Counts,
    batches: Counts,
    samples: Counts,
    storage_reads: Counts,
    bytes_fetched: Counts,
    decoded_bytes: Counts,
    cache_hits: Counts,
    cache_misses: Counts,
    bad_chunks: Counts,
    stage_seconds: FloatCounts,
    batch_wait: Levels,
    samples_per_second: Levels,
    limiting_stage: Levels,
}

/// A Prometheus exporter: give it to a dataset as a [`PassObserver`], and serve it with
/// [`PrometheusExporter::serve`].
pub struct PrometheusExporter {
    registry: Mutex<Registry>,
    series: Series,
}

impl std::fmt::Debug for PrometheusExporter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PrometheusExporter").finish_non_exhaustive()
    }
}

impl Default for PrometheusExporter {
    fn default() -> Self {
        let series = Series::default();
        let mut r = Registry::with_prefix("insitubatch");
        let s = &series;
        r.register("passes", "Passes ended", s.passes.clone());
        r.register("batches", "Batches yielded", s.batches.clone());
        r.register("samples", "Rows yielded", s.samples.clone());
        r.register("storage_reads", "Storage requests for chunk data", s.storage_reads.clone());
        r.register("bytes_fetched", "Stored bytes fetched", s.bytes_fetched.clone());
        r.register("decoded_bytes", "Bytes decoded", s.decoded_bytes.clone());
        r.register("cache_hits", "Chunk uses served from memory", s.cache_hits.clone());
        r.register("cache_misses", "Chunk uses that loaded the chunk", s.cache_misses.clone());
        r.register("bad_chunks", "Chunks that failed to read or decode", s.bad_chunks.clone());
        r.register("stage_seconds", "Seconds per pipeline stage (key: the stage)", s.stage_seconds.clone());
        r.register(
            "batch_wait_seconds",
            "The last pass's batch wait after the first (key: quantile)",
            s.batch_wait.clone(),
        );
        r.register("samples_per_second", "The last pass's rate (key: rate)", s.samples_per_second.clone());
        r.register(
            "limiting_stage",
            "1 for the stage the last pass waited on (key: the stage)",
            s.limiting_stage.clone(),
        );
        Self { registry: Mutex::new(r), series }
    }
}

impl PassObserver for PrometheusExporter {
    fn pass_ended(&self, p: &PassStats) {
        let labels =
            PassLabels { split: p.split.clone(), rank: p.rank.to_string(), world_size: p.world_size.to_string() };
        let keyed = |key: &str| KeyedLabels {
            split: labels.split.clone(),
            rank: labels.rank.clone(),
            world_size: labels.world_size.clone(),
            key: key.to_string(),
        };
        let s = &self.series;
        s.passes.get_or_create(&labels).inc();
        for (family, n) in [
            (&s.batches, p.batches as u64),
            (&s.samples, p.samples),
            (&s.storage_reads, p.storage_reads),
            (&s.bytes_fetched, p.bytes_fetched),
            (&s.decoded_bytes, p.decoded_bytes),
            (&s.cache_hits, p.cache_hits),
            (&s.cache_misses, p.cache_misses),
            (&s.bad_chunks, p.bad_chunks),
        ] {
            family.get_or_create(&labels).inc_by(n);
        }
        let t = &p.times;
        for (stage, secs) in [
            ("fetch_wait", t.fetch_wait_s),
            ("decode", t.decode_s),
            ("assemble", t.assemble_s),
            ("gather", t.gather_s),
            ("batch_transform", t.batch_transform_s),
            ("consumer", t.consumer_s),
            ("consumer_wait", t.consumer_wait_s),
        ] {
            s.stage_seconds.get_or_create(&keyed(stage)).inc_by(secs.max(0.0));
        }
        for (q, v) in [("0.5", p.batch_wait_p50_s), ("0.95", p.batch_wait_p95_s), ("0.99", p.batch_wait_p99_s)] {
            s.batch_wait.get_or_create(&keyed(q)).set(v);
        }
        let rate = if p.wall_s > 0.0 { p.samples as f64 / p.wall_s } else { 0.0 };
        s.samples_per_second.get_or_create(&keyed("last_pass")).set(rate);
        let limiting = p.limiting_stage.name();
        for stage in insitubatch_core::LimitingStage::ALL {
            s.limiting_stage.get_or_create(&keyed(stage.name())).set(if stage.name() == limiting { 1.0 } else { 0.0 });
        }
    }
}

impl PrometheusExporter {
    /// The exposition text (what a scrape returns).
    pub fn render(&self) -> String {
        let mut out = String::new();
        let registry = self.registry.lock().unwrap_or_else(PoisonError::into_inner);
        // Encoding into a String cannot fail.
        let _ = encode(&mut out, &registry);
        out
    }

    /// Listen on `address` (`IP:PORT`, or `localhost:PORT`; port 0 picks a free one) and
    /// answer every request with [`Self::render`], on `runtime`; the bound address is returned.
    ///
    /// # Errors
    /// [`NativeError::Core`] (a configuration error) for an address that is not `IP:PORT` (no
    /// name is looked up); [`NativeError::Open`] when it cannot be bound.
    pub fn serve(self: &Arc<Self>, address: &str, runtime: &tokio::runtime::Handle) -> Result<SocketAddr> {
        let parsed = match address.strip_prefix("localhost:") {
            Some(port) => format!("127.0.0.1:{port}").parse::<SocketAddr>(),
            None => address.parse::<SocketAddr>(),
        };
        let addr = parsed.map_err(|_| {
            NativeError::Core(insitubatch_core::Error::option(
                "metrics_address",
                format!(
                    "`metrics_address` must be IP:PORT, e.g. 0.0.0.0:9400 to be scraped from other machines or \
                     127.0.0.1:0 for a free local port; got {address:?}"
                ),
            ))
        })?;
        let bind = |e: std::io::Error| NativeError::Open {
            message: format!("the metrics endpoint cannot listen there ({e}); pass a free IP:PORT, or port 0"),
            url: address.to_string(),
        };
        let listener = runtime.block_on(tokio::net::TcpListener::bind(addr)).map_err(bind)?;
        let bound = listener.local_addr().map_err(bind)?;
        let exporter = Arc::clone(self);
        runtime.spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let exporter = Arc::clone(&exporter);
                tokio::spawn(async move {
                    let answer = hyper::service::service_fn(move |_: Request<hyper::body::Incoming>| {
                        let text = exporter.render();
                        async move {
                            // Any page may read it (the dashboard watches a job from its own
                            // origin); the endpoint is opt-in and holds loader counters only.
                            Response::builder()
                                .header("content-type", "application/openmetrics-text; version=1.0.0; charset=utf-8")
                                .header("access-control-allow-origin", "*")
                                .body(Full::new(Bytes::from(text)))
                        }
                    });
                    let _ =
                        hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), answer).await;
                });
            }
        });
        Ok(bound)
    }
}
