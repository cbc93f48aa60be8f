//! Traps as errors, the wasm half (the JS half is `js/src/engine.js`). A panic or an
//! out-of-memory abort in wasm is a trap (`WebAssembly.RuntimeError`): nothing in the
//! instance can catch it, and the instance is unusable afterwards (locks and `RefCell`s held,
//! half-updated state). The JS layer therefore catches it, rejects the pass with a clear
//! error and starts a fresh instance for the next one. What it needs from here: the panic
//! message (kept by our panic hook, since the trap itself only says "unreachable"), the size
//! of the instance's memory (to tell an out-of-memory abort from a bug), and, for tests only,
//! a way to force each kind of trap deterministically.

use crate::errors::js_error;
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};

use wasm_bindgen::prelude::*;

/// The message of the last panic, for the JS layer's error after the trap it causes.
static LAST_PANIC: Mutex<Option<String>> = Mutex::new(None);

/// Log panics to the console (console_error_panic_hook) and keep the message for
/// [`last_panic`]. `try_lock`: a panic while the message is being read must not deadlock.
pub(crate) fn install_panic_hook() {
    std::panic::set_hook(Box::new(|info| {
        let message = panic_message(info);
        #[cfg(feature = "threads")]
        pool::report(&format!("a panic: {message}"));
        if let Ok(mut m) = LAST_PANIC.try_lock() {
            *m = Some(message);
        }
        console_error_panic_hook::hook(info);
    }));
    #[cfg(feature = "threads")]
    std::alloc::set_alloc_error_hook(|layout| {
        pool::report(&format!("out of memory: an allocation of {} bytes failed", layout.size()));
    });
}

/// The threaded build's decode threads are Web Workers of their own: a trap there ends that
/// worker's loop as an unhandled rejection that nobody sees, while the engine waits for its
/// job forever (the page hung, issue 16). So a panic or allocation failure on a pool thread
/// is posted, before the abort, on a `BroadcastChannel` whose name the engine's worker gave
/// (`setTrapChannel`, js/src/worker.js): the worker tells the page, which terminates it.
#[cfg(feature = "threads")]
mod pool {
    use std::sync::Mutex;

    use wasm_bindgen::prelude::*;

    static CHANNEL: Mutex<Option<String>> = Mutex::new(None);

    #[wasm_bindgen]
    extern "C" {
        type BroadcastChannel;
        #[wasm_bindgen(constructor, catch)]
        fn new(name: &str) -> Result<BroadcastChannel, JsValue>;
        #[wasm_bindgen(method, catch, js_name = postMessage)]
        fn post_message(this: &BroadcastChannel, message: &str) -> Result<(), JsValue>;
        #[wasm_bindgen(method)]
        fn close(this: &BroadcastChannel);
    }

    /// Where pool-thread traps are posted (a name unique to the engine's worker).
    #[doc(hidden)]
    #[wasm_bindgen(js_name = setTrapChannel)]
    pub fn set_trap_channel(name: String) {
        if let Ok(mut c) = CHANNEL.lock() {
            *c = Some(name);
        }
    }

    /// Post `what` if this is a pool thread (the engine's own thread reports its traps
    /// itself, as the one-thread build does).
    pub(crate) fn report(what: &str) {
        if rayon::current_thread_index().is_none() {
            return;
        }
        let Some(name) = CHANNEL.try_lock().ok().and_then(|c| c.clone()) else {
            return;
        };
        if let Ok(ch) = BroadcastChannel::new(&name) {
            let _ =
                ch.post_message(&format!("{what}, in decode thread {}", rayon::current_thread_index().unwrap_or(0)));
            ch.close();
        }
    }
}

#[cfg(feature = "threads")]
pub use pool::set_trap_channel;

/// One line: the panic's message, then where (`… (at wasm/src/trap.rs:74:28)`).
fn panic_message(info: &std::panic::PanicHookInfo<'_>) -> String {
    let payload = info.payload();
    let what = payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("a panic without a message");
    match info.location() {
        Some(l) => format!("{what} (at {}:{}:{})", l.file(), l.line(), l.column()),
        None => what.to_string(),
    }
}

/// The message of the last panic in this instance, if any (read by the JS layer after a
/// trap; the instance is not used for anything else afterwards).
#[doc(hidden)]
#[wasm_bindgen(js_name = lastPanic)]
pub fn last_panic() -> Option<String> {
    LAST_PANIC.try_lock().ok().and_then(|m| m.clone())
}

/// Bytes of this instance's linear memory now. Wasm memory only grows (freed memory is
/// reused by the allocator, never returned), so a flat figure across open/iterate/close
/// cycles means a closed dataset gave all of its memory back.
#[doc(hidden)]
#[wasm_bindgen(js_name = memoryBytes)]
pub fn memory_bytes() -> f64 {
    (core::arch::wasm32::memory_size(0) as f64) * 65536.0
}

/// The global allocator, counting the bytes in use: `close()` must bring the count back
/// (`heapBytes()`), whatever the allocator does with the freed space.
struct Counting;

static HEAP_IN_USE: AtomicUsize = AtomicUsize::new(0);

#[global_allocator]
static ALLOCATOR: Counting = Counting;

// SAFETY: every method forwards to `System` with the caller's arguments, unchanged; the
// count is a side effect only.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded as is (the caller upholds `GlobalAlloc::alloc`'s contract).
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            HEAP_IN_USE.fetch_add(layout.size(), Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded as is.
        unsafe { System.dealloc(ptr, layout) };
        HEAP_IN_USE.fetch_sub(layout.size(), Ordering::Relaxed);
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded as is.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            HEAP_IN_USE.fetch_add(layout.size(), Ordering::Relaxed);
        }
        p
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded as is.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            HEAP_IN_USE.fetch_sub(layout.size(), Ordering::Relaxed);
            HEAP_IN_USE.fetch_add(new_size, Ordering::Relaxed);
        }
        p
    }
}

/// Bytes the engine has allocated and not freed (the allocator's own count, unlike
/// [`memory_bytes`], which only grows).
#[doc(hidden)]
#[wasm_bindgen(js_name = heapBytes)]
pub fn heap_bytes() -> f64 {
    HEAP_IN_USE.load(Ordering::Relaxed) as f64
}

/// The most memory this instance can have (its maximum; see [`crate::memory_available`]).
#[doc(hidden)]
#[wasm_bindgen(js_name = memoryMaxBytes)]
pub fn memory_max_bytes() -> f64 {
    crate::memory_available().unwrap_or(0) as f64
}

/// A kind of forced trap (tests only).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
enum TrapKind {
    /// A Rust panic (the panic hook runs, then the abort traps).
    Panic = 1,
    /// Allocation until the instance's memory cannot grow: the allocator's abort.
    OutOfMemory = 2,
    /// A bare `unreachable` instruction.
    Unreachable = 3,
    /// A panic in a job on a decode thread (threaded build), which the pass then waits for
    /// forever, as it would for a real job that trapped.
    Pool = 4,
}

impl TrapKind {
    fn parse(s: &str) -> Result<Self, JsValue> {
        match s {
            "panic" => Ok(Self::Panic),
            "oom" => Ok(Self::OutOfMemory),
            "unreachable" => Ok(Self::Unreachable),
            "pool" if cfg!(feature = "threads") => Ok(Self::Pool),
            "pool" => Err(js_error("the \"pool\" trap needs the threaded build (decode threads)")),
            _ => Err(js_error(&format!(
                "unknown trap kind {s:?}; use \"panic\", \"oom\", \"unreachable\" or (threaded build) \"pool\""
            ))),
        }
    }

    fn from_u32(v: u32) -> Option<Self> {
        [Self::Panic, Self::OutOfMemory, Self::Unreachable, Self::Pool].into_iter().find(|k| *k as u32 == v)
    }

    /// Fire inside a pass: a pool trap leaves the pass waiting for its job, forever.
    #[cfg_attr(
        not(feature = "threads"),
        expect(clippy::unused_async, reason = "only the threaded build's pool trap awaits")
    )]
    async fn fire_in_pass(self) {
        #[cfg(feature = "threads")]
        if self == Self::Pool {
            let (tx, rx) = futures::channel::oneshot::channel::<()>();
            Self::spawn_pool_panic(tx);
            let _ = rx.await; // the sender is never dropped: a trap runs no destructors
            return;
        }
        self.fire()
    }

    #[cfg(feature = "threads")]
    fn spawn_pool_panic<T: Send + 'static>(held: T) {
        rayon::spawn(move || {
            let _held = held;
            panic!("a trap forced by __debugTrap in a decode thread (tests only)")
        });
    }

    fn fire(self) -> ! {
        match self {
            Self::Panic => panic!("a trap forced by __debugTrap (tests only)"),
            Self::Pool => {
                #[cfg(feature = "threads")]
                Self::spawn_pool_panic(());
                // On the engine's thread, right after: the page must not depend on which
                // trap it hears of first.
                panic!("a trap forced by __debugTrap (tests only), after one in a decode thread")
            }
            Self::OutOfMemory => loop {
                // Each 1 GiB asks the allocator to grow memory; past the instance's
                // maximum it fails and the allocator aborts, as a real exhaustion does.
                std::mem::forget(std::hint::black_box(Vec::<u8>::with_capacity(1 << 30)));
            },
            Self::Unreachable => core::arch::wasm32::unreachable(),
        }
    }
}

/// The armed trap: its kind (0: none) and how many more `next()` calls pass before it fires.
static ARMED_KIND: AtomicU32 = AtomicU32::new(0);
static ARMED_AFTER: AtomicU32 = AtomicU32::new(0);

/// Tests only: force a trap of `kind` (`"panic"`, `"oom"`, `"unreachable"`, or in the
/// threaded build `"pool"`: a panic on a decode thread). With `after`
/// absent, now, inside this call; with `after = n`, inside the `n`-th pass `next()` from now
/// (counting every pass of this instance), where it runs in the engine's own task as a real
/// trap would: the JS layer must then reject the pending `next()` rather than hang.
#[doc(hidden)]
#[wasm_bindgen(js_name = __debugTrap)]
pub fn debug_trap(kind: &str, after: Option<u32>) -> Result<(), JsValue> {
    let kind = TrapKind::parse(kind)?;
    match after {
        None | Some(0) => kind.fire(),
        Some(n) => {
            ARMED_AFTER.store(n, Ordering::SeqCst);
            ARMED_KIND.store(kind as u32, Ordering::SeqCst);
            Ok(())
        }
    }
}

/// Awaited at the start of every pass `next()`: fires the armed trap on its turn.
pub(crate) async fn on_next() {
    let Some(kind) = TrapKind::from_u32(ARMED_KIND.load(Ordering::SeqCst)) else {
        return;
    };
    if ARMED_AFTER.fetch_sub(1, Ordering::SeqCst) <= 1 {
        ARMED_KIND.store(0, Ordering::SeqCst);
        kind.fire_in_pass().await;
    }
}
