//! The wasm executor: tasks on `spawn_local`, sleeps on `setTimeout`, time from
//! `performance.now()` (Node ≥ 16 and browsers).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use insitubatch_core::runtime::{BoxFuture, Executor};
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::JsFuture;

#[wasm_bindgen]
extern "C" {
    #[wasm_bindgen(js_name = setTimeout)]
    fn set_timeout(callback: &js_sys::Function, ms: f64) -> JsValue;
    #[wasm_bindgen(js_name = clearTimeout)]
    fn clear_timeout(handle: &JsValue);
    #[wasm_bindgen(js_namespace = performance, js_name = now)]
    fn performance_now() -> f64;
    #[wasm_bindgen(thread_local_v2, js_namespace = performance, js_name = timeOrigin)]
    static TIME_ORIGIN: f64;
}

/// Milliseconds on a clock every thread agrees on. `performance.now()` counts from its own
/// thread's start, and in the threaded build pool threads (other Web Workers) read the
/// clock too (decode timings), so add `performance.timeOrigin`.
fn wall_ms() -> f64 {
    TIME_ORIGIN.with(|o| *o) + performance_now()
}

/// The JS event loop as an [`Executor`].
#[derive(Debug, Clone, Copy)]
pub struct LocalExecutor {
    origin_ms: f64,
}

impl Default for LocalExecutor {
    fn default() -> Self {
        Self::new()
    }
}

impl LocalExecutor {
    /// An executor whose clock starts now.
    pub fn new() -> Self {
        Self { origin_ms: wall_ms() }
    }
}

impl Executor for LocalExecutor {
    fn spawn(&self, task: BoxFuture<'static, ()>) {
        wasm_bindgen_futures::spawn_local(task);
    }

    fn sleep(&self, duration: Duration) -> BoxFuture<'static, ()> {
        // setTimeout fires at once past 2^31-1 ms; longer sleeps are capped (~24.8 days).
        let ms = (duration.as_secs_f64() * 1e3).min(2_147_483_647.0);
        let mut handle = JsValue::UNDEFINED;
        let mut resolve_early = None;
        let promise = js_sys::Promise::new(&mut |resolve, _reject| {
            handle = set_timeout(&resolve, ms);
            resolve_early = Some(resolve);
        });
        let resolve = resolve_early.unwrap_or_else(|| js_sys::Function::new_no_args(""));
        Box::pin(Sleep { fut: JsFuture::from(promise), handle, resolve, done: false })
    }

    fn now(&self) -> Duration {
        Duration::from_secs_f64(((wall_ms() - self.origin_ms) / 1e3).max(0.0))
    }
}

/// A `setTimeout` as a future. Dropping it early clears the timer, so an abandoned timeout
/// (the engine races every read against one) neither fires nor keeps Node's event loop alive,
/// and resolves the promise at once: a `JsFuture` frees its callbacks and state only when
/// its promise settles, so a cleared timer whose promise never did leaked them (about 480
/// bytes per read, scattered among the chunk buffers: issue 16's memory that `close()` did
/// not give back).
struct Sleep {
    fut: JsFuture,
    handle: JsValue,
    resolve: js_sys::Function,
    done: bool,
}

impl Future for Sleep {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        match Pin::new(&mut self.fut).poll(cx) {
            Poll::Ready(_) => {
                self.done = true;
                Poll::Ready(())
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

impl Drop for Sleep {
    fn drop(&mut self) {
        if !self.done {
            clear_timeout(&self.handle);
            let _ = self.resolve.call0(&JsValue::UNDEFINED);
        }
    }
}
