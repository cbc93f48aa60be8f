//! One pass (iteration) over a view: the driver task and the consumer's stream.
//!
//! The driver is the only code that touches a pass's state, so nothing about a pass can
//! race. It admits chunk uses in first-use order within the pass's reservation, awaits
//! loads, gathers batches on the thread pool (in order, at most a few ahead), releases each
//! use after its last batch is gathered, and sends batches on a bounded channel. Dropping
//! the stream aborts the driver and closes the pass's pool account at once, so an early
//! `break` strands nothing and the next epoch can start immediately.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use futures::future::AbortHandle;
use futures::stream::{FuturesOrdered, FuturesUnordered, StreamExt};

use crate::array::NdArray;
use crate::batch::{Batch, BatchPart, BatchPatches};
use crate::coords::Coordinate;
use crate::engine::{ArrayReader, Engine, load_chunk};
use crate::error::{Error, Result};
use crate::patch::{AxisPicks, PatchedDims, Patcher, copy_patch, copy_positions, row_positions};
use crate::plan::{ChunkKey, PassPlan};
use crate::pool::{Admit, Chunk, LoadResult, PassId};
use crate::runtime::BoxFuture;
use crate::shard::Checkpoint;
use crate::stats::{BatchTimeline, Depths, PassObserver, PassRecorder, PassStats, verdict};
use crate::transform::BatchTransform;

/// A labelled variable as the gather sees it.
#[derive(Debug, Clone)]
pub(crate) struct GatherVar {
    pub label: String,
    pub path: u32,
    pub offset: i64,
    pub spc: u64,
    pub dtype: crate::array::DType,
    pub inner: Vec<usize>,
    pub sample_bytes: usize,
    /// Where this variable's patch lies (`None`: the whole sample, with or without patches).
    pub patch: Option<crate::patch::PatchedDims>,
    /// The regions `sel` cut its rows to on inner axes it is not patched on.
    pub region: Vec<VarPart>,
    /// The positions `sel` lists pick on inner axes, in the labels' order.
    pub picks: Vec<AxisPicks>,
    /// This rank's part of each row under a rank mesh (`mesh.rs`; `None`: whole rows).
    pub part: Option<VarPart>,
}

/// A part of one variable's rows: `start .. start + len` on inner dimension `dim`. A
/// model-parallel rank's part (relative to the row's box on `dim`), or a `sel` region.
#[derive(Debug, Clone)]
pub(crate) struct VarPart {
    pub dim: usize,
    pub name: String,
    pub start: u64,
    pub len: u64,
}

impl GatherVar {
    /// A row's shape in the batch: the sample's inner shape, cut to the patch on patched axes.
    fn out_inner(&self, patcher: Option<&Patcher>) -> Vec<usize> {
        let mut inner = self.inner.clone();
        if let (Some(dims), Some(p)) = (&self.patch, patcher) {
            for (&d, &s) in dims.0.iter().zip(&p.size) {
                inner[d] = s as usize;
            }
        }
        for r in &self.region {
            inner[r.dim] = r.len as usize;
        }
        for p in &self.picks {
            inner[p.dim] = p.positions.len();
        }
        if let Some(part) = &self.part {
            inner[part.dim] = part.len as usize;
        }
        inner
    }

    /// The box row `i` of this variable copies, as `(dims, origin, size)` on its inner
    /// dimensions: the patch and the `sel` regions, cut to this rank's part; empty for a
    /// whole sample.
    fn row_box(&self, patch: Option<(&[u64], &Patcher)>) -> (Vec<usize>, Vec<u64>, Vec<u64>) {
        let (mut dims, mut origin, mut size) = match (&self.patch, patch) {
            (Some(d), Some((o, p))) => (d.0.clone(), o.to_vec(), p.size.clone()),
            _ => (Vec::new(), Vec::new(), Vec::new()),
        };
        for r in &self.region {
            dims.push(r.dim);
            origin.push(r.start);
            size.push(r.len);
        }
        if let Some(part) = &self.part {
            match dims.iter().position(|&d| d == part.dim) {
                Some(i) => {
                    origin[i] += part.start;
                    size[i] = part.len;
                }
                None => {
                    dims.push(part.dim);
                    origin.push(part.start);
                    size.push(part.len);
                }
            }
        }
        (dims, origin, size)
    }

    /// The boxes a row reads: [`Self::row_box`], cut into one box per run of consecutive
    /// positions a `sel` list picks (what `plan_tiles` marks tiles for).
    fn row_boxes(&self, patch: Option<(&[u64], &Patcher)>) -> Vec<(Vec<usize>, Vec<u64>, Vec<u64>)> {
        let mut boxes = vec![self.row_box(patch)];
        for p in &self.picks {
            let runs = &p.runs;
            boxes = (boxes.iter())
                .flat_map(|(d, o, s)| {
                    runs.iter().map(move |&(start, n)| {
                        let (mut d, mut o, mut s) = (d.clone(), o.clone(), s.clone());
                        d.push(p.dim);
                        o.push(start);
                        s.push(n);
                        (d, o, s)
                    })
                })
                .collect();
        }
        boxes
    }
}

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

type SendFuture = BoxFuture<'static, std::result::Result<(), async_channel::SendError<Result<Delivered>>>>;
type LoadFuture = BoxFuture<'static, (usize, u64, LoadResult)>;
type GatherFuture = BoxFuture<'static, Result<Delivered>>;

/// What one try at sending did.
enum Sent {
    /// A batch reached the queue.
    Progressed,
    /// The queue is full, or nothing is ready to send.
    Waiting,
    /// The receiver was dropped: the pass is over.
    ConsumerGone,
}

struct Driver {
    spec: PassSpec,
    tx: async_channel::Sender<Result<Delivered>>,
    next_admit: usize,
    data: Vec<Option<Arc<Chunk>>>,
    admitted_at: Vec<Duration>,
    loads: FuturesUnordered<LoadFuture>,
    next_gather: usize,
    gathers: FuturesOrdered<GatherFuture>,
    unsent: VecDeque<Delivered>,
    sending: Option<SendFuture>,
    sent: usize,
    parked_since: Option<Duration>,
    loaded: HashSet<ChunkKey>,
    /// Uses below this index were marked wanted for read-ahead.
    wanted_upto: usize,
}

impl Driver {
    /// Mark the inner chunks of the uses within `ahead_uses` of the next admission as
    /// wanted, so a request to their shard reads them ahead (`ahead.rs`).
    fn want_ahead(&mut self) {
        let end = (self.next_admit + 1 + self.spec.ahead_uses).min(self.spec.plan.uses.len());
        while self.wanted_upto < end {
            let u = self.wanted_upto;
            self.spec.engine.want_chunk(self.spec.plan.uses[u].key, self.tiles(u), true);
            self.wanted_upto += 1;
        }
    }

    /// The tiles use `u` reads, when not all.
    fn tiles(&self, u: usize) -> Option<&[u64]> {
        self.spec.plan.tiles_of(u).map(|t| &t[..])
    }

    /// The chunk a load or the pool gave use `u`, checked to hold the tiles `u` reads.
    fn check_tiles(&self, u: usize, chunk: &Chunk) -> Result<()> {
        if chunk.layout.as_ref().map(|l| &l.tiles()[..]) == self.tiles(u) {
            return Ok(());
        }
        Err(Error::Internal(format!(
            "chunk {:?} holds other tiles than its use reads (a tile-set fingerprint collision); please report this",
            self.spec.plan.uses[u].key
        )))
    }

    /// What the pool charges for use `u`: its chunk, or the tiles it reads of it.
    fn use_bytes(&self, u: usize) -> u64 {
        let key = self.spec.plan.uses[u].key;
        self.spec.engine.arrays[key.path as usize].charge_part(key.chunk, self.tiles(u))
    }

    fn batch_ready(&self, j: usize) -> bool {
        self.spec.plan.batch_uses[j].iter().all(|&u| self.data[u as usize].is_some())
    }

    /// Drive the pass: admit, collect loads, start gathers, release and send, until every
    /// batch is sent, the consumer is gone, or a stall is proved.
    fn poll(&mut self, cx: &mut Context<'_>) -> Poll<Result<()>> {
        let n_batches = self.spec.plan.n_batches();
        loop {
            let mut progressed = self.admit()?;
            progressed |= self.collect_loads(cx)?;
            progressed |= self.start_gathers(n_batches);
            progressed |= self.finish_gathers(cx)?;
            match self.send(cx) {
                Sent::ConsumerGone => return Poll::Ready(Ok(())),
                Sent::Progressed => progressed = true,
                Sent::Waiting => {}
            }
            if self.sent == n_batches {
                return Poll::Ready(Ok(()));
            }
            if !progressed {
                return match self.stall(n_batches) {
                    Some(e) => Poll::Ready(Err(e)),
                    None => Poll::Pending,
                };
            }
        }
    }

    /// 1. Admit uses in first-use order while the reservation has room.
    fn admit(&mut self) -> Result<bool> {
        let mut progressed = false;
        while self.next_admit < self.spec.plan.uses.len() {
            self.want_ahead();
            let u = self.next_admit;
            let key = self.spec.plan.uses[u].key;
            let bytes = self.use_bytes(u);
            let engine = Arc::clone(&self.spec.engine);
            let rec = Arc::clone(&self.spec.recorder);
            let priority = self.spec.engine.admissions.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let tiles = self.spec.plan.tiles_of(u).cloned();
            let admitted = self
                .spec
                .engine
                .pool
                .admit(self.spec.pass, key, bytes, move || load_chunk(engine, key, tiles, rec, priority))?;
            match admitted {
                Admit::NoRoom => {
                    if self.parked_since.is_none() {
                        self.parked_since = Some(self.spec.engine.now());
                    }
                    break;
                }
                Admit::Ready(chunk) => {
                    self.check_tiles(u, &chunk)?;
                    self.spec.recorder.with(|r| r.hits += 1);
                    self.spec.engine.want_chunk(key, self.tiles(u), false); // resident: nothing to read
                    self.data[u] = Some(chunk);
                }
                Admit::Load { load, generation, started } => {
                    if !started {
                        self.spec.engine.want_chunk(key, self.tiles(u), false); // another pass's load reads it
                    }
                    let reread = started && !self.loaded.insert(key);
                    self.spec.recorder.with(|r| {
                        r.hits += u64::from(!started);
                        r.misses += u64::from(started);
                        r.reread_chunks += u64::from(reread);
                    });
                    self.loads.push(Box::pin(async move { (u, generation, load.await) }));
                }
            }
            if let Some(since) = self.parked_since.take() {
                let parked = self.spec.engine.now().saturating_sub(since);
                self.spec.recorder.with(|r| r.times.admission_parked_s += parked.as_secs_f64());
            }
            self.admitted_at[u] = self.spec.engine.now();
            self.next_admit += 1;
            progressed = true;
        }
        Ok(progressed)
    }

    /// 2. Collect finished loads (published to the pool for other passes too).
    fn collect_loads(&mut self, cx: &mut Context<'_>) -> Result<bool> {
        let mut progressed = false;
        while let Poll::Ready(Some((u, generation, result))) = self.loads.poll_next_unpin(cx) {
            let key = self.spec.plan.uses[u].key;
            self.spec.engine.pool.publish(key, generation, &result);
            let chunk = result?;
            self.check_tiles(u, &chunk)?;
            self.data[u] = Some(chunk);
            progressed = true;
        }
        Ok(progressed)
    }

    /// 3. Start gathers for ready batches, in order, a bounded number ahead.
    fn start_gathers(&mut self, n_batches: usize) -> bool {
        let mut progressed = false;
        while self.next_gather < n_batches
            && self.gathers.len() + self.unsent.len() < self.spec.max_gathers
            && self.batches_ahead() < self.spec.max_ahead
            && self.batch_ready(self.next_gather)
        {
            let j = self.next_gather;
            self.gathers.push_back(self.start_gather(j));
            self.next_gather += 1;
            progressed = true;
        }
        progressed
    }

    /// Batches this pass holds that the caller has not taken: each one is a batch buffer.
    fn batches_ahead(&self) -> usize {
        self.gathers.len() + self.unsent.len() + usize::from(self.sending.is_some()) + self.tx.len()
    }

    /// 4. Finished gathers: release their last uses, queue them for sending.
    fn finish_gathers(&mut self, cx: &mut Context<'_>) -> Result<bool> {
        let mut progressed = false;
        while let Poll::Ready(Some(done)) = self.gathers.poll_next_unpin(cx) {
            let delivered = done?;
            // The batch carries its index in the epoch; the plan counts from this pass's start.
            let j = delivered.batch.index - self.spec.first_index;
            for &u in &self.spec.plan.releases[j] {
                let key = self.spec.plan.uses[u as usize].key;
                self.spec.engine.pool.release(self.spec.pass, key, self.use_bytes(u as usize));
                self.data[u as usize] = None;
            }
            self.unsent.push_back(delivered);
            progressed = true;
        }
        Ok(progressed)
    }

    /// 5. Send in order, one batch at a time into the bounded queue.
    fn send(&mut self, cx: &mut Context<'_>) -> Sent {
        if self.sending.is_none()
            && let Some(d) = self.unsent.pop_front()
        {
            let tx = self.tx.clone();
            self.sending = Some(Box::pin(async move { tx.send(Ok(d)).await }));
        }
        let Some(f) = self.sending.as_mut() else { return Sent::Waiting };
        match f.as_mut().poll(cx) {
            Poll::Ready(Ok(())) => {
                self.sending = None;
                self.sent += 1;
                Sent::Progressed
            }
            Poll::Ready(Err(_)) => Sent::ConsumerGone,
            Poll::Pending => Sent::Waiting,
        }
    }

    /// With no progress and nothing in flight, nothing can wake the driver: a proved stall.
    /// The plan makes this unreachable; if it ever happens, say so instead of hanging.
    fn stall(&self, n_batches: usize) -> Option<Error> {
        let idle = self.loads.is_empty() && self.gathers.is_empty() && self.sending.is_none() && self.unsent.is_empty();
        idle.then(|| {
            Error::Stall(format!(
                "residency budget exhausted: batch {} of {} needs a chunk this iteration cannot admit; it holds {} of \
                 its {} byte reservation with nothing in flight. Raise cache_budget_bytes; please report this as a bug",
                self.next_gather,
                n_batches,
                self.spec.engine.pool.charged(self.spec.pass),
                self.reservation_hint()
            ))
        })
    }

    fn reservation_hint(&self) -> u64 {
        self.spec.engine.pool.reservation(self.spec.pass)
    }

    fn start_gather(&self, j: usize) -> GatherFuture {
        let plan = Arc::clone(&self.spec.plan);
        let mut chunks: HashMap<u32, Arc<Chunk>> = HashMap::new();
        let mut tl = BatchTimeline::default();
        for &u in &plan.batch_uses[j] {
            let c = self.data[u as usize].clone().expect("batch is ready");
            tl.admitted = tl.admitted.max(self.admitted_at[u as usize]);
            tl.permitted = tl.permitted.max(c.times.permitted);
            tl.fetched = tl.fetched.max(c.times.fetched);
            tl.ready = tl.ready.max(c.times.ready);
            chunks.insert(u, c);
        }
        // Chunks that were already resident count as ready when admitted.
        tl.ready = tl.ready.max(tl.admitted);
        tl.gather_start = self.spec.engine.now();
        let vars = Arc::clone(&self.spec.vars);
        let transforms = Arc::clone(&self.spec.batch_transforms);
        let engine = Arc::clone(&self.spec.engine);
        let rec = Arc::clone(&self.spec.recorder);
        let epoch = self.spec.epoch;
        let patching = self.spec.patching.clone();
        let mesh = self.spec.mesh;
        let coordinate = self.spec.coordinate.clone();
        let index = self.spec.first_index + j;
        let priority = self.spec.engine.admissions.load(std::sync::atomic::Ordering::Relaxed);
        let fut = self.spec.engine.cpu.run(crate::engine::CLASS_GATHER, priority, move || -> Result<Delivered> {
            let t0 = engine.now();
            let rows = &plan.anchors[plan.batch_rows(j)];
            let uses = &plan.row_uses[plan.batch_rows(j).start * vars.len()..plan.batch_rows(j).end * vars.len()];
            let at = BatchAt {
                index,
                epoch,
                per_sample: plan.per_sample,
                patching: patching.as_ref(),
                mesh: mesh.as_ref(),
                coordinate: coordinate.as_deref(),
            };
            let mut batch = gather((rows, uses), &vars, &chunks, &at, &engine.recycler)?;
            drop(chunks);
            let t1 = engine.now();
            for t in transforms.iter() {
                batch = t.apply(batch)?;
            }
            let t2 = engine.now();
            rec.with(|r| {
                r.times.gather_s += t1.saturating_sub(t0).as_secs_f64();
                r.times.batch_transform_s += t2.saturating_sub(t1).as_secs_f64();
            });
            Ok(Delivered { batch, timeline: BatchTimeline { gather_end: t1, transformed: t2, ..tl } })
        });
        Box::pin(async move { fut.await? })
    }
}

impl Drop for Driver {
    /// The pass is over (finished, failed or dropped): what it marked wanted is not any more.
    fn drop(&mut self) {
        for u in self.next_admit..self.wanted_upto {
            self.spec.engine.want_chunk(self.spec.plan.uses[u].key, self.tiles(u), false);
        }
    }
}

/// Where a batch sits: its index and epoch, and how its rows are cut.
struct BatchAt<'a> {
    index: usize,
    epoch: u64,
    /// Rows per sample (patches times weighted copies): row `r` reads sample `r / per_sample`.
    per_sample: u64,
    /// This rank's part and the group size under a rank mesh.
    mesh: Option<&'a (usize, usize)>,
    /// The sample axis's coordinate, when the dataset reads it.
    coordinate: Option<&'a Coordinate>,
    patching: Option<&'a Patching>,
}

/// Copy each row's sample (or its patch) out of its chunk: one contiguous copy per row and
/// variable, or one per row of the patch. `uses` names the use each row reads per variable
/// (`PassPlan::row_uses`), and `chunks` holds each use's chunk.
fn gather(
    (rows, uses): (&[u64], &[u32]),
    vars: &[GatherVar],
    chunks: &HashMap<u32, Arc<Chunk>>,
    at: &BatchAt<'_>,
    recycler: &Arc<crate::array::Recycler>,
) -> Result<Batch> {
    let patcher = at.patching.map(|p| p.patcher.as_ref());
    let anchors: Vec<u64> = rows.iter().map(|&r| r / at.per_sample.max(1)).collect();
    let patches = at.patching.map(|p| {
        let mut origins = Vec::with_capacity(rows.len() * p.patcher.dims.len());
        for &r in rows {
            p.patcher.origin(r, p.seed, at.epoch, p.split, &mut origins);
        }
        BatchPatches { dims: p.patcher.dims.clone(), size: p.patcher.size.clone(), origins }
    });
    let mut batch = Batch {
        arrays: Default::default(),
        sample_indices: anchors,
        offsets: vars.iter().map(|v| (v.label.clone(), v.offset)).collect(),
        index: at.index,
        epoch: at.epoch,
        patches: None,
        part: None,
        coords: Default::default(),
    };
    if let Some(c) = at.coordinate {
        batch.coords.insert(c.name.clone(), c.take(&batch.sample_indices));
    }
    if let (Some(p), Some(bp)) = (patcher, &patches) {
        // Each patched axis's coordinate: the values each row's patch covers (rows × size).
        for (k, c) in p.coordinates.iter().enumerate() {
            if let Some(c) = c {
                let starts = (0..rows.len()).map(|i| bp.origin(i)[k]);
                batch.coords.insert(c.name.clone(), c.runs(starts, p.size[k]));
            }
        }
    }
    for (vi, v) in vars.iter().enumerate() {
        let row = v.sample_bytes;
        let inner = v.out_inner(patcher);
        let out_row = inner.iter().product::<usize>() * v.dtype.size();
        let mut out = recycler.take(out_row * rows.len());
        for (i, &t) in batch.sample_indices.iter().enumerate() {
            let s = (i128::from(t) + i128::from(v.offset)) as u64;
            let key = ChunkKey { path: v.path, chunk: s / v.spc, part: 0 };
            let w = (s % v.spc) as usize;
            let u = uses[i * vars.len() + vi];
            let chunk = chunks.get(&u).ok_or_else(|| Error::Internal(format!("chunk {key:?} missing at gather")))?;
            let (dims, origin, size) = v.row_box(patches.as_ref().zip(patcher).map(|(bp, p)| (bp.origin(i), p)));
            let mut push = |run: &[u8]| out.extend_from_slice(run);
            if let Some(layout) = &chunk.layout {
                let positions = row_positions(&v.inner, (&dims, &origin, &size), &v.picks);
                layout
                    .copy_positions(chunk.data.bytes(), v.dtype.size(), w, &positions, push)
                    .map_err(|m| Error::Internal(format!("chunk {key:?} held in part: {m}; please report this")))?;
                continue;
            }
            let src = chunk.data.bytes().get(w * row..(w + 1) * row).ok_or_else(|| {
                Error::Internal(format!("chunk {key:?} has no row {w} (shape {:?})", chunk.data.shape()))
            })?;
            if !v.picks.is_empty() {
                let positions = row_positions(&v.inner, (&dims, &origin, &size), &v.picks);
                copy_positions(src, &v.inner, v.dtype.size(), &positions, &mut push);
            } else if dims.is_empty() {
                push(src);
            } else {
                let cut = (&PatchedDims(dims), origin.as_slice(), size.as_slice());
                copy_patch(src, &v.inner, v.dtype.size(), cut, push);
            }
        }
        let shape = std::iter::once(rows.len()).chain(inner).collect();
        batch
            .arrays
            .insert(v.label.clone(), NdArray::new(v.dtype, shape, out).map_err(Error::Config)?.recycled_by(recycler));
    }
    batch.patches = patches;
    batch.part = vars.iter().find_map(|v| v.part.as_ref()).zip(at.mesh).map(|(p, &(index, of))| BatchPart {
        dim: p.name.clone(),
        index,
        of,
        start: p.start,
        len: p.len,
    });
    Ok(batch)
}

/// A chunk of more tiles than this is always read whole (planning its tiles would cost more
/// than it saves).
const MAX_PLANNED_TILES: u64 = 1 << 16;

/// Whether passes read `reader`'s chunks in part where rows need only part of them: not
/// with a chunk transform (its output need not match the tiles), and only for a chunk of
/// several tiles, not too many. (A disk tier, which keeps whole chunks, rules it out for
/// the whole dataset: `plan_tiles`.)
fn reads_in_part(reader: &ArrayReader) -> bool {
    reader.transforms.is_empty() && (2..=MAX_PLANNED_TILES).contains(&reader.geom.n_tiles())
}

/// What one use of a chunk of `reader` can hold at most when passes read it in part (`None`
/// when they read whole chunks): the tiles `rows` rows of each of `vars` (its variables) can
/// touch, at most all. The residency floor counts this instead of the whole chunk, so a
/// patched dataset's budget counts the tiles its patches read.
pub(crate) fn part_charge_max(
    reader: &ArrayReader,
    vars: &[&GatherVar],
    patcher: Option<&Patcher>,
    rows: u64,
) -> Option<u64> {
    if !reads_in_part(reader) {
        return None;
    }
    let g = &reader.geom;
    let zeros = vec![0u64; patcher.map_or(0, |p| p.size.len())];
    let mut tiles = 0u64;
    for v in vars {
        for (dims, _, size) in v.row_boxes(patcher.map(|p| (zeros.as_slice(), p))) {
            if dims.is_empty() {
                return None;
            }
            tiles = tiles.saturating_add(rows.saturating_mul(g.most_tiles_in_box(&dims, &size)));
        }
    }
    let region = g.sample_chunk_size().min(g.n_samples()) * g.inner_tile().iter().product::<u64>();
    Some(tiles.min(g.n_tiles()).saturating_mul(region).saturating_mul(g.dtype.size() as u64))
}

/// What a use reads of its chunk: nothing asked yet, all of it, or these tiles (ascending,
/// once each after `settle`).
enum Touched {
    Unasked,
    Whole,
    Tiles { tiles: Vec<u64>, settled: usize },
}

impl Touched {
    /// Add the tiles of one row's box; the list is sorted and deduplicated whenever it has
    /// doubled, so it stays within twice the distinct tiles.
    fn add(&mut self, geom: &crate::geometry::ArrayGeometry, row_box: (&[usize], &[u64], &[u64])) {
        if row_box.0.is_empty() {
            *self = Self::Whole;
            return;
        }
        if let Self::Unasked = self {
            *self = Self::Tiles { tiles: Vec::new(), settled: 0 };
        }
        if let Self::Tiles { tiles, settled } = self {
            geom.tiles_in_box(row_box, |t| tiles.push(t));
            if tiles.len() > 2 * (*settled).max(64) {
                tiles.sort_unstable();
                tiles.dedup();
                *settled = tiles.len();
            }
        }
    }

    /// The tiles, when not every tile of a chunk of `n_tiles`.
    fn into_part(self, n_tiles: u64) -> Option<std::sync::Arc<[u64]>> {
        let Self::Tiles { mut tiles, .. } = self else { return None };
        tiles.sort_unstable();
        tiles.dedup();
        (!tiles.is_empty() && (tiles.len() as u64) < n_tiles).then(|| tiles.into())
    }
}

/// Restrict each use of `plan` to the inner tiles its rows' boxes touch (patches, or a
/// rank's part of each row), where that is not all of them: the load then fetches and
/// decodes those tiles only, holds only their regions (`assemble::TileLayout`), and each
/// use's key gets the set's fingerprint ([`ChunkKey::part`]). Each use is one chunk in one
/// block, so every tile is still read at most once per block. Arrays that `reads_in_part`
/// refuses, and every array under a disk tier (which keeps whole chunks for later epochs),
/// are read whole.
pub(crate) fn plan_tiles(
    plan: &mut PassPlan,
    vars: &[GatherVar],
    engine: &Engine,
    patching: Option<&Patching>,
    epoch: u64,
) {
    let whole_rows = vars.iter().all(|v| v.part.is_none() && v.region.is_empty() && v.picks.is_empty());
    if (patching.is_none() && whole_rows) || engine.tier.is_some() {
        return;
    }
    let eligible: Vec<bool> = vars.iter().map(|v| reads_in_part(&engine.arrays[v.path as usize])).collect();
    if !eligible.contains(&true) {
        return;
    }
    let mut touched: Vec<Touched> = (0..plan.uses.len()).map(|_| Touched::Unasked).collect();
    let mut origin = Vec::new();
    for (r, &row) in plan.anchors.iter().enumerate() {
        origin.clear();
        if let Some(p) = patching {
            p.patcher.origin(row, p.seed, epoch, p.split, &mut origin);
        }
        for (vi, v) in vars.iter().enumerate() {
            let u = plan.row_uses[r * vars.len() + vi] as usize;
            if !eligible[vi] {
                touched[u] = Touched::Whole;
                continue;
            }
            for (dims, o, size) in v.row_boxes(patching.map(|p| (origin.as_slice(), p.patcher.as_ref()))) {
                touched[u].add(&engine.arrays[v.path as usize].geom, (&dims, &o, &size));
            }
        }
    }
    plan.tiles = (touched.into_iter().zip(&plan.uses))
        .map(|(t, use_)| t.into_part(engine.arrays[use_.key.path as usize].geom.n_tiles()))
        .collect();
    for (u, tiles) in plan.tiles.iter().enumerate() {
        if let Some(t) = tiles {
            plan.uses[u].key.part = fingerprint(t);
        }
    }
}

/// A tile set's fingerprint, never 0 (0 is the whole chunk).
fn fingerprint(tiles: &[u64]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    tiles.hash(&mut h);
    h.finish().max(1)
}

/// Run a pass to completion (or until the stream is dropped).
pub(crate) async fn drive(spec: PassSpec, tx: async_channel::Sender<Result<Delivered>>) {
    let n_uses = spec.plan.uses.len();
    let mut d = Driver {
        spec,
        tx: tx.clone(),
        next_admit: 0,
        data: vec![None; n_uses],
        admitted_at: vec![Duration::ZERO; n_uses],
        loads: FuturesUnordered::new(),
        next_gather: 0,
        gathers: FuturesOrdered::new(),
        unsent: VecDeque::new(),
        sending: None,
        sent: 0,
        parked_since: None,
        loaded: HashSet::new(),
        wanted_upto: 0,
    };
    let result = futures::future::poll_fn(|cx| d.poll(cx)).await;
    if let Err(e) = result {
        let _ = tx.send(Err(e)).await;
    }
    d.spec.engine.pool.close_pass(d.spec.pass);
    tx.close();
}

/// The rank's side of a pass: what its stats report and where its checkpoints start.
#[derive(Debug, Clone)]
pub(crate) struct ShardInfo {
    pub rank: usize,
    /// Samples of this segment no rank draws (job-wide).
    pub dropped: u64,
    /// Samples consumed before this pass started (a same-world resume).
    pub skipped: u64,
    /// The checkpoint this pass started from (position 0 for a fresh pass).
    pub start: Checkpoint,
}

/// Where a finished pass leaves its stats.
pub(crate) type StatsSink = Arc<Mutex<Option<PassStats>>>;

/// The consumer's side of a pass: a stream of batches. Dropping it ends the pass.
pub struct BatchStream {
    pub(crate) rx: async_channel::Receiver<Result<Delivered>>,
    pub(crate) engine: Arc<Engine>,
    pub(crate) pass: PassId,
    pub(crate) abort: AbortHandle,
    pub(crate) recorder: Arc<PassRecorder>,
    pub(crate) started: Duration,
    pub(crate) last_returned: Option<Duration>,
    pub(crate) split: String,
    pub(crate) epoch: u64,
    pub(crate) prefetch_depth: usize,
    pub(crate) sink: StatsSink,
    /// Told of the report when the pass ends.
    pub(crate) observers: Arc<[Arc<dyn PassObserver>]>,
    pub(crate) finished: bool,
    pub(crate) n_batches: usize,
    pub(crate) shard: ShardInfo,
}

impl std::fmt::Debug for BatchStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BatchStream").field("split", &self.split).field("epoch", &self.epoch).finish()
    }
}

impl BatchStream {
    /// This pass as a `futures::Stream` of batches, for async callers (`StreamExt::next`,
    /// `try_for_each`, `tokio::select!`). Dropping the stream ends the pass. Boxed, so it is
    /// `Unpin` and `stream.next().await` works without pinning it first.
    pub fn into_stream(self) -> impl futures::Stream<Item = Result<Batch>> + Unpin {
        Box::pin(futures::stream::unfold(self, |mut s| async move { s.next_batch().await.map(|b| (b, s)) }))
    }

    /// Batches this pass will yield.
    pub fn len(&self) -> usize {
        self.n_batches
    }

    /// True when the pass yields nothing.
    pub fn is_empty(&self) -> bool {
        self.n_batches == 0
    }

    /// Batches gathered and waiting for the caller now (0 to `prefetch_depth`): the live
    /// queue depth a dashboard charts.
    pub fn queued(&self) -> usize {
        self.rx.len()
    }

    /// The next batch; `None` at the end of the epoch. After an error the stream ends.
    pub async fn next_batch(&mut self) -> Option<Result<Batch>> {
        if self.finished {
            return None;
        }
        let asked = self.engine.now();
        if let Some(prev) = self.last_returned {
            self.recorder.with(|r| r.times.consumer_s += asked.saturating_sub(prev).as_secs_f64());
        }
        let queued = self.rx.len();
        self.recorder.with(|r| {
            r.queue_samples += 1;
            r.queue_empty += u64::from(queued == 0);
            r.queue_full_enough += u64::from(queued * 2 >= self.prefetch_depth);
            r.queue_peak = r.queue_peak.max(queued);
        });
        let item = self.rx.recv().await;
        let got = self.engine.now();
        self.recorder.with(|r| r.times.consumer_wait_s += got.saturating_sub(asked).as_secs_f64());
        match item {
            Ok(Ok(d)) => {
                let fetch_share = self.recorder.with(|r| {
                    let (f, dec) = (r.times.fetch_wait_s, r.times.decode_s + r.times.assemble_s);
                    if f + dec > 0.0 { f / (f + dec) } else { 0.5 }
                });
                self.recorder.with(|r| {
                    d.timeline.attribute(asked, got, fetch_share, &mut r.blocked);
                    if r.batches > 0 {
                        r.batch_waits.record(got.saturating_sub(asked).as_secs_f64());
                    }
                    r.batches += 1;
                    r.samples += d.batch.len() as u64;
                    r.batch_bytes += d.batch.arrays.values().map(|a| a.data.len() as u64).sum::<u64>();
                    r.first_batch_at.get_or_insert(got);
                    r.last_batch_at = Some(got);
                });
                self.last_returned = Some(self.engine.now());
                Some(Ok(d.batch))
            }
            Ok(Err(e)) => {
                self.finish();
                Some(Err(e))
            }
            Err(_) => {
                let received = self.recorder.with(|r| r.batches);
                self.finish();
                // The driver closes the channel only after its last batch or an error it sent;
                // closing early means it died (a panic, a runtime shut down). Never end an epoch
                // short without saying so.
                (received < self.n_batches).then(|| {
                    Err(Error::Cancelled(format!(
                        "the loader stopped after {received} of {} batches of epoch {} ({}); the runtime shut down \
                         or the driver failed unexpectedly",
                        self.n_batches, self.epoch, self.split
                    )))
                })
            }
        }
    }

    /// Where this pass stands, between batches: a resume from it (any world size, in a fresh
    /// process) continues after the last batch this stream returned. Every rank of a job that
    /// steps in lockstep takes the same checkpoint.
    pub fn checkpoint(&self) -> Checkpoint {
        let r = self.recorder.snapshot();
        let s = &self.shard.start;
        Checkpoint { position: s.position + r.samples, batches: s.batches + r.batches as u64, ..s.clone() }
    }

    /// Stats of this pass so far.
    pub fn stats(&self) -> PassStats {
        let r = self.recorder.snapshot();
        let counters = self.engine.pool.counters();
        let (limiting_stage, advice, consumer_idle) = verdict(&r, self.engine.max_inflight);
        let end = r.last_batch_at.unwrap_or(self.started);
        PassStats {
            split: self.split.clone(),
            epoch: self.epoch,
            rank: self.shard.rank,
            world_size: self.shard.start.world_size,
            dropped_samples: self.shard.dropped,
            resumed_at: self.shard.skipped,
            batches: r.batches,
            samples: r.samples,
            batch_bytes: r.batch_bytes,
            cache_hits: r.hits,
            cache_misses: r.misses,
            reread_chunks: r.reread_chunks,
            revived_chunks: r.revived_chunks,
            storage_reads: r.storage_reads,
            index_reads: r.index_reads,
            tiles_read: r.tiles_read,
            bytes_fetched: r.bytes_fetched,
            gap_bytes: r.gap_bytes,
            tiles_read_ahead: r.tiles_read_ahead,
            hedged_reads: r.hedged_reads,
            hedge_wins: r.hedge_wins,
            decoded_bytes: r.decoded_bytes,
            bad_chunks: r.bad_chunks,
            wall_s: (end.saturating_sub(self.started)).as_secs_f64(),
            ttfb_s: r.first_batch_at.map(|t| (t.saturating_sub(self.started)).as_secs_f64()),
            batch_wait_p50_s: r.batch_waits.quantile(0.50),
            batch_wait_p95_s: r.batch_waits.quantile(0.95),
            batch_wait_p99_s: r.batch_waits.quantile(0.99),
            blocked_s: crate::stats::Stage::ALL.iter().copied().zip(r.blocked).collect(),
            depths: Depths {
                queue_capacity: self.prefetch_depth,
                queue_now: self.queued(),
                queue_peak: r.queue_peak,
                queue_samples: r.queue_samples,
                queue_empty: r.queue_empty,
                queue_full_enough: r.queue_full_enough,
                decode_queue_peak: r.decode_queue_peak,
                inflight_peak: r.inflight_peak,
                max_inflight: self.engine.max_inflight,
                read_window: self.engine.reads.window.target(),
                read_window_reason: self.engine.reads.window.reason(),
                decode_threads: self.engine.runtime.pool.parallelism().get(),
                read_ahead_peak_bytes: self.engine.reads.ahead.peak(),
                resident_peak_chunks: counters.resident_peak_chunks,
                resident_peak_bytes: counters.resident_peak_bytes,
                budget_bytes: self.engine.pool.budget(),
                starved_frac: Depths::share(r.queue_empty as f64, r.queue_samples as f64),
                fed_frac: Depths::share(r.queue_full_enough as f64, r.queue_samples as f64),
            },
            times: r.times.totalled(),
            limiting_stage,
            advice,
            consumer_idle,
        }
    }

    fn finish(&mut self) {
        if self.finished {
            return;
        }
        self.finished = true;
        self.abort.abort();
        self.engine.pool.close_pass(self.pass);
        let stats = self.stats();
        tracing::info!("{}", stats.summary());
        for o in self.observers.iter() {
            o.pass_ended(&stats);
        }
        *self.sink.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(stats);
    }

    /// End the pass now (also what dropping the stream does).
    pub fn close(mut self) {
        self.finish();
    }
}

impl Drop for BatchStream {
    fn drop(&mut self) {
        self.finish();
    }
}
