//! Kerchunk reference sets (core's `ReferenceSet::from_json`): any bytes as a set. An
//! accepted set must serve every key it lists without a panic, through reads, two-step reads
//! and `locate` (its ranges within 64 bits), over files that are one small object each; and
//! the arrays discovered in it must pass `check_array`. Everything else must be a clean error.
#![no_main]

use std::sync::Arc;

use insitubatch_core::internals::open_arrays;
use insitubatch_core::runtime::{ByteRange, Storage, StorageError};
use insitubatch_core::testing::MemoryStorage;
use insitubatch_core::{FileOpener, Location, ReferenceSet, ReferenceStorage};
use insitubatch_fuzz::{block_on, check_array, write_seeds_if_asked};
use libfuzzer_sys::fuzz_target;

/// Every file URL is the one object `f` of a memory store.
#[derive(Debug)]
struct OneFile(MemoryStorage);

impl FileOpener for OneFile {
    fn open(&self, url: &str) -> Result<(Arc<dyn Storage>, String), StorageError> {
        if url.starts_with("bad:") {
            return Err(StorageError::permanent("no store for this URL"));
        }
        Ok((Arc::new(self.0.clone()), "f".to_string()))
    }
}

fn seeds() -> Vec<Vec<u8>> {
    let zarray = r#"{"shape":[4,3],"chunks":[2,3],"dtype":"<f4","fill_value":"NaN","order":"C","filters":[{"id":"shuffle","elementsize":4},{"id":"zlib","level":4}],"compressor":null,"zarr_format":2}"#;
    [
        serde_json::json!({".zgroup": "{\"zarr_format\": 2}", "t/.zarray": zarray, "t/0.0": ["u", 0, 24], "t/1.0": "base64:AAAA"}),
        serde_json::json!({"version": 1, "templates": {"u": "s3://b/f.nc"}, "refs": {
            ".zgroup": "{\"zarr_format\": 2}", "t/.zarray": zarray, "t/0.0": ["{{u}}", 10, 20], "t/1.0": ["{{u}}"]}}),
        serde_json::json!({"version": 1, "refs": {".zgroup": "{\"zarr_format\": 2}", "t/.zarray": zarray}, "gen": [{
            "key": "t/{{i}}.0", "url": "u{{i}}", "offset": "{{ i * 24 }}", "length": "24", "dimensions": {"i": {"stop": 2}}}]}),
    ]
    .iter()
    .map(|s| serde_json::to_vec(s).expect("json"))
    .collect()
}

fuzz_target!(init: write_seeds_if_asked(seeds), |data: &[u8]| {
    let Ok(set) = ReferenceSet::from_json(data, "fuzz.json") else { return };
    let files = MemoryStorage::new();
    files.insert("f", (0..=255u8).cycle().take(4096).collect::<Vec<u8>>());
    let Ok(storage) = ReferenceStorage::open(set, Arc::new(OneFile(files)), "reference+fuzz.json") else { return };
    let keys = block_on(storage.list("")).expect("a set lists").expect("its keys");
    for key in keys.iter().take(64) {
        let _ = block_on(storage.get(key));
        let _ = block_on(storage.get_range(key, ByteRange::Bounded { start: 1, end: 7 }));
        if let Ok(Some(body)) = block_on(storage.start_read(key, Some(ByteRange::Suffix(3)))) {
            let _ = block_on(body);
        }
        if let Ok(Some(Location::In { object, range })) = block_on(storage.locate(key)) {
            if let Some(ByteRange::Bounded { start, end }) = range {
                assert!(start <= end, "a located range runs backwards: {start}..{end}");
            }
            let _ = block_on(storage.read(&object, range));
            let _ = storage.key_url(&object);
        }
    }
    if let Ok(arrays) = block_on(open_arrays(&storage, None)) {
        arrays.iter().for_each(check_array);
    }
});
