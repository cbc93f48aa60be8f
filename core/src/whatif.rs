//! What-ifs: what a configuration would do, answered without reading data.
//!
//! A [`DatasetBuilder`] whose metadata is read builds datasets with no I/O
//! ([`DatasetBuilder::build`]), so a question about another `block_chunks` is a fresh build
//! and a `describe`: the same code the engine runs, never a model of it. The dashboard and the
//! notebook widget (wasm), the CLI (`insitubatch describe --sweep-block-chunks`) and Python
//! (`InSituDataset.quality_curve`) all ask through here.

use serde::Serialize;

use crate::dataset::{Dataset, DatasetBuilder};
use crate::error::Result;
use crate::shuffle::{Split, shuffle_quality};

/// One point of the mixing/memory trade-off: a `block_chunks` value and what it costs.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct QualityPoint {
    /// As asked.
    pub block_chunks: usize,
    /// After widening (so a block holds a batch).
    pub block_chunks_widened: usize,
    /// Shuffle quality of the train order at this epoch (`describe()`'s `shuffle_quality`:
    /// none under two anchors).
    pub quality: Option<f64>,
    /// The residency floor of one iteration.
    pub floor_bytes: u64,
    /// The estimated peak for one iteration.
    pub estimated_peak_bytes: u64,
}

/// The draw order of one epoch of one split: which chunk every drawn sample comes from.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct DrawOrderReport {
    /// The split.
    pub split: Split,
    /// The epoch.
    pub epoch: u64,
    /// Anchor sample indices in draw order (what a batch's sample indices will carry).
    pub anchors: Vec<u64>,
    /// The reference-grid chunk of each anchor (`anchor / samples_per_chunk`).
    pub chunks: Vec<u64>,
    /// `n_blocks + 1` offsets into `anchors`: block `i` is `anchors[bounds[i]..bounds[i + 1]]`.
    pub bounds: Vec<usize>,
    /// The chunk ids of each shuffle block.
    pub block_chunks: Vec<Vec<u64>>,
    /// Reference samples per chunk.
    pub samples_per_chunk: u64,
    /// Reference chunks in the store.
    pub n_chunks: u64,
    /// Rows per batch: batch `k` is `anchors[k * batch_size..]`.
    pub batch_size: usize,
    /// Chunks per shuffle block after widening.
    pub block_chunks_widened: usize,
    /// The shuffle-quality score of this order (0..1).
    pub quality: f64,
}

impl DatasetBuilder {
    /// Shuffle quality and memory for each `block_chunks` in `values` at `epoch`, everything
    /// else as this builder says. An explicit
    /// `cache_budget_bytes` is dropped: sized for one block size, it would refuse most points.
    /// So is a disk tier: opening one is I/O, and one dataset at a time holds a cache
    /// directory (the floors are then those of RAM alone; with patches or a region a tier
    /// would hold whole chunks). Builds with no I/O: read the metadata first
    /// ([`Self::read_metadata`]).
    ///
    /// # Errors
    /// Whatever [`Self::build`] or `describe` refuses at a point (a variable not opened, a
    /// zero `block_chunks`, ...).
    pub fn quality_curve(&self, values: &[usize], epoch: u64) -> Result<Vec<QualityPoint>> {
        values.iter().map(|&block_chunks| self.quality_at(block_chunks, epoch)).collect()
    }

    fn quality_at(&self, block_chunks: usize, epoch: u64) -> Result<QualityPoint> {
        let mut options = self.dataset_options().clone();
        options.knobs.block_chunks = block_chunks;
        options.knobs.cache_budget_bytes = None;
        options.tier = None;
        let dataset = self.clone().options(options).build()?;
        dataset.set_epoch(epoch);
        let report = dataset.describe(1)?;
        Ok(QualityPoint {
            block_chunks,
            block_chunks_widened: report.config.block_chunks,
            quality: report.config.shuffle_quality,
            floor_bytes: report.memory.floor_bytes,
            estimated_peak_bytes: report.memory.estimated_peak_bytes,
        })
    }
}

impl Dataset {
    /// The draw order of `split` at `epoch`, with its shuffle blocks and their quality.
    ///
    /// # Errors
    /// As [`Dataset::epoch_order`].
    pub fn draw_order_report(&self, split: Split, epoch: u64) -> Result<DrawOrderReport> {
        let manifest = self.manifest();
        let order = self.epoch_order(split, epoch)?;
        let spc = manifest.sample_chunk_size.max(1);
        Ok(DrawOrderReport {
            split,
            epoch,
            chunks: order.anchors.iter().map(|a| a / spc).collect(),
            quality: shuffle_quality(&order.anchors),
            anchors: order.anchors,
            bounds: order.bounds,
            block_chunks: order.block_chunks,
            samples_per_chunk: manifest.sample_chunk_size,
            n_chunks: manifest.n_chunks,
            batch_size: self.options().knobs.batch_size,
            block_chunks_widened: self.block_chunks(),
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use crate::runtime::{InlinePool, Runtime};
    use crate::testing::{MemoryStorage, SimExecutor, write_f32_array};
    use crate::{Dataset, DatasetOptions, Knobs};

    /// 64 samples in chunks of 4: 16 chunks, metadata read.
    fn builder(sim: &SimExecutor, options: DatasetOptions) -> crate::DatasetBuilder {
        let storage = MemoryStorage::new();
        write_f32_array(&storage, "x", &[64, 3], &[4, 3], None, None, |i| i as f32);
        let runtime = Runtime::new(Arc::new(sim.clone()), Arc::new(InlinePool));
        let builder = Dataset::builder(Arc::new(storage), runtime).arrays(["x"]).options(options);
        sim.run(builder.read_metadata(), Duration::from_secs(5)).unwrap().unwrap()
    }

    #[test]
    fn each_point_is_the_describe_of_that_block_size() {
        let sim = SimExecutor::new();
        let base = DatasetOptions {
            knobs: Knobs { batch_size: 4, cache_budget_bytes: Some(1 << 30), ..Default::default() },
            ..Default::default()
        };
        let b = builder(&sim, base.clone());
        let curve = b.quality_curve(&[1, 2, 8], 0).unwrap();
        assert_eq!(curve.iter().map(|p| p.block_chunks).collect::<Vec<_>>(), [1, 2, 8]);
        for p in &curve {
            let options = DatasetOptions {
                knobs: Knobs { block_chunks: p.block_chunks, cache_budget_bytes: None, ..base.knobs },
                ..base.clone()
            };
            let r = b.clone().options(options).build().unwrap().describe(1).unwrap();
            assert_eq!(p.quality, r.config.shuffle_quality);
            assert_eq!(p.floor_bytes, r.memory.floor_bytes);
            assert_eq!(p.estimated_peak_bytes, r.memory.estimated_peak_bytes);
            assert_eq!(p.block_chunks_widened, r.config.block_chunks);
        }
        // Bigger blocks mix better and hold more.
        assert!(curve[2].quality > curve[0].quality, "{curve:?}");
        assert!(curve[2].floor_bytes > curve[0].floor_bytes, "{curve:?}");
    }

    #[test]
    fn a_refused_configuration_is_the_builders_error() {
        let sim = SimExecutor::new();
        let b = builder(
            &sim,
            DatasetOptions { knobs: Knobs { batch_size: 0, ..Default::default() }, ..Default::default() },
        );
        let e = b.quality_curve(&[4], 0).unwrap_err().to_string();
        assert!(e.contains("batch_size"), "{e}");
    }

    #[test]
    fn the_draw_order_report_is_the_epoch_order() {
        let sim = SimExecutor::new();
        let ds = builder(
            &sim,
            DatasetOptions {
                knobs: Knobs { batch_size: 4, block_chunks: 2, ..Default::default() },
                ..Default::default()
            },
        )
        .build()
        .unwrap();
        let r = ds.draw_order_report(crate::Split::Train, 3).unwrap();
        let order = ds.epoch_order(crate::Split::Train, 3).unwrap();
        assert_eq!(r.anchors, order.anchors);
        assert_eq!(r.bounds, order.bounds);
        assert_eq!(r.chunks, order.anchors.iter().map(|a| a / 4).collect::<Vec<_>>());
        assert_eq!((r.samples_per_chunk, r.n_chunks, r.batch_size), (4, 16, 4));
    }
}
