//! In headless Chromium (wasm-bindgen-test, `run_in_browser`): open a zarr-python fixture
//! over HTTP, cross-origin, with `fetch`, and read batches. Run by `scripts/test-wasm.sh`
//! when chromium + chromedriver are installed; the server URL is baked in at build time.
#![cfg(target_arch = "wasm32")]

use js_sys::Reflect;
use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_futures::JsFuture;
use wasm_bindgen_test::{wasm_bindgen_test, wasm_bindgen_test_configure};

wasm_bindgen_test_configure!(run_in_browser);

fn get(v: &JsValue, k: &str) -> JsValue {
    Reflect::get(v, &JsValue::from_str(k)).unwrap()
}

#[wasm_bindgen_test]
async fn a_fixture_over_http_in_the_browser() {
    let Some(base) = option_env!("INSITUBATCH_HTTP_URL") else {
        wasm_bindgen_test::console_log!("INSITUBATCH_HTTP_URL was unset at build time; skipping");
        return;
    };
    let opts = js_sys::JSON::parse(r#"{"variables":["t2m"],"batchSize":8,"blockChunks":2,"seed":3}"#).unwrap();
    let ds = insitubatch_wasm::open(format!("{base}/v3_sharded"), opts).await.map_err(JsValue::from).unwrap();
    let report = ds.describe(None).map_err(JsValue::from).unwrap();
    assert!(get(&get(&report, "memory"), "floor_bytes").as_f64().unwrap() > 0.0);

    // One pass of every split: each of the 80 samples once; the first batch is (8, 10, 12) f32.
    let stream = ds.iter("all").map_err(JsValue::from).unwrap();
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
