//! The driver task of one pass, the only code that touches the pass's state: it admits
//! uses in first-use order within the reservation, collects loads, starts gathers, releases
//! each use after its last batch and sends batches in order; with no progress and nothing in
//! flight it proves a stall and raises.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::stream::{FuturesOrdered, FuturesUnordered, StreamExt};

use super::gather::{BatchAt, gather};
use super::{Delivered, PassSpec};
use crate::engine::load_chunk;
use crate::error::{Error, Result};
use crate::plan::ChunkKey;
use crate::pool::{Admit, Chunk, LoadResult};
use crate::runtime::BoxFuture;
use crate::stats::BatchTimeline;

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
