//! The one place a [`ReadPolicy`] is applied to storage requests: a timeout per request and
//! retries with doubling backoff for transient failures. Chunk reads go through it
//! (`ReadPath::fetch`), and so do the metadata reads at open, through
//! [`PolicyStorage`]: natively object_store retries those itself, but the wasm and
//! JS-storage paths have nothing else that would, and a 503 on `zarr.json` must not fail an
//! open that a chunk read would have retried.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::future::{Either, select};

use crate::hedge::HedgePolicy;
use crate::runtime::{BoxFuture, ByteRange, Executor, Storage, StorageError, StorageErrorKind};

/// What to do with a chunk that cannot be fetched or decoded.
// serde reads it through its `FromStr` (`try_from`): the one parser of its words, with its message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase", try_from = "String")]
pub enum OnBadChunk {
    /// Fail the pass, naming the chunk.
    #[default]
    Raise,
    /// Fill the tile with NaN (floats) or the fill value, record it, and go on.
    Nan,
}

impl OnBadChunk {
    /// The word the bindings and reports use.
    pub fn name(self) -> &'static str {
        match self {
            Self::Raise => "raise",
            Self::Nan => "nan",
        }
    }
}

/// The one parser of `on_bad_chunk` words (Python, JS and the CLI pass strings).
impl std::str::FromStr for OnBadChunk {
    type Err = crate::error::Error;
    fn from_str(s: &str) -> crate::error::Result<Self> {
        match s {
            "raise" => Ok(Self::Raise),
            "nan" => Ok(Self::Nan),
            other => {
                let message = format!("`on_bad_chunk` must be \"raise\" or \"nan\", got {other:?}");
                Err(crate::error::Error::option("on_bad_chunk", message))
            }
        }
    }
}

impl TryFrom<String> for OnBadChunk {
    type Error = crate::error::Error;
    fn try_from(s: String) -> crate::error::Result<Self> {
        s.parse()
    }
}

/// How reads are made: retries and timeouts, coalescing, hedging. What a chunk that fails
/// for good does is a knob ([`crate::Knobs::on_bad_chunk`]), since every binding passes it as
/// data.
#[derive(Debug, Clone, PartialEq)]
pub struct ReadPolicy {
    /// Attempts after the first for a transient failure.
    pub retries: u32,
    /// First backoff; doubles per attempt.
    pub backoff: Duration,
    /// A request with no answer after this long is a transient failure.
    pub request_timeout: Duration,
    /// Ranges of one object (the inner chunks of a shard) at most this many bytes apart are
    /// read by one request; the bytes between them are read and dropped.
    pub coalesce_gap_bytes: u64,
    /// A coalesced request spans at most this many bytes (one range longer than that is
    /// still read whole). Larger requests mean fewer of them, and fewer connections sharing
    /// a store's per-connection rate.
    pub coalesce_max_bytes: u64,
    /// Hedged requests against a remote store's slow tail; `None` turns them off. Reads of a
    /// local store are never hedged.
    pub hedge: Option<HedgePolicy>,
    /// Stored bytes read ahead for inner chunks a pass needs soon (neighbours in a shard)
    /// may hold at most this much; `None`: a quarter of the residency floor; 0 turns
    /// read-ahead off.
    pub read_ahead_bytes: Option<u64>,
}

impl ReadPolicy {
    /// The policy's rules: a request timeout above 0, hedging within its bounds.
    ///
    /// # Errors
    /// [`crate::Error::InvalidOption`] naming the key.
    pub fn check(&self) -> crate::error::Result<()> {
        if self.request_timeout.is_zero() {
            return Err(crate::error::Error::option(
                "read_policy.request_timeout_s",
                format!(
                    "`read_policy.request_timeout_s` must be above 0 (every request would time out at once); the \
                     default is {} s",
                    Self::default().request_timeout.as_secs_f64()
                ),
            ));
        }
        self.hedge.as_ref().map_or(Ok(()), HedgePolicy::check)
    }
}

/// Default of [`ReadPolicy::coalesce_gap_bytes`]: object_store's own default for the ranges
/// of one call (1 MiB). Measured on the cloud-like store, the gap hardly matters once
/// read-ahead takes the interleaved neighbours (docs/cloud.md).
pub const COALESCE_GAP_BYTES: u64 = 1 << 20;
/// Default of [`ReadPolicy::coalesce_max_bytes`]: the ranged-GET size object stores serve at
/// full speed per connection (8-16 MB). Larger requests mean fewer of them, but a request
/// holds one connection, whose rate is capped: on the cloud-like store 64 MiB requests cost
/// a quarter of the throughput and half again the time to first batch (docs/cloud.md).
pub const COALESCE_MAX_BYTES: u64 = 16 << 20;

impl Default for ReadPolicy {
    fn default() -> Self {
        Self {
            retries: 4,
            backoff: Duration::from_millis(100),
            request_timeout: Duration::from_secs(120),
            coalesce_gap_bytes: COALESCE_GAP_BYTES,
            coalesce_max_bytes: COALESCE_MAX_BYTES,
            hedge: Some(HedgePolicy::default()),
            read_ahead_bytes: None,
        }
    }
}

/// A request that failed for good: its last error and how many attempts were made.
#[derive(Debug)]
pub(crate) struct GaveUp {
    pub attempts: u32,
    pub error: StorageError,
}

/// Run `request` until it succeeds, fails permanently, or has failed transiently
/// `policy.retries + 1` times; an attempt with no answer within `policy.request_timeout`
/// counts as a transient failure (and is dropped, which cancels it).
pub(crate) async fn with_policy<T, F, Fut>(
    executor: &dyn Executor,
    policy: &ReadPolicy,
    key: &str,
    mut request: F,
) -> Result<T, GaveUp>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, StorageError>>,
{
    let mut attempt = 0u32;
    loop {
        let timeout = executor.sleep(policy.request_timeout);
        let outcome = match select(std::pin::pin!(request()), timeout).await {
            Either::Left((r, _)) => r,
            Either::Right(_) => Err(StorageError::transient(format!("no answer within {:?}", policy.request_timeout))),
        };
        match outcome {
            Ok(v) => return Ok(v),
            Err(e) if e.kind == StorageErrorKind::Transient && attempt < policy.retries => {
                let wait = policy.backoff * 2u32.saturating_pow(attempt);
                tracing::debug!(key, attempt, ?wait, error = %e, "retrying a transient storage failure");
                executor.sleep(wait).await;
                attempt += 1;
            }
            Err(error) => return Err(GaveUp { attempts: attempt + 1, error }),
        }
    }
}

impl GaveUp {
    /// The last error, saying how many attempts it took when more than one.
    fn into_storage_error(self) -> StorageError {
        let GaveUp { attempts, error } = self;
        if attempts == 1 {
            return error;
        }
        StorageError { kind: error.kind, message: format!("{} (gave up after {attempts} attempts)", error.message) }
    }
}

/// `inner` with every request under `policy`: what the metadata reads at open go through.
#[derive(Debug, Clone)]
pub struct PolicyStorage {
    inner: Arc<dyn Storage>,
    executor: Arc<dyn Executor>,
    policy: ReadPolicy,
}

impl PolicyStorage {
    /// Wrap `inner`; `executor` supplies the clock for timeouts and backoff.
    pub fn new(inner: Arc<dyn Storage>, executor: Arc<dyn Executor>, policy: ReadPolicy) -> Self {
        Self { inner, executor, policy }
    }
}

impl Storage for PolicyStorage {
    fn get<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Bytes>, StorageError>> {
        Box::pin(async move {
            with_policy(self.executor.as_ref(), &self.policy, key, || self.inner.get(key))
                .await
                .map_err(GaveUp::into_storage_error)
        })
    }

    fn get_range<'a>(&'a self, key: &'a str, range: ByteRange) -> BoxFuture<'a, Result<Option<Bytes>, StorageError>> {
        Box::pin(async move {
            with_policy(self.executor.as_ref(), &self.policy, key, || self.inner.get_range(key, range))
                .await
                .map_err(GaveUp::into_storage_error)
        })
    }

    fn list<'a>(&'a self, prefix: &'a str) -> BoxFuture<'a, Result<Option<Vec<String>>, StorageError>> {
        Box::pin(async move {
            with_policy(self.executor.as_ref(), &self.policy, prefix, || self.inner.list(prefix))
                .await
                .map_err(GaveUp::into_storage_error)
        })
    }

    fn location(&self) -> String {
        self.inner.location()
    }

    fn reads_are_local(&self) -> bool {
        self.inner.reads_are_local()
    }

    fn locate<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<crate::runtime::Location>, StorageError>> {
        self.inner.locate(key)
    }

    fn key_url(&self, key: &str) -> String {
        self.inner.key_url(key)
    }
}
