"""Notebook widgets (anywidget: JupyterLab, Jupyter Notebook, VS Code, Colab, marimo).

``Preview(store_or_url, **knobs)`` shows what the loader would feed a model: the describe
report with its notes, the draw order of an epoch and real shuffled batches as images with a
colour bar (with ``patch=``, each row's patch and a map of where the patches lie in the
field); a button probes the store (a few timed reads and decodes) for a predicted epoch.
The wasm engine runs in the notebook's browser tab (the dashboard's engine and drawing
code, ``www/src``); a public ``http(s)://`` store is fetched by the browser, any other
store (a local path, a private bucket, a store object) is read through the kernel: the
front end asks for each key or byte range over the widget's messages and this side reads
it with the engine's own storage (``_native.StoreReader``). Needs ``pip install
'insitubatch-rs[widgets]'`` (anywidget).

Raises:
    ImportError: on import, when anywidget is not installed.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from typing import Any

try:
    import anywidget
    import traitlets
except ImportError as e:  # pragma: no cover - the message is the point
    raise ImportError(f"insitubatch_rs.widgets needs anywidget: pip install 'insitubatch-rs[widgets]' ({e})") from e

from . import _native
from ._store import engine_store
from ._store import storage_options as _storage_opts

_STATIC = Path(__file__).parent / "_widget"

# Knobs that pick what the preview shows rather than configure the dataset.
_WHAT_IF = ("epoch", "shift", "iterations", "threads")


@cache
def _engine_bytes() -> bytes:
    """The engine built for the browser (js/pkg/web), shipped in the package."""
    path = _STATIC / "insitubatch_wasm_bg.wasm"
    if not path.is_file():
        raise FileNotFoundError(
            f"the widget's engine is missing from this install (build it with scripts/test-widget.sh --build-only): {path}"
        )
    return path.read_bytes()


# Knobs of sizes per axis: sent as ``[axis, size]`` pairs, since JSON would turn an axis index
# into a string key and a JS object lists integer-like keys first, reordering the columns
# of the batch's patch origins.
_AXIS_SIZES = ("patch", "patch_stride")


def _option(name: str, value: Any) -> Any:
    """A knob as the widget's JSON options take it (``open()``'s in JS).

    Tuples become lists, numpy arrays (``sample_mask``, ``sample_weights``) lists of their
    values, and a ``patch`` or ``patch_stride`` mapping ``[axis, size]`` pairs in its order.
    """
    if name in _AXIS_SIZES and isinstance(value, dict):
        return [[k, v] for k, v in value.items()]
    if isinstance(value, tuple):
        return list(value)
    tolist = getattr(value, "tolist", None)
    return tolist() if callable(tolist) else value


class Preview(anywidget.AnyWidget):
    """Describe, draw order and batch images of ``store`` under ``knobs``.

    ``store``: a URL (``http(s)://``, ``s3://``, ``gs://``, ``file://``), a local path or a
    store object, as ``InSituDataset`` takes. ``knobs``: ``open()``'s options in Python
    spelling (``variables``, ``batch_size``, ``block_chunks``, ``seed``, ``fractions``,
    ``cache_budget_bytes``, ``patch``, ``patch_mode``, ``patch_stride``,
    ``patches_per_sample``, ``sample_mask``, ``sample_weights`` (a list or a numpy array),
    ...; the engine checks them and the widget shows its error),
    plus ``epoch``, ``shift`` (a windowed view: input | target pairs), ``iterations`` and
    ``threads`` for the what-if, ``split`` (default ``"train"``) and ``variable`` (the one
    drawn; default the first). ``via_kernel``: force reads through the kernel (default: only
    for stores that are not ``http(s)://``). ``storage_options``: object_store settings for
    a URL read by the kernel.

    Raises:
        FileNotFoundError: the widget's engine (its wasm build) is missing from this install.
        TypeError: ``store`` is neither a URL, a path, an obstore store nor a zarr-python
            ``Store`` (read through the kernel).
        ValueError: an unparsable URL (read through the kernel).
        InsitubatchIOError: a store read through the kernel cannot be opened (an
            unsupported URL scheme, ``storage_options`` for a local store, ...).
    """

    _esm = _STATIC / "widget.js"
    _wasm = traitlets.Bytes().tag(sync=True)
    url = traitlets.Unicode("").tag(sync=True)
    location = traitlets.Unicode("").tag(sync=True)
    via_kernel = traitlets.Bool(False).tag(sync=True)
    options = traitlets.Dict().tag(sync=True)
    what_if = traitlets.Dict().tag(sync=True)
    split = traitlets.Unicode("train").tag(sync=True)
    variable = traitlets.Unicode("").tag(sync=True)

    def __init__(
        self,
        store: Any,
        *,
        split: str = "train",
        variable: str | None = None,
        via_kernel: bool | None = None,
        storage_options: dict[str, Any] | None = None,
        **knobs: Any,
    ) -> None:
        target = engine_store(store)
        is_http = isinstance(target, str) and re.match(r"https?://", target) is not None
        kernel = not is_http if via_kernel is None else via_kernel
        self._reader = _native.StoreReader(target, _storage_opts(storage_options)) if kernel else None
        location = self._reader.location if self._reader else str(target)
        what_if = {k: knobs.pop(k) for k in _WHAT_IF if k in knobs}
        super().__init__(
            _wasm=_engine_bytes(),
            url=str(target) if is_http else "",
            location=location,
            via_kernel=kernel,
            # JS's spelling of each option, by the engine's one rule (core's camel_case).
            options={_native.camel_case(k): _option(k, v) for k, v in knobs.items()},
            what_if=what_if,
            split=split,
            variable=variable or "",
        )
        self.on_msg(self._on_read)

    def _on_read(self, _widget: Any, msg: dict[str, Any], _buffers: list[Any]) -> None:
        """Answer one read of the front end's storage (``www/src/widget.js`` kernelStorage)."""
        if not isinstance(msg, dict) or msg.get("type") != "read" or self._reader is None:
            return
        reply: dict[str, Any] = {"type": "read-reply", "id": msg.get("id"), "op": msg.get("op")}
        buffers: list[bytes] = []
        try:
            if msg.get("op") == "list":
                reply["keys"] = self._reader.list(str(msg.get("prefix", "")))
            else:
                r = msg.get("range") or {}
                data = self._reader.get(str(msg["key"]), start=r.get("start"), end=r.get("end"), suffix=r.get("suffix"))
                reply["missing"] = data is None
                buffers = [] if data is None else [data]
        except Exception as e:  # noqa: BLE001 - every failure goes back to the engine as its read error
            reply["error"] = str(e)
        self.send(reply, buffers)
