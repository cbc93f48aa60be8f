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

// The threaded build reports allocation failures on decode threads (src/trap.rs); it is
// built with the pinned nightly already.
#![cfg_attr(all(target_arch = "wasm32", feature = "threads"), feature(alloc_error_hook))]

#[cfg(target_arch = "wasm32")]
mod api;
#[cfg(target_arch = "wasm32")]
mod errors;
pub mod explore;
#[cfg(target_arch = "wasm32")]
mod js_storage;
#[cfg(all(target_arch = "wasm32", feature = "s3"))]
mod object;
pub mod opfs;
mod options;
#[cfg(target_arch = "wasm32")]
mod refs;
#[cfg(target_arch = "wasm32")]
mod runtime;
#[cfg(target_arch = "wasm32")]
mod storage;
#[cfg(all(target_arch = "wasm32", feature = "threads"))]
mod threads;
#[cfg(target_arch = "wasm32")]
mod trap;

#[cfg(target_arch = "wasm32")]
pub use api::*;
#[cfg(target_arch = "wasm32")]
pub use js_storage::JsStorage;
pub use options::*;
#[cfg(target_arch = "wasm32")]
pub use runtime::LocalExecutor;
#[cfg(target_arch = "wasm32")]
pub use storage::FetchStorage;
#[cfg(target_arch = "wasm32")]
pub use storage::set_fetch_hook;
#[cfg(all(target_arch = "wasm32", feature = "threads"))]
pub use threads::{RayonPool, init_thread_pool};
#[cfg(all(target_arch = "wasm32", feature = "threads"))]
pub use trap::set_trap_channel;
#[cfg(target_arch = "wasm32")]
pub use trap::{debug_trap, heap_bytes, last_panic, memory_bytes, memory_max_bytes};

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
