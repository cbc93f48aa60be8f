//! Thrown JS values and properties, read for messages and checks.

use js_sys::Reflect;
use wasm_bindgen::prelude::*;

use crate::storage::js_message;

/// The name of a thrown DOMException (`NotFoundError`, `QuotaExceededError`, ...).
pub(super) fn js_name(e: &JsValue) -> String {
    Reflect::get(e, &JsValue::from_str("name")).ok().and_then(|n| n.as_string()).unwrap_or_default()
}

/// `name: message` of a thrown value, for messages.
pub(super) fn js_text(e: &JsValue) -> String {
    match js_name(e) {
        n if n.is_empty() => js_message(e),
        n => format!("{n}: {}", js_message(e)),
    }
}

pub(super) fn get(o: &JsValue, k: &str) -> JsValue {
    Reflect::get(o, &JsValue::from_str(k)).unwrap_or(JsValue::UNDEFINED)
}
