//! Core's executor and thread-pool seams on tokio and rayon.

use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::{Duration, Instant};

use insitubatch_core::runtime::{BoxFuture, Executor, Job, Runtime, ThreadPool};

use crate::NativeError;

/// [`Executor`] on a tokio runtime handle; the clock is time since creation.
#[derive(Debug, Clone)]
pub struct TokioExecutor {
    handle: tokio::runtime::Handle,
    origin: Instant,
}

impl TokioExecutor {
    /// An executor spawning onto `handle`.
    pub fn new(handle: tokio::runtime::Handle) -> Self {
        Self { handle, origin: Instant::now() }
    }
}

impl Executor for TokioExecutor {
    fn spawn(&self, task: BoxFuture<'static, ()>) {
        drop(self.handle.spawn(task));
    }

    fn sleep(&self, duration: Duration) -> BoxFuture<'static, ()> {
        // The timer must be registered inside the runtime; it may be polled from anywhere.
        let _guard = self.handle.enter();
        Box::pin(tokio::time::sleep(duration))
    }

    fn now(&self) -> Duration {
        self.origin.elapsed()
    }
}

/// [`ThreadPool`] on a dedicated rayon pool (threads `insitubatch-decode-N`).
#[derive(Debug, Clone)]
pub struct RayonPool {
    pool: Arc<rayon::ThreadPool>,
}

impl RayonPool {
    /// A pool of `threads` (default: available parallelism).
    ///
    /// # Errors
    /// [`NativeError::Runtime`] when the threads cannot be started.
    pub fn new(threads: Option<usize>) -> Result<Self, NativeError> {
        let n = threads
            .filter(|&n| n > 0)
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, NonZeroUsize::get));
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .thread_name(|i| format!("insitubatch-decode-{i}"))
            .build()
            .map_err(|e| NativeError::Runtime(format!("cannot start {n} decode threads: {e}")))?;
        Ok(Self { pool: Arc::new(pool) })
    }

    /// The rayon pool itself (for `install`).
    pub fn rayon(&self) -> &rayon::ThreadPool {
        &self.pool
    }
}

impl ThreadPool for RayonPool {
    fn execute(&self, job: Job) {
        self.pool.spawn(job);
    }

    fn parallelism(&self) -> NonZeroUsize {
        NonZeroUsize::new(self.pool.current_num_threads()).unwrap_or(NonZeroUsize::MIN)
    }
}

/// Owns the tokio runtime; shuts it down in the background when the last user goes, so
/// dropping a dataset inside an async context does not panic.
#[derive(Debug)]
struct OwnedTokio {
    runtime: Option<tokio::runtime::Runtime>,
    /// The process that started the runtime's threads.
    pid: u32,
}

impl Drop for OwnedTokio {
    fn drop(&mut self) {
        let Some(rt) = self.runtime.take() else { return };
        if std::process::id() == self.pid {
            rt.shutdown_background();
        } else {
            // A forked child (a DataLoader worker, a `multiprocessing` fork) has the runtime's
            // memory but none of its threads: shutting it down there detaches threads that do
            // not exist, and glibc's pthread_detach segfaults on them (a core dump of the
            // DataLoader refusal test showed it). The child's exit returns the memory.
            std::mem::forget(rt);
        }
    }
}

/// A tokio runtime (one I/O worker) plus a rayon pool, as core's [`Runtime`].
#[derive(Debug, Clone)]
pub struct NativeRuntime {
    tokio: Arc<OwnedTokio>,
    /// The seams core runs on.
    pub runtime: Runtime,
    /// The decode pool (also usable directly).
    pub pool: RayonPool,
}

impl NativeRuntime {
    /// Start a runtime with `threads` decode threads (default: available parallelism).
    ///
    /// # Errors
    /// [`NativeError::Runtime`] when threads cannot be started.
    pub fn new(threads: Option<usize>) -> Result<Self, NativeError> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            // Local-file reads run on the blocking pool. A few threads serve them in request
            // (admission) order, so the first batch's chunks arrive first instead of every
            // read in flight finishing together; remote reads are async and unaffected.
            .max_blocking_threads(4)
            .thread_name("insitubatch-io")
            .enable_all()
            .build()
            .map_err(|e| NativeError::Runtime(format!("cannot start the tokio runtime: {e}")))?;
        let pool = RayonPool::new(threads)?;
        let runtime = Runtime::new(Arc::new(TokioExecutor::new(rt.handle().clone())), Arc::new(pool.clone()))
            .with_memory_available(memory_available());
        #[cfg(target_os = "linux")]
        let runtime = runtime.with_prefault(populate_pages);
        let tokio = Arc::new(OwnedTokio { runtime: Some(rt), pid: std::process::id() });
        Ok(Self { tokio, runtime, pool })
    }

    /// The tokio handle.
    pub fn handle(&self) -> tokio::runtime::Handle {
        self.tokio.runtime.as_ref().map(|r| r.handle().clone()).expect("runtime is alive while NativeRuntime exists")
    }

    /// Run a future to completion on the tokio runtime (from a non-async thread).
    pub fn block_on<F: Future>(&self, f: F) -> F::Output {
        self.handle().block_on(f)
    }
}

/// The memory this process can still have: the system's available memory (free plus
/// reclaimable page cache), or a container's room when its cgroup limit is tighter.
/// `None` where the platform reports nothing.
pub fn memory_available() -> Option<u64> {
    let mut sys = sysinfo::System::new();
    sys.refresh_memory();
    let system = Some(sys.available_memory()).filter(|&b| b > 0);
    // sysinfo's cgroup `free_memory` subtracts the page cache the cgroup is charged for,
    // which the kernel reclaims on demand, so on a machine that has been reading data it
    // reads near zero. The limit less the cgroup's anonymous memory is what can be had.
    let cgroup = sys
        .cgroup_limits()
        .filter(|c| c.total_memory < sys.total_memory())
        .map(|c| c.total_memory.saturating_sub(c.rss));
    match (system, cgroup) {
        (Some(s), Some(c)) => Some(s.min(c)),
        (s, c) => s.or(c),
    }
}

/// core's `Runtime::prefault` on Linux: `madvise(MADV_POPULATE_WRITE)` over the whole pages of
/// a fresh buffer's capacity. One call faults them all in: 0.4–0.5 s of system time per GiB
/// here against 0.5–1.0 s for a fault per page on first write, and steadier
/// (bench/run.py faults, docs/lab/benchmarks.md). Kernels before 5.14 refuse the advice
/// (`EINVAL`), and then the pages fault on first write as before, so errors are ignored.
/// No crate wraps madvise over memory we did not map ourselves (memmap2 advises only its own
/// mappings), hence libc.
#[cfg(target_os = "linux")]
fn populate_pages(buf: &mut insitubatch_core::AlignedBytes) {
    const PAGE: usize = 4096;
    let start = buf.as_mut_ptr() as usize;
    let end = start + buf.capacity();
    let (first, last) = (start.next_multiple_of(PAGE), end / PAGE * PAGE);
    if last > first {
        // SAFETY: [first, last) lies inside the buffer's allocation, which we own; the advice
        // only faults pages in (as a write would) and changes no byte of them.
        unsafe {
            libc::madvise(first as *mut libc::c_void, last - first, libc::MADV_POPULATE_WRITE);
        }
    }
}

#[cfg(all(test, target_os = "linux"))]
mod prefault_tests {
    use aligned_vec::AVec;

    #[test]
    fn populating_a_fresh_buffer_keeps_it_empty_and_writable() {
        for cap in [1usize, 4095, 1 << 16, (3 << 20) + 17] {
            let mut buf: insitubatch_core::AlignedBytes = AVec::with_capacity(128, cap);
            super::populate_pages(&mut buf);
            assert!(buf.is_empty() && buf.capacity() >= cap);
            buf.resize(cap, 7);
            assert!(buf.iter().all(|&b| b == 7));
        }
    }
}
