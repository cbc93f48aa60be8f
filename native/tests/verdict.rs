//! The limiting-stage verdict on real threads and a real clock: a CPU-bound batch transform
//! is blamed on itself, never on the store (the reference implementation's open bug #95,
//! where summed fetch waits of concurrent reads outweighed single-thread stages). It needs
//! pool threads that run side by side, which core's inline simulation does not model; the
//! margins are wide (the transform owns most of the wait), but the clock is real. A slow
//! store is blamed on the store in core's simulation
//! (`engine_tests::a_slow_store_is_blamed_on_the_store`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use insitubatch_native::NativeRuntime;
use insitubatch_native::core::internals::open_array;
use insitubatch_native::core::testing::{MemoryStorage, write_f32_array};
use insitubatch_native::core::transform::BatchTransform;
use insitubatch_native::core::{
    Batch, Dataset, DatasetOptions, Knobs, LimitingStage, Split, SplitOptions, Storage, Variable, split_by_chunk,
};

#[derive(Debug)]
struct BurnCpu(Duration);

impl BatchTransform for BurnCpu {
    fn name(&self) -> String {
        "burn_cpu".into()
    }
    fn apply(&self, batch: Batch) -> insitubatch_native::core::Result<Batch> {
        let t = Instant::now();
        let mut x = 0u64;
        while t.elapsed() < self.0 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
        }
        std::hint::black_box(x);
        Ok(batch)
    }
}

fn verdict(latency: Option<Duration>, transform: Option<Duration>, block_chunks: usize) -> LimitingStage {
    let rt = NativeRuntime::new(Some(2)).unwrap();
    let storage = match latency {
        Some(l) => MemoryStorage::new().with_latency(Arc::clone(&rt.runtime.executor), l),
        None => MemoryStorage::new(),
    };
    write_f32_array(&storage, "t2m", &[64, 32, 32], &[4, 32, 32], None, None, |i| i as f32);
    let storage: Arc<dyn Storage> = Arc::new(storage);
    let array = rt.block_on(open_array(storage.as_ref(), "t2m")).unwrap();
    let geometry = array.geometry(0).unwrap();
    let manifest =
        split_by_chunk(&geometry, &SplitOptions { fractions: (1.0, 0.0, 0.0), ..Default::default() }).unwrap();
    let batch_transforms: Vec<Arc<dyn BatchTransform>> =
        transform.map(|d| Arc::new(BurnCpu(d)) as _).into_iter().collect();
    let ds = Dataset::builder(storage, rt.runtime.clone())
        .opened(vec![array])
        .variables(vec![Variable { label: "t2m".into(), geometry }])
        .manifest(manifest)
        .options(DatasetOptions {
            knobs: Knobs { batch_size: 4, block_chunks, max_inflight: 8, ..Default::default() },
            ..Default::default()
        })
        .batch_transforms(batch_transforms)
        .build()
        .unwrap();
    let mut stream = ds.iter(Split::Train).unwrap();
    while let Some(b) = futures::executor::block_on(stream.next_batch()) {
        b.unwrap();
    }
    drop(stream);
    let stats = ds.last_pass().unwrap();
    eprintln!("{}", stats.summary());
    stats.limiting_stage
}

#[test]
fn a_cpu_bound_batch_transform_is_blamed_on_itself_not_the_store() {
    // Reads are slow too (100 ms each, 8 in flight): their summed wait (16 × 100 ms) is
    // more than twice the transform's total (16 × 40 ms), exactly the case the reference
    // implementation blamed on the store. But 8 reads in flight keep well ahead of one
    // transform.
    let v = verdict(Some(Duration::from_millis(100)), Some(Duration::from_millis(40)), 4);
    assert_eq!(v, LimitingStage::BatchTransform);
}
