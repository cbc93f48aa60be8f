//! # insitubatch-wasm
//!
//! insitubatch for WebAssembly (Node ≥ 18 and browsers): the engine of `insitubatch-core`
//! on a `fetch` [`Storage`](insitubatch_core::Storage), a `spawn_local` +
//! `setTimeout` [`Executor`](insitubatch_core::Executor) and core's one-thread
//! [`InlinePool`](insitubatch_core::runtime::InlinePool), exported to JavaScript with
//! wasm-bindgen. The npm package `insitubatch` (`js/`) wraps this module in an idiomatic
//! facade (async iterables of batches).
//!
//! Everything here is wasm32-only; on the host the crate is empty (it exists there only
//! for the native side of the cross-target parity test, `tests/native_digest.rs`).

#[cfg(target_arch = "wasm32")]
mod api;
pub mod explore;
#[cfg(all(target_arch = "wasm32", feature = "s3"))]
mod object;
#[cfg(target_arch = "wasm32")]
mod runtime;
#[cfg(target_arch = "wasm32")]
mod storage;
#[cfg(all(target_arch = "wasm32", feature = "threads"))]
mod threads;

#[cfg(target_arch = "wasm32")]
pub use api::*;
#[cfg(target_arch = "wasm32")]
pub use runtime::LocalExecutor;
#[cfg(target_arch = "wasm32")]
pub use storage::FetchStorage;
#[cfg(all(target_arch = "wasm32", feature = "threads"))]
pub use threads::{RayonPool, init_thread_pool};

/// wasm32's whole address space: the most any instance can grow to.
const WASM32_MAX_MEMORY: u64 = 4 << 30;

/// The memory the engine can plan for: the instance's maximum. The threaded build declares
/// its own (`--max-memory`, passed with `IB_WASM_MAX_MEMORY` beside it by
/// scripts/test-wasm.sh, so the two cannot disagree); the one-thread build can grow to 4 GiB.
/// `None` off wasm (the explorer's host tests), where the native runtime knows better.
pub fn memory_available() -> Option<u64> {
    if cfg!(target_arch = "wasm32") {
        Some(option_env!("IB_WASM_MAX_MEMORY").and_then(|s| s.parse().ok()).unwrap_or(WASM32_MAX_MEMORY))
    } else {
        None
    }
}

/// The option names `open()` accepts (the fields of [`JsOpenOptions`]).
pub const OPTION_NAMES: &[&str] = &[
    "variables",
    "sampleAxis",
    "fractions",
    "shuffleSplits",
    "batchSize",
    "blockChunks",
    "maxInflight",
    "seed",
    "shuffle",
    "prefetchDepth",
    "cacheBudgetBytes",
    "storageOptions",
];

/// The options `open()` accepts, in their JavaScript (camelCase) spelling. Parsed on every
/// target so the option set can be unit-tested on the host.
#[derive(Debug, Clone, Default, serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct JsOpenOptions {
    /// Array paths to read; absent: discover them (needs consolidated metadata over HTTP).
    pub variables: Option<Vec<String>>,
    /// The sample axis of every variable (default 0).
    pub sample_axis: Option<usize>,
    /// Train/val/test fractions of sample-axis chunks (default [0.8, 0.1, 0.1]).
    pub fractions: Option<(f64, f64, f64)>,
    /// Shuffle chunks between splits (default false: contiguous runs).
    pub shuffle_splits: Option<bool>,
    /// Rows per batch (default 32).
    pub batch_size: Option<usize>,
    /// Chunks per shuffle block (default 16).
    pub block_chunks: Option<usize>,
    /// Fetches in flight (default 32).
    pub max_inflight: Option<usize>,
    /// Shuffle seed (default 0).
    pub seed: Option<u64>,
    /// Shuffle the train view (default true).
    pub shuffle: Option<bool>,
    /// Batches queued ahead of the caller (default 2).
    pub prefetch_depth: Option<usize>,
    /// Byte budget of the chunk pool (default: automatic).
    pub cache_budget_bytes: Option<u64>,
    /// object_store options for `s3://` URLs (`aws_endpoint`, `aws_region`, credentials, …).
    pub storage_options: Option<std::collections::BTreeMap<String, String>>,
}

impl JsOpenOptions {
    /// The core options these stand for; the defaults and the split seed are the native
    /// backend's (`insitubatch_native::OpenOptions`), so the same options give the same
    /// batches on every target.
    pub fn to_core(&self) -> insitubatch_core::OpenOptions {
        let d = insitubatch_core::DatasetOptions::default();
        let dataset = insitubatch_core::DatasetOptions {
            batch_size: self.batch_size.unwrap_or(d.batch_size),
            block_chunks: self.block_chunks.unwrap_or(d.block_chunks),
            max_inflight: self.max_inflight.unwrap_or(d.max_inflight),
            seed: self.seed.unwrap_or(d.seed),
            shuffle: self.shuffle.unwrap_or(d.shuffle),
            prefetch_depth: self.prefetch_depth.unwrap_or(d.prefetch_depth),
            cache_budget_bytes: self.cache_budget_bytes.or(d.cache_budget_bytes),
            // Options JS cannot set yet (read policy, tiers) keep the native defaults.
            ..d
        };
        let split = insitubatch_core::SplitOptions::default();
        insitubatch_core::OpenOptions {
            variables: self.variables.clone(),
            sample_axis: self.sample_axis.unwrap_or_default(),
            split: insitubatch_core::SplitOptions {
                fractions: self.fractions.unwrap_or(split.fractions),
                seed: dataset.seed,
                contiguous: self.shuffle_splits.map_or(split.contiguous, |s| !s),
                ..split
            },
            dataset,
            ..Default::default()
        }
    }
}

/// Parse a split name (`train`, `val`, `test`, `all`).
///
/// # Errors
/// A message naming the accepted words.
pub fn parse_split(s: &str) -> Result<insitubatch_core::Split, String> {
    s.parse().map_err(|e: insitubatch_core::UnknownSplit| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_default_like_native() {
        let o: JsOpenOptions = serde_json::from_str("{}").unwrap();
        let c = o.to_core();
        assert_eq!(c.dataset.batch_size, 32);
        assert!(c.split.contiguous);
        assert_eq!(c.split.fractions, (0.8, 0.1, 0.1));
        let o: JsOpenOptions =
            serde_json::from_str(r#"{"batchSize":7,"blockChunks":2,"seed":3,"fractions":[0.5,0.25,0.25]}"#).unwrap();
        let c = o.to_core();
        assert_eq!((c.dataset.batch_size, c.dataset.block_chunks, c.split.seed), (7, 2, 3));
        assert!(serde_json::from_str::<JsOpenOptions>(r#"{"batch_size":7}"#).is_err(), "unknown keys are refused");
        assert!(parse_split("bogus").unwrap_err().contains("train"));
        // OPTION_NAMES lists exactly the fields serde accepts.
        for name in OPTION_NAMES {
            let json = format!("{{\"{name}\": null}}");
            assert!(serde_json::from_str::<JsOpenOptions>(&json).is_ok(), "{name}");
        }
    }
}
