//! Tile reads: one place in the read window and one `max_inflight` permit per storage
//! request, and ranges of one object coalesced into one request.
//!
//! A sharded array's tiles are ranges of their shard. Every tile a load needs registers its
//! range as *pending* on its object; the tile that gets a window place and a permit first
//! claims its own range and every pending range of the same object within
//! `coalesce_gap_bytes` of it, up to `coalesce_max_bytes` in all, fetches them in one
//! request and hands each claimed tile its slice (the gaps are read and dropped). A claimed
//! tile gives up its own wait for a place. The pending ranges are those of the chunks the
//! pass has admitted, so coalescing needs no memory beyond what the pool already charged
//! (ARCHITECTURE.md "The read path").
//!
//! object_store's `get_ranges` coalesces the ranges of one call; these arrive from separate
//! chunk loads over time, on every target and store (wasm fetch, zarr Stores from Python),
//! so the pending set is ours.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use async_lock::{Semaphore, SemaphoreGuardArc};
use bytes::Bytes;
use futures::channel::oneshot;
use futures::future::{Either, select};

use crate::ahead::{Found, ReadAhead};
use crate::error::{Error, Result};
use crate::hedge::{Hedger, hedged};
use crate::retry::{ReadPolicy, with_policy};
use crate::runtime::{ByteRange, Executor, Storage};
use crate::stats::PassRecorder;
use crate::window::{ReadWindow, WindowSlot};
use crate::zarr::ShardIndex;

/// The state every tile read of a dataset shares, across its passes: the store and the
/// clock, the `max_inflight` permits, the read window, the pending ranges, hedging, the
/// read-ahead and the read policy. The engine holds one (`Engine::reads`) and hands it to
/// each tile's read.
pub(crate) struct ReadPath {
    pub storage: Arc<dyn Storage>,
    pub executor: Arc<dyn Executor>,
    pub inflight: Arc<Semaphore>,
    /// Reads allowed ahead of the decoders ([`ReadWindow`]).
    pub window: Arc<ReadWindow>,
    /// Requests holding a `max_inflight` permit now.
    pub inflight_now: Arc<AtomicUsize>,
    /// Ranges of one object waiting to be read together.
    pub coalescer: Coalescer,
    /// Latencies and the hedge budget (`None`: no hedging, as for local stores).
    pub hedger: Option<Hedger>,
    /// Inner chunks passes want soon, and bytes read ahead for them.
    pub ahead: ReadAhead,
    pub policy: ReadPolicy,
}

impl ReadPath {
    pub(crate) fn now(&self) -> Duration {
        self.executor.now()
    }

    pub(crate) fn url(&self, key: &str) -> String {
        self.storage.key_url(key)
    }

    /// One storage request of about `bytes` (0: unknown) under the read policy: retried and
    /// timed out by [`crate::retry::with_policy`], each attempt hedged while the store has
    /// not answered ([`Storage::start_read`]; a store that cannot tell its answer from its
    /// bytes is hedged on the whole read, compared at size).
    pub(crate) async fn fetch(
        &self,
        key: &str,
        range: Option<ByteRange>,
        bytes: u64,
        rec: Option<&PassRecorder>,
    ) -> Result<Option<Bytes>> {
        let exec = self.executor.as_ref();
        // Times to first byte do not grow with the size; whole reads do.
        let size = if self.storage.answers_before_body() { 0 } else { bytes };
        let attempt = || async move {
            let answer = hedged(exec, self.hedger.as_ref(), rec, size, || self.storage.start_read(key, range)).await?;
            match answer {
                Some(body) => body.await.map(Some),
                None => Ok(None),
            }
        };
        with_policy(exec, &self.policy, key, attempt).await.map_err(|gave_up| Error::Storage {
            message: format!(
                "storage read failed after {} attempt(s): {} (check credentials, endpoint and network; \
                     on_bad_chunk=\"nan\" skips unreadable chunks)",
                gave_up.attempts, gave_up.error.message
            ),
            key: self.url(key),
        })
    }
}

/// One tile's stored bytes, with what its request holds until the tile is decoded and placed.
pub(crate) struct Delivery {
    /// The tile's bytes (`None`: the object is missing).
    pub bytes: Result<Option<Bytes>>,
    /// The request's place in the read window, for a local store: given back when the decode
    /// of the request's last tile starts (every tile drops its clone there). A remote
    /// store's place went back when the bytes arrived.
    pub place: Option<Arc<WindowSlot>>,
    /// The request's permit: given back when its last tile is placed.
    pub hold: Option<Arc<ReadHold>>,
    /// When the request was permitted and when its bytes arrived.
    pub permitted: Duration,
    pub fetched: Duration,
}

/// A `max_inflight` permit, counted in the engine's requests in flight while held.
pub(crate) struct ReadHold {
    _permit: SemaphoreGuardArc,
    inflight: Arc<AtomicUsize>,
}

impl ReadHold {
    async fn acquire(reads: &ReadPath, rec: &PassRecorder) -> Self {
        let permit = reads.inflight.acquire_arc().await;
        let now = reads.inflight_now.fetch_add(1, Ordering::SeqCst) + 1;
        rec.with(|r| r.inflight_peak = r.inflight_peak.max(now));
        Self { _permit: permit, inflight: Arc::clone(&reads.inflight_now) }
    }
}

impl Drop for ReadHold {
    fn drop(&mut self) {
        self.inflight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Ranges waiting for a request, by object.
#[derive(Default)]
pub(crate) struct Coalescer {
    pending: Mutex<HashMap<String, Vec<Pending>>>,
    next_id: AtomicU64,
    gap: u64,
    max: u64,
}

struct Pending {
    id: u64,
    start: u64,
    end: u64,
    tx: oneshot::Sender<Delivery>,
}

/// An inner chunk a pass will need later, and its range in the shard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Wanted {
    pub index: u32,
    pub start: u64,
    pub end: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Item {
    Pending(usize),
    Wanted(usize),
}

/// What one request reads: pending ranges for their tiles, and wanted ones to hold.
struct Claim {
    pending: Vec<Pending>,
    ahead: Vec<Wanted>,
}

impl Coalescer {
    /// Coalesce ranges of one object at most `gap` bytes apart, into requests of at most `max`.
    pub(crate) fn new(gap: u64, max: u64) -> Self {
        Self { gap, max, ..Self::default() }
    }

    fn register(&self, object: &str, start: u64, end: u64) -> (u64, oneshot::Receiver<Delivery>) {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        self.lock().entry(object.to_string()).or_default().push(Pending { id, start, end, tx });
        (id, rx)
    }

    /// Take range `id` and the ranges of the same object it can be read with: pending ones,
    /// and `wanted` ones (inner chunks a pass needs later, read ahead while `ahead` has room
    /// to hold them), within the gap and size rules. `None` when another request took `id`.
    fn claim(&self, object: &str, id: u64, wanted: &[Wanted], ahead: &ReadAhead) -> Option<Claim> {
        let mut pending = self.lock();
        let ranges = pending.get_mut(object)?;
        let mine = ranges.iter().position(|p| p.id == id)?;
        // Every candidate, by offset: pending ones by their position in `ranges`, wanted
        // ones by theirs in `wanted`.
        let mut items: Vec<(u64, u64, Item)> =
            ranges.iter().enumerate().map(|(i, p)| (p.start, p.end, Item::Pending(i))).collect();
        items.extend(wanted.iter().enumerate().map(|(i, w)| (w.start, w.end, Item::Wanted(i))));
        items.sort_by_key(|&(s, e, _)| (s, e));
        let at = items.iter().position(|it| it.2 == Item::Pending(mine))?;
        let (mut lo, mut hi) = (items[at].0, items[at].1);
        let mut taken = vec![at];
        let try_take = |item: Item, start: u64, end: u64| match item {
            Item::Pending(_) => true,
            Item::Wanted(w) => ahead.begin(object, wanted[w].index, end - start),
        };
        for (k, &(s, e, item)) in items.iter().enumerate().skip(at + 1) {
            if s > hi.saturating_add(self.gap) || hi.max(e) - lo > self.max {
                break;
            }
            if try_take(item, s, e) {
                hi = hi.max(e);
                taken.push(k);
            }
        }
        for (k, &(s, e, item)) in items.iter().enumerate().take(at).rev() {
            if e.saturating_add(self.gap) < lo || hi - lo.min(s) > self.max {
                break;
            }
            if try_take(item, s, e) {
                lo = lo.min(s);
                taken.push(k);
            }
        }
        let mut take_pending: Vec<usize> = Vec::new();
        let mut ahead_taken = Vec::new();
        for k in taken {
            match items[k].2 {
                Item::Pending(i) => take_pending.push(i),
                Item::Wanted(w) => ahead_taken.push(wanted[w]),
            }
        }
        take_pending.sort_unstable_by(|a, b| b.cmp(a));
        let claimed: Vec<Pending> = take_pending.into_iter().map(|i| ranges.swap_remove(i)).collect();
        if ranges.is_empty() {
            pending.remove(object);
        }
        Some(Claim { pending: claimed, ahead: ahead_taken })
    }

    /// A tile that stopped waiting (its load was dropped) takes its range back.
    fn withdraw(&self, object: &str, id: u64) {
        let mut pending = self.lock();
        if let Some(ranges) = pending.get_mut(object) {
            ranges.retain(|p| p.id != id);
            if ranges.is_empty() {
                pending.remove(object);
            }
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Vec<Pending>>> {
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// One tile's read: registered with the coalescer as soon as the tile is located (so the
/// tiles of one chunk are all pending before any of them starts a request), then read by a
/// request of its own or as part of another's, or found read ahead. Dropping it withdraws a
/// pending range.
pub(crate) struct TileRead {
    reads: Arc<ReadPath>,
    object: String,
    range: Option<ByteRange>,
    /// Its inner chunk index and its shard's index, for an inner chunk of a shard.
    shard: Option<(u32, Arc<ShardIndex>)>,
    source: Source,
}

enum Source {
    /// A range of its own request, or one another request may take (`Pending`).
    Pending(u64, oneshot::Receiver<Delivery>),
    /// Read ahead: its bytes are here, or on their way.
    Held(Bytes),
    Coming(oneshot::Receiver<Result<Bytes>>),
    /// A whole object or a suffix: a request of its own.
    Alone,
    /// Taken out while it waits (its id stays in `waiting`).
    Taken,
}

impl TileRead {
    /// Register `range` of `object` (`None`: the whole object, read alone); `shard` is the
    /// inner chunk's index in its shard and the shard's index.
    pub(crate) fn register(
        reads: &Arc<ReadPath>,
        object: String,
        range: Option<ByteRange>,
        shard: Option<(u32, Arc<ShardIndex>)>,
    ) -> Self {
        let ahead = shard.as_ref().and_then(|(i, _)| reads.ahead.take(&object, *i));
        let source = match (ahead, range) {
            (Some(Found::Held(b)), _) => Source::Held(b),
            (Some(Found::Coming(rx)), _) => Source::Coming(rx),
            (None, Some(ByteRange::Bounded { start, end })) => {
                let (id, rx) = reads.coalescer.register(&object, start, end);
                Source::Pending(id, rx)
            }
            (None, _) => Source::Alone,
        };
        Self { reads: Arc::clone(reads), object, range, shard, source }
    }

    /// The tile's stored bytes, at decode priority `priority`.
    pub(crate) async fn read(mut self, priority: u64, rec: &Arc<PassRecorder>) -> Delivery {
        let reads = Arc::clone(&self.reads);
        match std::mem::replace(&mut self.source, Source::Taken) {
            Source::Alone => return alone(&reads, &self.object, self.range, priority, rec).await,
            Source::Held(b) => return read_ahead(&reads, rec, Ok(b)),
            Source::Coming(rx) => {
                if let Ok(bytes) = rx.await {
                    return read_ahead(&reads, rec, bytes);
                }
                // Its request was dropped before it answered: read it here.
                let (start, end) = self.bounds().unwrap_or_default();
                let (id, rx) = reads.coalescer.register(&self.object, start, end);
                self.source = Source::Pending(id, rx);
            }
            pending => self.source = pending,
        }
        // Let the loads woken with this one (by the same shard index, or admitted in the same
        // step) register their ranges before this one can start a request and claim them.
        yield_once().await;
        loop {
            let Source::Pending(id, rx) = &mut self.source else { unreachable_source() };
            let id = *id;
            let place = match select(&mut *rx, reads.window.enter(priority)).await {
                Either::Left((Ok(swept), _)) => return swept,
                Either::Left((Err(oneshot::Canceled), _)) => {
                    self.reregister(); // its request was dropped: ask again
                    continue;
                }
                Either::Right((place, _)) => place,
            };
            let hold = match select(&mut *rx, std::pin::pin!(ReadHold::acquire(&reads, rec))).await {
                Either::Left((Ok(swept), _)) => return swept,
                Either::Left((Err(oneshot::Canceled), _)) => {
                    self.reregister();
                    continue;
                }
                Either::Right((hold, _)) => hold,
            };
            let wanted = self.wanted();
            let Some(claim) = reads.coalescer.claim(&self.object, id, &wanted, &reads.ahead) else {
                drop((place, hold));
                let Source::Pending(_, rx) = std::mem::replace(&mut self.source, Source::Taken) else {
                    unreachable_source()
                };
                match rx.await {
                    Ok(swept) => return swept,
                    Err(oneshot::Canceled) => {
                        self.reregister();
                        continue;
                    }
                }
            };
            self.source = Source::Taken; // claimed: nothing left to withdraw
            return fetch_claimed(&reads, &self.object, claim, id, place, hold, rec).await;
        }
    }

    /// Register the range again (the request that took it was dropped).
    fn reregister(&mut self) {
        let (start, end) = self.bounds().unwrap_or_default();
        let (id, rx) = self.reads.coalescer.register(&self.object, start, end);
        self.source = Source::Pending(id, rx);
    }

    /// The inner chunks of this shard that passes want read ahead, with their ranges.
    fn wanted(&self) -> Vec<Wanted> {
        let Some((_, ix)) = &self.shard else { return Vec::new() };
        self.reads
            .ahead
            .wanted_in(&self.object)
            .into_iter()
            .filter_map(|index| match ix.range(index as usize)? {
                ByteRange::Bounded { start, end } => Some(Wanted { index, start, end }),
                ByteRange::Suffix(_) => None,
            })
            .collect()
    }

    fn bounds(&self) -> Option<(u64, u64)> {
        match self.range {
            Some(ByteRange::Bounded { start, end }) => Some((start, end)),
            _ => None,
        }
    }
}

fn unreachable_source() -> ! {
    unreachable!("a coalesced tile read waits as Pending")
}

impl Drop for TileRead {
    fn drop(&mut self) {
        if let Source::Pending(id, _) = &self.source {
            self.reads.coalescer.withdraw(&self.object, *id);
        }
    }
}

/// A tile found read ahead: no request of its own.
fn read_ahead(reads: &ReadPath, rec: &PassRecorder, bytes: Result<Bytes>) -> Delivery {
    rec.with(|r| r.tiles_read_ahead += 1);
    let now = reads.now();
    Delivery { bytes: bytes.map(Some), place: None, hold: None, permitted: now, fetched: now }
}

/// Returns `Pending` once (waking itself at once), so every other future ready now runs first.
/// Written out because `futures` 0.3 has no runtime-agnostic `yield_now`.
pub(crate) fn yield_once() -> impl std::future::Future<Output = ()> {
    let mut yielded = false;
    futures::future::poll_fn(move |cx| {
        if yielded {
            return std::task::Poll::Ready(());
        }
        yielded = true;
        cx.waker().wake_by_ref();
        std::task::Poll::Pending
    })
}

/// A whole object read by a request of its own at the most urgent priority (a shard read
/// whole, `engine::read_whole_shard`).
pub(crate) async fn read_tile_alone(reads: &Arc<ReadPath>, object: &str, rec: &Arc<PassRecorder>) -> Delivery {
    alone(reads, object, None, 0, rec).await
}

/// A read that cannot be coalesced (a whole object, a suffix): one request of its own.
async fn alone(
    reads: &Arc<ReadPath>,
    object: &str,
    range: Option<ByteRange>,
    priority: u64,
    rec: &Arc<PassRecorder>,
) -> Delivery {
    let place = reads.window.enter(priority).await;
    let hold = ReadHold::acquire(reads, rec).await;
    let permitted = reads.now();
    let bytes = reads.fetch(object, range, range_len(range), Some(rec)).await;
    let fetched = reads.now();
    let got = bytes.as_ref().ok().and_then(Option::as_ref).map_or(0, |b| b.len() as u64);
    account(reads, rec, fetched.saturating_sub(permitted), 1, got, got);
    Delivery { bytes, place: kept(reads, place), hold: Some(Arc::new(hold)), permitted, fetched }
}

/// Fetch the claimed ranges in one request and hand each its slice (the ones read ahead to
/// the engine's read-ahead); returns tile `mine`'s.
async fn fetch_claimed(
    reads: &Arc<ReadPath>,
    object: &str,
    claim: Claim,
    mine: u64,
    place: WindowSlot,
    hold: ReadHold,
    rec: &Arc<PassRecorder>,
) -> Delivery {
    let Claim { pending, ahead } = claim;
    let spans = pending.iter().map(|p| (p.start, p.end)).chain(ahead.iter().map(|w| (w.start, w.end)));
    let lo = spans.clone().map(|s| s.0).min().unwrap_or(0);
    let hi = spans.clone().map(|s| s.1).max().unwrap_or(lo);
    let needed = covered_bytes(spans);
    let mut reading = ReadingAhead { reads, object, wanted: ahead };
    let permitted = reads.now();
    let bytes = reads.fetch(object, Some(ByteRange::Bounded { start: lo, end: hi }), hi - lo, Some(rec)).await;
    let fetched = reads.now();
    account(reads, rec, fetched.saturating_sub(permitted), pending.len() + reading.wanted.len(), hi - lo, needed);
    for w in std::mem::take(&mut reading.wanted) {
        let part = slice(&bytes, w.start - lo, w.end - lo, reads, object).and_then(|b| {
            b.ok_or_else(|| Error::Internal(format!("a read-ahead found no object: {}", reads.url(object))))
        });
        reads.ahead.fill(object, w.index, part);
    }
    let (place, hold) = (kept(reads, place), Arc::new(hold));
    let mut own = None;
    for p in pending {
        let delivery = Delivery {
            bytes: slice(&bytes, p.start - lo, p.end - lo, reads, object),
            place: place.clone(),
            hold: Some(Arc::clone(&hold)),
            permitted,
            fetched,
        };
        if p.id == mine {
            own = Some(delivery);
        } else {
            // A tile whose load was dropped meanwhile no longer needs its slice.
            let _ = p.tx.send(delivery);
        }
    }
    own.unwrap_or_else(|| Delivery {
        bytes: Err(Error::Internal(format!("a coalesced read lost its own range of {object}"))),
        place: None,
        hold: None,
        permitted,
        fetched,
    })
}

/// The inner chunks a request is reading ahead, until it fills them. A request dropped first
/// (its pass closed mid-read) abandons them, so no later load waits for bytes that will never
/// come and their budget is given back.
struct ReadingAhead<'a> {
    reads: &'a ReadPath,
    object: &'a str,
    wanted: Vec<Wanted>,
}

impl Drop for ReadingAhead<'_> {
    fn drop(&mut self) {
        for w in &self.wanted {
            self.reads.ahead.abandon(self.object, w.index);
        }
    }
}

/// A request's window place once its bytes arrived: given back now for a remote store,
/// kept until the decodes start for a local one (`window.rs`).
fn kept(reads: &ReadPath, place: WindowSlot) -> Option<Arc<WindowSlot>> {
    (!reads.window.frees_on_arrival()).then(|| Arc::new(place))
}

/// One tile's part of a coalesced answer. The storage contract makes a bounded read exact,
/// so a short answer is a bug of the storage adapter, reported as such.
fn slice(bytes: &Result<Option<Bytes>>, from: u64, to: u64, reads: &ReadPath, object: &str) -> Result<Option<Bytes>> {
    match bytes {
        Ok(Some(b)) if to as usize <= b.len() => Ok(Some(b.slice(from as usize..to as usize))),
        Ok(Some(b)) => Err(Error::Internal(format!(
            "a coalesced read of {} bytes is shorter than the {to} it asked for: {}",
            b.len(),
            reads.url(object)
        ))),
        Ok(None) => Ok(None),
        Err(e) => Err(e.clone()),
    }
}

/// Bytes the claimed ranges cover (overlaps once).
fn covered_bytes(spans: impl Iterator<Item = (u64, u64)>) -> u64 {
    let mut spans: Vec<(u64, u64)> = spans.collect();
    spans.sort_unstable();
    let (mut total, mut reach) = (0u64, 0u64);
    for (s, e) in spans {
        let s = s.max(reach);
        if e > s {
            total += e - s;
            reach = e;
        }
    }
    total
}

fn range_len(range: Option<ByteRange>) -> u64 {
    match range {
        Some(ByteRange::Bounded { start, end }) => end.saturating_sub(start),
        Some(ByteRange::Suffix(n)) => n,
        None => 0,
    }
}

/// One request's figures: the window's latency measurement and the pass's counters.
fn account(reads: &ReadPath, rec: &PassRecorder, took: Duration, tiles: usize, fetched: u64, needed: u64) {
    reads.window.read_took(took, tiles, fetched, reads.now());
    rec.with(|r| {
        r.times.fetch_wait_s += took.as_secs_f64();
        r.storage_reads += 1;
        r.tiles_read += tiles as u64;
        r.bytes_fetched += fetched;
        r.gap_bytes += fetched.saturating_sub(needed);
    });
}

#[cfg(test)]
mod tests {
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::{Claim, Coalescer, Wanted};
    use crate::ahead::ReadAhead;

    fn claim(c: &Coalescer, object: &str, id: u64) -> Option<Claim> {
        c.claim(object, id, &[], &ReadAhead::new(0))
    }

    fn ids(claimed: Option<Claim>) -> Vec<u64> {
        let mut v: Vec<u64> = claimed.expect("claimed").pending.iter().map(|p| p.id).collect();
        v.sort_unstable();
        v
    }

    #[test]
    fn a_claim_takes_neighbours_within_the_gap_and_the_size_cap_and_leaves_the_rest() {
        let c = Coalescer::new(10, 100);
        let a = c.register("s", 0, 20).0;
        let b = c.register("s", 25, 40).0; // 5 bytes after a
        let far = c.register("s", 60, 70).0; // 20 after b: beyond the gap
        let other = c.register("t", 40, 50).0; // another object
        assert_eq!(ids(claim(&c, "s", b)), [a, b]);
        assert!(claim(&c, "s", a).is_none(), "a was taken by b's request");
        assert_eq!(ids(claim(&c, "s", far)), [far]);
        assert_eq!(ids(claim(&c, "t", other)), [other]);
        assert!(c.lock().is_empty());
    }

    #[test]
    fn the_size_cap_stops_a_run_of_adjacent_ranges() {
        let c = Coalescer::new(0, 30);
        let r: Vec<u64> = (0..5).map(|i| c.register("s", i * 10, i * 10 + 10).0).collect();
        assert_eq!(ids(claim(&c, "s", r[0])), [r[0], r[1], r[2]], "30 bytes at most");
        assert_eq!(ids(claim(&c, "s", r[4])), [r[3], r[4]], "the rest, growing to the left");
    }

    #[test]
    fn a_withdrawn_range_is_never_claimed() {
        let c = Coalescer::new(100, 1000);
        let a = c.register("s", 0, 10).0;
        let b = c.register("s", 10, 20).0;
        c.withdraw("s", b);
        assert_eq!(ids(claim(&c, "s", a)), [a]);
    }

    #[test]
    fn overlapping_ranges_count_their_bytes_once() {
        assert_eq!(super::covered_bytes([(0, 10), (5, 15), (30, 40)].into_iter()), 25);
    }

    /// Morton-ordered inner chunks: the pending ones (0..10, 20..30) and a wanted one between
    /// them (10..20) go in one request when read-ahead has room for the wanted one; without
    /// room, the wanted one is left (and the request spans it as a gap only within the gap).
    #[test]
    fn wanted_ranges_between_pending_ones_are_read_ahead_within_the_budget() {
        let wanted = [Wanted { index: 7, start: 10, end: 20 }, Wanted { index: 9, start: 40, end: 50 }];
        let c = Coalescer::new(0, 1000);
        let a = c.register("s", 0, 10).0;
        let b = c.register("s", 20, 30).0;
        let ahead = ReadAhead::new(15);
        ahead.want("s", [7, 9]);
        let got = c.claim("s", a, &wanted, &ahead).expect("claimed");
        let mut pend: Vec<u64> = got.pending.iter().map(|p| p.id).collect();
        pend.sort_unstable();
        assert_eq!(
            (pend, got.ahead),
            (vec![a, b], vec![wanted[0]]),
            "index 9 is 10 bytes past the end: no gap allowed"
        );
        let c = Coalescer::new(0, 1000);
        let a = c.register("s", 0, 10).0;
        let _b = c.register("s", 20, 30);
        let full = ReadAhead::new(5);
        full.want("s", [7]);
        let got = c.claim("s", a, &wanted[..1], &full).expect("claimed");
        assert_eq!(
            (got.pending.len(), got.ahead.len()),
            (1, 0),
            "no room: the wanted range and what lies past it stay"
        );
    }
}
