//! Chunk-granular train/val/test splits and window validity.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::geometry::ArrayGeometry;
use crate::shuffle::{PURPOSE_SPLIT, Split, shuffle, stream};

/// Which reference-grid chunk ids belong to each split.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SplitManifest {
    /// Chunks on the reference grid.
    pub n_chunks: u64,
    /// Samples per reference chunk: the anchor grid every variable maps onto.
    pub sample_chunk_size: u64,
    /// Samples on the sample axis.
    pub n_samples: u64,
    /// Sorted chunk ids per split (`train`, `val`, `test`).
    pub chunks: BTreeMap<Split, Vec<u64>>,
    /// The seed that shuffled the chunks (when not contiguous).
    pub seed: u64,
}

/// Options for [`split_by_chunk`].
#[derive(Debug, Clone)]
pub struct SplitOptions {
    /// Fractions of chunks for train, val and test; must sum to 1.
    pub fractions: (f64, f64, f64),
    /// Seed for `contiguous = false`.
    pub seed: u64,
    /// Contiguous runs of chunks (safe for time series) or shuffled chunks.
    pub contiguous: bool,
    /// Restrict to the chunks overlapping `[start, stop)` of the sample axis.
    pub sample_range: Option<(u64, u64)>,
}

impl Default for SplitOptions {
    fn default() -> Self {
        Self { fractions: (0.8, 0.1, 0.1), seed: 0, contiguous: true, sample_range: None }
    }
}

/// Python's `round` (half to even), so split sizes match the reference implementation's.
fn round_half_even(x: f64) -> u64 {
    let r = x.round();
    let r = if (x - x.trunc()).abs() == 0.5 && r % 2.0 != 0.0 { r - x.signum() } else { r };
    r.max(0.0) as u64
}

/// Fractions are non-negative and sum to 1: the one rule, for `DatasetSpec::resolve` and
/// [`split_by_chunk`].
///
/// # Errors
/// [`Error::InvalidOption`] naming `fractions`.
pub(crate) fn check_fractions((f0, f1, f2): (f64, f64, f64)) -> Result<()> {
    if [f0, f1, f2].iter().any(|f| !f.is_finite() || *f < 0.0) || (f0 + f1 + f2 - 1.0).abs() > 1e-6 {
        return Err(Error::option(
            "fractions",
            format!(
                "`fractions` must be non-negative and sum to 1.0, got ({f0}, {f1}, {f2}) summing to {}",
                f0 + f1 + f2
            ),
        ));
    }
    Ok(())
}

/// Partition `geom`'s sample-axis chunks into train/val/test.
///
/// # Errors
/// [`Error::Config`] when fractions are negative or do not sum to 1, or `sample_range` is
/// not `0 <= start < stop <= n_samples`.
pub fn split_by_chunk(geom: &ArrayGeometry, opts: &SplitOptions) -> Result<SplitManifest> {
    check_fractions(opts.fractions)?;
    let (f0, f1) = (opts.fractions.0, opts.fractions.1);
    let n = geom.n_samples();
    let spc = geom.sample_chunk_size();
    let mut ids: Vec<u64> = match opts.sample_range {
        None => (0..geom.n_chunks()).collect(),
        Some((start, stop)) => {
            if start >= stop || stop > n {
                return Err(Error::option(
                    "sample_range",
                    format!("`sample_range` ({start}, {stop}) must satisfy 0 <= start < stop <= n_samples = {n}"),
                ));
            }
            (start / spc..stop.div_ceil(spc)).collect()
        }
    };
    if !opts.contiguous {
        shuffle(&mut ids, &mut stream(&[opts.seed, 0, 0, PURPOSE_SPLIT, 0]));
    }
    let total = ids.len() as f64;
    let n_train = round_half_even(f0 * total).min(ids.len() as u64) as usize;
    let n_val = round_half_even(f1 * total).min((ids.len() - n_train) as u64) as usize;
    let mut take = |k: usize| {
        let mut part: Vec<u64> = ids.drain(..k).collect();
        part.sort_unstable();
        part
    };
    let train = take(n_train);
    let val = take(n_val);
    let mut test = std::mem::take(&mut ids);
    test.sort_unstable();
    Ok(SplitManifest {
        n_chunks: geom.n_chunks(),
        sample_chunk_size: spc,
        n_samples: n,
        chunks: BTreeMap::from([(Split::Train, train), (Split::Val, val), (Split::Test, test)]),
        seed: opts.seed,
    })
}

impl SplitManifest {
    /// The chunk ids of a view; `All` is the sorted union.
    pub fn chunks_of(&self, split: Split) -> Vec<u64> {
        match split {
            Split::All => {
                let mut all: Vec<u64> = self.chunks.values().flatten().copied().collect();
                all.sort_unstable();
                all.dedup();
                all
            }
            s => self.chunks.get(&s).cloned().unwrap_or_default(),
        }
    }

    /// Global sample indices of a split's chunks, in chunk order.
    pub fn sample_indices(&self, split: Split) -> Vec<u64> {
        self.sample_indices_on(split, self.sample_chunk_size, self.n_samples)
    }

    /// Global sample indices of a split's chunks, in chunk order, on another grid: chunks of
    /// `sample_chunk_size` samples over `n_samples` (an array's own, where it is chunked
    /// otherwise than the manifest's reference grid; insitubatch 0.2.0's
    /// `sample_indices(split, geom)`).
    pub fn sample_indices_on(&self, split: Split, sample_chunk_size: u64, n_samples: u64) -> Vec<u64> {
        self.chunks_of(split)
            .into_iter()
            .flat_map(|c| {
                // Saturating: a manifest read from JSON, or built by hand, may hold any numbers.
                let start = c.saturating_mul(sample_chunk_size);
                start..start.saturating_add(sample_chunk_size).min(n_samples)
            })
            .collect()
    }

    /// Serialize to JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_default()
    }

    /// Parse from JSON, checking it ([`SplitManifest::check`]).
    ///
    /// # Errors
    /// [`Error::Config`] on malformed JSON, or a manifest `check` refuses.
    pub fn from_json(json: &str) -> Result<Self> {
        let m: Self =
            serde_json::from_str(json).map_err(|e| Error::Config(format!("malformed split manifest JSON: {e}")))?;
        m.check()?;
        Ok(m)
    }

    /// Check a manifest read or built by hand: its counts agree, its chunk ids are in range
    /// and each appears once per split.
    ///
    /// # Errors
    /// [`Error::Config`] naming what disagrees.
    pub fn check(&self) -> Result<()> {
        let m = self;
        if m.sample_chunk_size == 0 || m.n_samples.div_ceil(m.sample_chunk_size) != m.n_chunks {
            return Err(Error::Config(format!(
                "split manifest is inconsistent: n_samples {} at {} per chunk is not {} chunks",
                m.n_samples, m.sample_chunk_size, m.n_chunks
            )));
        }
        if let Some(bad) = m.chunks.values().flatten().find(|&&c| c >= m.n_chunks) {
            return Err(Error::Config(format!(
                "split manifest names chunk {bad}, but there are {} chunks",
                m.n_chunks
            )));
        }
        // A repeated id would draw its samples twice an epoch. (Order is left as given: a
        // manifest built by hand in Python may list its chunks in any order.)
        for (split, ids) in &m.chunks {
            let mut sorted = ids.clone();
            sorted.sort_unstable();
            if let Some(w) = sorted.windows(2).find(|w| w[0] == w[1]) {
                return Err(Error::Config(format!(
                    "split manifest lists {split} chunk {} twice; each chunk id may appear once per split",
                    w[0]
                )));
            }
        }
        Ok(())
    }
}

/// Half-open anchors `[lo, hi)` whose every `anchor + offset` lies in `[0, n_samples)`.
/// An over-wide window gives the empty range `(lo, lo)`.
pub fn valid_anchor_range(offsets: &[i64], n_samples: u64) -> (u64, u64) {
    let min = offsets.iter().copied().min().unwrap_or(0);
    let max = offsets.iter().copied().max().unwrap_or(0);
    let lo = u64::try_from(-min.min(0)).unwrap_or(u64::MAX);
    let hi = (i128::from(n_samples) - i128::from(max.max(0))).max(0) as u64;
    (lo, hi.max(lo))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::array::DType;

    // On wasm32 the tests run under wasm-bindgen-test (scripts/test-wasm.sh), whose attribute
    // takes the place of libtest's `#[test]`.
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    fn geom(n: u64, spc: u64) -> ArrayGeometry {
        ArrayGeometry::new("t2m", vec![n, 2, 2], vec![spc, 2, 2], DType::Float32, 0).unwrap()
    }

    #[test]
    fn splits_cover_disjointly_and_round_like_python() {
        let m = split_by_chunk(&geom(80, 8), &SplitOptions::default()).unwrap();
        assert_eq!(m.chunks[&Split::Train], (0..8).collect::<Vec<_>>());
        assert_eq!(m.chunks[&Split::Val], vec![8]);
        assert_eq!(m.chunks[&Split::Test], vec![9]);
        assert_eq!(round_half_even(2.5), 2);
        assert_eq!(round_half_even(3.5), 4);
        let s =
            split_by_chunk(&geom(80, 8), &SplitOptions { contiguous: false, seed: 3, ..Default::default() }).unwrap();
        let mut all = s.chunks_of(Split::All);
        all.sort_unstable();
        assert_eq!(all, (0..10).collect::<Vec<_>>());
        assert_eq!(s.sample_indices(Split::All).len(), 80);
    }

    #[test]
    fn sample_indices_on_another_grid_clip_at_its_end() {
        let m = split_by_chunk(&geom(80, 8), &SplitOptions::default()).unwrap();
        assert_eq!(m.sample_indices(Split::Test), (72..80).collect::<Vec<_>>());
        assert_eq!(m.sample_indices_on(Split::Test, 10, 95), (90..95).collect::<Vec<_>>());
        assert_eq!(m.sample_indices_on(Split::Val, 10, 95), (80..90).collect::<Vec<_>>());
        let hand = SplitManifest { chunks: BTreeMap::from([(Split::Train, vec![u64::MAX, 2])]), ..m };
        assert_eq!(hand.sample_indices(Split::Train), (16..24).collect::<Vec<_>>(), "no overflow past the end");
        assert!(hand.check().unwrap_err().to_string().contains("names chunk 18446744073709551615"));
    }

    #[test]
    fn sample_range_snaps_outward_and_bad_input_errors() {
        let o = SplitOptions { sample_range: Some((10, 30)), fractions: (1.0, 0.0, 0.0), ..Default::default() };
        let m = split_by_chunk(&geom(80, 8), &o).unwrap();
        assert_eq!(m.chunks[&Split::Train], vec![1, 2, 3]);
        assert!(m.chunks[&Split::Val].is_empty());
        for r in [(5, 5), (10, 81)] {
            let o = SplitOptions { sample_range: Some(r), ..Default::default() };
            assert!(split_by_chunk(&geom(80, 8), &o).is_err());
        }
        let o = SplitOptions { fractions: (0.5, 0.1, 0.1), ..Default::default() };
        assert!(split_by_chunk(&geom(80, 8), &o).unwrap_err().to_string().contains("sum to 1.0"));
    }

    #[test]
    fn json_round_trip() {
        let m = split_by_chunk(&geom(77, 8), &SplitOptions::default()).unwrap();
        assert_eq!(SplitManifest::from_json(&m.to_json()).unwrap(), m);
        assert!(SplitManifest::from_json("{").is_err());
        let json = |n: u64, spc: u64, train: &str| {
            format!(
                r#"{{"n_chunks":{},"sample_chunk_size":{spc},"n_samples":{n},"chunks":{{"train":{train}}},"seed":0}}"#,
                n.div_ceil(spc)
            )
        };
        for (bad, needle) in [
            (json(10, 2, "[1,3,1]"), "train chunk 1 twice"),
            (json(10, 2, "[5]"), "names chunk 5"),
            (r#"{"n_chunks":1,"sample_chunk_size":0,"n_samples":10,"chunks":{},"seed":0}"#.into(), "inconsistent"),
        ] {
            let e = SplitManifest::from_json(&bad).unwrap_err().to_string();
            assert!(e.contains(needle), "{bad}: {e}");
        }
    }

    #[test]
    fn windows() {
        assert_eq!(valid_anchor_range(&[-1, 0, 1], 10), (1, 9));
        assert_eq!(valid_anchor_range(&[0], 10), (0, 10));
        assert_eq!(valid_anchor_range(&[0, 24], 10), (0, 0));
        assert_eq!(valid_anchor_range(&[-30, 0], 10), (30, 30));
    }
}
