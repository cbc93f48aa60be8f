"""Framework adapters: numpy batches to torch / JAX / TensorFlow, on the device asked for.

Each framework is imported inside its function, so importing insitubatch_rs pulls none in
and a missing one raises an ImportError naming the extra to install.

Batch buffers are the engine's (Rust) memory and are never page-locked here. A copy to a
CUDA device goes through **page-locked staging buffers** instead: one process-wide pool,
capped by a byte budget (:func:`pin_host_buffers`, ``as_torch(pin_budget_bytes=...)``;
default an eighth of RAM), each buffer lent until the CUDA event recorded after its
``non_blocking`` copy has fired. insitubatch 0.2.0 pins the batch buffers themselves; staging keeps
page-locked memory out of the caller's hands, so a caller's own ``non_blocking`` copy can
never race the engine's buffer reuse, and the pool is the one place that bounds it.
"""

from __future__ import annotations

import collections
import operator
import os
import threading
import warnings
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np

from ._dataset import _SplitView

# Page-locked memory is a machine-wide resource the kernel cannot reclaim: insitubatch 0.2.0's
# default cap (an eighth of physical RAM, 1 GiB where RAM cannot be read).
_DEFAULT_PIN_FRACTION = 8
_FALLBACK_PIN_BUDGET = 1 << 30


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


def _default_pin_budget() -> int:
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // _DEFAULT_PIN_FRACTION
    except (AttributeError, ValueError, OSError):  # not POSIX
        return _FALLBACK_PIN_BUDGET


def _pin_budget(name: str, value: Any) -> int | None:
    """A page-locked byte budget: ``None`` (the default) or a positive integer."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise TypeError(f"{name} must be a byte count (an int) or None, got a bool ({value!r})")
    try:
        v = operator.index(value)
    except TypeError:
        raise TypeError(
            f"{name} must be a byte count (an int) or None for the default (an eighth of RAM), "
            f"got {type(value).__name__} {value!r}"
        ) from None
    if v <= 0:
        raise ValueError(
            f"{name} must be a positive byte count, got {v}; pass None for the default (an eighth of RAM)"
        )
    return v


class _StagingPool:
    """Page-locked staging buffers lent per host-to-device copy, bounded by ``budget`` bytes.

    A buffer is lent by :meth:`acquire` and comes back only when the completion handle held
    with it (a ``torch.cuda.Event`` recorded after the copy) reports that the copy has
    landed: Python refcounts cannot see an in-flight DMA, so the event is the only safe
    signal. Free buffers are keyed by byte size (every batch but an epoch's last has the
    same). When the budget is spent the pool first waits for the oldest copy in flight (its
    buffers come back), then drops idle buffers of other sizes, and only then lends nothing:
    the caller copies from pageable memory, and the pool warns once, as insitubatch 0.2.0 does.
    ``alloc(nbytes)`` makes one buffer; the pool itself has no framework in it.
    """

    def __init__(self, budget: int, alloc: Callable[[int], Any]) -> None:
        self._alloc = alloc
        self._lock = threading.Lock()  # every field below; held across an event wait, never user code
        self.budget = budget
        self.allocated = 0  # bytes of page-locked buffers alive (free, lent or in flight)
        self._free: dict[int, list[Any]] = collections.defaultdict(list)
        self._in_flight: collections.deque[tuple[Any, list[tuple[int, Any]], Any]] = collections.deque()
        self._warned = False

    def set_budget(self, budget: int) -> None:
        with self._lock:
            self.budget = budget
            self._warned = False
            self._drop_idle(0)

    def acquire(self, nbytes: int) -> Any | None:
        """A buffer of ``nbytes`` (lent until :meth:`hold` returns it), or ``None`` past the budget."""
        with self._lock:
            self._retire(wait=False)
            while True:
                free = self._free.get(nbytes)
                if free:
                    return free.pop()
                if self.allocated + nbytes <= self.budget:
                    buf = self._alloc(nbytes)
                    self.allocated += nbytes
                    return buf
                if self._in_flight:
                    self._retire(wait=True)
                    continue
                if self._drop_idle(nbytes):
                    continue
                self._warn(nbytes)
                return None

    def hold(self, done: Any, buffers: list[tuple[int, Any]], sources: Any) -> None:
        """Keep ``buffers`` (``(nbytes, buffer)`` pairs) and ``sources`` until ``done.query()``.

        Retire landed copies first, then take this hold: never the reverse, or a copy that
        landed at once would hand its buffers back before the caller used the result.
        """
        with self._lock:
            self._retire(wait=False)
            self._in_flight.append((done, buffers, sources))

    def _retire(self, *, wait: bool) -> None:
        """Return the buffers of landed copies; with ``wait``, wait for the oldest first."""
        if wait and self._in_flight:
            self._in_flight[0][0].synchronize()
        keep: collections.deque[tuple[Any, list[tuple[int, Any]], Any]] = collections.deque()
        for done, buffers, sources in self._in_flight:
            if done.query():
                for nbytes, buf in buffers:
                    self._free[nbytes].append(buf)
            else:
                keep.append((done, buffers, sources))
        self._in_flight = keep

    def _drop_idle(self, nbytes: int) -> bool:
        """Free idle buffers of other sizes until ``nbytes`` more fit (or none is left).

        True when something was freed. ``nbytes=0`` trims to the budget (after a lower one).
        """
        freed = False
        for size in sorted(self._free, reverse=True):
            while self._free[size] and self.allocated + nbytes > self.budget and size != nbytes:
                self._free[size].pop()
                self.allocated -= size
                freed = True
        return freed

    def _warn(self, nbytes: int) -> None:
        if self._warned:
            return
        self._warned = True
        warnings.warn(
            f"page-locked staging budget spent ({self.allocated / 2**20:.1f} MiB lent, {nbytes / 2**20:.1f} MiB "
            f"needed for the next array, budget {self.budget / 2**20:.1f} MiB): further copies go from pageable "
            "memory, which blocks the host thread until each copy ends. Raise pin_budget_bytes (or pin_host_buffers' budget_bytes), "
            "or lower batch_size",
            RuntimeWarning,
            stacklevel=5,
        )


_pool: _StagingPool | None = None
_pool_lock = threading.Lock()


def _staging_pool(torch: Any) -> _StagingPool:
    """The process-wide pool (CUDA streams and page-locked memory are process-wide)."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = _StagingPool(
                _default_pin_budget(), lambda n: torch.empty(n, dtype=torch.uint8, pin_memory=True)
            )
        return _pool


def _require_cuda(torch: Any, what: str) -> None:
    if not torch.cuda.is_available():
        raise RuntimeError(
            f"{what} needs CUDA, and torch.cuda.is_available() is False here; use device='cpu' (zero-copy) "
            "or run on a machine with CUDA"
        )


def pin_host_buffers(view: Any, *, budget_bytes: int | None = None) -> None:
    """Cap the page-locked memory that CUDA copies of ``view``'s batches stage through.

    insitubatch 0.2.0's non-DataLoader equivalent of ``as_torch(view, device="cuda",
    pin_budget_bytes=...)``: call it before iterating and convert each batch with
    ``to_torch(batch, device="cuda")``. Here the batch buffers stay the engine's; the
    page-locked memory is the staging pool those copies go through, one per process (as
    page-locked memory is a machine-wide resource), so the last budget set is the one in
    force. ``budget_bytes=None`` is an eighth of RAM. Nothing is allocated until a copy
    needs it.

    Raises:
        TypeError: ``budget_bytes`` is not an int (or is a bool), or ``view`` is not a split
            view.
        ValueError: ``budget_bytes <= 0``.
        ImportError: torch is not installed.
        RuntimeError: CUDA is not available.
    """
    budget = _pin_budget("budget_bytes", budget_bytes)
    if not isinstance(view, _SplitView):
        raise TypeError(f"pin_host_buffers takes a split view such as ds.train, got {type(view).__name__}")
    _cap_staging("pin_host_buffers", budget)


def _cap_staging(what: str, budget: int | None) -> None:
    torch = _require("torch", "torch")
    _require_cuda(torch, what)
    _staging_pool(torch).set_budget(_default_pin_budget() if budget is None else budget)


def _cpu_tensor(torch: Any, a: np.ndarray) -> Any:
    if _is_bfloat16(a):  # numpy's DLPack cannot export ml_dtypes: pass the words, relabel
        return torch.from_dlpack(a.view(np.uint16)).view(torch.bfloat16)
    return torch.from_dlpack(a)


def _to_cuda(torch: Any, tensors: dict[str, Any], arrays: Mapping[str, np.ndarray], device: Any) -> dict[str, Any]:
    """Copy each tensor to ``device`` through a staging buffer, ``non_blocking``.

    The host-side copy into the staging buffer is synchronous, so the engine's buffer is
    free again when this returns; the staging buffers (and, for an array past the budget,
    its pageable source) are held until the event recorded after the copies fires.
    """
    pool = _staging_pool(torch)
    lent: list[tuple[int, Any]] = []
    pageable: dict[str, np.ndarray] = {}
    out = {}
    for k, t in tensors.items():
        nbytes = t.numel() * t.element_size()
        buf = pool.acquire(nbytes) if nbytes else None
        if buf is None:
            pageable[k] = arrays[k]
            out[k] = t.to(device, non_blocking=True)
            continue
        lent.append((nbytes, buf))
        stage = buf[:nbytes].view(t.dtype).view(t.shape)
        stage.copy_(t)
        out[k] = stage.to(device, non_blocking=True)
    # The event belongs to the *target* device's current stream, where the copies went:
    # recorded on another device's stream it could fire before they land.
    with torch.cuda.device(device):
        event = torch.cuda.Event()
        event.record()
    pool.hold(event, lent, pageable)
    return out


def to_torch(batch: Any, device: Any = None) -> dict[str, Any]:
    """``{label: torch.Tensor}``, zero-copy on the CPU (DLPack), else copied to ``device``.

    ``device=None`` or a CPU device: tensors sharing the batch's memory. A CUDA device:
    each array is copied into a page-locked staging buffer from a bounded process-wide
    pool (:func:`pin_host_buffers`) and on with ``non_blocking=True``; the buffer is not
    lent again until a CUDA event recorded after the copy has fired, so nothing is
    overwritten mid-transfer. The copy is issued on the current CUDA stream: the host thread
    returns at once (the loader keeps decoding while it runs), and kernels queued after it on
    that stream wait for it; to overlap it with kernels already queued, call ``to_torch``
    under ``torch.cuda.stream(side_stream)`` and make the consuming stream wait on that one
    (``torch.cuda.current_stream().wait_stream(side_stream)``). Other devices get a blocking
    ``tensor.to(device)``. bfloat16 arrays (``ml_dtypes.bfloat16``) become
    ``torch.bfloat16``; without ml_dtypes they arrive as ``uint16`` words and stay so.

    Raises:
        ImportError: torch is not installed.
        RuntimeError: ``device`` is a CUDA device and CUDA is not available.
    """
    torch = _require("torch", "torch")
    arrays = _arrays(batch)
    tensors = {k: _cpu_tensor(torch, v) for k, v in arrays.items()}
    if device is None:
        return tensors
    dev = torch.device(device)
    if dev.type == "cpu":
        return tensors
    if dev.type == "cuda":
        _require_cuda(torch, f"to_torch(device={device!r})")
        return _to_cuda(torch, tensors, arrays, dev)
    return {k: v.to(dev) for k, v in tensors.items()}


def to_jax(batch: Any, device: Any = None) -> dict[str, Any]:
    """``{label: jax.Array}`` via DLPack, placed on ``device`` (default ``jax.local_devices()[0]``).

    A DLPack import is committed to the CPU, where ``jax.jit`` would leave it; the put moves
    it to the default device like any other JAX array (a no-op alias on a CPU-only build).
    Engine buffers are 128-byte aligned, so the CPU import is zero-copy. bfloat16 arrays
    become ``jnp.bfloat16`` (a copy: DLPack cannot carry them).

    Raises:
        ImportError: JAX is not installed.
    """
    jax = _require("jax", "jax")
    jnp = _require("jax.numpy", "jax")
    # This process's first device: in a multi-process job jax.devices()[0] belongs to process 0.
    target = jax.local_devices()[0] if device is None else device
    return {
        k: jax.device_put(jnp.asarray(v) if _is_bfloat16(v) else jnp.from_dlpack(v), target)
        for k, v in _arrays(batch).items()
    }


def to_jax_global(batch: Any, sharding: Any = None) -> dict[str, Any]:
    """``{label: jax.Array}`` spanning every process of a multi-process JAX job.

    Each process passes the batch its own rank drew (``rank=jax.process_index(),
    world_size=jax.process_count()``); the global array's leading axis is the processes'
    batches side by side, in process order, laid out as ``sharding`` says (default: the
    leading axis split over ``jax.devices()``, ``NamedSharding(Mesh(jax.devices(), ("batch",)),
    PartitionSpec("batch"))``). Ranks draw equal shares, so every process's n-th batch has
    the same length and the processes stay in step. This is
    ``jax.make_array_from_process_local_data`` per array; on one process it is the batch
    sharded over the local devices.

    Raises:
        ImportError: JAX is not installed.
        ValueError: an array's leading axis cannot be laid out as ``sharding`` asks (e.g. it
            does not divide among this process's devices), naming the array.
    """
    jax = _require("jax", "jax")
    jnp = _require("jax.numpy", "jax")
    if sharding is None:
        from jax.sharding import Mesh, NamedSharding, PartitionSpec

        sharding = NamedSharding(Mesh(np.array(jax.devices()), ("batch",)), PartitionSpec("batch"))
    out = {}
    for label, a in _arrays(batch).items():
        local = jnp.asarray(a) if _is_bfloat16(a) else a
        try:
            out[label] = jax.make_array_from_process_local_data(sharding, local)
        except ValueError as e:
            raise ValueError(
                f"to_jax_global: array {label!r} of shape {tuple(a.shape)} cannot be laid out as {sharding} "
                f"({e}); give a batch_size that this process's devices divide, or another sharding"
            ) from e
    return out


def to_tf(batch: Any) -> dict[str, Any]:
    """``{label: tf.Tensor}``, one CPU copy per array (``tf.convert_to_tensor``).

    TensorFlow's experimental DLPack import mishandles buffer ownership, so TF gets its own
    copy and never holds engine memory.

    Raises:
        ImportError: TensorFlow is not installed.
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
    Its ``state_dict()`` / ``load_state_dict(state)`` are the dataset's for the view's split
    (exact mid-epoch resume), so torchdata's ``StatefulDataLoader`` checkpoints it without
    fast-forwarding. ``device`` moves each batch there
    (:func:`to_torch`); for a CUDA device, ``pin_budget_bytes`` caps the page-locked
    staging pool (:func:`pin_host_buffers`; default an eighth of RAM). For any other device
    it is checked and has nothing to cap, as in insitubatch 0.2.0.

    Raises:
        TypeError: ``pin_budget_bytes`` is not an int (or is a bool).
        ValueError: ``pin_budget_bytes <= 0``.
        ImportError: torch is not installed.
        RuntimeError: ``device`` is a CUDA device and CUDA is not available; iterating the
            dataset under ``DataLoader(num_workers > 0)``.
    """
    budget = _pin_budget("pin_budget_bytes", pin_budget_bytes)
    torch = _require("torch", "torch")
    from torch.utils.data import IterableDataset

    if device is not None and torch.device(device).type == "cuda":
        _cap_staging(f"as_torch(device={device!r})", budget)

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

        def __len__(self) -> int:
            """The view's batches in a whole pass (``len(ds.train)``). A loader that knows the
            length need not fetch a batch ahead to see the end (Lightning does not), so a
            checkpoint taken between steps holds no batch that was read and not trained on.

            Raises:
                TypeError: the view has no length (``len(DataLoader)`` then says so too).
            """
            return len(self.view)

        def _dataset(self) -> Any:
            if not isinstance(self.view, _SplitView):
                raise TypeError(f"state_dict needs as_torch over a split view (ds.train, ...), got {self.view!r}")
            return self.view.dataset

        def state_dict(self) -> dict[str, Any]:
            """Where this view's latest pass stands: ``ds.state_dict(split)``, so torchdata's
            ``StatefulDataLoader`` saves the engine's checkpoint instead of a batch count."""
            return self._dataset().state_dict(self.view.split)  # type: ignore[no-any-return]

        def load_state_dict(self, state: Mapping[str, Any]) -> None:
            """``ds.load_state_dict(state)``: the next pass over the view continues where the
            saved one stopped (a ``StatefulDataLoader`` resumed with it does not fast-forward)."""
            self._dataset().load_state_dict(state)

    return _TorchView(view)


def as_tf_dataset(view: Any, *, prefetch: int = 2) -> Any:
    """``view`` as a ``tf.data.Dataset`` (``from_generator``), each element ``{label: tensor}``.

    The signature comes from ``view.geometries`` (after chunk transforms): each label is
    ``(None, *inner_shape)`` of its dtype, ``None`` because the last batch may be short.
    ``from_generator`` copies each array into TF (one CPU copy, as :func:`to_tf`).

    Raises:
        ImportError: TensorFlow is not installed.
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
