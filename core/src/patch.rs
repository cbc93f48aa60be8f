//! Spatial patches: each sample cut into patches on some of its inner axes.
//!
//! A patched dataset draws *rows*, not samples. Sample `t` has `per_sample` rows; row `v` is
//! patch `v % per_sample` of sample `v / per_sample` (with weights, `draws.rs`, each copy of
//! a sample is `per_sample` rows). The draw order is built over rows exactly as over samples,
//! on a sample axis `per_sample` times longer whose chunks hold `per_sample` times as many
//! rows under the same chunk ids (`Dataset::rows_per_sample`). So every rule of the order (splits, blocks, ranks, resume) holds for rows unchanged, and all the
//! patches of a sample fall in its chunk's block: each chunk is still read once per epoch.
//!
//! Grid mode draws every patch of a grid (origins `0, stride, 2·stride, ...` while the patch
//! fits; a remainder narrower than a patch at the far edge is never drawn). Random mode draws
//! `per_sample` patches of each sample, each origin uniform over the positions where the
//! patch fits, from the stream `(seed, epoch, split, PURPOSE_PATCH, row)`: the same on
//! every target and every resume.
//!
//! Reads: a pass reads of each chunk only the inner tiles its rows' patches touch in that
//! block (`pass::plan_tiles`), each once, and holds only those (`assemble::TileLayout`): the
//! pool charges their bytes, and the residency floor counts the most tiles a chunk's rows
//! can touch (`pass::part_charge_max`).

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::shuffle::{Split, below, key, stream};

/// Purpose word of random patch origins.
pub(crate) const PURPOSE_PATCH: u64 = 6;

/// An inner axis a patch is cut on: a dimension name (zarr v3 `dimension_names`, or v2
/// `_ARRAY_DIMENSIONS`) or a physical axis index of the array.
// serde by hand: a number is an axis index, and so is a string of digits (a JS object's keys
// are strings, so `{ 1: 8 }` is axis 1 there); any other string is a dimension name. The one
// rule for every binding, as `PatchAxis::parse` reads a CLI word.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PatchAxis {
    /// A physical axis index, as numpy counts them.
    Axis(usize),
    /// A dimension name.
    Name(String),
}

impl std::fmt::Display for PatchAxis {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Axis(a) => write!(f, "axis {a}"),
            Self::Name(n) => write!(f, "{n:?}"),
        }
    }
}

impl Serialize for PatchAxis {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        match self {
            Self::Axis(a) => s.serialize_u64(*a as u64),
            Self::Name(n) => s.serialize_str(n),
        }
    }
}

impl<'de> Deserialize<'de> for PatchAxis {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct Visit;
        impl serde::de::Visitor<'_> for Visit {
            type Value = PatchAxis;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a dimension name or a non-negative axis index")
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> std::result::Result<PatchAxis, E> {
                Ok(PatchAxis::parse(s))
            }
            fn visit_u64<E: serde::de::Error>(self, n: u64) -> std::result::Result<PatchAxis, E> {
                let axis = usize::try_from(n).map_err(|_| E::custom(format!("axis index {n} is too large")))?;
                Ok(PatchAxis::Axis(axis))
            }
            fn visit_i64<E: serde::de::Error>(self, n: i64) -> std::result::Result<PatchAxis, E> {
                let n = u64::try_from(n).map_err(|_| {
                    E::custom(format!("axis index {n} is negative; count axes from 0, or name the dimension"))
                })?;
                self.visit_u64(n)
            }
        }
        d.deserialize_any(Visit)
    }
}

#[cfg(feature = "schema")]
impl schemars::JsonSchema for PatchAxis {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "PatchAxis".into()
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "A dimension name, or a physical axis index (a number, or its digits as text).",
            "x-ts": "string | number",
            "x-python": {"type": "str | int"},
        })
    }
}

/// A count per patched axis (`patch`, `patch_stride`), in the order given: the order of
/// `patch` is the column order of a batch's patch origins. Written as an object or mapping
/// `{axis: count}` (in its key order), a list of `[axis, count]` pairs, or the CLI's text
/// `AXIS=N,...` ([`parse_axis_sizes`], the one reader of that grammar: a form's text field
/// passes it as typed); serialized as the list.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AxisSizes(pub Vec<(PatchAxis, u64)>);

impl Serialize for AxisSizes {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_seq(self.0.iter())
    }
}

// By hand: a map into a `BTreeMap` would lose the caller's order, and a derived `untagged`
// enum would not say what was wrong.
impl<'de> Deserialize<'de> for AxisSizes {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = AxisSizes;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("{axis: count} (a dimension name or an axis index), [[axis, count], ...] or AXIS=N,...")
            }
            fn visit_str<E: serde::de::Error>(self, text: &str) -> std::result::Result<AxisSizes, E> {
                parse_axis_sizes(text).map(AxisSizes).map_err(E::custom)
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<AxisSizes, A::Error> {
                let mut out = Vec::new();
                while let Some(pair) = seq.next_element::<(PatchAxis, u64)>()? {
                    out.push(pair);
                }
                Ok(AxisSizes(out))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> std::result::Result<AxisSizes, A::Error> {
                let mut out = Vec::new();
                while let Some(pair) = map.next_entry::<PatchAxis, u64>()? {
                    out.push(pair);
                }
                Ok(AxisSizes(out))
            }
        }
        d.deserialize_any(Visit)
    }
}

#[cfg(feature = "schema")]
impl schemars::JsonSchema for AxisSizes {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "AxisSizes".into()
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "A count per axis, in order: `{axis: count}`, `[[axis, count], ...]` or `\"AXIS=N,...\"`.",
            "x-ts": "Record<string, number> | Map<string | number, number> | [string | number, number][] | string",
            "x-python": {"type": "dict[str | int, int] | list[tuple[str | int, int]]"},
        })
    }
}

/// How `patch_mode` places patches: the one parser of its words.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase", try_from = "String")]
pub enum PatchPlacement {
    /// Every patch of a grid, each once per epoch.
    #[default]
    Grid,
    /// `patches_per_sample` patches per sample at random origins, drawn anew each epoch.
    Random,
}

impl std::str::FromStr for PatchPlacement {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "grid" => Ok(Self::Grid),
            "random" => Ok(Self::Random),
            other => {
                Err(Error::option("patch_mode", format!("`patch_mode` must be 'grid' or 'random', got {other:?}")))
            }
        }
    }
}

impl TryFrom<String> for PatchPlacement {
    type Error = Error;
    fn try_from(s: String) -> Result<Self> {
        s.parse()
    }
}

/// How patches are placed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PatchMode {
    /// Every patch of a grid, stepping `stride` per patched axis (empty: the patch size, so
    /// patches tile the field without overlap; a smaller stride overlaps them).
    Grid {
        /// Step per patched axis, in the order of [`PatchOptions::size`].
        stride: Vec<u64>,
    },
    /// `per_sample` patches per sample at random origins, drawn anew each epoch.
    Random {
        /// Patches per sample and epoch.
        per_sample: u64,
    },
}

/// What to cut: the patch extent per axis, and how patches are placed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PatchOptions {
    /// Patch extent per patched axis.
    pub size: Vec<(PatchAxis, u64)>,
    /// Grid or random placement.
    pub mode: PatchMode,
}

impl PatchOptions {
    /// Non-overlapping grid patches of these sizes.
    pub fn grid(size: Vec<(PatchAxis, u64)>) -> Self {
        Self { size, mode: PatchMode::Grid { stride: Vec::new() } }
    }

    /// The options from the words every binding takes (Python's `patch`, `patch_mode`,
    /// `patch_stride`, `patches_per_sample`; the CLI's and JS's alike): the mode `grid` or
    /// `random`, a stride per axis for grids (axes not named step by their size), a count
    /// for random patches (default 1).
    ///
    /// # Errors
    /// [`Error::InvalidOption`] for a stride for random patches or a count for a grid, or a
    /// stride naming an axis the patch does not.
    pub fn from_parts(
        size: Vec<(PatchAxis, u64)>,
        mode: PatchPlacement,
        stride: Option<Vec<(PatchAxis, u64)>>,
        per_sample: Option<u64>,
    ) -> Result<Self> {
        let mode = match (mode, stride, per_sample) {
            (PatchPlacement::Grid, _, Some(_)) => {
                return Err(Error::option(
                    "patches_per_sample",
                    "`patches_per_sample` is for `patch_mode` 'random'; a grid draws every patch",
                ));
            }
            (PatchPlacement::Grid, stride, None) => {
                let stride = stride.unwrap_or_default();
                if let Some((a, _)) = stride.iter().find(|(a, _)| !size.iter().any(|(b, _)| a == b)) {
                    return Err(Error::option(
                        "patch_stride",
                        format!("`patch_stride` names {a}, which `patch` does not; name patched axes"),
                    ));
                }
                let step =
                    |(axis, s): &(PatchAxis, u64)| stride.iter().find(|(a, _)| a == axis).map_or(*s, |(_, st)| *st);
                PatchMode::Grid { stride: size.iter().map(step).collect() }
            }
            (PatchPlacement::Random, Some(_), _) => {
                return Err(Error::option("patch_stride", "`patch_stride` is for `patch_mode` 'grid'"));
            }
            (PatchPlacement::Random, None, Some(0)) => {
                return Err(Error::option("patches_per_sample", "`patches_per_sample` must be at least 1"));
            }
            (PatchPlacement::Random, None, n) => PatchMode::Random { per_sample: n.unwrap_or(1) },
        };
        Ok(Self { size, mode })
    }
}

impl PatchOptions {
    /// [`Self::from_parts`] from a binding's optional words: `None` without a size, and the
    /// mode, stride or count without a size refused (they would be ignored silently).
    ///
    /// # Errors
    /// As [`Self::from_parts`], and [`Error::InvalidOption`] for the companions without a
    /// size or a size naming no axis.
    pub fn from_words(
        size: Option<Vec<(PatchAxis, u64)>>,
        mode: Option<PatchPlacement>,
        stride: Option<Vec<(PatchAxis, u64)>>,
        per_sample: Option<u64>,
    ) -> Result<Option<Self>> {
        let Some(size) = size else {
            let given = [(mode.is_some(), "patch_mode"), (stride.is_some(), "patch_stride")]
                .into_iter()
                .chain([(per_sample.is_some(), "patches_per_sample")])
                .find_map(|(set, name)| set.then_some(name));
            if let Some(name) = given {
                return Err(Error::option(
                    name,
                    "`patch_mode`, `patch_stride` and `patches_per_sample` shape the patches that `patch` cuts, and \
                     no `patch` was given; pass `patch` too, e.g. {\"lat\": 32, \"lon\": 32}",
                ));
            }
            return Ok(None);
        };
        if size.is_empty() {
            return Err(Error::option(
                "patch",
                "`patch` names no axis; give a size per patched axis, e.g. {\"lat\": 128}",
            ));
        }
        Self::from_parts(size, mode.unwrap_or_default(), stride, per_sample).map(Some)
    }
}

impl PatchAxis {
    /// A word as an axis: digits are a physical axis index, anything else a dimension name.
    pub fn parse(word: &str) -> Self {
        word.parse().map_or_else(|_| Self::Name(word.to_string()), Self::Axis)
    }
}

/// `AXIS=N,AXIS=N` (the CLI's `--patch lat=128,lon=128`) as `(axis, N)` pairs.
///
/// # Errors
/// [`Error::Config`] for a pair without `=` or a count that is not a whole number.
pub fn parse_axis_sizes(text: &str) -> Result<Vec<(PatchAxis, u64)>> {
    text.split(',')
        .filter(|p| !p.trim().is_empty())
        .map(|pair| {
            let (axis, n) = pair
                .split_once('=')
                .ok_or_else(|| Error::Config(format!("{pair:?} is not AXIS=SIZE; write e.g. lat=128,lon=128")))?;
            let n = n.trim().parse().map_err(|_| Error::Config(format!("{n:?} in {pair:?} is not a whole number")))?;
            Ok((PatchAxis::parse(axis.trim()), n))
        })
        .collect()
}

/// The patch arithmetic of one dataset, resolved against its variables at build.
#[derive(Debug, Clone)]
pub struct Patcher {
    /// Names of the patched axes, for the batch (a dimension name, or `axis{k}`).
    pub dims: Vec<String>,
    /// The extent patches are placed in on each patched axis: the field's (the same for
    /// every patched variable), or the region `sel` picked on it.
    pub extent: Vec<u64>,
    /// Where that extent starts on each patched axis (0, or the `sel` region's start):
    /// origins are positions in the whole field.
    pub offset: Vec<u64>,
    /// The patch extent on each patched axis.
    pub size: Vec<u64>,
    /// Grid step per axis (grid mode) or `None` (random mode).
    stride: Option<Vec<u64>>,
    /// Grid positions per axis (grid mode).
    positions: Vec<u64>,
    /// Rows per sample.
    per_sample: u64,
    /// Per patched axis, its coordinate when the dataset reads coordinates and the store has
    /// one (`None` otherwise): each batch then carries the values each patch covers.
    pub coordinates: Vec<Option<std::sync::Arc<crate::coords::Coordinate>>>,
}

impl Patcher {
    /// Resolve `options` on a field of `extent` (one per patched axis, named `dims`).
    ///
    /// # Errors
    /// [`Error::InvalidOption`] for a zero or too large size, a stride of the wrong length or
    /// zero, zero patches per sample, or a grid too large to count.
    pub fn new(options: &PatchOptions, dims: Vec<String>, extent: Vec<u64>) -> Result<Self> {
        let size: Vec<u64> = options.size.iter().map(|(_, s)| *s).collect();
        for ((d, &s), &e) in dims.iter().zip(&size).zip(&extent) {
            if s == 0 || s > e {
                return Err(Error::option(
                    "patch",
                    format!("`patch` size {s} on {d} must be between 1 and the axis length {e}; pass a size that fits"),
                ));
            }
        }
        let (stride, per_sample, positions) = match &options.mode {
            PatchMode::Random { per_sample: 0 } => {
                return Err(Error::option("patches_per_sample", "`patches_per_sample` must be at least 1"));
            }
            PatchMode::Random { per_sample } => (None, *per_sample, Vec::new()),
            PatchMode::Grid { stride } => {
                let stride = if stride.is_empty() { size.clone() } else { stride.clone() };
                if stride.len() != size.len() || stride.contains(&0) {
                    return Err(Error::option(
                        "patch_stride",
                        format!("`patch_stride` {stride:?} needs one step of at least 1 per patched axis {dims:?}"),
                    ));
                }
                let positions: Vec<u64> =
                    extent.iter().zip(&size).zip(&stride).map(|((e, s), st)| (e - s) / st + 1).collect();
                let count = positions.iter().try_fold(1u64, |acc, &p| acc.checked_mul(p));
                let Some(count) = count.filter(|&c| u32::try_from(c).is_ok()) else {
                    return Err(Error::option(
                        "patch_stride",
                        format!("a grid of {positions:?} patches per sample is too many; raise `patch_stride`"),
                    ));
                };
                (Some(stride), count, positions)
            }
        };
        let offset = vec![0; extent.len()];
        Ok(Self { dims, extent, offset, size, stride, positions, per_sample, coordinates: Vec::new() })
    }

    /// Rows per sample: grid positions, or random patches per sample.
    pub fn per_sample(&self) -> u64 {
        self.per_sample
    }

    /// Row `row`'s patch origin on each patched axis, appended to `out`.
    pub fn origin(&self, row: u64, seed: u64, epoch: u64, split: Split, out: &mut Vec<u64>) {
        match &self.stride {
            Some(stride) => {
                // The patch index in C order over the grid's positions.
                let mut p = row % self.per_sample;
                let start = out.len();
                out.resize(start + stride.len(), 0);
                for ax in (0..stride.len()).rev() {
                    out[start + ax] = self.offset[ax] + (p % self.positions[ax]) * stride[ax];
                    p /= self.positions[ax];
                }
            }
            None => {
                let mut rng = stream(&key(seed, epoch, split, PURPOSE_PATCH, row));
                let span = self.extent.iter().zip(&self.size).zip(&self.offset);
                out.extend(span.map(|((e, s), o)| o + below(&mut rng, e - s + 1)));
            }
        }
    }

    /// Every patch of a grid is drawn, or `per_sample` random ones.
    pub fn mode_name(&self) -> &'static str {
        if self.stride.is_some() { "grid" } else { "random" }
    }
}

/// Where one variable's patch lies in its sample: for each patched axis, the position of that
/// axis among the variable's inner (sample-first) dimensions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PatchedDims(pub Vec<usize>);

/// The box `origin .. origin + size` on inner positions `dims` of a row of inner shape
/// `inner`, the other axes whole, as a start and a length per inner axis.
pub(crate) fn box_in_row(
    inner: &[usize],
    (dims, origin, size): (&[usize], &[u64], &[u64]),
) -> (Vec<usize>, Vec<usize>) {
    let mut start = vec![0usize; inner.len()];
    let mut len = inner.to_vec();
    for ((&d, &o), &s) in dims.iter().zip(origin).zip(size) {
        start[d] = o as usize;
        len[d] = s as usize;
    }
    (start, len)
}

/// Copy the patch at `origin` (one start per patched axis, at `dims`) of one sample (`src`,
/// C order over `inner`, `item` bytes per element) out through `push`, run by run in C order.
///
/// Hand-written: ndarray slices typed elements, and the engine moves untyped bytes; this walks
/// the patch's rows and copies each as one run of its last axis.
pub(crate) fn copy_patch(
    src: &[u8],
    inner: &[usize],
    item: usize,
    (dims, origin, size): (&PatchedDims, &[u64], &[u64]),
    mut push: impl FnMut(&[u8]),
) {
    if inner.is_empty() {
        push(&src[..item]);
        return;
    }
    let positions = row_positions(inner, (&dims.0, origin, size), &[]);
    copy_positions(src, inner, item, &positions, &mut push);
}

/// Copy the elements at `positions` (per inner axis, in order; [`row_positions`]) of one
/// sample (`src`, C order over `inner`) out through `push`, run by run in C order.
pub(crate) fn copy_positions(
    src: &[u8],
    inner: &[usize],
    item: usize,
    positions: &[Vec<usize>],
    push: &mut impl FnMut(&[u8]),
) {
    let mut stride = vec![item; inner.len()];
    for ax in (0..inner.len().saturating_sub(1)).rev() {
        stride[ax] = stride[ax + 1] * inner[ax + 1];
    }
    let _ = for_each_run_in::<()>(positions, |at, n| {
        let from: usize = at.iter().zip(&stride).map(|(p, s)| p * s).sum();
        push(&src[from..from + n * item]);
        Ok(())
    });
}

/// A `sel` list's positions on one inner dimension of a variable (`dim` among its inner
/// dimensions), in the order the labels were given: the batch keeps that order.
#[derive(Debug, Clone)]
pub(crate) struct AxisPicks {
    pub dim: usize,
    pub positions: std::sync::Arc<[u64]>,
    /// The distinct positions as ascending runs `(start, len)`: the boxes tiles are planned for.
    pub runs: std::sync::Arc<[(u64, u64)]>,
}

impl AxisPicks {
    pub(crate) fn new(dim: usize, positions: std::sync::Arc<[u64]>) -> Self {
        let mut sorted = positions.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        let mut runs: Vec<(u64, u64)> = Vec::new();
        for x in sorted {
            match runs.last_mut() {
                Some((s, n)) if *s + *n == x => *n += 1,
                _ => runs.push((x, 1)),
            }
        }
        Self { dim, positions, runs: runs.into() }
    }
}

/// The positions a row copies on each inner axis, in order: `origin .. origin + size` on the
/// box's dimensions `dims`, every position on the others, and a `sel` list's positions where
/// one picks them.
pub(crate) fn row_positions(
    inner: &[usize],
    row_box: (&[usize], &[u64], &[u64]),
    picks: &[AxisPicks],
) -> Vec<Vec<usize>> {
    let (start, len) = box_in_row(inner, row_box);
    let mut positions: Vec<Vec<usize>> = start.iter().zip(&len).map(|(&s, &l)| (s..s + l).collect()).collect();
    for p in picks {
        positions[p.dim] = p.positions.iter().map(|&x| x as usize).collect();
    }
    positions
}

/// Call `run(at, n)` for each run of a row's `positions` in C order: `at` is the inner
/// position of its first element, `n` the consecutive positions from it on the last axis.
///
/// Hand-written, like [`copy_patch`]: the engine's rows are untyped bytes.
pub(crate) fn for_each_run_in<E>(
    positions: &[Vec<usize>],
    mut run: impl FnMut(&[usize], usize) -> Result<(), E>,
) -> Result<(), E> {
    let Some((last, outer)) = positions.split_last() else { return Ok(()) };
    if positions.iter().any(Vec::is_empty) {
        return Ok(());
    }
    let mut runs = Vec::new();
    let mut i = 0;
    while i < last.len() {
        let n = (1..last.len() - i).take_while(|&k| last[i + k] == last[i] + k).count() + 1;
        runs.push((last[i], n));
        i += n;
    }
    let lens: Vec<usize> = outer.iter().map(Vec::len).collect();
    let (mut idx, zeros) = (vec![0usize; outer.len()], vec![0usize; outer.len()]);
    let mut at = vec![0usize; positions.len()];
    loop {
        for (a, p) in outer.iter().enumerate() {
            at[a] = p[idx[a]];
        }
        for &(first, n) in &runs {
            at[outer.len()] = first;
            run(&at, n)?;
        }
        if !crate::geometry::step_in_box(&mut idx, &zeros, &lens) {
            return Ok(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    fn grid(size: &[u64], stride: &[u64], extent: &[u64]) -> Patcher {
        let size = size.iter().enumerate().map(|(i, &s)| (PatchAxis::Axis(i + 1), s)).collect();
        let dims = (0..extent.len()).map(|i| format!("axis{}", i + 1)).collect();
        Patcher::new(&PatchOptions { size, mode: PatchMode::Grid { stride: stride.to_vec() } }, dims, extent.to_vec())
            .unwrap()
    }

    #[test]
    fn a_grid_steps_by_its_stride_and_drops_a_narrow_remainder() {
        let p = grid(&[2, 3], &[], &[5, 7]);
        assert_eq!(p.per_sample(), 2 * 2);
        let origins: Vec<Vec<u64>> = (0..4)
            .map(|r| {
                let mut o = Vec::new();
                p.origin(r, 0, 0, Split::Train, &mut o);
                o
            })
            .collect();
        assert_eq!(origins, vec![vec![0, 0], vec![0, 3], vec![2, 0], vec![2, 3]]);
        let overlapping = grid(&[2], &[1], &[5]);
        assert_eq!(overlapping.per_sample(), 4);
    }

    #[test]
    fn random_origins_fit_and_follow_seed_and_epoch() {
        let options =
            PatchOptions { size: vec![(PatchAxis::Name("x".into()), 3)], mode: PatchMode::Random { per_sample: 2 } };
        let p = Patcher::new(&options, vec!["x".into()], vec![10]).unwrap();
        let draw = |seed, epoch| -> Vec<u64> {
            let mut o = Vec::new();
            (0..200).for_each(|r| p.origin(r, seed, epoch, Split::Train, &mut o));
            o
        };
        assert!(draw(1, 0).iter().all(|&o| o <= 7));
        assert_eq!(draw(1, 0), draw(1, 0));
        assert_ne!(draw(1, 0), draw(1, 1));
        assert_ne!(draw(1, 0), draw(2, 0));
        let seen: std::collections::BTreeSet<u64> = draw(1, 0).into_iter().collect();
        assert_eq!(seen.len(), 8, "every origin that fits is drawn");
    }

    #[test]
    fn bad_sizes_and_strides_are_refused_with_the_axis() {
        let options = |size, mode| PatchOptions { size: vec![(PatchAxis::Name("lat".into()), size)], mode };
        let e =
            Patcher::new(&options(9, PatchMode::Grid { stride: vec![] }), vec!["\"lat\"".into()], vec![8]).unwrap_err();
        assert!(e.to_string().contains("\"lat\"") && e.to_string().contains('8'), "{e}");
        assert!(Patcher::new(&options(0, PatchMode::Grid { stride: vec![] }), vec!["lat".into()], vec![8]).is_err());
        assert!(Patcher::new(&options(2, PatchMode::Grid { stride: vec![0] }), vec!["lat".into()], vec![8]).is_err());
        assert!(
            Patcher::new(&options(2, PatchMode::Grid { stride: vec![1, 1] }), vec!["lat".into()], vec![8]).is_err()
        );
        assert!(Patcher::new(&options(2, PatchMode::Random { per_sample: 0 }), vec!["lat".into()], vec![8]).is_err());
    }

    #[test]
    fn the_binding_words_build_the_options_or_say_what_is_wrong() {
        let size = parse_axis_sizes("lat=4, 2=3").unwrap();
        assert_eq!(size, vec![(PatchAxis::Name("lat".into()), 4), (PatchAxis::Axis(2), 3)]);
        let stride = Some(vec![(PatchAxis::Axis(2), 1)]);
        let o = PatchOptions::from_parts(size.clone(), PatchPlacement::Grid, stride, None).unwrap();
        assert_eq!(o.mode, PatchMode::Grid { stride: vec![4, 1] });
        let o = PatchOptions::from_parts(size.clone(), PatchPlacement::Random, None, None).unwrap();
        assert_eq!(o.mode, PatchMode::Random { per_sample: 1 });
        let refused =
            |mode, stride, n| PatchOptions::from_parts(size.clone(), mode, stride, n).unwrap_err().to_string();
        assert!("tiles".parse::<PatchPlacement>().unwrap_err().to_string().contains("'grid' or 'random'"));
        assert!(refused(PatchPlacement::Grid, None, Some(2)).contains("patches_per_sample"));
        assert!(refused(PatchPlacement::Random, Some(vec![]), None).contains("patch_stride"));
        let lon = Some(vec![(PatchAxis::Name("lon".into()), 2)]);
        assert!(refused(PatchPlacement::Grid, lon, None).contains("\"lon\""));
        assert!(parse_axis_sizes("lat:4").unwrap_err().to_string().contains("AXIS=SIZE"));
        assert!(parse_axis_sizes("lat=x").is_err());
    }

    #[test]
    fn copy_patch_equals_slicing() {
        // A (4, 5, 3) sample of u16, patched on its first two dims.
        let inner = [4usize, 5, 3];
        let src: Vec<u8> = (0..60u16).flat_map(u16::to_le_bytes).collect();
        let mut out = Vec::new();
        copy_patch(&src, &inner, 2, (&PatchedDims(vec![0, 1]), &[1, 2], &[2, 3]), |run| out.extend_from_slice(run));
        let got: Vec<u16> = out.chunks(2).map(|b| u16::from_le_bytes([b[0], b[1]])).collect();
        let want: Vec<u16> =
            (1..3).flat_map(|i| (2..5).flat_map(move |j| (0..3).map(move |k| (i * 15 + j * 3 + k) as u16))).collect();
        assert_eq!(got, want);
    }

    #[test]
    fn picked_positions_copy_like_fancy_indexing() {
        // A (4, 5, 3) sample of u16: levels [3, 0, 1] (out of order, a run inside) on axis 0,
        // the box 1..4 on axis 1, columns [2, 0] on the last axis.
        let inner = [4usize, 5, 3];
        let src: Vec<u8> = (0..60u16).flat_map(u16::to_le_bytes).collect();
        let picks = [AxisPicks::new(0, vec![3, 0, 1].into()), AxisPicks::new(2, vec![2, 0].into())];
        let positions = row_positions(&inner, (&[1], &[1], &[3]), &picks);
        let mut out = Vec::new();
        copy_positions(&src, &inner, 2, &positions, &mut |run: &[u8]| out.extend_from_slice(run));
        let got: Vec<u16> = out.chunks(2).map(|b| u16::from_le_bytes([b[0], b[1]])).collect();
        let want: Vec<u16> = [3u16, 0, 1]
            .iter()
            .flat_map(|&i| (1..4u16).flat_map(move |j| [2u16, 0].map(move |k| i * 15 + j * 3 + k)))
            .collect();
        assert_eq!(got, want);
    }
}
