//! Errors as JS sees them: the engine's (`err`: its message in JS's spelling, its `kind`,
//! `option` and `name`) and this package's own. A leaf, so every module throws the same.

use js_sys::Reflect;
use wasm_bindgen::prelude::*;

/// An engine error as JS sees it: an `Error` whose message spells option names in camelCase
/// (core's [`Error::message_in`](insitubatch_core::Error::message_in)), with the engine's
/// `kind` (`invalid_option`, `storage`, ...: what to branch on, never the message) and, for an
/// option error, `option` (its path in camelCase: `readPolicy.backoffS`), and a `name` from
/// the kind ([`error_name`]).
pub(crate) fn err(e: insitubatch_core::Error) -> JsValue {
    let error = js_sys::Error::new(&e.message_in(&insitubatch_core::camel_case));
    error.set_name(error_name(e.kind()));
    let _ = Reflect::set(&error, &JsValue::from_str("kind"), &JsValue::from_str(e.kind().name()));
    if let Some(option) = e.option_name() {
        let option = insitubatch_core::camel_case(option);
        let _ = Reflect::set(&error, &JsValue::from_str("option"), &JsValue::from_str(&option));
    }
    error.into()
}

/// The JS error `name` of an engine error's kind, the classes of Python's (`ValueError`,
/// `KeyError` for an array the store lacks, ...) as JS names them.
fn error_name(kind: insitubatch_core::ErrorKind) -> &'static str {
    use insitubatch_core::ErrorKind as K;
    match kind {
        K::InvalidOption => "InvalidOptionError",
        K::ArrayNotFound => "ArrayNotFoundError",
        K::NotAnArray => "NotAnArrayError",
        K::Storage | K::NotFound | K::Metadata | K::Decode => "InsitubatchIOError",
        _ => "InsitubatchError",
    }
}

/// Any other error (a JS value that could not be converted, a JSON failure) as a JS `Error`.
pub(crate) fn text_err(e: impl std::fmt::Display) -> JsValue {
    js_error(&e.to_string())
}

/// A JS `Error` with `message`, for what is not the engine's (arguments of this package's own).
pub(crate) fn js_error(message: &str) -> JsValue {
    JsError::new(message).into()
}
