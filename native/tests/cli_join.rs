//! The CLI's `--join NAME=URL`: stores read as one by name (`describe` lists every store's
//! arrays as NAME/path, `bench` reads an epoch of them), and a join whose sample axes differ
//! refused, naming both arrays and every store.

mod common;

use common::{cli, demo_store};

#[test]
fn describe_and_bench_read_joined_stores_by_name() {
    let (a, b) = (demo_store("cli-join", "a.zarr", 24), demo_store("cli-join", "b.zarr", 24));
    let out = cli(&["describe", &format!("era5={a}"), "--join", &format!("again={b}"), "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut labels: Vec<&str> =
        report["variables"].as_array().unwrap().iter().map(|v| v["path"].as_str().unwrap()).collect();
    labels.sort_unstable();
    assert_eq!(labels, ["again/t2m", "again/u10", "era5/t2m", "era5/u10"]);

    let out = cli(&[
        "bench",
        &format!("era5={a}"),
        "--join",
        &format!("again={b}"),
        "--epochs",
        "1",
        "--batch-size",
        "8",
        "--threads",
        "1",
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn a_join_of_unequal_lengths_or_an_unnamed_store_is_refused_saying_what_to_do() {
    let (a, short) = (demo_store("cli-join", "a2.zarr", 24), demo_store("cli-join", "short.zarr", 16));
    let out = cli(&["describe", &format!("era5={a}"), "--join", &format!("short={short}")]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("share the same sample-axis length") && err.contains("short/t2m"), "{err}");
    assert!(err.contains("join(era5=") && err.contains("short="), "{err}");

    let out = cli(&["describe", &a, "--join", &format!("short={short}")]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("name the positional store too, as NAME=URL"), "{err}");
}
