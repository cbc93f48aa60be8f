//! Rust values to JS and JS numbers to Rust, for every export.

use js_sys::{Object, Reflect};
use wasm_bindgen::prelude::*;

use crate::errors::{js_error, text_err};

/// A JS value from anything serializable, through JSON (u64 → number, maps → objects).
pub(crate) fn to_js<T: serde::Serialize>(v: &T) -> Result<JsValue, JsValue> {
    let s = serde_json::to_string(v).map_err(text_err)?;
    js_sys::JSON::parse(&s).map_err(|e| js_error(&crate::storage::js_message(&e)))
}

pub(crate) fn set(o: &Object, k: &str, v: &JsValue) -> Result<(), JsValue> {
    Reflect::set(o, &JsValue::from_str(k), v).map(|_| ()).map_err(|e| js_error(&crate::storage::js_message(&e)))
}

/// A non-negative integer from a JS number.
pub(crate) fn whole(name: &str, v: f64) -> Result<u64, JsValue> {
    if v.is_finite() && v >= 0.0 && v.fract() == 0.0 && v <= 9_007_199_254_740_991.0 {
        Ok(v as u64)
    } else {
        Err(js_error(&format!("{name} must be a non-negative integer, got {v}")))
    }
}

/// An integer (of either sign) from a JS number.
pub(crate) fn signed(name: &str, v: f64) -> Result<i64, JsValue> {
    if v.is_finite() && v.fract() == 0.0 && v.abs() <= 9_007_199_254_740_991.0 {
        Ok(v as i64)
    } else {
        Err(js_error(&format!("{name} must be an integer, got {v}")))
    }
}
