//! The threaded build's CPU pool (cargo feature `threads`; nightly, build-std, atomics, a
//! cross-origin-isolated page): core's [`ThreadPool`] over rayon's global pool, whose threads
//! are Web Workers started by wasm-bindgen-rayon's `initThreadPool(n)` (re-exported here so
//! the JS glue has it). The engine itself stays on the thread that called `open` (a worker,
//! see js/src/worker.js) and only its CPU jobs (decode, assembly, gather) run on the pool.

use std::num::NonZeroUsize;

use insitubatch_core::runtime::{Job, ThreadPool};

pub use wasm_bindgen_rayon::init_thread_pool;

/// rayon's global pool (started by `initThreadPool`) as core's [`ThreadPool`].
#[derive(Debug, Default, Clone, Copy)]
pub struct RayonPool;

/// A job moved to a pool thread.
struct SendJob(Job);

// SAFETY: on wasm, core's `Job` drops its `Send` bound only because browser *futures* are
// `!Send`; the jobs themselves are the closures the native build compiles with
// `Job: Send` (decode, assembly, gather, transforms over `Arc`s, `Bytes` and buffers, and a
// oneshot sender back to the caller). The native build type-checks every one of them as
// `Send`, and none captures a JS value: nothing in core touches JS.
unsafe impl Send for SendJob {}

impl SendJob {
    /// Takes `self` whole, so the closure below captures the `Send` wrapper and not its field.
    fn run(self) {
        (self.0)()
    }
}

impl ThreadPool for RayonPool {
    fn execute(&self, job: Job) {
        let job = SendJob(job);
        rayon::spawn(move || job.run());
    }

    fn parallelism(&self) -> NonZeroUsize {
        NonZeroUsize::new(rayon::current_num_threads()).unwrap_or(NonZeroUsize::MIN)
    }
}
