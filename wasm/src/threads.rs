//! The threaded build's CPU pool (cargo feature `threads`; nightly, build-std, atomics, a
//! cross-origin-isolated page): core's [`ThreadPool`] over rayon's global pool, whose threads
//! are Web Workers started by wasm-bindgen-rayon's `initThreadPool(n)` (re-exported here so
//! the JS glue has it). The engine itself stays on the thread that called `open` (a worker,
//! see js/src/worker.js) and only its CPU jobs (decode, assembly, gather) run on the pool;
//! its reads go to a fetch worker (`off_thread` in src/storage.rs).

use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use insitubatch_core::runtime::{Executor, Job, ThreadPool};

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
// `Send`, and a job never touches a JS value itself: nothing in core calls JS, and the only
// JS call a job makes is the clock (`LocalExecutor::now`, `performance` exists in every
// worker). What a job captures includes an `Arc` of the engine, whose cache may hold a
// pending `fetch` future and whose storage may be a JS storage object (Node's `node:fs`
// store, `JsStorage`): JS values, so the last reference must never be
// released on a pool thread. The JS-facing objects hold their engine through
// `api/dataset.rs`'s `KeepAlive`, which releases it with [`drop_when_idle`], after every
// job has run and dropped its captures; jobs are only created while such a holder is alive.
unsafe impl Send for SendJob {}

impl SendJob {
    /// Takes `self` whole, so the closure below captures the `Send` wrapper and not its field.
    fn run(self) {
        (self.0)();
    }
}

/// Jobs handed to rayon and not yet finished (their captures included).
static IN_FLIGHT: AtomicUsize = AtomicUsize::new(0);

impl ThreadPool for RayonPool {
    fn execute(&self, job: Job) {
        IN_FLIGHT.fetch_add(1, Ordering::SeqCst);
        let job = SendJob(job);
        rayon::spawn(move || {
            job.run(); // the job's captures are dropped inside
            IN_FLIGHT.fetch_sub(1, Ordering::SeqCst);
        });
    }

    fn parallelism(&self) -> NonZeroUsize {
        NonZeroUsize::new(rayon::current_num_threads()).unwrap_or(NonZeroUsize::MIN)
    }
}

/// Drop `value` on this thread (the engine's) once no pool job is queued or running, so the
/// last reference to an engine is released here and never on a pool thread.
pub(crate) fn drop_when_idle<T: 'static>(value: T) {
    if IN_FLIGHT.load(Ordering::SeqCst) == 0 {
        drop(value);
        return;
    }
    wasm_bindgen_futures::spawn_local(async move {
        let clock = crate::LocalExecutor::new();
        while IN_FLIGHT.load(Ordering::SeqCst) > 0 {
            clock.sleep(Duration::from_millis(2)).await;
        }
        drop(value);
    });
}
