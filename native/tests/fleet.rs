//! The fleet past this machine: 64 ranks sharing one epoch of a store with a million chunks
//! (16,384 by default, `IB_FLEET_CHUNKS` for more), each rank behind its own node's link to
//! the store (time to first byte, a rate per stream, a NIC cap) on a simulated clock.
//!
//! Checked: the ranks' batches are exact; the union of their reads is each chunk once (and
//! only chunks holding a drawn sample); no rank holds more chunks than its residency floor
//! (two blocks); and each rank's delivery rate, on the virtual clock, is within reach of
//! Little's law on its link; and the straggler verdict (`fleet_summary`) names a rank put
//! behind a slower link. Printed (`-- --nocapture`): planning time per rank (host time,
//! reported, never asserted), per-rank rate against the bound, and peak residency;
//! docs/distributed.md quotes a run at a million chunks:
//!
//!     IB_FLEET_CHUNKS=1000000 cargo test --release -p insitubatch-native --test fleet -- --nocapture

use std::sync::Arc;
use std::time::{Duration, Instant};

use insitubatch_core::PassStats;
use insitubatch_core::internals::open_array;
use insitubatch_core::runtime::{InlinePool, Runtime};
use insitubatch_core::shuffle::Split;
use insitubatch_core::testing::{GeneratedArray, LinkModel, SimExecutor};
use insitubatch_core::{Dataset, DatasetOptions, Knobs, Variable};
use insitubatch_core::{SplitOptions, split_by_chunk};

const RANKS: usize = 64;
/// Two samples of 8 × 16 float32 per chunk: 1 KiB.
const CHUNK: [u64; 3] = [2, 8, 16];
/// A node's link with the time ratios of 4 MiB chunks from a cloud object store: 30 ms to
/// the first byte, 64 MiB/s per connection, a 1 GiB/s NIC; the bytes scaled down 4096 times.
const LINK: LinkModel = LinkModel {
    first_byte: Duration::from_millis(30),
    stream_bytes_per_s: 16.0 * 1024.0,
    nic_bytes_per_s: 256.0 * 1024.0,
};
const LIMIT: Duration = Duration::from_secs(24 * 3600);

/// One rank's epoch.
struct RankRun {
    samples: Vec<u64>,
    plan: Duration,
    stats: PassStats,
    floor_bytes: u64,
}

fn options(rank: usize, max_inflight: usize) -> DatasetOptions {
    let knobs = Knobs {
        batch_size: 16,
        block_chunks: 32,
        seed: 7,
        rank,
        world_size: RANKS,
        max_inflight,
        ..Default::default()
    };
    DatasetOptions::from(knobs)
}

const MAX_INFLIGHT: usize = 32;

/// Rank `rank`'s train epoch on a node of its own, every batch checked against the array.
fn run_rank(array: &GeneratedArray, rank: usize, max_inflight: usize) -> RankRun {
    run_rank_on(array, options(rank, max_inflight), LINK)
}

/// A rank's train epoch with `options`, behind `link`.
fn run_rank_on(array: &GeneratedArray, options: DatasetOptions, link: LinkModel) -> RankRun {
    let sim = SimExecutor::new();
    let exec: Arc<dyn insitubatch_core::Executor> = Arc::new(sim.clone());
    let storage: Arc<dyn insitubatch_core::Storage> = Arc::new(array.node(exec.clone(), link));
    let st = storage.clone();
    let opened = sim.run(async move { open_array(st.as_ref(), "t2m").await }, LIMIT).unwrap().unwrap();
    let geometry = opened.geometry(0).unwrap();
    let manifest = split_by_chunk(&geometry, &SplitOptions { fractions: (1.0, 0.0, 0.0), ..Default::default() });
    let ds = Dataset::builder(storage, Runtime::new(exec, Arc::new(InlinePool)))
        .opened(vec![opened])
        .variables(vec![Variable { label: "t2m".into(), geometry }])
        .manifest(manifest.unwrap())
        .options(options)
        .build()
        .unwrap();
    let floor_bytes = ds.describe(1).unwrap().memory.floor_bytes;
    let started = Instant::now();
    let mut stream = ds.iter(Split::Train).unwrap();
    let plan = started.elapsed();
    let samples = sim
        .run(
            async move {
                let mut samples = Vec::new();
                while let Some(batch) = stream.next_batch().await {
                    let batch = batch.unwrap();
                    check_rows(&batch);
                    samples.extend_from_slice(&batch.sample_indices);
                }
                samples
            },
            LIMIT,
        )
        .unwrap();
    RankRun { samples, plan, stats: ds.last_pass().unwrap(), floor_bytes }
}

/// Each row holds its sample's values (sample-first, flat index `s × row + e`).
fn check_rows(batch: &insitubatch_core::Batch) {
    let row = (CHUNK[1] * CHUNK[2]) as usize;
    let values = batch.arrays["t2m"].as_slice::<f32>().unwrap();
    for (r, &s) in batch.sample_indices.iter().enumerate() {
        let expected = (0..row as u64).map(|e| GeneratedArray::value(s * row as u64 + e));
        assert!(values[r * row..(r + 1) * row].iter().copied().eq(expected), "sample {s} holds its own values");
    }
}

#[test]
fn sixty_four_ranks_read_each_chunk_once_within_their_floor_at_littles_law() {
    let n_chunks: u64 = std::env::var("IB_FLEET_CHUNKS").ok().and_then(|v| v.parse().ok()).unwrap_or(1 << 14);
    let array = GeneratedArray::new("t2m", n_chunks, &CHUNK);
    let runs: Vec<RankRun> = (0..RANKS).map(|rank| run_rank(&array, rank, MAX_INFLIGHT)).collect();

    // Exactly once: no sample twice, none lost but the equal-share remainder.
    let spc = CHUNK[0];
    let mut drawn = vec![false; (n_chunks * spc) as usize];
    for s in runs.iter().flat_map(|r| &r.samples) {
        assert!(!std::mem::replace(&mut drawn[*s as usize], true), "sample {s} drawn twice");
    }
    let n_drawn = drawn.iter().filter(|d| **d).count() as u64;
    assert_eq!(n_drawn + runs[0].stats.dropped_samples, n_chunks * spc, "every sample drawn or counted dropped");
    assert!(runs.iter().all(|r| r.samples.len() == runs[0].samples.len()), "equal shares");
    // The union of the ranks' reads: each chunk holding a drawn sample once, the others never.
    for c in 0..n_chunks {
        let holds_drawn = (c * spc..(c + 1) * spc).any(|s| drawn[s as usize]);
        assert_eq!(array.reads_of(c), u32::from(holds_drawn), "reads of chunk {c}");
    }

    let bound = LINK.bound_bytes_per_s(MAX_INFLIGHT, array.chunk_bytes());
    let rates: Vec<f64> = runs.iter().map(|r| r.stats.bytes_fetched as f64 / r.stats.wall_s).collect();
    for (rank, r) in runs.iter().enumerate() {
        let peak = r.stats.depths.resident_peak_bytes;
        assert!(peak <= r.floor_bytes, "rank {rank} held {peak} B, past its floor of {} B", r.floor_bytes);
        assert!(
            rates[rank] >= 0.8 * bound,
            "rank {rank}: {:.0} B/s, bound {bound:.0}: {}",
            rates[rank],
            r.stats.summary()
        );
    }
    report(n_chunks, &runs, &rates, bound);
}

/// One rank's rate as its read window grows: window × chunk / request time (Little's law)
/// until the NIC caps it, within 20% at every width.
#[test]
fn a_ranks_rate_follows_littles_law_up_to_its_nic() {
    let array = GeneratedArray::new("t2m", 1 << 14, &CHUNK);
    for max_inflight in [1, 2, 4, 8, 16, 32, 64] {
        let run = run_rank(&array, 0, max_inflight);
        let rate = run.stats.bytes_fetched as f64 / run.stats.wall_s;
        let bound = LINK.bound_bytes_per_s(max_inflight, array.chunk_bytes());
        println!(
            "fleet: max_inflight {max_inflight:>2}: {rate:>8.0} B/s, bound {bound:>8.0} B/s ({:.3})",
            rate / bound
        );
        assert!(
            rate >= 0.8 * bound && rate <= 1.0001 * bound,
            "max_inflight {max_inflight}: {rate:.0} B/s, bound {bound:.0}"
        );
    }
}

fn report(n_chunks: u64, runs: &[RankRun], rates: &[f64], bound: f64) {
    let plans: Vec<f64> = runs.iter().map(|r| r.plan.as_secs_f64()).collect();
    let peaks: Vec<f64> = runs.iter().map(|r| r.stats.depths.resident_peak_bytes as f64).collect();
    let spread = |v: &[f64]| {
        let mut v = v.to_vec();
        v.sort_by(f64::total_cmp);
        format!("min {:.4} median {:.4} max {:.4}", v[0], v[v.len() / 2], v[v.len() - 1])
    };
    println!("fleet: {RANKS} ranks x {n_chunks} chunks of {} B; link {LINK:?}", 4 * CHUNK.iter().product::<u64>());
    println!("  planning per rank (host s): {}", spread(&plans));
    println!(
        "  rate per rank / Little's-law bound ({bound:.0} B/s): {}",
        spread(&rates.iter().map(|r| r / bound).collect::<Vec<_>>())
    );
    println!("  resident peak per rank (B): {} (floor {} B)", spread(&peaks), runs[0].floor_bytes);
    println!("  virtual epoch per rank (s): {}", spread(&runs.iter().map(|r| r.stats.wall_s).collect::<Vec<_>>()));
}

#[test]
fn the_rank_behind_a_slow_link_is_named_the_straggler_waiting_on_its_store() {
    const WORLD: usize = 4;
    let array = GeneratedArray::new("t2m", 512, &CHUNK);
    // Rank 2's node reaches the store at a quarter of the others' rate, with four times
    // their time to first byte: a slow store for one rank, on the virtual clock.
    let slow = LinkModel {
        first_byte: LINK.first_byte * 4,
        stream_bytes_per_s: LINK.stream_bytes_per_s / 4.0,
        nic_bytes_per_s: LINK.nic_bytes_per_s / 4.0,
    };
    let reports: Vec<insitubatch_core::RankReport> = (0..WORLD)
        .map(|rank| {
            let mut o = options(rank, MAX_INFLIGHT);
            o.knobs.world_size = WORLD;
            let run = run_rank_on(&array, o, if rank == 2 { slow } else { LINK });
            (&run.stats).into()
        })
        .collect();
    let summary = insitubatch_core::fleet_summary(&reports);
    println!("{}", summary.verdict);
    assert!(summary.straggler, "{}", summary.verdict);
    let slowest = summary.slowest.expect("a slowest rank");
    assert_eq!((slowest.rank, slowest.limiting_stage.as_str()), (2, "store"), "{}", summary.verdict);
    assert!(summary.verdict.starts_with("rank 2 is the straggler"), "{}", summary.verdict);
}
