//! Under Node (wasm-bindgen-test's default): the same fixture over HTTP with Node's global
//! `fetch`.
#![cfg(target_arch = "wasm32")]

mod common;

use wasm_bindgen_test::wasm_bindgen_test;

#[wasm_bindgen_test]
#[cfg_attr(
    ib_no_fixture_server,
    ignore = "INSITUBATCH_HTTP_URL was unset when this test was built: run scripts/test-wasm.sh"
)]
async fn a_fixture_over_http_in_node() {
    common::a_fixture_over_http().await;
}
