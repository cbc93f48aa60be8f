//! Requests: a folder as objects over HTTP (GET, HEAD, one `Range`) and S3's path-style
//! subset (the same GET/HEAD on `/bucket/key`, and `ListObjectsV2` on `/bucket?list-type=2`),
//! after the time to first byte (and, for a drawn share of requests, the slow tail).
//! `/_ib/stats`, `/_ib/reset` and `/_ib/config` are the control paths.

use std::collections::HashSet;
use std::convert::Infallible;
use std::fmt::Write as _;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use chrono::{DateTime, Utc};
use futures::StreamExt;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Empty, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::header::{self, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use percent_encoding::percent_decode_str;

use crate::config::Config;
use crate::counters::{Tally, cpu_seconds};

/// A response body: a small document or a file range streamed in pieces.
pub type Body = UnsyncBoxBody<Bytes, io::Error>;

/// Bytes read from the file per body piece.
const PIECE: u64 = 256 * 1024;

/// The longest a stalled request is held: long enough that only a second request can finish
/// the read, short enough that a client that never gives up does not hold a task forever.
const STALL_LIMIT: Duration = Duration::from_secs(300);

/// Everything a request handler reads.
pub struct State {
    pub root: PathBuf,
    pub config: Arc<Config>,
    pub tally: Tally,
    /// Paths whose first GET was stalled already.
    stalled: Mutex<HashSet<String>>,
    /// Requests so far: the slow tail's draw is a function of the seed and this number.
    numbered: AtomicU64,
}

impl State {
    pub fn new(root: PathBuf, config: Arc<Config>) -> Self {
        Self { root, config, tally: Tally::default(), stalled: Mutex::default(), numbered: AtomicU64::new(0) }
    }
}

pub async fn handle(state: Arc<State>, req: Request<Incoming>) -> Result<Response<Body>, Infallible> {
    let path = percent_decode_str(req.uri().path()).decode_utf8_lossy().into_owned();
    let query = parse_query(req.uri().query().unwrap_or(""));
    let response = match (req.method(), path.as_str()) {
        (_, "/_ib/stats") => json(&stats_document(&state)),
        (_, "/_ib/reset") => {
            state.tally.reset();
            state.stalled.lock().unwrap_or_else(PoisonError::into_inner).clear();
            json(&serde_json::json!({"reset": true}))
        }
        (_, "/_ib/config") => match state.config.update(query.iter().map(|(k, v)| (k.as_str(), v.as_str()))) {
            Ok(s) => json(&s),
            Err(e) => text(StatusCode::BAD_REQUEST, &e),
        },
        (&Method::OPTIONS, _) => cors(Response::builder().status(StatusCode::NO_CONTENT))
            .header(header::ACCESS_CONTROL_ALLOW_METHODS, "GET, HEAD, OPTIONS")
            .header(header::ACCESS_CONTROL_ALLOW_HEADERS, "Range, Authorization, x-amz-date, x-amz-content-sha256")
            .body(empty())
            .unwrap_or_else(|_| internal()),
        (&Method::GET | &Method::HEAD, _) => data(&state, req.method(), &path, &query, req.headers()).await,
        _ => text(StatusCode::METHOD_NOT_ALLOWED, "only GET, HEAD and OPTIONS are served"),
    };
    Ok(response)
}

/// A GET, HEAD or list request, after the store's latency.
async fn data(
    state: &Arc<State>,
    method: &Method,
    path: &str,
    query: &[(String, String)],
    headers: &hyper::HeaderMap,
) -> Response<Body> {
    let shaping = state.config.shaping();
    let number = state.numbered.fetch_add(1, Ordering::Relaxed);
    let slow = shaping.tail_share > 0.0 && unit_draw(shaping.seed, number) < shaping.tail_share;
    let listing = query.iter().any(|(k, _)| k == "list-type");
    let stall = *method == Method::GET && !listing && first_stall(state, path, &shaping.stall);
    state.tally.with(|c| {
        c.requests += 1;
        c.slow += u64::from(slow);
        c.stalled += u64::from(stall);
        match (method, listing) {
            (_, true) => c.lists += 1,
            (&Method::HEAD, _) => c.heads += 1,
            _ => {
                c.gets += 1;
                c.ranged_gets += u64::from(headers.contains_key(header::RANGE));
            }
        }
    });
    if stall {
        // Counted as cancelled when the client gives up on it first (its future is dropped).
        let abandoned = Abandoned(state);
        tokio::time::sleep(STALL_LIMIT).await;
        std::mem::forget(abandoned);
    }
    tokio::time::sleep(shaping.ttfb + if slow { shaping.tail_extra } else { Duration::ZERO }).await;
    if listing {
        return list(state, path, query);
    }
    let Some(file) = resolve(&state.root, path) else {
        state.tally.with(|c| c.not_found += 1);
        return text(StatusCode::NOT_FOUND, "no such object");
    };
    object(state, method, path, &file, headers.get(header::RANGE))
}

/// Counts a stalled request whose client hung up (hyper drops its handler) as cancelled.
struct Abandoned<'a>(&'a State);

impl Drop for Abandoned<'_> {
    fn drop(&mut self) {
        self.0.tally.with(|c| c.cancelled += 1);
    }
}

/// A uniform draw in `[0, 1)` from (seed, request number): the slow tail is reproducible
/// for a given order of requests. splitmix64, written out: one line of arithmetic.
fn unit_draw(seed: u64, n: u64) -> f64 {
    let mut z = seed ^ n.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    (z ^ (z >> 31)) as f64 / 2f64.powi(64)
}

/// True the first time a GET of `path` matches a stall pattern.
fn first_stall(state: &State, path: &str, patterns: &[String]) -> bool {
    patterns.iter().any(|p| path.contains(p.as_str()))
        && state.stalled.lock().unwrap_or_else(PoisonError::into_inner).insert(path.to_string())
}

/// The file under `root` for a URL path, refusing anything that leaves the root.
fn resolve(root: &Path, path: &str) -> Option<PathBuf> {
    let mut out = root.to_path_buf();
    for part in path.split('/').filter(|p| !p.is_empty()) {
        if part == "." || part == ".." {
            return None;
        }
        out.push(part);
    }
    out.is_file().then_some(out)
}

/// A whole object or one range of it; HEAD gets the same headers and no body.
fn object(state: &Arc<State>, method: &Method, path: &str, file: &Path, range: Option<&HeaderValue>) -> Response<Body> {
    let Ok(meta) = std::fs::metadata(file) else { return text(StatusCode::NOT_FOUND, "no such object") };
    let size = meta.len();
    let modified: DateTime<Utc> = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH).into();
    let (status, start, end) = match range.map(|r| parse_range(r.to_str().unwrap_or(""), size)) {
        None => (StatusCode::OK, 0, size),
        Some(Some((s, e))) => (StatusCode::PARTIAL_CONTENT, s, e),
        Some(None) => {
            return cors(Response::builder().status(StatusCode::RANGE_NOT_SATISFIABLE))
                .header(header::CONTENT_RANGE, format!("bytes */{size}"))
                .body(empty())
                .unwrap_or_else(|_| internal());
        }
    };
    let mut builder = cors(Response::builder().status(status))
        .header(header::CONTENT_LENGTH, end - start)
        .header(header::ACCEPT_RANGES, "bytes")
        .header(header::ETAG, etag(size, &modified))
        .header(header::LAST_MODIFIED, modified.format("%a, %d %b %Y %H:%M:%S GMT").to_string())
        .header(header::CONTENT_TYPE, "application/octet-stream");
    if status == StatusCode::PARTIAL_CONTENT {
        builder = builder.header(header::CONTENT_RANGE, format!("bytes {start}-{}/{size}", end.saturating_sub(1)));
    }
    if *method == Method::HEAD {
        return builder.body(empty()).unwrap_or_else(|_| internal());
    }
    state.tally.with(|c| {
        c.bytes += end - start;
        let p = c.paths.entry(path.to_string()).or_default();
        p.requests += 1;
        p.bytes += end - start;
    });
    match std::fs::File::open(file).and_then(|f| file_body(Arc::clone(state), &f, start, end)) {
        Ok(body) => builder.body(body).unwrap_or_else(|_| internal()),
        Err(e) => text(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
    }
}

/// One `bytes=` range (`a-b`, `a-`, `-n`) as `start..end` within `size`; `None` when it
/// cannot be satisfied.
fn parse_range(value: &str, size: u64) -> Option<(u64, u64)> {
    let spec = value.strip_prefix("bytes=")?;
    let (a, b) = spec.split_once('-')?;
    let (start, end) = match (a.trim(), b.trim()) {
        ("", n) => {
            let n: u64 = n.parse().ok()?;
            (size.saturating_sub(n), size)
        }
        (s, "") => (s.parse().ok()?, size),
        (s, e) => (s.parse().ok()?, e.parse::<u64>().ok()?.saturating_add(1).min(size)),
    };
    (start < end && start < size).then_some((start, end))
}

/// A file range as a body of pieces of one mapping of the file: the bytes go from the page
/// cache to the socket with one copy, so the store's own CPU stays small beside the client's
/// on a small machine. Counts the bytes that left, and a client that hung up before the end.
fn file_body(state: Arc<State>, file: &std::fs::File, start: u64, end: u64) -> io::Result<Body> {
    struct Sending {
        state: Arc<State>,
        bytes: Bytes,
        at: usize,
    }
    impl Drop for Sending {
        fn drop(&mut self) {
            if self.at < self.bytes.len() {
                self.state.tally.with(|c| c.cancelled += 1);
            }
        }
    }
    let len = usize::try_from(end - start).map_err(io::Error::other)?;
    let bytes = if len == 0 {
        Bytes::new()
    } else {
        // SAFETY: the mapping is read-only and private to this response. The served folder
        // is the benchmark's or the test's own, whose files are replaced by renames, never
        // truncated in place, so no mapped page can vanish while the body is sent.
        let map = unsafe { memmap2::MmapOptions::new().offset(start).len(len).map(file)? };
        Bytes::from_owner(map)
    };
    let sending = Sending { state, bytes, at: 0 };
    let pieces = futures::stream::unfold(sending, |mut s| async move {
        if s.at >= s.bytes.len() {
            return None;
        }
        let next = (s.at + PIECE as usize).min(s.bytes.len());
        let piece = s.bytes.slice(s.at..next);
        s.state.tally.with(|c| c.bytes_sent += (next - s.at) as u64);
        s.at = next;
        Some((Ok::<_, io::Error>(Frame::data(piece)), s))
    });
    Ok(BodyExt::boxed_unsync(StreamBody::new(pieces.boxed())))
}

/// `ListObjectsV2` over `/bucket`: keys under the bucket's folder, sorted, paged by
/// `max-keys` with the last key as the continuation token.
fn list(state: &State, path: &str, query: &[(String, String)]) -> Response<Body> {
    let arg = |k: &str| query.iter().find(|(q, _)| q == k).map(|(_, v)| v.as_str());
    let bucket = path.trim_matches('/');
    if bucket.is_empty() || bucket.contains('/') {
        return text(StatusCode::BAD_REQUEST, "list a bucket: GET /BUCKET?list-type=2");
    }
    let Some(dir) = resolve_dir(&state.root, bucket) else { return text(StatusCode::NOT_FOUND, "no such bucket") };
    let prefix = arg("prefix").unwrap_or("");
    let delimiter = arg("delimiter").filter(|d| !d.is_empty());
    let after = arg("continuation-token").or(arg("start-after")).unwrap_or("");
    let max_keys: usize = arg("max-keys").and_then(|m| m.parse().ok()).unwrap_or(1000).max(1);
    let mut keys = Vec::new();
    walk(&dir, "", &mut keys);
    keys.retain(|(k, _)| k.starts_with(prefix) && k.as_str() > after);
    keys.sort_by(|a, b| a.0.cmp(&b.0));
    let mut contents = Vec::new();
    let mut prefixes = std::collections::BTreeSet::new();
    for (key, meta) in keys {
        if contents.len() + prefixes.len() >= max_keys {
            break;
        }
        match delimiter.and_then(|d| key[prefix.len()..].find(d).map(|i| key[..prefix.len() + i + d.len()].to_string()))
        {
            Some(common) => {
                prefixes.insert(common);
            }
            None => contents.push((key, meta)),
        }
    }
    let truncated = contents.len() + prefixes.len() >= max_keys;
    let xml = list_xml(bucket, prefix, &contents, &prefixes, truncated);
    cors(Response::builder().status(StatusCode::OK))
        .header(header::CONTENT_TYPE, "application/xml")
        .body(full(xml))
        .unwrap_or_else(|_| internal())
}

fn resolve_dir(root: &Path, bucket: &str) -> Option<PathBuf> {
    (bucket != "." && bucket != "..").then(|| root.join(bucket)).filter(|d| d.is_dir())
}

/// Every file under `dir`, as keys relative to the bucket.
fn walk(dir: &Path, rel: &str, out: &mut Vec<(String, std::fs::Metadata)>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let key = if rel.is_empty() { name } else { format!("{rel}/{name}") };
        match entry.metadata() {
            Ok(m) if m.is_dir() => walk(&entry.path(), &key, out),
            Ok(m) => out.push((key, m)),
            Err(_) => {}
        }
    }
}

fn list_xml(
    bucket: &str,
    prefix: &str,
    contents: &[(String, std::fs::Metadata)],
    prefixes: &std::collections::BTreeSet<String>,
    truncated: bool,
) -> String {
    let mut xml = String::from(r#"<?xml version="1.0" encoding="UTF-8"?>"#);
    xml.push_str(r#"<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">"#);
    let _ = write!(
        xml,
        "<Name>{}</Name><Prefix>{}</Prefix><KeyCount>{}</KeyCount><IsTruncated>{truncated}</IsTruncated>",
        escape(bucket),
        escape(prefix),
        contents.len() + prefixes.len()
    );
    for (key, meta) in contents {
        let modified: DateTime<Utc> = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH).into();
        let _ = write!(
            xml,
            "<Contents><Key>{}</Key><LastModified>{}</LastModified><ETag>{}</ETag><Size>{}</Size>\
             <StorageClass>STANDARD</StorageClass></Contents>",
            escape(key),
            modified.format("%Y-%m-%dT%H:%M:%S%.3fZ"),
            escape(&etag(meta.len(), &modified)),
            meta.len()
        );
    }
    for p in prefixes {
        let _ = write!(xml, "<CommonPrefixes><Prefix>{}</Prefix></CommonPrefixes>", escape(p));
    }
    if truncated && let Some(last) = contents.last().map(|(k, _)| k.as_str()).max(prefixes.last().map(String::as_str)) {
        let _ = write!(xml, "<NextContinuationToken>{}</NextContinuationToken>", escape(last));
    }
    xml.push_str("</ListBucketResult>");
    xml
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

fn etag(size: u64, modified: &DateTime<Utc>) -> String {
    format!("\"{size:x}-{:x}\"", modified.timestamp_micros())
}

fn parse_query(q: &str) -> Vec<(String, String)> {
    q.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            let dec = |s: &str| percent_decode_str(&s.replace('+', " ")).decode_utf8_lossy().into_owned();
            (dec(k), dec(v))
        })
        .collect()
}

fn stats_document(state: &State) -> serde_json::Value {
    let mut doc = serde_json::to_value(state.tally.snapshot()).unwrap_or_default();
    doc["cpu_s"] = serde_json::json!(cpu_seconds());
    doc["shaping"] = serde_json::to_value(state.config.shaping()).unwrap_or_default();
    doc
}

fn cors(builder: hyper::http::response::Builder) -> hyper::http::response::Builder {
    builder.header(header::ACCESS_CONTROL_ALLOW_ORIGIN, "*").header(
        header::ACCESS_CONTROL_EXPOSE_HEADERS,
        "Content-Length, Content-Range, ETag, Accept-Ranges, Last-Modified",
    )
}

fn json(value: &impl serde::Serialize) -> Response<Body> {
    let body = serde_json::to_string_pretty(value).unwrap_or_default();
    cors(Response::builder().status(StatusCode::OK))
        .header(header::CONTENT_TYPE, "application/json")
        .body(full(body))
        .unwrap_or_else(|_| internal())
}

fn text(status: StatusCode, message: &str) -> Response<Body> {
    cors(Response::builder().status(status)).body(full(format!("{message}\n"))).unwrap_or_else(|_| internal())
}

fn full(s: String) -> Body {
    BodyExt::boxed_unsync(Full::new(Bytes::from(s)).map_err(|never| match never {}))
}

fn empty() -> Body {
    BodyExt::boxed_unsync(Empty::new().map_err(|never| match never {}))
}

fn internal() -> Response<Body> {
    let mut r = Response::new(empty());
    *r.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
    r
}

#[cfg(test)]
mod tests {
    use super::{parse_range, unit_draw};

    #[test]
    fn ranges_are_read_as_http_says_and_unsatisfiable_ones_refused() {
        assert_eq!(parse_range("bytes=0-9", 100), Some((0, 10)));
        assert_eq!(parse_range("bytes=90-", 100), Some((90, 100)));
        assert_eq!(parse_range("bytes=-10", 100), Some((90, 100)));
        assert_eq!(parse_range("bytes=-1000", 100), Some((0, 100)), "a suffix longer than the object is all of it");
        assert_eq!(parse_range("bytes=95-200", 100), Some((95, 100)), "an end past the object is clipped");
        assert_eq!(parse_range("bytes=100-", 100), None);
        assert_eq!(parse_range("bytes=5-2", 100), None);
        assert_eq!(parse_range("items=0-1", 100), None);
    }

    #[test]
    fn the_slow_tail_draws_about_its_share() {
        let slow = (0..100_000).filter(|&n| unit_draw(7, n) < 0.01).count();
        assert!((800..1200).contains(&slow), "{slow} of 100000 drawn at 1%");
    }
}
