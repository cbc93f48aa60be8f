//! The dashboard's exports (`www/`): open a store's metadata once, then answer "what would
//! this configuration do?" for every move of a control without touching the store again.
//!
//! `open()` (api/open.rs) reads metadata and builds one dataset for one configuration; the
//! dashboard needs hundreds of configurations per minute. Core's `DatasetBuilder::build` does no I/O,
//! so the [`Model`] here keeps the opened [`ZarrArray`]s and builds a fresh dataset per
//! question: the describe report, the draw order of an epoch, and the shuffle quality across
//! block sizes all come from the same code paths the engine runs (no re-implementation).

use std::num::NonZeroUsize;
use std::sync::Arc;

use insitubatch_core::runtime::{Job, Runtime, Storage, ThreadPool};
use insitubatch_core::{Dataset, DatasetBuilder, Error, TierOpener, ZarrArray};
pub use insitubatch_core::{DrawOrderReport, QualityPoint};
use serde::Serialize;

use crate::JsOpenOptions;

/// A thread pool that runs jobs inline but answers `parallelism()` with a chosen count.
///
/// `describe()` sizes the batch queue and transform scratch by the pool's parallelism, so a
/// what-if for "N decode threads" (the CLI's `--threads N`, the threaded wasm build) needs a
/// pool that reports N. The jobs of the explorer's previews and probes run on the calling
/// thread, one at a time: the probe's per-thread decode rate is measured so, and scaled to
/// the N threads asked about.
#[derive(Debug)]
pub struct WhatIfPool(pub NonZeroUsize);

impl ThreadPool for WhatIfPool {
    fn execute(&self, job: Job) {
        job();
    }
    fn parallelism(&self) -> NonZeroUsize {
        self.0
    }
}

/// What a question assumes besides the options: decode threads (the memory model sizes the
/// queue and scratch by them), the epoch, and a window shift (0: none).
#[derive(Debug, Clone, Copy)]
pub struct WhatIf {
    /// Decode threads (at least 1).
    pub threads: usize,
    /// The epoch.
    pub epoch: u64,
    /// A windowed view: each variable again, `shift` samples on, as `label@+shift`.
    pub shift: i64,
}

/// One array of the store as the dashboard lists it.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ArrayInfo {
    /// Array path (the label of a variable).
    pub path: String,
    /// Shape, physical order.
    pub shape: Vec<u64>,
    /// Fetch unit: the stored chunk, or the inner chunk of a shard.
    pub chunks: Vec<u64>,
    /// Shard shape, when sharded.
    pub shard: Option<Vec<u64>>,
    /// Element type.
    #[cfg_attr(feature = "schema", schemars(with = "insitubatch_core::DType"))]
    pub dtype: String,
    /// Codec chain.
    pub codecs: Vec<String>,
    /// Dimension names, when the metadata has them.
    pub dimension_names: Option<Vec<Option<String>>>,
    /// Zarr format (2 or 3).
    #[cfg_attr(feature = "schema", schemars(extend("enum" = [2, 3])))]
    pub zarr_format: u8,
    /// A CF coordinate (skipped by discovery; never a training variable by default).
    pub coordinate: bool,
    /// The array's attributes (units, long_name, ...).
    pub attributes: serde_json::Map<String, serde_json::Value>,
}

impl ArrayInfo {
    fn of(a: &ZarrArray) -> Self {
        Self {
            path: a.path().to_string(),
            shape: a.shape().to_vec(),
            chunks: a.tile_shape().to_vec(),
            shard: a.shard_shape().map(<[u64]>::to_vec),
            dtype: a.dtype().to_string(),
            codecs: a.codec_names(),
            dimension_names: a.dimension_names(),
            zarr_format: a.zarr_format(),
            coordinate: a.is_coordinate(),
            attributes: a.attributes().clone(),
        }
    }
}

/// A store's opened arrays (data arrays and coordinates); every question builds a dataset
/// over them without I/O.
#[derive(Debug, Clone)]
pub struct Model {
    /// Data arrays, as discovery (or the caller) chose them.
    pub arrays: Vec<ZarrArray>,
    /// Coordinates found next to them (listed, not trained on unless named).
    pub coordinates: Vec<ZarrArray>,
}

impl Model {
    /// Every array, data first, then coordinates.
    pub fn infos(&self) -> Vec<ArrayInfo> {
        self.arrays.iter().chain(&self.coordinates).map(ArrayInfo::of).collect()
    }

    /// A dataset builder for `opts` over the opened arrays (`opts.variables` picks among
    /// them): what-ifs build from it with no I/O. `tier` is the explorer's disk tier
    /// (`cacheDir`), for its passes only.
    ///
    /// # Errors
    /// [`Error::Config`] for a variable that was not opened, and bad options.
    pub fn builder(
        &self,
        storage: Arc<dyn Storage>,
        executor: Arc<dyn insitubatch_core::Executor>,
        opts: &JsOpenOptions,
        at: WhatIf,
        tier: Option<Arc<dyn TierOpener>>,
    ) -> Result<DatasetBuilder, Error> {
        let WhatIf { threads, shift, .. } = at;
        let resolved = opts.to_core()?;
        if resolved.cache.is_some() {
            return Err(Error::option(
                "cache_dir",
                "the explorer's disk tier is opened once, with the explorer: pass `cache_dir` (and `persist`, \
                 `readonly_cache`, `reset_stale_cache`) to openExplorer, not to its questions",
            ));
        }
        let (split, mut options) = (resolved.split, resolved.dataset);
        options.tier = tier;
        let opened: Vec<ZarrArray> = self.arrays.iter().chain(&self.coordinates).cloned().collect();
        // The what-if's shift, else the options' own window.
        let shift = if shift != 0 { shift } else { opts.shift.unwrap_or(0) };
        let variables = opts.variables_over(&opened, &self.arrays, shift)?;
        let pool = WhatIfPool(NonZeroUsize::new(threads).unwrap_or(NonZeroUsize::MIN));
        let runtime = Runtime::new(executor, Arc::new(pool)).with_memory_available(crate::memory_available());
        Ok(Dataset::builder(storage, runtime).opened(opened).variables(variables).split(split).options(options))
    }

    /// A dataset for `opts` over the opened arrays, at the what-if's epoch (no I/O). With a
    /// disk `tier`, its passes read through it (the explorer's previews, which a reload reads
    /// again without the network); the what-ifs pass none: they answer for the run being
    /// configured, which the browser's cache is no part of.
    ///
    /// # Errors
    /// As [`Model::builder`], whatever the builder refuses (zero knobs, a budget below the
    /// floor, bad fractions, ...), and a stale or unusable tier ([`TierOpener::open`]).
    pub fn dataset(
        &self,
        storage: Arc<dyn Storage>,
        executor: Arc<dyn insitubatch_core::Executor>,
        opts: &JsOpenOptions,
        at: WhatIf,
        tier: Option<Arc<dyn TierOpener>>,
    ) -> Result<Dataset, Error> {
        let ds = self.builder(storage, executor, opts, at, tier)?.build()?;
        ds.set_epoch(at.epoch);
        Ok(ds)
    }

    /// Shuffle quality and memory for each `block_chunks` in `values`, the rest of `opts`
    /// kept (core's [`DatasetBuilder::quality_curve`]).
    ///
    /// # Errors
    /// As [`Model::builder`] and [`DatasetBuilder::quality_curve`].
    pub fn quality_curve(
        &self,
        storage: &Arc<dyn Storage>,
        executor: &Arc<dyn insitubatch_core::Executor>,
        opts: &JsOpenOptions,
        at: WhatIf,
        values: &[usize],
    ) -> Result<Vec<QualityPoint>, Error> {
        self.builder(Arc::clone(storage), Arc::clone(executor), opts, at, None)?.quality_curve(values, at.epoch)
    }
}

/// Coordinates worth listing next to `data`: arrays named after one of their dimensions
/// (the CF convention discovery skips). `open` returns `Ok(None)` for a name with no array.
pub fn coordinate_names(data: &[ZarrArray]) -> Vec<String> {
    let mut names: Vec<String> = data
        .iter()
        .filter_map(ZarrArray::dimension_names)
        .flatten()
        .flatten()
        .filter(|n| !data.iter().any(|a| a.path() == n))
        .collect();
    names.sort();
    names.dedup();
    names
}

/// The label of `label`'s target in a view shifted by `shift` samples (`t2m@+1`).
pub fn target_label(label: &str, shift: i64) -> String {
    format!("{label}@{shift:+}")
}

#[cfg(target_arch = "wasm32")]
mod js {
    use super::*;
    use crate::LocalExecutor;
    use crate::api::{PassCursor, batch_to_js, parse_options, probe_chunks, probe_promise, signed, to_js, whole};
    use crate::errors::{err, js_error};
    use crate::storage::FetchStorage;
    use insitubatch_core::internals::PolicyStorage;
    use wasm_bindgen::prelude::*;

    /// Open the metadata of the store at `url` (`http(s)://`) once, for the dashboard:
    /// `variables` as in `open()` (absent: discover; needs consolidated metadata).
    /// `cache`: `{ cacheDir, persist, readonlyCache, resetStaleCache }` as `open()` takes
    /// them, a disk tier for the explorer's passes (absent: none).
    #[wasm_bindgen(js_name = openExplorer)]
    pub async fn open_explorer(
        url: String,
        variables: Option<Vec<String>>,
        cache: JsValue,
    ) -> Result<Explorer, JsValue> {
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(js_error(&format!("unsupported store URL; use http:// or https://: {url}")));
        }
        explorer_on(Arc::new(FetchStorage::new(&url)), url, variables, cache).await
    }

    /// [`open_explorer`] over a JS storage object (`{ get(key, range), list?(prefix),
    /// location? }`, see [`JsStorage`](crate::JsStorage)): the notebook widget's store read
    /// through the kernel. `url`: the store as the caller names it; absent, the object's
    /// `location`. Not in the threaded build, as `openWithStorage` (`wasm/src/api/open.rs`).
    #[cfg(not(feature = "threads"))]
    #[wasm_bindgen(js_name = openExplorerWithStorage)]
    pub async fn open_explorer_with_storage(
        storage: JsValue,
        url: Option<String>,
        variables: Option<Vec<String>>,
        cache: JsValue,
    ) -> Result<Explorer, JsValue> {
        let storage = crate::JsStorage::new(&storage, url.as_deref().unwrap_or("(a JS storage object)"))
            .map_err(|e| js_error(&e))?;
        let url = url.unwrap_or_else(|| storage.location());
        explorer_on(Arc::new(storage), url, variables, cache).await
    }

    /// The arrays `variables` names (or all, discovered) and the coordinates their
    /// dimensions name, read once from `storage`.
    async fn explorer_on(
        storage: Arc<dyn Storage>,
        url: String,
        variables: Option<Vec<String>>,
        cache: JsValue,
    ) -> Result<Explorer, JsValue> {
        let flags = parse_options(cache)?.to_core().map_err(err)?.cache;
        let dir = flags.as_ref().map(crate::opfs::OpfsDir::from_flags).transpose().map_err(err)?;
        let tier = match dir {
            // The explorer's jobs run on the calling thread (`WhatIfPool`), so do its checksums.
            Some(flags) => {
                let pool: Arc<dyn ThreadPool> = Arc::new(insitubatch_core::runtime::InlinePool);
                Some(crate::opfs::opener(flags, pool).await.map_err(err)?)
            }
            None => None,
        };
        // The metadata reads are retried as a dataset's would be (core's default ReadPolicy).
        let executor: Arc<dyn insitubatch_core::Executor> = Arc::new(LocalExecutor::new());
        let reads = PolicyStorage::new(Arc::clone(&storage), executor, insitubatch_core::ReadPolicy::default());
        let arrays = insitubatch_core::internals::open_arrays(&reads, variables.as_deref()).await.map_err(err)?;
        let mut coordinates = Vec::new();
        for name in coordinate_names(&arrays) {
            // A dimension without an array of its name is common (no coordinate stored).
            match insitubatch_core::internals::open_array(&reads, &name).await {
                Ok(a) if a.is_coordinate() => coordinates.push(a),
                Ok(_) | Err(Error::ArrayNotFound { .. }) => {}
                Err(e) => return Err(err(e)),
            }
        }
        Ok(Explorer { storage, model: Model { arrays, coordinates }, url, tier })
    }

    /// A store's metadata, opened once; every method answers from it without I/O.
    #[wasm_bindgen]
    pub struct Explorer {
        storage: Arc<dyn Storage>,
        model: Model,
        url: String,
        /// The disk tier (`cacheDir`, given to `openExplorer`; wasm/src/opfs/), held while
        /// the explorer lives: its passes read and fill it, so previews come back after a
        /// reload without the network. The what-ifs and the probe are built without it.
        tier: Option<Arc<dyn insitubatch_core::TierOpener>>,
    }

    impl Explorer {
        /// The model's dataset for JS arguments (`tier`: the explorer's, for its passes).
        fn dataset(
            &self,
            options: JsValue,
            epoch: f64,
            threads: f64,
            shift: f64,
            tier: Option<Arc<dyn insitubatch_core::TierOpener>>,
        ) -> Result<(Dataset, u64), JsValue> {
            let opts = parse_options(options)?;
            let epoch = whole("epoch", epoch)?;
            let threads = whole("threads", threads)?.max(1) as usize;
            let shift = signed("shift", shift)?;
            let executor: Arc<dyn insitubatch_core::Executor> = Arc::new(LocalExecutor::new());
            let ds = self
                .model
                .dataset(Arc::clone(&self.storage), executor, &opts, WhatIf { threads, epoch, shift }, tier)
                .map_err(err)?;
            Ok((ds, epoch))
        }

        /// The describe report `describe()` and `describeText()` return.
        fn report(
            &self,
            options: JsValue,
            epoch: f64,
            iterations: f64,
            threads: f64,
            shift: f64,
        ) -> Result<insitubatch_core::DatasetReport, JsValue> {
            let (ds, _) = self.dataset(options, epoch, threads, shift, None)?;
            let n = whole("iterations", iterations)?.max(1) as usize;
            ds.describe(n).map_err(err)
        }
    }

    #[wasm_bindgen]
    impl Explorer {
        /// The store URL as given.
        #[wasm_bindgen(getter)]
        pub fn url(&self) -> String {
            self.url.clone()
        }

        /// Every array (data first, then coordinates): path, shape, chunks, shard, dtype,
        /// codecs, dimension names, attributes, and whether it is a coordinate.
        pub fn arrays(&self) -> Result<JsValue, JsValue> {
            to_js(&self.model.infos())
        }

        /// The describe report for `options` (as `open()` takes them) at `epoch`, for
        /// `iterations` concurrent passes and `threads` decode threads. No I/O.
        pub fn describe(
            &self,
            options: JsValue,
            epoch: f64,
            iterations: f64,
            threads: f64,
            shift: f64,
        ) -> Result<JsValue, JsValue> {
            to_js(&self.report(options, epoch, iterations, threads, shift)?)
        }

        /// The same report as text.
        #[wasm_bindgen(js_name = describeText)]
        pub fn describe_text(
            &self,
            options: JsValue,
            epoch: f64,
            iterations: f64,
            threads: f64,
            shift: f64,
        ) -> Result<String, JsValue> {
            Ok(self.report(options, epoch, iterations, threads, shift)?.render())
        }

        /// The draw order of `split` at `epoch`: anchors, their chunks, shuffle blocks, quality.
        #[wasm_bindgen(js_name = drawOrder)]
        pub fn draw_order(&self, options: JsValue, split: &str, epoch: f64, shift: f64) -> Result<JsValue, JsValue> {
            let split = crate::parse_split(split).map_err(crate::errors::text_err)?;
            let (ds, epoch) = self.dataset(options, epoch, 1.0, shift, None)?;
            to_js(&ds.draw_order_report(split, epoch).map_err(err)?)
        }

        /// Shuffle quality and memory for each `block_chunks` in `values`.
        #[wasm_bindgen(js_name = qualityCurve)]
        pub fn quality_curve(
            &self,
            options: JsValue,
            epoch: f64,
            threads: f64,
            shift: f64,
            values: Vec<f64>,
        ) -> Result<JsValue, JsValue> {
            let opts = parse_options(options)?;
            let epoch = whole("epoch", epoch)?;
            let threads = whole("threads", threads)?.max(1) as usize;
            let shift = signed("shift", shift)?;
            let values: Vec<usize> =
                values.iter().map(|&v| whole("block_chunks", v).map(|v| v as usize)).collect::<Result<_, _>>()?;
            let executor: Arc<dyn insitubatch_core::Executor> = Arc::new(LocalExecutor::new());
            to_js(
                &self
                    .model
                    .quality_curve(&self.storage, &executor, &opts, WhatIf { threads, epoch, shift }, &values)
                    .map_err(err)?,
            )
        }

        /// One epoch of `split` for `options` (a windowed view when `shift` is not 0: each
        /// variable also as `label@+shift`), read from the store on this thread, through the
        /// explorer's disk tier if it has one, unless `cached` is `false`.
        pub fn iter(
            &self,
            options: JsValue,
            split: &str,
            epoch: f64,
            shift: f64,
            cached: Option<bool>,
        ) -> Result<ExploreStream, JsValue> {
            let split = crate::parse_split(split).map_err(crate::errors::text_err)?;
            let tier = if cached.unwrap_or(true) { self.tier.clone() } else { None };
            let (ds, _) = self.dataset(options, epoch, 1.0, shift, tier)?;
            Ok(ExploreStream { cursor: PassCursor::new(ds.iter(split).map_err(err)?) })
        }

        /// Probe the store for `options` at `epoch` (a windowed view when `shift` is not 0):
        /// a few real reads and decodes of the train split, timed, and the epoch they predict
        /// for `threads` decode threads (default 1, this thread; `chunks`: as `Dataset.probe`).
        /// A promise of the report; it reads the store, unlike the other questions.
        pub fn probe(
            &self,
            options: JsValue,
            epoch: f64,
            shift: f64,
            chunks: Option<f64>,
            threads: Option<f64>,
        ) -> js_sys::Promise {
            // Without the disk tier: the probe times the store's reads and decodes.
            let built = probe_chunks(chunks)
                .and_then(|n| Ok((self.dataset(options, epoch, threads.unwrap_or(1.0), shift, None)?.0, n)));
            match built {
                Ok((ds, n)) => probe_promise(ds, n, ()),
                Err(e) => js_sys::Promise::reject(&e),
            }
        }
    }

    /// A pass of [`Explorer::iter`]. Batches come as raw bytes per array (`explore.js` makes
    /// typed views of them), so no dtype table is repeated here.
    #[wasm_bindgen]
    pub struct ExploreStream {
        cursor: PassCursor,
    }

    #[wasm_bindgen]
    impl ExploreStream {
        /// Batches this pass yields in all.
        #[wasm_bindgen(getter)]
        pub fn length(&self) -> usize {
            self.cursor.len()
        }

        /// `{ arrays: { label: { bytes, dtype, shape } }, sampleIndices, offsets, index, epoch }`,
        /// or `undefined` after the last batch.
        pub fn next(&self) -> js_sys::Promise {
            self.cursor.next(batch_to_js, ())
        }

        /// Stats of this pass so far (`undefined` once it has ended).
        pub fn stats(&self) -> Result<JsValue, JsValue> {
            self.cursor.stats()
        }

        /// End the pass now and free its memory.
        pub fn close(&self) {
            self.cursor.close();
        }
    }
}

#[cfg(target_arch = "wasm32")]
pub use js::*;

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use super::*;
    use insitubatch_core::{DatasetSpec, Split, VariablesSpec};
    use insitubatch_native::{NativeRuntime, demo, open_storage};

    fn demo_store(n_time: u64) -> (tempfile_dir::Dir, String) {
        let dir = tempfile_dir::Dir::new();
        let path = dir.0.join("demo.zarr");
        demo::write_demo_store_sized(&path, n_time).expect("write the demo store");
        let url = format!("file://{}", path.display());
        (dir, url)
    }

    /// A temporary directory removed on drop (std only; the crate has no tempfile dependency).
    mod tempfile_dir {
        pub struct Dir(pub std::path::PathBuf);
        impl Dir {
            pub fn new() -> Self {
                let p = std::env::temp_dir().join(format!(
                    "ib-explore-{}-{}",
                    std::process::id(),
                    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos()
                ));
                std::fs::create_dir_all(&p).unwrap();
                Self(p)
            }
        }
        impl Drop for Dir {
            fn drop(&mut self) {
                let _ = std::fs::remove_dir_all(&self.0);
            }
        }
    }

    fn model(rt: &NativeRuntime, url: &str) -> (Model, Arc<dyn Storage>) {
        let storage = open_storage(url, &[]).expect("storage");
        rt.block_on(async {
            let arrays = insitubatch_core::internals::open_arrays(storage.as_ref(), None).await.unwrap();
            let mut coordinates = Vec::new();
            for n in coordinate_names(&arrays) {
                if let Ok(a) = insitubatch_core::internals::open_array(storage.as_ref(), &n).await {
                    coordinates.push(a);
                }
            }
            (Model { arrays, coordinates }, storage)
        })
    }

    #[test]
    fn describe_over_opened_metadata_equals_the_native_open() {
        let (_dir, url) = demo_store(48);
        let rt = NativeRuntime::new(Some(2)).unwrap();
        let (m, storage) = model(&rt, &url);
        let infos = m.infos();
        let paths: Vec<(&str, bool)> = infos.iter().map(|i| (i.path.as_str(), i.coordinate)).collect();
        assert_eq!(paths, [("t2m", false), ("u10", false), ("lat", true), ("lon", true), ("time", true)]);
        let executor: Arc<dyn insitubatch_core::Executor> =
            Arc::new(insitubatch_native::TokioExecutor::new(rt.handle()));
        // The model's dataset for `opts` at a what-if, without a disk tier.
        let dataset =
            |opts: &JsOpenOptions, at: WhatIf| m.dataset(Arc::clone(&storage), Arc::clone(&executor), opts, at, None);
        for (bs, bc, pf, epoch) in [(8, 2, 2, 0), (5, 1, 4, 3), (16, 4, 1, 1)] {
            let spec =
                DatasetSpec { batch_size: bs, block_chunks: bc, prefetch_depth: pf, seed: 7, ..Default::default() };
            let opts = JsOpenOptions { spec: spec.clone(), ..Default::default() };
            let ds = dataset(&opts, WhatIf { threads: 2, epoch, shift: 0 }).unwrap();
            let ours = serde_json::to_value(ds.describe(1).unwrap()).unwrap();
            let native = insitubatch_native::open(
                &url,
                insitubatch_native::OpenOptions::from_spec(DatasetSpec { threads: Some(2), ..spec }),
            )
            .unwrap();
            native.set_epoch(epoch);
            let mut theirs = serde_json::to_value(native.describe(1).unwrap()).unwrap();
            // The one figure that differs by design: off wasm the explorer knows no memory
            // size (`memory_available()` is None there), native reads the machine's.
            assert_eq!(ours["memory"]["memory_available_bytes"], serde_json::Value::Null);
            theirs["memory"]["memory_available_bytes"] = serde_json::Value::Null;
            assert_eq!(ours, theirs, "batch {bs} block_chunks {bc} prefetch {pf} epoch {epoch}");
            // The draw order is the dataset's, with chunks and blocks that agree with it.
            let d = ds.draw_order_report(Split::Train, epoch).unwrap();
            assert_eq!(d.anchors, native.dataset().draw_order(Split::Train, epoch));
            for b in 0..d.bounds.len() - 1 {
                for k in d.bounds[b]..d.bounds[b + 1] {
                    assert_eq!(d.chunks[k], d.anchors[k] / d.samples_per_chunk);
                    assert!(d.block_chunks[b].contains(&d.chunks[k]));
                }
            }
            assert_eq!(d.quality, ours["config"]["shuffle_quality"].as_f64().unwrap());
        }
        // A variable that is not in the store is a clear error, not a panic.
        let nope = DatasetSpec { variables: Some(VariablesSpec::Paths(vec!["nope".into()])), ..Default::default() };
        let bad = JsOpenOptions { spec: nope, ..Default::default() };
        let e = dataset(&bad, WhatIf { threads: 1, epoch: 0, shift: 0 }).unwrap_err().to_string();
        assert!(e.contains("\"nope\"") && e.contains("t2m"), "{e}");
        // The disk tier is the explorer's, opened with it: a question naming one is refused.
        let cached = DatasetSpec { cache_dir: Some("c".into()), persist: true, ..Default::default() };
        let cached = JsOpenOptions { spec: cached, ..Default::default() };
        let e = dataset(&cached, WhatIf { threads: 1, epoch: 0, shift: 0 }).unwrap_err();
        let e = e.message_in(&insitubatch_core::camel_case);
        assert!(e.contains("pass cacheDir") && e.contains("to openExplorer"), "{e}");
        // A windowed view: every variable again as a target `shift` samples on, read for real.
        let opts = JsOpenOptions {
            spec: DatasetSpec { batch_size: 6, block_chunks: 2, ..Default::default() },
            ..Default::default()
        };
        let ds = dataset(&opts, WhatIf { threads: 1, epoch: 1, shift: 3 }).unwrap();
        let r = ds.describe(1).unwrap();
        assert!(r.config.windowed);
        let labels: Vec<&str> = ds.variables().iter().map(|v| v.label.as_str()).collect();
        assert_eq!(labels, ["t2m", "u10", "t2m@+3", "u10@+3"]);
        let order = ds.draw_order_report(Split::All, 1).unwrap();
        assert_eq!(*order.anchors.last().unwrap(), 48 - 1 - 3, "targets past the end are not drawn");
        rt.block_on(async {
            let mut stream = ds.iter(Split::Train).unwrap();
            let b = stream.next_batch().await.unwrap().unwrap();
            let target = &b.arrays["t2m@+3"];
            let row = 91 * 180;
            let vals: Vec<f32> =
                target.data[..].chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
            for (i, &t) in b.sample_indices.iter().enumerate() {
                for (y, x) in [(0, 0), (45, 90), (90, 179)] {
                    assert_eq!(vals[i * row + y * 180 + x], demo::demo_value("t2m", t + 3, y as u64, x as u64));
                }
            }
        });
        // Quality grows with the block size; memory grows with it too.
        let q = m
            .quality_curve(
                &storage,
                &executor,
                &JsOpenOptions { spec: DatasetSpec { batch_size: 4, ..Default::default() }, ..Default::default() },
                WhatIf { threads: 1, epoch: 0, shift: 0 },
                &[1, 2, 5],
            )
            .unwrap();
        assert!(q[0].quality < q[2].quality, "{q:?}");
        assert!(q[0].floor_bytes < q[2].floor_bytes, "{q:?}");
    }
}
