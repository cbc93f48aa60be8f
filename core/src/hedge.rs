//! Hedged requests against a store's slow tail.
//!
//! A cloud store answers most requests in about the same time and a few (one in a hundred,
//! one in twenty) much later; one such read holds up every batch that needs its chunk, and
//! batches leave in order. A request still unanswered after `multiple` times the running
//! `quantile` of recent latencies gets a second, identical request; the first answer wins
//! and the other is dropped, which cancels it. Hedges are capped at `max_share` of the
//! requests made, so a store that is slow everywhere is not asked twice for everything.
//!
//! Latencies are compared at size: a sample of a smaller request is scaled up by the size
//! ratio before it takes part in a larger request's quantile (never down), so a threshold
//! errs late, never early. The running window keeps the last [`SAMPLES`] answers.

use std::collections::VecDeque;
use std::future::Future;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use futures::future::{Either, select};

use crate::runtime::{Executor, StorageError};
use crate::stats::PassRecorder;

/// Answers the running quantile is taken over.
const SAMPLES: usize = 64;

/// When a slow request gets a second one (see the module doc).
#[derive(Debug, Clone, PartialEq)]
pub struct HedgePolicy {
    /// The running latency quantile a request is compared with (0.95: the 95th percentile).
    pub quantile: f64,
    /// A request unanswered after `multiple` × that quantile is hedged.
    pub multiple: f64,
    /// Hedges are at most this share of the requests made (and at least one is allowed).
    pub max_share: f64,
    /// Answers seen before any request is hedged: a quantile of a few is noise.
    pub min_samples: usize,
}

impl Default for HedgePolicy {
    fn default() -> Self {
        Self { quantile: 0.95, multiple: 2.0, max_share: 0.05, min_samples: 8 }
    }
}

impl HedgePolicy {
    /// The policy's bounds: a quantile in (0, 1], a multiple of at least 1, a share in [0, 1].
    ///
    /// # Errors
    /// [`crate::Error::InvalidOption`] naming the field (`read_policy.hedge.quantile`, ...).
    pub fn check(&self) -> crate::error::Result<()> {
        let bad = [
            (!(self.quantile > 0.0 && self.quantile <= 1.0), "quantile", "in (0, 1]", self.quantile),
            (!(self.multiple >= 1.0 && self.multiple.is_finite()), "multiple", "at least 1", self.multiple),
            (!(0.0..=1.0).contains(&self.max_share), "max_share", "in [0, 1]", self.max_share),
        ];
        match bad.into_iter().find(|b| b.0) {
            Some((_, key, bound, got)) => Err(crate::error::Error::option(
                format!("read_policy.hedge.{key}"),
                format!("`read_policy.hedge.{key}` must be {bound}, got {got}; or turn hedging off"),
            )),
            None => Ok(()),
        }
    }
}

/// Recent latencies and the hedge budget of one engine.
#[derive(Debug)]
pub(crate) struct Hedger {
    policy: HedgePolicy,
    state: Mutex<HedgeState>,
}

#[derive(Debug, Default)]
struct HedgeState {
    /// (seconds, bytes or 0 when unknown) of the last answers.
    recent: VecDeque<(f64, u64)>,
    requests: u64,
    /// Second requests sent (the cap counts them).
    hedged: u64,
}

impl Hedger {
    pub(crate) fn new(policy: HedgePolicy) -> Self {
        Self { policy, state: Mutex::default() }
    }

    /// How long a request of `bytes` may take before it is hedged; `None` before enough
    /// answers are known, or when the threshold is past what a `Duration` holds (a huge
    /// `multiple`: never hedged).
    fn threshold(&self, bytes: u64) -> Option<Duration> {
        let st = self.lock();
        if st.recent.len() < self.policy.min_samples.max(1) {
            return None;
        }
        let mut scaled: Vec<f64> = st
            .recent
            .iter()
            .map(|&(secs, size)| if size > 0 && bytes > size { secs * bytes as f64 / size as f64 } else { secs })
            .collect();
        scaled.sort_by(f64::total_cmp);
        let at = ((scaled.len() - 1) as f64 * self.policy.quantile.clamp(0.0, 1.0)).round() as usize;
        Duration::try_from_secs_f64(scaled[at] * self.policy.multiple.max(1.0)).ok()
    }

    fn record(&self, took: Duration, bytes: u64) {
        let mut st = self.lock();
        if st.recent.len() == SAMPLES {
            st.recent.pop_front();
        }
        st.recent.push_back((took.as_secs_f64(), bytes));
    }

    /// Count a request.
    fn start_request(&self) {
        self.lock().requests += 1;
    }

    /// True when one more hedge is within the cap (and counts it as sent).
    fn try_hedge(&self) -> bool {
        let mut st = self.lock();
        let allowed = ((st.requests as f64 * self.policy.max_share).floor() as u64).max(1);
        if st.hedged >= allowed {
            return false;
        }
        st.hedged += 1;
        true
    }

    fn lock(&self) -> MutexGuard<'_, HedgeState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// One attempt of a storage request of `bytes` (0: unknown), hedged under `hedger` when it
/// is slow; `request` makes one request each time it is called. Hedges are counted in the
/// pass's `rec`, when the request has one.
pub(crate) async fn hedged<T, F, Fut>(
    executor: &dyn Executor,
    hedger: Option<&Hedger>,
    rec: Option<&PassRecorder>,
    bytes: u64,
    request: F,
) -> Result<T, StorageError>
where
    F: Fn() -> Fut,
    Fut: Future<Output = Result<T, StorageError>>,
{
    let Some(hedger) = hedger else { return request().await };
    hedger.start_request();
    let started = executor.now();
    let first = std::pin::pin!(request());
    let Some(wait) = hedger.threshold(bytes) else {
        return timed(executor, hedger, bytes, started, first.await);
    };
    let first = match select(first, executor.sleep(wait)).await {
        Either::Left((answer, _)) => return timed(executor, hedger, bytes, started, answer),
        Either::Right(((), first)) => first,
    };
    if !hedger.try_hedge() {
        return timed(executor, hedger, bytes, started, first.await);
    }
    if let Some(rec) = rec {
        rec.with(|r| r.hedged_reads += 1);
    }
    let hedge_started = executor.now();
    match select(first, std::pin::pin!(request())).await {
        Either::Left((answer, _)) => timed(executor, hedger, bytes, started, answer),
        Either::Right((answer, _)) => {
            if let (Some(rec), true) = (rec, answer.is_ok()) {
                rec.with(|r| r.hedge_wins += 1);
            }
            timed(executor, hedger, bytes, hedge_started, answer)
        }
    }
}

/// Record a successful answer's latency from its own start, and pass it on.
fn timed<T>(
    executor: &dyn Executor,
    hedger: &Hedger,
    bytes: u64,
    started: Duration,
    answer: Result<T, StorageError>,
) -> Result<T, StorageError> {
    if answer.is_ok() {
        hedger.record(executor.now().saturating_sub(started), bytes);
    }
    answer
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::{HedgePolicy, Hedger};

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn the_threshold_waits_for_samples_then_follows_the_quantile_scaled_up_by_size() {
        let h = Hedger::new(HedgePolicy { min_samples: 4, ..HedgePolicy::default() });
        for t in [100, 110, 120] {
            h.record(t * MS, 1000);
        }
        assert_eq!(h.threshold(1000), None, "3 samples are too few");
        h.record(400 * MS, 1000);
        assert_eq!(h.threshold(1000), Some(800 * MS), "2 x the 95th percentile of 100,110,120,400");
        assert_eq!(h.threshold(2000), Some(1600 * MS), "a request twice the size may take twice as long");
        assert_eq!(h.threshold(10), Some(800 * MS), "smaller requests are never given less time than the samples");
    }

    #[test]
    fn a_multiple_too_large_for_a_duration_never_hedges_rather_than_panicking() {
        let h = Hedger::new(HedgePolicy { min_samples: 1, multiple: 1e300, ..HedgePolicy::default() });
        h.record(100 * MS, 1000);
        assert_eq!(h.threshold(1000), None);
        let inf = Hedger::new(HedgePolicy { min_samples: 1, multiple: f64::INFINITY, ..HedgePolicy::default() });
        inf.record(100 * MS, 1000);
        assert_eq!(inf.threshold(1000), None);
    }

    #[test]
    fn hedges_stay_within_their_share_of_requests() {
        let h = Hedger::new(HedgePolicy { max_share: 0.1, ..HedgePolicy::default() });
        h.start_request();
        assert!(h.try_hedge(), "one hedge is always allowed");
        assert!(!h.try_hedge());
        for _ in 0..19 {
            h.start_request();
        }
        assert!(h.try_hedge(), "20 requests allow 2");
        assert!(!h.try_hedge());
        assert_eq!(h.lock().hedged, 2);
    }
}
