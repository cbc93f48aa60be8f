//! Core's storage conformance suite (`insitubatch_core::conformance`) against every native
//! `Storage`: local files (file:// and a bare path), the loopback HTTP server (also with
//! credentials in the URL), and S3 (moto) on loopback. The file test needs nothing; the
//! HTTP and S3 tests need the servers of `scripts/test.sh` (`tests/servers/start_all.sh`).

use insitubatch_core::conformance::{Expectations, Report, check_storage, fixture};
use insitubatch_native::open_storage;
use insitubatch_tests::{STORAGE_FIXTURE, fixtures_dir, http_url, s3_url, write_storage_fixture};

/// Open `url` with `open_storage` and run the suite on a tokio runtime (object_store's
/// local, HTTP and S3 stores need one).
fn run(url: &str, expect: &Expectations) -> Report {
    let storage = open_storage(url, &[]).unwrap_or_else(|e| panic!("open {url}: {e}"));
    runtime().block_on(check_storage(storage.as_ref(), expect))
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("a tokio runtime")
}

/// The fixture where the loopback HTTP server serves it (its root is the fixtures dir),
/// written once per process: the tests that read it run on parallel threads.
fn served_fixture() {
    static WRITTEN: std::sync::OnceLock<()> = std::sync::OnceLock::new();
    WRITTEN.get_or_init(|| {
        let dir = fixtures_dir().join(STORAGE_FIXTURE);
        write_storage_fixture(&dir).unwrap_or_else(|e| panic!("cannot write the storage fixture: {e}"));
    });
}

#[test]
fn local_files_conform() {
    let dir = tempfile::Builder::new().prefix("ib-storage-conformance-").tempdir().expect("a temporary directory");
    write_storage_fixture(dir.path()).unwrap();
    for url in [format!("file://{}", dir.path().display()), dir.path().display().to_string()] {
        let report = run(&url, &Expectations::listable());
        report.assert_ok();
        assert!(report.passed.len() > 60, "{report}");
    }
}

#[test]
fn http_conforms() {
    served_fixture();
    run(&format!("{}/{STORAGE_FIXTURE}", http_url()), &Expectations::unlistable()).assert_ok();
}

/// A user's password in an http:// URL must not end up in `location()`, which every
/// storage error message ends with.
#[test]
fn http_with_credentials_in_the_url_conforms() {
    served_fixture();
    let url = format!("{}/{STORAGE_FIXTURE}", http_url().replacen("://", "://reader:s3cret-pw@", 1));
    run(&url, &Expectations::unlistable().with_secret("s3cret-pw")).assert_ok();
}

#[test]
fn s3_conforms() {
    use object_store::ObjectStoreExt;
    let bucket = std::env::var("INSITUBATCH_S3_BUCKET")
        .expect("INSITUBATCH_S3_BUCKET is not set: run through scripts/test.sh (tests/servers/start_all.sh)");
    // moto took the fixtures dir as it was at its start: put the fixture in ourselves.
    let s3 = object_store::aws::AmazonS3Builder::from_env().with_bucket_name(&bucket).build().expect("an S3 client");
    let rt = runtime();
    for (key, bytes) in fixture() {
        let path = object_store::path::Path::from(format!("{STORAGE_FIXTURE}/{key}"));
        rt.block_on(s3.put(&path, bytes.into())).unwrap_or_else(|e| panic!("put {path} into s3://{bucket}: {e}"));
    }
    let secret = std::env::var("AWS_SECRET_ACCESS_KEY").unwrap_or_default();
    run(&format!("{}/{STORAGE_FIXTURE}", s3_url()), &Expectations::listable().with_secret(secret)).assert_ok();
}

/// A key is a name inside the store, never a path out of it: the notebook widget's front end
/// sends keys to the kernel (`StoreReader`, the engine's own storage), so `..` segments, an
/// absolute path or an encoded `..` must not reach a file beside the store.
#[test]
fn a_key_never_leaves_a_local_store() {
    let root = tempfile::Builder::new().prefix("ib-storage-escape-").tempdir().expect("a temporary directory");
    let store = root.path().join("store.zarr");
    std::fs::create_dir_all(store.join("a")).unwrap();
    std::fs::write(store.join("a/zarr.json"), b"{}").unwrap();
    std::fs::write(root.path().join("secret"), b"outside the store").unwrap();
    let storage = open_storage(&store.display().to_string(), &[]).unwrap();
    let rt = runtime();
    let secret = root.path().join("secret").display().to_string();
    for key in ["../secret", "a/../../secret", "%2e%2e/secret", "..", secret.as_str(), "/../secret"] {
        let got = rt.block_on(storage.get(key));
        assert!(matches!(got, Ok(None) | Err(_)), "{key:?} read {got:?}");
    }
    assert_eq!(rt.block_on(storage.get("a/zarr.json")).unwrap().as_deref(), Some(&b"{}"[..]), "the store still reads");
    let listed = rt.block_on(storage.list("..")).unwrap().unwrap_or_default();
    assert!(!listed.iter().any(|k| k.contains("secret")), "{listed:?}");
}
