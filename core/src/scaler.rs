//! `StandardScaler`: `(x - mean) / (std + eps)` with fixed statistics, computed exactly as
//! numpy computes it in the reference implementation, and stored back in the data's dtype.
//!
//! The reference implementation's scaler is the numpy expression
//! `(chunk.data - m) / (s + self.eps)` on the sample-first chunk `(rows, *inner)`; its result
//! is written into a slot of the array's declared dtype (the scaler declares no
//! `output_inner`), so float64 statistics on float32 data compute in float64 and come back
//! rounded to float32. This module reproduces that:
//!
//! - **Broadcasting** is numpy's, right-aligned against `(rows, *inner)`: a statistic
//!   broadcasts over one sample, `(1, *inner)`, so `()`, `(1, 1)`, `(level, 1, 1)`,
//!   `(1, nlon)` and `(nlat, nlon)` all work; one that does not is refused, naming both
//!   shapes, when the array's shape is known ([`ChunkTransform::output`]). `mean` and `std`
//!   that cannot broadcast together are refused at construction.
//! - **Promotion** is numpy's (NEP 50) and ml_dtypes' for each of the three operations:
//!   `x - m` in `promote(data, mean)`, `s + eps` in `promote(std, python float)`, the
//!   division in the promotion of those two. A statistic given as a Python number is a
//!   "weak" scalar ([`StatDType::Python`]): it takes the other operand's dtype (float32 for
//!   bfloat16, as ml_dtypes does). Each operation rounds to its dtype; float16 and bfloat16
//!   arithmetic goes through float32 and rounds once, as numpy and ml_dtypes do (exact for
//!   `+ - /`, float32 having more than twice their precision).
//! - **The result** is cast to the data's dtype as numpy casts: float64 to float16 directly,
//!   float64 to bfloat16 through float32 (ml_dtypes' cast).
//!
//! Statistics are kept as float64 values that are exact in their own dtype, with that dtype
//! and their shape; the cache token hashes all three.

use std::collections::BTreeMap;

use half::{bf16, f16};
use ndarray::{ArrayViewD, ArrayViewMutD, IxDyn, ShapeBuilder, Zip};

use crate::array::{DType, NdArray};
use crate::error::{Error, Result};
use crate::geometry::ArrayGeometry;
use crate::transform::{ChunkTransform, DecodedChunk};

/// The dtype of one statistic, as numpy's promotion sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StatDType {
    /// `numpy.float16`.
    Float16,
    /// `ml_dtypes.bfloat16`.
    Bfloat16,
    /// `numpy.float32`.
    Float32,
    /// `numpy.float64`.
    Float64,
    /// A Python `float` (or `int`): numpy's "weak" scalar, which takes the dtype of the array
    /// it meets (NEP 50). Always shape `()`.
    Python,
}

impl StatDType {
    /// The numpy name (`float32`), or `python` for a Python number.
    pub fn name(self) -> &'static str {
        match self {
            Self::Float16 => "float16",
            Self::Bfloat16 => "bfloat16",
            Self::Float32 => "float32",
            Self::Float64 => "float64",
            Self::Python => "python",
        }
    }

    /// The inverse of [`StatDType::name`].
    pub fn from_name(name: &str) -> Option<Self> {
        [Self::Float16, Self::Bfloat16, Self::Float32, Self::Float64, Self::Python]
            .into_iter()
            .find(|d| d.name() == name)
    }

    fn kind(self) -> Kind {
        match self {
            Self::Float16 => Kind::Ty(Ty::F16),
            Self::Bfloat16 => Kind::Ty(Ty::Bf16),
            Self::Float32 => Kind::Ty(Ty::F32),
            Self::Float64 => Kind::Ty(Ty::F64),
            Self::Python => Kind::Weak,
        }
    }
}

/// One statistic: its values (C order, each exact in `dtype`, held as float64), its shape
/// and its dtype.
#[derive(Debug, Clone, PartialEq)]
pub struct Stat {
    dtype: StatDType,
    shape: Vec<usize>,
    values: Vec<f64>,
}

impl Stat {
    /// A statistic of `dtype` and `shape`; `values` in C order, each exactly representable
    /// in `dtype` (a float32 widened to float64, say).
    ///
    /// # Errors
    /// A message saying what is wrong: a count that does not match the shape, no values,
    /// NaN or infinity (which would turn every value into NaN), a value `dtype` cannot hold,
    /// or a Python number that is not a scalar.
    pub fn new(dtype: StatDType, shape: Vec<usize>, values: Vec<f64>) -> std::result::Result<Self, String> {
        let n = shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d));
        if n != Some(values.len()) {
            return Err(format!("shape {shape:?} does not hold {} values", values.len()));
        }
        if values.is_empty() {
            return Err(format!("it is empty (shape {shape:?})"));
        }
        if dtype == StatDType::Python && !shape.is_empty() {
            return Err(format!("a Python number has shape (), not {shape:?}"));
        }
        if values.iter().any(|x| !x.is_finite()) {
            return Err("it holds NaN or infinity, which would turn every value into NaN; fit it on finite data".into());
        }
        if let Kind::Ty(t) = dtype.kind()
            && let Some(v) = values.iter().find(|&&v| t.round(v).to_bits() != v.to_bits())
        {
            return Err(format!("{v} is not a {} value", dtype.name()));
        }
        Ok(Self { dtype, shape, values })
    }

    /// A Python number (numpy's weak scalar).
    ///
    /// # Errors
    /// NaN or infinity.
    pub fn python(value: f64) -> std::result::Result<Self, String> {
        Self::new(StatDType::Python, Vec::new(), vec![value])
    }

    /// Its dtype.
    pub fn dtype(&self) -> StatDType {
        self.dtype
    }

    /// Its shape.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// Its values, C order, exact in [`Stat::dtype`].
    pub fn values(&self) -> &[f64] {
        &self.values
    }

    fn view(&self) -> ArrayViewD<'_, f64> {
        // The constructor checked that the shape holds exactly these values.
        ArrayViewD::from_shape(IxDyn(&self.shape), &self.values).unwrap_or_else(|_| unreachable!())
    }

    /// Whether numpy broadcasts this statistic over one sample `(1, *inner)`.
    fn fits_sample(&self, inner: &[usize]) -> bool {
        let target: Vec<usize> = std::iter::once(1).chain(inner.iter().copied()).collect();
        self.view().broadcast(IxDyn(&target)).is_some()
    }

    fn hash_into(&self, field: &mut impl FnMut(&[u8])) {
        field(self.dtype.name().as_bytes());
        field(&self.shape.iter().flat_map(|&d| (d as u64).to_le_bytes()).collect::<Vec<u8>>());
        field(&self.values.iter().flat_map(|x| x.to_bits().to_le_bytes()).collect::<Vec<u8>>());
    }
}

/// Read values stored in Fortran order into C order (an npz may hold either).
pub fn fortran_to_c(shape: &[usize], values: Vec<f64>) -> std::result::Result<Vec<f64>, String> {
    if shape.len() < 2 {
        return Ok(values);
    }
    let view = ArrayViewD::from_shape(IxDyn(shape).f(), &values).map_err(|e| e.to_string())?;
    Ok(view.iter().copied().collect())
}

/// One array's `mean` and `std`.
#[derive(Debug, Clone, PartialEq)]
pub struct ArrayStats {
    /// Subtracted.
    pub mean: Stat,
    /// Divided by, after adding `eps`.
    pub std: Stat,
}

impl ArrayStats {
    /// `mean` and `std` for one array.
    ///
    /// # Errors
    /// A message naming both shapes when numpy could not broadcast them together (then no
    /// sample shape could take both).
    pub fn new(mean: Stat, std: Stat) -> std::result::Result<Self, String> {
        // numpy's rule, right-aligned: each pair of axes is equal or has a 1. (ndarray's
        // co-broadcast, `broadcast_with`, is private.)
        let fits = mean.shape.iter().rev().zip(std.shape.iter().rev()).all(|(&a, &b)| a == b || a == 1 || b == 1);
        if !fits {
            return Err(format!(
                "mean of shape {:?} and std of shape {:?} do not broadcast together",
                mean.shape, std.shape
            ));
        }
        Ok(Self { mean, std })
    }
}

/// `(x - mean) / (std + eps)` per array with fixed statistics, exactly as numpy computes it
/// (see the module docs); the data keeps its dtype.
#[derive(Debug, Clone, PartialEq)]
pub struct StandardScaler {
    stats: BTreeMap<String, ArrayStats>,
    every: Option<ArrayStats>,
    eps: f64,
    cache_key: Option<String>,
}

const NAME: &str = "standard_scaler";

impl StandardScaler {
    /// A scaler with statistics per array path; `eps` is added to `std` (a Python float, as
    /// in insitubatch 0.2.0: it takes the dtype of `std`).
    ///
    /// # Errors
    /// [`Error::Config`] for an `eps` that is not finite and `>= 0`, or no statistics.
    pub fn new(stats: BTreeMap<String, ArrayStats>, eps: f64) -> Result<Self> {
        if stats.is_empty() {
            return Err(Error::Config("StandardScaler has no statistics; give a mean and std per array".into()));
        }
        Self::checked(Self { stats, every: None, eps, cache_key: None })
    }

    /// A scaler from a `mean` and a `std` per array path, as insitubatch 0.2.0's constructor
    /// and its npz take them.
    ///
    /// # Errors
    /// [`Error::Config`] naming the array that has one statistic but not the other, whose
    /// two statistics do not broadcast together, or a bad `eps`.
    pub fn from_maps(mean: BTreeMap<String, Stat>, mut std: BTreeMap<String, Stat>, eps: f64) -> Result<Self> {
        let mut stats = BTreeMap::new();
        for (name, m) in mean {
            let s = std
                .remove(&name)
                .ok_or_else(|| Error::Config(format!("StandardScaler has a mean but no std for {name:?}")))?;
            let pair = ArrayStats::new(m, s).map_err(|e| Error::Config(format!("StandardScaler for {name:?}: {e}")))?;
            stats.insert(name, pair);
        }
        if let Some(name) = std.keys().next() {
            return Err(Error::Config(format!("StandardScaler has a std but no mean for {name:?}")));
        }
        Self::new(stats, eps)
    }

    /// A scaler that applies the same statistics to every array (the CLI's `--scale`).
    ///
    /// # Errors
    /// [`Error::Config`] for an `eps` that is not finite and `>= 0`.
    pub fn for_every_array(stats: ArrayStats, eps: f64) -> Result<Self> {
        Self::checked(Self { stats: BTreeMap::new(), every: Some(stats), eps, cache_key: None })
    }

    fn checked(self) -> Result<Self> {
        if !self.eps.is_finite() || self.eps < 0.0 {
            return Err(Error::Config(format!("StandardScaler eps must be finite and >= 0, got {}", self.eps)));
        }
        Ok(self)
    }

    /// Declare the identity a persisted cache fingerprints (bump it on every re-fit); `None`
    /// hashes the statistics instead.
    #[must_use]
    pub fn with_cache_key(mut self, cache_key: Option<String>) -> Self {
        self.cache_key = cache_key;
        self
    }

    /// The statistics per array path.
    pub fn stats(&self) -> &BTreeMap<String, ArrayStats> {
        &self.stats
    }

    /// The statistics applied to every array, for a scaler made by
    /// [`StandardScaler::for_every_array`].
    pub fn every_array(&self) -> Option<&ArrayStats> {
        self.every.as_ref()
    }

    /// Added to `std`.
    pub fn eps(&self) -> f64 {
        self.eps
    }

    /// The declared cache identity, if any.
    pub fn cache_key(&self) -> Option<&str> {
        self.cache_key.as_deref()
    }

    /// The statistics used for `array`.
    pub fn stats_for(&self, array: &str) -> Option<&ArrayStats> {
        self.stats.get(array).or(self.every.as_ref())
    }

    /// The whole scaler's identity: `standard_scaler:key:<cache_key>`, or
    /// `standard_scaler:sha256:<hex>` of every statistic's dtype, shape and exact bits and of
    /// `eps`. The same in every process; any change to a statistic changes it.
    pub fn token(&self) -> String {
        if let Some(k) = &self.cache_key {
            return format!("{NAME}:key:{k}");
        }
        self.hash(self.stats.iter().map(|(k, s)| (k.as_str(), s)).chain(self.every.iter().map(|s| ("*", s))))
    }

    /// SHA-256 of length-prefixed fields, so no two scalers serialize to the same stream.
    fn hash<'a>(&self, stats: impl Iterator<Item = (&'a str, &'a ArrayStats)>) -> String {
        use sha2::{Digest, Sha256};
        let mut h = Sha256::new();
        let mut field = |b: &[u8]| {
            h.update((b.len() as u64).to_le_bytes());
            h.update(b);
        };
        field(b"standard_scaler v2");
        field(&self.eps.to_bits().to_le_bytes());
        for (name, s) in stats {
            field(name.as_bytes());
            s.mean.hash_into(&mut field);
            s.std.hash_into(&mut field);
        }
        format!("{NAME}:sha256:{:x}", h.finalize())
    }

    /// Check that `array` (of `dtype`, one sample shaped `inner`) can be scaled, and plan it.
    fn plan(&self, array: &str, dtype: DType, inner: &[usize]) -> Result<Plan> {
        let stats = self
            .stats_for(array)
            .ok_or_else(|| Error::Config(format!("StandardScaler has no mean/std for array {array:?}")))?;
        Plan::new(array, stats, self.eps, dtype, inner)
    }
}

impl ChunkTransform for StandardScaler {
    fn name(&self) -> String {
        NAME.into()
    }

    /// The declared key when there is one; else only this array's statistics (dtype, shape,
    /// exact bits) and `eps`, so re-fitting one variable leaves the other variables' cached
    /// chunks valid.
    fn cache_token(&self, array: &str) -> String {
        if self.cache_key.is_some() {
            return self.token();
        }
        self.hash(self.stats_for(array).map(|s| (array, s)).into_iter())
    }

    fn validate_scope(&self, arrays: &[String]) -> Result<()> {
        let missing: Vec<&String> = arrays.iter().filter(|a| self.stats_for(a).is_none()).collect();
        if missing.is_empty() {
            return Ok(());
        }
        Err(Error::Config(format!(
            "StandardScaler has no mean/std for {missing:?}; it was fitted for {:?}. Fit those variables, or scope this \
             scaler to the ones it knows.",
            self.stats.keys().collect::<Vec<_>>()
        )))
    }

    /// The dtype and shape stay; refuses (naming the statistic's shape and the sample's)
    /// statistics that do not broadcast over a sample, and data that is not floating point.
    fn output(&self, geom: &ArrayGeometry, dtype: DType, inner: &[usize]) -> Result<(DType, Vec<usize>)> {
        self.plan(&geom.path, dtype, inner)?;
        Ok((dtype, inner.to_vec()))
    }

    fn apply(&self, mut chunk: DecodedChunk) -> Result<DecodedChunk> {
        let inner = chunk.data.shape.get(1..).unwrap_or_default().to_vec();
        let plan = self
            .plan(&chunk.array, chunk.data.dtype, &inner)
            .map_err(|e| Error::Transform { name: NAME.into(), message: e.to_string() })?;
        plan.run(&mut chunk.data)?;
        Ok(chunk)
    }
}

/// A concrete floating-point dtype an operation runs in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ty {
    F16,
    Bf16,
    F32,
    F64,
}

impl Ty {
    fn of(dtype: DType) -> Option<Self> {
        match dtype {
            DType::Float16 => Some(Self::F16),
            DType::Bfloat16 => Some(Self::Bf16),
            DType::Float32 => Some(Self::F32),
            DType::Float64 => Some(Self::F64),
            _ => None,
        }
    }

    /// `v` converted to this dtype as numpy converts a float64 (and back, exactly).
    fn round(self, v: f64) -> f64 {
        match self {
            Self::F16 => f16::from_f64_numpy(v).to_f64(),
            Self::Bf16 => bf16::from_f64_numpy(v).to_f64(),
            Self::F32 => f64::from(v as f32),
            Self::F64 => v,
        }
    }

    /// `a + b` in this dtype, both already exact in it.
    fn add(self, a: f64, b: f64) -> f64 {
        match self {
            Self::F16 => f16::from_f64_numpy(a).add(f16::from_f64_numpy(b)).to_f64(),
            Self::Bf16 => bf16::from_f64_numpy(a).add(bf16::from_f64_numpy(b)).to_f64(),
            Self::F32 => f64::from((a as f32) + (b as f32)),
            Self::F64 => a + b,
        }
    }
}

/// An operand's dtype for promotion: a concrete dtype, or a Python number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Ty(Ty),
    Weak,
}

/// numpy's result dtype for a binary operation (NEP 50, with ml_dtypes' bfloat16: bfloat16
/// meets float16 or a Python number in float32).
fn promote(a: Kind, b: Kind) -> Kind {
    use Ty::{Bf16, F32, F64};
    match (a, b) {
        (Kind::Weak, Kind::Weak) => Kind::Weak,
        (Kind::Ty(Bf16), Kind::Weak) | (Kind::Weak, Kind::Ty(Bf16)) => Kind::Ty(F32),
        (Kind::Ty(t), Kind::Weak) | (Kind::Weak, Kind::Ty(t)) => Kind::Ty(t),
        (Kind::Ty(x), Kind::Ty(y)) if x == y => Kind::Ty(x),
        (Kind::Ty(F64), _) | (_, Kind::Ty(F64)) => Kind::Ty(F64),
        _ => Kind::Ty(F32), // float32 with float16 or bfloat16, and float16 with bfloat16
    }
}

/// How one array's chunks are scaled: the dtypes of the three operations, and the
/// statistics in their own shapes, already in the dtype each operation reads them in
/// (broadcast over the chunk as it is scaled, never expanded).
#[derive(Debug)]
struct Plan {
    data: Ty,
    sub: Ty,
    div: Ty,
    /// `mean` rounded to `sub`'s dtype, and its shape.
    mean: (Vec<f64>, Vec<usize>),
    /// `std + eps` computed in its own dtype, then rounded to `div`'s, and its shape.
    denom: (Vec<f64>, Vec<usize>),
}

impl Plan {
    fn new(array: &str, stats: &ArrayStats, eps: f64, dtype: DType, inner: &[usize]) -> Result<Self> {
        let data = Ty::of(dtype).ok_or_else(|| {
            Error::Config(format!(
                "StandardScaler scales floating-point data (float16, bfloat16, float32, float64); array {array:?} is {dtype}"
            ))
        })?;
        for (which, s) in [("mean", &stats.mean), ("std", &stats.std)] {
            if !s.fits_sample(inner) {
                return Err(Error::Config(format!(
                    "StandardScaler {which} for array {array:?} has shape {:?}, which does not broadcast over a sample of \
                     shape {inner:?} (the chunk without its sample axis); give statistics shaped like (1, 1), (level, 1, 1) \
                     or the sample's own shape",
                    s.shape
                )));
            }
        }
        let Kind::Ty(sub) = promote(Kind::Ty(data), stats.mean.dtype.kind()) else { unreachable!("data is concrete") };
        let std_eps = promote(stats.std.dtype.kind(), Kind::Weak);
        let Kind::Ty(div) = promote(Kind::Ty(sub), std_eps) else { unreachable!("sub is concrete") };
        let denom = stats
            .std
            .values
            .iter()
            .map(|&s| match std_eps {
                Kind::Weak => div.round(s + eps), // Python arithmetic, then the weak result meets the array
                Kind::Ty(t) => div.round(t.add(s, t.round(eps))),
            })
            .collect();
        let mean = stats.mean.values.iter().map(|&m| sub.round(m)).collect();
        Ok(Self { data, sub, div, mean: (mean, stats.mean.shape.clone()), denom: (denom, stats.std.shape.clone()) })
    }

    fn run(&self, data: &mut NdArray) -> Result<()> {
        macro_rules! elem {
            ($ty:expr, $T:ident, $body:expr) => {
                match $ty {
                    Ty::F16 => {
                        type $T = f16;
                        $body
                    }
                    Ty::Bf16 => {
                        type $T = bf16;
                        $body
                    }
                    Ty::F32 => {
                        type $T = f32;
                        $body
                    }
                    Ty::F64 => {
                        type $T = f64;
                        $body
                    }
                }
            };
        }
        elem!(self.data, D, elem!(self.sub, S, elem!(self.div, V, self.kernel::<D, S, V>(data))))
    }

    /// `x = D((V(S(x) - mean)) / denom)` per element: each step in its own dtype, the
    /// statistics broadcast over the whole chunk `(rows, *inner)` by ndarray (stride 0 on
    /// their axes of length 1, numpy's right alignment).
    fn kernel<D: Elem, S: Elem, V: Elem>(&self, data: &mut NdArray) -> Result<()> {
        let shape = IxDyn(&data.shape);
        let per_sample: usize = data.shape.iter().skip(1).product();
        let mean: Vec<S> = self.mean.0.iter().map(|&m| S::from_f64(m)).collect();
        let denom: Vec<V> = self.denom.0.iter().map(|&d| V::from_f64(d)).collect();
        let internal = |what: &str| Error::Transform { name: NAME.into(), message: what.into() };
        let values =
            data.as_mut_slice::<D>().ok_or_else(|| internal("the chunk's bytes are not aligned to its dtype"))?;
        let scale = |x: &mut D, m: S, d: V| {
            let diff = S::from_f64(x.to_f64()).sub(m);
            *x = D::from_f64(V::from_f64(diff.to_f64()).div(d).to_f64());
        };
        // Fast paths, the same arithmetic over plain slices (ndarray's Zip does not vectorize
        // over a stride-0 axis): one value each, or statistics a whole sample long (the
        // shape of a sample up to leading 1s, so their C order is the sample's).
        if let ([m], [d]) = (&mean[..], &denom[..]) {
            values.iter_mut().for_each(|x| scale(x, *m, *d));
            return Ok(());
        }
        if per_sample > 0 && [mean.len(), denom.len()].iter().all(|&n| n == 1 || n == per_sample) {
            let mean = if mean.len() == 1 { vec![mean[0]; per_sample] } else { mean };
            let denom = if denom.len() == 1 { vec![denom[0]; per_sample] } else { denom };
            for sample in values.chunks_exact_mut(per_sample) {
                for ((x, &m), &d) in sample.iter_mut().zip(&mean).zip(&denom) {
                    scale(x, m, d);
                }
            }
            return Ok(());
        }
        let x = ArrayViewMutD::from_shape(shape.clone(), values).map_err(|e| internal(&e.to_string()))?;
        // Plan::new checked that both broadcast over a sample; rows only add an axis.
        let broadcast = |what: &str| internal(&format!("{what} does not broadcast over the chunk {shape:?}"));
        let m = ArrayViewD::from_shape(IxDyn(&self.mean.1), &mean).map_err(|e| internal(&e.to_string()))?;
        let m = m.broadcast(shape.clone()).ok_or_else(|| broadcast("mean"))?;
        let d = ArrayViewD::from_shape(IxDyn(&self.denom.1), &denom).map_err(|e| internal(&e.to_string()))?;
        let d = d.broadcast(shape.clone()).ok_or_else(|| broadcast("std"))?;
        Zip::from(x).and(m).and(d).for_each(|x, &m, &d| scale(x, m, d));
        Ok(())
    }
}

/// A floating-point element and numpy's arithmetic on it.
trait Elem: bytemuck::Pod + Copy {
    fn to_f64(self) -> f64;
    /// numpy's cast from float64.
    fn from_f64(v: f64) -> Self;
    fn sub(self, o: Self) -> Self;
    fn div(self, o: Self) -> Self;
    fn add(self, o: Self) -> Self;
}

/// numpy's casts from float64: float16 directly (`npy_double_to_half`), bfloat16 through
/// float32 (ml_dtypes casts every wider float that way).
trait FromF64Numpy {
    fn from_f64_numpy(v: f64) -> Self;
}

impl FromF64Numpy for f16 {
    /// Correctly rounded, as `npy_double_to_half`. Hand-written because `half`'s `from_f64`
    /// is not: it drops the low 32 mantissa bits (or, with F16C, rounds through float32),
    /// so a value just past a tie rounds the wrong way. Rounding to float32 *to odd* keeps
    /// the sticky bit, and float32 has more than 11 + 2 bits, so the second rounding is exact.
    fn from_f64_numpy(v: f64) -> Self {
        let t = v as f32;
        if f64::from(t) == v || t.is_infinite() || v.is_nan() {
            return f16::from_f32(t);
        }
        let mut bits = t.to_bits();
        if f64::from(t).abs() > v.abs() {
            bits -= 1; // truncate toward zero (the magnitude is in the low 31 bits)
        }
        f16::from_f32(f32::from_bits(bits | 1))
    }
}

impl FromF64Numpy for bf16 {
    fn from_f64_numpy(v: f64) -> Self {
        bf16::from_f32(v as f32)
    }
}

/// float16 and bfloat16 arithmetic as numpy and ml_dtypes do it: in float32, rounded once.
macro_rules! half_elem {
    ($t:ty) => {
        impl Elem for $t {
            fn to_f64(self) -> f64 {
                <$t>::to_f64(self)
            }
            fn from_f64(v: f64) -> Self {
                <$t>::from_f64_numpy(v)
            }
            fn sub(self, o: Self) -> Self {
                <$t>::from_f32(self.to_f32() - o.to_f32())
            }
            fn div(self, o: Self) -> Self {
                <$t>::from_f32(self.to_f32() / o.to_f32())
            }
            fn add(self, o: Self) -> Self {
                <$t>::from_f32(self.to_f32() + o.to_f32())
            }
        }
    };
}
half_elem!(f16);
half_elem!(bf16);

impl Elem for f32 {
    fn to_f64(self) -> f64 {
        f64::from(self)
    }
    fn from_f64(v: f64) -> Self {
        v as f32
    }
    fn sub(self, o: Self) -> Self {
        self - o
    }
    fn div(self, o: Self) -> Self {
        self / o
    }
    fn add(self, o: Self) -> Self {
        self + o
    }
}

impl Elem for f64 {
    fn to_f64(self) -> f64 {
        self
    }
    fn from_f64(v: f64) -> Self {
        v
    }
    fn sub(self, o: Self) -> Self {
        self - o
    }
    fn div(self, o: Self) -> Self {
        self / o
    }
    fn add(self, o: Self) -> Self {
        self + o
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    fn stat(dtype: StatDType, shape: &[usize], values: &[f64]) -> Stat {
        Stat::new(dtype, shape.to_vec(), values.to_vec()).unwrap()
    }

    fn scaler(mean: Stat, std: Stat) -> StandardScaler {
        StandardScaler::new(BTreeMap::from([("t2m".into(), ArrayStats::new(mean, std).unwrap())]), 1e-8).unwrap()
    }

    fn f32_chunk(shape: Vec<usize>, values: &[f32]) -> DecodedChunk {
        let mut data = crate::array::zeroed_bytes(values.len() * 4);
        data.copy_from_slice(bytemuck::cast_slice(values));
        DecodedChunk {
            array: "t2m".into(),
            chunk_index: 0,
            sample_offset: 0,
            data: NdArray::new(DType::Float32, shape, data).unwrap(),
        }
    }

    /// `(x - m) / (s + eps)` in float32 with numpy's right-aligned broadcasting, written
    /// out index by index (the reference the broadcasting is checked against).
    fn by_hand(
        x: &[f32],
        shape: [usize; 3],
        m: impl Fn(usize, usize) -> f32,
        s: impl Fn(usize, usize) -> f32,
    ) -> Vec<f32> {
        let [t, a, b] = shape;
        let mut out = Vec::new();
        for r in 0..t {
            for i in 0..a {
                for j in 0..b {
                    out.push((x[(r * a + i) * b + j] - m(i, j)) / (s(i, j) + 1e-8f32));
                }
            }
        }
        out
    }

    #[test]
    fn statistics_broadcast_right_aligned_like_numpy() {
        let x: Vec<f32> = (0..2 * 3 * 5).map(|v| v as f32 * 1.5 + 0.25).collect();
        let f = StatDType::Float32;
        let per_lon: Vec<f64> = (0..5).map(|j| f64::from(j as f32 * 0.5)).collect();
        let per_lon_s: Vec<f64> = (0..5).map(|j| f64::from(1.0 + j as f32 * 0.25)).collect();
        let per_lat: Vec<f64> = (0..3).map(|i| f64::from(i as f32 * 2.0)).collect();
        let cases: Vec<(Stat, Stat, Vec<f32>)> = vec![
            (
                stat(f, &[1, 5], &per_lon),
                stat(f, &[1, 5], &per_lon_s),
                by_hand(&x, [2, 3, 5], |_, j| j as f32 * 0.5, |_, j| 1.0 + j as f32 * 0.25),
            ),
            (
                stat(f, &[3, 1], &per_lat),
                stat(f, &[], &[2.0]),
                by_hand(&x, [2, 3, 5], |i, _| i as f32 * 2.0, |_, _| 2.0),
            ),
            (stat(f, &[1, 1], &[3.0]), stat(f, &[1, 1, 1], &[4.0]), by_hand(&x, [2, 3, 5], |_, _| 3.0, |_, _| 4.0)),
            // A whole sample's statistics beside a scalar (the per-sample fast path).
            (
                stat(f, &[1, 3, 5], &(0..15).map(f64::from).collect::<Vec<_>>()),
                stat(f, &[], &[4.0]),
                by_hand(&x, [2, 3, 5], |i, j| (i * 5 + j) as f32, |_, _| 4.0),
            ),
            (
                stat(f, &[3, 5], &(0..15).map(f64::from).collect::<Vec<_>>()),
                stat(f, &[5], &per_lon_s),
                by_hand(&x, [2, 3, 5], |i, j| (i * 5 + j) as f32, |_, j| 1.0 + j as f32 * 0.25),
            ),
        ];
        for (m, s, want) in cases {
            let label = format!("mean {:?} std {:?}", m.shape(), s.shape());
            let out = scaler(m, s).apply(f32_chunk(vec![2, 3, 5], &x)).unwrap();
            let got = out.data.as_slice::<f32>().unwrap();
            assert_eq!(
                got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                want.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                "{label}"
            );
        }
    }

    #[test]
    fn a_shape_that_does_not_broadcast_is_refused_naming_both_shapes() {
        let f = StatDType::Float32;
        let s = scaler(stat(f, &[3], &[1.0, 2.0, 3.0]), stat(f, &[], &[1.0]));
        let err = s.apply(f32_chunk(vec![1, 3, 5], &[0.0; 15])).unwrap_err().to_string();
        assert!(err.contains("[3]") && err.contains("[3, 5]") && err.contains("t2m"), "{err}");
        // Too many axes: a leading axis other than 1 would be the sample axis.
        let s = scaler(stat(f, &[2, 3, 5], &[0.0; 30]), stat(f, &[], &[1.0]));
        let err = s.apply(f32_chunk(vec![2, 3, 5], &[0.0; 30])).unwrap_err().to_string();
        assert!(err.contains("[2, 3, 5]") && err.contains("[3, 5]"), "{err}");
        let err = ArrayStats::new(stat(f, &[5], &[0.0; 5]), stat(f, &[3], &[1.0; 3])).unwrap_err();
        assert!(err.contains("[5]") && err.contains("[3]"), "{err}");
    }

    #[test]
    fn float64_statistics_promote_then_round_back_to_the_data_dtype() {
        // 0.1 as float64 and as float32 differ; numpy computes in float64 then casts back.
        let x = [1.0f32, 2.0, 3.0];
        let s = scaler(stat(StatDType::Float64, &[], &[0.1]), stat(StatDType::Float64, &[], &[3.0]));
        let out = s.apply(f32_chunk(vec![3, 1], &x)).unwrap();
        let want: Vec<f32> = x.iter().map(|&v| ((f64::from(v) - 0.1) / (3.0 + 1e-8)) as f32).collect();
        assert_eq!(out.data.as_slice::<f32>().unwrap(), &want[..]);
        assert_eq!(out.data.dtype, DType::Float32);
        // A Python number takes the array's dtype: the same computation all in float32.
        let s = scaler(Stat::python(0.1).unwrap(), Stat::python(3.0).unwrap());
        let out = s.apply(f32_chunk(vec![3, 1], &x)).unwrap();
        let want: Vec<f32> = x.iter().map(|&v| (v - 0.1f32) / ((3.0 + 1e-8) as f32)).collect();
        assert_eq!(out.data.as_slice::<f32>().unwrap(), &want[..]);
    }

    #[test]
    fn promotion_follows_numpy_and_ml_dtypes() {
        use Kind::{Ty as T, Weak};
        use Ty::{Bf16, F16, F32, F64};
        assert_eq!(promote(T(F16), Weak), T(F16));
        assert_eq!(promote(T(Bf16), Weak), T(F32));
        assert_eq!(promote(T(F16), T(Bf16)), T(F32));
        assert_eq!(promote(T(Bf16), T(Bf16)), T(Bf16));
        assert_eq!(promote(T(F32), T(F64)), T(F64));
        assert_eq!(promote(Weak, Weak), Weak);
        // ml_dtypes casts float64 to bfloat16 through float32: 1 + 2^-8 + 2^-40 rounds to
        // the float32 tie 1 + 2^-8, then to even, 1.0 (a direct cast would give 1 + 2^-7).
        assert_eq!(Ty::Bf16.round(1.0 + 2f64.powi(-8) + 2f64.powi(-40)), 1.0);
        assert_eq!(Ty::F16.round(1.0 + 2f64.powi(-11) + 2f64.powi(-40)), 1.0 + 2f64.powi(-10));
    }

    #[test]
    fn refusals_name_what_is_wrong() {
        assert!(Stat::new(StatDType::Float32, vec![2], vec![1.0]).unwrap_err().contains("does not hold 1"));
        assert!(Stat::new(StatDType::Float32, vec![1], vec![0.1]).unwrap_err().contains("not a float32"));
        assert!(Stat::python(f64::NAN).unwrap_err().contains("NaN"));
        let one = || ArrayStats::new(Stat::python(0.0).unwrap(), Stat::python(1.0).unwrap()).unwrap();
        assert!(StandardScaler::for_every_array(one(), -1.0).is_err());
        let s = StandardScaler::new(BTreeMap::from([("t2m".into(), one())]), 1e-8).unwrap();
        let err = s.validate_scope(&["u10".into()]).unwrap_err().to_string();
        assert!(err.contains("no mean/std for [\"u10\"]"), "{err}");
        let mut c = f32_chunk(vec![1, 1], &[0.0]);
        c.data = NdArray::new(DType::Int32, vec![1, 1], crate::array::zeroed_bytes(4)).unwrap();
        assert!(s.apply(c).unwrap_err().to_string().contains("int32"));
    }

    #[test]
    fn cache_token_sees_dtype_shape_bits_and_only_its_array() {
        let f = StatDType::Float32;
        let build = |u10: Stat| {
            StandardScaler::new(
                BTreeMap::from([
                    ("t2m".into(), ArrayStats::new(stat(f, &[], &[280.0]), stat(f, &[], &[10.0])).unwrap()),
                    ("u10".into(), ArrayStats::new(u10, stat(f, &[], &[3.0])).unwrap()),
                ]),
                1e-8,
            )
            .unwrap()
        };
        let a = build(stat(f, &[], &[0.5]));
        for other in [
            build(stat(f, &[], &[0.25])),
            build(stat(StatDType::Float64, &[], &[0.5])),
            build(stat(f, &[1, 1], &[0.5])),
            build(Stat::python(0.5).unwrap()),
        ] {
            assert_eq!(a.cache_token("t2m"), other.cache_token("t2m"), "t2m's statistics did not change");
            assert_ne!(a.cache_token("u10"), other.cache_token("u10"));
            assert_ne!(a.token(), other.token());
        }
        assert_eq!(a.cache_token("u10"), build(stat(f, &[], &[0.5])).cache_token("u10"));
        let keyed = a.clone().with_cache_key(Some("v3".into()));
        assert_eq!(keyed.cache_token("t2m"), "standard_scaler:key:v3");
        assert_eq!(keyed.token(), "standard_scaler:key:v3");
    }

    #[test]
    fn fortran_order_is_read_into_c_order() {
        // [[1, 2, 3], [4, 5, 6]] stored column by column.
        assert_eq!(
            fortran_to_c(&[2, 3], vec![1.0, 4.0, 2.0, 5.0, 3.0, 6.0]).unwrap(),
            vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
        );
    }
}
