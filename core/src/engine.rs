//! Loading chunks: fetch (executor) → decode + assemble + chunk transforms (thread pool).
//!
//! One `max_inflight` semaphore spans every tile read of every pass of a dataset; a permit is
//! held from the request to the tile's placement in its slot, so in-flight memory is bounded
//! by `max_inflight` tiles. A sharded array's index is fetched before the permit is taken
//! (a read holding a permit never waits on another read for one).

use std::collections::{BinaryHeap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::FutureExt;
use futures::future::Shared;
use futures::stream::{FuturesUnordered, StreamExt};

use crate::array::{DType, NdArray, Recycler, filled_bytes};
use crate::assemble::{TileLayout, TiledSlot};
use crate::error::{Error, Result};
use crate::geometry::{ArrayGeometry, slot_shape};
use crate::plan::ChunkKey;
use crate::pool::{Chunk, ChunkData, LoadResult, LoadTimes, Pool};
use crate::reads::{Delivery, ReadPath, TileRead};
use crate::retry::OnBadChunk;
use crate::runtime::{BoxFuture, ByteRange, Cancelled, Job, Location, MaybeSend, Runtime, Storage, ThreadPool};
use crate::stats::PassRecorder;
use crate::tier::ChunkTier;
use crate::transform::{ChunkTransform, DecodedChunk};
use crate::window::SmallestFirst;
use crate::zarr::{ShardIndex, TileLocation, ZarrArray};

/// A chunk filled under `on_bad_chunk = "nan"`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct BadChunk {
    /// Array path.
    pub array: String,
    /// Sample-axis chunk index.
    pub chunk_index: u64,
    /// Physical tile coordinate.
    pub tile: Vec<u64>,
    /// The tile's coordinate on the inner axes, physical order: `tile` without the sample
    /// axis (insitubatch 0.2.0's `StoredChunkRead.inner_coord`).
    pub inner_coord: Vec<u64>,
    /// Why it could not be read.
    pub error: String,
}

/// CPU work in priority order on the thread pool.
///
/// Jobs wait in a heap; each submission asks the pool to run *one* job, and that runner
/// takes the most urgent job waiting at the moment it starts. So the pool runs everything
/// it is given, but a gather for the next batch (class 0) overtakes decodes, and the decode
/// of the chunk admitted first overtakes those admitted after it, whatever order their
/// fetches finished in. That is what keeps the first batch fast with reads far ahead.
pub(crate) struct CpuQueue {
    pool: Arc<dyn ThreadPool>,
    heap: Arc<Mutex<BinaryHeap<Prioritized>>>,
    seq: AtomicU64,
}

/// A CPU job keyed by (class, priority, sequence).
type Prioritized = SmallestFirst<(u8, u64, u64), Job>;

/// Gathers: the consumer is waiting on them.
pub(crate) const CLASS_GATHER: u8 = 0;
/// Decode, assembly and chunk transforms.
pub(crate) const CLASS_LOAD: u8 = 1;

impl CpuQueue {
    pub(crate) fn new(pool: Arc<dyn ThreadPool>) -> Self {
        Self { pool, heap: Arc::new(Mutex::new(BinaryHeap::new())), seq: AtomicU64::new(0) }
    }

    pub(crate) fn parallelism(&self) -> usize {
        self.pool.parallelism().get()
    }

    /// Jobs submitted and not yet started.
    pub(crate) fn waiting(&self) -> usize {
        self.heap.lock().unwrap_or_else(std::sync::PoisonError::into_inner).len()
    }

    /// Run `f` at (`class`, `priority`) and await its result.
    pub(crate) fn run<R, F>(
        &self,
        class: u8,
        priority: u64,
        f: F,
    ) -> impl Future<Output = Result<R, Cancelled>> + use<R, F>
    where
        R: MaybeSend + 'static,
        F: FnOnce() -> R + MaybeSend + 'static,
    {
        let (tx, rx) = futures::channel::oneshot::channel();
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        let job: Job = Box::new(move || {
            let _ = tx.send(f());
        });
        self.heap
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(Prioritized { key: (class, priority, seq), item: job });
        let heap = Arc::clone(&self.heap);
        self.pool.execute(Box::new(move || {
            let next = heap.lock().unwrap_or_else(std::sync::PoisonError::into_inner).pop();
            if let Some(p) = next {
                (p.item)();
            }
        }));
        async move { rx.await.map_err(|_| Cancelled) }
    }
}

type SharedIndex = Shared<BoxFuture<'static, Result<Option<Arc<ShardIndex>>>>>;

/// One array as the engine reads it.
pub(crate) struct ArrayReader {
    pub zarr: Arc<ZarrArray>,
    pub geom: ArrayGeometry,
    pub transforms: Vec<Arc<dyn ChunkTransform>>,
    /// What each transform declared it returns (element type, per-sample shape), in order:
    /// checked after each one runs, so a wrong declaration is pinned on its transform.
    pub declared: Vec<(DType, Vec<usize>)>,
    /// Element type and per-sample shape after the chunk transforms.
    pub out_dtype: DType,
    pub out_inner: Vec<usize>,
    index_cache: Mutex<HashMap<String, SharedIndex>>,
}

impl ArrayReader {
    pub(crate) fn new(
        zarr: Arc<ZarrArray>,
        geom: ArrayGeometry,
        transforms: Vec<Arc<dyn ChunkTransform>>,
    ) -> Result<Self> {
        let mut dtype = geom.dtype;
        let mut inner: Vec<usize> = geom.inner_shape().iter().map(|&d| d as usize).collect();
        let mut declared = Vec::with_capacity(transforms.len());
        for t in &transforms {
            (dtype, inner) = t.output(&geom, dtype, &inner)?;
            declared.push((dtype, inner.clone()));
        }
        let index_cache = Mutex::new(HashMap::new());
        Ok(Self { zarr, geom, transforms, declared, out_dtype: dtype, out_inner: inner, index_cache })
    }

    /// Bytes of one output sample.
    pub(crate) fn out_sample_bytes(&self) -> u64 {
        self.out_inner.iter().product::<usize>() as u64 * self.out_dtype.size() as u64
    }

    /// What the pool charges for chunk `c`: the larger of the assembled chunk and its
    /// transformed output (both exist while the transforms run).
    pub(crate) fn charge(&self, c: u64) -> u64 {
        let rows = {
            let r = self.geom.samples_in_chunk(c);
            r.end - r.start
        };
        let assembled = rows * self.geom.sample_bytes();
        if self.transforms.is_empty() { assembled } else { assembled.max(rows * self.out_sample_bytes()) }
    }

    /// What the pool charges for chunk `c` read in part (its tiles `tiles`; all when `None`):
    /// the bytes of those tiles' regions ([`TileLayout`]; a chunk read in part has no
    /// transforms, `PassPlan::tiles`).
    pub(crate) fn charge_part(&self, c: u64, tiles: Option<&[u64]>) -> u64 {
        match tiles {
            None => self.charge(c),
            Some(t) => crate::assemble::held_elements(&self.geom, c, t) as u64 * self.geom.dtype.size() as u64,
        }
    }

    /// The full-chunk charge: the residency unit in the memory model.
    pub(crate) fn max_charge(&self) -> u64 {
        let spc = self.geom.sample_chunk_size().min(self.geom.n_samples());
        let assembled = spc * self.geom.sample_bytes();
        if self.transforms.is_empty() { assembled } else { assembled.max(spc * self.out_sample_bytes()) }
    }
}

/// Everything the loads of one dataset share.
pub(crate) struct Engine {
    pub storage: Arc<dyn Storage>,
    pub runtime: Runtime,
    pub pool: Arc<Pool>,
    pub arrays: Vec<ArrayReader>,
    /// What every tile read shares: permits, window, coalescer, hedging, read-ahead, policy.
    pub reads: Arc<ReadPath>,
    pub max_inflight: usize,
    /// What a chunk that fails for good does (the `on_bad_chunk` knob).
    pub on_bad_chunk: OnBadChunk,
    pub bad_chunks: Mutex<Vec<BadChunk>>,
    pub cpu: CpuQueue,
    pub recycler: Arc<Recycler>,
    /// Admission order across every pass: the decode priority of a load.
    pub admissions: AtomicU64,
    /// The disk tier (`cache_dir`), asked before a fetch and given every loaded chunk.
    pub tier: Option<Arc<dyn ChunkTier>>,
}

impl Engine {
    /// The inner chunks of chunk `key` (of its tiles `tiles`, or all) by shard object (empty
    /// for an array that is not sharded): what a pass marks as wanted for read-ahead.
    pub(crate) fn inner_chunks(&self, key: ChunkKey, tiles: Option<&[u64]>) -> Vec<(String, Vec<u32>)> {
        let r = &self.arrays[key.path as usize];
        let mut by_shard: Vec<(String, Vec<u32>)> = Vec::new();
        for t in tile_numbers(&r.geom, tiles) {
            let coord = r.geom.physical_tile_coord(key.chunk, &r.geom.inner_coord(t));
            if let TileLocation::InShard { key: shard, index } = r.zarr.tile_location(&coord)
                && let Ok(i) = u32::try_from(index)
            {
                match by_shard.iter_mut().find(|(s, _)| *s == shard) {
                    Some((_, v)) => v.push(i),
                    None => by_shard.push((shard, vec![i])),
                }
            }
        }
        by_shard
    }

    /// Mark (or, `want = false`, unmark) the inner chunks of chunk `key` (its tiles `tiles`,
    /// or all) as wanted soon.
    pub(crate) fn want_chunk(&self, key: ChunkKey, tiles: Option<&[u64]>, want: bool) {
        if self.reads.ahead.is_off() || self.arrays[key.path as usize].geom.shard.is_none() {
            return;
        }
        for (shard, indices) in self.inner_chunks(key, tiles) {
            if want {
                self.reads.ahead.want(&shard, indices);
            } else {
                self.reads.ahead.unwant(&shard, indices);
            }
        }
    }

    pub(crate) fn now(&self) -> Duration {
        self.runtime.executor.now()
    }

    pub(crate) fn url(&self, key: &str) -> String {
        self.storage.key_url(key)
    }

    async fn shard_index(
        self: &Arc<Self>,
        path: u32,
        shard_key: &str,
        rec: &Arc<PassRecorder>,
    ) -> Result<Option<Arc<ShardIndex>>> {
        let reader = &self.arrays[path as usize];
        let fut = {
            let mut cache = reader.index_cache.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if cache.len() > 4096 {
                cache.clear();
            }
            cache.entry(shard_key.to_string()).or_insert_with(|| self.spawn_index_read(path, shard_key, rec)).clone()
        };
        let out = fut.await;
        if out.is_err() {
            reader.index_cache.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(shard_key);
        }
        out
    }

    /// Shard `key`'s index, read and decoded in a task of its own that runs to its end whether
    /// or not a pass still waits for it; the cache keeps the way to its answer. The cache used
    /// to keep the read itself, which holds this engine: when every pass waiting on it closed
    /// early (a preview's first batch), nothing polled it again, so the engine held itself and
    /// its storage for good, and in Node the read's request-timeout timer kept the event loop
    /// alive for 120 s after the program's end.
    fn spawn_index_read(self: &Arc<Self>, path: u32, key: &str, rec: &Arc<PassRecorder>) -> SharedIndex {
        let (tx, rx) = futures::channel::oneshot::channel();
        let read = read_shard_index(Arc::clone(self), path, key.to_string(), Arc::clone(rec));
        self.runtime.executor.spawn(Box::pin(async move {
            let _ = tx.send(read.await);
        }));
        let url = self.url(key);
        let answer: BoxFuture<'static, Result<Option<Arc<ShardIndex>>>> = Box::pin(async move {
            rx.await.unwrap_or_else(|_| {
                Err(Error::Cancelled(format!("the runtime shut down before this shard index was read: {url}")))
            })
        });
        answer.shared()
    }
}

/// Read and decode shard `key`'s index: with the whole shard when passes want nearly all of
/// it ([`Engine::reads_whole_shard`]), else its index range alone.
async fn read_shard_index(
    engine: Arc<Engine>,
    path: u32,
    key: String,
    rec: Arc<PassRecorder>,
) -> Result<Option<Arc<ShardIndex>>> {
    let zarr = &engine.arrays[path as usize].zarr;
    let Some(range) = zarr.shard_index_range() else {
        return Err(Error::Metadata { message: "array is not sharded".into(), key });
    };
    if engine.reads_whole_shard(path, &key) {
        return read_whole_shard(&engine, path, &key, &rec).await;
    }
    let size = match range {
        ByteRange::Bounded { start, end } => end.saturating_sub(start),
        ByteRange::Suffix(n) => n,
    };
    let index = engine.reads.fetch(&key, Some(range), size, Some(&rec)).await;
    rec.with(|r| r.index_reads += 1);
    match index? {
        None => Ok(None),
        Some(b) => zarr.decode_shard_index(&b, &engine.url(&key)).map(|i| Some(Arc::new(i))),
    }
}

impl Engine {
    /// Read shard `key` whole, its index with it, when passes want nearly all its inner
    /// chunks soon (at least 10 of every 11, so at most a tenth more bytes are read than
    /// needed) and the shard is within `coalesce_max_bytes` and the read-ahead budget (its
    /// decoded size bounds its stored size): one request instead of an index read and its
    /// ranges, as insitubatch 0.2.0 reads shards, without holding their decoded bytes.
    fn reads_whole_shard(&self, path: u32, key: &str) -> bool {
        let Some((inner, decoded)) = self.arrays[path as usize].zarr.shard_extent() else { return false };
        let wanted = self.reads.ahead.wanted_in(key).len() as u64;
        decoded <= self.reads.policy.coalesce_max_bytes
            && decoded <= self.reads.ahead.budget()
            && wanted * 11 >= inner * 10
    }
}

/// One request for a whole shard: its index from its tail (or head), and every inner
/// chunk a pass wants held for its load (`ahead.rs`).
async fn read_whole_shard(
    engine: &Arc<Engine>,
    path: u32,
    key: &str,
    rec: &Arc<PassRecorder>,
) -> Result<Option<Arc<ShardIndex>>> {
    let zarr = &engine.arrays[path as usize].zarr;
    let url = engine.url(key);
    let delivery = crate::reads::read_tile_alone(&engine.reads, key, rec).await;
    let Some(object) = delivery.bytes? else { return Ok(None) };
    let bad = || Error::Decode { message: "a shard shorter than its index".into(), key: url.clone() };
    let index_bytes = zarr.shard_index_in(&object).ok_or_else(bad)?;
    let index = Arc::new(zarr.decode_shard_index(index_bytes, &url)?);
    let (mut used, mut tiles) = (index_bytes.len() as u64, 0u64);
    for i in engine.reads.ahead.wanted_in(key) {
        let Some(ByteRange::Bounded { start, end }) = index.range(i as usize) else { continue };
        let (Ok(s), Ok(e)) = (usize::try_from(start), usize::try_from(end)) else { continue };
        let Some(part) = (e <= object.len()).then(|| object.slice(s..e)) else { continue };
        if engine.reads.ahead.begin(key, i, end - start) {
            used += end - start;
            tiles += 1;
            engine.reads.ahead.fill(key, i, Ok(part));
        }
    }
    // The request was counted as one tile (`reads.rs`); it brought `tiles`, and the bytes of
    // inner chunks no pass wanted (if any) were read for nothing.
    rec.with(|r| {
        r.tiles_read += tiles.saturating_sub(1);
        r.gap_bytes += (object.len() as u64).saturating_sub(used);
    });
    Ok(Some(index))
}

/// Load one chunk: revived from a persisting tier, or its tiles (`tiles`, or all) fetched,
/// decoded and assembled into a sample-first slot, transformed, and handed to the tier.
/// A chunk of some tiles only (patches) is never revived nor handed to a tier: the pass
/// plans it only where the array has no tier and no chunk transform (`PassPlan::tiles`).
pub(crate) fn load_chunk(
    engine: Arc<Engine>,
    key: ChunkKey,
    tiles: Option<Arc<[u64]>>,
    rec: Arc<PassRecorder>,
    priority: u64,
) -> BoxFuture<'static, LoadResult> {
    Box::pin(async move {
        if let Some(tiles) = tiles {
            let layout = Arc::new(TileLayout::new(&engine.arrays[key.path as usize].geom, key.chunk, tiles));
            let (data, mut times, bad) = load_tiles(&engine, key, Some(&layout), &rec, priority).await?;
            rec.with(|r| r.bad_chunks += u64::from(bad));
            times.ready = engine.now();
            return Ok(Arc::new(Chunk { data: ChunkData::Heap(data), bad, times, layout: Some(layout) }));
        }
        if let Some(chunk) = revive(&engine, key, &rec, priority).await? {
            return Ok(chunk);
        }
        let (data, mut times, bad) = load_tiles(&engine, key, None, &rec, priority).await?;
        if bad {
            // PassStats.bad_chunks: chunks of this pass with a tile filled under "nan".
            rec.with(|r| r.bad_chunks += 1);
        }
        let data = transform_chunk(&engine, key, &rec, priority, data).await?;
        let data = if bad { ChunkData::Heap(data) } else { spill(&engine, key, priority, data).await? };
        times.ready = engine.now();
        Ok(Arc::new(Chunk { data, bad, times, layout: None }))
    })
}

/// The chunk from a persisting tier, with no fetch and no decode; `None` on a miss. Only a
/// persisting tier can hold a chunk this process has not just loaded.
async fn revive(engine: &Arc<Engine>, key: ChunkKey, rec: &PassRecorder, priority: u64) -> Result<Option<Arc<Chunk>>> {
    let Some(tier) = engine.tier.clone().filter(|t| t.persists()) else { return Ok(None) };
    let reader = &engine.arrays[key.path as usize];
    let rows = {
        let r = reader.geom.samples_in_chunk(key.chunk);
        (r.end - r.start) as usize
    };
    let out_shape: Vec<usize> = std::iter::once(rows).chain(reader.out_inner.iter().copied()).collect();
    let (dtype, shape) = (reader.out_dtype, out_shape.clone());
    let exec = Arc::clone(&engine.runtime.executor);
    let t0 = exec.now();
    let read = match tier.revive_async(key.path, key.chunk, dtype, &out_shape) {
        // An asynchronous tier (the browser's OPFS) is awaited here, on the executor.
        Some(read) => Some(read.await?),
        None => None,
    };
    let revived = if let Some(b) = read {
        (b, exec.now().saturating_sub(t0))
    } else {
        engine
            .cpu
            .run(CLASS_LOAD, priority, move || {
                let t0 = exec.now();
                tier.revive(key.path, key.chunk, dtype, &shape).map(|b| (b, exec.now().saturating_sub(t0)))
            })
            .await??
    };
    let (Some(bytes), took) = revived else { return Ok(None) };
    rec.with(|r| {
        r.revived_chunks += 1;
        r.times.decode_s += took.as_secs_f64();
    });
    let now = engine.now();
    let times = LoadTimes { permitted: now, fetched: now, ready: now };
    let data = ChunkData::Tier { dtype: reader.out_dtype, shape: out_shape, bytes };
    Ok(Some(Arc::new(Chunk { data, bad: false, times, layout: None })))
}

/// Fetch, decode and place the tiles of a chunk (those of `layout`, compact and flat, or
/// every one into its sample-first slot): the assembled slot, when its reads were permitted
/// and done, and whether any tile was filled under `on_bad_chunk = "nan"`.
///
/// Every tile is located first (a shard's index read, shared), and every range is
/// registered with the coalescer before any tile asks for a read, so the tiles of one chunk
/// that lie side by side in a shard always go out as one request.
pub(crate) async fn load_tiles(
    engine: &Arc<Engine>,
    key: ChunkKey,
    layout: Option<&Arc<TileLayout>>,
    rec: &Arc<PassRecorder>,
    priority: u64,
) -> Result<(NdArray, LoadTimes, bool)> {
    let reader = &engine.arrays[key.path as usize];
    let g = &reader.geom;
    let slot = Arc::new(match layout {
        Some(l) => TiledSlot::some_tiles(g, Arc::clone(l)),
        None => TiledSlot::new(g, key.chunk),
    });
    let tiles = layout.map(|l| &l.tiles()[..]);
    let shape = layout.map_or_else(|| slot_shape(g, key.chunk), |l| vec![l.len()]);
    let located: Vec<Located> =
        futures::future::join_all(tile_numbers(g, tiles).map(|t| locate_tile(engine, key, t, rec))).await;
    let mut tiles: FuturesUnordered<_> = located
        .into_iter()
        .map(|l| load_tile(Arc::clone(engine), l, Arc::clone(&slot), Arc::clone(rec), priority))
        .collect();
    let mut times = LoadTimes::default();
    let mut bad = false;
    while let Some(r) = tiles.next().await {
        let (permitted, fetched, tile_bad) = r?;
        times.permitted = times.permitted.max(permitted);
        times.fetched = times.fetched.max(fetched);
        bad |= tile_bad;
    }
    let bytes = slot.finish().map_err(assembly_bug(g, key))?;
    let data = NdArray::new(g.dtype, shape, bytes)
        .map_err(|m| Error::Decode { message: m, key: reader.geom.path.clone() })?
        .recycled_by(&engine.recycler);
    Ok((data, times, bad))
}

/// Tile numbers `tiles`, or every tile of a chunk of `g`.
fn tile_numbers<'a>(g: &ArrayGeometry, tiles: Option<&'a [u64]>) -> Box<dyn Iterator<Item = u64> + 'a> {
    match tiles {
        Some(t) => Box::new(t.iter().copied()),
        None => Box::new(0..g.n_tiles()),
    }
}

/// Run the array's chunk transforms on the pool, checking each one's output against what it
/// declared (`output`, Python's `output_inner`): the pool, the cache and the batch buffers
/// are all sized from the declarations, so a wrong one fails the pass, naming the transform.
async fn transform_chunk(
    engine: &Arc<Engine>,
    key: ChunkKey,
    rec: &Arc<PassRecorder>,
    priority: u64,
    data: NdArray,
) -> Result<NdArray> {
    let reader = &engine.arrays[key.path as usize];
    if reader.transforms.is_empty() {
        return Ok(data);
    }
    let g = &reader.geom;
    let steps: Vec<_> = reader.transforms.iter().cloned().zip(reader.declared.iter().cloned()).collect();
    let (array, chunk_index, sample_offset) = (g.path.clone(), key.chunk, g.samples_in_chunk(key.chunk).start);
    let exec = Arc::clone(&engine.runtime.executor);
    let rec = Arc::clone(rec);
    engine
        .cpu
        .run(CLASS_LOAD, priority, move || -> Result<NdArray> {
            let t0 = exec.now();
            let mut chunk = DecodedChunk { array, chunk_index, sample_offset, data };
            let rows = chunk.data.shape[0];
            for (t, (dtype, inner)) in &steps {
                chunk = t.apply(chunk)?;
                let expected: Vec<usize> = std::iter::once(rows).chain(inner.iter().copied()).collect();
                if chunk.data.shape != expected || chunk.data.dtype != *dtype {
                    return Err(Error::Transform {
                        name: t.name(),
                        message: format!(
                            "it returned {} {:?} but declared {dtype} {expected:?} (rows, then its output_inner); \
                             make output_inner (Rust: output) return the shape and dtype it produces, and keep the \
                             rows: chunk {} of array {:?}",
                            chunk.data.dtype, chunk.data.shape, chunk.chunk_index, chunk.array
                        ),
                    });
                }
            }
            rec.with(|r| r.times.assemble_s += exec.now().saturating_sub(t0).as_secs_f64());
            Ok(chunk.data)
        })
        .await?
}

/// Hand a loaded chunk to the tier: its copy (a mapping) replaces the heap buffer, which is
/// recycled. Without a tier, or with an asynchronous one (written, no mapping), the heap
/// buffer stays.
async fn spill(engine: &Arc<Engine>, key: ChunkKey, priority: u64, data: NdArray) -> Result<ChunkData> {
    let data = ChunkData::Heap(data);
    let Some(tier) = engine.tier.clone() else { return Ok(data) };
    // An asynchronous tier is awaited here, on the executor, and keeps no mapping to serve
    // from: the heap copy stays.
    let written = match tier.store_async(key.path, key.chunk, data.dtype(), data.shape(), data.bytes()) {
        Some(write) => write.await.map(|()| true)?,
        None => false,
    };
    if written {
        return Ok(data);
    }
    engine
        .cpu
        .run(CLASS_LOAD, priority, move || -> Result<ChunkData> {
            let stored = tier.store(key.path, key.chunk, data.dtype(), data.shape(), data.bytes())?;
            Ok(match stored {
                Some(bytes) => ChunkData::Tier { dtype: data.dtype(), shape: data.shape().to_vec(), bytes },
                None => data,
            })
        })
        .await?
}

/// Where one tile's bytes are: its object and range, read (registered with the coalescer)
/// or not needed; or the error its shard index gave.
struct Located {
    tile: TileRef,
    source: Result<Source>,
}

enum Source {
    /// A read of the object (a range of it for an inner chunk), registered for coalescing.
    Read(TileRead),
    /// An inner chunk its shard does not hold, or a shard that does not exist: the fill value.
    Absent,
}

/// One tile of one chunk, and the URL its bytes come from (for errors).
struct TileRef {
    key: ChunkKey,
    tile: u64,
    url: String,
}

/// Locate tile `tile` of chunk `key`: its shard's index first (before any window place or
/// permit, so a read holding a permit never waits on another read for one).
async fn locate_tile(engine: &Arc<Engine>, key: ChunkKey, tile: u64, rec: &Arc<PassRecorder>) -> Located {
    let reader = &engine.arrays[key.path as usize];
    let g = &reader.geom;
    let coord = g.physical_tile_coord(key.chunk, &g.inner_coord(tile));
    let location = reader.zarr.tile_location(&coord);
    let mut tile = TileRef { key, tile, url: engine.url(location.key()) };
    let source = match location {
        TileLocation::Object { key: object } => match engine.storage.locate(&object).await {
            // A range of another object (a reference set's chunk in its file): registered on
            // that object, so the chunks of one file are coalesced.
            Ok(Some(Location::In { object: file, range })) => {
                tile.url = in_file(&tile.url, &engine.url(&file), range);
                Ok(Source::Read(TileRead::register(&engine.reads, file, range, None)))
            }
            // Nowhere (a chunk a reference set does not list): the fill value, no request.
            Ok(Some(Location::Missing)) => Ok(Source::Absent),
            Ok(None) => Ok(Source::Read(TileRead::register(&engine.reads, object, None, None))),
            Err(e) => Err(Error::Storage {
                message: format!("cannot find where this chunk is stored ({})", e.message),
                key: tile.url.clone(),
            }),
        },
        TileLocation::InShard { key: shard, index } => match engine.shard_index(key.path, &shard, rec).await {
            Ok(Some(ix)) => Ok(match (ix.range(index), u32::try_from(index)) {
                (Some(r), Ok(i)) => Source::Read(TileRead::register(&engine.reads, shard, Some(r), Some((i, ix)))),
                (Some(r), Err(_)) => Source::Read(TileRead::register(&engine.reads, shard, Some(r), None)),
                (None, _) => Source::Absent,
            }),
            Ok(None) => Ok(Source::Absent),
            Err(e) => Err(e),
        },
    };
    Located { tile, source }
}

/// A chunk's URL with where its bytes are (`… (bytes 10..20 of https://…/a.nc)`), so that an
/// error decoding a chunk of a reference set names the chunk and its file.
fn in_file(chunk: &str, file: &str, range: Option<ByteRange>) -> String {
    match range {
        Some(ByteRange::Bounded { start, end }) => format!("{chunk} (bytes {start}..{end} of {file})"),
        _ => format!("{chunk} (the whole of {file})"),
    }
}

/// Read, decode and place one located tile. Returns (permit time, fetch-done time,
/// filled-as-bad).
async fn load_tile(
    engine: Arc<Engine>,
    located: Located,
    slot: Arc<TiledSlot>,
    rec: Arc<PassRecorder>,
    priority: u64,
) -> Result<(Duration, Duration, bool)> {
    let Located { tile, source } = located;
    let delivery = match source {
        Ok(Source::Read(read)) => read.read(priority, &rec).await,
        Ok(Source::Absent) => absent(&engine),
        Err(e) => {
            return bad_or_raise(&engine, tile.key, tile.tile, &slot, e).map(|b| (Duration::ZERO, engine.now(), b));
        }
    };
    decode_tile(engine, tile, slot, rec, priority, delivery).await
}

/// An inner chunk its shard does not hold (or a shard that does not exist): no read, the
/// fill value.
fn absent(engine: &Engine) -> Delivery {
    let now = engine.now();
    Delivery { bytes: Ok(None), place: None, hold: None, permitted: now, fetched: now }
}

/// Decode a tile's stored bytes on the pool and place it in its chunk's slot. The request's
/// window place goes back when the decode starts, its permit once the tile is placed.
async fn decode_tile(
    engine: Arc<Engine>,
    tile: TileRef,
    slot: Arc<TiledSlot>,
    rec: Arc<PassRecorder>,
    priority: u64,
    delivery: Delivery,
) -> Result<(Duration, Duration, bool)> {
    let TileRef { key, tile, url } = tile;
    let Delivery { bytes, place, hold, permitted, fetched } = delivery;
    let encoded = match bytes {
        Ok(b) => b,
        Err(e) => return bad_or_raise(&engine, key, tile, &slot, e).map(|b| (permitted, fetched, b)),
    };
    let job_engine = Arc::clone(&engine);
    let job_rec = Arc::clone(&rec);
    let job_slot = Arc::clone(&slot);
    let waiting = engine.cpu.waiting() + 1;
    rec.with(|r| r.decode_queue_peak = r.decode_queue_peak.max(waiting));
    let decoded = engine
        .cpu
        .run(CLASS_LOAD, priority, move || -> Result<()> {
            // Decoding has started: this read is no longer ahead of the decoders.
            drop(place);
            let engine = job_engine;
            let reader = &engine.arrays[key.path as usize];
            let g = &reader.geom;
            let t0 = engine.now();
            let scratch = reader.zarr.has_fast_path().then(|| engine.recycler.take(reader.zarr.tile_bytes()));
            let tile_arr = reader.zarr.decode_tile_into(encoded, &url, scratch)?;
            let t1 = engine.now();
            engine.reads.window.decode_took(t1.saturating_sub(t0));
            job_slot.place(g, key.chunk, tile, tile_arr.into_data(), &engine.recycler).map_err(assembly_bug(g, key))?;
            let t2 = engine.now();
            job_rec.with(|r| {
                r.times.decode_s += t1.saturating_sub(t0).as_secs_f64();
                r.times.assemble_s += t2.saturating_sub(t1).as_secs_f64();
                r.decoded_bytes += g.tile_bytes();
            });
            Ok(())
        })
        .await?;
    drop(hold);
    match decoded {
        Ok(()) => Ok((permitted, fetched, false)),
        Err(e) => bad_or_raise(&engine, key, tile, &slot, e).map(|b| (permitted, fetched, b)),
    }
}

/// A [`TiledSlot`] refusal as an error: a bug of ours (a tile placed twice or missing), never bad input.
fn assembly_bug(g: &ArrayGeometry, key: ChunkKey) -> impl Fn(String) -> Error + '_ {
    move |m| Error::Internal(format!("assembling chunk {} of array {:?}: {m}", key.chunk, g.path))
}

/// Under `Raise`, the error; under `Nan`, fill the tile's region, record it, and go on.
fn bad_or_raise(engine: &Arc<Engine>, key: ChunkKey, tile: u64, slot: &TiledSlot, error: Error) -> Result<bool> {
    // An internal error is a bug of ours, not a bad chunk: never filled over.
    if engine.on_bad_chunk == OnBadChunk::Raise || matches!(error, Error::Internal(_)) {
        return Err(match error {
            // The hint once: zarr's own decode errors already carry it.
            Error::Decode { message, key } if !message.contains("on_bad_chunk") => Error::Decode {
                message: format!("{message} (pass on_bad_chunk=\"nan\" to fill bad chunks and go on)"),
                key,
            },
            e => e,
        });
    }
    let reader = &engine.arrays[key.path as usize];
    let g = &reader.geom;
    let element = g.dtype.nan_bytes().unwrap_or_else(|| reader.zarr.fill_value().to_vec());
    let filled = filled_bytes(g.tile.iter().product::<u64>() as usize, &element);
    slot.place(g, key.chunk, tile, filled, &engine.recycler).map_err(assembly_bug(g, key))?;
    let inner_coord = g.inner_coord(tile);
    let coord = g.physical_tile_coord(key.chunk, &inner_coord);
    tracing::warn!(array = %g.path, chunk = key.chunk, error = %error, "bad chunk filled (on_bad_chunk=\"nan\")");
    engine.bad_chunks.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(BadChunk {
        array: g.path.clone(),
        chunk_index: key.chunk,
        tile: coord,
        inner_coord,
        error: error.to_string(),
    });
    Ok(true)
}
