//! The options object from JS (`open()`'s and the explorer's) into [`JsOpenOptions`], and
//! `optionNames()`.

use js_sys::{Array, ArrayBuffer, Object, Reflect};
use wasm_bindgen::prelude::*;

use super::convert::{signed, to_js};
use crate::JsOpenOptions;
use crate::errors::{err, js_error};

/// The options object of `open()` and the explorer: this package's own keys taken out
/// ([`JS_OWN_NAMES`](crate::JS_OWN_NAMES)), the rest renamed by the one key-case pass
/// ([`snake_keys`](crate::snake_keys), which refuses unknown keys: serde-wasm-bindgen reads a
/// struct's declared fields only, so `deny_unknown_fields` never sees them) and read by core's
/// spec. `undefined` and `null` values are absent options (a form field left empty).
pub(crate) fn parse_options(v: JsValue) -> Result<JsOpenOptions, JsValue> {
    if v.is_undefined() || v.is_null() {
        return Ok(JsOpenOptions::default());
    }
    if !v.is_object() {
        return Err(js_error("invalid options: pass an object, e.g. { batchSize: 32 }"));
    }
    let own = |key: &str| Reflect::get(&v, &JsValue::from_str(key)).ok().filter(|x| !x.is_undefined() && !x.is_null());
    let credentials = own("credentials");
    if credentials.as_ref().is_some_and(|c| !c.is_function()) {
        return Err(js_error(
            "invalid options: credentials must be a function returning (a promise of) { accessKeyId, secretAccessKey, \
             sessionToken?, expiration? }",
        ));
    }
    let shift = own("shift").map(|s| signed("shift", s.as_f64().unwrap_or(f64::NAN))).transpose()?;
    let batch_views = own("batchViews").map(|b| b.is_truthy());
    let rest = JsObject(Object::assign(&Object::new(), v.unchecked_ref()));
    for key in crate::JS_OWN_NAMES {
        let _ = Reflect::delete_property(&rest.0, &JsValue::from_str(key));
    }
    let renamed = crate::snake_keys(&rest).map_err(err)?;
    let spec = insitubatch_core::DatasetSpec::from_deserializer(serde_wasm_bindgen::Deserializer::from(JsValue::from(
        renamed.0,
    )))
    .map_err(err)?;
    #[allow(unused_mut, reason = "the callback is kept only in the builds with signed S3")]
    #[allow(clippy::needless_update, reason = "`credentials_callback` is a field of the builds with signed S3 only")]
    let mut opts = JsOpenOptions { spec, shift, batch_views, credentials: credentials.is_some(), ..Default::default() };
    #[cfg(feature = "s3")]
    {
        opts.credentials_callback = credentials.and_then(|c| c.dyn_into::<js_sys::Function>().ok());
    }
    Ok(opts)
}

/// A JS object as the key-case pass reads and makes it.
struct JsObject(Object);

impl crate::OptionObject for JsObject {
    fn present_keys(&self) -> Vec<String> {
        Object::keys(&self.0)
            .iter()
            .filter_map(|k| k.as_string())
            .filter(|k| Reflect::get(&self.0, &JsValue::from_str(k)).is_ok_and(|x| !x.is_undefined() && !x.is_null()))
            .collect()
    }

    fn object_at(&self, key: &str) -> Option<Self> {
        let v = Reflect::get(&self.0, &JsValue::from_str(key)).ok()?;
        // A plain object: not an array, a `Map` or a typed array (their keys are no option's).
        let plain = v.is_object()
            && !Array::is_array(&v)
            && !v.is_instance_of::<js_sys::Map>()
            && !ArrayBuffer::is_view(&v)
            && !v.is_function();
        plain.then(|| Self(v.unchecked_into()))
    }

    fn renamed(&self, rename: &dyn Fn(&str) -> String) -> Self {
        let out = Object::new();
        for key in self.present_keys() {
            let value = Reflect::get(&self.0, &JsValue::from_str(&key)).unwrap_or(JsValue::UNDEFINED);
            let _ = Reflect::set(&out, &JsValue::from_str(&rename(&key)), &value);
        }
        Self(out)
    }

    fn put(&mut self, key: &str, value: Self) {
        let _ = Reflect::set(&self.0, &JsValue::from_str(key), &value.0);
    }
}

/// The option names `open()` accepts, for the types check (`js/test/types.test.js`): `open`,
/// the options' keys, and each nested object's (`readPolicy`, `readPolicy.hedge`, and a
/// labelled variable's as `variables.*`), all in JS's spelling.
#[wasm_bindgen(js_name = optionNames)]
pub fn option_names() -> Result<JsValue, JsValue> {
    let mut names: std::collections::BTreeMap<String, Vec<String>> = crate::nested_option_names().into_iter().collect();
    names.insert("open".into(), crate::open_option_names());
    to_js(&names)
}
