//! The body shared by the wasm-bindgen-test files (`browser.rs`: a page in headless
//! Chromium; `worker.rs`: a dedicated worker there; `node.rs`: Node). The fixture server's
//! URL is baked in at build time (`INSITUBATCH_HTTP_URL`, set by `scripts/test-wasm.sh`);
//! without it the tests are reported as ignored, and fail under CI (`../build.rs`).

use js_sys::Reflect;
use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_futures::JsFuture;

fn get(v: &JsValue, k: &str) -> JsValue {
    Reflect::get(v, &JsValue::from_str(k)).unwrap()
}

/// Open the sharded fixture over HTTP with `fetch`, check the report, and read one pass of
/// `all`: every one of the 80 samples once, the first batch (8, 10, 12) float32.
pub async fn a_fixture_over_http() {
    // Without the URL the callers are `ignore`d (build.rs), except under CI, where this fails.
    let Some(base) = option_env!("INSITUBATCH_HTTP_URL") else {
        panic!("INSITUBATCH_HTTP_URL was unset when this test was built, under CI: run scripts/test-wasm.sh");
    };
    let opts = js_sys::JSON::parse(r#"{"variables":["t2m"],"batchSize":8,"blockChunks":2,"seed":3}"#).unwrap();
    let ds = insitubatch_wasm::open(format!("{base}/v3_sharded"), opts).await.unwrap();
    let report = ds.describe(None).unwrap();
    assert!(get(&get(&report, "memory"), "floor_bytes").as_f64().unwrap() > 0.0);

    // One pass of every split: each of the 80 samples once; the first batch is (8, 10, 12) f32.
    let stream = ds.iter("all").unwrap();
    let mut seen = Vec::new();
    let mut first = true;
    loop {
        let b = JsFuture::from(stream.next()).await.unwrap();
        if b.is_undefined() {
            break;
        }
        let t2m = get(&get(&b, "arrays"), "t2m");
        if first {
            assert!(get(&t2m, "data").is_instance_of::<js_sys::Float32Array>());
            assert_eq!(get(&t2m, "dtype").as_string().unwrap(), "float32");
            let shape: Vec<f64> =
                js_sys::Array::from(&get(&t2m, "shape")).iter().map(|d| d.as_f64().unwrap()).collect();
            assert_eq!(shape, vec![8.0, 10.0, 12.0]);
            first = false;
        }
        let idx: js_sys::BigUint64Array = get(&b, "sampleIndices").unchecked_into();
        seen.extend(idx.to_vec());
    }
    seen.sort_unstable();
    assert_eq!(seen, (0..80).collect::<Vec<u64>>());
}
