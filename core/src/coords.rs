//! The sample axis's coordinate: its values read once at open, CF time decoded, carried by
//! every batch (`Batch::coords`) and used to select samples by label.
//!
//! The coordinate is the 1-d array named like the sample axis's dimension (`time` for a
//! variable whose `dimension_names`/`_ARRAY_DIMENSIONS` say `time` there) beside the first
//! variable, with one value per sample. A CF time (`units = "<unit> since <date>"`, with the
//! standard, gregorian or proleptic_gregorian calendar) becomes nanoseconds since
//! 1970-01-01 (numpy's `datetime64[ns]`); other calendars and other units stay numbers.

use crate::array::{DType, NdArray};
use crate::error::{Error, Result};
use crate::runtime::Storage;
use crate::zarr::{TileLocation, ZarrArray};

/// A coordinate's values.
#[derive(Debug, Clone, PartialEq)]
pub enum CoordValues {
    /// CF time as nanoseconds since 1970-01-01T00:00:00.
    Time(Vec<i64>),
    /// Any other numbers.
    Number(Vec<f64>),
}

/// One coordinate of the sample axis.
#[derive(Debug, Clone, PartialEq)]
pub struct Coordinate {
    /// Its name (the sample axis's dimension name).
    pub name: String,
    /// Its values, one per sample.
    pub values: CoordValues,
}

/// A selection by label on one dimension. On the sample axis it selects samples (a range as
/// the split's sample range, labels as a mask); on an inner axis it cuts every row to the
/// positions it picks (a region, `dataset/build.rs`), and only the tiles they touch are read.
#[derive(Debug, Clone, PartialEq)]
pub struct LabelSel {
    /// The dimension's name (its coordinate's name).
    pub dim: String,
    /// What it picks.
    pub pick: LabelPick,
}

/// What a [`LabelSel`] picks of its coordinate's values.
#[derive(Debug, Clone, PartialEq)]
pub enum LabelPick {
    /// The values in `[lo, hi]`, inclusive (xarray's `sel` with a slice).
    Range {
        /// The lowest value selected.
        lo: Label,
        /// The highest value selected.
        hi: Label,
    },
    /// Exactly these values, in this order (xarray's `sel` with a list): a list of levels.
    Labels(Vec<Label>),
}

/// A label bound of a selection: a time (ns since 1970) or a number.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Label {
    /// Nanoseconds since 1970-01-01.
    Time(i64),
    /// A number.
    Number(f64),
}

impl Label {
    /// A bound as a binding without a date type writes it (JS, the command line): a number,
    /// or a date `YYYY-MM-DD[THH:MM[:SS]]` in UTC.
    ///
    /// # Errors
    /// [`Error::InvalidOption`] (`sel`) for text that is neither, naming it.
    pub fn from_text(text: &str) -> Result<Self> {
        let text = text.trim();
        if let Ok(x) = text.parse::<f64>() {
            return Ok(Self::Number(x));
        }
        epoch_ns(text).map(Self::Time).ok_or_else(|| {
            Error::option(
                "sel",
                format!(
                    "`sel` bound {text:?} is neither a number nor a date; write dates as YYYY-MM-DD, optionally with \
                     THH:MM:SS (UTC)"
                ),
            )
        })
    }
}

impl std::fmt::Display for Label {
    /// A number as written, a time as `YYYY-MM-DDTHH:MM:SS` (UTC): how error messages name a
    /// label the user gave.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            Self::Number(x) => write!(f, "{x}"),
            Self::Time(ns) => f.write_str(&iso_utc(ns)),
        }
    }
}

/// `sel`: selections by label, one per dimension, in the order given. As data, an object
/// `{dim: pick}` whose pick is `[low, high]` (both inclusive) or `{"labels": [a, b, ...]}`,
/// each label a number or a date `YYYY-MM-DD[THH:MM[:SS[.fraction]]]` (UTC) in
/// [`Label::from_text`]'s forms. The one reading of that form for every binding.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Sel(pub Vec<LabelSel>);

impl serde::Serialize for Label {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        match *self {
            Self::Number(x) => s.serialize_f64(x),
            Self::Time(_) => s.serialize_str(&self.to_string()),
        }
    }
}

impl<'de> serde::Deserialize<'de> for Label {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct Visit;
        impl serde::de::Visitor<'_> for Visit {
            type Value = Label;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a number or a date YYYY-MM-DD[THH:MM[:SS]]")
            }
            fn visit_f64<E: serde::de::Error>(self, x: f64) -> std::result::Result<Label, E> {
                Ok(Label::Number(x))
            }
            #[allow(clippy::cast_precision_loss, reason = "a coordinate label, compared as f64")]
            fn visit_i64<E: serde::de::Error>(self, x: i64) -> std::result::Result<Label, E> {
                Ok(Label::Number(x as f64))
            }
            #[allow(clippy::cast_precision_loss, reason = "a coordinate label, compared as f64")]
            fn visit_u64<E: serde::de::Error>(self, x: u64) -> std::result::Result<Label, E> {
                Ok(Label::Number(x as f64))
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> std::result::Result<Label, E> {
                Label::from_text(s).map_err(E::custom)
            }
        }
        d.deserialize_any(Visit)
    }
}

impl serde::Serialize for Sel {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        #[derive(serde::Serialize)]
        struct Labels<'a> {
            labels: &'a [Label],
        }
        let mut m = s.serialize_map(Some(self.0.len()))?;
        for sel in &self.0 {
            match &sel.pick {
                LabelPick::Range { lo, hi } => m.serialize_entry(&sel.dim, &[lo, hi])?,
                LabelPick::Labels(labels) => m.serialize_entry(&sel.dim, &Labels { labels })?,
            }
        }
        m.end()
    }
}

// By hand: the caller's order is kept, and a pick that is neither form is refused saying
// what to write (a derived `untagged` enum would only say that nothing matched).
impl<'de> serde::Deserialize<'de> for Sel {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct Pick(LabelPick);
        impl<'de> serde::Deserialize<'de> for Pick {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
                struct Visit;
                impl<'de> serde::de::Visitor<'de> for Visit {
                    type Value = Pick;
                    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                        f.write_str("[low, high] (both inclusive) or {\"labels\": [a, b, ...]}")
                    }
                    fn visit_seq<A: serde::de::SeqAccess<'de>>(
                        self,
                        mut seq: A,
                    ) -> std::result::Result<Pick, A::Error> {
                        use serde::de::Error as _;
                        let lo = seq.next_element::<Label>()?;
                        let hi = seq.next_element::<Label>()?;
                        match (lo, hi, seq.next_element::<serde::de::IgnoredAny>()?) {
                            (Some(lo), Some(hi), None) => Ok(Pick(LabelPick::Range { lo, hi })),
                            _ => Err(A::Error::custom(
                                "a range is [low, high], two labels; list labels as {\"labels\": [...]}",
                            )),
                        }
                    }
                    fn visit_map<A: serde::de::MapAccess<'de>>(
                        self,
                        mut map: A,
                    ) -> std::result::Result<Pick, A::Error> {
                        use serde::de::Error as _;
                        let mut labels = None;
                        while let Some(key) = map.next_key::<String>()? {
                            if key != "labels" {
                                return Err(A::Error::unknown_field(&key, &["labels"]));
                            }
                            labels = Some(map.next_value::<Vec<Label>>()?);
                        }
                        labels.map(|l| Pick(LabelPick::Labels(l))).ok_or_else(|| A::Error::missing_field("labels"))
                    }
                }
                d.deserialize_any(Visit)
            }
        }
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = Sel;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("{dim: [low, high] or {\"labels\": [...]}}")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> std::result::Result<Sel, A::Error> {
                let mut out = Vec::new();
                while let Some((dim, Pick(pick))) = map.next_entry::<String, Pick>()? {
                    out.push(LabelSel { dim, pick });
                }
                Ok(Sel(out))
            }
        }
        d.deserialize_map(Visit)
    }
}

#[cfg(feature = "schema")]
impl schemars::JsonSchema for Sel {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Sel".into()
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "{dim: [low, high] or {\"labels\": [a, b, ...]}}; labels are numbers or dates.",
            "x-ts": "Record<string, [string | number, string | number] | { labels: (string | number)[] }>",
            "x-python": {"type": "dict[str, list[str | float] | dict[str, list[str | float]]]"},
        })
    }
}

impl LabelSel {
    /// `dim`'s values in `[lo, hi]`.
    pub fn range(dim: &str, lo: Label, hi: Label) -> Self {
        Self { dim: dim.to_string(), pick: LabelPick::Range { lo, hi } }
    }

    /// `dim`'s values `labels`, in that order.
    pub fn labels(dim: &str, labels: Vec<Label>) -> Self {
        Self { dim: dim.to_string(), pick: LabelPick::Labels(labels) }
    }

    /// `dim` between two bounds in [`Label::from_text`]'s forms.
    ///
    /// # Errors
    /// As [`Label::from_text`].
    pub fn from_text(dim: &str, lo: &str, hi: &str) -> Result<Self> {
        Ok(Self::range(dim, Label::from_text(lo)?, Label::from_text(hi)?))
    }

    /// The command line's form: `DIM=LO,HI` (a range) or `DIM=[A,B,...]` (labels), each in
    /// [`Label::from_text`]'s forms.
    ///
    /// # Errors
    /// [`Error::Config`] for text of neither form, or a bound that is neither a number nor a
    /// date.
    pub fn from_arg(text: &str) -> Result<Self> {
        let bad = || Error::Config(format!("expected DIM=LO,HI or DIM=[A,B,...], got {text:?}"));
        let (dim, pick) = text.split_once('=').ok_or_else(bad)?;
        if let Some(list) = pick.trim().strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            let labels = list.split(',').map(Label::from_text).collect::<Result<Vec<_>>>()?;
            return Ok(Self::labels(dim.trim(), labels));
        }
        let (lo, hi) = pick.split_once(',').ok_or_else(bad)?;
        Self::from_text(dim.trim(), lo, hi)
    }

    /// The positions of `coordinate` this picks, ascending for a range, in the given order
    /// for labels.
    ///
    /// # Errors
    /// As [`Coordinate::select`] and [`Coordinate::positions`].
    pub fn positions(&self, coordinate: &Coordinate) -> Result<Vec<u64>> {
        match &self.pick {
            LabelPick::Range { lo, hi } => coordinate.select(*lo, *hi).map(|(a, b)| (a..b).collect()),
            LabelPick::Labels(labels) => coordinate.positions(labels),
        }
    }
}

impl Coordinate {
    /// The positions whose value lies in `[lo, hi]` (inclusive, as xarray's `sel` with a
    /// slice) as a range `[start, stop)`, on a strictly increasing or decreasing coordinate
    /// (latitude often runs from 90 to -90).
    ///
    /// # Errors
    /// [`Error::InvalidOption`] for a time bound on a numeric coordinate (or the reverse), a
    /// coordinate that is not monotonic, or a range that selects nothing.
    pub fn select(&self, lo: Label, hi: Label) -> Result<(u64, u64)> {
        let (start, stop) = match (&self.values, lo, hi) {
            (CoordValues::Time(v), Label::Time(a), Label::Time(b)) => range_in(v, &a, &b),
            (CoordValues::Number(v), Label::Number(a), Label::Number(b)) => range_in(v, &a, &b),
            _ => return Err(self.wrong_kind()),
        }?;
        if start >= stop {
            return Err(Error::option("sel", format!("`sel` on {:?} selects nothing; widen the range", self.name)));
        }
        Ok((start as u64, stop as u64))
    }

    /// The position of each of `labels`, in order (exact matches).
    ///
    /// # Errors
    /// [`Error::InvalidOption`] for no labels, a label of the other kind, or one the coordinate
    /// does not hold, naming it.
    pub fn positions(&self, labels: &[Label]) -> Result<Vec<u64>> {
        if labels.is_empty() {
            return Err(Error::option("sel", format!("`sel` on {:?} lists no label; list at least one", self.name)));
        }
        labels
            .iter()
            .map(|label| {
                let at = match (&self.values, label) {
                    (CoordValues::Time(v), Label::Time(x)) => v.iter().position(|y| y == x),
                    (CoordValues::Number(v), Label::Number(x)) => v.iter().position(|y| y == x),
                    _ => return Err(self.wrong_kind()),
                };
                at.map(|p| p as u64).ok_or_else(|| {
                    Error::option(
                        "sel",
                        format!(
                            "`sel` on {:?}: {label} is not among its {} values; list values the coordinate holds",
                            self.name,
                            self.len()
                        ),
                    )
                })
            })
            .collect()
    }

    fn wrong_kind(&self) -> Error {
        Error::option(
            "sel",
            format!(
                "`sel` on {:?} needs {} bounds; give the bounds as {}",
                self.name,
                self.kind(),
                if self.kind() == "time" { "dates, e.g. \"2010-01-01\"" } else { "numbers" }
            ),
        )
    }

    fn kind(&self) -> &'static str {
        match self.values {
            CoordValues::Time(_) => "time",
            CoordValues::Number(_) => "number",
        }
    }

    /// Its number of values.
    pub fn len(&self) -> usize {
        match &self.values {
            CoordValues::Time(v) => v.len(),
            CoordValues::Number(v) => v.len(),
        }
    }

    /// True when it has no value.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The values `start .. start + len` after each start in `starts`, one run per start,
    /// in order: what a batch carries for a patched axis (rows × patch extent). A patch fits
    /// its field, whose length the coordinate has, so every run is whole.
    pub fn runs(&self, starts: impl Iterator<Item = u64>, len: u64) -> CoordValues {
        fn cut<T: Copy>(v: &[T], starts: impl Iterator<Item = u64>, len: u64) -> Vec<T> {
            starts.flat_map(|s| v.get(s as usize..(s + len) as usize).unwrap_or_default().iter().copied()).collect()
        }
        match &self.values {
            CoordValues::Time(v) => CoordValues::Time(cut(v, starts, len)),
            CoordValues::Number(v) => CoordValues::Number(cut(v, starts, len)),
        }
    }

    /// The values of samples `samples`, in order, as the batch carries them.
    pub fn take(&self, samples: &[u64]) -> CoordValues {
        match &self.values {
            CoordValues::Time(v) => CoordValues::Time(samples.iter().map(|&t| v[t as usize]).collect()),
            CoordValues::Number(v) => CoordValues::Number(samples.iter().map(|&t| v[t as usize]).collect()),
        }
    }
}

/// `[start, stop)` of the values in `[lo, hi]` of strictly increasing or decreasing `v`.
fn range_in<T: PartialOrd>(v: &[T], lo: &T, hi: &T) -> Result<(usize, usize)> {
    use std::cmp::Ordering::{Greater, Less};
    // NaN compares as unordered, so it counts as neither.
    let all = |o| v.windows(2).all(|w| w[0].partial_cmp(&w[1]) == Some(o));
    if all(Less) {
        Ok((v.partition_point(|x| x < lo), v.partition_point(|x| x <= hi)))
    } else if all(Greater) {
        Ok((v.partition_point(|x| x > hi), v.partition_point(|x| x >= lo)))
    } else {
        Err(Error::option("sel", "`sel` needs a strictly increasing or decreasing coordinate"))
    }
}

/// Read the sample-axis coordinate `name` beside the variable at `variable_path`, if the store
/// has one of `n_samples` values (`None` when it has none).
///
/// # Errors
/// [`Error::Config`] for a coordinate of another length, type or a sharded layout;
/// otherwise what reading it reports.
pub async fn read_coordinate(
    storage: &dyn Storage,
    variable_path: &str,
    name: &str,
    n_samples: u64,
) -> Result<Option<Coordinate>> {
    read_group_coordinate(storage, group_of(variable_path), name, n_samples).await
}

/// The group holding the array at `path` (`""`: the root).
pub(crate) fn group_of(path: &str) -> &str {
    path.rsplit_once('/').map_or("", |(g, _)| g)
}

/// The path of `name` in `group`.
fn in_group(group: &str, name: &str) -> String {
    if group.is_empty() { name.to_string() } else { format!("{group}/{name}") }
}

/// [`read_coordinate`] of the group at `group` (`""`: the root).
async fn read_group_coordinate(
    storage: &dyn Storage,
    group: &str,
    name: &str,
    n_samples: u64,
) -> Result<Option<Coordinate>> {
    let path = in_group(group, name);
    let array = match crate::zarr::open_array(storage, &path).await {
        Ok(a) => a,
        Err(Error::ArrayNotFound { .. }) => return Ok(None),
        Err(e) => return Err(e),
    };
    if array.shape() != [n_samples] {
        return Err(Error::Config(format!(
            "the coordinate {path:?} has shape {:?} but the sample axis has {n_samples} samples",
            array.shape()
        )));
    }
    let raw = read_numbers(storage, &array).await?;
    let units = array.attributes().get("units").and_then(|u| u.as_str());
    let calendar = array.attributes().get("calendar").and_then(|c| c.as_str());
    let values = match units.and_then(|u| cf_time(&raw, u, calendar)) {
        Some(ns) => CoordValues::Time(ns),
        None => CoordValues::Number(raw),
    };
    Ok(Some(Coordinate { name: name.to_string(), values }))
}

/// The sample axis's coordinate `name` of every group holding a variable (`variable_paths`,
/// the first variable's group first): where two or more groups have one (variables in
/// several groups of a store, or in joined stores), their values must be equal, since their
/// samples are paired by index and a shifted axis would pair the wrong fields without a
/// sign. Returns the first variable's group's coordinate. A coordinate this engine cannot
/// read (sharded, not numbers) is left out of the comparison, so a store that opened before
/// still opens; with `need_first`, the first group's must be readable.
///
/// # Errors
/// [`Error::Config`] naming both coordinates, the first sample where they differ and the
/// store, when two disagree; with `need_first`, what [`read_coordinate`] reports for the
/// first group's.
pub async fn read_agreed_coordinate(
    storage: &dyn Storage,
    variable_paths: &[&str],
    name: &str,
    n_samples: u64,
    need_first: bool,
) -> Result<Option<Coordinate>> {
    let mut groups: Vec<&str> = Vec::new();
    for p in variable_paths {
        let parent = group_of(p);
        if !groups.contains(&parent) {
            groups.push(parent);
        }
    }
    let mut first: Option<(String, Coordinate)> = None;
    let mut mine = None;
    for (i, g) in groups.iter().enumerate() {
        let c = match read_group_coordinate(storage, g, name, n_samples).await {
            Ok(Some(c)) => c,
            Err(e) if i == 0 && need_first => return Err(e),
            Ok(None) | Err(_) => continue,
        };
        let path = in_group(g, name);
        match &first {
            None => first = Some((path, c.clone())),
            Some((seen, f)) => disagree(seen, &f.values, &path, &c.values, storage)?,
        }
        if i == 0 {
            mine = Some(c);
        }
    }
    Ok(mine)
}

/// `Ok` when two coordinates are equal, else the error that names where they part.
fn disagree(a_path: &str, a: &CoordValues, b_path: &str, b: &CoordValues, storage: &dyn Storage) -> Result<()> {
    let at = |v: &CoordValues, i: usize| match v {
        CoordValues::Time(ns) => ns.get(i).map_or("-".into(), |&t| iso_utc(t)),
        CoordValues::Number(x) => x.get(i).map_or("-".into(), ToString::to_string),
    };
    let n = match (a, b) {
        (CoordValues::Time(x), CoordValues::Time(y)) => x.iter().zip(y).position(|(p, q)| p != q),
        (CoordValues::Number(x), CoordValues::Number(y)) => x.iter().zip(y).position(|(p, q)| p != q),
        _ => Some(0),
    };
    let Some(i) = n else { return Ok(()) };
    Err(Error::Config(format!(
        "the variables' sample axes disagree: {a_path:?} and {b_path:?} differ first at sample {i} ({} against {}); \
         join stores (or groups) whose sample axes hold the same values, or select the same span of each: {}",
        at(a, i),
        at(b, i),
        storage.location()
    )))
}

/// Nanoseconds since 1970 as `YYYY-MM-DDTHH:MM:SS` (UTC), for messages.
fn iso_utc(ns: i64) -> String {
    let (days, secs) = (ns.div_euclid(86_400_000_000_000), ns.rem_euclid(86_400_000_000_000) / 1_000_000_000);
    // The civil date of a day count (Howard Hinnant's algorithm, the inverse of `epoch_ns`'s).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}", secs / 3600, secs / 60 % 60, secs % 60)
}

/// Every value of a 1-d, unsharded numeric array, as `f64` (integers up to 2^53 exactly).
pub(crate) async fn read_numbers(storage: &dyn Storage, array: &ZarrArray) -> Result<Vec<f64>> {
    let n = array.shape()[0] as usize;
    let per = array.tile_shape()[0].max(1);
    let mut out = Vec::with_capacity(n);
    for k in 0..(n as u64).div_ceil(per) {
        let TileLocation::Object { key } = array.tile_location(&[k]) else {
            return Err(Error::Config(format!(
                "the coordinate {:?} is sharded; reading sharded coordinates is not supported",
                array.path()
            )));
        };
        let located = format!("{}/{key}", storage.location().trim_end_matches('/'));
        let bytes = storage
            .get(&key)
            .await
            .map_err(|e| Error::Storage { message: format!("cannot read the coordinate ({e})"), key: located })?;
        let tile = array.decode_tile(bytes, &key)?;
        out.extend(numbers(&tile, array.path())?);
    }
    out.truncate(n);
    Ok(out)
}

/// A decoded tile's elements as `f64`.
fn numbers(a: &NdArray, path: &str) -> Result<Vec<f64>> {
    fn all<T: bytemuck::Pod>(a: &NdArray, f: impl Fn(T) -> f64) -> Option<Vec<f64>> {
        a.as_slice::<T>().map(|s| s.iter().map(|&x| f(x)).collect())
    }
    let v = match a.dtype {
        DType::Float64 => all::<f64>(a, |x| x),
        DType::Float32 => all::<f32>(a, f64::from),
        DType::Int64 => all::<i64>(a, |x| x as f64),
        DType::Int32 => all::<i32>(a, f64::from),
        DType::Uint32 => all::<u32>(a, f64::from),
        DType::Uint64 => all::<u64>(a, |x| x as f64),
        _ => None,
    };
    v.ok_or_else(|| Error::Config(format!("the coordinate {path:?} has dtype {:?}, not a number type", a.dtype)))
}

/// CF time values (`<unit> since <date>`) as nanoseconds since 1970, for the calendars that
/// are the proleptic Gregorian one; `None` for anything else (kept as numbers).
pub fn cf_time(raw: &[f64], units: &str, calendar: Option<&str>) -> Option<Vec<i64>> {
    if !matches!(calendar.unwrap_or("standard"), "standard" | "gregorian" | "proleptic_gregorian") {
        return None;
    }
    let (unit, since) = units.split_once(" since ")?;
    let ns_per: f64 = match unit.trim() {
        "days" | "day" | "d" => 86_400e9,
        "hours" | "hour" | "h" => 3_600e9,
        "minutes" | "minute" | "min" => 60e9,
        "seconds" | "second" | "s" => 1e9,
        "milliseconds" | "ms" => 1e6,
        "microseconds" | "us" => 1e3,
        "nanoseconds" | "ns" => 1.0,
        _ => return None,
    };
    let origin = epoch_ns(since.trim())?;
    raw.iter().map(|&x| x.is_finite().then(|| origin + (x * ns_per).round() as i64)).collect()
}

/// `YYYY-MM-DD[ T]HH:MM[:SS]` (UTC; a trailing `Z` or `+00:00` allowed) as ns since 1970.
///
/// Hand-written (a dozen lines of civil-date arithmetic): core takes no date crate for the
/// one origin a CF unit names.
fn epoch_ns(text: &str) -> Option<i64> {
    let text = text.trim_end_matches('Z').trim_end_matches("+00:00").trim_end_matches(" UTC");
    let (date, time) = text.split_once(['T', ' ']).unwrap_or((text, "0:0:0"));
    let mut d = date.split('-').map(|p| p.parse::<i64>().ok());
    let (y, m, day) = (d.next()??, d.next()??, d.next()??);
    let mut t = time.split(':').map(|p| p.parse::<f64>().ok());
    let (hh, mm, ss) = (t.next()??, t.next().flatten().unwrap_or(0.0), t.next().flatten().unwrap_or(0.0));
    // Days from 1970-01-01 in the proleptic Gregorian calendar (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (m + if m > 2 { -3 } else { 9 }) + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(days * 86_400_000_000_000 + ((hh * 3600.0 + mm * 60.0 + ss) * 1e9) as i64)
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    #[test]
    fn cf_units_decode_to_nanoseconds_since_1970() {
        assert_eq!(epoch_ns("1970-01-01"), Some(0));
        assert_eq!(epoch_ns("2000-03-01T12:00:00Z"), Some(951_912_000 * 1_000_000_000));
        assert_eq!(epoch_ns("1900-01-01 00:00:00"), Some(-2_208_988_800 * 1_000_000_000));
        let hours = cf_time(&[0.0, 6.0], "hours since 2020-01-01", Some("proleptic_gregorian")).unwrap();
        assert_eq!(hours, [1_577_836_800_000_000_000, 1_577_858_400_000_000_000]);
        assert_eq!(cf_time(&[0.0], "days since 2000-01-01", Some("360_day")), None, "kept as numbers");
        assert_eq!(cf_time(&[0.0], "metres", None), None);
    }

    #[test]
    fn times_print_as_their_civil_date() {
        for text in ["1970-01-01T00:00:00", "2020-02-29T18:30:05", "1899-12-31T23:59:59", "2100-03-01T00:00:00"] {
            assert_eq!(iso_utc(epoch_ns(text).unwrap()), text);
        }
    }

    #[test]
    fn text_bounds_are_numbers_or_dates() {
        assert_eq!(Label::from_text(" 2.5 ").unwrap(), Label::Number(2.5));
        assert_eq!(Label::from_text("1970-01-02").unwrap(), Label::Time(86_400_000_000_000));
        assert_eq!(Label::from_text("2000-03-01T12:00:00Z").unwrap(), Label::Time(951_912_000 * 1_000_000_000));
        assert!(Label::from_text("soon").unwrap_err().to_string().contains("\"soon\""));
        let sel = LabelSel::from_text("time", "2010-01-01", "2010-12-31").unwrap();
        assert!(matches!(sel.pick, LabelPick::Range { lo: Label::Time(a), hi: Label::Time(b) } if a < b));
        assert_eq!(Label::Time(951_912_000 * 1_000_000_000).to_string(), "2000-03-01T12:00:00");
        assert_eq!(Label::Time(-86_400_000_000_000).to_string(), "1969-12-31T00:00:00");
    }

    #[test]
    fn a_selection_is_inclusive_and_refuses_the_wrong_bounds() {
        let c = Coordinate { name: "time".into(), values: CoordValues::Time(vec![10, 20, 30, 40]) };
        assert_eq!(c.select(Label::Time(20), Label::Time(30)).unwrap(), (1, 3));
        assert_eq!(c.select(Label::Time(0), Label::Time(25)).unwrap(), (0, 2));
        assert!(c.select(Label::Number(1.0), Label::Number(2.0)).unwrap_err().to_string().contains("dates"));
        assert!(c.select(Label::Time(41), Label::Time(50)).unwrap_err().to_string().contains("selects nothing"));
        // A decreasing coordinate (latitude from north to south) selects its run too.
        let down = Coordinate { name: "lat".into(), values: CoordValues::Number(vec![60.0, 50.0, 40.0, 30.0]) };
        assert_eq!(down.select(Label::Number(35.0), Label::Number(50.0)).unwrap(), (1, 3));
        assert_eq!(down.select(Label::Number(-90.0), Label::Number(90.0)).unwrap(), (0, 4));
        let flat = Coordinate { name: "lat".into(), values: CoordValues::Number(vec![1.0, 2.0, 2.0]) };
        assert!(flat.select(Label::Number(0.0), Label::Number(3.0)).unwrap_err().to_string().contains("decreasing"));
    }
}
