//! End-to-end tests of the native crate on a short demo store written to a temp dir.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use insitubatch_native::{DatasetSpec, NativeError, OpenOptions, Split, demo, open};
use scratch::scratch_dir;

#[path = "common/scratch.rs"]
mod scratch;

/// Samples on the time axis of the test store (the real demo has 360).
const N_TIME: u64 = 48;

fn store() -> &'static Path {
    static STORE: OnceLock<PathBuf> = OnceLock::new();
    STORE.get_or_init(|| {
        let dir = scratch_dir("native-test").join("demo.zarr");
        demo::write_demo_store_sized(&dir, N_TIME).expect("write demo store")
    })
}

fn read_direct(path: &Path, var: &str) -> Vec<f32> {
    let fs = Arc::new(zarrs::filesystem::FilesystemStore::new(path).unwrap());
    let array = zarrs::array::Array::open(fs, &format!("/{var}")).unwrap();
    array.retrieve_array_subset::<Vec<f32>>(&array.subset_all()).unwrap()
}

#[test]
fn train_epoch_yields_every_sample_once_with_zarrs_values() {
    let path = store();
    let ds = open(path.to_str().unwrap(), OpenOptions::default()).unwrap();
    let labels: Vec<String> = ds.dataset().variables().iter().map(|v| v.label.clone()).collect();
    assert_eq!(labels, ["t2m", "u10"]);
    let expected_samples = ds.dataset().manifest().sample_indices(Split::Train);
    assert!(!expected_samples.is_empty());
    let direct: Vec<(String, Vec<f32>)> = labels.iter().map(|l| (l.clone(), read_direct(path, l))).collect();
    let row = (demo::DEMO_LAT * demo::DEMO_LON) as usize;
    let mut seen = Vec::new();
    for b in ds.train().unwrap() {
        let b = b.unwrap();
        for (label, truth) in &direct {
            let arr = &b.arrays[label];
            assert_eq!(arr.shape, vec![b.len(), demo::DEMO_LAT as usize, demo::DEMO_LON as usize]);
            let got = arr.as_slice::<f32>().unwrap();
            for (r, &t) in b.sample_indices.iter().enumerate() {
                let want = &truth[t as usize * row..(t as usize + 1) * row];
                assert!(got[r * row..(r + 1) * row] == *want, "{label} sample {t} differs from zarrs");
            }
        }
        seen.extend_from_slice(&b.sample_indices);
    }
    let in_draw_order = seen.clone();
    seen.sort_unstable();
    let mut want = expected_samples;
    want.sort_unstable();
    assert_eq!(seen, want, "every train sample exactly once");
    assert_ne!(in_draw_order, seen, "train is shuffled");
    let stats = ds.last_pass().expect("stats of the finished pass");
    assert_eq!(stats.samples, want.len() as u64);
}

#[test]
fn file_url_and_bare_path_open_the_same_store() {
    let path = store();
    let url = url::Url::from_directory_path(path).unwrap().to_string();
    assert!(url.starts_with("file://"));
    let a = open(&url, OpenOptions::default()).unwrap();
    let b = open(path.to_str().unwrap(), OpenOptions::default()).unwrap();
    let first = |ds: &insitubatch_native::NativeDataset| {
        let batch = ds.val().unwrap().next().unwrap().unwrap();
        (batch.sample_indices.clone(), batch.arrays["t2m"].data.to_vec())
    };
    assert_eq!(first(&a), first(&b));
    assert_eq!(a.dataset().manifest(), b.dataset().manifest());
}

#[test]
fn missing_store_names_the_url_last() {
    for url in ["/definitely/not/here.zarr", "file:///definitely/not/here.zarr"] {
        let err = open(url, OpenOptions::default()).unwrap_err();
        let msg = err.to_string();
        assert!(matches!(err, NativeError::Open { .. }), "{msg}");
        assert!(msg.ends_with(url), "message should end with the URL: {msg}");
    }
    let err = open(
        "s3://bucket/x.zarr",
        OpenOptions::from_spec(DatasetSpec {
            storage_options: [("nope".into(), "1".into())].into(),
            ..DatasetSpec::default()
        }),
    )
    .unwrap_err();
    assert!(err.to_string().ends_with("s3://bucket/x.zarr"), "{err}");
}

/// A storage built by the caller (the Python package's store objects) reads as its URL does;
/// storage options, which only configure a URL, are refused with the location last.
#[test]
fn a_storage_handed_over_reads_as_its_url() {
    use insitubatch_native::{BatchDigest, open_storage, open_storage_with};
    let path = store();
    let url = url::Url::from_directory_path(path).unwrap().to_string();
    let digest = |ds: &insitubatch_native::NativeDataset| {
        let mut d = BatchDigest::default();
        for b in ds.train().unwrap() {
            d.update(&b.unwrap());
        }
        d.finish()
    };
    let by_url = open(&url, OpenOptions::default()).unwrap();
    let storage = open_storage(&url, &[]).unwrap();
    let handed = open_storage_with(storage.clone(), "my-store", OpenOptions::default()).unwrap();
    assert_eq!(digest(&handed), digest(&by_url));
    assert_eq!(handed.url(), "my-store");
    let options = OpenOptions::from_spec(DatasetSpec {
        storage_options: [("aws_region".into(), "x".into())].into(),
        ..DatasetSpec::default()
    });
    let err = open_storage_with(storage, "my-store", options).unwrap_err();
    let NativeError::Core(core) = &err else { panic!("{err}") };
    assert_eq!(core.option_name(), Some("storage_options"), "{err}");
    assert!(err.to_string().ends_with("my-store"), "{err}");
}

#[test]
fn cli_describe_json_parses() {
    let path = store();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_insitubatch"))
        .args(["describe", path.to_str().unwrap(), "--json", "--batch-size", "16"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["config"]["batch_size"], 16);
    assert_eq!(v["variables"].as_array().unwrap().len(), 2);
    assert!(v["memory"]["estimated_peak_bytes"].as_u64().unwrap() > 0);
    // The figures the engine derives for the bindings are in the CLI's JSON too.
    assert_eq!(v["config"]["budget_bytes"], v["memory"]["automatic_budget_bytes"]);
    let t2m = &v["variables"][0];
    let chunks: Vec<serde_json::Value> =
        v["variables"].as_array().unwrap().iter().map(|x| serde_json::json!([x["label"], x["n_chunks"]])).collect();
    assert_eq!(v["config"]["variable_chunks"], serde_json::Value::from(chunks));
    assert_eq!((&t2m["output_shape"], &t2m["output_chunks"]), (&t2m["shape"], &t2m["chunks"]));
    let row: u64 = t2m["inner_shape"].as_array().unwrap().iter().map(|d| d.as_u64().unwrap()).product();
    assert_eq!(t2m["logical_chunk_bytes"], t2m["sample_chunk_size"].as_u64().unwrap() * row * 4);
    assert!(v["config"]["shuffle_quality"].as_f64().unwrap() > 0.0);

    let out = std::process::Command::new(env!("CARGO_BIN_EXE_insitubatch"))
        .args(["describe", "/no/such/store.zarr"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.starts_with("error: ") && err.trim_end().ends_with("/no/such/store.zarr"), "{err}");
}

/// Hostile metadata through the CLI (issue 16): each store is refused at open, the process
/// exits 1 with one `error:` line naming the field and ending with the metadata key, and
/// nothing panics or aborts on an allocation. A chunk whose stored size disagrees with the
/// geometry is a decode error naming the chunk key, not a short batch.
#[test]
fn cli_refuses_hostile_metadata_naming_the_array_and_the_field() {
    let root_dir = tempfile::tempdir().expect("a temp dir");
    let root = root_dir.path();
    let v3 = |shape: serde_json::Value, chunk: serde_json::Value, dtype: &str| {
        serde_json::json!({"zarr_format": 3, "node_type": "array", "shape": shape, "data_type": dtype,
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": chunk}},
            "chunk_key_encoding": {"name": "default"}, "fill_value": 0,
            "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}]})
    };
    let cases = [
        ("overflow", v3(serde_json::json!([1u64 << 40, 1u64 << 40]), serde_json::json!([1, 1]), "float32"), "shape"),
        ("negative", v3(serde_json::json!([8, 4]), serde_json::json!([-2, 4]), "float32"), "chunk_shape"),
        ("dtype", v3(serde_json::json!([8, 4]), serde_json::json!([2, 4]), "r8796093022208"), "data_type"),
        (
            "huge_chunk",
            v3(serde_json::json!([1 << 20, 1 << 20]), serde_json::json!([1 << 20, 1 << 20]), "float64"),
            "chunk",
        ),
        ("rank", v3(serde_json::json!([8, 4]), serde_json::json!([2]), "float32"), "rank"),
    ];
    let cli =
        |args: &[&str]| std::process::Command::new(env!("CARGO_BIN_EXE_insitubatch")).args(args).output().unwrap();
    for (name, meta, field) in cases {
        let dir = root.join(format!("{name}.zarr"));
        std::fs::create_dir_all(dir.join("a")).unwrap();
        std::fs::write(dir.join("a/zarr.json"), serde_json::to_vec(&meta).unwrap()).unwrap();
        let out = cli(&["describe", dir.to_str().unwrap(), "--var", "a"]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{name}: {err}");
        assert!(err.starts_with("error[metadata]: ") && err.contains(field), "{name}: must name `{field}`: {err}");
        assert!(err.trim_end().ends_with("a/zarr.json"), "{name}: must end with the metadata key: {err}");
    }
    // A stored chunk of 5 elements where the geometry says 8: an error naming the chunk.
    let dir = root.join("short.zarr");
    std::fs::create_dir_all(dir.join("a/c/1")).unwrap();
    std::fs::create_dir_all(dir.join("a/c/0")).unwrap();
    let meta = v3(serde_json::json!([4, 4]), serde_json::json!([2, 4]), "float32");
    std::fs::write(dir.join("a/zarr.json"), serde_json::to_vec(&meta).unwrap()).unwrap();
    std::fs::write(dir.join("a/c/0/0"), [0u8; 32]).unwrap();
    std::fs::write(dir.join("a/c/1/0"), [0u8; 20]).unwrap();
    let bench = ["bench", dir.to_str().unwrap(), "--var", "a", "--epochs", "1", "--batch-size", "2", "--json"];
    let out = cli(&bench);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("on_bad_chunk") && err.trim_end().ends_with("a/c/1/0"), "{err}");
    // `--on-bad-chunk nan` fills it and goes on, counting it; a word core does not know is
    // refused with core's message.
    let out = cli(&[&bench[..], &["--on-bad-chunk", "nan"]].concat());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!((&v["config"]["on_bad_chunk"], &v["epochs"][0]["pass"]["bad_chunks"]), (&"nan".into(), &1.into()));
    let pass = &v["epochs"][0]["pass"];
    let (d, t) = (&pass["depths"], &pass["times"]);
    let share = |n: &str| d[n].as_f64().unwrap() / d["queue_samples"].as_f64().unwrap();
    assert_eq!(
        (d["starved_frac"].as_f64(), d["fed_frac"].as_f64()),
        (Some(share("queue_empty")), Some(share("queue_full_enough")))
    );
    let stages = ["fetch_wait_s", "admission_parked_s", "decode_s", "assemble_s", "gather_s", "batch_transform_s"];
    assert_eq!(t["producer_s"].as_f64(), Some(stages.iter().map(|s| t[*s].as_f64().unwrap()).sum::<f64>()));
    assert!(pass["ttfb_s"].as_f64().is_some_and(|s| s > 0.0), "{pass}");
    // The epoch's own CPU, user and system apart, and their sum per decoded GB (#48).
    if cfg!(target_os = "linux") {
        let e = &v["epochs"][0];
        let (user, sys) = (e["cpu_user_s"].as_f64().unwrap(), e["cpu_sys_s"].as_f64().unwrap());
        assert!(user >= 0.0 && sys >= 0.0, "{e}");
        let gb = e["decoded_bytes"].as_f64().unwrap() / 1e9;
        assert_eq!(e["cpu_s_per_gb"].as_f64(), Some((user + sys) / gb), "{e}");
    }
    let out = cli(&[&bench[..], &["--on-bad-chunk", "skip"]].concat());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("\"raise\" or \"nan\", got \"skip\""), "{err}");
}

/// `bench --decode-limit --json` reports the decode alone's CPU beside its rate: what every
/// epoch's `cpu_s_per_gb` is compared with (bench/suites/local.py, #48).
#[test]
fn the_decode_limit_reports_the_decode_alones_cpu_per_gb() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_insitubatch"))
        .args(["bench", store().to_str().unwrap(), "--decode-limit", "--json", "--threads", "2"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let row: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let decoded = row["decoded_bytes"].as_f64().unwrap();
    assert!(decoded > 0.0 && row["decode_limit_mb_per_s"].as_f64().is_some_and(|m| m > 0.0), "{row}");
    if cfg!(target_os = "linux") {
        let (user, sys) = (row["decode_cpu_user_s"].as_f64().unwrap(), row["decode_cpu_sys_s"].as_f64().unwrap());
        assert!(user >= 0.0 && sys >= 0.0, "{row}");
        assert_eq!(row["decode_cpu_s_per_gb"].as_f64(), Some((user + sys) / (decoded / 1e9)), "{row}");
    }
}

/// A tokio application awaits batches: the same bytes as the blocking iterator, and
/// windows (labelled geometries) through `OpenOptions` alone.
#[test]
fn an_async_stream_and_a_windowed_view_through_open_options() {
    use futures::StreamExt;
    use insitubatch_native::{BatchDigest, Variable};
    let url = store().to_str().unwrap().to_string();
    let ds = open(&url, OpenOptions::default()).unwrap();
    let mut blocking = BatchDigest::default();
    ds.train().unwrap().for_each(|b| blocking.update(&b.unwrap()));
    let mut streamed = BatchDigest::default();
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    rt.block_on(ds.stream(Split::Train).unwrap().for_each(|b| {
        streamed.update(&b.unwrap());
        std::future::ready(())
    }));
    assert_eq!(streamed.finish(), blocking.finish());

    let t2m = ds.dataset().variables()[0].geometry.clone();
    let window = vec![
        Variable { label: "x".into(), geometry: t2m.clone() },
        Variable { label: "y".into(), geometry: t2m.shift(3) },
    ];
    let windowed = open(&url, OpenOptions { labelled: Some(window), ..OpenOptions::default() }).unwrap();
    for b in windowed.val().unwrap() {
        let b = b.unwrap();
        assert_eq!(b.offsets["y"] - b.offsets["x"], 3);
        let (x, y) = (b.arrays["x"].as_slice::<f32>().unwrap(), b.arrays["y"].as_slice::<f32>().unwrap());
        let row = (demo::DEMO_LAT * demo::DEMO_LON) as usize;
        let direct = read_direct(store(), "t2m");
        for (r, &t) in b.sample_indices.iter().enumerate() {
            let t = t as usize;
            assert!(x[r * row..(r + 1) * row] == direct[t * row..(t + 1) * row], "x at {t}");
            assert!(y[r * row..(r + 1) * row] == direct[(t + 3) * row..(t + 4) * row], "y at {t}+3");
        }
    }
}

/// A store of metadata only (describe reads no chunks): two arrays of 10^6 samples of 1024×1024
/// float32 whose sample-axis chunkings (1 and 3) differ, so read-once means holding about
/// the whole split (terabytes).
fn huge_two_chunkings_store(tmp: &tempfile::TempDir) -> PathBuf {
    let dir = tmp.path().join("huge.zarr");
    let array = |spc: u64| {
        serde_json::json!({
            "zarr_format": 3, "node_type": "array", "shape": [1_000_000, 1024, 1024], "data_type": "float32",
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [spc, 1024, 1024]}},
            "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
            "fill_value": 0.0, "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
        })
    };
    for (name, spc) in [("fine", 1), ("coarse", 3)] {
        std::fs::create_dir_all(dir.join(name)).unwrap();
        std::fs::write(dir.join(name).join("zarr.json"), array(spc).to_string()).unwrap();
    }
    std::fs::write(dir.join("zarr.json"), r#"{"zarr_format":3,"node_type":"group","attributes":{}}"#).unwrap();
    dir
}

fn cli_describe(store: &Path, extra: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_insitubatch"))
        .args(["describe", store.to_str().unwrap(), "--json", "--var", "fine", "--var", "coarse"])
        .args(extra)
        .output()
        .unwrap()
}

#[test]
fn the_automatic_budget_never_plans_past_the_machine() {
    // Removed when the test ends (the other stores here are shared by the whole process).
    let tmp = tempfile::tempdir().unwrap();
    let store = huge_two_chunkings_store(&tmp);
    let out = cli_describe(&store, &[]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let m = &v["memory"];
    let available = m["memory_available_bytes"].as_u64().expect("the native runtime knows its memory");
    let residency = m["residency_bytes"].as_u64().unwrap();
    assert!(m["budget_is_automatic"].as_bool().unwrap());
    assert!(m["read_once_bytes"].as_u64().unwrap() > available, "{m}");
    assert!(residency <= (available / 2).max(m["floor_bytes"].as_u64().unwrap()), "{m}");
    assert!(m["reread_bytes_max"].as_u64().unwrap() > 0, "{m}");
    let codes: Vec<&str> = v["notes"].as_array().unwrap().iter().map(|n| n["code"].as_str().unwrap()).collect();
    assert!(codes.contains(&"budget-below-read-once"), "{codes:?}");

    // An explicit budget the machine cannot hold is refused up front, with what would fit.
    let too_much = (available * 2).to_string();
    let out = cli_describe(&store, &["--cache-budget-bytes", &too_much]);
    assert_eq!(out.status.code(), Some(2), "a flag's value refused");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--cache-budget-bytes=") && err.contains("pass at most") && err.contains("available"),
        "{err}"
    );
}

/// `--rank`/`--world-size` on the CLI: each rank's `bench` epoch draws its share, the shares
/// have equal sizes, and their storage reads add up to one rank-less epoch's (read once).
#[test]
fn cli_ranks_share_an_epoch_and_read_it_once() {
    let path = store();
    let bench = |extra: &[&str]| -> serde_json::Value {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_insitubatch"))
            .args(["bench", path.to_str().unwrap(), "--json", "--epochs", "1", "--batch-size", "4"])
            .args(extra)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let whole = bench(&[]);
    let ranks: Vec<serde_json::Value> =
        (0..2).map(|r| bench(&["--rank", &r.to_string(), "--world-size", "2"])).collect();
    let row = |v: &serde_json::Value, k: &str| v["epochs"][0][k].as_u64().unwrap();
    assert_eq!(row(&ranks[0], "samples"), row(&ranks[1], "samples"));
    let dropped = row(&ranks[0], "dropped_samples");
    assert_eq!(row(&ranks[0], "samples") * 2 + dropped, row(&whole, "samples"));
    // u10 is chunked by 12 samples, t2m by 8: units of 3 chunks, one per rank, so no remainder,
    // and every stored chunk is read by exactly one rank.
    assert_eq!(dropped, 0);
    assert_eq!(row(&ranks[0], "storage_reads") + row(&ranks[1], "storage_reads"), row(&whole, "storage_reads"));
    assert_eq!(ranks[1]["config"]["rank"], 1);
}

/// `NativeDataset::resume` from a checkpoint taken by `BatchIter::checkpoint`: the rest of
/// the epoch, the same bytes.
#[test]
fn a_native_pass_resumes_from_its_checkpoint() {
    let opts = || OpenOptions::from_spec(DatasetSpec { batch_size: 5, world_size: 2, rank: 1, ..Default::default() });
    let ds = open(store().to_str().unwrap(), opts()).unwrap();
    ds.set_epoch(2);
    let whole: Vec<_> = ds.train().unwrap().map(|b| b.unwrap()).map(|b| (b.index, b.sample_indices)).collect();
    let mut it = ds.train().unwrap();
    let head: Vec<_> = it.by_ref().take(2).map(|b| b.unwrap()).map(|b| (b.index, b.sample_indices)).collect();
    let cp = it.checkpoint().unwrap();
    drop(it);
    assert_eq!(head[..], whole[..2]);
    let fresh = open(store().to_str().unwrap(), opts()).unwrap();
    let json = cp.to_json();
    let tail: Vec<_> = fresh
        .resume(&insitubatch_native::Checkpoint::from_json(&json).unwrap())
        .unwrap()
        .map(|b| b.unwrap())
        .map(|b| (b.index, b.sample_indices))
        .collect();
    assert_eq!(tail[..], whole[2..]);
}
