//! Every zarr-python fixture store read over file://: values equal the source, every sample
//! exactly once, shuffled and sequential, for v2/v3, zstd/blosc/gzip/zlib, sharded (partial
//! shard reads), ragged edges, sample_axis = 2, CF coordinates, mixed chunking, absent chunks.

use insitubatch_native::core::{Batch, Split};
use insitubatch_native::{DatasetSpec, OpenOptions, VariablesSpec, open};
use insitubatch_tests::{check_pass, fixtures_dir, manifest, source_rows};

fn run(
    url: &str,
    vars: Option<Vec<String>>,
    sample_axis: usize,
    split: Split,
    shuffle: bool,
) -> (insitubatch_native::NativeDataset, Vec<Batch>) {
    let ds = open(
        url,
        OpenOptions::from_spec(DatasetSpec {
            variables: vars.map(VariablesSpec::Paths),
            sample_axis,
            fractions: (1.0, 0.0, 0.0),
            batch_size: 5,
            block_chunks: 2,
            shuffle,
            max_inflight: 4,
            ..Default::default()
        }),
    )
    .unwrap_or_else(|e| panic!("open {url}: {e}"));
    let batches: Vec<Batch> =
        ds.iter(split).unwrap().collect::<Result<_, _>>().unwrap_or_else(|e| panic!("{url}: {e}"));
    (ds, batches)
}

#[test]
fn every_fixture_store_matches_its_source() {
    let m = manifest();
    let mut checked = 0;
    for store in &m.stores {
        let url = format!("file://{}", fixtures_dir().join(&store.path).display());
        for (path, a) in &store.arrays {
            if a.is_coordinate {
                continue;
            }
            let rows = source_rows(a, store.sample_axis);
            let n = a.shape[store.sample_axis];
            for (split, shuffle) in [(Split::Train, true), (Split::All, false)] {
                let (_, b) = run(&url, Some(vec![path.clone()]), store.sample_axis, split, shuffle);
                check_pass(&b, path, &rows, 0, &(0..n).collect::<Vec<_>>());
                if !shuffle {
                    let order: Vec<u64> = b.iter().flat_map(|b| b.sample_indices.clone()).collect();
                    assert!(order.windows(2).all(|w| w[0] < w[1]), "{}: sequential view is in order", store.name);
                }
            }
            checked += 1;
        }
    }
    assert!(checked >= 14, "checked {checked} arrays");
}

#[test]
fn discovery_skips_cf_coordinates_in_v2_and_v3() {
    for name in ["cf", "cf_v2"] {
        let url = format!("file://{}", fixtures_dir().join(name).display());
        let (ds, _) = run(&url, None, 0, Split::Train, true);
        let labels: Vec<&str> = ds.dataset().variables().iter().map(|v| v.label.as_str()).collect();
        assert_eq!(labels, vec!["t2m"], "{name}");
        // An explicit coordinate name is honoured.
        let (ds, b) = run(&url, Some(vec!["lat".into()]), 0, Split::All, false);
        assert_eq!(ds.dataset().variables()[0].label, "lat");
        assert_eq!(b.iter().map(Batch::len).sum::<usize>(), 5);
    }
}

#[test]
fn windowed_views_and_multiple_chunkings_read_each_chunk_once() {
    let url = format!("file://{}", fixtures_dir().join("multi_spc").display());
    let m = manifest();
    let store = m.stores.iter().find(|s| s.name == "multi_spc").unwrap();
    let (ds, b) = run(&url, Some(vec!["a".into(), "b".into(), "c".into()]), 0, Split::Train, true);
    for label in ["a", "b", "c"] {
        check_pass(&b, label, &source_rows(&store.arrays[label], 0), 0, &(0..48).collect::<Vec<_>>());
    }
    let stats = ds.last_pass().unwrap();
    assert_eq!(stats.cache_misses, 6 + 12 + 3, "each stored chunk loaded once: {stats:?}");
}

#[test]
fn absent_chunks_read_as_fill_value() {
    let m = manifest();
    let store = m.stores.iter().find(|s| s.name == "missing_chunks").unwrap();
    let url = format!("file://{}", fixtures_dir().join(&store.path).display());
    let (_, b) = run(&url, None, 0, Split::All, false);
    let rows = source_rows(&store.arrays["t2m"], 0);
    assert!(rows[8].chunks(4).all(|v| f32::from_le_bytes(v.try_into().unwrap()) == 7.5));
    check_pass(&b, "t2m", &rows, 0, &(0..32).collect::<Vec<_>>());
}
