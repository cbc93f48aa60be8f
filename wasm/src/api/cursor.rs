//! One core pass as JS sees it, shared by `BatchStream` and the explorer's stream.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use insitubatch_core::{Batch, Checkpoint};
use wasm_bindgen::prelude::*;

use super::batch::batch_view_to_js;
use super::convert::to_js;
use crate::errors::{err, js_error};

/// The JS side of one core pass, shared by [`BatchStream`] and the explorer's stream: one
/// `next()` at a time, the stream dropped (its pass ended) at the end, on an error or on
/// `close()`.
pub(crate) struct PassCursor {
    inner: Rc<RefCell<Option<insitubatch_core::BatchStream>>>,
    busy: Rc<Cell<bool>>,
    len: usize,
    /// The last batch yielded as views ([`Self::next_view`]): its buffers stay allocated, and
    /// are not recycled into later batches, until the next step or `close()`.
    held: Rc<RefCell<Option<Batch>>>,
    /// The pass's checkpoint after the last batch it returned (its start before the first),
    /// updated by each step: there between batches, while a step is pending (the stream is
    /// out of `inner` then) and after the pass has ended.
    at: Rc<RefCell<Checkpoint>>,
}

impl PassCursor {
    pub(crate) fn new(stream: insitubatch_core::BatchStream) -> Self {
        let len = stream.len();
        let at = Rc::new(RefCell::new(stream.checkpoint()));
        Self {
            inner: Rc::new(RefCell::new(Some(stream))),
            busy: Rc::new(Cell::new(false)),
            len,
            held: Rc::new(RefCell::new(None)),
            at,
        }
    }

    /// Where the pass stands after the last batch it returned (core's `BatchStream::checkpoint`).
    pub(crate) fn checkpoint(&self) -> Checkpoint {
        self.at.borrow().clone()
    }

    /// The cell [`Self::checkpoint`] reads, shared with the dataset (its `checkpoint()`).
    pub(crate) fn position(&self) -> Rc<RefCell<Checkpoint>> {
        Rc::clone(&self.at)
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The next batch through `convert`, or `undefined` after the last one. `keep` lives
    /// until the promise settles (the stream may end, and be dropped, inside it).
    pub(crate) fn next<K: 'static>(&self, convert: fn(&Batch) -> Result<JsValue, JsValue>, keep: K) -> js_sys::Promise {
        self.step(convert, None, keep)
    }

    /// The next batch as views into wasm memory ([`batch_view_to_js`]): the batch is held
    /// here until the next call or `close()`, which release the one before (its buffers go
    /// back to the pass's recycler, so a view kept past that may show a later batch).
    pub(crate) fn next_view<K: 'static>(&self, keep: K) -> js_sys::Promise {
        self.held.borrow_mut().take();
        self.step(batch_view_to_js, Some(Rc::clone(&self.held)), keep)
    }

    /// One step of the pass: the batch through `convert`, then kept in `hold` if given.
    fn step<K: 'static>(
        &self,
        convert: fn(&Batch) -> Result<JsValue, JsValue>,
        hold: Option<Rc<RefCell<Option<Batch>>>>,
        keep: K,
    ) -> js_sys::Promise {
        let inner = Rc::clone(&self.inner);
        let busy = Rc::clone(&self.busy);
        let at = Rc::clone(&self.at);
        wasm_bindgen_futures::future_to_promise(async move {
            let _keep = keep;
            if busy.get() {
                return Err(js_error("next() was called again before the previous call resolved; await it first"));
            }
            let Some(mut stream) = inner.borrow_mut().take() else {
                return Ok(JsValue::UNDEFINED);
            };
            crate::trap::on_next().await;
            busy.set(true);
            let item = stream.next_batch().await;
            busy.set(false);
            match item {
                Some(Ok(batch)) => {
                    *at.borrow_mut() = stream.checkpoint();
                    *inner.borrow_mut() = Some(stream);
                    let js = convert(&batch)?;
                    if let Some(hold) = hold {
                        *hold.borrow_mut() = Some(batch);
                    }
                    Ok(js)
                }
                Some(Err(e)) => Err(err(e)),
                None => Ok(JsValue::UNDEFINED),
            }
        })
    }

    pub(crate) fn stats(&self) -> Result<JsValue, JsValue> {
        match self.inner.borrow().as_ref() {
            Some(s) => to_js(&s.stats()),
            None => Ok(JsValue::UNDEFINED),
        }
    }

    pub(crate) fn close(&self) {
        self.held.borrow_mut().take();
        if let Some(s) = self.inner.borrow_mut().take() {
            s.close();
        }
    }
}
