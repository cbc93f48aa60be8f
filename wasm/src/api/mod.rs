//! The JavaScript API. Every export returns `Result<_, JsValue>`: a rejected promise or a
//! thrown `Error` with the engine's message, its option names in JS's spelling, and the
//! engine's `kind` and `option` on it (`errors.rs`); nothing panics into JS.
//!
//! One file per concern:
//! - `open.rs`: the exported `open*` functions (`open`, `openReferences`, `openWithStorage`,
//!   `openJoined`, `openConcat`): the storage for a URL or JS object, the CPU pool, the disk
//!   tier, and core's builder.
//! - `js_options.rs`: the options object read into `JsOpenOptions`; `optionNames()`.
//! - `dataset.rs`: the `Dataset` class and its `BatchStream`; `KeepAlive`, the engine
//!   reference every JS-facing object that can cause jobs holds.
//! - `cursor.rs`: `PassCursor`, one pass as JS steps it (`BatchStream` and the explorer's).
//! - `batch.rs`: a batch as a JS object (copies or views); `wasmMemory()`.
//! - `probe.rs`: the probe's `chunks` and its report as a promise (`probe()`, the explorer's).
//! - `convert.rs`: serializable values to JS, JS numbers to integers.

use wasm_bindgen::prelude::*;

mod batch;
mod convert;
mod cursor;
mod dataset;
mod js_options;
mod open;
mod probe;

pub(crate) use batch::batch_to_js;
pub use batch::wasm_memory;
pub(crate) use convert::{signed, to_js, whole};
pub(crate) use cursor::PassCursor;
pub use dataset::{BatchStream, Dataset};
pub use js_options::option_names;
pub(crate) use js_options::parse_options;
pub use open::{open, open_concat, open_joined};
#[cfg(not(feature = "threads"))]
pub use open::{open_references, open_with_storage};
pub(crate) use probe::{probe_chunks, probe_promise};

#[wasm_bindgen(start)]
fn start() {
    crate::trap::install_panic_hook();
}
