//! What `open()`, `openInWorker` and the explorer accept from JavaScript: the option object
//! (camelCase, serde), its variables, patch axes, selections and read policy, and its
//! conversion to core's `SplitOptions` and `DatasetOptions` ([`JsOpenOptions::to_core`]).
//! Words and defaults are core's (`FromStr`, `Default`); this module only renames.

use insitubatch_core::internals::ZarrArray;

/// The option names `open()` accepts besides the knobs (the fields of [`JsOpenOptions`]);
/// [`open_option_names`] adds the knobs'.
pub const OWN_OPTION_NAMES: &[&str] = &[
    "variables",
    "sampleAxis",
    "shift",
    "fractions",
    "shuffleSplits",
    "splitSeed",
    "sampleRange",
    "readPolicy",
    "storageOptions",
    "credentials",
    "batchViews",
    "patch",
    "patchMode",
    "patchStride",
    "patchesPerSample",
    "sampleMask",
    "sampleWeights",
    "modelParallel",
    "modelParallelAxis",
    "sel",
    "concatDim",
    "cacheDir",
    "persist",
    "readonlyCache",
    "resetStaleCache",
];

/// Every option name `open()` accepts: core's knobs in JS's spelling, then this binding's own.
pub fn open_option_names() -> Vec<String> {
    insitubatch_core::Knobs::NAMES
        .iter()
        .map(|n| js_knob_name(n))
        .chain(OWN_OPTION_NAMES.iter().map(|n| (*n).to_string()))
        .collect()
}

/// JS's spelling of a knob: core's key in camelCase (`batch_size` is `batchSize`), the one
/// rename between core's [`Knobs`](insitubatch_core::Knobs) and `open()`'s options.
// By hand, not heck: it must be serde's `rename_all = "camelCase"` rule exactly (the rule
// `JsOpenOptions`' own keys follow, which serde does not export), and heck splits words at
// digits and capitals where serde only drops underscores.
pub fn js_knob_name(key: &str) -> String {
    let mut out = String::with_capacity(key.len());
    let mut upper = false;
    for c in key.chars() {
        if c == '_' {
            upper = true;
        } else if upper {
            out.push(c.to_ascii_uppercase());
            upper = false;
        } else {
            out.push(c);
        }
    }
    out
}

/// The dimension `open([store, ...])` concatenates along unless `concatDim` says otherwise
/// (as Python's `concat_dim`).
pub const DEFAULT_CONCAT_DIM: &str = "time";

/// The fields of a labelled variable's object (of [`JsVariable`]).
pub const VARIABLE_NAMES: &[&str] = &["path", "shift", "sampleAxis"];

/// The fields of `readPolicy` (of [`JsReadPolicy`]).
pub const READ_POLICY_NAMES: &[&str] =
    &["retries", "backoffMs", "requestTimeoutMs", "coalesceGapBytes", "coalesceMaxBytes", "hedge", "readAheadBytes"];

/// The options `open()` accepts, in their JavaScript (camelCase) spelling. Parsed on every
/// target so the option set can be unit-tested on the host.
#[derive(Debug, Clone, Default, serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct JsOpenOptions {
    /// Core's knobs (`batchSize`, `seed`, `onBadChunk`, ...: [`Knobs::NAMES`] in camelCase),
    /// read by core's serde derive with its defaults and words, apart from the keys below
    /// ([`JsOpenOptions::from_json`]; `api.rs` `parse_options` on a JS object).
    ///
    /// [`Knobs::NAMES`]: insitubatch_core::Knobs::NAMES
    #[serde(skip)]
    pub knobs: insitubatch_core::Knobs,
    /// Array paths to read (labels = paths), or labelled variables (windows); absent:
    /// discover them (needs consolidated metadata over HTTP, or a listable store).
    pub variables: Option<JsVariables>,
    /// The sample axis of every variable (default 0).
    pub sample_axis: Option<usize>,
    /// A windowed view: every variable again, `shift` samples on, labelled `label@+shift`
    /// (as the dashboard's explorer names it; 0 or absent: none).
    pub shift: Option<i64>,
    /// Train/val/test fractions of sample-axis chunks (default [0.8, 0.1, 0.1]).
    pub fractions: Option<(f64, f64, f64)>,
    /// Shuffle chunks between splits (default false: contiguous runs).
    pub shuffle_splits: Option<bool>,
    /// The seed of `shuffleSplits` (default: `seed`).
    pub split_seed: Option<u64>,
    /// Split only the chunks overlapping samples `[start, stop)`.
    pub sample_range: Option<(u64, u64)>,
    /// Retries, backoff and request timeout (default: core's `ReadPolicy::default()`).
    pub read_policy: Option<JsReadPolicy>,
    /// object_store options for `s3://` URLs (`aws_endpoint`, `aws_region`, credentials, …).
    pub storage_options: Option<std::collections::BTreeMap<String, String>>,
    /// For `s3://` URLs: an async JS function returning `{ accessKeyId, secretAccessKey,
    /// sessionToken?, expiration? }`, called when a request needs credentials and again
    /// before `expiration` (wasm/src/object.rs `JsCredentials`). A function is not data: serde
    /// only accepts the name; `parse_options` (api.rs) keeps the function in
    /// `credentials_callback`.
    pub credentials: Option<serde::de::IgnoredAny>,
    /// The `credentials` function itself (the builds with signed S3 only).
    #[cfg(all(target_arch = "wasm32", feature = "s3"))]
    #[serde(skip)]
    pub credentials_callback: Option<js_sys::Function>,
    /// Batches as views into wasm memory, valid until the pass's next step, instead of copies
    /// (default false; `open()`'s passes only: the explorer and `openInWorker` copy).
    pub batch_views: Option<bool>,
    /// Cut each sample into patches on these inner axes (core/src/patch.rs): the patch size
    /// per axis, in the order given, which is the column order of a batch's `patchOrigins`.
    pub patch: Option<JsAxisSizes>,
    /// `"grid"` (default: every patch of a grid) or `"random"`, read by core's
    /// [`PatchOptions::from_parts`](insitubatch_core::PatchOptions::from_parts).
    pub patch_mode: Option<String>,
    /// A grid's step per patched axis, in `patch`'s forms (axes not named step by their size).
    pub patch_stride: Option<JsAxisSizes>,
    /// Random patches per sample and epoch (default 1).
    pub patches_per_sample: Option<u64>,
    /// One boolean per sample of the sample axis: a `false` sample is never drawn
    /// (core/src/draws.rs).
    pub sample_mask: Option<Vec<bool>>,
    /// One weight per sample: its expected draws per epoch (core/src/draws.rs).
    pub sample_weights: Option<Vec<f64>>,
    /// Groups of this many consecutive ranks draw the same rows, each taking its part of
    /// every row along `modelParallelAxis` (core/src/mesh.rs; default 1: none).
    pub model_parallel: Option<usize>,
    /// The axis `modelParallel` splits rows along: a dimension name or an axis index.
    pub model_parallel_axis: Option<JsPatchAxis>,
    /// `{ time: [lo, hi], lat: [lo, hi], level: { labels: [500, 850] } }`: on the sample
    /// axis's coordinate, the samples whose value lies in `[lo, hi]` (inclusive) or is listed;
    /// on an inner dimension's, what every row is cut to. Values are numbers or dates
    /// `YYYY-MM-DD[THH:MM[:SS]]` (UTC), read by core's `Label::from_text`.
    pub sel: Option<std::collections::BTreeMap<String, JsPick>>,
    /// With a list of stores: the dimension they are concatenated along (default `"time"`).
    pub concat_dim: Option<String>,
    /// A directory in the browser's origin private file system where decoded chunks are kept
    /// across passes and page loads (Python's and the CLI's `cache_dir`; wasm/src/opfs.rs);
    /// needs `persist` or `readonlyCache`.
    pub cache_dir: Option<String>,
    /// Keep cached chunks for later passes and page loads (needs `cacheDir`).
    pub persist: Option<bool>,
    /// Read a complete cache a writer warmed; write nothing; a chunk it lacks is an error.
    pub readonly_cache: Option<bool>,
    /// Delete the cached chunks of arrays whose pipeline changed instead of refusing.
    pub reset_stale_cache: Option<bool>,
}

/// What `sel` picks on one dimension: `[lo, hi]`, or `{ labels: [a, b, ...] }`.
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
#[serde(untagged)]
pub enum JsPick {
    /// The values in `[lo, hi]`, inclusive.
    Range(JsBound, JsBound),
    /// Exactly these values, in this order.
    Labels {
        /// The values.
        labels: Vec<JsBound>,
    },
}

/// A `sel` bound as JS writes it: a number or a date string.
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
#[serde(untagged)]
pub enum JsBound {
    /// A number (a numeric coordinate).
    Number(f64),
    /// A date (or a number written as text).
    Text(String),
}

impl JsBound {
    fn to_core(&self) -> Result<insitubatch_core::coords::Label, insitubatch_core::Error> {
        match self {
            Self::Number(x) => Ok(insitubatch_core::coords::Label::Number(*x)),
            Self::Text(t) => insitubatch_core::coords::Label::from_text(t),
        }
    }
}

/// `patch` and `patchStride`: `(axis, count)` pairs in the caller's order, since that order
/// sets the columns of `patchOrigins`. JS gives it as an object `{ lat: 32, lon: 32 }` (its
/// own-key order: insertion order, but integer-like keys such as `"1"` first, ascending), a
/// `Map` (insertion order, whatever the keys), or `[[axis, size], ...]`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JsAxisSizes(pub Vec<(insitubatch_core::PatchAxis, u64)>);

/// Hand-written, as [`JsVariables`]: a map into a `BTreeMap` would lose the caller's order,
/// and a derived `untagged` enum would not say what was wrong.
impl<'de> serde::Deserialize<'de> for JsAxisSizes {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = JsAxisSizes;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("{ axis: size } (a dimension name or an axis index), a Map, or [[axis, size], ...]")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<JsAxisSizes, A::Error> {
                let mut out = Vec::new();
                while let Some((axis, n)) = seq.next_element::<(JsPatchAxis, u64)>()? {
                    out.push((axis.0, n));
                }
                Ok(JsAxisSizes(out))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<JsAxisSizes, A::Error> {
                let mut out = Vec::new();
                while let Some((axis, n)) = map.next_entry::<JsPatchAxis, u64>()? {
                    out.push((axis.0, n));
                }
                Ok(JsAxisSizes(out))
            }
        }
        d.deserialize_any(Visit)
    }
}

/// A patched axis as JS writes it: a dimension name, or an axis index as a number or as an
/// object key's digits (a JS object's keys are strings, so `{ 1: 8 }` is axis 1, as core's
/// [`PatchAxis::parse`](insitubatch_core::PatchAxis::parse) reads a word).
#[derive(Debug, Clone, PartialEq)]
pub struct JsPatchAxis(insitubatch_core::PatchAxis);

impl<'de> serde::Deserialize<'de> for JsPatchAxis {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit;
        impl serde::de::Visitor<'_> for Visit {
            type Value = JsPatchAxis;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a dimension name or a non-negative axis index")
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<JsPatchAxis, E> {
                Ok(JsPatchAxis(insitubatch_core::PatchAxis::parse(s)))
            }
            fn visit_u64<E: serde::de::Error>(self, n: u64) -> Result<JsPatchAxis, E> {
                let axis = usize::try_from(n).map_err(|_| E::custom(format!("axis index {n} is too large")))?;
                Ok(JsPatchAxis(insitubatch_core::PatchAxis::Axis(axis)))
            }
            fn visit_i64<E: serde::de::Error>(self, n: i64) -> Result<JsPatchAxis, E> {
                let n = u64::try_from(n).map_err(|_| {
                    E::custom(format!("axis index {n} is negative; count axes from 0, or name the dimension"))
                })?;
                self.visit_u64(n)
            }
        }
        d.deserialize_any(Visit)
    }
}

/// `readPolicy`: core's [`ReadPolicy`](insitubatch_core::ReadPolicy) in JS units
/// (milliseconds); `onBadChunk` is its own option, as in Python.
#[derive(Debug, Clone, Default, PartialEq, serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct JsReadPolicy {
    /// Attempts after the first for a transient failure.
    pub retries: Option<u32>,
    /// First backoff in milliseconds; doubles per attempt.
    pub backoff_ms: Option<f64>,
    /// A request with no answer after this many milliseconds is a transient failure.
    pub request_timeout_ms: Option<f64>,
    /// Ranges of one shard at most this many bytes apart are read by one request.
    pub coalesce_gap_bytes: Option<u64>,
    /// A coalesced request spans at most this many bytes (0: every inner chunk alone).
    pub coalesce_max_bytes: Option<u64>,
    /// `false`: never send a second request for a slow read; `true` or absent: core's
    /// `HedgePolicy::default()` (remote stores only); an object: that policy's fields.
    pub hedge: Option<JsHedge>,
    /// Stored bytes read ahead for inner chunks of a shard that a pass needs soon may hold
    /// at most this much (default: a quarter of the residency floor; 0: off).
    pub read_ahead_bytes: Option<u64>,
}

/// `readPolicy.hedge`: on/off, or the policy's fields (defaults where absent).
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
#[serde(untagged)]
pub enum JsHedge {
    /// `true`: the default policy; `false`: no hedging.
    Flag(bool),
    /// `{ quantile, multiple, maxShare, minSamples }`.
    Policy(JsHedgePolicy),
}

/// Core's [`HedgePolicy`](insitubatch_core::HedgePolicy) in JS names.
#[derive(Debug, Clone, Default, PartialEq, serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct JsHedgePolicy {
    /// The running latency quantile a request is compared with.
    pub quantile: Option<f64>,
    /// A request unanswered after this multiple of that quantile is hedged.
    pub multiple: Option<f64>,
    /// Hedges are at most this share of the requests made.
    pub max_share: Option<f64>,
    /// Answers seen before any request is hedged.
    pub min_samples: Option<usize>,
}

impl JsHedge {
    fn to_core(&self) -> Option<insitubatch_core::HedgePolicy> {
        let d = insitubatch_core::HedgePolicy::default();
        match self {
            Self::Flag(false) => None,
            Self::Flag(true) => Some(d),
            Self::Policy(p) => Some(insitubatch_core::HedgePolicy {
                quantile: p.quantile.unwrap_or(d.quantile),
                multiple: p.multiple.unwrap_or(d.multiple),
                max_share: p.max_share.unwrap_or(d.max_share),
                min_samples: p.min_samples.unwrap_or(d.min_samples),
            }),
        }
    }
}

/// `variables`: a list of array paths (labels = paths), or an object of labelled variables
/// in the order given (the first one is the split's reference), as Python's
/// `{label: geometry.shift(k)}`.
#[derive(Debug, Clone, PartialEq)]
pub enum JsVariables {
    /// `["t2m", "u10"]`.
    Paths(Vec<String>),
    /// `{ x: "t2m", y: { path: "t2m", shift: 6 } }`, in insertion order.
    Labelled(Vec<(String, JsVariable)>),
}

/// One labelled variable: an array path, read `shift` samples on (a window), on its own
/// sample axis if given.
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct JsVariable {
    /// The array path.
    pub path: String,
    /// The window offset (default 0).
    pub shift: Option<i64>,
    /// The sample axis (default: the `sampleAxis` option).
    pub sample_axis: Option<usize>,
}

/// Hand-written because a derived `untagged` enum neither keeps an object's key order (the
/// first label is the split's reference) nor says which field was wrong.
impl<'de> serde::Deserialize<'de> for JsVariables {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = JsVariables;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a list of array paths, or an object { label: path or { path, shift, sampleAxis } }")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<JsVariables, A::Error> {
                let mut out = Vec::new();
                while let Some(p) = seq.next_element::<String>()? {
                    out.push(p);
                }
                Ok(JsVariables::Paths(out))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<JsVariables, A::Error> {
                let mut out: Vec<(String, JsVariable)> = Vec::new();
                while let Some((label, v)) = map.next_entry::<String, JsVariableSpec>()? {
                    out.push((label, v.0));
                }
                Ok(JsVariables::Labelled(out))
            }
        }
        d.deserialize_any(Visit)
    }
}

impl<'de> serde::Deserialize<'de> for JsVariableSpec {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = JsVariableSpec;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an array path, or { path, shift?, sampleAxis? }")
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<JsVariableSpec, E> {
                Ok(JsVariableSpec(JsVariable::at(s)))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<JsVariableSpec, A::Error> {
                let v =
                    <JsVariable as serde::Deserialize>::deserialize(serde::de::value::MapAccessDeserializer::new(map))?;
                Ok(JsVariableSpec(v))
            }
        }
        d.deserialize_any(Visit)
    }
}

/// A labelled variable as JS may write it: a path string or a [`JsVariable`] object.
struct JsVariableSpec(JsVariable);

impl JsOpenOptions {
    /// Options from a JSON object, as `api.rs` `parse_options` reads a JS object: the knobs' keys (in
    /// JS's spelling; `null` is absent) are taken out and read by core's `Knobs`, with its
    /// defaults and words, and the rest by this struct, which refuses a key it does not know.
    ///
    /// # Errors
    /// What serde refuses, as text.
    pub fn from_json(json: &str) -> Result<Self, String> {
        let mut rest: serde_json::Map<String, serde_json::Value> =
            serde_json::from_str(json).map_err(|e| e.to_string())?;
        let mut knobs = serde_json::Map::new();
        for key in insitubatch_core::Knobs::NAMES {
            if let Some(value) = rest.remove(&js_knob_name(key)).filter(|v| !v.is_null()) {
                knobs.insert((*key).to_string(), value);
            }
        }
        let knobs = serde_json::from_value(knobs.into()).map_err(|e| e.to_string())?;
        let own: Self = serde_json::from_value(rest.into()).map_err(|e| e.to_string())?;
        Ok(Self { knobs, ..own })
    }

    /// The core split and dataset options these stand for; the defaults and the split seed
    /// are the native backend's (`insitubatch_native::OpenOptions`), so the same options give
    /// the same batches on every target.
    ///
    /// # Errors
    /// [`Error::Config`](insitubatch_core::Error::Config) for an `onBadChunk` word core does
    /// not know, a read-policy duration that is negative or not finite, patch options core
    /// refuses (`PatchOptions::from_parts`), or a patch option without `patch`.
    pub fn to_core(
        &self,
    ) -> Result<(insitubatch_core::SplitOptions, insitubatch_core::DatasetOptions), insitubatch_core::Error> {
        let d = insitubatch_core::DatasetOptions::default();
        let mut read_policy = d.read_policy.clone();
        if let Some(p) = &self.read_policy {
            read_policy.retries = p.retries.unwrap_or(read_policy.retries);
            read_policy.backoff = millis("readPolicy.backoffMs", p.backoff_ms)?.unwrap_or(read_policy.backoff);
            read_policy.request_timeout =
                millis("readPolicy.requestTimeoutMs", p.request_timeout_ms)?.unwrap_or(read_policy.request_timeout);
            read_policy.coalesce_gap_bytes = p.coalesce_gap_bytes.unwrap_or(read_policy.coalesce_gap_bytes);
            read_policy.coalesce_max_bytes = p.coalesce_max_bytes.unwrap_or(read_policy.coalesce_max_bytes);
            if let Some(h) = &p.hedge {
                read_policy.hedge = h.to_core();
            }
            read_policy.read_ahead_bytes = p.read_ahead_bytes.or(read_policy.read_ahead_bytes);
        }
        let dataset = insitubatch_core::DatasetOptions {
            knobs: self.knobs,
            read_policy,
            patch: self.patch_options()?,
            sample_mask: self.sample_mask.clone().map(Into::into),
            sample_weights: self.sample_weights.clone().map(Into::into),
            model_parallel: self.mesh()?,
            sel: self.label_ranges()?,
            // The disk tier (`cacheDir`) is opened by the caller first (wasm/src/opfs.rs).
            ..d
        };
        let split = insitubatch_core::SplitOptions::default();
        let split = insitubatch_core::SplitOptions {
            fractions: self.fractions.unwrap_or(split.fractions),
            seed: self.split_seed.unwrap_or(self.knobs.seed),
            contiguous: self.shuffle_splits.map_or(split.contiguous, |s| !s),
            sample_range: self.sample_range.or(split.sample_range),
        };
        Ok((split, dataset))
    }

    /// Core's patch options from `patch`, `patchMode`, `patchStride` and `patchesPerSample`:
    /// core's `from_parts` decides what is valid, as for Python and the CLI, so every
    /// binding refuses the same mixes with the same message.
    fn patch_options(&self) -> Result<Option<insitubatch_core::PatchOptions>, insitubatch_core::Error> {
        insitubatch_core::PatchOptions::from_words(
            self.patch.as_ref().map(|s| s.0.clone()),
            self.patch_mode.as_deref(),
            self.patch_stride.as_ref().map(|s| s.0.clone()),
            self.patches_per_sample,
        )
    }

    /// `modelParallel` and `modelParallelAxis` as core's mesh: 1 (or absent) is none; a size
    /// without an axis, or an axis without a size, is refused as Python refuses it.
    fn mesh(&self) -> Result<Option<insitubatch_core::ModelParallel>, insitubatch_core::Error> {
        match (self.model_parallel.unwrap_or(1), &self.model_parallel_axis) {
            (1, None) => Ok(None),
            (1, Some(_)) => Err(insitubatch_core::Error::Config(
                "modelParallelAxis names the axis modelParallel splits rows along; pass modelParallel too".into(),
            )),
            (_, None) => Err(insitubatch_core::Error::Config(
                "modelParallel splits every row along an axis: pass modelParallelAxis (a dimension name or index)"
                    .into(),
            )),
            (size, Some(axis)) => Ok(Some(insitubatch_core::ModelParallel { size, axis: axis.0.clone() })),
        }
    }

    /// `sel` as core's selections, one range per dimension (core tells the sample axis's
    /// from inner ones).
    fn label_ranges(&self) -> Result<Vec<insitubatch_core::coords::LabelSel>, insitubatch_core::Error> {
        let Some(sel) = &self.sel else { return Ok(Vec::new()) };
        use insitubatch_core::coords::LabelSel;
        sel.iter()
            .map(|(dim, pick)| match pick {
                JsPick::Range(lo, hi) => Ok(LabelSel::range(dim, lo.to_core()?, hi.to_core()?)),
                JsPick::Labels { labels } => {
                    Ok(LabelSel::labels(dim, labels.iter().map(JsBound::to_core).collect::<Result<_, _>>()?))
                }
            })
            .collect()
    }

    /// The array paths whose metadata `open()` reads; `None`: discover the store's arrays.
    pub fn paths(&self) -> Option<Vec<String>> {
        match &self.variables {
            None => None,
            Some(JsVariables::Paths(p)) => Some(p.clone()),
            Some(JsVariables::Labelled(l)) => {
                let mut out: Vec<String> = Vec::new();
                for (_, v) in l {
                    let p = v.path.trim_matches('/').to_string();
                    if !out.contains(&p) {
                        out.push(p);
                    }
                }
                Some(out)
            }
        }
    }

    /// Whether these options name labelled variables or a window, which the core builder
    /// cannot derive from array paths alone (else `open()` lets the builder label by path).
    pub fn windowed(&self) -> bool {
        matches!(self.variables, Some(JsVariables::Labelled(_))) || self.shift.unwrap_or(0) != 0
    }

    /// The labelled variables over `opened` (arrays whose metadata was read): the labelled
    /// ones as given, or one per path (labels = paths; `defaults` when no path is named),
    /// then, for `shift` ≠ 0, each again `shift` samples on as `label@+shift`.
    ///
    /// # Errors
    /// [`Error::Config`](insitubatch_core::Error::Config) for an empty selection or a path
    /// that was not opened; [`Error::Geometry`](insitubatch_core::Error::Geometry) for a
    /// sample axis the array does not have.
    pub fn variables_over(
        &self,
        opened: &[ZarrArray],
        defaults: &[ZarrArray],
        shift: i64,
    ) -> Result<Vec<insitubatch_core::Variable>, insitubatch_core::Error> {
        let axis = self.sample_axis.unwrap_or_default();
        let find = |name: &str| -> Result<&ZarrArray, insitubatch_core::Error> {
            let name = name.trim_matches('/');
            opened.iter().find(|a| a.path() == name).ok_or_else(|| {
                insitubatch_core::Error::Config(format!(
                    "variable {name:?} is not an array of this store; known: {:?}",
                    opened.iter().map(ZarrArray::path).collect::<Vec<_>>()
                ))
            })
        };
        let specs: Vec<(String, JsVariable)> = match &self.variables {
            Some(JsVariables::Labelled(l)) => l.clone(),
            Some(JsVariables::Paths(p)) => p.iter().map(|p| (p.clone(), JsVariable::at(p))).collect(),
            None => defaults.iter().map(|a| (a.path().to_string(), JsVariable::at(a.path()))).collect(),
        };
        if specs.is_empty() {
            return Err(insitubatch_core::Error::Config("choose at least one variable".into()));
        }
        let mut variables = Vec::with_capacity(specs.len() * 2);
        for (label, v) in specs {
            let geometry = find(&v.path)?.geometry(v.sample_axis.unwrap_or(axis))?.shift(v.shift.unwrap_or(0));
            let label = if matches!(self.variables, Some(JsVariables::Labelled(_))) {
                label
            } else {
                label.trim_matches('/').to_string()
            };
            variables.push(insitubatch_core::Variable { label, geometry });
        }
        if shift != 0 {
            let targets: Vec<insitubatch_core::Variable> = variables
                .iter()
                .map(|v| insitubatch_core::Variable {
                    label: crate::explore::target_label(&v.label, shift),
                    geometry: v.geometry.shift(shift),
                })
                .collect();
            variables.extend(targets);
        }
        Ok(variables)
    }
}

impl JsVariable {
    fn at(path: &str) -> Self {
        Self { path: path.to_string(), shift: None, sample_axis: None }
    }
}

/// `Some(duration)` from a count of milliseconds, if given.
fn millis(name: &str, ms: Option<f64>) -> Result<Option<std::time::Duration>, insitubatch_core::Error> {
    ms.map(|ms| {
        std::time::Duration::try_from_secs_f64(ms / 1e3).map_err(|_| {
            insitubatch_core::Error::Config(format!("{name} must be a non-negative number of milliseconds, got {ms}"))
        })
    })
    .transpose()
}

/// Parse a split name (`train`, `val`, `test`, `all`).
///
/// # Errors
/// A message naming the accepted words.
pub fn parse_split(s: &str) -> Result<insitubatch_core::Split, String> {
    s.parse().map_err(|e: insitubatch_core::UnknownSplit| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_default_like_native() {
        let o = JsOpenOptions::from_json("{}").unwrap();
        let (split, dataset) = o.to_core().unwrap();
        assert_eq!(dataset.knobs, insitubatch_core::Knobs::default());
        assert!(split.contiguous);
        assert_eq!(split.fractions, (0.8, 0.1, 0.1));
        assert_eq!(split.sample_range, None);
        let o = JsOpenOptions::from_json(r#"{"batchSize":7,"blockChunks":2,"seed":3,"fractions":[0.5,0.25,0.25]}"#)
            .unwrap();
        let (split, dataset) = o.to_core().unwrap();
        assert_eq!(
            (dataset.knobs.batch_size, dataset.knobs.block_chunks, split.seed),
            (7, 2, 3),
            "the split seed is the seed"
        );
        assert!(JsOpenOptions::from_json(r#"{"batch_size":7}"#).is_err(), "core's spelling is not JS's");
        assert!(JsOpenOptions::from_json(r#"{"batchSize":null}"#).unwrap().knobs.batch_size == 32, "null is absent");
        assert!(parse_split("bogus").unwrap_err().contains("train"));
        // open_option_names() lists exactly the keys accepted.
        for name in open_option_names() {
            let json = format!("{{\"{name}\": null}}");
            assert!(JsOpenOptions::from_json(&json).is_ok(), "{name}");
        }
    }

    #[test]
    fn the_knobs_reach_core_through_its_parsers() {
        let o = JsOpenOptions::from_json(
            r#"{"seed":3,"splitSeed":9,"shuffleSplits":true,"sampleRange":[10,40],"onBadChunk":"nan",
                "readPolicy":{"retries":1,"backoffMs":5,"requestTimeoutMs":2500}}"#,
        )
        .unwrap();
        let (split, dataset) = o.to_core().unwrap();
        assert_eq!((split.seed, dataset.knobs.seed, split.contiguous), (9, 3, false));
        assert_eq!(split.sample_range, Some((10, 40)));
        assert_eq!(dataset.knobs.on_bad_chunk, insitubatch_core::OnBadChunk::Nan);
        let p = &dataset.read_policy;
        assert_eq!(p.retries, 1);
        assert_eq!(p.backoff, std::time::Duration::from_millis(5));
        assert_eq!(p.request_timeout, std::time::Duration::from_millis(2500));
        // Words and durations core refuses are errors that say what to write.
        let e = JsOpenOptions::from_json(r#"{"onBadChunk":"skip"}"#).unwrap_err();
        assert!(e.contains("\"raise\" or \"nan\"") && e.contains("skip"), "{e}");
        let bad = JsOpenOptions::from_json(r#"{"readPolicy":{"backoffMs":-1}}"#).unwrap();
        let e = bad.to_core().unwrap_err().to_string();
        assert!(e.contains("readPolicy.backoffMs") && e.contains("-1"), "{e}");
        assert!(JsOpenOptions::from_json(r#"{"readPolicy":{"retry":1}}"#).is_err());
        for name in VARIABLE_NAMES {
            let json = format!("{{\"variables\": {{\"v\": {{\"path\": \"t2m\", \"{name}\": null}}}}}}");
            let json = json.replace("\"path\": \"t2m\", \"path\": null", "\"path\": \"t2m\"");
            assert!(JsOpenOptions::from_json(&json).is_ok(), "{name}: {json}");
        }
        for name in READ_POLICY_NAMES {
            let json = format!("{{\"readPolicy\": {{\"{name}\": null}}}}");
            assert!(JsOpenOptions::from_json(&json).is_ok(), "{name}");
        }
    }

    #[test]
    fn patches_reach_core_in_the_order_given() {
        use insitubatch_core::{PatchAxis, PatchMode};
        let patch = |json: &str| JsOpenOptions::from_json(json).map(|o| o.to_core());
        let (_, d) = patch(r#"{"patch":{"lon":4,"lat":3,"2":5},"patchStride":{"lat":1}}"#).unwrap().unwrap();
        let p = d.patch.unwrap();
        let want =
            vec![(PatchAxis::Name("lon".into()), 4), (PatchAxis::Name("lat".into()), 3), (PatchAxis::Axis(2), 5)];
        assert_eq!(p.size, want, "the object's order is the origins' column order; digits are axis indices");
        assert_eq!(p.mode, PatchMode::Grid { stride: vec![4, 1, 5] });
        let (_, d) =
            patch(r#"{"patch":[[2,5],["lat",3]],"patchMode":"random","patchesPerSample":3}"#).unwrap().unwrap();
        let p = d.patch.unwrap();
        assert_eq!(p.size, vec![(PatchAxis::Axis(2), 5), (PatchAxis::Name("lat".into()), 3)]);
        assert_eq!(p.mode, PatchMode::Random { per_sample: 3 });
        assert_eq!(patch("{}").unwrap().unwrap().1.patch, None);
        // Core's refusals come through with its message; options without a patch are refused here.
        let refused = |json: &str| patch(json).unwrap().unwrap_err().to_string();
        assert!(refused(r#"{"patch":{"lat":3},"patchMode":"tiles"}"#).contains("'grid' or 'random'"));
        assert!(refused(r#"{"patch":{"lat":3},"patchesPerSample":2}"#).contains("patches_per_sample"));
        assert!(refused(r#"{"patchesPerSample":2}"#).contains("pass patch too"));
        for bad in [r#"{"patch":{"lat":-1}}"#, r#"{"patch":[[-1,2]]}"#, r#"{"patch":[["lat"]]}"#, r#"{"patch":3}"#] {
            assert!(JsOpenOptions::from_json(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn variables_are_paths_or_labelled_windows_in_order() {
        let o = JsOpenOptions::from_json(r#"{"variables":["t2m","u10"]}"#).unwrap();
        assert_eq!(o.variables, Some(JsVariables::Paths(vec!["t2m".into(), "u10".into()])));
        assert!(!o.windowed());
        let o = JsOpenOptions::from_json(
            r#"{"variables":{"y":{"path":"t2m","shift":6},"x":"t2m","w":{"path":"/u10","sampleAxis":1}}}"#,
        )
        .unwrap();
        let Some(JsVariables::Labelled(l)) = &o.variables else { panic!("{o:?}") };
        let labels: Vec<&str> = l.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(labels, ["y", "x", "w"], "the object's order is kept");
        assert_eq!(l[0].1, JsVariable { path: "t2m".into(), shift: Some(6), sample_axis: None });
        assert_eq!(l[2].1.sample_axis, Some(1));
        assert_eq!(o.paths(), Some(vec!["t2m".to_string(), "u10".to_string()]));
        assert!(o.windowed());
        let shifted = JsOpenOptions::from_json(r#"{"shift":-2}"#).unwrap();
        assert!(shifted.windowed());
        for bad in
            [r#"{"variables":{"y":{"path":"t2m","offset":6}}}"#, r#"{"variables":{"y":3}}"#, r#"{"variables":7}"#]
        {
            assert!(JsOpenOptions::from_json(bad).is_err(), "{bad}");
        }
    }
}
