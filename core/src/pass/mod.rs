//! One pass (iteration) over a view: the driver task and the consumer's stream.
//!
//! The driver is the only code that touches a pass's state, so nothing about a pass can
//! race. It admits chunk uses in first-use order within the pass's reservation, awaits
//! loads, gathers batches on the thread pool (in order, at most a few ahead), releases each
//! use after its last batch is gathered, and sends batches on a bounded channel. Dropping
//! the stream aborts the driver and closes the pass's pool account at once, so an early
//! `break` strands nothing and the next epoch can start immediately.
//!
//! - this file: what a pass is given ([`PassSpec`]) and what it hands on ([`Delivered`]);
//! - `driver.rs`: the driver task ([`drive`]): admit, load, gather, release, send, and the
//!   proof of a stall;
//! - `gather.rs`: copying each row's sample (or its patch, or its part) out of its chunks
//!   into a batch;
//! - `tiles.rs`: which tiles of a chunk a use reads where rows need only part of it
//!   ([`plan_tiles`]), and what such a chunk charges at most ([`part_charge_max`]);
//! - `vars.rs`: a labelled variable as the gather sees it ([`GatherVar`]) and the box a
//!   row copies;
//! - `stream.rs`: the consumer's side ([`BatchStream`]): batches, stats, checkpoints.

mod driver;
mod gather;
mod stream;
mod tiles;
mod vars;

pub(crate) use driver::drive;
pub use stream::BatchStream;
pub(crate) use stream::{ShardInfo, StatsSink};
pub(crate) use tiles::{part_charge_max, plan_tiles};
pub(crate) use vars::{GatherVar, VarPart};

use std::sync::Arc;

use crate::batch::Batch;
use crate::coords::Coordinate;
use crate::engine::Engine;
use crate::patch::Patcher;
use crate::plan::PassPlan;
use crate::pool::PassId;
use crate::stats::{BatchTimeline, PassRecorder};
use crate::transform::BatchTransform;

/// What a patched pass needs to cut its rows: the arithmetic and the stream's words.
#[derive(Clone)]
pub(crate) struct Patching {
    pub patcher: Arc<Patcher>,
    pub seed: u64,
    pub split: crate::shuffle::Split,
}

/// A gathered batch on its way to the consumer.
pub(crate) struct Delivered {
    batch: Batch,
    timeline: BatchTimeline,
}

/// Static inputs of one pass.
pub(crate) struct PassSpec {
    pub engine: Arc<Engine>,
    pub plan: Arc<PassPlan>,
    pub vars: Arc<[GatherVar]>,
    pub batch_transforms: Arc<[Arc<dyn BatchTransform>]>,
    pub pass: PassId,
    pub epoch: u64,
    /// The index of the pass's first batch in its epoch (a resumed pass continues the count).
    pub first_index: usize,
    pub recorder: Arc<PassRecorder>,
    /// Gathers in flight or done but unsent, at most.
    pub max_gathers: usize,
    /// Batches gathering, gathered, being sent or queued for the caller, at most.
    pub max_ahead: usize,
    /// Uses past the next admission whose inner chunks are marked wanted for read-ahead.
    pub ahead_uses: usize,
    /// How rows are cut into patches (`None`: a row is a whole sample).
    pub patching: Option<Patching>,
    /// This rank's part and the group size under a rank mesh (`None`: whole rows).
    pub mesh: Option<(usize, usize)>,
    /// The sample axis's coordinate, carried by every batch (`None`: not read).
    pub coordinate: Option<Arc<Coordinate>>,
}
