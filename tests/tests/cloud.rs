//! Reads through a cloud-like store on loopback (tests/servers/cloud_store, one per test):
//! the same batches as from file://, and what the engine sends, counted at the store. The
//! inner chunks of a zarr-python shard (Morton-ordered, so a sample chunk's inner chunks are
//! interleaved with its neighbours') go out in a few requests with each byte read once; a
//! read the store never answers is hedged, and the epoch does not wait for it. Nothing here
//! depends on timing: the counts are the engine's choices, and the stalled read is one only
//! a second request can finish.

use insitubatch_native::core::{Batch, HedgeFields, HedgeSpec, PassStats};
use insitubatch_native::{DatasetSpec, OpenOptions, ReadPolicySpec, VariablesSpec, open};
use insitubatch_tests::{CloudStore, digest, fixtures_dir};

const BIN: &str = env!("CARGO_BIN_EXE_cloud-store");

fn pass(url: &str, spec: DatasetSpec) -> (Vec<Batch>, PassStats) {
    let ds = open(url, OpenOptions::from_spec(spec)).unwrap_or_else(|e| panic!("open {url}: {e}"));
    let batches = ds.train().unwrap().collect::<Result<_, _>>().unwrap_or_else(|e| panic!("{url}: {e}"));
    (batches, ds.last_pass().expect("a pass ended"))
}

fn options(read_policy: ReadPolicySpec) -> DatasetSpec {
    DatasetSpec {
        variables: Some(VariablesSpec::Paths(vec!["t2m".into()])),
        fractions: (1.0, 0.0, 0.0),
        batch_size: 8,
        block_chunks: 2,
        seed: 5,
        read_policy,
        ..Default::default()
    }
}

/// No hedging: a read the loaded machine slows past the hedge's threshold would get a second
/// request, and these tests count requests exactly (hedging has its own test below).
fn no_hedge() -> HedgeSpec {
    HedgeSpec::Flag(false)
}

/// Bytes and GETs the store served for paths under `prefix`.
fn served(stats: &serde_json::Value, prefix: &str) -> (u64, u64) {
    let paths = stats["paths"].as_object().expect("paths");
    paths
        .iter()
        .filter(|(p, _)| p.starts_with(prefix))
        .fold((0, 0), |(b, r), (_, c)| (b + c["bytes"].as_u64().unwrap_or(0), r + c["requests"].as_u64().unwrap_or(0)))
}

#[test]
fn a_sharded_store_is_read_in_few_requests_each_byte_once_with_the_same_batches() {
    let fixtures = fixtures_dir();
    let root = fixtures.parent().expect("the fixtures dir has a parent");
    let name = fixtures.file_name().expect("a name").to_string_lossy().into_owned();
    let store = CloudStore::start(BIN, root, &[("ttfb_ms", "2")]);
    let url = format!("{}/{name}/v3_sharded", store.base);
    let shards: u64 = ["0", "1"]
        .iter()
        .map(|s| std::fs::metadata(fixtures.join(format!("v3_sharded/t2m/c/{s}/0/0"))).expect("a shard").len())
        .sum();
    let local = digest(
        &pass(&format!("file://{}", fixtures.join("v3_sharded").display()), options(ReadPolicySpec::default())).0,
    );
    let shard_prefix = format!("/{name}/v3_sharded/t2m/c/");
    let mut requests = Vec::new();
    for (what, policy) in [
        // Read-ahead room for the whole store (the automatic quarter of this tiny store's
        // residency floor holds a few inner chunks only). No hedging: a read the loaded machine
        // slows past the hedge's threshold would get a second request, and these counts are
        // exact (hedging has its own test below).
        (
            "coalesced",
            ReadPolicySpec {
                coalesce_gap_bytes: 0,
                read_ahead_bytes: Some(1 << 20),
                hedge: no_hedge(),
                ..ReadPolicySpec::default()
            },
        ),
        (
            "alone",
            ReadPolicySpec {
                coalesce_max_bytes: 0,
                read_ahead_bytes: Some(0),
                hedge: no_hedge(),
                ..ReadPolicySpec::default()
            },
        ),
    ] {
        store.reset();
        let (batches, stats) = pass(&url, options(policy));
        assert_eq!(digest(&batches), local, "{what}: batches differ from file://");
        let (bytes, gets) = served(&store.stats(), &shard_prefix);
        assert_eq!(gets, stats.storage_reads + stats.index_reads, "{what}: the pass counts what the store served");
        assert_eq!(stats.tiles_read, 40, "{what}: 2 shards x 20 inner chunks");
        if what == "coalesced" {
            assert_eq!(bytes, shards, "each byte of each shard read once: {}", stats.summary());
            assert_eq!(stats.gap_bytes, 0);
        }
        requests.push(gets);
    }
    assert_eq!(requests[1], 42, "alone: one request per inner chunk, and the two indexes");
    assert!(requests[0] * 3 <= requests[1], "coalesced and read ahead: {requests:?}");
}

#[test]
fn the_same_batches_come_over_s3_from_the_cloud_store() {
    let fixtures = fixtures_dir();
    let root = fixtures.parent().expect("the fixtures dir has a parent");
    let bucket = fixtures.file_name().expect("a name").to_string_lossy().into_owned();
    let store = CloudStore::start(BIN, root, &[]);
    let local = digest(
        &pass(&format!("file://{}", fixtures.join("v3_sharded").display()), options(ReadPolicySpec::default())).0,
    );
    let ds = open(
        &format!("s3://{bucket}/v3_sharded"),
        OpenOptions::from_spec(DatasetSpec {
            // A loopback endpoint and no signing: no client ever looks for cloud credentials.
            storage_options: [
                ("aws_endpoint".into(), store.base.clone()),
                ("aws_allow_http".into(), "true".into()),
                ("aws_skip_signature".into(), "true".into()),
                ("aws_region".into(), "us-east-1".into()),
            ]
            .into(),
            ..options(ReadPolicySpec::default())
        }),
    )
    .expect("open over S3");
    let batches: Vec<Batch> = ds.train().unwrap().collect::<Result<_, _>>().expect("a pass over S3");
    assert_eq!(digest(&batches), local);
    assert!(store.stats()["gets"].as_u64().unwrap_or(0) > 0, "read through the store");
}

#[test]
fn a_read_the_store_never_answers_is_hedged_and_the_epoch_does_not_wait_for_it() {
    let fixtures = fixtures_dir();
    let root = fixtures.parent().expect("the fixtures dir has a parent");
    let name = fixtures.file_name().expect("a name").to_string_lossy().into_owned();
    // The first GET of chunk 9 of v3_zstd's t2m (of 10, read in order) never answers; its
    // 9 predecessors give the hedge its latencies to compare with.
    let stalled = format!("/{name}/v3_zstd/t2m/c/9/");
    let store = CloudStore::start(BIN, root, &[("ttfb_ms", "2"), ("stall", &stalled)]);
    let local =
        digest(&pass(&format!("file://{}", fixtures.join("v3_zstd").display()), options(ReadPolicySpec::default())).0);
    // Any number of hedges may go out (a read slowed by the machine may be hedged too); the
    // stalled one can only finish through its hedge. Two reads in flight: it starts after
    // eight others answered, which is what the hedge needs to compare with.
    let hedging = ReadPolicySpec {
        hedge: HedgeSpec::Policy(HedgeFields { max_share: 1.0, ..HedgeFields::default() }),
        ..ReadPolicySpec::default()
    };
    let mut sequential = options(hedging);
    sequential.shuffle = false;
    sequential.max_inflight = 2;
    let (batches, stats) = pass(&format!("{}/{name}/v3_zstd", store.base), sequential.clone());
    let local_seq = digest(&pass(&format!("file://{}", fixtures.join("v3_zstd").display()), sequential).0);
    assert_ne!(local_seq, local, "the sequential order differs from the shuffled one");
    assert_eq!(digest(&batches), local_seq, "the hedged epoch has the same batches");
    assert!(stats.hedged_reads >= 1 && stats.hedge_wins >= 1, "{}", stats.summary());
    let served = store.stats();
    assert_eq!(served["stalled"].as_u64(), Some(1), "the first read of chunk 9 was held");
    // The store counts a path's GETs as it answers them: only the hedge was answered.
    assert_eq!(served["paths"][format!("{stalled}0/0")]["requests"].as_u64(), Some(1));
}
