//! A conformance suite for [`Storage`] implementations, as zarrs exports its store tests.
//!
//! The engine relies on a handful of storage rules that no type can express: a missing key
//! is `Ok(None)`, never an error; a ranged read returns exactly the bytes asked for or
//! fails, never fewer; a suffix longer than the object is the whole object; a store that
//! cannot list says so with `None` rather than an empty listing (discovery would then say
//! "no Zarr store here"). Every `Storage` (memory, local files, HTTP, S3, wasm `fetch`, and
//! any adapter added later) runs this one suite over one fixture set, so they cannot drift
//! apart.
//!
//! # Using it
//! 1. Put [`fixture`] into the store: [`populate_memory`] for a
//!    [`MemoryStorage`](crate::testing::MemoryStorage); for a directory served by a file,
//!    HTTP or S3 server, write each `(key, bytes)` as a file at that relative path
//!    (`insitubatch_tests::write_storage_fixture` does).
//! 2. Open a `Storage` rooted at that fixture set and `check_storage(&storage, &Expectations)`.
//! 3. `report.assert_ok()` panics naming every failed case.
//!
//! The suite is async and runtime-free: drive it on whatever executor the store needs
//! (tokio for object_store, `wasm-bindgen-test` for `fetch`, `block_on` for memory). A
//! future store adapter (the Python-store adapter) is added the same way: populate the
//! store it wraps with [`fixture`] and call [`check_storage`] on the adapter.
//!
//! # The contract checked
//! - `get(key)`: the whole object, byte for byte; `Ok(None)` for a missing key, including a
//!   key that is only a "directory" (`a/b` when `a/b/c` exists).
//! - `get_range(key, Bounded { start, end })`: exactly `end - start` bytes. `start == end`
//!   is an empty read (of an existing object, at most at its end). **A range past the end
//!   of the object, or with `start > end`, is a [`StorageErrorKind::Permanent`] error**,
//!   never a short read. object_store clips an end past the object (and fails a start at or
//!   past it); we refuse both, because the engine only asks for ranges a shard index gave
//!   it, so a short object means a truncated shard or a corrupt index, and bytes cut short
//!   would reach the decoder as if they were the chunk.
//! - `get_range(key, Suffix(n))`: the last `min(n, len)` bytes: a suffix longer than the
//!   object is the whole object (RFC 9110, object_store); `Suffix(0)` is empty.
//! - Missing keys: `Ok(None)` from `get` and from both kinds of `get_range`.
//! - `list(prefix)`, `prefix` being `""` or a directory ending in `/`: every key under it,
//!   recursively, relative to the store's root, in any order; a prefix with nothing under
//!   it lists as empty. A store that cannot list returns `Ok(None)` for any prefix, and
//!   must be declared so ([`Expectations::unlistable`]). Prefixes that are not directories
//!   are not part of the contract (string prefix in memory, path prefix in object_store).
//! - `location()`: not empty, and no credentials in it: no user info (`user:pass@`) and
//!   none of the secrets the caller names (it ends every storage error message). The
//!   messages of the errors the cases provoke are checked the same way.

use std::fmt;

use bytes::Bytes;

use crate::runtime::{ByteRange, Storage, StorageError, StorageErrorKind};

/// Length of the fixture's binary object, `bin`: odd, and over one 4 KiB page.
pub const BIN_LEN: u64 = 4099;

/// Byte `i` of `bin`: each run of 256 is a permutation of every byte value, XORed with a
/// mask that changes from one run to the next, so a read shifted by any offset (even a
/// multiple of 256) differs.
fn bin_byte(i: u64) -> u8 {
    (i as u8) ^ ((i >> 8).wrapping_mul(167).wrapping_add(13) as u8)
}

/// The fixture set: `(key, bytes)`. Keys use the characters Zarr stores use: dotted
/// metadata (`.zgroup`, `arr/.zarray`), v2 chunk keys (`arr/0.1`), v3 chunk keys
/// (`arr/c/0/1`), nesting (`a/b/c`); plus an empty object and a binary one.
pub fn fixture() -> Vec<(&'static str, Bytes)> {
    let text = |s: &'static str| Bytes::from_static(s.as_bytes());
    vec![
        (".zgroup", text("{\"zarr_format\": 2}\n")),
        ("zarr.json", text("{\"zarr_format\": 3, \"node_type\": \"group\", \"attributes\": {}}\n")),
        ("a/b/c", text("nested three levels down")),
        ("arr/.zarray", text("{\"zarr_format\": 2, \"shape\": [2, 2], \"chunks\": [1, 1]}\n")),
        ("arr/0.1", text("v2 chunk 0.1")),
        ("arr/c/0/1", text("v3 chunk 0/1")),
        ("arr/c/1/0", text("v3 chunk 1/0")),
        ("empty", Bytes::new()),
        ("bin", (0..BIN_LEN).map(bin_byte).collect::<Vec<u8>>().into()),
    ]
}

/// Put the fixture set into a memory store.
#[cfg(any(test, feature = "testing"))]
pub fn populate_memory(storage: &crate::testing::MemoryStorage) {
    for (key, bytes) in fixture() {
        storage.insert(key, bytes);
    }
}

/// What the store under test is expected to do, where stores may differ.
#[derive(Debug, Clone, Default)]
pub struct Expectations {
    /// The store lists keys; when false, `list` must answer `Ok(None)` (plain HTTP).
    pub can_list: bool,
    /// Strings that must not appear in `location()` (passwords, secret keys, tokens).
    pub secrets: Vec<String>,
}

impl Expectations {
    /// A store that lists keys.
    pub fn listable() -> Self {
        Self { can_list: true, secrets: Vec::new() }
    }

    /// A store that cannot list (plain HTTP, `fetch`).
    pub fn unlistable() -> Self {
        Self { can_list: false, secrets: Vec::new() }
    }

    /// Also check that `secret` is not in `location()`.
    #[must_use]
    pub fn with_secret(mut self, secret: impl Into<String>) -> Self {
        self.secrets.push(secret.into());
        self
    }
}

/// One failed case.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// The case, e.g. `get_range bin Suffix(5000)`.
    pub case: String,
    /// What was wrong: what came back, and what the contract wants.
    pub message: String,
}

/// The outcome of [`check_storage`].
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// The store's `location()`.
    pub location: String,
    /// Cases that passed.
    pub passed: Vec<String>,
    /// Cases that failed.
    pub failures: Vec<Failure>,
}

impl Report {
    /// Every case passed.
    pub fn is_ok(&self) -> bool {
        self.failures.is_empty()
    }

    /// Panic, naming every failed case, unless all passed.
    ///
    /// # Panics
    /// When a case failed.
    pub fn assert_ok(&self) {
        assert!(self.is_ok(), "{self}");
    }

    fn record(&mut self, case: String, outcome: Result<(), String>) {
        match outcome {
            Ok(()) => self.passed.push(case),
            Err(message) => self.failures.push(Failure { case, message }),
        }
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let total = self.passed.len() + self.failures.len();
        write!(f, "storage conformance: {} of {total} cases passed for {}", self.passed.len(), self.location)?;
        for x in &self.failures {
            write!(f, "\n  FAILED {}: {}", x.case, x.message)?;
        }
        Ok(())
    }
}

/// Run every case against `storage`, which must hold [`fixture`] at its root.
pub async fn check_storage(storage: &dyn Storage, expect: &Expectations) -> Report {
    let mut run = Run { storage, expect, report: Report { location: storage.location(), ..Report::default() } };
    run.location();
    run.whole_gets().await;
    run.bounded().await;
    run.out_of_range().await;
    run.suffix().await;
    run.missing().await;
    run.list().await;
    run.report
}

/// What a read should give.
enum Want {
    Bytes(Bytes),
    Missing,
    PermanentError,
}

fn object(key: &str) -> Bytes {
    fixture().into_iter().find(|(k, _)| *k == key).map(|(_, b)| b).expect("a fixture key")
}

fn slice(key: &str, start: u64, end: u64) -> Bytes {
    object(key).slice(start as usize..end as usize)
}

/// Compare a read's outcome with what the contract wants.
fn judge(got: &Result<Option<Bytes>, StorageError>, want: &Want) -> Result<(), String> {
    match (got, want) {
        (Ok(Some(b)), Want::Bytes(w)) => same_bytes(b, w),
        (Ok(None), Want::Missing) => Ok(()),
        (Err(e), Want::PermanentError) if e.kind == StorageErrorKind::Permanent => Ok(()),
        (Err(e), Want::PermanentError) => {
            Err(format!("failed as it should, but as {:?} (retried); want Permanent: {}", e.kind, e.message))
        }
        (got, want) => Err(format!("got {}, want {}", describe_got(got), describe_want(want))),
    }
}

fn same_bytes(got: &[u8], want: &[u8]) -> Result<(), String> {
    if got == want {
        return Ok(());
    }
    let at = got.iter().zip(want).position(|(a, b)| a != b).unwrap_or(got.len().min(want.len()));
    Err(format!("got {} bytes, want {}; first difference at byte {at}", got.len(), want.len()))
}

fn describe_got(got: &Result<Option<Bytes>, StorageError>) -> String {
    match got {
        Ok(Some(b)) => format!("{} bytes", b.len()),
        Ok(None) => "Ok(None) (missing key)".into(),
        Err(e) => format!("a {:?} error ({})", e.kind, e.message),
    }
}

fn describe_want(want: &Want) -> String {
    match want {
        Want::Bytes(b) => format!("{} bytes", b.len()),
        Want::Missing => "Ok(None) (missing key)".into(),
        Want::PermanentError => "a Permanent error".into(),
    }
}

/// `scheme://user[:password]@host/...`: user info before the host.
fn has_user_info(text: &str) -> bool {
    text.match_indices("://").any(|(i, _)| text[i + 3..].split(['/', ' ']).next().unwrap_or("").contains('@'))
}

/// A read through [`Storage::start_read`]: the answer, then its body. It must give what
/// `get`/`get_range` give, errors included.
async fn two_steps(storage: &dyn Storage, key: &str, range: Option<ByteRange>) -> Result<Option<Bytes>, StorageError> {
    match storage.start_read(key, range).await? {
        Some(body) => body.await.map(Some),
        None => Ok(None),
    }
}

/// One run of the suite: the store, what it should do, and the cases so far.
struct Run<'a> {
    storage: &'a dyn Storage,
    expect: &'a Expectations,
    report: Report,
}

impl Run<'_> {
    /// Credentials in `text` (the location, or an error message: both reach the user).
    fn leak(&self, text: &str) -> Option<String> {
        if has_user_info(text) {
            return Some("user info (credentials)".into());
        }
        self.expect
            .secrets
            .iter()
            .find(|s| !s.is_empty() && text.contains(s.as_str()))
            .map(|s| format!("the secret {s:?}"))
    }

    fn record_read(&mut self, case: String, got: &Result<Option<Bytes>, StorageError>, want: &Want) {
        let outcome = match got {
            Err(e) => match self.leak(&e.message) {
                Some(what) => Err(format!("the error message carries {what}: {}", e.message)),
                None => judge(got, want),
            },
            Ok(_) => judge(got, want),
        };
        self.report.record(case, outcome);
    }

    async fn ranged(&mut self, key: &str, range: ByteRange, want: Want) {
        let got = self.storage.get_range(key, range).await;
        self.record_read(format!("get_range {key} {range:?}"), &got, &want);
        let started = two_steps(self.storage, key, Some(range)).await;
        self.record_read(format!("start_read {key} {range:?}"), &started, &want);
    }

    async fn get(&mut self, key: &str, want: Want) {
        let got = self.storage.get(key).await;
        self.record_read(format!("get {key}"), &got, &want);
        let started = two_steps(self.storage, key, None).await;
        self.record_read(format!("start_read {key}"), &started, &want);
    }

    fn location(&mut self) {
        let loc = self.report.location.clone();
        let outcome = if loc.is_empty() {
            Err("location() is empty; it is the last thing in every storage error message".to_string())
        } else if let Some(what) = self.leak(&loc) {
            Err(format!("location() carries {what}, and every storage error message ends with it: {loc}"))
        } else {
            Ok(())
        };
        self.report.record("location".into(), outcome);
    }

    async fn whole_gets(&mut self) {
        for (key, bytes) in fixture() {
            self.get(key, Want::Bytes(bytes)).await;
        }
    }

    async fn bounded(&mut self) {
        let n = BIN_LEN;
        for (start, end) in [(0, 16), (1000, 1100), (255, 513), (n - 7, n), (n - 1, n), (0, n)] {
            self.ranged("bin", ByteRange::Bounded { start, end }, Want::Bytes(slice("bin", start, end))).await;
        }
        // Empty ranges: at the start, the middle and the very end, and on the empty object.
        for at in [0, n / 2, n] {
            self.ranged("bin", ByteRange::Bounded { start: at, end: at }, Want::Bytes(Bytes::new())).await;
        }
        self.ranged("empty", ByteRange::Bounded { start: 0, end: 0 }, Want::Bytes(Bytes::new())).await;
        for (key, start, end) in [("arr/c/0/1", 3, 9), ("arr/.zarray", 0, 1), (".zgroup", 2, 13)] {
            self.ranged(key, ByteRange::Bounded { start, end }, Want::Bytes(slice(key, start, end))).await;
        }
    }

    async fn out_of_range(&mut self) {
        let n = BIN_LEN;
        // Past the end (clipped by object_store, 416 from servers), empty past the end, reversed.
        for (start, end) in [(n - 5, n + 5), (n, n + 1), (n + 10, n + 20), (n + 1, n + 1), (10, 5)] {
            self.ranged("bin", ByteRange::Bounded { start, end }, Want::PermanentError).await;
        }
        self.ranged("empty", ByteRange::Bounded { start: 0, end: 1 }, Want::PermanentError).await;
    }

    async fn suffix(&mut self) {
        let n = BIN_LEN;
        for k in [1, 100, 256, n - 1, n, n + 1, n + 1000] {
            self.ranged("bin", ByteRange::Suffix(k), Want::Bytes(slice("bin", n.saturating_sub(k), n))).await;
        }
        self.ranged("bin", ByteRange::Suffix(0), Want::Bytes(Bytes::new())).await;
        self.ranged("empty", ByteRange::Suffix(5), Want::Bytes(Bytes::new())).await;
        self.ranged("a/b/c", ByteRange::Suffix(4), Want::Bytes(slice("a/b/c", 20, 24))).await;
    }

    async fn missing(&mut self) {
        // `a` and `a/b` are "directories" of `a/b/c`: not objects.
        for key in ["missing", "a", "a/b", "a/b/missing", "arr/c/9/9", "arr/.zattrs"] {
            self.get(key, Want::Missing).await;
            self.ranged(key, ByteRange::Bounded { start: 0, end: 4 }, Want::Missing).await;
            self.ranged(key, ByteRange::Suffix(4), Want::Missing).await;
        }
    }

    async fn list(&mut self) {
        let all: Vec<&str> = fixture().into_iter().map(|(k, _)| k).collect();
        let under = |p: &str| all.iter().filter(|k| k.starts_with(p)).map(|k| (*k).to_string()).collect::<Vec<_>>();
        // A store that cannot list may still try (WebDAV's PROPFIND, retried on a 501), so
        // two prefixes are enough to see it answer `None`.
        let prefixes: &[&str] =
            if self.expect.can_list { &["", "a/", "arr/", "arr/c/", "nothing/"] } else { &["", "arr/"] };
        for &prefix in prefixes {
            let outcome = match self.storage.list(prefix).await {
                Err(e) => Err(format!("a {:?} error ({})", e.kind, e.message)),
                Ok(None) if self.expect.can_list => {
                    Err("Ok(None) (cannot list), but this store is expected to list".into())
                }
                Ok(None) => Ok(()),
                Ok(Some(keys)) if !self.expect.can_list => Err(format!(
                    "listed {} keys, but this store is declared unable to list; declare it listable or answer Ok(None)",
                    keys.len()
                )),
                Ok(Some(keys)) => same_keys(keys, under(prefix)),
            };
            self.report.record(format!("list {prefix:?}"), outcome);
        }
    }
}

fn same_keys(mut got: Vec<String>, mut want: Vec<String>) -> Result<(), String> {
    got.sort();
    want.sort();
    if got == want {
        return Ok(());
    }
    let missing: Vec<&String> = want.iter().filter(|k| !got.contains(k)).collect();
    let extra: Vec<&String> = got.iter().filter(|k| !want.contains(k)).collect();
    Err(format!("keys missing from the listing: {missing:?}; keys that should not be there: {extra:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    // On wasm32 the tests run under wasm-bindgen-test (scripts/test-wasm.sh), whose attribute
    // takes the place of libtest's `#[test]`.
    use crate::testing::MemoryStorage;
    use futures::executor::block_on;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    fn memory() -> MemoryStorage {
        let m = MemoryStorage::new();
        populate_memory(&m);
        m
    }

    #[test]
    fn memory_storage_conforms() {
        let report = block_on(check_storage(&memory(), &Expectations::listable()));
        report.assert_ok();
        assert!(report.passed.len() > 60, "{} cases ran", report.passed.len());
    }

    #[test]
    fn an_unlistable_memory_storage_conforms_when_declared_so() {
        let report = block_on(check_storage(&memory().unlistable(), &Expectations::unlistable()));
        report.assert_ok();
    }

    /// The suite can fail: a store with a missing object, a wrong listing flag or a secret
    /// in its location is reported, case by case.
    #[test]
    fn the_suite_names_the_cases_that_fail() {
        let m = memory();
        m.remove("a/b/c");
        let mut bin = object("bin").to_vec();
        bin[BIN_LEN as usize - 1] ^= 1;
        m.insert("bin", bin);
        let report = block_on(check_storage(&m.unlistable(), &Expectations::listable().with_secret("memory")));
        let failed: Vec<&str> = report.failures.iter().map(|f| f.case.as_str()).collect();
        for case in ["location", "get a/b/c", "get bin", "get_range bin Suffix(1)", "list \"\""] {
            assert!(failed.contains(&case), "{case} should fail: {report}");
        }
        let text = report.to_string();
        assert!(text.contains("FAILED get a/b/c: got Ok(None) (missing key), want 24 bytes"), "{text}");
    }

    #[test]
    fn user_info_in_a_location_is_found() {
        assert!(has_user_info("http://user:pw@host/store"));
        assert!(has_user_info("Error performing GET http://user:pw@host/store/bin in 3ms"));
        assert!(has_user_info("https://token@host"));
        assert!(!has_user_info("s3://bucket/a@b"));
        assert!(!has_user_info("memory://"));
        assert!(!has_user_info("/data/a@b.zarr"));
    }

    #[test]
    fn the_binary_object_has_every_byte_value_and_no_period() {
        let b = object("bin");
        let mut seen = [false; 256];
        b.iter().for_each(|&x| seen[x as usize] = true);
        assert!(seen.iter().all(|&s| s), "every byte value occurs");
        for shift in [1, 2, 256, 512, 1024] {
            assert_ne!(b[..64], b[shift..shift + 64], "a read shifted by {shift} bytes differs");
        }
    }
}
