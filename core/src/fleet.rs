//! Which rank is slow, and on what. Each rank's pass report ([`PassStats`]) already names the
//! stage its consumer waited on; a data-parallel job steps at the pace of its slowest rank,
//! so across ranks the question is which rank that is, whether it is slow enough to matter,
//! and what it waits on. The bindings gather the reports (Python: `torch.distributed`'s
//! `all_gather_object`) and ask here.

use serde::{Deserialize, Serialize};

use crate::stats::PassStats;

/// A rank is a straggler when it delivers less than this share of the ranks' median rate:
/// the others then wait on it for a fifth of every step or more.
pub const STRAGGLER_SHARE: f64 = 0.8;

/// What the verdict needs of one rank's pass (a [`PassStats`], or the same fields from a
/// binding's copy of it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct RankReport {
    /// The rank.
    pub rank: usize,
    /// Samples it delivered.
    pub samples: u64,
    /// Seconds from its pass's start to its last batch.
    pub wall_s: f64,
    /// The stage its consumer waited on (`store`, `decode`, `consumer`, ...).
    pub limiting_stage: String,
    /// What to do about that stage.
    pub advice: String,
}

impl From<&PassStats> for RankReport {
    fn from(s: &PassStats) -> Self {
        Self {
            rank: s.rank,
            samples: s.samples,
            wall_s: s.wall_s,
            limiting_stage: s.limiting_stage.name().into(),
            advice: s.advice.clone(),
        }
    }
}

impl RankReport {
    /// Samples delivered per second (0 for a pass that delivered nothing).
    pub fn samples_per_s(&self) -> f64 {
        if self.wall_s > 0.0 { self.samples as f64 / self.wall_s } else { 0.0 }
    }
}

/// The job's pace and its slowest rank.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct FleetSummary {
    /// Ranks reported.
    pub ranks: usize,
    /// The median of the ranks' delivery rates, samples per second.
    pub median_samples_per_s: f64,
    /// The slowest rank's report.
    pub slowest: Option<RankReport>,
    /// The slowest rank's rate over the median (1: as fast as the median rank).
    pub slowest_share: f64,
    /// True when the slowest rank is below [`STRAGGLER_SHARE`] of the median.
    pub straggler: bool,
    /// The verdict in words: which rank, how much slower, on which stage, what to do.
    pub verdict: String,
}

/// The verdict over one pass of every rank (each rank once).
pub fn fleet_summary(reports: &[RankReport]) -> FleetSummary {
    let mut rates: Vec<f64> = reports.iter().map(RankReport::samples_per_s).collect();
    rates.sort_by(f64::total_cmp);
    let median = match rates.len() {
        0 => 0.0,
        n if n % 2 == 1 => rates[n / 2],
        n => (rates[n / 2 - 1] + rates[n / 2]) / 2.0,
    };
    let slowest = reports.iter().min_by(|a, b| a.samples_per_s().total_cmp(&b.samples_per_s())).cloned();
    let share = match &slowest {
        Some(s) if median > 0.0 => s.samples_per_s() / median,
        _ => 1.0,
    };
    let straggler = reports.len() > 1 && share < STRAGGLER_SHARE;
    let verdict = match &slowest {
        None => "no rank reported a pass".to_string(),
        Some(s) if straggler => format!(
            "rank {} is the straggler: {:.1} samples/s against the ranks' median of {median:.1} ({:.0}% slower), and \
             the job steps at its pace. It waits on {}: {}",
            s.rank,
            s.samples_per_s(),
            (1.0 - share) * 100.0,
            s.limiting_stage,
            s.advice
        ),
        Some(s) => format!(
            "no straggler: the slowest rank ({}, {:.1} samples/s) is within {:.0}% of the ranks' median of \
             {median:.1}; it waits on {}",
            s.rank,
            s.samples_per_s(),
            (1.0 - share) * 100.0,
            s.limiting_stage
        ),
    };
    FleetSummary {
        ranks: reports.len(),
        median_samples_per_s: median,
        slowest,
        slowest_share: share,
        straggler,
        verdict,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    // On wasm32 the tests run under wasm-bindgen-test (scripts/test-wasm.sh), whose attribute
    // takes the place of libtest's `#[test]`.
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    fn report(rank: usize, samples: u64, wall_s: f64, stage: &str) -> RankReport {
        RankReport { rank, samples, wall_s, limiting_stage: stage.into(), advice: format!("fix {stage}") }
    }

    #[test]
    fn the_slowest_rank_below_four_fifths_of_the_median_is_named_with_its_stage() {
        let ranks = [
            report(0, 100, 1.0, "consumer"),
            report(1, 100, 1.1, "consumer"),
            report(2, 100, 2.0, "store"),
            report(3, 100, 0.9, "consumer"),
        ];
        let s = fleet_summary(&ranks);
        assert!(s.straggler);
        assert_eq!(s.slowest.as_ref().map(|r| r.rank), Some(2));
        assert!((s.median_samples_per_s - (100.0 / 1.1 + 100.0) / 2.0).abs() < 1e-9);
        assert!(s.verdict.starts_with("rank 2 is the straggler") && s.verdict.contains("waits on store: fix store"));
    }

    #[test]
    fn ranks_within_a_fifth_of_the_median_have_no_straggler() {
        let s = fleet_summary(&[report(0, 100, 1.0, "decode"), report(1, 100, 1.2, "decode")]);
        assert!(!s.straggler && s.verdict.starts_with("no straggler: the slowest rank (1,"), "{}", s.verdict);
        let one = fleet_summary(&[report(0, 1, 9.0, "store")]);
        assert!(!one.straggler, "one rank is nobody's straggler");
        let none = fleet_summary(&[]);
        assert_eq!((none.ranks, none.verdict.as_str()), (0, "no rank reported a pass"));
        let idle = fleet_summary(&[report(0, 0, 0.0, "unknown"), report(1, 10, 1.0, "consumer")]);
        assert!(idle.straggler && idle.slowest.unwrap().rank == 0, "a rank that delivered nothing is the slowest");
    }
}
