//! The chunk pool: residency tier and cross-epoch cache in one, under one byte budget.
//!
//! Rules that make the reference implementation's pool bugs impossible here:
//! - **Per-pass accounts.** Each live pass (iteration) holds a *reservation* of the budget,
//!   made when it starts, and its references are counted in its own account. One pass can
//!   neither release nor satisfy another's references (#34, #35), and a pass never waits on
//!   another pass for room: the reservations sum to at most the budget, so evicting the
//!   unreferenced cache always makes room (see [`Pool::admit`]).
//! - **Data is immutable and shared by `Arc`.** A gather holds `Arc`s to the chunks it
//!   copies from, so eviction cannot pull data out from under it; a failed load is never
//!   published as ready (#33).
//! - **Loads are shared futures.** Whoever needs a chunk that is loading awaits the same
//!   future, and any holder can drive it; when the last holder lets go, the slot and its
//!   load are dropped together, so an abandoned pass strands nothing.
//! - **One lock, never held across an await,** and no user code runs under it.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;
use futures::future::Shared;

use crate::array::{DType, NdArray};
use crate::error::{Error, Result};
use crate::plan::ChunkKey;
use crate::runtime::BoxFuture;

/// A resident chunk: sample-first, clipped to its real rows, after chunk transforms.
#[derive(Debug)]
pub(crate) struct Chunk {
    /// `(rows, *inner)` elements.
    pub data: ChunkData,
    /// Some tiles failed and were filled (NaN or the fill value) under `on_bad_chunk = "nan"`;
    /// such a chunk is served once and never cached.
    pub bad: bool,
    /// When its load got its last `max_inflight` permit, finished fetching, and was ready.
    pub times: LoadTimes,
    /// Where its tiles lie when it holds only some (`PassPlan::tiles`; `data` is then those
    /// tiles' regions one after another, flat): checked against each use it serves, so a
    /// fingerprint collision in `ChunkKey::part` is an error, never a patch cut from tiles
    /// that were not read.
    pub layout: Option<Arc<crate::assemble::TileLayout>>,
}

/// Where a resident chunk's bytes live.
#[derive(Debug)]
pub(crate) enum ChunkData {
    /// On the heap; the buffer goes back to the recycler when the chunk is dropped.
    Heap(NdArray),
    /// Held by the disk tier (a memory mapping), read in place.
    Tier {
        /// Element type.
        dtype: DType,
        /// `(rows, *inner)`.
        shape: Vec<usize>,
        /// `product(shape) * dtype.size()` bytes.
        bytes: Bytes,
    },
}

impl ChunkData {
    /// The elements, row-major, native endianness.
    pub(crate) fn bytes(&self) -> &[u8] {
        match self {
            Self::Heap(a) => &a.data,
            Self::Tier { bytes, .. } => bytes,
        }
    }

    /// `(rows, *inner)`.
    pub(crate) fn shape(&self) -> &[usize] {
        match self {
            Self::Heap(a) => &a.shape,
            Self::Tier { shape, .. } => shape,
        }
    }

    /// Element type.
    pub(crate) fn dtype(&self) -> DType {
        match self {
            Self::Heap(a) => a.dtype,
            Self::Tier { dtype, .. } => *dtype,
        }
    }
}

/// Executor-clock timestamps of one load (for critical-path attribution).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct LoadTimes {
    /// Latest permit grant among its tiles.
    pub permitted: std::time::Duration,
    /// Latest fetch completion among its tiles.
    pub fetched: std::time::Duration,
    /// Decoded, assembled and transformed.
    pub ready: std::time::Duration,
}

/// What a load resolves to. `Error` is `Clone`, so every waiter gets the same error.
pub(crate) type LoadResult = std::result::Result<Arc<Chunk>, Error>;
/// A load any holder can await and drive.
pub(crate) type SharedLoad = Shared<BoxFuture<'static, LoadResult>>;

/// Identifies one pass's account.
pub(crate) type PassId = u64;

enum SlotState {
    Loading(SharedLoad),
    Ready(Arc<Chunk>),
}

struct Slot {
    state: SlotState,
    bytes: u64,
    /// Passes holding at least one reference.
    holders: u32,
    /// Position in the LRU when unreferenced and ready.
    lru_tick: Option<u64>,
    /// Distinguishes this slot from an earlier one under the same key.
    generation: u64,
}

#[derive(Default)]
struct PassAccount {
    reservation: u64,
    charged: u64,
    /// Key → (reference count, slot generation).
    refs: HashMap<ChunkKey, (u32, u64)>,
}

/// Counters for reports.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct PoolCounters {
    /// Admissions served from a resident chunk.
    pub hits: u64,
    /// Admissions that started a load.
    pub misses: u64,
    /// Chunks evicted for room.
    pub evictions: u64,
    /// Highest resident byte count.
    pub resident_peak_bytes: u64,
    /// Highest resident chunk count.
    pub resident_peak_chunks: u64,
}

struct State {
    explicit_budget: Option<u64>,
    auto_min: u64,
    resident: u64,
    slots: HashMap<ChunkKey, Slot>,
    lru: BTreeMap<u64, ChunkKey>,
    tick: u64,
    passes: HashMap<PassId, PassAccount>,
    next_pass: PassId,
    next_generation: u64,
    counters: PoolCounters,
}

impl State {
    fn budget(&self) -> u64 {
        self.explicit_budget.unwrap_or_else(|| self.auto_min.max(self.passes.values().map(|p| p.reservation).sum()))
    }

    fn remove_slot(&mut self, key: ChunkKey) {
        if let Some(slot) = self.slots.remove(&key) {
            self.resident -= slot.bytes;
            if let Some(t) = slot.lru_tick {
                self.lru.remove(&t);
            }
        }
    }

    fn touch_lru(&mut self, key: ChunkKey) {
        let tick = self.tick;
        self.tick += 1;
        if let Some(slot) = self.slots.get_mut(&key) {
            if let Some(old) = slot.lru_tick.replace(tick) {
                self.lru.remove(&old);
            }
            self.lru.insert(tick, key);
        }
    }
}

/// What [`Pool::admit`] decided.
pub(crate) enum Admit {
    /// Resident and ready: a hit.
    Ready(Arc<Chunk>),
    /// Loading (started now, or by another pass): await it, then [`Pool::publish`].
    Load {
        /// The shared load.
        load: SharedLoad,
        /// The slot generation to publish under.
        generation: u64,
        /// True when this call started it (a miss).
        started: bool,
    },
    /// This pass's reservation is full: release something first.
    NoRoom,
}

/// The byte-budgeted pool shared by every view of a dataset.
pub(crate) struct Pool {
    state: Mutex<State>,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.lock();
        f.debug_struct("Pool")
            .field("budget", &s.budget())
            .field("resident", &s.resident)
            .field("slots", &s.slots.len())
            .field("passes", &s.passes.len())
            .finish()
    }
}

impl Pool {
    /// A pool with an explicit budget, or an automatic one that is at least `auto_min` and
    /// grows to the sum of live reservations.
    pub(crate) fn new(explicit_budget: Option<u64>, auto_min: u64) -> Self {
        Self {
            state: Mutex::new(State {
                explicit_budget,
                auto_min,
                resident: 0,
                slots: HashMap::new(),
                lru: BTreeMap::new(),
                tick: 0,
                passes: HashMap::new(),
                next_pass: 1,
                next_generation: 1,
                counters: PoolCounters::default(),
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A poisoned lock means a panic elsewhere; the state is still consistent because no
        // code path panics between two updates, so keep serving.
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The budget in force now.
    pub(crate) fn budget(&self) -> u64 {
        self.lock().budget()
    }

    /// Resident bytes now.
    pub(crate) fn resident_bytes(&self) -> u64 {
        self.lock().resident
    }

    /// Live passes.
    pub(crate) fn live_passes(&self) -> usize {
        self.lock().passes.len()
    }

    /// Counters so far.
    pub(crate) fn counters(&self) -> PoolCounters {
        self.lock().counters
    }

    /// Open an account holding `reservation` bytes for one pass.
    ///
    /// # Errors
    /// [`Error::Config`] when an explicit budget cannot hold this pass next to the live
    /// ones; the message names the number to pass.
    pub(crate) fn open_pass(&self, reservation: u64) -> Result<PassId> {
        let mut s = self.lock();
        let live: u64 = s.passes.values().map(|p| p.reservation).sum();
        if let Some(budget) = s.explicit_budget
            && live + reservation > budget
        {
            let n = s.passes.len() + 1;
            return Err(Error::Config(format!(
                "cache_budget_bytes={budget} cannot hold {n} concurrent iterations: this one needs its residency \
                     floor of {reservation} bytes and {} live iteration(s) hold {live}. Pass cache_budget_bytes >= {} \
                     (for example when zipping ds.train with ds.val), or finish or close the other iteration first",
                n - 1,
                live + reservation
            )));
        }
        let id = s.next_pass;
        s.next_pass += 1;
        s.passes.insert(id, PassAccount { reservation, ..PassAccount::default() });
        Ok(id)
    }

    /// Release everything a pass holds and close its account. Idempotent.
    pub(crate) fn close_pass(&self, pass: PassId) {
        let mut s = self.lock();
        let Some(acct) = s.passes.remove(&pass) else { return };
        for (key, (_, generation)) in acct.refs {
            Self::drop_holder(&mut s, key, generation);
        }
    }

    fn drop_holder(s: &mut State, key: ChunkKey, generation: u64) {
        let Some(slot) = s.slots.get_mut(&key) else { return };
        if slot.generation != generation {
            return;
        }
        slot.holders -= 1;
        if slot.holders > 0 {
            return;
        }
        match &slot.state {
            SlotState::Ready(chunk) if !chunk.bad => s.touch_lru(key),
            // A bad chunk is never cached; an unheld load is abandoned with its slot.
            _ => s.remove_slot(key),
        }
    }

    /// Reference `key` for `pass`: a hit, a load to await (joined or started with `start`),
    /// or `NoRoom` when the pass's own reservation is full.
    ///
    /// Room for a new slot is made by evicting unreferenced ready chunks in LRU order. That
    /// always suffices: resident bytes held by passes are at most the sum of their charges,
    /// each pass's charge plus this admission fits its reservation, and reservations sum to at
    /// most the budget. If it ever did not, this returns [`Error::Stall`] instead of waiting.
    ///
    /// # Errors
    /// [`Error::Stall`] on a broken invariant; [`Error::Cancelled`] for a closed pass.
    pub(crate) fn admit(
        &self,
        pass: PassId,
        key: ChunkKey,
        bytes: u64,
        start: impl FnOnce() -> BoxFuture<'static, LoadResult>,
    ) -> Result<Admit> {
        let mut guard = self.lock();
        let s = &mut *guard;
        let Some(acct) = s.passes.get_mut(&pass) else {
            return Err(Error::Cancelled("the iteration was closed".into()));
        };
        if let Some((count, generation)) = acct.refs.get_mut(&key) {
            let generation = *generation;
            match s.slots.get(&key) {
                Some(slot) if slot.generation == generation => {
                    *count += 1;
                    return Ok(match &slot.state {
                        SlotState::Ready(c) => Admit::Ready(c.clone()),
                        SlotState::Loading(l) => Admit::Load { load: l.clone(), generation, started: false },
                    });
                }
                // Our earlier reference's slot failed and was dropped: forget it and load afresh.
                _ => {
                    acct.refs.remove(&key);
                    acct.charged -= bytes;
                }
            }
        }
        let acct = s.passes.get_mut(&pass).expect("checked above");
        if acct.charged + bytes > acct.reservation {
            return Ok(Admit::NoRoom);
        }
        if let Some(slot) = s.slots.get_mut(&key) {
            slot.holders += 1;
            if let Some(t) = slot.lru_tick.take() {
                s.lru.remove(&t);
            }
            let generation = slot.generation;
            let out = match &slot.state {
                SlotState::Ready(c) => {
                    s.counters.hits += 1;
                    Admit::Ready(c.clone())
                }
                SlotState::Loading(l) => Admit::Load { load: l.clone(), generation, started: false },
            };
            acct.charged += bytes;
            acct.refs.insert(key, (1, generation));
            return Ok(out);
        }
        let budget = s.budget();
        while s.resident + bytes > budget {
            let Some((_, victim)) = s.lru.pop_first() else {
                return Err(Error::Stall(format!(
                    "residency budget exhausted: cannot admit chunk {} of array #{} ({bytes} bytes): {} of {budget} \
                     bytes are resident and all are referenced by {} live iteration(s). This is a bug in the \
                     residency arithmetic; please report it. Workaround: raise cache_budget_bytes",
                    key.chunk,
                    key.path,
                    s.resident,
                    s.passes.len()
                )));
            };
            if let Some(slot) = s.slots.remove(&victim) {
                s.resident -= slot.bytes;
                s.counters.evictions += 1;
            }
        }
        let generation = s.next_generation;
        s.next_generation += 1;
        let load = futures::FutureExt::shared(start());
        s.slots.insert(
            key,
            Slot { state: SlotState::Loading(load.clone()), bytes, holders: 1, lru_tick: None, generation },
        );
        s.resident += bytes;
        s.counters.misses += 1;
        s.counters.resident_peak_bytes = s.counters.resident_peak_bytes.max(s.resident);
        s.counters.resident_peak_chunks = s.counters.resident_peak_chunks.max(s.slots.len() as u64);
        let acct = s.passes.get_mut(&pass).expect("checked above");
        acct.charged += bytes;
        acct.refs.insert(key, (1, generation));
        Ok(Admit::Load { load, generation, started: true })
    }

    /// Record how a load ended. A success becomes a ready slot (the cache); a failure drops
    /// the slot so the next epoch loads it again. Idempotent across the load's holders.
    pub(crate) fn publish(&self, key: ChunkKey, generation: u64, result: &LoadResult) {
        let mut s = self.lock();
        let Some(slot) = s.slots.get_mut(&key) else { return };
        if slot.generation != generation || matches!(slot.state, SlotState::Ready(_)) {
            return;
        }
        match result {
            Ok(chunk) => slot.state = SlotState::Ready(chunk.clone()),
            Err(_) => {
                // Holders keep their references (and see the error); the slot goes so that
                // nobody is ever served a failed chunk as ready.
                s.remove_slot(key);
            }
        }
    }

    /// Drop one of `pass`'s references to `key`, uncharging the pass at its last reference.
    pub(crate) fn release(&self, pass: PassId, key: ChunkKey, bytes: u64) {
        let mut s = self.lock();
        let Some(acct) = s.passes.get_mut(&pass) else { return };
        let Some((count, generation)) = acct.refs.get_mut(&key) else { return };
        *count -= 1;
        if *count > 0 {
            return;
        }
        let generation = *generation;
        acct.refs.remove(&key);
        acct.charged -= bytes;
        Self::drop_holder(&mut s, key, generation);
    }

    /// Bytes a pass has charged (for tests and reports).
    pub(crate) fn charged(&self, pass: PassId) -> u64 {
        self.lock().passes.get(&pass).map_or(0, |a| a.charged)
    }

    /// Bytes reserved for a pass (its residency floor), for error messages.
    pub(crate) fn reservation(&self, pass: PassId) -> u64 {
        self.lock().passes.get(&pass).map_or(0, |a| a.reservation)
    }
}
