//! A disk tier for tests only: `bench --pause-after-chunks N` (hidden from `--help`) stops
//! after N chunk writes, so native/tests/disk_tier.rs can SIGKILL a writer at a known point.
//! It is reached through the CLI because that test kills a real process.

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use insitubatch_native::core::{ArrayIdentity, ChunkTier, TierCounters, TierOpener};
use insitubatch_native::core::{DType, Result as CoreResult};

/// Opens the disk tier of `--pause-after-chunks`.
#[derive(Debug)]
pub(super) struct PauseAfter {
    pub(super) cache: insitubatch_native::CacheOptions,
    pub(super) after: u64,
}

impl TierOpener for PauseAfter {
    fn open(&self, arrays: &[ArrayIdentity]) -> insitubatch_native::core::Result<Arc<dyn ChunkTier>> {
        let inner = self.cache.open(arrays)?;
        Ok(Arc::new(PausingTier { inner, after: self.after, admitted: AtomicU64::new(0), written: AtomicU64::new(0) }))
    }
}

/// The disk tier, stopped at a known point so a test can SIGKILL a writer with exactly
/// `after` chunks in the cache, instead of sleeping and hoping the kill lands mid-epoch.
/// Only the first `after` writes reach the tier; the one that completes the count prints
/// `paused after N chunks`, and it and every later write block forever, so nothing touches
/// the directory after the announcement.
#[derive(Debug)]
pub(super) struct PausingTier {
    pub(super) inner: Arc<dyn ChunkTier>,
    pub(super) after: u64,
    pub(super) admitted: AtomicU64,
    pub(super) written: AtomicU64,
}

pub(super) fn block_forever() -> ! {
    loop {
        std::thread::park();
    }
}

impl ChunkTier for PausingTier {
    fn revive(&self, array: u32, chunk: u64, dtype: DType, shape: &[usize]) -> CoreResult<Option<bytes::Bytes>> {
        self.inner.revive(array, chunk, dtype, shape)
    }

    fn store(
        &self,
        array: u32,
        chunk: u64,
        dtype: DType,
        shape: &[usize],
        data: &[u8],
    ) -> CoreResult<Option<bytes::Bytes>> {
        if self.admitted.fetch_add(1, Ordering::SeqCst) >= self.after {
            block_forever();
        }
        let stored = self.inner.store(array, chunk, dtype, shape, data)?;
        if self.written.fetch_add(1, Ordering::SeqCst) + 1 == self.after {
            outln!("paused after {} chunks", self.after);
            let _ = std::io::stdout().flush();
            block_forever();
        }
        Ok(stored)
    }

    fn persists(&self) -> bool {
        self.inner.persists()
    }

    fn counters(&self) -> TierCounters {
        self.inner.counters()
    }

    fn describe(&self) -> String {
        self.inner.describe()
    }

    fn warnings(&self) -> Vec<String> {
        self.inner.warnings()
    }
}
