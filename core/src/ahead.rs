//! Read-ahead within a shard: inner chunks a pass will need soon, read by a request that was
//! going to their shard anyway, and held (stored bytes) until their chunk's load asks.
//!
//! zarr-python writes a shard's inner chunks in Morton order, so the inner chunks of one
//! sample chunk are interleaved with those of its neighbours on the sample axis: read alone,
//! a sample chunk's 64 inner chunks are 64 ranges of a shard. A pass needs the neighbours too,
//! only later in the epoch. So the driver marks the inner chunks of the chunks it will admit
//! next as *wanted*; a request coalescing ranges of a shard also takes the wanted ranges
//! within its reach (the gap and size rules of `reads.rs`), and their bytes wait here, within
//! a byte budget, until their chunk's load takes them: no second request, and no byte read
//! twice. Wanted entries are hints: a tile no pass wants any more drops its held bytes.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use bytes::Bytes;
use futures::channel::oneshot;

use crate::error::Result;

/// Held bytes of one inner chunk, or the request bringing them.
enum Slot {
    /// A request is reading it; its bytes go to these waiters too.
    Reading(Vec<oneshot::Sender<Result<Bytes>>>),
    /// Read, waiting for its chunk's load.
    Ready(Bytes),
}

/// What a load finds for one of its inner chunks.
pub(crate) enum Found {
    /// Its bytes, read ahead.
    Held(Bytes),
    /// A request is reading it: its bytes arrive here.
    Coming(oneshot::Receiver<Result<Bytes>>),
}

/// Wanted inner chunks and held bytes of one engine, by shard object.
#[derive(Default)]
pub(crate) struct ReadAhead {
    state: Mutex<AheadState>,
    budget: u64,
}

#[derive(Default)]
struct AheadState {
    /// Per shard object: inner chunk index → live passes that will want it.
    wanted: HashMap<String, HashMap<u32, u32>>,
    /// Per shard object: inner chunk index → its bytes or the request bringing them.
    held: HashMap<String, HashMap<u32, (Slot, u64)>>,
    /// Bytes reserved by reading or held slots.
    held_bytes: u64,
    /// The most bytes held at once.
    peak: u64,
}

impl ReadAhead {
    /// Hold at most `budget` bytes read ahead (0 turns read-ahead off).
    pub(crate) fn new(budget: u64) -> Self {
        Self { budget, ..Self::default() }
    }

    /// True when nothing is ever read ahead (a budget of 0).
    pub(crate) fn is_off(&self) -> bool {
        self.budget == 0
    }

    /// The most bytes read ahead may hold.
    pub(crate) fn budget(&self) -> u64 {
        self.budget
    }

    /// The most bytes held at once so far.
    pub(crate) fn peak(&self) -> u64 {
        self.lock().peak
    }

    /// A pass will want these inner chunks of `object` (after what it admitted so far).
    pub(crate) fn want(&self, object: &str, indices: impl IntoIterator<Item = u32>) {
        if self.budget == 0 {
            return;
        }
        let mut st = self.lock();
        let wanted = st.wanted.entry(object.to_string()).or_default();
        for i in indices {
            *wanted.entry(i).or_default() += 1;
        }
    }

    /// A pass that ended will not want these any more; held bytes no pass wants are dropped.
    pub(crate) fn unwant(&self, object: &str, indices: impl IntoIterator<Item = u32>) {
        let mut st = self.lock();
        let mut dropped = Vec::new();
        if let Some(wanted) = st.wanted.get_mut(object) {
            for i in indices {
                if let Some(n) = wanted.get_mut(&i) {
                    *n -= 1;
                    if *n == 0 {
                        wanted.remove(&i);
                        dropped.push(i);
                    }
                }
            }
            if wanted.is_empty() {
                st.wanted.remove(object);
            }
        }
        for i in dropped {
            st.release(object, i);
        }
    }

    /// A load asks for inner chunk `index` of `object`: its held bytes, or the request
    /// bringing them; `None` when neither (the load reads it). Either way it is no longer
    /// wanted: it is being read now.
    pub(crate) fn take(&self, object: &str, index: u32) -> Option<Found> {
        let mut st = self.lock();
        if let Some(w) = st.wanted.get_mut(object) {
            w.remove(&index);
            if w.is_empty() {
                st.wanted.remove(object);
            }
        }
        let slots = st.held.get_mut(object)?;
        let found = match slots.get_mut(&index)? {
            (Slot::Reading(waiters), _) => {
                let (tx, rx) = oneshot::channel();
                waiters.push(tx);
                return Some(Found::Coming(rx));
            }
            (Slot::Ready(b), _) => Found::Held(b.clone()),
        };
        st.release(object, index);
        Some(found)
    }

    /// The wanted inner chunks of `object` that nothing holds or reads yet.
    pub(crate) fn wanted_in(&self, object: &str) -> Vec<u32> {
        let st = self.lock();
        let held = st.held.get(object);
        st.wanted
            .get(object)
            .map(|w| w.keys().copied().filter(|i| held.is_none_or(|h| !h.contains_key(i))).collect())
            .unwrap_or_default()
    }

    /// A request will read inner chunk `index` of `object` (`bytes` long) ahead: true when
    /// the budget has room (and it is reserved), false when it has not.
    pub(crate) fn begin(&self, object: &str, index: u32, bytes: u64) -> bool {
        let mut st = self.lock();
        if st.held_bytes.saturating_add(bytes) > self.budget {
            return false;
        }
        st.held_bytes += bytes;
        st.peak = st.peak.max(st.held_bytes);
        st.held.entry(object.to_string()).or_default().insert(index, (Slot::Reading(Vec::new()), bytes));
        true
    }

    /// The request of [`Self::begin`] answered: loads waiting for the bytes get them, and
    /// they are held for a later one if a pass still wants them (and dropped if not, or on
    /// an error).
    pub(crate) fn fill(&self, object: &str, index: u32, bytes: Result<Bytes>) {
        let mut st = self.lock();
        let still_wanted = st.wanted.get(object).is_some_and(|w| w.contains_key(&index));
        let Some((slot, size)) = st.held.get_mut(object).and_then(|slots| slots.remove(&index)) else { return };
        let waiters = match slot {
            Slot::Reading(w) => w,
            Slot::Ready(_) => Vec::new(),
        };
        let served = !waiters.is_empty();
        for w in waiters {
            let _ = w.send(bytes.clone());
        }
        match bytes {
            Ok(b) if still_wanted && !served => {
                st.held.entry(object.to_string()).or_default().insert(index, (Slot::Ready(b), size));
            }
            _ => {
                st.held_bytes -= size;
                st.drop_if_empty(object);
            }
        }
    }

    /// The request of [`Self::begin`] was dropped before it answered (its pass closed): the
    /// reservation goes back to the budget, and the loads waiting for the bytes see their
    /// sender gone and read the chunk themselves. A no-op once it was filled.
    pub(crate) fn abandon(&self, object: &str, index: u32) {
        let mut st = self.lock();
        let Some(slots) = st.held.get_mut(object) else { return };
        if let Some((Slot::Reading(_), bytes)) = slots.get(&index) {
            let bytes = *bytes;
            slots.remove(&index); // drops the waiters' senders
            st.held_bytes -= bytes;
            st.drop_if_empty(object);
        }
    }

    fn lock(&self) -> MutexGuard<'_, AheadState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl AheadState {
    /// Drop a held slot and give its bytes back to the budget. A slot still being read is
    /// left to its request, whose `fill` answers its waiters and keeps nothing no pass wants.
    fn release(&mut self, object: &str, index: u32) {
        let Some(slots) = self.held.get_mut(object) else { return };
        if let Some((Slot::Ready(_), bytes)) = slots.get(&index) {
            self.held_bytes -= *bytes;
            slots.remove(&index);
        }
        self.drop_if_empty(object);
    }

    fn drop_if_empty(&mut self, object: &str) {
        if self.held.get(object).is_some_and(HashMap::is_empty) {
            self.held.remove(object);
        }
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use futures::FutureExt;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::{Found, ReadAhead};

    fn held(f: Option<Found>) -> Option<Bytes> {
        match f {
            Some(Found::Held(b)) => Some(b),
            _ => None,
        }
    }

    #[test]
    fn wanted_ranges_read_ahead_are_held_for_their_load_once_and_within_the_budget() {
        let a = ReadAhead::new(10);
        a.want("s", [1, 2, 3]);
        assert_eq!(
            {
                let mut w = a.wanted_in("s");
                w.sort_unstable();
                w
            },
            [1, 2, 3]
        );
        assert!(a.begin("s", 1, 6));
        assert!(!a.begin("s", 2, 6), "6 + 6 is over the budget of 10");
        assert!(a.begin("s", 3, 4));
        assert_eq!(a.wanted_in("s"), [2], "1 and 3 are being read");
        a.fill("s", 1, Ok(Bytes::from_static(b"abcdef")));
        assert_eq!(held(a.take("s", 1)).as_deref(), Some(&b"abcdef"[..]));
        assert!(a.take("s", 1).is_none(), "taken once");
        assert!(a.begin("s", 2, 6), "taking 1 gave its 6 bytes back");
    }

    #[test]
    fn a_load_that_asks_while_the_bytes_are_coming_gets_them_from_the_request() {
        let a = ReadAhead::new(10);
        a.want("s", [7]);
        assert!(a.begin("s", 7, 3));
        let Some(Found::Coming(rx)) = a.take("s", 7) else { panic!("the request is reading it") };
        a.fill("s", 7, Ok(Bytes::from_static(b"xyz")));
        assert_eq!(rx.now_or_never().expect("answered").expect("sent").expect("bytes").as_ref(), b"xyz");
        assert_eq!(a.lock().held_bytes, 0, "served, so not held as well");
    }

    #[test]
    fn bytes_no_pass_wants_any_more_are_dropped() {
        let a = ReadAhead::new(10);
        a.want("s", [1]);
        assert!(a.begin("s", 1, 5));
        a.fill("s", 1, Ok(Bytes::from_static(b"hello")));
        a.unwant("s", [1]);
        assert!(a.take("s", 1).is_none());
        assert_eq!(a.lock().held_bytes, 0);
        a.want("s", [2]);
        assert!(a.begin("s", 2, 5));
        a.unwant("s", [2]);
        a.fill("s", 2, Ok(Bytes::from_static(b"late!")));
        assert_eq!(a.lock().held_bytes, 0, "answered after its pass ended: not kept");
        assert_eq!(a.peak(), 5);
    }

    #[test]
    fn a_request_dropped_before_it_answered_lets_its_waiters_go_and_gives_its_budget_back() {
        let a = ReadAhead::new(10);
        a.want("s", [4, 5]);
        assert!(a.begin("s", 4, 6));
        let Some(Found::Coming(rx)) = a.take("s", 4) else { panic!("the request is reading it") };
        a.abandon("s", 4);
        assert!(rx.now_or_never().expect("answered").is_err(), "the waiter sees the request gone");
        assert!(a.begin("s", 5, 10), "all 10 bytes free again");
        a.fill("s", 5, Ok(Bytes::from_static(b"0123456789")));
        a.abandon("s", 5);
        assert!(held(a.take("s", 5)).is_some(), "abandoning a filled slot changes nothing");
    }
}
