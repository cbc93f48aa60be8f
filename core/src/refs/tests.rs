use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde_json::json;

use super::*;
use crate::conformance::{Expectations, check_storage, fixture};
use crate::dataset::{Dataset, DatasetOptions, Variable};
use crate::runtime::{InlinePool, Runtime, StorageErrorKind};
use crate::shuffle::Split;
use crate::split::{SplitOptions, split_by_chunk};
use crate::testing::{MemoryFiles, MemoryStorage, SimExecutor, write_f32_array};
use crate::{ConcatStorage, Error, JoinedStorage, Knobs};

#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test;

const LIMIT: Duration = Duration::from_secs(3600);

fn parse(doc: &serde_json::Value) -> ReferenceSet {
    ReferenceSet::from_json(doc.to_string().as_bytes(), "refs.json").unwrap()
}

fn parse_err(doc: &str) -> String {
    ReferenceSet::from_json(doc.as_bytes(), "refs.json").unwrap_err().to_string()
}

fn file(url: &str, range: Option<(u64, u64)>) -> Option<Reference> {
    Some(Reference::File { url: Arc::from(url), range })
}

fn run<T: 'static>(f: impl Future<Output = T> + 'static) -> T {
    SimExecutor::new().run(f, LIMIT).unwrap()
}

#[test]
fn version_0_and_1_values_parse_as_fsspec_reads_them() {
    let v0 = parse(&json!({
        ".zgroup": "{\"zarr_format\": 2}",
        "a/.zarray": {"zarr_format": 2},
        "a/0": ["s3://b/f.nc", 10, 20],
        "a/1": ["s3://b/f.nc"],
        "a/2": "base64:AAEC",
    }));
    assert_eq!(v0.get(".zgroup"), Some(Reference::Inline(Bytes::from_static(b"{\"zarr_format\": 2}"))));
    assert_eq!(v0.get("a/.zarray"), Some(Reference::Inline(Bytes::from_static(b"{\"zarr_format\":2}"))));
    assert_eq!(v0.get("a/0"), file("s3://b/f.nc", Some((10, 20))));
    assert_eq!(v0.get("a/1"), file("s3://b/f.nc", None));
    assert_eq!(v0.get("a/2"), Some(Reference::Inline(Bytes::from_static(&[0, 1, 2]))));
    assert_eq!(v0.files().len(), 1, "one file, interned");
    let v1 = parse(&json!({
        "version": 1,
        "templates": {"u": "s3://bucket/era5", "v": "x"},
        "refs": {"a/0": ["{{u}}/2020.nc", 0, 5], "a/1": ["{{ u }}/{{v}}.nc", 5, 5], "b": "plain"},
    }));
    assert_eq!(v1.get("a/0"), file("s3://bucket/era5/2020.nc", Some((0, 5))));
    assert_eq!(v1.get("a/1"), file("s3://bucket/era5/x.nc", Some((5, 5))));
    assert_eq!(v1.get("b"), Some(Reference::Inline(Bytes::from_static(b"plain"))));
    assert_eq!(v1.len(), 3);
}

#[test]
fn gen_expands_the_product_of_its_dimensions_with_jinja_arithmetic() {
    let set = parse(&json!({
        "version": 1,
        "templates": {"u": "https://host/data"},
        "gen": [{
            "key": "t/{{i}}.{{j}}",
            "url": "{{u}}/f{{i}}.bin",
            "offset": "{{ (i * 3 + j) * 100 }}",
            "length": "100",
            "dimensions": {"i": {"stop": 2}, "j": [0, 1, 2]},
        }],
        "refs": {"t/1.2": "overridden by refs"},
    }));
    assert_eq!(set.len(), 6);
    assert_eq!(set.get("t/0.0"), file("https://host/data/f0.bin", Some((0, 100))));
    assert_eq!(set.get("t/0.2"), file("https://host/data/f0.bin", Some((200, 100))));
    assert_eq!(set.get("t/1.1"), file("https://host/data/f1.bin", Some((400, 100))));
    assert_eq!(set.get("t/1.2"), Some(Reference::Inline(Bytes::from_static(b"overridden by refs"))));
    let stepped = parse(&json!({"version": 1, "gen": [{"key": "k{{n}}", "url": "u{{n}}", "dimensions": {
        "n": {"start": 10, "stop": 0, "step": -4}}}]}));
    assert_eq!(stepped.len(), 3, "range(10, 0, -4) is 10, 6, 2");
    assert_eq!(stepped.get("k2"), file("u2", None));
    // An empty dimension generates nothing (the fuzzer's crash: it indexed an empty range).
    let empty =
        parse(&json!({"version": 1, "refs": {"a": "x"}, "gen": [{"key": "k{{i}}.{{j}}", "url": "u", "dimensions": {
        "i": {"stop": 0}, "j": [0, 1]}}]}));
    assert_eq!(empty.len(), 1, "only the one reference of `refs`");
}

#[test]
fn malformed_sets_are_refused_saying_what_and_where() {
    let cases = [
        ("not json", "not valid JSON"),
        ("[1, 2]", "a JSON object of references"),
        (r#"{"version": 2, "refs": {}}"#, "version 2 is not supported"),
        (r#"{"a/0": 5}"#, "reference \"a/0\" is 5"),
        (r#"{"a/0": ["u", 1]}"#, "[url] or [url, offset, length]"),
        (r#"{"a/0": ["u", -1, 2]}"#, "non-negative integers"),
        (r#"{"a/0": [3]}"#, "a file reference"),
        (r#"{"a/0": ["", 0, 1]}"#, "an empty URL"),
        (r#"{"a/0": ["u", 18446744073709551615, 2]}"#, "overflows 64 bits"),
        (r#"{"a/0": "base64:@@@"}"#, "not valid base64"),
        ("{\"\\u0001file:x\": \"v\"}", "control character"),
        (r#"{"version": 1, "refs": []}"#, "`refs` must be an object"),
        (r#"{"version": 1, "templates": 3}"#, "`templates` must be an object"),
        (r#"{"version": 1, "refs": {"a": ["{{ u ", 0, 1]}}"#, "cannot render the template"),
        (r#"{"version": 1, "gen": {}}"#, "`gen` must be a list"),
        (r#"{"version": 1, "gen": [{"key": "k", "url": "u", "dimensions": {}, "offset": "1"}]}"#, "give both"),
        (r#"{"version": 1, "gen": [{"key": "k", "url": "u"}]}"#, "needs `dimensions`"),
        (
            r#"{"version": 1, "gen": [{"key": "k", "url": "u", "dimensions": {"i": {"stop": 1, "step": 0}}}]}"#,
            "step of 0",
        ),
        (
            r#"{"version": 1, "gen": [{"key": "k{{i}}{{j}}", "url": "u", "dimensions": {"i": {"stop": 100000}, "j": {"stop": 100000}}}]}"#,
            "Parquet references",
        ),
        (
            r#"{"version": 1, "gen": [{"key": "k", "url": "u", "offset": "{{ i - 5 }}", "length": "1", "dimensions": {"i": [1]}}]}"#,
            "not a non-negative integer",
        ),
    ];
    for (doc, want) in cases {
        let e = parse_err(doc);
        assert!(e.contains(want), "{doc}: {e}");
        assert!(e.ends_with(": refs.json"), "the set's URL last: {e}");
    }
}

#[test]
fn a_hostile_template_runs_out_of_fuel_instead_of_running_long() {
    let doc = r#"{"version": 1, "gen": [{"key": "k", "url": "{% for a in [1,2,3,4,5,6,7,8,9,10] %}{% for b in [1,2,3,4,5,6,7,8,9,10] %}{% for c in [1,2,3,4,5,6,7,8,9,10] %}{% for d in [1,2,3,4,5,6,7,8,9,10] %}x{% endfor %}{% endfor %}{% endfor %}{% endfor %}", "dimensions": {"i": [1]}}]}"#;
    let e = parse_err(doc);
    assert!(e.contains("cannot render the template"), "{e}");
}

/// The conformance fixture as a reference set: the text objects inline, the others ranges of
/// one file (`blob`, with a gap between them), so both paths meet the storage contract.
fn conformance_storage(lazy: bool) -> ReferenceStorage {
    let files = MemoryStorage::new();
    let mut blob = Vec::new();
    let mut refs = serde_json::Map::new();
    for (key, bytes) in fixture() {
        if key == "bin" || key == "empty" || key == "arr/c/1/0" {
            blob.extend_from_slice(b"gap!");
            refs.insert(key.into(), json!(["file://host/blob", blob.len(), bytes.len()]));
            blob.extend_from_slice(&bytes);
        } else {
            refs.insert(key.into(), json!(std::str::from_utf8(&bytes).unwrap()));
        }
    }
    files.insert("blob", blob);
    let set = parse(&json!({"version": 1, "refs": refs}));
    let opener = Arc::new(MemoryFiles(files));
    if lazy {
        return ReferenceStorage::lazy(Arc::new(set), opener, "reference+memory://refs.json");
    }
    ReferenceStorage::open(set, opener, "reference+memory://refs.json").unwrap()
}

#[test]
fn a_reference_storage_meets_the_storage_contract() {
    for lazy in [false, true] {
        let report = run(async move { check_storage(&conformance_storage(lazy), &Expectations::listable()).await });
        report.assert_ok();
    }
}

/// A set over two files, one of them missing and the other shorter than its last reference.
fn broken() -> (ReferenceStorage, MemoryStorage) {
    let files = MemoryStorage::new();
    files.insert("a.nc", vec![7u8; 100]);
    let set = parse(&json!({
        "t/0": ["file://host/a.nc", 0, 40],
        "t/1": ["file://host/a.nc", 40, 40],
        "t/2": ["file://host/a.nc", 80, 40],
        "t/3": ["file://host/gone.nc", 0, 10],
    }));
    (ReferenceStorage::open(set, Arc::new(MemoryFiles(files.clone())), "reference+refs.json").unwrap(), files)
}

#[test]
fn a_range_past_the_end_of_its_file_names_the_chunk_and_the_file() {
    let (refs, _) = broken();
    let refs = Arc::new(refs);
    let r = Arc::clone(&refs);
    let (whole, coalesced, fine) = run(async move {
        let whole = r.get("t/2").await.unwrap_err();
        // What the engine reads: the three chunks' ranges in one request.
        let object = format!("{FILE_OBJECT}file://host/a.nc");
        let coalesced = r.get_range(&object, ByteRange::Bounded { start: 0, end: 120 }).await.unwrap_err();
        let fine = r.get("t/1").await.unwrap();
        (whole, coalesced, fine)
    });
    for e in [whole, coalesced] {
        assert_eq!(e.kind, StorageErrorKind::Permanent, "{e}");
        assert!(e.message.contains("chunk \"t/2\" is bytes 80..120 of the file file://host/a.nc"), "{e}");
        assert!(e.message.contains("ends before byte 120"), "{e}");
    }
    assert_eq!(fine.as_deref(), Some(&[7u8; 40][..]));
}

#[test]
fn a_missing_file_is_an_error_naming_the_chunk_never_a_missing_chunk() {
    let (refs, _) = broken();
    let refs = Arc::new(refs);
    let r = Arc::clone(&refs);
    let (missing, through_object, two_steps, absent) = run(async move {
        let object = format!("{FILE_OBJECT}file://host/gone.nc");
        (
            r.get("t/3").await.unwrap_err(),
            r.get_range(&object, ByteRange::Bounded { start: 0, end: 10 }).await.unwrap_err(),
            r.start_read(&object, Some(ByteRange::Bounded { start: 0, end: 10 })).await.err().unwrap(),
            r.get("t/9").await.unwrap(),
        )
    });
    for e in [missing, through_object, two_steps] {
        assert_eq!(e.kind, StorageErrorKind::Permanent);
        assert!(
            e.message.contains("chunk \"t/3\" refers to the file file://host/gone.nc, which does not exist"),
            "{e}"
        );
    }
    assert_eq!(absent, None, "a key the set lacks is a missing chunk (its fill value)");
    let set = parse(&json!({"t/0": ["elsewhere://x", 0, 10]}));
    let e = ReferenceStorage::open(set, Arc::new(MemoryFiles(MemoryStorage::new())), "r").unwrap_err();
    assert!(e.message.contains("cannot open the file elsewhere://x that the reference set names"), "{e}");
}

#[test]
fn a_chunk_locates_as_a_range_of_its_file_through_joins_and_concatenations() {
    let (refs, _) = broken();
    let refs: Arc<dyn Storage> = Arc::new(refs);
    let joined = JoinedStorage::new(vec![("era5".into(), Arc::clone(&refs))]).unwrap();
    let object = format!("{FILE_OBJECT}file://host/a.nc");
    let want = Some(Location::In { object: object.clone(), range: Some(ByteRange::Bounded { start: 40, end: 80 }) });
    let r = Arc::clone(&refs);
    let (own, missing, joined_at, joined_bytes) = run(async move {
        let own = r.locate("t/1").await.unwrap();
        let missing = r.locate("t/9").await.unwrap();
        let at = joined.locate("era5/t/1").await.unwrap();
        let Some(Location::In { object, range: Some(range) }) = at.clone() else { panic!("{at:?}") };
        let bytes = joined.get_range(&object, range).await.unwrap().unwrap();
        assert_eq!(joined.key_url(&object), "file://host/a.nc", "the file's URL names its object");
        (own, missing, at, bytes)
    });
    assert_eq!(own, want);
    assert_eq!(missing, Some(Location::Missing), "a chunk the set lacks: its fill value, no request");
    assert_eq!(joined_at, want.map(|l| l.map_object(|o| format!("era5/{o}"))));
    assert_eq!(joined_bytes.len(), 40);
    assert_eq!(refs.key_url(&object), "file://host/a.nc");
    assert_eq!(refs.key_url("t/1"), "reference+refs.json/t/1");
}

/// An array written by zarrs, then the same array as a reference set: its metadata inline and
/// every chunk a range of one file (`data.bin`, the chunks end to end with a few bytes between).
fn virtual_copy(original: &MemoryStorage, gap: usize) -> (ReferenceSet, MemoryStorage) {
    let files = MemoryStorage::new();
    let mut blob = Vec::new();
    let mut refs = serde_json::Map::new();
    for key in original.keys() {
        let bytes = run({
            let original = original.clone();
            let key = key.clone();
            async move { original.get(&key).await.unwrap().unwrap() }
        });
        if key.ends_with("zarr.json") {
            refs.insert(key, json!(String::from_utf8(bytes.to_vec()).unwrap()));
        } else {
            blob.extend(std::iter::repeat_n(0u8, gap));
            refs.insert(key, json!(["file://host/data.bin", blob.len(), bytes.len()]));
            blob.extend_from_slice(&bytes);
        }
    }
    files.insert("data.bin", blob);
    (parse(&json!({"version": 1, "refs": refs})), files)
}

fn epoch(storage: Arc<dyn Storage>, sim: &SimExecutor, knobs: Knobs) -> (Vec<crate::Batch>, crate::PassStats) {
    let runtime = Runtime::new(Arc::new(sim.clone()), Arc::new(InlinePool));
    let st = Arc::clone(&storage);
    let a = sim.run(async move { crate::zarr::open_array(st.as_ref(), "t2m").await }, LIMIT).unwrap().unwrap();
    let g = a.geometry(0).unwrap();
    let manifest = split_by_chunk(&g, &SplitOptions { fractions: (1.0, 0.0, 0.0), ..Default::default() }).unwrap();
    let ds = Dataset::builder(storage, runtime)
        .opened(vec![a])
        .variables(vec![Variable { label: "t2m".into(), geometry: g }])
        .manifest(manifest)
        .options(DatasetOptions { knobs, ..Default::default() })
        .build()
        .unwrap();
    let pass = ds.clone();
    let batches = sim
        .run(
            async move {
                let mut s = ds.iter(Split::Train)?;
                let mut out = Vec::new();
                while let Some(b) = s.next_batch().await {
                    out.push(b?);
                }
                Ok::<_, Error>(out)
            },
            LIMIT,
        )
        .unwrap()
        .unwrap();
    (batches, pass.last_pass().expect("a pass ended"))
}

#[test]
fn an_epoch_over_references_equals_the_original_and_reads_each_file_range_once_coalesced() {
    let sim = SimExecutor::new();
    let exec: Arc<dyn crate::Executor> = Arc::new(sim.clone());
    let original = MemoryStorage::new();
    write_f32_array(&original, "t2m", &[60, 5, 6], &[4, 5, 3], None, None, |i| i as f32);
    let (set, files) = virtual_copy(&original, 3);
    let files = files.with_latency(Arc::clone(&exec), Duration::from_millis(20));
    let chunks = 15 * 2;
    let refs: Arc<dyn Storage> =
        Arc::new(ReferenceStorage::open(set, Arc::new(MemoryFiles(files.clone())), "reference+mem").unwrap());
    let knobs = Knobs { batch_size: 7, block_chunks: 4, max_inflight: 4, seed: 3, ..Default::default() };
    let (want, _) = epoch(Arc::new(original.clone()), &sim, knobs);
    let (got, stats) = epoch(Arc::clone(&refs), &sim, knobs);
    assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(&want) {
        assert_eq!(g.sample_indices, w.sample_indices);
        assert_eq!(g.arrays["t2m"].as_slice::<f32>().unwrap(), w.arrays["t2m"].as_slice::<f32>().unwrap());
    }
    let requests = files.reads_of("data.bin");
    assert!(requests < chunks / 2, "{requests} requests for {chunks} chunks: ranges of one file are coalesced");
    assert_eq!(requests, stats.storage_reads, "the pass counts the file's requests");
    assert_eq!(stats.tiles_read, chunks);
    let stored: u64 =
        original.keys().iter().filter(|k| !k.ends_with("zarr.json")).map(|k| original.object_len(k)).sum();
    assert_eq!(
        files.bytes_read(),
        stored + stats.gap_bytes,
        "each chunk's range read once, plus the gaps its coalesced requests read between ranges"
    );
}

#[test]
fn reference_sets_concatenate_and_their_chunks_still_coalesce_per_file() {
    let sim = SimExecutor::new();
    let exec: Arc<dyn crate::Executor> = Arc::new(sim.clone());
    let part = |first: f32| {
        let original = MemoryStorage::new();
        write_f32_array(&original, "t2m", &[20, 4], &[5, 4], None, Some(&["time", "x"]), move |i| first + i as f32);
        let (set, files) = virtual_copy(&original, 0);
        let files = files.with_latency(Arc::clone(&exec), Duration::from_millis(20));
        let refs: Arc<dyn Storage> =
            Arc::new(ReferenceStorage::open(set, Arc::new(MemoryFiles(files.clone())), "reference+mem").unwrap());
        (refs, files)
    };
    let ((a, a_files), (b, b_files)) = (part(0.0), part(80.0));
    let concat: Arc<dyn Storage> =
        Arc::new(sim.run(async move { ConcatStorage::open(vec![a, b], "time", 0).await }, LIMIT).unwrap().unwrap());
    let knobs = Knobs { batch_size: 40, block_chunks: 8, max_inflight: 4, shuffle: false, ..Default::default() };
    let (batches, _) = epoch(concat, &sim, knobs);
    let values: Vec<f32> = batches.iter().flat_map(|b| b.arrays["t2m"].as_slice::<f32>().unwrap().to_vec()).collect();
    assert_eq!(values, (0..160).map(|i| i as f32).collect::<Vec<_>>(), "the two sets end to end, in order");
    for files in [a_files, b_files] {
        assert!(files.reads_of("data.bin") < 4, "{} requests for 4 chunks", files.reads_of("data.bin"));
    }
}

/// Fuzzing found it (`icechunk_repository`): a lazy index's reference near the top of the
/// offsets overflowed the file range; it is an error naming the range.
#[test]
fn a_range_past_two_to_the_64_is_an_error_not_an_overflow() {
    let e = file_range(Some((u64::MAX - 1, 10)), None).unwrap_err();
    assert!(e.message.contains("past the largest byte offset"), "{}", e.message);
    assert_eq!(e.kind, StorageErrorKind::Permanent);
    let inside = file_range(Some((5, 10)), Some(ByteRange::Bounded { start: 1, end: 3 })).unwrap();
    assert_eq!(inside, Some(ByteRange::Bounded { start: 6, end: 8 }));
}
