//! The read window: how many requests may be ahead of the decoders.
//!
//! A read's buffer lives until its decode starts, and the allocator keeps freed pages for
//! reuse, so every read started beyond what the decoders can take is memory held for
//! nothing: on a page-cached disk a read takes a tenth of a decode, and 8 reads of 40-sample
//! chunks started at once held 0.6 GB beyond the decoded chunks (docs/lab/benchmarks.md "Peak
//! memory on 40-sample chunks").
//!
//! Little's law sizes it: requests in flight = the rate wanted × the time a request takes.
//! - **The decoders' side.** Reads keep `threads` decoders fed when `window / latency >=
//!   threads / decode time` (a request's decode time: its tiles' decodes), so the window
//!   follows `2 * threads * latency / decode + 1` (twice what is needed, for the spread of
//!   both), from running means.
//! - **The link's side.** Requests that share a link past its rate only queue: each takes
//!   longer and no more bytes arrive. The window is therefore also capped at `delivered rate
//!   × the fastest time per byte seen + 1`: the requests that, unqueued, deliver what the
//!   store is delivering now (a delay-based rule, as TCP Vegas). While the link has room the
//!   delivered rate grows with the window and the cap with it; once full, the cap stops.
//!   Requests whose time is mostly the store's time to first byte (small inner chunks of a
//!   shard, as patches read them) take as long whatever their size, so a time per byte
//!   understates what they can share: the cap in requests, `completion rate × the fastest
//!   request + 1`, stands beside it, and the larger of the two applies. Without it, uneven
//!   small requests held the window at its floor (3 of 32 places: 10.7 s against 1.7 s for
//!   one epoch of patches on the cloud-like store, `bench/run.py patches --cloud 50ms`).
//!
//! Between `threads + 1` and `max_inflight`, growing by one place per measurement and
//! shrinking at once. Before any measurement a local store starts at the floor and a remote
//! one at the requests its first batch needs (reads beyond them would share the link with
//! them and delay that batch), at most `max_inflight`.
//!
//! What a place covers differs: a local store's read keeps its place until its decode
//! starts (its bytes are the memory the window exists to bound); a remote store's gives it
//! back when its bytes arrive, since the window shares out the network, and a read waiting
//! for a decoder still holds its `max_inflight` permit, which bounds those bytes. Holding
//! remote places until the decodes started left the link idle while the first block's
//! chunks waited for the two decoders (docs/cloud.md, "Where the time went").
//!
//! Places are granted in the loads' admission order (their decode priority), not in the
//! order their tasks happen to reach the window: a narrow window granted at random would let
//! a later block's reads delay the first batch. Hand-written because no async semaphore in a
//! well-kept crate both grants by priority and changes its size while held (async-lock's
//! is FIFO and fixed; tokio's is FIFO and not runtime-agnostic).

use std::collections::BinaryHeap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use futures::channel::oneshot;

/// Weight of the newest sample in the running means.
const WINDOW_EWMA: f64 = 0.2;
/// Completions the delivered rate is measured over.
const DELIVERIES: usize = 16;

/// What set the read window's size last (reported with it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum WindowReason {
    /// No read measured yet: the starting size.
    #[default]
    Start,
    /// What keeps the decode threads fed.
    Decoders,
    /// What the link delivers unqueued: more requests would only wait on each other.
    Link,
    /// The floor, one request per decode thread plus one.
    Floor,
    /// `max_inflight`.
    Ceiling,
}

impl WindowReason {
    /// The word reports use (as serialized).
    pub fn name(self) -> &'static str {
        match self {
            Self::Start => "start",
            Self::Decoders => "decoders",
            Self::Link => "link",
            Self::Floor => "floor",
            Self::Ceiling => "ceiling",
        }
    }
}

/// Reads allowed ahead of the decoders; see the module doc.
pub(crate) struct ReadWindow {
    state: Mutex<WindowState>,
    /// The size before any measurement.
    start: usize,
    threads: usize,
    floor: usize,
    ceiling: usize,
    /// A remote store's places go back when a read's bytes arrive, a local one's when its
    /// decode starts (module doc).
    frees_on_arrival: bool,
}

struct WindowState {
    /// Places in existence (held or free).
    size: usize,
    /// Places held by reads.
    held: usize,
    /// What `size` moves to: at once when larger, by retiring returned places when smaller.
    target: usize,
    /// Running means, in seconds: a read (permit to bytes), a tile's decode; and the tiles
    /// one read brings (a coalesced read of a shard brings several).
    latency: Option<f64>,
    decode: Option<f64>,
    tiles_per_read: Option<f64>,
    /// The fastest seconds per byte a read took, the fastest read, and the last completions
    /// (when, bytes).
    fastest_per_byte: Option<f64>,
    fastest_read: Option<f64>,
    delivered: std::collections::VecDeque<(Duration, u64)>,
    reason: WindowReason,
    waiting: BinaryHeap<Waiter>,
    seq: u64,
}

/// A read waiting for a place: the smallest (priority, arrival) is served first.
type Waiter = SmallestFirst<(u64, u64), oneshot::Sender<()>>;

impl ReadWindow {
    /// A window for `threads` decoders and at most `max_inflight` reads; `local` stores
    /// start narrow (their reads are fast), remote ones at `first_reads`, the requests the
    /// first batch needs.
    pub(crate) fn new(threads: usize, max_inflight: usize, local: bool, first_reads: usize) -> Arc<Self> {
        let ceiling = max_inflight.max(1);
        let floor = (threads + 1).min(ceiling);
        let start = if local { floor } else { first_reads.clamp(floor, ceiling) };
        let state = WindowState {
            size: start,
            held: 0,
            target: start,
            latency: None,
            decode: None,
            tiles_per_read: None,
            fastest_per_byte: None,
            fastest_read: None,
            delivered: std::collections::VecDeque::with_capacity(DELIVERIES),
            reason: WindowReason::Start,
            waiting: BinaryHeap::new(),
            seq: 0,
        };
        Arc::new(Self { state: Mutex::new(state), start, threads, floor, ceiling, frees_on_arrival: !local })
    }

    /// A place in the window for a read of decode priority `priority` (smaller first),
    /// given back when the returned slot is dropped (when its decode starts).
    pub(crate) fn enter(self: &Arc<Self>, priority: u64) -> Entering {
        let mut st = self.lock();
        if st.held < st.size && st.waiting.is_empty() {
            st.take_place();
            return Entering { window: Arc::clone(self), place: Place::Held };
        }
        let (grant, granted) = oneshot::channel();
        st.seq += 1;
        let key = (priority, st.seq);
        st.waiting.push(Waiter { key, item: grant });
        // Not needed while every freed place goes to a waiter at once; kept so a missed
        // hand-off can only reorder reads, never leave one waiting beside a free place.
        st.grant_waiters();
        Entering { window: Arc::clone(self), place: Place::Waiting(granted) }
    }

    /// The most reads the window lets ahead of the decoders over a pass: the start for a
    /// local store (whose reads only widen it when they are slower than decodes), the
    /// ceiling for a remote one. What `describe()` counts.
    pub(crate) fn reach(&self, local: bool) -> usize {
        if local { self.start } else { self.ceiling }
    }

    /// True when a read gives its place back as its bytes arrive (remote stores), false
    /// when it keeps it until its decode starts (local ones).
    pub(crate) fn frees_on_arrival(&self) -> bool {
        self.frees_on_arrival
    }

    /// Reads now allowed ahead of the decoders.
    pub(crate) fn target(&self) -> usize {
        self.lock().target
    }

    /// What set [`Self::target`] last.
    pub(crate) fn reason(&self) -> WindowReason {
        self.lock().reason
    }

    /// A read of `tiles` tiles and `bytes` bytes took `latency` from its permit to its
    /// bytes, which arrived at `done` (the executor's clock).
    pub(crate) fn read_took(&self, latency: Duration, tiles: usize, bytes: u64, done: Duration) {
        let mut st = self.lock();
        st.latency = Some(ewma(st.latency, latency.as_secs_f64()));
        st.tiles_per_read = Some(ewma(st.tiles_per_read, tiles.max(1) as f64));
        if bytes > 0 {
            let secs = latency.as_secs_f64();
            st.fastest_read = Some(st.fastest_read.map_or(secs, |f| f.min(secs)));
            let per_byte = secs / bytes as f64;
            st.fastest_per_byte = Some(st.fastest_per_byte.map_or(per_byte, |f| f.min(per_byte)));
            if st.delivered.len() == DELIVERIES {
                st.delivered.pop_front();
            }
            st.delivered.push_back((done, bytes));
        }
        self.retarget(&mut st);
    }

    /// A decode took `took`.
    pub(crate) fn decode_took(&self, took: Duration) {
        let mut st = self.lock();
        st.decode = Some(ewma(st.decode, took.as_secs_f64()));
        self.retarget(&mut st);
    }

    fn retarget(&self, st: &mut WindowState) {
        let (Some(latency), Some(decode)) = (st.latency, st.decode) else { return };
        // A read feeds its tiles' decodes: what one read gives the decoders to do.
        let decode = decode * st.tiles_per_read.unwrap_or(1.0);
        let wanted = if latency <= 0.0 {
            0.0 // reads answered at once: the floor keeps every decoder fed
        } else if decode <= 0.0 {
            f64::INFINITY // decodes take no time, reads are the limit
        } else {
            2.0 * self.threads as f64 * latency / decode + 1.0
        };
        let mut reason = WindowReason::Decoders;
        let link = st.link_cap();
        let wanted = match link {
            Some(cap) if cap < wanted => {
                reason = WindowReason::Link;
                cap
            }
            _ => wanted,
        };
        let wanted = if wanted >= self.ceiling as f64 {
            reason = WindowReason::Ceiling;
            self.ceiling
        } else if wanted.ceil() as usize <= self.floor {
            reason = WindowReason::Floor;
            self.floor
        } else {
            wanted.ceil() as usize
        };
        st.reason = reason;
        // Grow by one place per measurement, shrink at once. A read's latency includes its
        // wait for an I/O thread, which grows with the window: one slow first read (a
        // thread starting, a file opening) would otherwise open the window to the ceiling,
        // and the queue that follows would keep it there.
        st.target = wanted.min(st.size.max(st.target) + 1);
        if st.target > st.size {
            st.size = st.target;
            st.grant_waiters();
        }
    }

    /// A place comes back: retired while the window is larger than its target, else
    /// granted to the most urgent waiting read.
    fn give_back(&self) {
        let mut st = self.lock();
        st.held = st.held.saturating_sub(1);
        if st.size > st.target {
            st.size -= 1;
        }
        st.grant_waiters();
    }

    fn lock(&self) -> MutexGuard<'_, WindowState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl WindowState {
    /// Requests that, unqueued, deliver the rate the last completions delivered: that rate
    /// × the fastest seconds per byte seen, plus one. `None` until the completions span
    /// enough time to measure a rate (a burst of reads finishing together does not).
    fn link_cap(&self) -> Option<f64> {
        let (first, last) = (self.delivered.front()?, self.delivered.back()?);
        let span = last.0.saturating_sub(first.0).as_secs_f64();
        if self.delivered.len() < DELIVERIES / 2 || span <= 0.0 {
            return None;
        }
        // The first completion opens the span; its bytes arrived before it.
        let bytes: u64 = self.delivered.iter().skip(1).map(|d| d.1).sum();
        let by_bytes = bytes as f64 / span * self.fastest_per_byte? + 1.0;
        let by_requests = (self.delivered.len() - 1) as f64 / span * self.fastest_read? + 1.0;
        Some(by_bytes.max(by_requests))
    }

    fn take_place(&mut self) {
        self.held += 1;
    }

    fn grant_waiters(&mut self) {
        while self.held < self.size {
            let Some(w) = self.waiting.pop() else { return };
            // A waiter whose read was dropped (the pass ended) has closed its receiver.
            if w.item.send(()).is_ok() {
                self.take_place();
            }
        }
    }
}

fn ewma(mean: Option<f64>, sample: f64) -> f64 {
    mean.map_or(sample, |m| m + WINDOW_EWMA * (sample - m))
}

/// A read on its way into the window; resolves to its [`WindowSlot`].
pub(crate) struct Entering {
    window: Arc<ReadWindow>,
    place: Place,
}

enum Place {
    /// Granted and counted as held, not yet handed out as a slot.
    Held,
    /// Waiting for a grant.
    Waiting(oneshot::Receiver<()>),
    /// Handed out as a [`WindowSlot`], which gives it back.
    HandedOut,
}

impl Future for Entering {
    type Output = WindowSlot;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<WindowSlot> {
        if let Place::Waiting(rx) = &mut self.place {
            // The sender lives in the window's heap until it grants, and the window outlives
            // every read, so the channel is never cancelled while this read exists.
            if Pin::new(rx).poll(cx).is_pending() {
                return Poll::Pending;
            }
        }
        self.place = Place::HandedOut;
        Poll::Ready(WindowSlot { window: Some(Arc::clone(&self.window)) })
    }
}

impl Drop for Entering {
    /// A read dropped before it took its place gives back a place granted to it.
    fn drop(&mut self) {
        match std::mem::replace(&mut self.place, Place::HandedOut) {
            Place::Held => self.window.give_back(),
            Place::Waiting(mut rx) => {
                rx.close();
                if let Ok(Some(())) = rx.try_recv() {
                    self.window.give_back();
                }
            }
            Place::HandedOut => {}
        }
    }
}

/// One read's place in the [`ReadWindow`], given back when dropped.
pub(crate) struct WindowSlot {
    window: Option<Arc<ReadWindow>>,
}

impl Drop for WindowSlot {
    fn drop(&mut self) {
        if let Some(w) = self.window.take() {
            w.give_back();
        }
    }
}

/// A heap entry served smallest key first (`BinaryHeap` is a max-heap); the item takes no
/// part in the order. For the CPU queue and the read window's waiting reads.
pub(crate) struct SmallestFirst<K, T> {
    pub key: K,
    pub item: T,
}

impl<K: Ord, T> PartialEq for SmallestFirst<K, T> {
    fn eq(&self, other: &Self) -> bool {
        self.key == other.key
    }
}
impl<K: Ord, T> Eq for SmallestFirst<K, T> {}
impl<K: Ord, T> PartialOrd for SmallestFirst<K, T> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl<K: Ord, T> Ord for SmallestFirst<K, T> {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        other.key.cmp(&self.key)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use futures::FutureExt;
    use futures::executor::block_on;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::{ReadWindow, WindowReason};

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn a_local_window_starts_at_one_read_per_thread_plus_one_and_a_remote_one_at_its_first_batchs_reads() {
        assert_eq!(ReadWindow::new(2, 32, true, 32).target(), 3);
        assert_eq!(ReadWindow::new(2, 32, false, 32).target(), 32);
        assert_eq!(ReadWindow::new(2, 32, false, 16).target(), 16, "a remote store starts at the first batch's reads");
        assert_eq!(ReadWindow::new(2, 32, false, 1).target(), 3, "never below one per thread plus one");
        assert_eq!(ReadWindow::new(8, 4, true, 32).target(), 4, "never above max_inflight");
    }

    #[test]
    fn slow_reads_widen_the_window_one_place_per_measurement_to_what_keeps_the_decoders_fed() {
        let w = ReadWindow::new(2, 32, true, 32);
        let held: Vec<_> = (0..3).map(|i| block_on(w.enter(i))).collect();
        let mut fourth = w.enter(3);
        assert!((&mut fourth).now_or_never().is_none(), "a fourth read waits");
        w.decode_took(100 * MS);
        w.read_took(200 * MS, 1, 0, Duration::ZERO);
        assert_eq!(w.target(), 4, "one place more per measurement, not the 9 wanted at once");
        let fourth = fourth.now_or_never().expect("the widening let the waiting read in");
        let targets: Vec<usize> = (0..6)
            .map(|_| {
                w.read_took(200 * MS, 1, 0, Duration::ZERO);
                w.target()
            })
            .collect();
        assert_eq!(targets, [5, 6, 7, 8, 9, 9], "2 threads x 2 decodes per read, twice over, plus one");
        let more: Vec<_> = (0..5).map(|i| w.enter(4 + i).now_or_never().expect("room for 9")).collect();
        assert!(w.enter(9).now_or_never().is_none(), "the tenth waits");
        for _ in 0..100 {
            w.read_took(100_000 * MS, 1, 0, Duration::ZERO);
        }
        assert_eq!(w.target(), 32, "never above max_inflight");
        drop((held, fourth, more));
    }

    #[test]
    fn fast_reads_narrow_the_window_as_reads_give_their_places_back() {
        let w = ReadWindow::new(2, 8, false, 8);
        let held: Vec<_> = (0..8).map(|i| block_on(w.enter(i))).collect();
        w.decode_took(300 * MS);
        w.read_took(30 * MS, 1, 0, Duration::ZERO);
        assert_eq!(w.target(), 3, "never below one read per thread plus one");
        drop(held);
        let now: Vec<_> = (0..9).map_while(|i| w.enter(i).now_or_never()).collect();
        assert_eq!(now.len(), 3, "the 5 places above the target were retired");
    }

    #[test]
    fn instant_decodes_open_the_window_and_instant_reads_keep_it_at_the_floor() {
        let w = ReadWindow::new(2, 16, true, 16);
        w.decode_took(Duration::ZERO);
        for _ in 0..13 {
            w.read_took(MS, 1, 0, Duration::ZERO);
        }
        assert_eq!(w.target(), 16, "decodes take no time: reads are the limit");
        let w = ReadWindow::new(2, 16, false, 16);
        w.decode_took(Duration::ZERO);
        w.read_took(Duration::ZERO, 1, 0, Duration::ZERO);
        assert_eq!(w.target(), 3, "reads take no time: the floor feeds every decoder");
    }

    #[test]
    fn a_freed_place_goes_to_the_most_urgent_waiting_read_whatever_the_arrival_order() {
        let w = ReadWindow::new(1, 2, true, 2);
        let first = block_on(w.enter(10));
        let second = block_on(w.enter(11));
        let mut late = w.enter(30);
        let urgent = w.enter(5);
        let mut middle = w.enter(20);
        drop(first);
        assert!((&mut late).now_or_never().is_none());
        assert!((&mut middle).now_or_never().is_none());
        let urgent = urgent.now_or_never().expect("priority 5 is served first");
        drop(second);
        assert!((&mut late).now_or_never().is_none(), "20 before 30");
        let middle = middle.now_or_never().expect("priority 20 next");
        drop((urgent, middle));
        assert!(late.now_or_never().is_some());
    }

    #[test]
    fn a_read_dropped_while_waiting_loses_no_place() {
        let w = ReadWindow::new(1, 2, true, 2);
        let a = block_on(w.enter(0));
        let b = block_on(w.enter(1));
        let mut gone = w.enter(2);
        let waiting_then_granted = w.enter(3);
        assert!((&mut gone).now_or_never().is_none());
        drop(a); // granted to `gone`, which is dropped before it polls again
        drop(gone);
        let c = waiting_then_granted.now_or_never().expect("the place came back to the window");
        drop((b, c));
        let all: Vec<_> = (0..3).map_while(|i| w.enter(i).now_or_never()).collect();
        assert_eq!(all.len(), 2, "two places, none lost and none made up");
    }

    /// Sixteen reads of 1000 bytes, each taking `took`, complete 10 ms apart.
    fn steady(w: &ReadWindow, took: Duration) {
        for i in 1..=16u32 {
            w.read_took(took, 1, 1000, 10 * i * MS);
        }
    }

    #[test]
    fn reads_that_only_queue_on_a_full_link_stop_the_window_at_what_the_link_delivers() {
        let w = ReadWindow::new(2, 32, false, 4);
        w.decode_took(MS); // decodes are quick: the decoders alone would want the ceiling
        // 4 at once on a link of 100 bytes/ms: each takes 40 ms, one arrives every 10 ms.
        steady(&w, 40 * MS);
        assert_eq!((w.target(), w.reason()), (5, WindowReason::Link), "100 B/ms x 0.04 ms/B + 1");
    }

    #[test]
    fn while_the_link_has_room_the_window_keeps_growing() {
        let w = ReadWindow::new(2, 32, false, 4);
        w.decode_took(MS);
        // Each read takes 10 ms however many run: the link is not the limit, so the
        // delivered rate grows with the window and the cap with it.
        for round in 0..6u32 {
            for i in 1..=16u32 {
                let n = w.target() as u32;
                w.read_took(10 * MS, 1, 1000, (round * 16 + i) * 10 * MS / n);
            }
        }
        assert!(w.target() > 8, "grew past its start: {} ({:?})", w.target(), w.reason());
    }

    #[test]
    fn small_requests_of_uneven_size_that_wait_on_the_store_still_widen_the_window() {
        let w = ReadWindow::new(2, 32, false, 3);
        w.decode_took(MS);
        // Each read waits 50 ms for its first byte, then 1 ms per 40 kB: 200 and 300 kB in
        // turn. Time per byte is 20% lower for the large ones, so in bytes the cap sat below
        // the window; in requests it is the window plus one.
        for round in 0..8u32 {
            for i in 1..=16u32 {
                let n = w.target() as u32;
                let bytes = if i % 2 == 0 { 200_000 } else { 300_000 };
                let took = 50 * MS + MS * (bytes / 40_000);
                w.read_took(took, 1, u64::from(bytes), (round * 16 + i) * 56 * MS / n);
            }
        }
        assert!(w.target() > 8, "grew past its start: {} ({:?})", w.target(), w.reason());
    }
}
