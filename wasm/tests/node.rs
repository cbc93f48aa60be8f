//! Under Node (wasm-bindgen-test's default): the same fixture over HTTP with Node's global
//! `fetch`, and core's storage conformance suite against `FetchStorage`.
#![cfg(target_arch = "wasm32")]

mod common;

use insitubatch_core::conformance::{Expectations, check_storage};
use wasm_bindgen_test::wasm_bindgen_test;

#[wasm_bindgen_test]
#[cfg_attr(
    ib_no_fixture_server,
    ignore = "INSITUBATCH_HTTP_URL was unset when this test was built: run scripts/test-wasm.sh"
)]
async fn a_fixture_over_http_in_node() {
    common::a_fixture_over_http().await;
}

/// The fixture is written into the HTTP server's root by `scripts/test-wasm.sh`
/// (`tests/examples/write_storage_fixture.rs`); plain HTTP cannot list.
#[wasm_bindgen_test]
async fn fetch_storage_conforms_in_node() {
    let Some(base) = option_env!("INSITUBATCH_HTTP_URL") else {
        wasm_bindgen_test::console_log!("INSITUBATCH_HTTP_URL was unset at build time; skipping");
        return;
    };
    let storage = insitubatch_wasm::FetchStorage::new(&format!("{base}/storage-conformance"));
    check_storage(&storage, &Expectations::unlistable()).await.assert_ok();
}
