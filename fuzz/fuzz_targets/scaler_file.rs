//! StandardScaler files (`native/src/scaler_file.rs` `parse`: what Python's
//! `StandardScaler.load` and the CLI's `--scaler` read): any bytes, as JSON (ours) or as an
//! npz (insitubatch 0.2.0's: a zip of NPY entries, whose headers are parsed by hand). A file
//! either is refused with a clean error or reads back to a scaler whose JSON round-trips
//! exactly.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;

// Included by path, as the cache log's target includes log.rs (the native crate's network
// stack stays out of the fuzz build): it needs core's scaler, zip, half, serde_json, thiserror.
#[allow(dead_code, reason = "only `parse` and `to_json` are fuzzed")]
#[path = "../../native/src/scaler_file.rs"]
mod scaler_file;

fn seeds() -> Vec<Vec<u8>> {
    use insitubatch_core::scaler::{ArrayStats, StandardScaler, Stat, StatDType};
    let stat = |values: Vec<f64>| Stat::new(StatDType::Float32, vec![1, values.len()], values).expect("a stat");
    let pair = ArrayStats::new(stat(vec![280.5, 281.0]), stat(vec![12.5, 13.0])).expect("a pair");
    let scaler = StandardScaler::new([("t2m".to_string(), pair)].into(), 1e-8).expect("a scaler");
    let mut out = vec![scaler_file::to_json(&scaler).into_bytes()];
    let npz = std::env::temp_dir().join(format!("ib-fuzz-scaler-{}.npz", std::process::id()));
    scaler_file::save(&scaler, &npz).expect("write the npz seed");
    out.push(std::fs::read(&npz).expect("read the npz seed"));
    let _ = std::fs::remove_file(&npz);
    out
}

fuzz_target!(init: insitubatch_fuzz::write_seeds_if_asked(seeds), |data: &[u8]| {
    let path = Path::new("/scalers/t2m.json");
    match scaler_file::parse(data, path) {
        Ok(scaler) => {
            let json = scaler_file::to_json(&scaler);
            let again = scaler_file::parse(json.as_bytes(), path).expect("its own JSON reads back");
            assert_eq!(scaler_file::to_json(&again), json, "the JSON does not round-trip");
        }
        Err(scaler_file::ScalerFileError::Invalid { path: named, .. }) => assert_eq!(named, path.display().to_string()),
        Err(other) => panic!("not an Invalid error: {other}"),
    }
});
