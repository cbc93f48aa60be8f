//! The CLI's `--sel DIM=LO,HI`: the samples whose (CF-decoded) sample-axis coordinate lies in
//! the range, inclusive, a region on an inner dimension beside it, and a bound that is neither
//! a date nor a number refused, saying how to write one.

mod common;

use common::{cli, demo_store};

#[test]
fn sel_reads_the_samples_of_a_date_range_and_refuses_a_bad_bound() {
    // 24 daily samples from 2000-01-01 ("hours since 2000-01-01", steps of 24).
    let store = demo_store("cli-sel", "demo.zarr", 24);
    let args = ["bench", &store, "--fractions", "1,0,0", "--epochs", "1", "--json", "--batch-size", "4"];
    let out = cli(&[&args[..], &["--threads", "1", "--sel", "time=2000-01-03,2000-01-10"]].concat());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let row: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(row["epochs"][0]["samples"], 8, "2000-01-03 .. 2000-01-10 is samples 2 to 9");

    let out = cli(&[&args[..], &["--sel", "time=soon,2000-01-10"]].concat());
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("\"soon\" is neither a number nor a date") && err.contains("YYYY-MM-DD"), "{err}");
}

#[test]
fn sel_on_an_inner_dimension_cuts_every_row_to_its_region() {
    let store = demo_store("cli-sel-region", "demo.zarr", 24);
    let args = [
        "describe",
        &store,
        "--fractions",
        "1,0,0",
        "--json",
        "--sel",
        "lat=30,60",
        "--sel",
        "time=2000-01-03,2000-01-10",
    ];
    let out = cli(&args);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let notes = report["notes"].as_array().unwrap();
    let region = notes.iter().find(|n| n["code"] == "region").unwrap_or_else(|| panic!("{notes:?}"));
    let text = region["message"].as_str().unwrap();
    assert!(text.contains("lat positions") && text.contains("of 91"), "{text}");

    // A list of labels: lat 0 and 90 are positions 45 and 0 of 90 .. -90 by 2.
    let out = cli(&["describe", &store, "--fractions", "1,0,0", "--json", "--sel", "lat=[0,90]"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let said =
        report["notes"].as_array().unwrap().iter().any(|n| n["message"].as_str().unwrap().contains("[45, 0] of 91"));
    assert!(said, "{report}");
}
