//! The CLI's `--concat URL`: stores read end to end along the sample axis (`describe` shows
//! the summed length, `bench` reads every sample of both), and stores that cannot be
//! concatenated refused, naming the array and the store.

mod common;

use common::{cli, demo_store};

#[test]
fn describe_and_bench_read_concatenated_stores_end_to_end() {
    let (a, b) = (demo_store("cli-concat", "a.zarr", 24), demo_store("cli-concat", "b.zarr", 24));
    let out = cli(&["describe", &a, "--concat", &b, "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let t2m = report["variables"].as_array().unwrap().iter().find(|v| v["path"] == "t2m").unwrap();
    assert_eq!(t2m["shape"][0], 48, "{t2m}");

    let args = ["bench", &a, "--concat", &b, "--fractions", "1,0,0", "--epochs", "1", "--json", "--threads", "1"];
    let out = cli(&args);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let row: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(row["epochs"][0]["samples"], 48);
}

#[test]
fn stores_of_other_lengths_concatenate_and_a_first_store_ending_inside_a_chunk_is_refused() {
    // The demo keeps its time coordinate in one chunk per store: a 24- and a 16-sample store
    // chunk it differently, so it is concatenated in memory; t2m (chunks of 8) and u10 (12)
    // end on chunk boundaries in the first store.
    let (a, short) = (demo_store("cli-concat", "a2.zarr", 24), demo_store("cli-concat", "short.zarr", 16));
    let out = cli(&["bench", &a, "--concat", &short, "--fractions", "1,0,0", "--epochs", "1", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let row: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(row["epochs"][0]["samples"], 40, "both stores, end to end");

    let odd = demo_store("cli-concat", "odd.zarr", 20);
    let out = cli(&["describe", &odd, "--concat", &short]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("\"t2m\"") && err.contains("straddle") && err.contains("odd.zarr"), "{err}");

    let out = cli(&["describe", &a, "--concat", &short, "--concat-dim", "valid_time"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("no array has a dimension named \"valid_time\""), "{err}");
}
