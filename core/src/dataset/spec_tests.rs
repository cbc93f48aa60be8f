//! The spec's defaults, its reading from data (unknown keys, retired keys, bad values), each
//! rule of `resolve`, and the committed table of cases every surface walks.

use super::*;
use crate::ErrorKind;
#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test;

fn read(json: &str) -> Result<DatasetSpec> {
    DatasetSpec::from_deserializer(&mut serde_json::Deserializer::from_str(json))
}

fn refusal(json: &str) -> (String, String) {
    let e = read(json).and_then(|s| s.resolve().map(|_| s)).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidOption, "{e}");
    (e.option_name().unwrap_or_default().to_string(), e.to_string())
}

#[test]
fn the_defaults_are_written_once() {
    let r = DatasetSpec::default().resolve().unwrap();
    assert_eq!(r.dataset.knobs, Knobs::default());
    assert_eq!(r.dataset.read_policy, ReadPolicy::default());
    assert_eq!(DatasetOptions::default().knobs, Knobs::default());
    let split = SplitOptions::default();
    assert_eq!((r.split.fractions, r.split.contiguous, r.split.sample_range), (split.fractions, true, None));
    assert_eq!((r.concat_dim.as_str(), r.cache.is_none(), r.dataset.model_parallel.is_none()), ("time", true, true));
    // Written as it is read, and `{}` is the defaults.
    let written = serde_json::to_string(&DatasetSpec::default()).unwrap();
    assert_eq!(read(&written).unwrap(), DatasetSpec::default());
    assert_eq!(read("{}").unwrap(), DatasetSpec::default());
}

#[test]
fn the_field_names_are_the_keys_serde_writes() {
    let keys =
        |v: &serde_json::Value| v.as_object().unwrap().keys().cloned().collect::<std::collections::BTreeSet<_>>();
    let names = |n: &[&str]| n.iter().map(|s| (*s).to_string()).collect::<std::collections::BTreeSet<_>>();
    let spec = serde_json::to_value(DatasetSpec::default()).unwrap();
    assert_eq!(keys(&spec), names(DatasetSpec::field_names()));
    assert_eq!(keys(&spec["read_policy"]), names(serde_fields::<ReadPolicySpec>()));
    assert_eq!(keys(&serde_json::to_value(HedgeFields::default()).unwrap()), names(serde_fields::<HedgeFields>()));
    for (path, _) in DatasetSpec::nested_objects() {
        let top = path.split('.').next().unwrap();
        assert!(DatasetSpec::field_names().contains(&top), "{path}");
    }
}

#[test]
fn bad_data_names_its_option() {
    let e = read(r#"{"batch_sise": 7}"#).unwrap_err();
    assert_eq!(e.option_name(), Some("batch_sise"));
    let text = e.to_string();
    assert!(text.contains("unknown option \"batch_sise\"") && text.contains("batch_size, block_chunks"), "{text}");
    assert!(e.message_in(&crate::camel_case).contains("are batchSize, blockChunks"), "{e}");
    // A retired key names the one that replaced it, and its unit.
    let e = read(r#"{"read_policy": {"backoff_ms": 5}}"#).unwrap_err();
    assert_eq!(e.option_name(), Some("read_policy.backoff_ms"));
    assert!(e.message_in(&crate::camel_case).contains("readPolicy.backoffS, in seconds"), "{e}");
    let e = read(r#"{"read_policy": {"hedge": {"quantil": 0.5}}}"#).unwrap_err();
    assert_eq!(e.option_name(), Some("read_policy.hedge.quantil"));
    assert!(e.to_string().contains("read_policy.hedge.max_share"), "{e}");
    // A wrong value names its key once; serde's backticks around values are gone.
    let e = read(r#"{"batch_size": -3}"#).unwrap_err();
    assert_eq!(e.option_name(), Some("batch_size"));
    assert_eq!(e.to_string(), "batch_size: invalid value: integer -3, expected usize");
    // serde_json's position and serde_wasm_bindgen's "Error: " (a JS Error as text) are dropped.
    assert_eq!(without_position("Error: bad at line 1 column 17"), "bad");
    let e = read(r#"{"on_bad_chunk": "skip"}"#).unwrap_err();
    assert_eq!(e.to_string(), "on_bad_chunk must be \"raise\" or \"nan\", got \"skip\"");
    assert!(e.message_in(&crate::camel_case).starts_with("onBadChunk must be"), "{e}");
    let e = read(r#"{"sel": {"time": ["soon", "2000-01-02"]}}"#).unwrap_err();
    assert_eq!(e.option_name(), Some("sel"));
    assert!(e.to_string().contains("\"soon\" is neither a number nor a date"), "{e}");
    let e = read(r#"{"patch_mode": "tiles"}"#).unwrap_err();
    assert_eq!(e.message_in(&crate::camel_case), "patchMode must be 'grid' or 'random', got \"tiles\"");
    // Ordered forms keep the caller's order.
    let s =
        read(r#"{"patch": {"lon": 4, "lat": 3, "2": 5}, "variables": {"y": "t2m", "x": {"path": "u10"}}}"#).unwrap();
    let axes: Vec<String> = s.patch.unwrap().0.iter().map(|(a, _)| a.to_string()).collect();
    assert_eq!(axes, ["\"lon\"", "\"lat\"", "axis 2"]);
    let Some(VariablesSpec::Labelled(v)) = s.variables else { panic!() };
    assert_eq!((v[0].0.as_str(), v[1].1.path.as_str()), ("y", "u10"));
    // The CLI's text for a count per axis is read by the same reader, in the order typed.
    let s = read(r#"{"patch": "lon=4, 2=5"}"#).unwrap();
    assert_eq!(s.patch.unwrap().0.len(), 2);
    let e = read(r#"{"patch_stride": "lat"}"#).unwrap_err();
    assert_eq!(e.option_name(), Some("patch_stride"));
    assert!(e.message_in(&crate::camel_case).starts_with("patchStride: \"lat\" is not AXIS=SIZE"), "{e}");
}

#[test]
fn one_rule_for_the_mesh() {
    // Size 1 is no mesh, on every surface; an axis needs a size above 1, and such a size an axis.
    let r = read(r#"{"model_parallel": 1}"#).unwrap().resolve().unwrap();
    assert!(r.dataset.model_parallel.is_none());
    assert_eq!(refusal(r#"{"model_parallel_axis": "lat"}"#).0, "model_parallel_axis");
    assert_eq!(refusal(r#"{"model_parallel": 2, "world_size": 2}"#).0, "model_parallel_axis");
    assert_eq!(refusal(r#"{"model_parallel": 2, "world_size": 3, "model_parallel_axis": 1}"#).0, "model_parallel");
    let r = read(r#"{"model_parallel": 2, "world_size": 4, "model_parallel_axis": "lat"}"#).unwrap().resolve().unwrap();
    assert_eq!(r.dataset.model_parallel, Some(ModelParallel { size: 2, axis: PatchAxis::Name("lat".into()) }));
    assert_eq!(refusal(r#"{"world_size": 4, "node_ranks": 3}"#).0, "node_ranks");
}

#[test]
fn one_rule_for_the_cache_flags() {
    for flag in ["persist", "readonly_cache", "reset_stale_cache", "shared_cache"] {
        let (option, text) = refusal(&format!(r#"{{"{flag}": true}}"#));
        assert_eq!(option, flag);
        assert!(text.contains("requires cache_dir"), "{text}");
    }
    let (option, _) = refusal(r#"{"cache_dir": "c", "readonly_cache": true, "reset_stale_cache": true}"#);
    assert_eq!(option, "reset_stale_cache");
    assert_eq!(refusal(r#"{"cache_dir": "c", "shared_cache": true}"#).0, "shared_cache");
    let spill = read(r#"{"cache_dir": "c"}"#).unwrap().resolve().unwrap().cache.unwrap();
    assert!(spill.check_for(&TargetAbilities::NATIVE).is_ok());
    let e = spill.check_for(&TargetAbilities::WASM).unwrap_err();
    assert!(e.message_in(&crate::camel_case).contains("cacheDir in the wasm engine"), "{e}");
    let shared = read(r#"{"cache_dir": "c", "persist": true, "shared_cache": true}"#).unwrap().resolve().unwrap();
    let shared = shared.cache.unwrap();
    assert!(shared.check_for(&TargetAbilities::NATIVE).is_ok());
    assert_eq!(shared.check_for(&TargetAbilities::WASM).unwrap_err().option_name(), Some("shared_cache"));
}

#[test]
fn the_split_durations_and_counts() {
    let r = read(r#"{"seed": 3}"#).unwrap().resolve().unwrap();
    assert_eq!(r.split.seed, 3, "the split seed is the seed");
    let r = read(r#"{"seed": 3, "split_seed": 9, "shuffle_splits": true}"#).unwrap().resolve().unwrap();
    assert_eq!((r.split.seed, r.split.contiguous), (9, false));
    assert_eq!(refusal(r#"{"fractions": [0.8, 0.3, 0.1]}"#).0, "fractions");
    assert_eq!(refusal(r#"{"sample_range": [5, 5]}"#).0, "sample_range");
    assert_eq!(refusal(r#"{"read_policy": {"backoff_s": -1}}"#).0, "read_policy.backoff_s");
    assert_eq!(refusal(r#"{"read_policy": {"request_timeout_s": 0}}"#).0, "read_policy.request_timeout_s");
    let r = read(r#"{"read_policy": {"request_timeout_s": 2.5, "hedge": false}}"#).unwrap().resolve().unwrap();
    assert_eq!(r.dataset.read_policy.request_timeout, std::time::Duration::from_millis(2500));
    assert!(r.dataset.read_policy.hedge.is_none());
    assert_eq!(refusal(r#"{"read_policy": {"hedge": {"multiple": 0.5}}}"#).0, "read_policy.hedge.multiple");
    let r = read(r#"{"prefetch_depth": 0}"#).unwrap().resolve().unwrap();
    assert_eq!(r.dataset.knobs.prefetch_depth, 1, "clamped, as insitubatch 0.2.0 does");
    for (key, json) in [
        ("batch_size", r#"{"batch_size": 0}"#),
        ("threads", r#"{"threads": 0}"#),
        ("rank", r#"{"rank": 1}"#),
        ("patches_per_sample", r#"{"patch": {"lat": 2}, "patch_mode": "random", "patches_per_sample": 0}"#),
        ("sample_weights", r#"{"sample_weights": [1, -0.5]}"#),
        ("patch_stride", r#"{"patch_stride": {"lat": 2}}"#),
    ] {
        assert_eq!(refusal(json).0, key, "{json}");
    }
}

/// The table every surface walks (`tests/options/cases.json`): every field of the spec (and
/// of its nested objects) has a case, and what `resolve` refuses is refused there with the
/// kind and option the table says (refusals that need the store, such as a patch larger
/// than the field, come later, at open).
#[test]
fn every_field_has_a_case_in_the_table() {
    let table: serde_json::Value = serde_json::from_str(include_str!("../../../tests/options/cases.json")).unwrap();
    let base = table["base"].as_object().unwrap();
    let mut covered = std::collections::BTreeSet::new();
    for case in table["cases"].as_array().unwrap() {
        let name = case["name"].as_str().unwrap();
        let options = case["options"].as_object().unwrap();
        for (k, v) in options {
            covered.insert(k.clone());
            if k == "read_policy" {
                for (inner, w) in v.as_object().unwrap() {
                    covered.insert(format!("read_policy.{inner}"));
                    if let Some(h) = w.as_object().filter(|_| inner == "hedge") {
                        covered.extend(h.keys().map(|f| format!("read_policy.hedge.{f}")));
                    }
                }
            }
        }
        let mut merged = base.clone();
        merged.extend(options.clone());
        let resolved = read(&serde_json::Value::Object(merged).to_string()).and_then(|s| s.resolve());
        match (&case["expect"], resolved) {
            (serde_json::Value::String(_), Err(e)) => panic!("{name}: expected to be accepted, refused: {e}"),
            (serde_json::Value::Object(want), Err(e)) => {
                assert_eq!(want["kind"].as_str(), Some(e.kind().name()), "{name}: {e}");
                assert_eq!(want.get("option").and_then(|o| o.as_str()), e.option_name(), "{name}: {e}");
            }
            (_, Ok(_)) => {}
            (other, Err(e)) => panic!("{name}: an expectation neither a word nor an object: {other}: {e}"),
        }
    }
    let mut fields: Vec<String> = DatasetSpec::field_names().iter().map(|f| (*f).to_string()).collect();
    fields.extend(serde_fields::<ReadPolicySpec>().iter().map(|f| format!("read_policy.{f}")));
    fields.extend(serde_fields::<HedgeFields>().iter().map(|f| format!("read_policy.hedge.{f}")));
    let missing: Vec<&String> = fields.iter().filter(|f| !covered.contains(*f)).collect();
    assert!(missing.is_empty(), "spec fields without a case in tests/options/cases.json: {missing:?}");
}
