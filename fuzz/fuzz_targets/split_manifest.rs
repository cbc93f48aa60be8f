//! Split manifest JSON (`SplitManifest::from_json`, also what Python's
//! `SplitManifest.from_json` calls): any text. An accepted manifest's chunk ids are in range,
//! and its queries (chunk lists, sample indices) answer without overflow.
#![no_main]

use insitubatch_core::{Split, SplitManifest, SplitOptions, split_by_chunk};
use libfuzzer_sys::fuzz_target;

fn seeds() -> Vec<Vec<u8>> {
    let g = insitubatch_core::ArrayGeometry::new("t2m", vec![77, 2], vec![8, 2], insitubatch_core::DType::Float32, 0)
        .expect("geometry");
    [true, false]
        .iter()
        .map(|&contiguous| {
            let m = split_by_chunk(&g, &SplitOptions { contiguous, seed: 5, ..Default::default() }).expect("split");
            m.to_json().into_bytes()
        })
        .collect()
}

fuzz_target!(init: insitubatch_fuzz::write_seeds_if_asked(seeds), |data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(m) = SplitManifest::from_json(text) else { return };
    for split in [Split::Train, Split::Val, Split::Test, Split::All] {
        let chunks = m.chunks_of(split);
        assert!(chunks.iter().all(|&c| c < m.n_chunks));
        // Sample indices are materialized: only for manifests small enough to hold.
        if m.n_samples <= 1 << 16 {
            let samples = m.sample_indices(split);
            assert!(samples.iter().all(|&s| s < m.n_samples));
        }
    }
    assert_eq!(SplitManifest::from_json(&m.to_json()).expect("round trip"), m);
});
