//! Write core's storage conformance fixture into a directory, for servers that serve it to
//! tests in another process (`scripts/test-wasm.sh`: the wasm `fetch` storage under Node).
//!
//!     cargo run -p insitubatch-tests --example write_storage_fixture -- DIR

fn main() {
    let Some(dir) = std::env::args_os().nth(1) else {
        eprintln!("usage: write_storage_fixture DIR (e.g. \"$INSITUBATCH_FIXTURES/storage-conformance\")");
        std::process::exit(2);
    };
    if let Err(e) = insitubatch_tests::write_storage_fixture(std::path::Path::new(&dir)) {
        eprintln!("cannot write the storage conformance fixture: {e}");
        std::process::exit(1);
    }
}
