//! The CLI's `--sel DIM=LO,HI`: the samples whose (CF-decoded) sample-axis coordinate lies in
//! the range, inclusive, and a bound that is neither a date nor a number refused, saying how
//! to write one.

use std::process::Command;

use insitubatch_native::demo;

fn cli(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_insitubatch")).args(args).env("RUST_LOG", "warn").output().expect("start")
}

#[test]
fn sel_reads_the_samples_of_a_date_range_and_refuses_a_bad_bound() {
    let dir = std::env::temp_dir().join(format!("insitubatch-cli-sel-{}", std::process::id()));
    // 24 daily samples from 2000-01-01 ("hours since 2000-01-01", steps of 24).
    let store = demo::write_demo_store_sized(&dir.join("demo.zarr"), 24).expect("write demo store");
    let store = store.display().to_string();
    let args = ["bench", &store, "--fractions", "1,0,0", "--epochs", "1", "--json", "--batch-size", "4"];
    let out = cli(&[&args[..], &["--threads", "1", "--sel", "time=2000-01-03,2000-01-10"]].concat());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let row: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(row["epochs"][0]["samples"], 8, "2000-01-03 .. 2000-01-10 is samples 2 to 9");

    let out = cli(&[&args[..], &["--sel", "time=soon,2000-01-10"]].concat());
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("\"soon\" is neither a number nor a date") && err.contains("YYYY-MM-DD"), "{err}");
    let _ = std::fs::remove_dir_all(dir);
}
