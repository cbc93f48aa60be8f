//! Shared helpers for the end-to-end tests: the zarr-python fixtures (written by
//! `tests/fixtures/make_fixtures.py`) and the loopback servers started by `scripts/test.sh`.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;

use insitubatch_native::core::Batch;
use insitubatch_native::core::geometry::sample_element_index;
use serde::Deserialize;

/// One array of a fixture store.
#[derive(Debug, Clone, Deserialize)]
pub struct FixtureArray {
    /// numpy dtype name.
    pub dtype: String,
    /// Shape.
    pub shape: Vec<u64>,
    /// Stored chunk (shard) shape.
    pub chunks: Vec<u64>,
    /// Inner chunk shape (= chunks unless sharded).
    pub inner_chunks: Vec<u64>,
    /// Raw little-endian values, relative to the fixtures dir.
    pub values_file: String,
    /// A CF coordinate.
    pub is_coordinate: bool,
}

/// One fixture store.
#[derive(Debug, Clone, Deserialize)]
pub struct FixtureStore {
    /// Name.
    pub name: String,
    /// Relative path.
    pub path: String,
    /// 2 or 3.
    pub zarr_format: u8,
    /// Sample axis to read it with.
    pub sample_axis: usize,
    /// Arrays by path.
    pub arrays: BTreeMap<String, FixtureArray>,
    /// Has consolidated metadata.
    pub consolidated: bool,
}

/// The fixtures manifest.
#[derive(Debug, Clone, Deserialize)]
pub struct Manifest {
    /// Stores.
    pub stores: Vec<FixtureStore>,
    /// Broken arrays.
    pub bad: serde_json::Value,
    /// The virtual fixtures' Icechunk repository (make_virtual.py `build_icechunk`): a store
    /// entry with its `snapshots` (`v1`, `main`) and its `bad` branch.
    #[serde(default)]
    pub icechunk: Option<serde_json::Value>,
    /// The Icechunk repository VirtualiZarr writes from the NetCDF4 files (make_virtual.py
    /// `build_virtualizarr`): a store entry.
    #[serde(default)]
    pub virtualizarr: Option<serde_json::Value>,
}

/// The fixtures directory (`$INSITUBATCH_FIXTURES`), written by `scripts/test.sh`.
pub fn fixtures_dir() -> PathBuf {
    PathBuf::from(std::env::var("INSITUBATCH_FIXTURES").expect(
        "INSITUBATCH_FIXTURES is not set: run these tests through scripts/test.sh, which writes the zarr-python \
         fixtures and starts the loopback servers",
    ))
}

/// Parse the manifest.
pub fn manifest() -> Manifest {
    let p = fixtures_dir().join("manifest.json");
    serde_json::from_slice(&std::fs::read(&p).unwrap_or_else(|e| panic!("cannot read {}: {e}", p.display())))
        .expect("valid manifest")
}

/// The virtual-Zarr fixtures (`tests/fixtures/make_virtual.py`, run by make_fixtures.py):
/// NetCDF4 files, kerchunk reference sets over them (`stores`, each's `path` relative to the
/// folder), xarray's reading of the files as each array's values, and the sets that are wrong
/// on purpose (`bad`).
pub fn virtual_dir() -> PathBuf {
    fixtures_dir().join("virtual")
}

/// The virtual fixtures' manifest; `None` (after a loud skip, or a failure under CI) when
/// they were not made.
pub fn virtual_manifest(test: &str) -> Option<Manifest> {
    let p = virtual_dir().join("manifest.json");
    let Ok(bytes) = std::fs::read(&p) else {
        skip(test, &format!("no virtual fixtures at {} (tests/fixtures/make_virtual.py)", p.display()));
        return None;
    };
    Some(serde_json::from_slice(&bytes).expect("a valid virtual manifest"))
}

/// Element size of a numpy dtype name.
pub fn itemsize(dtype: &str) -> usize {
    match dtype {
        "bool" | "int8" | "uint8" => 1,
        "int16" | "uint16" | "float16" => 2,
        "int32" | "uint32" | "float32" => 4,
        _ => 8,
    }
}

/// The source rows (sample-first, inner axes in physical order), as bytes, for each sample.
pub fn source_rows(a: &FixtureArray, sample_axis: usize) -> Vec<Vec<u8>> {
    source_rows_in(&fixtures_dir(), a, sample_axis)
}

/// [`source_rows`] of an array whose values file is relative to `dir`.
pub fn source_rows_in(dir: &std::path::Path, a: &FixtureArray, sample_axis: usize) -> Vec<Vec<u8>> {
    let raw = std::fs::read(dir.join(&a.values_file)).expect("values file");
    let item = itemsize(&a.dtype);
    let shape = &a.shape;
    let n_inner: u64 = (0..shape.len()).filter(|&x| x != sample_axis).map(|x| shape[x]).product();
    (0..shape[sample_axis])
        .map(|s| {
            let mut row = Vec::with_capacity(n_inner as usize * item);
            for e in 0..n_inner {
                let flat = sample_element_index(shape, sample_axis, s, e) as usize;
                row.extend_from_slice(&raw[flat * item..(flat + 1) * item]);
            }
            row
        })
        .collect()
}

/// Check a whole pass: each drawable sample once, each row equal to the source.
pub fn check_pass(batches: &[Batch], label: &str, rows: &[Vec<u8>], offset: i64, expected: &[u64]) {
    let mut seen = Vec::new();
    for b in batches {
        let a = &b.arrays[label];
        let row = a.row_bytes();
        for (r, &t) in b.sample_indices.iter().enumerate() {
            let s = (t as i64 + offset) as usize;
            assert_eq!(
                &a.data[r * row..(r + 1) * row],
                rows[s].as_slice(),
                "{label}: sample {s} differs from the source"
            );
            seen.push(t);
        }
    }
    seen.sort_unstable();
    assert_eq!(seen, expected, "{label}: every drawable sample exactly once");
}

/// A digest of a pass: sample order and every byte of every batch.
pub fn digest(batches: &[Batch]) -> String {
    let mut d = insitubatch_native::BatchDigest::default();
    for b in batches {
        d.update(b);
    }
    d.finish()
}

/// `$INSITUBATCH_HTTP_URL`, set by `scripts/test.sh`.
pub fn http_url() -> String {
    std::env::var("INSITUBATCH_HTTP_URL").expect("INSITUBATCH_HTTP_URL is not set: run through scripts/test.sh")
}

/// `$INSITUBATCH_FAULTY_HTTP_URL`: `tests/servers/faulty_http.py`, started by `scripts/test.sh`.
pub fn faulty_http_url() -> String {
    std::env::var("INSITUBATCH_FAULTY_HTTP_URL")
        .expect("INSITUBATCH_FAULTY_HTTP_URL is not set: run through scripts/test.sh")
}

/// `s3://$INSITUBATCH_S3_BUCKET`, with the endpoint in `AWS_ENDPOINT_URL`.
pub fn s3_url() -> String {
    format!(
        "s3://{}",
        std::env::var("INSITUBATCH_S3_BUCKET").expect("INSITUBATCH_S3_BUCKET is not set: run through scripts/test.sh")
    )
}

/// Where the storage conformance fixture lives under the fixtures dir, and so under the HTTP
/// server's root and the S3 bucket: `$INSITUBATCH_FIXTURES/storage-conformance`.
pub const STORAGE_FIXTURE: &str = "storage-conformance";

/// Write core's storage conformance fixture (`insitubatch_core::conformance::fixture`) under
/// `dir`, one file per key. Idempotent and safe to run while a server reads the directory:
/// each file is written to a temporary name and renamed into place.
///
/// # Errors
/// The first I/O error, with the path it concerns.
pub fn write_storage_fixture(dir: &std::path::Path) -> std::io::Result<()> {
    let with_path = |p: &std::path::Path| {
        let p = p.display().to_string();
        move |e: std::io::Error| std::io::Error::new(e.kind(), format!("{e}: {p}"))
    };
    for (key, bytes) in insitubatch_core::conformance::fixture() {
        let path = dir.join(key);
        let parent = path.parent().expect("a fixture key has a parent dir");
        std::fs::create_dir_all(parent).map_err(with_path(parent))?;
        // Unique per process and per call: writers on several threads never share a temp file.
        static CALLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let tmp = parent.join(format!(".{name}.{}.{call}.tmp", std::process::id()));
        std::fs::write(&tmp, &bytes).map_err(with_path(&tmp))?;
        std::fs::rename(&tmp, &path).map_err(with_path(&path))?;
    }
    Ok(())
}

/// Whether this run is CI's (`CI` set to anything but `""`, `0` or `false`, as CI services
/// and `.ci/run` do). There every prerequisite of every test is provided, so a missing one is
/// a failure, never a skip.
pub fn under_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !matches!(v.trim().to_ascii_lowercase().as_str(), "" | "0" | "false"))
}

/// Skip the calling test because `why` (a missing prerequisite), loudly: the line goes
/// straight to stderr, past libtest's output capture, so a skip never looks like a pass.
/// Under CI ([`under_ci`]) it panics instead: the test fails. Call it, then `return`.
pub fn skip(test: &str, why: &str) {
    assert!(!under_ci(), "{test}: {why}; CI is set, where this is a failure, not a skip");
    // Not eprintln!: libtest captures that and shows it only for failed tests.
    let _ = writeln!(std::io::stderr().lock(), "SKIPPED {test}: {why}");
}

/// A cloud-like object store of this test's own (`tests/servers/cloud_store`, the
/// `cloud-store` binary): a folder served over HTTP and path-style S3 with a time to first
/// byte, rates, a slow tail or stalls, and counters. Each test starts its own, so settings
/// and counters are never shared; it is stopped when dropped.
pub struct CloudStore {
    child: std::process::Child,
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    runtime: tokio::runtime::Runtime,
    client: reqwest::Client,
}

impl CloudStore {
    /// Serve `root` (the binary's path is `bin`: `env!("CARGO_BIN_EXE_cloud-store")` in the
    /// tests of this crate) with the `KEY=VALUE` settings of `/_ib/config`.
    ///
    /// # Panics
    /// When the binary does not start or does not say where it listens.
    pub fn start(bin: &str, root: &std::path::Path, settings: &[(&str, &str)]) -> Self {
        use std::io::BufRead;
        let mut child = std::process::Command::new(bin)
            .arg("--root")
            .arg(root)
            .args(["--port-file", "-"])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {bin}: {e}"));
        let mut line = String::new();
        // Blocks until the server listens (its first line), or fails at once if it exits.
        std::io::BufReader::new(child.stdout.take().expect("piped stdout")).read_line(&mut line).expect("port line");
        let port: u16 = line.trim().parse().unwrap_or_else(|_| panic!("cloud-store printed {line:?}, not a port"));
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
        let store = Self { child, base: format!("http://127.0.0.1:{port}"), runtime, client: reqwest::Client::new() };
        store.configure(settings);
        store
    }

    /// Change the setting (`ttfb_ms`, `conn_rate`, `rate`, `tail`, `stall`, `seed`).
    ///
    /// # Panics
    /// When the store refuses a setting.
    pub fn configure(&self, settings: &[(&str, &str)]) {
        let query: Vec<String> = settings.iter().map(|(k, v)| format!("{k}={v}")).collect();
        self.get(&format!("/_ib/config?{}", query.join("&")));
    }

    /// The counters since the last reset (requests, gets, lists, bytes, cancelled, paths, ...).
    pub fn stats(&self) -> serde_json::Value {
        self.get("/_ib/stats")
    }

    /// Zero the counters.
    pub fn reset(&self) {
        self.get("/_ib/reset");
    }

    fn get(&self, path: &str) -> serde_json::Value {
        let url = format!("{}{path}", self.base);
        self.runtime.block_on(async {
            let r = self.client.get(&url).send().await.unwrap_or_else(|e| panic!("GET {url}: {e}"));
            let status = r.status();
            let body = r.text().await.unwrap_or_default();
            assert!(status.is_success(), "GET {url}: {status} {body}");
            serde_json::from_str(&body).unwrap_or_else(|e| panic!("GET {url}: {e}: {body}"))
        })
    }
}

impl Drop for CloudStore {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
