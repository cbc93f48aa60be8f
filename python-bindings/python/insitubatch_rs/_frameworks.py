"""Framework adapters: numpy batches to torch / JAX / TensorFlow.

Each framework is imported inside its function, so importing insitubatch_rs pulls none in
and a missing one raises an ImportError naming the extra to install.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np


def _require(module: str, extra: str) -> Any:
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise ImportError(
            f"{module} is not installed; install it (pip install 'insitubatch-rs[{extra}]') to use this adapter"
        ) from e


def _is_bfloat16(a: np.ndarray) -> bool:
    return a.dtype.name == "bfloat16"


def _arrays(batch: Any) -> Mapping[str, np.ndarray]:
    return batch.arrays if hasattr(batch, "arrays") else batch


def to_torch(batch: Any, device: Any = None) -> dict[str, Any]:
    """``{label: torch.Tensor}`` sharing memory with the batch (DLPack, no copy).

    With ``device`` the tensors are copied there (``tensor.to(device)``). Batch buffers are
    ordinary pageable memory, so the copy has finished with the source when it returns and
    the engine may recycle the buffer at once. bfloat16 arrays (``ml_dtypes.bfloat16``)
    become ``torch.bfloat16`` over the same memory; without ml_dtypes they arrive as
    ``uint16`` words and stay ``torch.uint16``.
    """
    torch = _require("torch", "torch")

    def tensor(a: np.ndarray) -> Any:
        if _is_bfloat16(a):  # numpy's DLPack cannot export ml_dtypes: pass the words, relabel
            return torch.from_dlpack(a.view(np.uint16)).view(torch.bfloat16)
        return torch.from_dlpack(a)

    out = {k: tensor(v) for k, v in _arrays(batch).items()}
    if device is None:
        return out
    return {k: v.to(device) for k, v in out.items()}


def to_jax(batch: Any, device: Any = None) -> dict[str, Any]:
    """``{label: jax.Array}`` via DLPack, placed on ``device`` (default ``jax.local_devices()[0]``).

    A DLPack import is committed to the CPU, where ``jax.jit`` would leave it; the put moves
    it to the default device like any other JAX array (a no-op alias on a CPU-only build).
    Engine buffers are 128-byte aligned, so the CPU import is zero-copy. bfloat16 arrays
    become ``jnp.bfloat16`` (a copy: DLPack cannot carry them).
    """
    jax = _require("jax", "jax")
    jnp = _require("jax.numpy", "jax")
    # This process's first device: in a multi-process job jax.devices()[0] belongs to process 0.
    target = jax.local_devices()[0] if device is None else device
    return {
        k: jax.device_put(jnp.asarray(v) if _is_bfloat16(v) else jnp.from_dlpack(v), target)
        for k, v in _arrays(batch).items()
    }


def to_tf(batch: Any) -> dict[str, Any]:
    """``{label: tf.Tensor}``, one CPU copy per array (``tf.convert_to_tensor``).

    TensorFlow's experimental DLPack import mishandles buffer ownership, so TF gets its own
    copy and never holds engine memory.
    """
    tf = _require("tensorflow", "tf")
    return {k: tf.convert_to_tensor(v) for k, v in _arrays(batch).items()}


# Why as_torch refuses DataLoader workers (measured: docs/distributed.md, "DataLoader workers").
WORKERS_REFUSED = (
    "as_torch(view) runs under DataLoader(num_workers=0) only: the engine already decodes on its own thread pool "
    "(threads=) and hands batches over without a copy, while a worker process would need an engine of its own (its "
    "threads do not survive the fork), hold its own residency budget and send every batch through a queue; measured, "
    "workers were no faster (docs/distributed.md). Use num_workers=0, and threads= for more decode parallelism"
)


def as_torch(view: Any, *, device: Any = None, pin_budget_bytes: int | None = None) -> Any:
    """A ``torch.utils.data.IterableDataset`` over ``view`` yielding dicts of tensors.

    Use with ``DataLoader(as_torch(ds.train), batch_size=None, num_workers=0)``: batching
    and parallelism already happen in the engine (its thread pool: ``threads=``). Under
    ``num_workers > 0`` iterating raises, saying why (:data:`WORKERS_REFUSED`).
    ``device`` moves each batch there
    (:func:`to_torch`). Page-locked batch buffers are not built here, so ``pin_budget_bytes``
    has nothing to cap: passing it warns.
    """
    _require("torch", "torch")
    from torch.utils.data import IterableDataset

    if pin_budget_bytes is not None:
        warnings.warn(
            "as_torch(pin_budget_bytes=...) has no effect: insitubatch_rs batch buffers are pageable (page-locked "
            "buffers are not implemented), so there is no pinned total to cap",
            RuntimeWarning,
            stacklevel=2,
        )

    class _TorchView(IterableDataset):  # type: ignore[type-arg]
        def __init__(self, view: Any) -> None:
            super().__init__()
            self.view = view

        def __iter__(self) -> Iterator[dict[str, Any]]:
            from torch.utils.data import get_worker_info

            if get_worker_info() is not None:
                raise RuntimeError(WORKERS_REFUSED)
            for batch in self.view:
                yield to_torch(batch, device=device)

    return _TorchView(view)


def as_tf_dataset(view: Any, *, prefetch: int = 2) -> Any:
    """``view`` as a ``tf.data.Dataset`` (``from_generator``), each element ``{label: tensor}``.

    The signature comes from ``view.geometries`` (after chunk transforms): each label is
    ``(None, *inner_shape)`` of its dtype, ``None`` because the last batch may be short.
    """
    tf = _require("tensorflow", "tf")
    signature = {
        label: tf.TensorSpec(shape=(None, *g.inner_shape), dtype=tf.as_dtype(g.dtype))
        for label, g in view.geometries.items()
    }

    def gen() -> Iterator[dict[str, np.ndarray]]:
        for batch in view:
            yield dict(_arrays(batch))

    ds = tf.data.Dataset.from_generator(gen, output_signature=signature)
    return ds.prefetch(prefetch) if prefetch else ds
