//! Broken stores give clear errors naming the key (last), never a panic or a huge allocation.

use insitubatch_native::core::{Batch, OnBadChunk, Split};
use insitubatch_native::{DatasetSpec, OpenOptions, VariablesSpec, open};
use insitubatch_tests::fixtures_dir;

fn url() -> String {
    format!("file://{}", fixtures_dir().join("bad").display())
}

fn open_var(var: &str, on_bad_chunk: OnBadChunk) -> Result<insitubatch_native::NativeDataset, String> {
    open(
        &url(),
        OpenOptions::from_spec(DatasetSpec {
            variables: Some(VariablesSpec::Paths(vec![var.into()])),
            fractions: (1.0, 0.0, 0.0),
            batch_size: 4,
            on_bad_chunk,
            ..Default::default()
        }),
    )
    .map_err(|e| e.to_string())
}

#[test]
fn metadata_problems_name_the_key() {
    let store = url();
    let key = |var: &str| format!("{store}/{var}/zarr.json");
    for (var, needle, last) in [
        ("malformed_metadata", "malformed", key("malformed_metadata")),
        ("unsupported_codec", "no_such_codec", key("unsupported_codec")),
        ("hostile_shape", "zero", key("hostile_shape")),
        ("hostile_huge", "overflow", key("hostile_huge")),
        // Refused before zarrs sees them (issue 16): each message names the field.
        ("hostile_dtype", "data_type \"r8796093022208\" is not supported", key("hostile_dtype")),
        ("hostile_negative", "`chunk_shape` entry -8", key("hostile_negative")),
        ("hostile_rank", "differ in rank", key("hostile_rank")),
        // No key exists to name: the message names both candidates, and the store comes last.
        ("absent", "neither absent/zarr.json nor absent/.zarray exists", store.clone()),
    ] {
        let err = open_var(var, OnBadChunk::Raise).unwrap_err();
        assert!(err.to_lowercase().contains(needle), "{var}: {err}");
        assert!(err.ends_with(&last), "{var}: the message must end with {last}: {err}");
    }
}

#[test]
fn corrupt_and_truncated_chunks_raise_or_fill() {
    // wrong_size_chunk: valid zstd whose decoded size is not the chunk's: never a short batch.
    for var in ["corrupt_chunk", "truncated_chunk", "wrong_size_chunk"] {
        let ds = open_var(var, OnBadChunk::Raise).unwrap();
        let err = ds.iter(Split::All).unwrap().collect::<Result<Vec<Batch>, _>>().unwrap_err().to_string();
        assert!(err.ends_with(&format!("{var}/c/1/0/0")), "{var}: {err}");
        assert!(err.contains("on_bad_chunk"), "{err}");
        let ds = open_var(var, OnBadChunk::Nan).unwrap();
        let b: Vec<Batch> = ds.iter(Split::All).unwrap().collect::<Result<_, _>>().unwrap();
        let nan_rows = b
            .iter()
            .map(|b| b.arrays[var].as_slice::<f32>().unwrap().iter().filter(|x| x.is_nan()).count())
            .sum::<usize>();
        assert!(nan_rows > 0, "{var}: the bad chunk is NaN-filled");
        assert_eq!(ds.dataset().bad_chunks().len(), 1);
    }
}
