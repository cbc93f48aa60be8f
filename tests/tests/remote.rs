//! The same batches from a real HTTP server and a real S3-compatible server (moto) on
//! loopback as from file://, byte for byte.

use insitubatch_native::core::Batch;
use insitubatch_native::{DatasetSpec, OpenOptions, VariablesSpec, open};
use insitubatch_tests::{digest, fixtures_dir, http_url, manifest, s3_url};

fn pass(url: &str, vars: &[String]) -> Vec<Batch> {
    let ds = open(
        url,
        OpenOptions::from_spec(DatasetSpec {
            variables: Some(VariablesSpec::Paths(vars.to_vec())),
            fractions: (0.8, 0.1, 0.1),
            batch_size: 7,
            block_chunks: 2,
            seed: 3,
            ..Default::default()
        }),
    )
    .unwrap_or_else(|e| panic!("open {url}: {e}"));
    ds.set_epoch(2);
    ds.train().unwrap().collect::<Result<_, _>>().unwrap_or_else(|e| panic!("{url}: {e}"))
}

#[test]
fn http_and_s3_give_the_same_batches_as_file() {
    let m = manifest();
    let mut compared = 0;
    for store in m.stores.iter().filter(|s| s.sample_axis == 0) {
        let vars: Vec<String> = store.arrays.iter().filter(|(_, a)| !a.is_coordinate).map(|(p, _)| p.clone()).collect();
        let local = digest(&pass(&format!("file://{}", fixtures_dir().join(&store.path).display()), &vars));
        let http = digest(&pass(&format!("{}/{}", http_url(), store.path), &vars));
        let s3 = digest(&pass(&format!("{}/{}", s3_url(), store.path), &vars));
        assert_eq!(http, local, "{}: HTTP differs from file://", store.name);
        assert_eq!(s3, local, "{}: S3 differs from file://", store.name);
        compared += 1;
    }
    assert!(compared >= 10);
}

/// The array `t2m` alone.
fn t2m() -> OpenOptions {
    OpenOptions::from_spec(DatasetSpec {
        variables: Some(VariablesSpec::Paths(vec!["t2m".into()])),
        ..Default::default()
    })
}

#[test]
fn discovery_over_http_needs_consolidated_metadata() {
    // v3_gzip is the one store without consolidated metadata: HTTP cannot list, so opening
    // without naming variables must say so; naming them works.
    let url = format!("{}/v3_gzip", http_url());
    let err = open(&url, OpenOptions::default()).unwrap_err().to_string();
    assert!(err.contains("variables"), "{err}");
    assert!(open(&url, t2m()).is_ok());
    // With consolidated metadata, discovery works over HTTP.
    let ds = open(&format!("{}/cf", http_url()), OpenOptions::default()).unwrap();
    assert_eq!(ds.dataset().variables()[0].label, "t2m");
}

#[test]
fn a_missing_store_over_http_and_s3_is_a_clear_error() {
    for url in [format!("{}/no_such_store", http_url()), format!("{}/no_such_store", s3_url())] {
        let err = open(&url, t2m()).unwrap_err().to_string();
        assert!(err.contains("no_such_store") && err.contains("t2m"), "{err}");
        // Discovery on a store that does not exist says so, with the URL last.
        let err = open(&url, OpenOptions::default()).unwrap_err().to_string();
        assert!(err.contains("no Zarr store here") && err.ends_with("no_such_store"), "{err}");
    }
}
