//! The disk tier's log (`insitu_cache.jsonl`): any bytes as the log's contents. Accepted
//! entries name bare files only (no path traversal); a bad log is a clean `Error::Cache`.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;

// The log module is included from the native crate by path rather than by depending on
// insitubatch-native: that would build its whole network stack (object_store with every
// cloud, reqwest, rustls, tokio) under the fuzzer's instrumentation, minutes of CI for one
// pure function. The file needs only core's `Error`, serde and serde_json.
#[allow(dead_code, reason = "only `parse` is fuzzed; the writer half of the module is unused here")]
#[path = "../../native/src/cache/log.rs"]
mod log;
// What log.rs's writer half creates files with (its `super::modes`).
#[allow(dead_code, reason = "only the modes the writer half names")]
#[path = "../../native/src/cache/modes.rs"]
mod modes;

fn seeds() -> Vec<Vec<u8>> {
    let header = "{\"format\":\"insitubatch-rs chunk cache\",\"version\":2}\n";
    let entry = "{\"array\":\"t2m\",\"chunk\":3,\"file\":\"t2m.0123456789abcdef.3.npy\",\"pipeline\":\"0123456789abcdef\",\"dtype\":\"float32\",\"shape\":[8,4,4]}\n";
    vec![
        format!("{header}{entry}{entry}").into_bytes(),
        format!("{header}{entry}{{\"array\":\"t2").into_bytes(),
        "{\"format\":\"insitubatch-rs chunk cache\",\"version\":0}\n{}\n".into(),
        header.into(),
    ]
}

fuzz_target!(init: insitubatch_fuzz::write_seeds_if_asked(seeds), |data: &[u8]| {
    let path = Path::new("/cache/insitu_cache.jsonl");
    match log::parse(data, path) {
        Ok(loaded) => {
            for e in &loaded.entries {
                assert!(log::is_bare_file_name(&e.file), "accepted {:?}", e.file);
            }
        }
        Err(insitubatch_core::Error::Cache { key, .. }) => assert_eq!(key, path.display().to_string()),
        Err(other) => panic!("not a cache error: {other:?}"),
    }
});
