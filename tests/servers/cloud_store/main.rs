//! # cloud-store
//!
//! A cloud-like object store on loopback, for benchmarks and tests: a folder served over
//! HTTP (GET, HEAD, one `Range`) and as path-style S3 (`s3://BUCKET/...` is the folder
//! `ROOT/BUCKET`; GET, HEAD, ListObjectsV2; signatures are not checked), with what makes a
//! cloud store differ from a local disk: a time to first byte per request, a rate per
//! connection, one rate shared by every connection (the network interface), an optional
//! slow tail, and counters of requests and bytes.
//!
//! ```text
//! cloud-store --root DIR [--port 0] [--port-file -] [--ttfb-ms 50] [--conn-rate 40MB]
//!             [--rate 400MB] [--tail 0.01:1000] [--stall PATH-PART,...] [--seed 0] [--threads 1]
//! ```
//! `--port-file -` prints the port as the first line of stdout once it listens, so a
//! starter blocks on that line. While it runs: `GET /_ib/stats` (JSON counters, the
//! setting, the server's CPU seconds), `/_ib/reset` (zero the counters), and
//! `/_ib/config?ttfb_ms=20&rate=400MB&...` (change the setting for later requests).

mod config;
mod counters;
mod link;
mod serve;

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use clap::Parser;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

use crate::config::{Config, Shaping};
use crate::link::{Paced, SharedLink};
use crate::serve::State;

#[derive(Parser, Debug)]
#[command(about = "A cloud-like object store on loopback: latency, rates, a slow tail, counters")]
struct Args {
    /// The folder served: `http://HOST:PORT/PATH` and `s3://BUCKET/KEY` (BUCKET a folder in it).
    #[arg(long)]
    root: PathBuf,
    /// Port (0: any free one).
    #[arg(long, default_value_t = 0)]
    port: u16,
    /// Write the port to this file once listening; `-` prints it as stdout's first line.
    #[arg(long)]
    port_file: Option<String>,
    /// Time to first byte of every request, in ms.
    #[arg(long, default_value = "0")]
    ttfb_ms: String,
    /// Rate of one connection: `40MB` (10^6 bytes/s), `1GB`, bytes/s; 0 is unlimited.
    #[arg(long, default_value = "0")]
    conn_rate: String,
    /// Rate all connections share (the network interface); 0 is unlimited.
    #[arg(long, default_value = "0")]
    rate: String,
    /// A slow tail, `SHARE:MS`: that share of requests waits MS more before its first byte.
    #[arg(long)]
    tail: Option<String>,
    /// The first GET of a path containing one of these (comma-separated) is never answered.
    #[arg(long)]
    stall: Option<String>,
    /// Seed of the slow tail's draw.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Runtime threads (1 keeps the store's CPU small beside the client on a small machine).
    #[arg(long, default_value_t = 1)]
    threads: usize,
}

fn main() -> Result<(), String> {
    let args = Args::parse();
    let mut shaping = Shaping::default();
    let settings = [
        Some(("ttfb_ms", args.ttfb_ms.clone())),
        Some(("conn_rate", args.conn_rate.clone())),
        Some(("rate", args.rate.clone())),
        args.tail.clone().map(|t| ("tail", t)),
        args.stall.clone().map(|s| ("stall", s)),
        Some(("seed", args.seed.to_string())),
    ];
    for (k, v) in settings.into_iter().flatten() {
        shaping.set(k, &v)?;
    }
    let root = args.root.canonicalize().map_err(|e| format!("--root {}: {e}", args.root.display()))?;
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.threads.max(1))
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?
        .block_on(serve_forever(root, Arc::new(Config::new(shaping)), args.port, args.port_file))
}

async fn serve_forever(root: PathBuf, config: Arc<Config>, port: u16, port_file: Option<String>) -> Result<(), String> {
    let listener = TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], port))).await.map_err(|e| e.to_string())?;
    let port = listener.local_addr().map_err(|e| e.to_string())?.port();
    announce(port, port_file.as_deref())?;
    let state = Arc::new(State::new(root, Arc::clone(&config)));
    let link = SharedLink::new();
    loop {
        let Ok((tcp, _)) = listener.accept().await else { continue };
        let _ = tcp.set_nodelay(true);
        let io = TokioIo::new(Paced::new(tcp, Arc::clone(&config), Arc::clone(&link)));
        let state = Arc::clone(&state);
        tokio::spawn(async move {
            let service = service_fn(move |req| serve::handle(Arc::clone(&state), req));
            let _ = hyper::server::conn::http1::Builder::new().serve_connection(io, service).await;
        });
    }
}

/// Say where the store listens: a file, or stdout's first line for `-`.
fn announce(port: u16, port_file: Option<&str>) -> Result<(), String> {
    match port_file {
        Some("-") => {
            // One line, once: std's stdout, flushed (tokio's would need its io-std feature).
            let mut out = std::io::stdout().lock();
            writeln!(out, "{port}").and_then(|()| out.flush()).map_err(|e| e.to_string())
        }
        Some(path) => std::fs::write(path, format!("{port}\n")).map_err(|e| format!("--port-file {path}: {e}")),
        None => {
            eprintln!("cloud-store listening on http://127.0.0.1:{port}");
            Ok(())
        }
    }
}
