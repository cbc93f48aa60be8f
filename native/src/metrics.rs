//! An opt-in Prometheus endpoint fed by the pass reports (`PassObserver`): per-stage seconds,
//! reads, bytes and batches as counters; the last pass's batch-wait quantiles, rate and
//! limiting stage as gauges; every series labelled with the split, the rank and the world
//! size, so a fleet's ranks are told apart in one query (`sum by (rank)`).
//!
//! The text format is prometheus-client's; the server is hyper on the dataset's tokio runtime,
//! answering `GET /metrics` (any path) until the dataset's runtime shuts down.
//!
//! What a web page may read of it (docs/security.md): nothing, unless the job names the page's
//! origin (`metrics_cors_origin`): then `Access-Control-Allow-Origin` carries exactly that
//! origin, to a request from it, and no other origin is told anything. A bare port listens on
//! loopback only; an endpoint on loopback answers only requests addressed to an IP or
//! `localhost` (`Host`), so a page that rebinds its own host name to 127.0.0.1 is refused.
//! The series hold counters and timings of passes, labelled by split and rank: no store URL,
//! array name, path or credential.

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

    /// Listen on `address` (`IP:PORT`, `localhost:PORT`, or a bare `PORT` for loopback; port 0
    /// picks a free one) and answer every `GET` with [`Self::render`], on `runtime`; the bound
    /// address is returned. `cors_origin`: the one web origin (`http://host:port`) whose pages
    /// may read it; `None`: no page may.
    ///
    /// # Errors
    /// [`NativeError::Core`] (a configuration error) for an address that is not `IP:PORT` (no
    /// name is looked up) or an origin that is not one; [`NativeError::Open`] when it cannot
    /// be bound.
    pub fn serve(
        self: &Arc<Self>,
        address: &str,
        cors_origin: Option<&str>,
        runtime: &tokio::runtime::Handle,
    ) -> Result<SocketAddr> {
        let addr = parse_address(address)?;
        let policy = Arc::new(Policy {
            cors_origin: cors_origin.map(parse_origin).transpose()?,
            loopback: addr.ip().is_loopback(),
        });
        let bind = |e: std::io::Error| NativeError::Open {
            message: format!("the metrics endpoint cannot listen there ({e}); pass a free IP:PORT, or port 0"),
            url: address.to_string(),
        };
        let listener = runtime.block_on(tokio::net::TcpListener::bind(addr)).map_err(bind)?;
        let bound = listener.local_addr().map_err(bind)?;
        let exporter = Arc::clone(self);
        runtime.spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (exporter, policy) = (Arc::clone(&exporter), Arc::clone(&policy));
                tokio::spawn(async move {
                    let answer = hyper::service::service_fn(move |request: Request<hyper::body::Incoming>| {
                        let response = policy.answer(&request, &exporter);
                        async move { response }
                    });
                    let _ =
                        hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), answer).await;
                });
            }
        });
        Ok(bound)
    }
}

/// A refused option of the endpoint, named so each binding spells it its own way.
fn refused(option: &str, message: String) -> NativeError {
    NativeError::Core(insitubatch_core::Error::option(option, message))
}

/// `IP:PORT`, `localhost:PORT` (127.0.0.1), or `PORT`/`:PORT` alone (127.0.0.1: loopback
/// unless an address says otherwise).
fn parse_address(address: &str) -> Result<SocketAddr> {
    let port_only = address.strip_prefix(':').unwrap_or(address);
    let parsed = match address.strip_prefix("localhost:") {
        Some(port) => format!("127.0.0.1:{port}").parse::<SocketAddr>(),
        None if port_only.parse::<u16>().is_ok() => format!("127.0.0.1:{port_only}").parse::<SocketAddr>(),
        None => address.parse::<SocketAddr>(),
    };
    parsed.map_err(|_| {
        refused("metrics_address", format!(
            "`metrics_address` must be IP:PORT, e.g. 127.0.0.1:9400 (or 9400 alone) for this machine, 0.0.0.0:9400 to \
             be scraped from other machines, or 127.0.0.1:0 for a free local port; got {address:?}"
        ))
    })
}

/// A web origin as browsers send it (`scheme://host[:port]`, no path), checked and normalized.
fn parse_origin(origin: &str) -> Result<String> {
    let refuse = || {
        refused(
            "metrics_cors_origin",
            format!(
                "`metrics_cors_origin` must be one web origin, scheme://host[:port] with no path (the page that reads the \
             endpoint, e.g. the dashboard's http://localhost:5173), never \"*\"; got {origin:?}"
            ),
        )
    };
    let url = url::Url::parse(origin).map_err(|_| refuse())?;
    let bare = url.path() == "/" && url.query().is_none() && url.fragment().is_none() && url.username().is_empty();
    if !matches!(url.scheme(), "http" | "https") || !bare || url.password().is_some() || url.host().is_none() {
        return Err(refuse());
    }
    // As a browser sends it: the host in lower case, no default port, no trailing slash.
    Ok(url.origin().ascii_serialization())
}

/// How the endpoint answers a request.
#[derive(Debug)]
struct Policy {
    /// The one origin whose pages may read it.
    cors_origin: Option<String>,
    /// Bound to a loopback address: only requests addressed to an IP or `localhost`.
    loopback: bool,
}

type Answer = std::result::Result<Response<Full<Bytes>>, hyper::http::Error>;

impl Policy {
    fn answer(&self, request: &Request<hyper::body::Incoming>, exporter: &PrometheusExporter) -> Answer {
        let plain = |status: u16, text: &str| {
            Response::builder()
                .status(status)
                .header("content-type", "text/plain")
                .body(Full::new(Bytes::from(text.to_string())))
        };
        if self.loopback && !request.headers().get("host").is_none_or(|h| h.to_str().is_ok_and(addressed_directly)) {
            return plain(403, "this endpoint listens on loopback and answers only requests to an IP or localhost\n");
        }
        if !matches!(*request.method(), hyper::Method::GET | hyper::Method::HEAD) {
            return plain(405, "only GET\n");
        }
        let mut response =
            Response::builder().header("content-type", "application/openmetrics-text; version=1.0.0; charset=utf-8");
        if let Some(allowed) = &self.cors_origin {
            response = response.header("vary", "origin");
            if request.headers().get("origin").is_some_and(|o| o.as_bytes() == allowed.as_bytes()) {
                response = response.header("access-control-allow-origin", allowed.as_str());
            }
        }
        response.body(Full::new(Bytes::from(exporter.render())))
    }
}

/// True for a `Host` header that names an IP literal or `localhost` (with or without a port):
/// what a scraper or a page on this machine sends, and a page whose own name was rebound to
/// 127.0.0.1 (DNS rebinding) does not.
fn addressed_directly(host: &str) -> bool {
    let name = match host.rsplit_once(':') {
        Some((name, port)) if port.parse::<u16>().is_ok() && !name.ends_with(':') => name,
        _ => host,
    };
    let name = name.trim_start_matches('[').trim_end_matches(']');
    name.eq_ignore_ascii_case("localhost") || name.parse::<std::net::IpAddr>().is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_default_to_loopback_and_origins_are_exact() {
        assert_eq!(parse_address("9400").unwrap(), "127.0.0.1:9400".parse().unwrap());
        assert_eq!(parse_address(":0").unwrap(), "127.0.0.1:0".parse().unwrap());
        assert_eq!(parse_address("localhost:1").unwrap(), "127.0.0.1:1".parse().unwrap());
        assert_eq!(parse_address("0.0.0.0:9400").unwrap(), "0.0.0.0:9400".parse().unwrap());
        assert!(parse_address("example.org:9400").unwrap_err().to_string().contains("must be IP:PORT"));
        assert_eq!(parse_origin("http://localhost:5173").unwrap(), "http://localhost:5173");
        assert_eq!(parse_origin("https://Dash.Example.org:443/").unwrap(), "https://dash.example.org");
        for bad in
            ["*", "null", "localhost:5173", "http://localhost:5173/app", "file:///tmp/x", "http://a?b", "http://u@a"]
        {
            let e = parse_origin(bad).unwrap_err().to_string();
            assert!(e.contains("one web origin"), "{bad}: {e}");
        }
    }

    #[test]
    fn only_hosts_named_by_address_reach_a_loopback_endpoint() {
        for ok in ["localhost", "localhost:9400", "127.0.0.1:9400", "[::1]:9400", "LOCALHOST", "10.1.2.3"] {
            assert!(addressed_directly(ok), "{ok}");
        }
        for rebound in ["evil.example:9400", "evil.example", "localhost.evil.example:1", "127.0.0.1.nip.io:9400"] {
            assert!(!addressed_directly(rebound), "{rebound}");
        }
    }
}
