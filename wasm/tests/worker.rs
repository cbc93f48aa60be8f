//! In a dedicated Web Worker of headless Chromium (wasm-bindgen-test,
//! `run_in_dedicated_worker`): the same fixture over HTTP, with the worker's `fetch` and timers.
#![cfg(target_arch = "wasm32")]

mod common;

use wasm_bindgen_test::wasm_bindgen_test;
use wasm_bindgen_test::wasm_bindgen_test_configure;

wasm_bindgen_test_configure!(run_in_dedicated_worker);

#[wasm_bindgen_test]
#[cfg_attr(
    ib_no_fixture_server,
    ignore = "INSITUBATCH_HTTP_URL was unset when this test was built: run scripts/test-wasm.sh"
)]
async fn a_fixture_over_http_in_a_dedicated_worker() {
    common::a_fixture_over_http().await;
}
