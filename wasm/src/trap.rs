//! Traps as errors, the wasm half (the JS half is `js/src/engine.js`). A panic or an
//! out-of-memory abort in wasm is a trap (`WebAssembly.RuntimeError`): nothing in the
//! instance can catch it, and the instance is unusable afterwards (locks and `RefCell`s held,
//! half-updated state). The JS layer therefore catches it, rejects the pass with a clear
//! error and starts a fresh instance for the next one. What it needs from here: the panic
//! message (kept by our panic hook, since the trap itself only says "unreachable"), the size
//! of the instance's memory (to tell an out-of-memory abort from a bug), and, for tests only,
//! a way to force each kind of trap deterministically.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};

use wasm_bindgen::prelude::*;

/// The message of the last panic, for the JS layer's error after the trap it causes.
static LAST_PANIC: Mutex<Option<String>> = Mutex::new(None);

/// Log panics to the console (console_error_panic_hook) and keep the message for
/// [`last_panic`]. `try_lock`: a panic while the message is being read must not deadlock.
pub(crate) fn install_panic_hook() {
    std::panic::set_hook(Box::new(|info| {
        if let Ok(mut m) = LAST_PANIC.try_lock() {
            *m = Some(info.to_string());
        }
        console_error_panic_hook::hook(info);
    }));
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
}

impl TrapKind {
    fn parse(s: &str) -> Result<Self, JsError> {
        match s {
            "panic" => Ok(Self::Panic),
            "oom" => Ok(Self::OutOfMemory),
            "unreachable" => Ok(Self::Unreachable),
            _ => Err(JsError::new(&format!("unknown trap kind {s:?}; use \"panic\", \"oom\" or \"unreachable\""))),
        }
    }

    fn from_u32(v: u32) -> Option<Self> {
        [Self::Panic, Self::OutOfMemory, Self::Unreachable].into_iter().find(|k| *k as u32 == v)
    }

    fn fire(self) -> ! {
        match self {
            Self::Panic => panic!("a trap forced by __debugTrap (tests only)"),
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

/// Tests only: force a trap of `kind` (`"panic"`, `"oom"` or `"unreachable"`). With `after`
/// absent, now, inside this call; with `after = n`, inside the `n`-th pass `next()` from now
/// (counting every pass of this instance), where it runs in the engine's own task as a real
/// trap would: the JS layer must then reject the pending `next()` rather than hang.
#[doc(hidden)]
#[wasm_bindgen(js_name = __debugTrap)]
pub fn debug_trap(kind: &str, after: Option<u32>) -> Result<(), JsError> {
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

/// Called at the start of every pass `next()`: fires the armed trap on its turn.
pub(crate) fn on_next() {
    let Some(kind) = TrapKind::from_u32(ARMED_KIND.load(Ordering::SeqCst)) else {
        return;
    };
    if ARMED_AFTER.fetch_sub(1, Ordering::SeqCst) <= 1 {
        ARMED_KIND.store(0, Ordering::SeqCst);
        kind.fire();
    }
}
