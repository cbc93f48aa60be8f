//! Icechunk repositories (core's `IcechunkIndex`): any bytes as one of a small repository's
//! binary files (the first byte picks its repo file, snapshot or manifest; the rest is its
//! body, uncompressed behind a valid header), the other files as Icechunk writes them. Opening
//! the repository and reading every key it lists and every chunk of its array must never
//! panic (a panic kills a wasm instance): a malformed file is a clean error.
#![no_main]

use std::sync::{Arc, OnceLock};

use insitubatch_core::icechunk_sample::{File, Repository, pack, repository};
use insitubatch_core::runtime::Storage;
use insitubatch_core::testing::{MemoryFiles, MemoryStorage};
use insitubatch_core::{FileOpener, IcechunkIndex, IcechunkVersion, ReferenceStorage};
use insitubatch_fuzz::{block_on, write_seeds_if_asked};
use libfuzzer_sys::fuzz_target;

/// The repository whose files an input replaces one of (written once).
fn sample() -> &'static Repository {
    static SAMPLE: OnceLock<Repository> = OnceLock::new();
    SAMPLE.get_or_init(|| repository(false))
}

const FILES: [File; 3] = [File::RepoInfo, File::Snapshot, File::Manifest];

/// Each file's own body, behind its selector byte.
fn seeds() -> Vec<Vec<u8>> {
    let bodies = &sample().bodies;
    bodies.iter().map(|(file, _, body)| [vec![FILES.iter().position(|f| f == file).unwrap_or(0) as u8], body.clone()].concat()).collect()
}

fuzz_target!(init: write_seeds_if_asked(seeds), |data: &[u8]| {
    let Some((&selector, body)) = data.split_first() else { return };
    let file = FILES[usize::from(selector) % FILES.len()];
    let store = MemoryStorage::new();
    for (key, bytes) in &sample().files {
        store.insert(key, bytes.clone());
    }
    let key = sample().bodies.iter().find(|(f, _, _)| *f == file).map(|(_, k, _)| k.clone()).expect("every file");
    store.insert(key, pack(file, body, false));
    let opener: Arc<dyn FileOpener> = Arc::new(MemoryFiles(store));
    let version = IcechunkVersion::Branch("main".into());
    let Ok(index) = block_on(IcechunkIndex::open("file://host/repo", &version, opener.as_ref(), Arc::clone(&opener)))
    else {
        return;
    };
    let storage = ReferenceStorage::lazy(Arc::new(index), Arc::clone(&opener), "icechunk+fuzz");
    let Ok(Some(keys)) = block_on(storage.list("")) else { return };
    for key in keys.iter().take(16) {
        let _ = block_on(storage.get(key));
        let node = key.trim_end_matches("zarr.json");
        for chunk in ["c/0", "c/1", "c/2", "c/3", "c/0/0", "c"] {
            let _ = block_on(storage.get(&format!("{node}{chunk}")));
        }
    }
    let _ = block_on(storage.get("a/c/1"));
});
