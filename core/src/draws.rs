//! Which samples an epoch draws, and how often: a per-sample mask and per-sample weights.
//!
//! A weighted dataset gives each sample `copies` rows (the largest weight, rounded up); in
//! epoch `e` sample `t` draws `floor(w_t)` of them plus one more with probability `w_t -
//! floor(w_t)`, decided by the stream `(seed, e, split, PURPOSE_WEIGHT, t)`. So a sample of
//! weight 2 is drawn twice as often as one of weight 1 in expectation, a weight of 0 or a
//! masked sample never, and the draws are the same on every target, rank and resume.
//!
//! All of a sample's rows lie in its chunk's block (the order runs over rows, as for patches,
//! `patch.rs`), so a weight never makes a chunk be read twice in an epoch: read-once holds.
//! The blocks are widened on each chunk's *guaranteed* rows (`floor(w)` per kept sample), so
//! every block holds a batch in every epoch and the residency floor holds.

use rand_core::Rng;

use crate::error::{Error, Result};
use crate::random::{Split, key, splitmix64, stream};

/// Purpose word of a weighted sample's extra draw.
pub(crate) const PURPOSE_WEIGHT: u64 = 7;

/// The most rows one sample may have per epoch: a weight above this is refused (it would be
/// a sample drawn that many times per epoch; scale the weights down).
pub(crate) const MAX_COPIES: u64 = 1024;

/// A mask and weights over the samples, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct Draws {
    /// Per sample: drawn at all (mask, and a weight above 0).
    keep: Vec<bool>,
    /// Per sample: expected draws per epoch (`None`: 1 for every kept sample).
    weights: Option<Vec<f64>>,
    /// Rows per sample: the largest weight, rounded up (1 without weights).
    copies: u64,
}

/// Every weight is an expected number of draws per epoch: finite, between 0 and
/// [`MAX_COPIES`]. The one rule, for `DatasetSpec::resolve` (before any store is opened) and
/// [`Draws::new`].
///
/// # Errors
/// [`Error::InvalidOption`] naming the first weight out of range.
pub(crate) fn check_weights(weights: &[f64]) -> Result<()> {
    match weights.iter().enumerate().find(|(_, w)| !(0.0..=MAX_COPIES as f64).contains(*w)) {
        Some((i, w)) => Err(Error::option(
            "sample_weights",
            format!("`sample_weights`[{i}] is {w}; weights are expected draws per epoch, between 0 and {MAX_COPIES}"),
        )),
        None => Ok(()),
    }
}

impl Draws {
    /// Check a mask and weights (either may be absent) over `n_samples`.
    ///
    /// # Errors
    /// [`Error::InvalidOption`] for a length other than `n_samples`, a weight that is negative, not
    /// finite or above [`MAX_COPIES`], or nothing left to draw.
    pub fn new(n_samples: u64, mask: Option<&[bool]>, weights: Option<&[f64]>) -> Result<Self> {
        let n = usize::try_from(n_samples).map_err(|_| Error::option("sample_mask", "too many samples for a mask"))?;
        for (what, len) in [("sample_mask", mask.map(<[bool]>::len)), ("sample_weights", weights.map(<[f64]>::len))] {
            if let Some(len) = len.filter(|&l| l != n) {
                return Err(Error::option(
                    what,
                    format!("`{what}` has {len} entries but the sample axis has {n_samples}; give one per sample"),
                ));
            }
        }
        if let Some(w) = weights {
            check_weights(w)?;
        }
        let keep: Vec<bool> = (0..n).map(|t| mask.is_none_or(|m| m[t]) && weights.is_none_or(|w| w[t] > 0.0)).collect();
        if !keep.contains(&true) {
            let what = if mask.is_some() { "sample_mask" } else { "sample_weights" };
            return Err(Error::option(
                what,
                "`sample_mask` and `sample_weights` leave no sample to draw; keep at least one",
            ));
        }
        let copies = weights.map_or(1, |w| w.iter().fold(1.0f64, |m, &x| m.max(x.ceil())) as u64);
        Ok(Self { keep, weights: weights.map(<[f64]>::to_vec), copies })
    }

    /// Rows per sample for the draws (before patches).
    pub fn copies(&self) -> u64 {
        self.copies
    }

    /// Sample `t` can be drawn in some epoch.
    pub fn keeps(&self, t: u64) -> bool {
        self.keep.get(t as usize).copied().unwrap_or(false)
    }

    /// Rows of sample `t` drawn in every epoch: its weight rounded down (1 unweighted).
    pub fn guaranteed(&self, t: u64) -> u64 {
        if !self.keeps(t) {
            return 0;
        }
        self.weights.as_ref().map_or(1, |w| w[t as usize].floor() as u64)
    }

    /// Rows of sample `t` drawn in this epoch.
    pub fn drawn(&self, t: u64, seed: u64, epoch: u64, split: Split) -> u64 {
        let Some(weights) = self.weights.as_ref().filter(|_| self.keeps(t)) else { return u64::from(self.keeps(t)) };
        let w = weights[t as usize];
        let whole = w.floor();
        let extra = w - whole;
        if extra <= 0.0 {
            return whole as u64;
        }
        // 53 random bits as a uniform number in [0, 1), as numpy's `random()` makes them.
        let u = (stream(&key(seed, epoch, split, PURPOSE_WEIGHT, t)).next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        whole as u64 + u64::from(u < extra)
    }

    /// The share of samples that can be drawn.
    pub fn kept_share(&self) -> f64 {
        self.keep.iter().filter(|&&k| k).count() as f64 / self.keep.len().max(1) as f64
    }

    /// Expected draws per epoch over `samples`, and Kish's effective sample size
    /// `(Σw)² / Σw²` of their weights (what a weighted epoch is worth in distinct samples).
    pub fn expected(&self, samples: impl Iterator<Item = u64>) -> (f64, f64) {
        let (mut sum, mut squares) = (0.0, 0.0);
        for t in samples.filter(|&t| self.keeps(t)) {
            let w = self.weights.as_ref().map_or(1.0, |w| w[t as usize]);
            sum += w;
            squares += w * w;
        }
        (sum, if squares > 0.0 { sum * sum / squares } else { 0.0 })
    }

    /// True when weights are given (else a mask only).
    pub fn weighted(&self) -> bool {
        self.weights.is_some()
    }

    /// A fingerprint of the mask and weights, recorded in checkpoints: positions count the
    /// rows these draws make, so a resume under other draws is refused.
    pub fn fingerprint(&self) -> u64 {
        let mut h = splitmix64(self.copies);
        for (t, &k) in self.keep.iter().enumerate() {
            let w = self.weights.as_ref().map_or(1.0, |w| w[t]);
            h = splitmix64(h ^ u64::from(k) ^ w.to_bits().rotate_left(1));
        }
        h
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    #[test]
    fn weights_set_expected_draws_and_a_mask_removes_samples() {
        let d = Draws::new(4, Some(&[true, true, false, true]), Some(&[2.0, 0.5, 3.0, 0.0])).unwrap();
        assert_eq!(d.copies(), 3);
        assert_eq!((0..4).map(|t| d.keeps(t)).collect::<Vec<_>>(), [true, true, false, false]);
        assert_eq!((0..4).map(|t| d.guaranteed(t)).collect::<Vec<_>>(), [2, 0, 0, 0]);
        let epochs = 4000u64;
        let drawn = |t| (0..epochs).map(|e| d.drawn(t, 9, e, Split::Train)).sum::<u64>();
        assert_eq!(drawn(0), 2 * epochs);
        // Half of the epochs, within 4 standard deviations of a fair coin (fixed seed: exact).
        let half = drawn(1) as f64 / epochs as f64;
        assert!((half - 0.5).abs() < 4.0 * (0.25 / epochs as f64).sqrt(), "{half}");
        assert_eq!(drawn(2) + drawn(3), 0);
        let (sum, ess) = d.expected(0..4);
        assert!((sum - 2.5).abs() < 1e-12 && (ess - 6.25 / 4.25).abs() < 1e-12);
    }

    #[test]
    fn bad_masks_and_weights_are_refused_saying_what_to_give() {
        let e = Draws::new(3, Some(&[true]), None).unwrap_err().to_string();
        assert!(e.contains("sample_mask has 1 entries") && e.contains('3'), "{e}");
        let e = Draws::new(2, None, Some(&[1.0, -1.0])).unwrap_err().to_string();
        assert!(e.contains("sample_weights[1] is -1"), "{e}");
        assert!(Draws::new(2, None, Some(&[1.0, f64::NAN])).is_err());
        assert!(Draws::new(2, None, Some(&[1.0, 2000.0])).is_err());
        let e = Draws::new(2, Some(&[false, false]), None).unwrap_err().to_string();
        assert!(e.contains("no sample to draw"), "{e}");
    }

    #[test]
    fn the_fingerprint_follows_the_mask_and_weights() {
        let a = Draws::new(3, Some(&[true, false, true]), None).unwrap();
        let b = Draws::new(3, Some(&[true, true, false]), None).unwrap();
        let c = Draws::new(3, None, Some(&[1.0, 0.0, 1.0])).unwrap();
        assert_ne!(a.fingerprint(), b.fingerprint());
        assert_eq!(a.fingerprint(), a.clone().fingerprint());
        assert_ne!(a.fingerprint(), c.fingerprint());
    }
}
