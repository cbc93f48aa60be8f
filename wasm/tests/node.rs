//! Under Node (wasm-bindgen-test's default): the same fixture over HTTP with Node's global
//! `fetch`, and core's storage conformance suite against `FetchStorage` (with `fetch`, and
//! through the Node entry's `node:http` read hook) and against `JsStorage` over the Node
//! package's `file://` store.
#![cfg(target_arch = "wasm32")]

mod common;

use insitubatch_core::Storage;
use insitubatch_core::conformance::{Expectations, check_storage};
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::JsFuture;
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

/// The same suite through the Node entry's read hook (`js/src/node-http.js`: node:http, a
/// ranged body written in place into wasm memory) instead of `fetch`, as `js/src/index.js`
/// sets it on every instance.
#[wasm_bindgen_test]
async fn fetch_storage_conforms_through_nodes_http_hook() {
    let Some(base) = option_env!("INSITUBATCH_HTTP_URL") else {
        wasm_bindgen_test::console_log!("INSITUBATCH_HTTP_URL was unset at build time; skipping");
        return;
    };
    let make = package_export("node-http.js", "nodeHttpHook").await;
    let hook: js_sys::Function = make.call1(&JsValue::NULL, &wasm_bindgen::memory()).unwrap().into();
    insitubatch_wasm::set_fetch_hook(Some(hook));
    let storage = insitubatch_wasm::FetchStorage::new(&format!("{base}/storage-conformance"));
    let report = check_storage(&storage, &Expectations::unlistable()).await;
    insitubatch_wasm::set_fetch_hook(None);
    report.assert_ok();
}

#[wasm_bindgen(inline_js = "export function importModule(url) { return import(url); }")]
extern "C" {
    /// `import(url)`: the Node package's own module, as its users load it.
    #[wasm_bindgen(js_name = importModule, catch)]
    fn import_module(url: &str) -> Result<js_sys::Promise, JsValue>;
}

/// The function `name` that the Node package's `js/src/FILE` exports.
async fn package_export(file: &str, name: &str) -> js_sys::Function {
    let url = format!("file://{}/../js/src/{file}", env!("CARGO_MANIFEST_DIR"));
    let m = JsFuture::from(import_module(&url).unwrap()).await.unwrap();
    js_sys::Reflect::get(&m, &name.into()).unwrap().into()
}

/// The Node package's `file://` store (`js/src/node-storage.js`: node:fs, ranged reads),
/// through [`insitubatch_wasm::JsStorage`], against the same fixture on disk; it lists.
#[wasm_bindgen_test]
async fn node_file_storage_conforms() {
    let Some(fixtures) = option_env!("INSITUBATCH_FIXTURES") else {
        wasm_bindgen_test::console_log!("INSITUBATCH_FIXTURES was unset at build time; skipping");
        return;
    };
    let make = package_export("node-storage.js", "nodeFileStorage").await;
    let root = format!("{fixtures}/storage-conformance");
    let object =
        JsFuture::from(js_sys::Promise::from(make.call1(&JsValue::NULL, &root.into()).unwrap())).await.unwrap();
    let storage = insitubatch_wasm::JsStorage::new(&object, "unused").unwrap();
    assert!(storage.location().starts_with("file://"), "{}", storage.location());
    check_storage(&storage, &Expectations::listable()).await.assert_ok();
}
