//! The one place a [`ReadPolicy`] is applied to storage requests: a timeout per request and
//! retries with doubling backoff for transient failures. Chunk reads go through it
//! (`Engine::fetch`), and so do the metadata reads at open, through
//! [`PolicyStorage`]: natively object_store retries those itself, but the wasm and
//! JS-storage paths have nothing else that would, and a 503 on `zarr.json` must not fail an
//! open that a chunk read would have retried.

use std::future::Future;
use std::sync::Arc;

use bytes::Bytes;
use futures::future::{Either, select};

use crate::engine::ReadPolicy;
use crate::runtime::{BoxFuture, ByteRange, Executor, Storage, StorageError, StorageErrorKind};

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
}
