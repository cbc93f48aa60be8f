//! `describe --sweep-block-chunks`: each point is what `describe --block-chunks N` reports
//! for that N (the same build, no reads), and a refused value says why.

mod common;

use common::{cli, demo_store};

fn describe(store: &str, extra: &[&str]) -> serde_json::Value {
    let args = ["describe", store, "--json", "--batch-size", "8", "--threads", "2"];
    let out = cli(&[&args[..], extra].concat());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn each_point_of_the_sweep_is_that_block_sizes_describe() {
    let store = demo_store("cli-sweep", "demo.zarr", 48);
    let swept = describe(&store, &["--sweep-block-chunks", "1,4,12"]);
    let curve = swept["quality_curve"].as_array().unwrap();
    assert_eq!(curve.len(), 3, "{curve:?}");
    for (point, n) in curve.iter().zip(["1", "4", "12"]) {
        let alone = describe(&store, &["--block-chunks", n]);
        assert_eq!(point["block_chunks"].to_string(), n);
        assert_eq!(point["block_chunks_widened"], alone["config"]["block_chunks"], "{point}");
        assert_eq!(point["quality"], alone["config"]["shuffle_quality"], "{point}");
        assert_eq!(point["floor_bytes"], alone["memory"]["floor_bytes"], "{point}");
        assert_eq!(point["estimated_peak_bytes"], alone["memory"]["estimated_peak_bytes"], "{point}");
    }
    // Without the flag the report is as before.
    assert!(describe(&store, &[]).get("quality_curve").is_none());

    let out = cli(&["describe", &store, "--sweep-block-chunks", "4,x"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--sweep-block-chunks") && err.contains("invalid digit"), "{err}");
}
