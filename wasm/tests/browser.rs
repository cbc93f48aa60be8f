//! In headless Chromium (wasm-bindgen-test, `run_in_browser`): a zarr-python fixture over
//! HTTP, cross-origin, with `fetch`. Run by `scripts/test-wasm.sh` with chromedriver.
#![cfg(target_arch = "wasm32")]

mod common;

use wasm_bindgen_test::wasm_bindgen_test;
use wasm_bindgen_test::wasm_bindgen_test_configure;

wasm_bindgen_test_configure!(run_in_browser);

#[wasm_bindgen_test]
#[cfg_attr(
    ib_no_fixture_server,
    ignore = "INSITUBATCH_HTTP_URL was unset when this test was built: run scripts/test-wasm.sh"
)]
async fn a_fixture_over_http_in_the_browser() {
    common::a_fixture_over_http().await;
}
