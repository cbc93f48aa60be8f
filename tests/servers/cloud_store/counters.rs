//! What the store served, for tests and benchmarks to read (`/_ib/stats`) and zero
//! (`/_ib/reset`): requests by kind and by path, bytes promised and bytes sent, slow,
//! stalled and cancelled requests, and the server's own CPU time.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use serde::Serialize;

/// Requests and bytes of one path.
#[derive(Debug, Default, Clone, Serialize)]
pub struct PathCount {
    pub requests: u64,
    pub bytes: u64,
}

/// Everything counted since the last reset.
#[derive(Debug, Default, Clone, Serialize)]
pub struct Counters {
    /// Every data request (GET, HEAD, list), not counting `/_ib/` ones.
    pub requests: u64,
    pub gets: u64,
    /// GETs with a `Range` header.
    pub ranged_gets: u64,
    pub heads: u64,
    pub lists: u64,
    pub not_found: u64,
    /// Body bytes of the GET responses (their `Content-Length`).
    pub bytes: u64,
    /// Body bytes that left before each response finished or its client hung up.
    pub bytes_sent: u64,
    /// Requests that drew the slow tail.
    pub slow: u64,
    /// Requests held without an answer (`stall`).
    pub stalled: u64,
    /// Responses whose client hung up before the last body byte.
    pub cancelled: u64,
    /// GET requests and body bytes per path.
    pub paths: BTreeMap<String, PathCount>,
}

/// The counters behind one lock: every update is a few additions.
#[derive(Debug, Default)]
pub struct Tally {
    counters: Mutex<Counters>,
}

impl Tally {
    pub fn with<R>(&self, f: impl FnOnce(&mut Counters) -> R) -> R {
        f(&mut self.lock())
    }

    pub fn snapshot(&self) -> Counters {
        self.lock().clone()
    }

    pub fn reset(&self) {
        *self.lock() = Counters::default();
    }

    fn lock(&self) -> MutexGuard<'_, Counters> {
        self.counters.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// User + system CPU seconds of this process, so a benchmark can show the store is not
/// what limits it on a small machine.
pub fn cpu_seconds() -> f64 {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage writes one `rusage` into the pointer it is given, which points at
    // memory sized and aligned for one; RUSAGE_SELF is always a valid `who`.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr()) };
    if rc != 0 {
        return 0.0;
    }
    // SAFETY: getrusage returned 0, so it initialized the struct.
    let u = unsafe { usage.assume_init() };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    secs(u.ru_utime) + secs(u.ru_stime)
}
