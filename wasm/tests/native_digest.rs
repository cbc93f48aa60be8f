//! The native half of the cross-target parity check: the SHA-256 digest of every batch of
//! one epoch (sample indices as LE u64, then each label and its bytes, in label order; the
//! same as `insitubatch_tests::digest`) for every zarr-python fixture, read natively from
//! file://, and of a few patched passes (their origins appended). `js/test/parity.test.js`
//! computes the same digests from wasm in Node over HTTP and compares. Writes JSON to
//! `$INSITUBATCH_NATIVE_DIGESTS` (`scripts/test-wasm.sh`).
#![cfg(not(target_arch = "wasm32"))]

use std::collections::BTreeMap;
use std::path::PathBuf;

use insitubatch_native::core::{AxisSizes, Batch, PatchAxis, PatchPlacement, Split};
use insitubatch_native::{DatasetSpec, OpenOptions, Variable, VariablesSpec, open};
use insitubatch_tests::{digest, skip};

/// The parameters both sides use; keep in sync with `js/test/parity.test.js`.
const SEED: u64 = 3;
const EPOCH: u64 = 2;
const BATCH: usize = 7;
const BLOCK_CHUNKS: usize = 2;
const SHIFT: i64 = 3;
const SPLIT_SEED: u64 = 5;

#[test]
fn native_digests_for_the_parity_check() {
    let Ok(dir) = std::env::var("INSITUBATCH_FIXTURES") else {
        skip("native_digests_for_the_parity_check", "INSITUBATCH_FIXTURES is not set (run scripts/test-wasm.sh)");
        return;
    };
    let dir = PathBuf::from(dir);
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("manifest.json")).expect("manifest.json")).unwrap();
    let mut out = BTreeMap::new();
    for store in manifest["stores"].as_array().unwrap() {
        let name = store["name"].as_str().unwrap();
        let path = store["path"].as_str().unwrap();
        let sample_axis = store["sample_axis"].as_u64().unwrap() as usize;
        // Sorted, as the JS side does: the first label is the split's reference variable.
        let mut vars: Vec<String> = store["arrays"]
            .as_object()
            .unwrap()
            .iter()
            .filter(|(_, a)| !a["is_coordinate"].as_bool().unwrap())
            .map(|(p, _)| p.clone())
            .collect();
        vars.sort();
        let ds = open(
            &format!("file://{}", dir.join(path).display()),
            OpenOptions::from_spec(DatasetSpec {
                variables: Some(VariablesSpec::Paths(vars)),
                sample_axis,
                fractions: (0.8, 0.1, 0.1),
                ..knobs()
            }),
        )
        .unwrap_or_else(|e| panic!("{name}: {e}"));
        ds.set_epoch(EPOCH);
        for split in [Split::Train, Split::All] {
            let batches: Vec<Batch> =
                ds.iter(split).unwrap().collect::<Result<_, _>>().unwrap_or_else(|e| panic!("{name}: {e}"));
            out.insert(format!("{name}/{}", split.name()), digest(&batches));
        }
        // The knobs JS passes through `open()`: a labelled window, shuffled splits with their
        // own seed, a sample range, a smaller first block. JS: the knobs case in
        // js/test/parity.test.js.
        let geometry = ds.dataset().variables()[0].geometry.clone();
        let n = geometry.n_samples();
        let knobs = open(
            &format!("file://{}", dir.join(path).display()),
            OpenOptions {
                labelled: Some(vec![
                    Variable { label: "x".into(), geometry: geometry.clone() },
                    Variable { label: "y".into(), geometry: geometry.shift(SHIFT) },
                ]),
                ..OpenOptions::from_spec(DatasetSpec {
                    shuffle_splits: true,
                    split_seed: Some(SPLIT_SEED),
                    sample_range: Some((1, n - 1)),
                    first_block_chunks: Some(1),
                    ..knobs()
                })
            },
        )
        .unwrap_or_else(|e| panic!("{name} (knobs): {e}"));
        knobs.set_epoch(EPOCH);
        let batches: Vec<Batch> =
            knobs.iter(Split::Train).unwrap().collect::<Result<_, _>>().unwrap_or_else(|e| panic!("{name}: {e}"));
        out.insert(format!("{name}/knobs/train"), digest(&batches));
    }
    patched_digests(&dir, &mut out);
    drawn_digests(&dir, &mut out);
    let json = serde_json::to_string_pretty(&out).unwrap();
    println!("{json}");
    if let Ok(p) = std::env::var("INSITUBATCH_NATIVE_DIGESTS") {
        std::fs::write(&p, json).unwrap_or_else(|e| panic!("cannot write {p}: {e}"));
    }
    assert!(out.len() >= 30, "expected every fixture store");
}

/// The knobs every case shares.
fn knobs() -> DatasetSpec {
    DatasetSpec { batch_size: BATCH, block_chunks: BLOCK_CHUNKS, seed: SEED, ..DatasetSpec::default() }
}

/// The patched cases (`patch/STORE/train`): a grid with a stride on named axes over two
/// variables tiled differently, and random patches on axis indices given out of order, on
/// ragged chunks. JS: `PATCH_CASES` in js/test/parity.test.js.
fn patched_digests(dir: &std::path::Path, out: &mut BTreeMap<String, String>) {
    let name = |n: &str| PatchAxis::Name(n.into());
    let cases = [
        (
            "v3_zstd",
            DatasetSpec {
                variables: Some(VariablesSpec::Paths(vec!["t2m".into(), "u10".into()])),
                patch: Some(AxisSizes(vec![(name("lat"), 3), (name("lon"), 3)])),
                patch_stride: Some(AxisSizes(vec![(name("lon"), 2)])),
                ..knobs()
            },
        ),
        (
            "v3_ragged",
            DatasetSpec {
                variables: Some(VariablesSpec::Paths(vec!["t2m".into()])),
                patch: Some(AxisSizes(vec![(PatchAxis::Axis(2), 5), (PatchAxis::Axis(1), 4)])),
                patch_mode: Some(PatchPlacement::Random),
                patches_per_sample: Some(3),
                ..knobs()
            },
        ),
    ];
    for (store, spec) in cases {
        let ds = open(&format!("file://{}", dir.join(store).display()), OpenOptions::from_spec(spec))
            .unwrap_or_else(|e| panic!("{store} (patch): {e}"));
        ds.set_epoch(EPOCH);
        let batches: Vec<Batch> =
            ds.iter(Split::Train).unwrap().collect::<Result<_, _>>().unwrap_or_else(|e| panic!("{store}: {e}"));
        out.insert(format!("patch/{store}/train"), patched_digest(&batches));
    }
}

/// The cases of masks, weights and the rank mesh (`draws/STORE/train`, `mesh/STORE/train`):
/// every fourth sample masked and weights of 0.5 to 2.5 (fractional draws per (seed,
/// epoch)); rank 1 of 2 in one group of 2 splitting rows along `lat`. JS: `DRAWN_CASES` in
/// js/test/parity.test.js.
fn drawn_digests(dir: &std::path::Path, out: &mut BTreeMap<String, String>) {
    let n = 80; // samples of v3_zstd
    let both = DatasetSpec { variables: Some(VariablesSpec::Paths(vec!["t2m".into(), "u10".into()])), ..knobs() };
    let draws = DatasetSpec {
        sample_mask: Some((0..n).map(|t| t % 4 != 1).collect()),
        sample_weights: Some((0..n).map(|t| 0.5 + f64::from(t % 5) * 0.5).collect()),
        ..both.clone()
    };
    let mesh = DatasetSpec {
        rank: 1,
        world_size: 2,
        model_parallel: 2,
        model_parallel_axis: Some(PatchAxis::Name("lat".into())),
        ..both
    };
    for (key, spec) in [("draws/v3_zstd/train", draws), ("mesh/v3_zstd/train", mesh)] {
        let ds = open(&format!("file://{}", dir.join("v3_zstd").display()), OpenOptions::from_spec(spec))
            .unwrap_or_else(|e| panic!("{key}: {e}"));
        ds.set_epoch(EPOCH);
        let batches: Vec<Batch> =
            ds.iter(Split::Train).unwrap().collect::<Result<_, _>>().unwrap_or_else(|e| panic!("{key}: {e}"));
        out.insert(key.to_string(), digest(&batches));
    }
}

/// A patched pass's fingerprint: the batches' digest (which leaves patches out), then each
/// batch's patched axes and origins as text: `DIGEST dims:o,o,... dims:o,o,...`.
fn patched_digest(batches: &[Batch]) -> String {
    let mut s = digest(batches);
    for b in batches {
        let p = b.patches.as_ref().expect("a patched pass's batches carry their patches");
        let origins: Vec<String> = p.origins.iter().map(u64::to_string).collect();
        s.push_str(&format!(" {}:{}", p.dims.join(","), origins.join(",")));
    }
    s
}
