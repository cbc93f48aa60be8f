//! The probe (`probe()`, the explorer's): its `chunks` read from JS and its report as a promise.

use wasm_bindgen::prelude::*;

use super::convert::{to_js, whole};
use crate::errors::{err, js_error, text_err};

/// The probe's `chunks` from JS: absent, core's [`PROBE_CHUNKS`](insitubatch_core::PROBE_CHUNKS),
/// the CLI's and Python's default; else at least 1 (the concurrent part needs a chunk).
pub(crate) fn probe_chunks(chunks: Option<f64>) -> Result<usize, JsValue> {
    match chunks {
        None => Ok(insitubatch_core::PROBE_CHUNKS),
        Some(v) => match whole("chunks", v)? {
            0 => Err(js_error("chunks must be at least 1: the probe loads that many chunks at once after the first")),
            n => usize::try_from(n).map_err(text_err),
        },
    }
}

/// A promise of `ds`'s probe of the train split at its epoch, as a JS object: what the CLI's
/// `describe --probe` and Python's `describe(probe=True)` report. `keep` lives until it settles.
pub(crate) fn probe_promise<K: 'static>(ds: insitubatch_core::Dataset, chunks: usize, keep: K) -> js_sys::Promise {
    wasm_bindgen_futures::future_to_promise(async move {
        let _keep = keep;
        let report = ds.probe(insitubatch_core::shuffle::Split::Train, chunks).await.map_err(err)?;
        to_js(&report)
    })
}
