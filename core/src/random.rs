//! The random streams every draw is keyed by: steps 1-3 of the draw-order specification
//! (`shuffle.rs`), and the split's word in the key. A leaf: the draw order (`shuffle.rs`), the
//! weighted draws (`draws.rs`), the patches and the node shuffle all key their streams here.

use rand_core::Rng;
use rand_pcg::Pcg64;

/// The PCG stream constant (PCG's default increment).
pub const STREAM: u128 = 0x0a02_bdbf_7bb3_c0a7_ac28_fa16_a64a_bf96;

/// SplitMix64's output function (Steele, Lea, Flood 2014).
pub fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A random stream keyed by `words`.
pub fn stream(words: &[u64]) -> Pcg64 {
    let h = words.iter().fold(0u64, |h, &w| splitmix64(h ^ w));
    let state = (u128::from(splitmix64(h ^ 1)) << 64) | u128::from(splitmix64(h ^ 2));
    Pcg64::new(state, STREAM)
}

/// A uniform integer in `0..n` (`n >= 1`), by Lemire's multiply-shift with rejection.
// Hand-written rather than `rand::Rng::random_range`: rand reserves the right to change its
// sampling algorithm between versions, and this order is a written, cross-target contract.
pub fn below(rng: &mut Pcg64, n: u64) -> u64 {
    debug_assert!(n > 0);
    let mut m = u128::from(rng.next_u64()) * u128::from(n);
    if (m as u64) < n {
        let threshold = n.wrapping_neg() % n;
        while (m as u64) < threshold {
            m = u128::from(rng.next_u64()) * u128::from(n);
        }
    }
    (m >> 64) as u64
}

/// Fisher–Yates, from the back.
pub fn shuffle<T>(items: &mut [T], rng: &mut Pcg64) {
    for i in (1..items.len()).rev() {
        let j = below(rng, i as u64 + 1) as usize;
        items.swap(i, j);
    }
}

/// Which view an order is for; part of the random key so splits draw independent streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema), schemars(rename = "SplitName"))]
#[serde(rename_all = "lowercase")]
pub enum Split {
    /// Shuffled when the dataset shuffles.
    Train,
    /// Always sequential.
    Val,
    /// Always sequential.
    Test,
    /// The union of the three, sequential.
    All,
}

impl Split {
    /// Every view, the three splits first.
    pub const ALL: [Split; 4] = [Split::Train, Split::Val, Split::Test, Split::All];

    /// The split's word in the random key.
    pub fn tag(self) -> u64 {
        match self {
            Self::Train => 1,
            Self::Val => 2,
            Self::Test => 3,
            Self::All => 4,
        }
    }
    /// Lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Train => "train",
            Self::Val => "val",
            Self::Test => "test",
            Self::All => "all",
        }
    }
}

/// The split word was not one of `train`, `val`, `test`, `all`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown split {0:?}; use \"train\", \"val\", \"test\" or \"all\"")]
pub struct UnknownSplit(pub String);

/// The one parser of split names (the CLI, Python and JS all pass strings).
impl std::str::FromStr for Split {
    type Err = UnknownSplit;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Split::ALL.into_iter().find(|x| x.name() == s).ok_or_else(|| UnknownSplit(s.to_string()))
    }
}

impl std::fmt::Display for Split {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The words of a random stream of one epoch and view: `[seed, epoch, split_tag, purpose, index]`.
pub fn key(seed: u64, epoch: u64, split: Split, purpose: u64, index: u64) -> [u64; 5] {
    [seed, epoch, split.tag(), purpose, index]
}
