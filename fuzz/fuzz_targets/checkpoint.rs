//! Resume checkpoints (`Checkpoint::from_json`, what Python's `load_state_dict`, JS's
//! `resume` and the CLI's `--resume` read): any text. A checkpoint that parses round-trips;
//! one the dataset accepts (`check_resume`) resumes a pass that runs to its end on a fixed
//! 40-sample dataset without a panic or a deadlock, and yields each sample at most once;
//! any other is a configuration error, never another kind.
#![no_main]

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use insitubatch_core::runtime::{InlinePool, Runtime, Storage};
use insitubatch_core::testing::{MemoryStorage, SimExecutor, write_f32_array};
use insitubatch_core::{Checkpoint, Dataset, DatasetOptions, Error, Knobs, Split};
use libfuzzer_sys::fuzz_target;

/// Virtual time: a deadlock is reported at once, and a pass over 40 in-memory samples never
/// waits on the clock.
const LIMIT: Duration = Duration::from_secs(3600);

fn dataset() -> (SimExecutor, Dataset) {
    let sim = SimExecutor::new();
    let runtime = Runtime::new(Arc::new(sim.clone()), Arc::new(InlinePool));
    let storage = MemoryStorage::new();
    write_f32_array(&storage, "t2m", &[40, 2], &[4, 2], None, None, |i| i as f32);
    let storage: Arc<dyn Storage> = Arc::new(storage);
    let knobs = Knobs { batch_size: 3, block_chunks: 2, seed: 5, ..Default::default() };
    let builder = Dataset::builder(storage, runtime).options(DatasetOptions { knobs, ..Default::default() });
    let ds = sim.run(builder.open(), LIMIT).expect("no deadlock").expect("the dataset opens");
    (sim, ds)
}

thread_local! {
    static DATASET: (SimExecutor, Dataset) = dataset();
}

fn seeds() -> Vec<Vec<u8>> {
    DATASET.with(|(_, ds)| {
        let mut out = Vec::new();
        for split in [Split::Train, Split::Val, Split::All] {
            let fresh = ds.fresh_checkpoint(split, 2);
            out.push(fresh.to_json().into_bytes());
            let mid = Checkpoint { position: 6, batches: 2, ..fresh.clone() };
            out.push(mid.to_json().into_bytes());
            let elastic = Checkpoint {
                world_size: 2,
                position: 3,
                batches: 1,
                history: vec![insitubatch_core::Cut { world_size: 1, position: 6 }],
                ..fresh
            };
            out.push(elastic.to_json().into_bytes());
        }
        out
    })
}

fuzz_target!(init: insitubatch_fuzz::write_seeds_if_asked(seeds), |data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let checkpoint = match Checkpoint::from_json(text) {
        Ok(c) => c,
        Err(Error::Config(_)) => return,
        Err(other) => panic!("not a configuration error: {other:?}"),
    };
    assert_eq!(Checkpoint::from_json(&checkpoint.to_json()).expect("round trip"), checkpoint);
    DATASET.with(|(sim, ds)| {
        match ds.check_resume(&checkpoint) {
            Ok(()) => {}
            Err(Error::Config(_)) => return,
            Err(other) => panic!("check_resume: not a configuration error: {other:?}"),
        }
        let ds = ds.clone();
        let drawn = sim
            .run(
                async move {
                    let mut stream = ds.resume(&checkpoint).expect("check_resume accepted it");
                    let mut drawn = Vec::new();
                    while let Some(batch) = stream.next_batch().await {
                        drawn.extend(batch.expect("a batch of an in-memory store").sample_indices);
                    }
                    drawn
                },
                LIMIT,
            )
            .expect("a resumed pass neither deadlocks nor waits");
        let unique: HashSet<u64> = drawn.iter().copied().collect();
        assert_eq!(unique.len(), drawn.len(), "a sample drawn twice: {drawn:?}");
        assert!(drawn.iter().all(|&s| s < 40), "{drawn:?}");
    });
});
