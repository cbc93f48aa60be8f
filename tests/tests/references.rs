//! Kerchunk reference sets over NetCDF4 files (tests/fixtures/make_virtual.py): every batch
//! equals xarray's reading of the original files, from local files, HTTP and S3; over the
//! cloud-like store, each chunk's
//! bytes are fetched once per epoch and the ranges of one file go out coalesced; the sets
//! that are wrong on purpose fail naming the chunk and the file.

use std::collections::BTreeMap;

use insitubatch_native::core::{Batch, HedgeSpec, PassStats};
use insitubatch_native::{DatasetSpec, NativeError, OpenOptions, ReadPolicySpec, VariablesSpec, open};
use insitubatch_tests::{
    CloudStore, FixtureStore, check_pass, http_url, s3_url, source_rows_in, virtual_dir, virtual_manifest,
};

const BIN: &str = env!("CARGO_BIN_EXE_cloud-store");

/// The data variables of every set (the coordinates are read at open).
const VARIABLES: [&str; 4] = ["t2m", "tp", "msl", "sst"];

fn options(read_policy: ReadPolicySpec) -> OpenOptions {
    OpenOptions::from_spec(DatasetSpec {
        variables: Some(VariablesSpec::Paths(VARIABLES.iter().map(|v| (*v).to_string()).collect())),
        fractions: (1.0, 0.0, 0.0),
        batch_size: 7,
        block_chunks: 3,
        seed: 11,
        read_policy,
        ..Default::default()
    })
}

fn pass(url: &str, policy: ReadPolicySpec) -> Result<(Vec<Batch>, PassStats), NativeError> {
    let ds = open(url, options(policy))?;
    let batches = ds.train()?.collect::<Result<Vec<_>, _>>()?;
    Ok((batches, ds.last_pass().expect("a pass ended")))
}

/// Every variable of every batch against xarray's values, each sample once.
fn check_against_xarray(store: &FixtureStore, batches: &[Batch]) {
    let samples = store.arrays["t2m"].shape[0];
    for name in VARIABLES {
        let rows = source_rows_in(&virtual_dir(), &store.arrays[name], 0);
        check_pass(batches, name, &rows, 0, &(0..samples).collect::<Vec<_>>());
    }
}

#[test]
fn every_reference_set_gives_xarrays_values_for_the_original_files() {
    let Some(manifest) = virtual_manifest("every_reference_set_gives_xarrays_values_for_the_original_files") else {
        return;
    };
    assert!(manifest.stores.len() >= 4, "single, combined, relative and templated sets");
    for store in &manifest.stores {
        let url = format!("reference+{}", virtual_dir().join(&store.path).display());
        let (batches, stats) = pass(&url, ReadPolicySpec::default()).unwrap_or_else(|e| panic!("{url}: {e}"));
        check_against_xarray(store, &batches);
        assert!(stats.storage_reads < stats.tiles_read, "{url}: chunks of one file coalesced: {}", stats.summary());
    }
}

/// The set and its files on the loopback HTTP server and in the S3 bucket (moto, which holds
/// the fixtures folder; the endpoint and credentials come from the environment), the files by
/// URLs relative to the set: xarray's values over both.
#[test]
fn a_set_and_its_files_read_over_http_and_s3() {
    let Some(manifest) = virtual_manifest("a_set_and_its_files_read_over_http_and_s3") else { return };
    let store = manifest.stores.iter().find(|s| s.path == "relative.json").expect("the relative set");
    // Both serve the fixtures folder, whose `virtual/` holds the sets.
    for base in [http_url(), s3_url()] {
        let url = format!("reference+{base}/virtual/relative.json");
        let (batches, _) = pass(&url, ReadPolicySpec::default()).unwrap_or_else(|e| panic!("{url}: {e}"));
        check_against_xarray(store, &batches);
    }
}

/// Each chunk of `arrays` in a set: its file's name and its length.
fn chunk_lengths(set: &serde_json::Value, arrays: &[&str]) -> Vec<(String, u64)> {
    let refs = set["refs"].as_object().expect("a version 1 set");
    refs.iter()
        .filter(|(k, _)| arrays.iter().any(|a| k.starts_with(&format!("{a}/"))) && !k.contains("/."))
        .filter_map(|(_, v)| Some((v[0].as_str()?.to_string(), v[2].as_u64()?)))
        .collect()
}

/// How many chunks of the set share their sample chunk (their first index) with another one
/// of the same array.
fn tiles_beside(set: &serde_json::Value) -> u64 {
    let refs = set["refs"].as_object().expect("a version 1 set");
    let mut firsts: BTreeMap<(String, String), u64> = BTreeMap::new();
    for key in refs.keys().filter(|k| VARIABLES.iter().any(|a| k.starts_with(&format!("{a}/"))) && !k.contains("/.")) {
        let (array, index) = key.split_once('/').expect("array/index");
        let first = index.split('.').next().unwrap_or_default().to_string();
        *firsts.entry((array.to_string(), first)).or_default() += 1;
    }
    firsts.values().map(|n| n - 1).sum()
}

#[test]
fn over_the_cloud_store_each_chunk_is_fetched_once_and_ranges_of_a_file_coalesce() {
    let Some(manifest) =
        virtual_manifest("over_the_cloud_store_each_chunk_is_fetched_once_and_ranges_of_a_file_coalesce")
    else {
        return;
    };
    let store = CloudStore::start(BIN, &virtual_dir(), &[("ttfb_ms", "2")]);
    let url = format!("reference+{}/relative.json", store.base);
    let fixture = manifest.stores.iter().find(|s| s.path == "relative.json").expect("the relative set");
    let set: serde_json::Value =
        serde_json::from_slice(&std::fs::read(virtual_dir().join("relative.json")).unwrap()).unwrap();
    let chunks = chunk_lengths(&set, &VARIABLES);
    let mut want: BTreeMap<String, u64> = BTreeMap::new();
    for (file, len) in &chunks {
        *want.entry(format!("/{file}")).or_default() += len;
    }
    // Ranges that touch are read together and no gap between ranges is read; no hedging (a
    // read the loaded machine slowed would get a second request, and these counts are exact).
    let policy = ReadPolicySpec { coalesce_gap_bytes: 0, hedge: HedgeSpec::Flag(false), ..ReadPolicySpec::default() };
    let ds = open(&url, options(policy)).unwrap_or_else(|e| panic!("{url}: {e}"));
    store.reset();
    let batches = ds.train().unwrap().collect::<Result<Vec<_>, _>>().unwrap();
    let stats = ds.last_pass().expect("a pass ended");
    check_against_xarray(fixture, &batches);
    let served = store.stats();
    let paths = served["paths"].as_object().expect("paths");
    let mut got: BTreeMap<String, u64> = BTreeMap::new();
    let mut gets = 0;
    for (path, count) in paths {
        *got.entry(path.clone()).or_default() += count["bytes"].as_u64().unwrap();
        gets += count["requests"].as_u64().unwrap();
    }
    assert_eq!(got, want, "each chunk's bytes fetched once per epoch, nothing else: {}", stats.summary());
    // The tiles the files never held (tp's last time chunks) are fill values, read from nowhere.
    let tiles: u64 = VARIABLES
        .iter()
        .map(|v| {
            let a = &fixture.arrays[*v];
            a.shape.iter().zip(&a.chunks).map(|(n, c)| n.div_ceil(*c)).product::<u64>()
        })
        .sum();
    assert!(tiles > chunks.len() as u64, "the fixture has chunks no file holds");
    assert_eq!(stats.tiles_read, chunks.len() as u64, "every chunk a file holds read, and no other");
    assert_eq!(gets, stats.storage_reads, "the pass counts what the store served");
    // The tiles of one sample chunk (t2m's and sst's two per time step) lie side by side in
    // their file and are pending together: one request each, at most (neighbouring chunks
    // pending at once may share one too).
    let sample_chunks = chunks.len() as u64 - tiles_beside(&set);
    assert!(sample_chunks < chunks.len() as u64);
    assert!(gets <= sample_chunks, "{gets} requests for {} chunks in {sample_chunks} sample chunks", chunks.len());
    assert_eq!(stats.gap_bytes, 0);
}

#[test]
fn bad_reference_sets_fail_naming_the_chunk_and_the_file() {
    let Some(manifest) = virtual_manifest("bad_reference_sets_fail_naming_the_chunk_and_the_file") else { return };
    let bad = manifest.bad.as_object().expect("bad sets");
    for name in ["past_end", "missing_file", "malformed", "corrupt_checksum"] {
        let case = &bad[name];
        let url = format!("reference+{}", virtual_dir().join(case["path"].as_str().unwrap()).display());
        let e = match pass(&url, ReadPolicySpec::default()) {
            Ok(_) => panic!("{name} ({}): read without an error", case["what"]),
            Err(e) => e.to_string(),
        };
        let chunk = case["chunk"].as_str().unwrap_or("chunk \"");
        assert!(e.contains(chunk), "{name}: the error names the chunk ({chunk}): {e}");
        if let Some(file) = case["file"].as_str() {
            assert!(e.contains(file), "{name}: the error names the file {file}: {e}");
        }
        assert!(!e.contains("panicked"), "{name}: {e}");
    }
}
