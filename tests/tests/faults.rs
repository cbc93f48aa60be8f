//! Faults below the storage layer, from a real misbehaving HTTP server on loopback
//! (`tests/servers/faulty_http.py`): transient ones are retried and give the same batches as
//! file://, byte for byte; permanent ones raise naming the key, or fill and record under
//! `on_bad_chunk = "nan"`; a server that answers a range with the wrong bytes is an error,
//! never wrong data. The server counts each fault per path, so every read meets exactly the
//! failures the test asked for, and a stall lasts until the client gives up: no clocks.

use insitubatch_native::core::{Batch, HedgeSpec, OnBadChunk};
use insitubatch_native::{DatasetSpec, OpenOptions, ReadPolicySpec, VariablesSpec, open};
use insitubatch_tests::{digest, faulty_http_url, fixtures_dir};

/// Retries enough for every transient fault below, with a short backoff and a read timeout
/// short enough that a stalled read is abandoned quickly (its length decides no result). No
/// hedging: the server's faults count each path's GETs, and these tests are about retries.
fn policy() -> ReadPolicySpec {
    ReadPolicySpec {
        retries: 4,
        backoff_s: 0.001,
        request_timeout_s: 2.0,
        hedge: HedgeSpec::Flag(false),
        ..ReadPolicySpec::default()
    }
}

fn options(on_bad_chunk: OnBadChunk) -> OpenOptions {
    OpenOptions::from_spec(spec(on_bad_chunk))
}

fn spec(on_bad_chunk: OnBadChunk) -> DatasetSpec {
    DatasetSpec {
        variables: Some(VariablesSpec::Paths(vec!["t2m".into()])),
        fractions: (1.0, 0.0, 0.0),
        // object_store's own client gives up on a silent server after this long, too.
        storage_options: [("timeout".into(), "2s".into())].into(),
        batch_size: 7,
        block_chunks: 2,
        seed: 5,
        on_bad_chunk,
        read_policy: policy(),
        ..Default::default()
    }
}

fn epoch_with(url: &str, options: OpenOptions) -> Result<Vec<Batch>, String> {
    let ds = open(url, options).map_err(|e| e.to_string())?;
    ds.train().map_err(|e| e.to_string())?.collect::<Result<_, _>>().map_err(|e| e.to_string())
}

fn epoch(url: &str, on_bad_chunk: OnBadChunk) -> Result<Vec<Batch>, String> {
    epoch_with(url, options(on_bad_chunk))
}

/// The same epoch from the local files (which take no storage options).
fn clean(store: &str) -> String {
    let url = format!("file://{}", fixtures_dir().join(store).display());
    let local = DatasetSpec { storage_options: Default::default(), ..spec(OnBadChunk::Raise) };
    digest(&epoch_with(&url, OpenOptions::from_spec(local)).unwrap())
}

fn faulty(session: &str, fault: &str, store: &str) -> String {
    format!("{}/{session}/{fault}/{store}", faulty_http_url())
}

#[test]
fn transient_faults_are_retried_and_give_the_same_bytes() {
    // v3_zstd reads whole objects; v3_sharded reads ranges (a shard index, then tiles).
    for store in ["v3_zstd", "v3_sharded"] {
        let want = clean(store);
        for fault in ["503-2", "429-2", "reset-1", "cut-1", "stall-1"] {
            let url = faulty(&format!("transient-{store}"), fault, store);
            let got = epoch(&url, OnBadChunk::Raise).unwrap_or_else(|e| panic!("{fault} on {store}: {e}"));
            assert_eq!(digest(&got), want, "{fault} on {store}: different bytes");
        }
    }
}

#[test]
fn a_wrong_answer_to_a_range_request_is_an_error_never_wrong_data() {
    let want = clean("v3_sharded");
    for fault in ["full200-all-chunks", "badrange-all-chunks"] {
        let url = faulty("ranges", fault, "v3_sharded");
        match epoch(&url, OnBadChunk::Raise) {
            // A client may take the whole object and cut the range itself; then it must be right.
            Ok(batches) => assert_eq!(digest(&batches), want, "{fault}: wrong bytes accepted"),
            Err(e) => assert!(e.contains("v3_sharded/t2m"), "{fault}: the error names the key: {e}"),
        }
    }
}

#[test]
fn a_permanent_fault_raises_naming_the_key_or_fills_and_records() {
    let url = faulty("permanent", "403-all-chunks", "v3_zstd");
    let err = epoch(&url, OnBadChunk::Raise).unwrap_err();
    assert!(err.contains("/v3_zstd/t2m/c/"), "the error names the chunk's key last: {err}");

    let ds = open(&url, options(OnBadChunk::Nan)).unwrap();
    let batches: Vec<Batch> = ds.train().unwrap().collect::<Result<_, _>>().unwrap();
    let n: usize = batches.iter().map(Batch::len).sum();
    assert_eq!(n, 80, "every sample is still served once");
    for b in &batches {
        assert!(b.arrays["t2m"].as_slice::<f32>().unwrap().iter().all(|v| v.is_nan()), "filled with NaN");
    }
    let bad = ds.dataset().bad_chunks();
    assert_eq!(bad.len(), 10, "each of the 10 chunks recorded once: {bad:?}");
}
