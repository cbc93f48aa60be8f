//! An Icechunk repository over NetCDF4 files (tests/fixtures/make_virtual.py
//! `build_icechunk`, written by the icechunk package): every batch equals xarray's reading of
//! the original files; the URL's fragment picks the branch, tag or snapshot; native chunks
//! are read from the repository's `chunks/` objects; a virtual chunk in a file that does not
//! exist fails naming the chunk and the file.

use insitubatch_native::core::{Batch, PassStats};
use insitubatch_native::{DatasetSpec, NativeError, OpenOptions, VariablesSpec, open, open_storage};
use insitubatch_tests::{FixtureStore, check_pass, http_url, s3_url, source_rows_in, virtual_dir, virtual_manifest};
use serde_json::Value;

/// The repository's entry in the virtual manifest, with its snapshots and bad branch.
fn repository(test: &str) -> Option<(FixtureStore, Value)> {
    let manifest = virtual_manifest(test)?;
    let entry = manifest.icechunk.expect("make_virtual.py writes an Icechunk repository");
    Some((serde_json::from_value(entry.clone()).expect("a store entry"), entry))
}

fn url(store: &FixtureStore, fragment: &str) -> String {
    format!("icechunk+{}#{fragment}", virtual_dir().join(&store.path).display())
}

fn pass(url: &str, variables: &[&str]) -> Result<(Vec<Batch>, PassStats), NativeError> {
    let spec = DatasetSpec {
        variables: Some(VariablesSpec::Paths(variables.iter().map(|v| (*v).to_string()).collect())),
        fractions: (1.0, 0.0, 0.0),
        batch_size: 7,
        block_chunks: 3,
        seed: 11,
        ..Default::default()
    };
    let ds = open(url, OpenOptions::from_spec(spec))?;
    let batches = ds.train()?.collect::<Result<Vec<_>, _>>()?;
    Ok((batches, ds.last_pass().expect("a pass ended")))
}

fn check_against_xarray(store: &FixtureStore, batches: &[Batch], variables: &[&str]) {
    let samples = store.arrays["t2m"].shape[0];
    for name in variables {
        let rows = source_rows_in(&virtual_dir(), &store.arrays[*name], 0);
        check_pass(batches, name, &rows, 0, &(0..samples).collect::<Vec<_>>());
    }
}

#[test]
fn an_icechunk_repository_gives_xarrays_values_for_the_original_files() {
    let Some((store, _)) = repository("an_icechunk_repository_gives_xarrays_values_for_the_original_files") else {
        return;
    };
    let variables = ["t2m", "tp", "msl", "sst"];
    let url = url(&store, "tag=v1");
    let (batches, stats) = pass(&url, &variables).unwrap_or_else(|e| panic!("{url}: {e}"));
    check_against_xarray(&store, &batches, &variables);
    assert!(stats.storage_reads < stats.tiles_read, "virtual chunks of one file coalesced: {}", stats.summary());
}

/// The repository VirtualiZarr writes from the files (its HDF5 parser, HDF5's filter order:
/// fletcher32 first, then shuffle over a length that is not a whole number of elements, which
/// numcodecs refuses or misreads): every batch is xarray's reading of the files.
#[test]
fn a_repository_virtualizarr_writes_gives_xarrays_values_for_the_original_files() {
    let test = "a_repository_virtualizarr_writes_gives_xarrays_values_for_the_original_files";
    let Some(manifest) = virtual_manifest(test) else { return };
    let entry = manifest.virtualizarr.expect("make_virtual.py writes VirtualiZarr's repository");
    let store: FixtureStore = serde_json::from_value(entry).expect("a store entry");
    let variables = ["t2m", "tp", "msl", "sst"];
    let url = url(&store, "branch=main");
    let (batches, stats) = pass(&url, &variables).unwrap_or_else(|e| panic!("{url}: {e}"));
    check_against_xarray(&store, &batches, &variables);
    assert!(stats.storage_reads < stats.tiles_read, "virtual chunks of one file coalesced: {}", stats.summary());
}

/// The time coordinate is a native chunk (the repository's `chunks/` object), lat a virtual
/// one: both read as the bytes xarray reads (no codecs on either).
#[test]
fn native_and_virtual_chunks_read_as_their_bytes() {
    let Some((store, _)) = repository("native_and_virtual_chunks_read_as_their_bytes") else { return };
    let storage = open_storage(&url(&store, "tag=v1"), &[]).expect("the repository opens");
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    for name in ["time", "lat"] {
        let want = std::fs::read(virtual_dir().join(&store.arrays[name].values_file)).unwrap();
        let got = rt.block_on(storage.get(&format!("{name}/c/0"))).unwrap().expect("the chunk");
        assert_eq!(got.as_ref(), want.as_slice(), "{name}");
    }
    assert!(rt.block_on(storage.get("time/c/1")).unwrap().is_none(), "a chunk outside the manifest is missing");
    let keys = rt.block_on(storage.list("")).unwrap().expect("listed");
    assert!(keys.contains(&"zarr.json".to_string()) && keys.contains(&"t2m/zarr.json".to_string()), "{keys:?}");
    assert!(storage.location().contains("#snapshot="), "{}", storage.location());
}

#[test]
fn the_fragment_picks_the_branch_tag_or_snapshot() {
    let Some((store, entry)) = repository("the_fragment_picks_the_branch_tag_or_snapshot") else { return };
    // main removed sst after v1.
    for fragment in ["branch=main".to_string(), format!("snapshot={}", entry["snapshots"]["main"].as_str().unwrap())] {
        let url = url(&store, &fragment);
        let e = pass(&url, &["t2m", "sst"]).err().unwrap_or_else(|| panic!("{url}: sst was removed on main"));
        assert!(e.to_string().contains("sst"), "{url}: {e}");
        let (batches, _) = pass(&url, &["t2m"]).unwrap_or_else(|e| panic!("{url}: {e}"));
        check_against_xarray(&store, &batches, &["t2m"]);
    }
    let v1 = url(&store, &format!("snapshot={}", entry["snapshots"]["v1"].as_str().unwrap()));
    let (batches, _) = pass(&v1, &["sst"]).unwrap_or_else(|e| panic!("{v1}: {e}"));
    check_against_xarray(&store, &batches, &["sst"]);
    let nope = url(&store, "branch=nope");
    let Err(e) = pass(&nope, &["t2m"]) else { panic!("{nope}: no such branch") };
    let e = e.to_string();
    assert!(e.contains("nope") && e.contains(&store.path), "{e}");
}

/// A virtual chunk in a file that does not exist, and one in a file under no virtual chunk
/// container the repository declares (never read: Icechunk's own rule), fail naming the
/// chunk and the file.
#[test]
fn a_virtual_chunk_in_a_missing_file_fails_naming_the_chunk_and_the_file() {
    let Some((store, entry)) = repository("a_virtual_chunk_in_a_missing_file_fails_naming_the_chunk_and_the_file")
    else {
        return;
    };
    for (case, why) in [("bad", "which does not exist"), ("outside", "under no virtual chunk container")] {
        let bad = &entry[case];
        let url = url(&store, &format!("branch={}", bad["branch"].as_str().unwrap()));
        let e = pass(&url, &["t2m"]).err().unwrap_or_else(|| panic!("{case}: read without an error")).to_string();
        for part in [bad["chunk"].as_str().unwrap(), bad["file"].as_str().unwrap(), why] {
            assert!(e.contains(part), "{case}: the error names {part}: {e}");
        }
        assert!(!e.contains("panicked"), "{e}");
    }
}

/// The repository in the loopback S3 bucket and on the loopback HTTP server (both serve the
/// fixtures folder; S3's endpoint and credentials come from the environment, as for any `s3://`
/// URL): icechunk reads its refs and manifests from there and the engine its native chunk (the
/// time coordinate) through its own store; its virtual chunks are files of this machine, which
/// a repository on a server is never given.
#[test]
fn a_repository_on_s3_or_http_reads_its_native_chunks_and_never_this_machines_files() {
    let Some((store, _)) =
        repository("a_repository_on_s3_or_http_reads_its_native_chunks_and_never_this_machines_files")
    else {
        return;
    };
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let want = std::fs::read(virtual_dir().join(&store.arrays["time"].values_file)).unwrap();
    for base in [s3_url(), http_url()] {
        let url = format!("icechunk+{base}/virtual/{}#tag=v1", store.path);
        let storage = open_storage(&url, &[]).unwrap_or_else(|e| panic!("{url}: {e}"));
        let got = rt.block_on(storage.get("time/c/0")).unwrap().expect("the native chunk");
        assert_eq!(got.as_ref(), want.as_slice(), "{url}");
        let Err(e) = pass(&url, &["t2m"]) else { panic!("{url}: a local file read for a repository on a server") };
        let e = e.to_string();
        assert!(e.contains("t2m/c/") && e.contains("refers to the local file file://"), "{url}: {e}");
    }
}
