//! The `Dataset` class (an opened store: describe, passes, checkpoints, probe) and its
//! `BatchStream`, each holding the engine alive (`KeepAlive`).

use std::cell::RefCell;
use std::rc::Rc;

use insitubatch_core::{Checkpoint, Split};
use wasm_bindgen::prelude::*;

use super::batch::batch_to_js;
use super::convert::{to_js, whole};
use super::cursor::PassCursor;
use super::probe::{probe_chunks, probe_promise};
use crate::errors::{err, js_error, text_err};
use crate::parse_split;

/// A reference to an opened dataset's engine. In the threaded build its release waits until
/// no pool job is queued or running (`threads::drop_when_idle`), so an engine is never freed
/// on a pool thread; every JS-facing object that can cause jobs holds one.
#[derive(Clone)]
#[cfg_attr(not(feature = "threads"), allow(dead_code, reason = "the field is read only by the threaded build's Drop"))]
pub(super) struct KeepAlive(pub(super) Option<insitubatch_core::Dataset>);

impl Drop for KeepAlive {
    fn drop(&mut self) {
        #[cfg(feature = "threads")]
        if let Some(ds) = self.0.take() {
            crate::threads::drop_when_idle(ds);
        }
    }
}

/// An opened store: splits, shuffle, pool. Iterate one epoch of a split with `iter()`.
#[wasm_bindgen]
pub struct Dataset {
    pub(super) inner: insitubatch_core::Dataset,
    pub(super) url: String,
    /// `batchViews`: its passes yield views into wasm memory ([`batch_view_to_js`]).
    pub(super) batch_views: bool,
    /// Where the latest pass over each split stands ([`PassCursor::position`]), kept after
    /// the pass ends: what [`Self::checkpoint`] returns.
    pub(super) latest: RefCell<Vec<(Split, Rc<RefCell<Checkpoint>>)>>,
    pub(super) _keep: KeepAlive,
}

/// A checkpoint from JS: core's serde form as an object (what `checkpoint()` returns) or
/// as JSON text (a file the CLI's `--checkpoint` or Python's `state_dict()` wrote).
fn checkpoint_from_js(v: &JsValue) -> Result<Checkpoint, JsValue> {
    let json = match v.as_string() {
        Some(s) => s,
        None if v.is_object() => js_sys::JSON::stringify(v)
            .map_err(|e| js_error(&crate::storage::js_message(&e)))?
            .as_string()
            .unwrap_or_default(),
        None => {
            return Err(js_error(
                "a checkpoint is the object checkpoint() returned (or its JSON text); got something else",
            ));
        }
    };
    Checkpoint::from_json(&json).map_err(err)
}

#[wasm_bindgen]
impl Dataset {
    /// The static report (memory model, variables, notes) for `iterations` concurrent
    /// iterations (default 1); nothing is read.
    pub fn describe(&self, iterations: Option<f64>) -> Result<JsValue, JsValue> {
        let n = whole("iterations", iterations.unwrap_or(1.0))? as usize;
        to_js(&self.inner.describe(n).map_err(err)?)
    }

    /// The same report, rendered as text.
    #[wasm_bindgen(js_name = describeText)]
    pub fn describe_text(&self, iterations: Option<f64>) -> Result<String, JsValue> {
        let n = whole("iterations", iterations.unwrap_or(1.0))? as usize;
        Ok(self.inner.describe(n).map_err(err)?.render())
    }

    /// Reshuffle deterministically for `epoch`.
    #[wasm_bindgen(js_name = setEpoch)]
    pub fn set_epoch(&self, epoch: f64) -> Result<(), JsValue> {
        self.inner.set_epoch(whole("epoch", epoch)?);
        Ok(())
    }

    /// The current epoch.
    #[wasm_bindgen(getter)]
    pub fn epoch(&self) -> f64 {
        self.inner.epoch() as f64
    }

    /// The variable labels, in batch order.
    #[wasm_bindgen(getter)]
    pub fn labels(&self) -> Vec<String> {
        let mut l: Vec<String> = self.inner.variables().iter().map(|v| v.label.clone()).collect();
        l.sort();
        l
    }

    /// The store URL as given.
    #[wasm_bindgen(getter)]
    pub fn url(&self) -> String {
        self.url.clone()
    }

    /// One epoch of `split` (`"train"`, `"val"`, `"test"` or `"all"`) at the current epoch.
    pub fn iter(&self, split: &str) -> Result<BatchStream, JsValue> {
        let split = parse_split(split).map_err(text_err)?;
        let stream = self.inner.iter(split).map_err(err)?;
        Ok(self.stream(split, stream))
    }

    /// The pass a checkpoint was taken in (core's `Dataset::resume`), from where it stopped:
    /// with the world size it was taken with, exactly the batches the uninterrupted pass
    /// would have yielded next; with another, this rank's share of the samples no rank had
    /// consumed. Sets the epoch to the checkpoint's. `checkpoint`: what `checkpoint()`
    /// returned, or its JSON text.
    pub fn resume(&self, checkpoint: JsValue) -> Result<BatchStream, JsValue> {
        let checkpoint = checkpoint_from_js(&checkpoint)?;
        let stream = self.inner.resume(&checkpoint).map_err(err)?;
        Ok(self.stream(checkpoint.split, stream))
    }

    /// Where the latest pass over `split` stands (core's `Checkpoint`, as a plain object),
    /// or, before a pass of the current epoch, the checkpoint of a fresh one.
    pub fn checkpoint(&self, split: &str) -> Result<JsValue, JsValue> {
        let split = parse_split(split).map_err(text_err)?;
        let epoch = self.inner.epoch();
        let latest = self.latest.borrow().iter().find(|(s, _)| *s == split).map(|(_, at)| at.borrow().clone());
        match latest {
            Some(c) if c.epoch == epoch => to_js(&c),
            _ => to_js(&self.inner.fresh_checkpoint(split, epoch)),
        }
    }

    /// A JS stream over `stream`, remembered as the latest pass over `split`.
    fn stream(&self, split: Split, stream: insitubatch_core::BatchStream) -> BatchStream {
        let cursor = PassCursor::new(stream);
        let mut latest = self.latest.borrow_mut();
        latest.retain(|(s, _)| *s != split);
        latest.push((split, cursor.position()));
        BatchStream { cursor, keep: KeepAlive(Some(self.inner.clone())), views: self.batch_views }
    }

    /// Probe the store: a few real reads and decodes of the train split at the current
    /// epoch, timed, and the epoch they predict (core's `Dataset::probe`; `chunks`, default
    /// `PROBE_CHUNKS`, are loaded at once after the first). A promise of the report; nothing
    /// it loads is kept, so the next pass starts cold.
    pub fn probe(&self, chunks: Option<f64>) -> js_sys::Promise {
        match probe_chunks(chunks) {
            Ok(n) => probe_promise(self.inner.clone(), n, KeepAlive(Some(self.inner.clone()))),
            Err(e) => js_sys::Promise::reject(&e),
        }
    }

    /// Chunks filled under `onBadChunk: "nan"` so far: `{ array, chunk_index, tile, error }`.
    #[wasm_bindgen(js_name = badChunks)]
    pub fn bad_chunks(&self) -> Result<JsValue, JsValue> {
        to_js(&self.inner.bad_chunks())
    }

    /// Stats of the last pass that ended, or `undefined`.
    #[wasm_bindgen(js_name = lastPass)]
    pub fn last_pass(&self) -> Result<JsValue, JsValue> {
        match self.inner.last_pass() {
            Some(p) => to_js(&p),
            None => Ok(JsValue::UNDEFINED),
        }
    }
}

/// One pass over a split. `next()` resolves to a batch, or `undefined` at the end.
/// `close()` (or dropping it) ends the pass and frees its memory at once.
#[wasm_bindgen]
pub struct BatchStream {
    cursor: PassCursor,
    keep: KeepAlive,
    views: bool,
}

#[wasm_bindgen]
impl BatchStream {
    /// Batches this pass yields in all.
    #[wasm_bindgen(getter)]
    pub fn length(&self) -> usize {
        self.cursor.len()
    }

    /// The next batch, or `undefined` after the last one. Under `batchViews` its arrays are
    /// views (`batch_view_to_js`) and this call ends the previous batch's.
    pub fn next(&self) -> js_sys::Promise {
        if self.views {
            self.cursor.next_view(self.keep.clone())
        } else {
            self.cursor.next(batch_to_js, self.keep.clone())
        }
    }

    /// Whether batches are views into wasm memory (the `batchViews` option): the facade
    /// (js/src/facade.js) wraps them so that each read re-derives the view.
    #[wasm_bindgen(getter, js_name = batchViews)]
    pub fn batch_views(&self) -> bool {
        self.views
    }

    /// Stats of this pass so far (`undefined` once it has ended; see `Dataset.lastPass()`).
    pub fn stats(&self) -> Result<JsValue, JsValue> {
        self.cursor.stats()
    }

    /// Where this pass stands after the last batch it returned (core's `Checkpoint`, as a
    /// plain object): `Dataset.resume` continues from there, in this process or another, with
    /// any world size. Also after the pass has ended or was closed.
    pub fn checkpoint(&self) -> Result<JsValue, JsValue> {
        to_js(&self.cursor.checkpoint())
    }

    /// End the pass now (an early `break`); later `next()` calls resolve to `undefined`.
    pub fn close(&self) {
        self.cursor.close();
    }
}
