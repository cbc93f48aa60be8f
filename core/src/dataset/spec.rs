//! The dataset's options as data: [`DatasetSpec`], every plain-data option a caller can pass
//! (Python's keyword arguments, JS's options in camelCase, the CLI's flags in kebab-case), its
//! defaults in one `Default`, its rules in one [`DatasetSpec::resolve`].
//!
//! Each binding converts its spelling into this struct and does nothing else: Python builds
//! one dict (typed by the generated `DatasetSpec` `TypedDict`), JS renames its keys once
//! (camelCase → snake_case) and hands the object to serde, the CLI fills it from its flags.
//! What is not data stays beside it, program-side: transforms, observers and callbacks, a
//! tier object, store objects, labelled geometries, JS's `credentials` function.
//!
//! `tools/boundary-types` writes the Python and TypeScript types and the book's option
//! reference (`docs/reference/options.md`) from this struct's JSON Schema, so each field's
//! doc comment below is the user's doc in every language, and its default is the one in
//! [`DatasetSpec::default`]. `tests/options/cases.json` holds an accepted (and, where a field
//! has bounds, a refused) value of every field, which every surface walks; a test here fails
//! when a field has no case.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{DatasetOptions, Knobs};
use crate::coords::Sel;
use crate::error::{Error, Result};
use crate::hedge::HedgePolicy;
use crate::mesh::ModelParallel;
use crate::patch::{AxisSizes, PatchAxis, PatchOptions, PatchPlacement};
use crate::retry::{OnBadChunk, ReadPolicy};
use crate::split::SplitOptions;

/// Every plain-data option of a dataset, with the engine's defaults: the one definition of
/// each option's name, type, default and doc, read by every binding.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[cfg_attr(feature = "schema", schemars(extend("x-python" = {"total": false})))]
#[serde(default, deny_unknown_fields)]
pub struct DatasetSpec {
    /// Rows per batch (an epoch's last batch may be short).
    pub batch_size: usize,
    /// Chunks per shuffle block (raised so a block always holds a batch).
    pub block_chunks: usize,
    /// Chunks in each epoch's first shuffle block (raised so it holds a batch, at most the
    /// block size): fewer for a faster first batch, at a cost in mixing the epoch's first
    /// samples that `describe()` notes (`first-block-smaller`). Absent: the block size, the
    /// specified order.
    pub first_block_chunks: Option<usize>,
    /// Storage reads in flight, across every view.
    pub max_inflight: usize,
    /// Shuffle seed: the same (seed, epoch) gives the same batches on every target.
    pub seed: u64,
    /// Shuffle the train view (the other views are read in order).
    #[cfg_attr(feature = "schema", schemars(extend("x-cli" = "--no-shuffle")))]
    pub shuffle: bool,
    /// Batches queued ahead of the caller (0 is taken as 1, as insitubatch 0.2.0 does).
    pub prefetch_depth: usize,
    /// Byte budget of the chunk pool. Absent: sized automatically from the memory available.
    pub cache_budget_bytes: Option<u64>,
    /// A chunk that cannot be fetched or decoded: `raise` fails the pass naming it; `nan`
    /// fills it with NaN (floats) or the fill value, records it among the bad chunks and goes
    /// on.
    // Read by `OnBadChunk: FromStr`, so a wrong word gets core's message. Python passes the
    // caller's word as it came, for core to parse: typed `str` there.
    #[cfg_attr(feature = "schema", schemars(extend("x-python" = {"type": "str"})))]
    pub on_bad_chunk: OnBadChunk,
    /// Read the sample axis's coordinate at open and carry it in every batch (its `coords`).
    pub coords: bool,
    /// Threads of the engine's decode pool. Absent: one per core.
    pub threads: Option<usize>,
    /// This process's rank among the world size: it reads and yields only its share of each
    /// epoch, disjoint from the other ranks'; every rank yields as many batches (the few
    /// samples that cannot be spread evenly are counted as dropped).
    pub rank: usize,
    /// Processes sharing each epoch (1: the whole epoch here).
    pub world_size: usize,
    /// Node affinity: ranks per node (nodes are runs of consecutive ranks), dividing the
    /// world size. Each node then draws the same chunks in every epoch, reshuffled, so ranks
    /// sharing a node's `cache_dir` read the second epoch from it. Absent: off.
    #[cfg_attr(feature = "schema", schemars(extend("x-python" = {"keyword": "`node_affinity=`"})))]
    pub node_ranks: Option<usize>,
    /// A rank mesh: groups of this many consecutive ranks draw the same rows, each rank
    /// taking its part of every row along `model_parallel_axis` (1: none).
    pub model_parallel: usize,
    /// The axis a model-parallel group splits its rows along: a dimension name or an axis
    /// index. Needs `model_parallel` above 1.
    pub model_parallel_axis: Option<PatchAxis>,
    /// The arrays to read, by path (labels = paths), or labelled variables in order (the
    /// first is the split's reference): `{label: path}` or `{label: {path, shift,
    /// sample_axis}}`, several labels may read one array (windows). Absent: every data array
    /// (coordinates skipped).
    #[cfg_attr(feature = "schema", schemars(extend("x-python" = {"keyword": "`geometries=` (`ArrayGeometry` objects)"}, "x-cli" = "--var PATH")))]
    pub variables: Option<VariablesSpec>,
    /// The sample axis of every variable named by path.
    #[cfg_attr(feature = "schema", schemars(extend("x-python" = {"keyword": "each geometry's `sample_axis`"})))]
    pub sample_axis: usize,
    /// Select by label, one entry per dimension: `[low, high]` (inclusive) or `{"labels":
    /// [...]}`, numbers or dates (`YYYY-MM-DD[THH:MM[:SS]]`, UTC; CF time is decoded). On the
    /// sample axis's coordinate, the samples drawn (split as `sample_range` is); on an inner
    /// dimension's, the region every row is cut to.
    pub sel: Sel,
    /// One boolean per sample of the sample axis: a `false` sample is never drawn, and a
    /// chunk whose samples are all masked is never read. Absent: every sample.
    #[cfg_attr(feature = "schema", schemars(extend("x-cli" = "--sample-mask FILE")))]
    pub sample_mask: Option<Vec<bool>>,
    /// One weight per sample, its expected draws per epoch (0 to 1024; a fractional part is
    /// one more draw with that probability, per `(seed, epoch)`). Each chunk is still read
    /// once per epoch. Absent: each sample once.
    #[cfg_attr(feature = "schema", schemars(extend("x-ts" = "number[] | Float64Array")))]
    pub sample_weights: Option<Vec<f64>>,
    /// Cut each sample into patches: the patch size per patched inner axis (a dimension name
    /// or an axis index), in order (the column order of a batch's patch origins). A variable
    /// without those axes is read whole. Absent: whole samples.
    pub patch: Option<AxisSizes>,
    /// `grid`: every patch of a grid stepping `patch_stride`; `random`: `patches_per_sample`
    /// patches per sample at random origins, drawn anew each epoch. Absent: `grid`.
    // Read by `PatchPlacement: FromStr`; Python passes the caller's word for core to parse.
    #[cfg_attr(feature = "schema", schemars(extend("x-python" = {"type": "str | None"})))]
    pub patch_mode: Option<PatchPlacement>,
    /// A grid's step per patched axis (axes not named step by their size; smaller overlaps).
    pub patch_stride: Option<AxisSizes>,
    /// Random patches per sample and epoch. Absent: 1.
    pub patches_per_sample: Option<u64>,
    /// Train, val and test fractions of the sample-axis chunks; they sum to 1.
    #[cfg_attr(feature = "schema", schemars(extend("x-python" = {"keyword": "`split_by_chunk(fractions=)`, as `manifest=`"})))]
    pub fractions: (f64, f64, f64),
    /// Shuffle chunks between the splits (`false`: contiguous runs, safe for time series).
    #[cfg_attr(feature = "schema", schemars(extend("x-python" = {"keyword": "`split_by_chunk(contiguous=)` (its opposite), as `manifest=`"})))]
    pub shuffle_splits: bool,
    /// The seed of `shuffle_splits`. Absent: `seed`.
    #[cfg_attr(feature = "schema", schemars(extend("x-python" = {"keyword": "`split_by_chunk(seed=)`, as `manifest=`"})))]
    pub split_seed: Option<u64>,
    /// Split only the chunks overlapping samples `[start, stop)` of the sample axis.
    #[cfg_attr(feature = "schema", schemars(extend("x-python" = {"keyword": "`split_by_chunk(sample_range=)`, as `manifest=`"})))]
    pub sample_range: Option<(u64, u64)>,
    /// How storage is read: retries, backoff and timeout (seconds), coalescing, read-ahead
    /// and hedging. A key left out keeps its default.
    #[cfg_attr(feature = "schema", schemars(extend("x-cli" = "its keys' flags (below)")))]
    pub read_policy: ReadPolicySpec,
    /// object_store configuration for a store opened by URL (`aws_region`, `aws_endpoint`,
    /// ...), over the environment's; refused for a store object, which carries its own.
    #[cfg_attr(feature = "schema", schemars(extend("x-cli" = "--storage-option KEY=VALUE")))]
    pub storage_options: BTreeMap<String, String>,
    /// With a list of stores: the dimension they are concatenated along (for arrays without
    /// dimension names, the sample axis).
    pub concat_dim: String,
    /// A directory where decoded chunks are kept (natively memory-mapped files on local
    /// disk; in a browser the origin private file system). Absent: no disk tier.
    pub cache_dir: Option<String>,
    /// Keep `cache_dir`'s chunks across epochs, evictions and runs.
    pub persist: bool,
    /// Read a complete warm `cache_dir` without writing; a chunk it lacks is an error.
    pub readonly_cache: bool,
    /// Drop the cached chunks of arrays whose pipeline changed instead of refusing.
    pub reset_stale_cache: bool,
    /// Fill and read `cache_dir` together with other processes (a machine's ranks): each
    /// chunk is written once, by whichever process fetched it first. Needs `persist`.
    pub shared_cache: bool,
    /// Serve the pass reports as Prometheus metrics at this `IP:PORT`, or at a port alone on
    /// loopback (port 0 picks a free one). Absent: no endpoint.
    pub metrics_address: Option<String>,
    /// The one web origin allowed to read the metrics endpoint from a browser, e.g. the
    /// dashboard's; absent: no CORS header.
    pub metrics_cors_origin: Option<String>,
}

impl Default for DatasetSpec {
    fn default() -> Self {
        let split = SplitOptions::default();
        Self {
            batch_size: 32,
            block_chunks: 16,
            first_block_chunks: None,
            max_inflight: 32,
            seed: 0,
            shuffle: true,
            prefetch_depth: 2,
            cache_budget_bytes: None,
            on_bad_chunk: OnBadChunk::default(),
            coords: false,
            threads: None,
            rank: 0,
            world_size: 1,
            node_ranks: None,
            model_parallel: 1,
            model_parallel_axis: None,
            variables: None,
            sample_axis: 0,
            sel: Sel::default(),
            sample_mask: None,
            sample_weights: None,
            patch: None,
            patch_mode: None,
            patch_stride: None,
            patches_per_sample: None,
            fractions: split.fractions,
            shuffle_splits: !split.contiguous,
            split_seed: None,
            sample_range: split.sample_range,
            read_policy: ReadPolicySpec::default(),
            storage_options: BTreeMap::new(),
            concat_dim: "time".into(),
            cache_dir: None,
            persist: false,
            readonly_cache: false,
            reset_stale_cache: false,
            shared_cache: false,
            metrics_address: None,
            metrics_cors_origin: None,
        }
    }
}

/// `read_policy`: core's [`ReadPolicy`] as data, its durations in seconds (on every surface).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[cfg_attr(feature = "schema", schemars(extend("x-python" = {"total": false})))]
#[serde(default, deny_unknown_fields)]
pub struct ReadPolicySpec {
    /// Attempts after the first for a transient failure.
    pub retries: u32,
    /// First backoff, seconds; doubles per attempt.
    pub backoff_s: f64,
    /// A request with no answer after this many seconds is a transient failure.
    pub request_timeout_s: f64,
    /// Ranges of one object (a shard's inner chunks) at most this many bytes apart are read
    /// by one request.
    pub coalesce_gap_bytes: u64,
    /// A coalesced request spans at most this many bytes (0: every inner chunk alone).
    pub coalesce_max_bytes: u64,
    /// Stored bytes read ahead for a shard's inner chunks a pass needs soon may hold at most
    /// this much. Absent: a quarter of the residency floor; 0: off.
    pub read_ahead_bytes: Option<u64>,
    /// `false`: never send a second request for a slow read; `true` (remote stores only): a
    /// request unanswered after `multiple` times the running `quantile` of latencies gets a
    /// second one, at most `max_share` of requests, each at its default; or those fields.
    #[cfg_attr(feature = "schema", schemars(extend("x-cli" = "--no-hedge")))]
    pub hedge: HedgeSpec,
}

impl Default for ReadPolicySpec {
    fn default() -> Self {
        let d = ReadPolicy::default();
        Self {
            retries: d.retries,
            backoff_s: d.backoff.as_secs_f64(),
            request_timeout_s: d.request_timeout.as_secs_f64(),
            coalesce_gap_bytes: d.coalesce_gap_bytes,
            coalesce_max_bytes: d.coalesce_max_bytes,
            read_ahead_bytes: d.read_ahead_bytes,
            hedge: HedgeSpec::Flag(d.hedge.is_some()),
        }
    }
}

/// `read_policy.hedge`: on or off, or the policy's fields.
#[derive(Debug, Clone, PartialEq)]
pub enum HedgeSpec {
    /// `true`: the default policy; `false`: no hedging.
    Flag(bool),
    /// Hedging with these fields.
    Policy(HedgeFields),
}

/// Core's [`HedgePolicy`] as data; a field left out keeps its default.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[cfg_attr(feature = "schema", schemars(extend("x-python" = {"total": false})))]
#[serde(default, deny_unknown_fields)]
pub struct HedgeFields {
    /// The running latency quantile a request is compared with, in (0, 1].
    #[cfg_attr(feature = "schema", schemars(extend("x-cli" = null)))]
    pub quantile: f64,
    /// A request unanswered after this multiple (at least 1) of that quantile is hedged.
    #[cfg_attr(feature = "schema", schemars(extend("x-cli" = null)))]
    pub multiple: f64,
    /// Hedges are at most this share of the requests made, in [0, 1] (one is always allowed).
    #[cfg_attr(feature = "schema", schemars(extend("x-cli" = null)))]
    pub max_share: f64,
    /// Answers seen before any request is hedged.
    #[cfg_attr(feature = "schema", schemars(extend("x-cli" = null)))]
    pub min_samples: usize,
}

impl Default for HedgeFields {
    fn default() -> Self {
        let d = HedgePolicy::default();
        Self { quantile: d.quantile, multiple: d.multiple, max_share: d.max_share, min_samples: d.min_samples }
    }
}

impl Serialize for HedgeSpec {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        match self {
            Self::Flag(on) => s.serialize_bool(*on),
            Self::Policy(fields) => fields.serialize(s),
        }
    }
}

// By hand: `true`/`false`, or an object read by `HedgeFields`' derive (its unknown keys
// refused by name), where a derived `untagged` enum would only say that nothing matched.
impl<'de> Deserialize<'de> for HedgeSpec {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = HedgeSpec;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("true, false or an object of quantile, multiple, max_share, min_samples")
            }
            fn visit_bool<E: serde::de::Error>(self, on: bool) -> std::result::Result<HedgeSpec, E> {
                Ok(HedgeSpec::Flag(on))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> std::result::Result<HedgeSpec, A::Error> {
                HedgeFields::deserialize(serde::de::value::MapAccessDeserializer::new(map)).map(HedgeSpec::Policy)
            }
        }
        d.deserialize_any(Visit)
    }
}

#[cfg(feature = "schema")]
impl schemars::JsonSchema for HedgeSpec {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "HedgeSpec".into()
    }
    fn json_schema(g: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let fields = g.subschema_for::<HedgeFields>();
        schemars::json_schema!({
            "description": "`true`, `false`, or the hedging policy's fields.",
            "anyOf": [{"type": "boolean"}, fields],
            "x-ts": "boolean | HedgeFields",
            "x-python": {"type": "bool | HedgeFields"},
            "x-object": "HedgeFields",
        })
    }
}

/// `variables`: array paths, or labelled variables in the order given.
#[derive(Debug, Clone, PartialEq)]
pub enum VariablesSpec {
    /// `["t2m", "u10"]`: labels are paths.
    Paths(Vec<String>),
    /// `{x: "t2m", y: {path: "t2m", shift: 6}}`, in the order given.
    Labelled(Vec<(String, VariableSpec)>),
}

/// One labelled variable: an array path, read `shift` samples on from the anchor (a window
/// offset), on its own sample axis if given.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[cfg_attr(feature = "schema", schemars(extend("x-python" = {"total": false})))]
#[serde(deny_unknown_fields)]
pub struct VariableSpec {
    /// The array path.
    #[cfg_attr(feature = "schema", schemars(extend("x-required" = true, "x-cli" = null, "x-python" = {"keyword": "none: `geometries=`"})))]
    pub path: String,
    /// The window offset.
    #[serde(default)]
    #[cfg_attr(feature = "schema", schemars(extend("x-cli" = null, "x-python" = {"keyword": "none: `geom.shift(k)`"})))]
    pub shift: i64,
    /// This variable's sample axis. Absent: `sample_axis`.
    #[serde(default)]
    #[cfg_attr(feature = "schema", schemars(extend("x-cli" = null, "x-python" = {"keyword": "none: `geometries=`"})))]
    pub sample_axis: Option<usize>,
}

impl VariableSpec {
    /// The array at `path`, unshifted, on the spec's sample axis.
    pub fn at(path: &str) -> Self {
        Self { path: path.to_string(), shift: 0, sample_axis: None }
    }
}

impl VariablesSpec {
    /// The array paths these name, each once, in first-named order.
    pub fn paths(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        let named: Vec<&str> = match self {
            Self::Paths(p) => p.iter().map(String::as_str).collect(),
            Self::Labelled(l) => l.iter().map(|(_, v)| v.path.as_str()).collect(),
        };
        for p in named {
            let p = p.trim_matches('/').to_string();
            if !out.contains(&p) {
                out.push(p);
            }
        }
        out
    }
}

impl Serialize for VariablesSpec {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        match self {
            Self::Paths(p) => p.serialize(s),
            Self::Labelled(l) => s.collect_map(l.iter().map(|(k, v)| (k, v))),
        }
    }
}

// By hand: an object's key order is kept (the first label is the split's reference), and a
// label's value may be a path or an object.
impl<'de> Deserialize<'de> for VariablesSpec {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct One(VariableSpec);
        impl<'de> Deserialize<'de> for One {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
                struct Visit;
                impl<'de> serde::de::Visitor<'de> for Visit {
                    type Value = One;
                    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                        f.write_str("an array path, or {path, shift, sample_axis}")
                    }
                    fn visit_str<E: serde::de::Error>(self, s: &str) -> std::result::Result<One, E> {
                        Ok(One(VariableSpec::at(s)))
                    }
                    fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> std::result::Result<One, A::Error> {
                        VariableSpec::deserialize(serde::de::value::MapAccessDeserializer::new(map)).map(One)
                    }
                }
                d.deserialize_any(Visit)
            }
        }
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = VariablesSpec;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a list of array paths, or an object {label: path or {path, shift, sample_axis}}")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> std::result::Result<VariablesSpec, A::Error> {
                let mut out = Vec::new();
                while let Some(p) = seq.next_element::<String>()? {
                    out.push(p);
                }
                Ok(VariablesSpec::Paths(out))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> std::result::Result<VariablesSpec, A::Error> {
                let mut out = Vec::new();
                while let Some((label, One(v))) = map.next_entry::<String, One>()? {
                    out.push((label, v));
                }
                Ok(VariablesSpec::Labelled(out))
            }
        }
        d.deserialize_any(Visit)
    }
}

#[cfg(feature = "schema")]
impl schemars::JsonSchema for VariablesSpec {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "VariablesSpec".into()
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "Array paths, or `{label: path or {path, shift, sample_axis}}` in order.",
            "x-ts": "string[] | Record<string, string | VariableSpec>",
            "x-python": {"type": "list[str] | dict[str, str | VariableSpec]"},
            "x-object": "VariableSpec",
            "x-each": true,
        })
    }
}

/// The disk tier a spec asks for: `cache_dir` and its flags, checked against each other by
/// [`DatasetSpec::resolve`]. Each target opens it its own way (natively memory-mapped files,
/// in a browser the origin private file system), after [`CacheFlags::check_for`] its
/// [`TargetAbilities`]'s abilities.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CacheFlags {
    /// The directory.
    pub dir: String,
    /// Keep chunk files (and their log) after eviction and after the run.
    pub persist: bool,
    /// Read a complete cache; write nothing; a miss is an error.
    pub readonly: bool,
    /// Drop the chunks of arrays whose pipeline changed instead of refusing.
    pub reset_stale: bool,
    /// Fill and read the directory together with other processes.
    pub shared: bool,
}

/// What a target can do with the spec's options, for [`ResolvedSpec::check_for`] (and
/// [`CacheFlags::check_for`]): a target refuses what it lacks, in core's words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TargetAbilities {
    /// Where, as a refusal names it ("in a browser").
    pub place: &'static str,
    /// Its disk tier can hold chunks for one run only (memory-mapped files unlinked at
    /// once), so `cache_dir` alone is a tier; without it a cache needs `persist` or
    /// `readonly_cache`.
    pub spill: bool,
    /// Several processes can fill one cache directory together (`shared_cache`).
    pub shared_cache: bool,
    /// Its decode pool's size is an option (`threads`).
    pub threads: bool,
    /// It can serve the pass reports as metrics (`metrics_address`).
    pub metrics: bool,
}

impl TargetAbilities {
    /// The native engine (`insitubatch_native`: the CLI, the Rust API, the Python package).
    pub const NATIVE: Self = Self { place: "natively", spill: true, shared_cache: true, threads: true, metrics: true };
    /// The wasm engine (Node and browsers): a browser's disk tier (`wasm/src/opfs/`) persists
    /// or reads, one writer per directory; its threads are its build's; no metrics endpoint.
    pub const WASM: Self =
        Self { place: "in the wasm engine", spill: false, shared_cache: false, threads: false, metrics: false };
}

impl ResolvedSpec {
    /// Refuse what `target` cannot do.
    ///
    /// # Errors
    /// [`Error::InvalidOption`] naming the option and why.
    pub fn check_for(&self, target: &TargetAbilities) -> Result<()> {
        let place = target.place;
        if !target.threads && self.threads.is_some() {
            return Err(Error::option(
                "threads",
                format!(
                    "`threads` sizes the native engine's decode pool; {place} the pool is the build's (one thread, or \
                     the threaded build's workers): leave it out"
                ),
            ));
        }
        for (set, name) in [
            (self.metrics_address.is_some(), "metrics_address"),
            (self.metrics_cors_origin.is_some(), "metrics_cors_origin"),
        ] {
            if set && !target.metrics {
                return Err(Error::option(
                    name,
                    format!("`{name}` configures the native metrics endpoint; there is none {place}: leave it out"),
                ));
            }
        }
        self.cache.as_ref().map_or(Ok(()), |c| c.check_for(target))
    }
}

impl CacheFlags {
    /// The flags' rules on every target: `readonly_cache` never deletes (so not with
    /// `reset_stale_cache`), and `shared_cache` fills a persisted directory.
    ///
    /// # Errors
    /// [`Error::InvalidOption`] naming the flag and what to pass.
    pub fn check(&self) -> Result<()> {
        let dir = &self.dir;
        if self.readonly && self.reset_stale {
            return Err(Error::option(
                "reset_stale_cache",
                format!(
                    "`readonly_cache` and `reset_stale_cache` contradict each other: a read-only opener never deletes \
                     anything. Reset with a writer (`persist`), then open read-only: {dir}"
                ),
            ));
        }
        if self.shared && (self.readonly || !self.persist) {
            return Err(Error::option(
                "shared_cache",
                format!(
                    "`shared_cache` fills one `cache_dir` from several processes, so it needs `persist` and not \
                     `readonly_cache` (read-only openers share a finished cache without it): {dir}"
                ),
            ));
        }
        Ok(())
    }

    /// Refuse what this target's tier cannot do.
    ///
    /// # Errors
    /// [`Error::InvalidOption`] naming the flag and what to pass instead.
    pub fn check_for(&self, target: &TargetAbilities) -> Result<()> {
        if !target.spill && !self.persist && !self.readonly {
            return Err(Error::option(
                "cache_dir",
                format!(
                    "`cache_dir` {} keeps decoded chunks for later passes and page loads, so it needs `persist` (or \
                     `readonly_cache`, for a cache a writer warmed); there is no memory mapping to spill chunks to: {}",
                    target.place, self.dir
                ),
            ));
        }
        if !target.shared_cache && self.shared {
            return Err(Error::option(
                "shared_cache",
                format!(
                    "`shared_cache` is not available {}: one writer, or readers only, per directory: {}",
                    target.place, self.dir
                ),
            ));
        }
        Ok(())
    }
}

/// What a [`DatasetSpec`] resolves to: the core types the builder and the targets take,
/// every default applied and every rule checked.
#[derive(Debug, Clone)]
pub struct ResolvedSpec {
    /// The dataset's options (no tier or observers: those are program-side).
    pub dataset: DatasetOptions,
    /// How to split when no manifest is given; its seed is the split seed, or the seed.
    pub split: SplitOptions,
    /// The variables named (`None`: discover them).
    pub variables: Option<VariablesSpec>,
    /// The sample axis of variables named by path.
    pub sample_axis: usize,
    /// Decode threads (`None`: one per core).
    pub threads: Option<usize>,
    /// The disk tier asked for, its flags checked against each other.
    pub cache: Option<CacheFlags>,
    /// object_store options, in key order.
    pub storage_options: Vec<(String, String)>,
    /// The dimension a list of stores is concatenated along.
    pub concat_dim: String,
    /// Where to serve Prometheus metrics, if anywhere.
    pub metrics_address: Option<String>,
    /// The web origin the metrics endpoint allows, if any.
    pub metrics_cors_origin: Option<String>,
}

/// Keys callers used to pass that are spelled otherwise now: `(old path, new path, why)`. A
/// caller passing one gets a refusal naming the new key, not a list of the known ones.
const RETIRED: &[(&str, &str, &str)] = &[
    ("read_policy.backoff_ms", "read_policy.backoff_s", "in seconds: durations are seconds on every surface"),
    (
        "read_policy.request_timeout_ms",
        "read_policy.request_timeout_s",
        "in seconds: durations are seconds on every surface",
    ),
];

impl DatasetSpec {
    /// The top-level option names, as serde's derive reads them (from the derive itself).
    pub fn field_names() -> &'static [&'static str] {
        serde_fields::<Self>()
    }

    /// The spec's nested objects whose keys are option names too: a binding that renames
    /// keys (JS's camelCase) renames theirs, and only theirs (the keys of `sel`, `patch`,
    /// `storage_options` and `variables` are the caller's own). `variables.*`: each value of
    /// the labelled form. Checked against the JSON Schema by tools/boundary-types' test.
    pub fn nested_objects() -> Vec<(&'static str, &'static [&'static str])> {
        vec![
            ("read_policy", serde_fields::<ReadPolicySpec>()),
            ("read_policy.hedge", serde_fields::<HedgeFields>()),
            ("variables.*", serde_fields::<VariableSpec>()),
        ]
    }

    /// The refusal of a key the spec does not have at `path` (its spec path: the object's path
    /// and the key, `read_policy.retry`), written by the caller as `as_written`: it names the
    /// keys that object has (each binding spells them), and for a retired key the one that
    /// replaced it. For a binding that checks keys itself (serde-wasm-bindgen reads a
    /// struct's declared fields only, so `deny_unknown_fields` never sees the others).
    pub fn unknown_option(path: &str, as_written: &str) -> Error {
        if let Some((_, new, why)) = RETIRED.iter().find(|(old, _, _)| *old == path) {
            return Error::option(as_written, format!("`{path}` is now `{new}`, {why}"));
        }
        let parent = path.rsplit_once('.').map_or("", |(p, _)| p);
        let known = Self::keys_at(parent);
        let marked: Vec<String> = known
            .iter()
            .map(|k| if parent.is_empty() { format!("`{k}`") } else { format!("`{parent}.{k}`") })
            .collect();
        let what = if parent.is_empty() { "option".to_string() } else { format!("key of `{parent}`") };
        Error::option(as_written, format!("unknown {what} {as_written:?}; the known ones are {}", marked.join(", ")))
    }

    /// The keys of the object at spec path `path` (`""`: the spec's own; `read_policy`; a
    /// labelled variable `variables.x`), empty for an object whose keys are the caller's.
    pub fn keys_at(path: &str) -> &'static [&'static str] {
        if path.is_empty() {
            return Self::field_names();
        }
        let each = path.rsplit_once('.').map(|(head, _)| format!("{head}.*"));
        Self::nested_objects()
            .into_iter()
            .find(|(p, _)| *p == path || Some(*p) == each.as_deref())
            .map_or(&[][..], |(_, f)| f)
    }

    /// Read a spec from any serde source (pythonize, serde-wasm-bindgen, serde_json): a bad
    /// value or an unknown key is an option error naming it, and a retired key names the one
    /// that replaced it.
    ///
    /// # Errors
    /// [`Error::InvalidOption`] saying which option and why.
    pub fn from_deserializer<'de, D>(d: D) -> Result<Self>
    where
        D: serde::Deserializer<'de>,
        D::Error: std::fmt::Display,
    {
        serde_path_to_error::deserialize(d).map_err(|e| {
            let keys: Vec<String> = e
                .path()
                .iter()
                .map(|s| match s {
                    serde_path_to_error::Segment::Map { key } => key.clone(),
                    serde_path_to_error::Segment::Seq { index } => format!("[{index}]"),
                    serde_path_to_error::Segment::Enum { variant } => variant.clone(),
                    serde_path_to_error::Segment::Unknown => "?".into(),
                })
                .collect();
            option_error(&keys, without_position(&e.inner().to_string()))
        })
    }

    /// Check every rule and apply every default: the one place the options are decided.
    ///
    /// # Errors
    /// [`Error::InvalidOption`] for a count below its minimum, a rank outside the world, a
    /// mesh or node affinity that does not divide it, an axis without a mesh or a mesh
    /// without an axis, a duration that is negative or not finite, hedging bounds, patch
    /// options core refuses, fractions that do not sum to 1, an empty sample range, weights
    /// out of range, cache flags that contradict each other, or a metrics origin without an
    /// endpoint.
    pub fn resolve(&self) -> Result<ResolvedSpec> {
        let knobs = self.knobs()?;
        if let Some(k) = self.node_ranks {
            crate::ranks::check_node_ranks(k, self.world_size)?;
        }
        let model_parallel = self.mesh()?;
        if let Some(threads) = self.threads {
            at_least("threads", threads as u64, 1)?;
        }
        if let Some(w) = &self.sample_weights {
            crate::draws::check_weights(w)?;
        }
        if self.metrics_cors_origin.is_some() && self.metrics_address.is_none() {
            return Err(Error::option(
                "metrics_cors_origin",
                "`metrics_cors_origin` names the web page that may read the metrics endpoint, and no endpoint was \
                 asked for; pass `metrics_address` too",
            ));
        }
        let patch = PatchOptions::from_words(
            self.patch.clone().map(|a| a.0),
            self.patch_mode,
            self.patch_stride.clone().map(|a| a.0),
            self.patches_per_sample,
        )?;
        let dataset = DatasetOptions {
            knobs,
            read_policy: self.read_policy.resolve()?,
            node_ranks: self.node_ranks,
            patch,
            sample_mask: self.sample_mask.clone().map(Into::into),
            sample_weights: self.sample_weights.clone().map(Into::into),
            model_parallel,
            sel: self.sel.0.clone(),
            ..DatasetOptions::default()
        };
        Ok(ResolvedSpec {
            dataset,
            split: self.split()?,
            variables: self.variables.clone(),
            sample_axis: self.sample_axis,
            threads: self.threads,
            cache: self.cache_flags()?,
            storage_options: self.storage_options.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            concat_dim: self.concat_dim.clone(),
            metrics_address: self.metrics_address.clone(),
            metrics_cors_origin: self.metrics_cors_origin.clone(),
        })
    }

    /// The engine's knobs ([`Knobs::checked`]: counts checked, `prefetch_depth` at least 1).
    fn knobs(&self) -> Result<Knobs> {
        Knobs {
            batch_size: self.batch_size,
            block_chunks: self.block_chunks,
            first_block_chunks: self.first_block_chunks,
            max_inflight: self.max_inflight,
            seed: self.seed,
            shuffle: self.shuffle,
            prefetch_depth: self.prefetch_depth.max(1),
            cache_budget_bytes: self.cache_budget_bytes,
            on_bad_chunk: self.on_bad_chunk,
            rank: self.rank,
            world_size: self.world_size,
            coords: self.coords,
        }
        .checked()
    }

    /// The rank mesh: a size of 1 is none (on every surface); a size above 1 needs an axis
    /// and an axis needs a size above 1; the size divides the world and holds whole nodes.
    fn mesh(&self) -> Result<Option<ModelParallel>> {
        at_least("model_parallel", self.model_parallel as u64, 1)?;
        match (self.model_parallel, &self.model_parallel_axis) {
            (1, None) => Ok(None),
            (1, Some(axis)) => Err(Error::option(
                "model_parallel_axis",
                format!(
                    "`model_parallel_axis` ({axis}) names the axis a model-parallel group splits its rows along, and \
                     `model_parallel` is 1 (no groups); pass `model_parallel` > 1 too, or leave the axis out"
                ),
            )),
            (size, None) => Err(Error::option(
                "model_parallel_axis",
                format!(
                    "`model_parallel` {size} splits every row along an axis: pass `model_parallel_axis` (a dimension \
                     name or an axis index)"
                ),
            )),
            (size, Some(axis)) => {
                let mesh = ModelParallel { size, axis: axis.clone() };
                mesh.check(self.world_size, self.node_ranks)?;
                Ok(Some(mesh))
            }
        }
    }

    /// The split: fractions and sample range checked, the split seed defaulting to the seed.
    fn split(&self) -> Result<SplitOptions> {
        crate::split::check_fractions(self.fractions)?;
        if let Some((start, stop)) = self.sample_range
            && start >= stop
        {
            return Err(Error::option(
                "sample_range",
                format!("`sample_range` ({start}, {stop}) must satisfy start < stop: it is [start, stop)"),
            ));
        }
        Ok(SplitOptions {
            fractions: self.fractions,
            seed: self.split_seed.unwrap_or(self.seed),
            contiguous: !self.shuffle_splits,
            sample_range: self.sample_range,
        })
    }

    /// The cache flags, checked against each other (each target checks its abilities and,
    /// natively, that a read-only directory exists).
    fn cache_flags(&self) -> Result<Option<CacheFlags>> {
        let Some(dir) = &self.cache_dir else {
            let named = [
                (self.persist, "persist"),
                (self.readonly_cache, "readonly_cache"),
                (self.reset_stale_cache, "reset_stale_cache"),
                (self.shared_cache, "shared_cache"),
            ];
            return match named.into_iter().find_map(|(set, name)| set.then_some(name)) {
                Some(flag) => Err(Error::option(
                    flag,
                    format!("`{flag}` requires `cache_dir`: pass a directory for the cached chunks"),
                )),
                None => Ok(None),
            };
        };
        let flags = CacheFlags {
            dir: dir.clone(),
            persist: self.persist,
            readonly: self.readonly_cache,
            reset_stale: self.reset_stale_cache,
            shared: self.shared_cache,
        };
        flags.check()?;
        Ok(Some(flags))
    }
}

impl ReadPolicySpec {
    /// Core's policy: durations non-negative and finite (the timeout above 0), hedging bounds
    /// checked.
    ///
    /// # Errors
    /// [`Error::InvalidOption`] naming the key and its bounds.
    pub fn resolve(&self) -> Result<ReadPolicy> {
        let seconds = |key: &str, s: f64| {
            std::time::Duration::try_from_secs_f64(s).map_err(|_| {
                Error::option(
                    format!("read_policy.{key}"),
                    format!("`read_policy.{key}` must be a finite number of seconds >= 0, got {s}"),
                )
            })
        };
        let policy = ReadPolicy {
            retries: self.retries,
            backoff: seconds("backoff_s", self.backoff_s)?,
            request_timeout: seconds("request_timeout_s", self.request_timeout_s)?,
            coalesce_gap_bytes: self.coalesce_gap_bytes,
            coalesce_max_bytes: self.coalesce_max_bytes,
            hedge: self.hedge.resolve(),
            read_ahead_bytes: self.read_ahead_bytes,
        };
        policy.check()?;
        Ok(policy)
    }
}

impl HedgeSpec {
    /// Core's hedging policy (`None`: off); its bounds are [`HedgePolicy::check`]'s, which
    /// [`ReadPolicy::check`] applies.
    pub fn resolve(&self) -> Option<HedgePolicy> {
        match self {
            Self::Flag(false) => None,
            Self::Flag(true) => Some(HedgePolicy::default()),
            Self::Policy(h) => Some(HedgePolicy {
                quantile: h.quantile,
                multiple: h.multiple,
                max_share: h.max_share,
                min_samples: h.min_samples,
            }),
        }
    }
}

/// `value` of option `name` is at least `min`: the count rule of every option.
///
/// # Errors
/// [`Error::InvalidOption`] naming it.
pub(crate) fn at_least(name: &str, value: u64, min: u64) -> Result<()> {
    if value < min {
        return Err(Error::option(name, format!("`{name}` must be >= {min}, got {value}")));
    }
    Ok(())
}

/// The option error for what serde refused at `path` (its keys, `[i]` for list items) with
/// `message`: the option is the path as far as it names fields of the spec's structs, an
/// unknown key is refused naming the keys its object has (each binding spells them), and
/// serde's backticks around values are dropped so that only option names are marked.
fn option_error(path: &[String], message: &str) -> Error {
    let nested = DatasetSpec::nested_objects();
    let mut option: Vec<&str> = Vec::new();
    let mut fields = Some(DatasetSpec::field_names());
    for key in path {
        let Some(known) = fields else { break };
        if !known.contains(&key.as_str()) {
            let parent = option.join(".");
            let unknown = if parent.is_empty() { key.clone() } else { format!("{parent}.{key}") };
            return DatasetSpec::unknown_option(&unknown, &unknown);
        }
        option.push(key);
        let here = option.join(".");
        fields = nested.iter().find(|(p, _)| *p == here).map(|(_, f)| *f);
    }
    let option = option.join(".");
    let rest: String = path[option.split('.').filter(|s| !s.is_empty()).count()..]
        .iter()
        .map(|k| if k.starts_with('[') { k.clone() } else { format!("[{k:?}]") })
        .collect();
    let text = message.replace('`', "");
    let text = match text.strip_prefix(option.as_str()) {
        Some(tail) if !option.is_empty() => format!("`{option}`{tail}"),
        _ => format!("`{option}`{rest}: {text}"),
    };
    Error::option(option, text)
}

/// A deserializer's message without its dressing: serde_json's position (` at line 1 column
/// 17`; the option names where the value was, and the other sources, Python's and JS's
/// objects, have none) and serde_wasm_bindgen's `Error: ` (its errors are JS `Error`s, shown
/// by JS's `String()`).
fn without_position(message: &str) -> &str {
    let message = message.strip_prefix("Error: ").unwrap_or(message);
    match message.rsplit_once(" at line ") {
        Some((head, tail))
            if tail.split(" column ").all(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())) =>
        {
            head
        }
        _ => message,
    }
}

/// The field names serde's derive gives `T`, read from the derive itself: a deserializer
/// that answers `deserialize_struct` by returning the names it was handed. By hand: serde
/// exports no other way to list a struct's fields, and a hand-kept list would be a second
/// copy of them.
fn serde_fields<'de, T: Deserialize<'de>>() -> &'static [&'static str] {
    match T::deserialize(FieldNames) {
        Err(Found(fields)) => fields,
        Ok(_) => &[],
    }
}

/// The "error" [`FieldNames`] returns: the fields it saw.
#[derive(Debug)]
struct Found(&'static [&'static str]);

impl std::fmt::Display for Found {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "fields {:?}", self.0)
    }
}

impl std::error::Error for Found {}

impl serde::de::Error for Found {
    fn custom<T: std::fmt::Display>(_: T) -> Self {
        Self(&[])
    }
}

/// See [`serde_fields`].
struct FieldNames;

impl<'de> serde::Deserializer<'de> for FieldNames {
    type Error = Found;

    fn deserialize_struct<V: serde::de::Visitor<'de>>(
        self,
        _: &'static str,
        fields: &'static [&'static str],
        _: V,
    ) -> std::result::Result<V::Value, Found> {
        Err(Found(fields))
    }

    fn deserialize_any<V: serde::de::Visitor<'de>>(self, _: V) -> std::result::Result<V::Value, Found> {
        Err(Found(&[]))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf option unit
        unit_struct newtype_struct seq tuple tuple_struct map enum identifier ignored_any
    }
}

#[cfg(test)]
#[path = "spec_tests.rs"]
mod tests;
