"""insitubatch_rs: train in place on n-dimensional Zarr tensors (the Rust engine, from Python).

Mirrors the Python *insitubatch* API: ``open_geometries`` → ``split_by_chunk`` →
``InSituDataset`` with ``.train/.val/.test/.all`` views yielding numpy ``Batch`` objects
(zero-copy views of engine buffers). Framework adapters (``as_torch``, ``to_torch``,
``to_jax``) import their framework lazily.
"""

from __future__ import annotations

import atexit
import dataclasses
import json
import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from . import _native
from ._native import (
    ArrayGeometry,
    InsitubatchIOError,
    SplitManifest,
    StandardScaler,
    valid_anchor_range,
)

# Engine threads may be mid-transform when Python exits: stop them from re-entering the
# interpreter during finalization (see python-bindings/src/transforms.rs).
atexit.register(_native._shutdown)

__all__ = [
    "ArrayGeometry",
    "Batch",
    "ChunkRead",
    "DecodedChunk",
    "InSituDataset",
    "InsitubatchIOError",
    "SplitManifest",
    "StandardScaler",
    "View",
    "applies",
    "as_torch",
    "open_geometries",
    "split_by_chunk",
    "to_jax",
    "to_torch",
    "valid_anchor_range",
]

_SPLITS = ("train", "val", "test", "all")


def _storage_options(opts: Mapping[str, Any] | None) -> list[tuple[str, str]]:
    return [(str(k), str(v)) for k, v in (opts or {}).items()]


def _check_local(url: str) -> None:
    """A missing local store is an I/O error, not an empty store (as the Rust CLI does)."""
    from urllib.parse import urlparse
    from urllib.request import url2pathname

    parsed = urlparse(url)
    if parsed.scheme == "file" and not os.path.exists(url2pathname(parsed.path)):
        raise InsitubatchIOError(f"no Zarr store exists at this path: {url}")


def open_geometries(
    url: str,
    variables: Sequence[str] | None = None,
    *,
    sample_axis: int = 0,
    **storage_options: Any,
) -> dict[str, ArrayGeometry]:
    """Read each array's geometry from the store's metadata (no chunk reads).

    ``variables=None`` discovers every data array (CF coordinates skipped).
    ``storage_options`` are object_store settings (``aws_region="..."``).
    """
    _check_local(url)
    if isinstance(variables, str):
        variables = [variables]
    geoms = _native.open_geometries(
        url, None if variables is None else list(variables), sample_axis, _storage_options(storage_options)
    )
    return {g.path: g for g in geoms}


def split_by_chunk(
    geom: ArrayGeometry,
    *,
    fractions: tuple[float, float, float] = (0.8, 0.1, 0.1),
    seed: int = 0,
    contiguous: bool = True,
    sample_range: tuple[int, int] | None = None,
) -> SplitManifest:
    """Partition ``geom``'s sample-axis chunks into train/val/test (chunk-aligned)."""
    return _native.split_by_chunk(
        geom, fractions=tuple(fractions), seed=seed, contiguous=contiguous, sample_range=sample_range
    )


@dataclasses.dataclass(frozen=True)
class ChunkRead:
    """Which chunk a transform is looking at (the anchor's ``ChunkRead``): the zarr array path
    and the chunk index along the sample axis. Frozen and hashable."""

    array: str
    chunk_index: int


@dataclasses.dataclass
class DecodedChunk:
    """What a chunk transform receives (the anchor's ``DecodedChunk(read, data, sample_offset)``).

    ``data`` is the logical chunk ``(rows, *inner)``: sample axis first, contiguous, with no
    edge padding; a short final chunk arrives short. ``sample_offset`` is the global index of
    its first row. Return the chunk with new data (``dataclasses.replace(chunk, data=...)``,
    ``chunk.replace(data)``), or just the new array.
    """

    read: ChunkRead
    data: np.ndarray
    sample_offset: int

    @property
    def array(self) -> str:
        """The zarr array path (``read.array``)."""
        return self.read.array

    @property
    def chunk_index(self) -> int:
        """The chunk index along the sample axis (``read.chunk_index``)."""
        return self.read.chunk_index

    def replace(self, data: np.ndarray) -> DecodedChunk:
        """The same chunk with other data."""
        return DecodedChunk(self.read, data, self.sample_offset)


class _Scoped:
    """A chunk transform restricted to some zarr array **paths** (see ``applies``)."""

    __slots__ = ("arrays", "transform")

    def __init__(self, arrays: list[str], transform: Any) -> None:
        self.arrays = arrays
        self.transform = transform

    def __call__(self, chunk: DecodedChunk) -> DecodedChunk:
        return self.transform(chunk)

    def __repr__(self) -> str:
        return f"applies({self.arrays!r}, {self.transform!r})"


def _cache_token(transform: Any) -> str:
    """What identifies a Python chunk transform to a persisted cache (``cache_dir`` +
    ``persist``): two transforms with the same token must produce the same bytes.

    In order: a ``cache_key`` attribute (declare one and bump it on every re-fit); a SHA-256
    of the cloudpickle of the callable when cloudpickle is installed (catches edited code and
    closure values); else a SHA-256 of its qualified name, source, closure cell values and
    repr, with a warning that large numpy statistics may repr identically after a re-fit.
    """
    import hashlib

    key = getattr(transform, "cache_key", None)
    if key is not None:
        return f"key:{key}"
    try:
        import cloudpickle  # type: ignore[import-not-found]

        return "pickle:" + hashlib.sha256(cloudpickle.dumps(transform)).hexdigest()
    except Exception:  # not installed, or not picklable: fall back to the source
        pass
    import inspect
    import warnings

    target = getattr(transform, "__call__", transform) if not inspect.isroutine(transform) else transform
    parts = [getattr(transform, "__qualname__", type(transform).__qualname__)]
    try:
        parts.append(inspect.getsource(target))
    except (OSError, TypeError):
        parts.append("<no source>")
    for cell in getattr(target, "__closure__", None) or ():
        try:
            parts.append(repr(cell.cell_contents))
        except ValueError:
            parts.append("<empty cell>")
    parts.append(repr(transform))
    warnings.warn(
        f"chunk transform {parts[0]} is fingerprinted for the persisted cache by its source and repr; numpy "
        "summarizes arrays over 1000 elements in repr, so a re-fit with large statistics may reopen the cache "
        "as a hit. Give it a cache_key you bump on every fit, or install cloudpickle",
        stacklevel=3,
    )
    return "src:" + hashlib.sha256("\0".join(parts).encode()).hexdigest()


def applies(arrays: Sequence[str], transform: Any) -> _Scoped:
    """Scope a chunk transform to the named zarr array paths (not labels).

    Unknown paths raise ``ValueError`` when the dataset is built.
    """
    if isinstance(arrays, str):
        raise TypeError(
            f"applies({arrays!r}, ...): a string would scope to its characters. Write applies([{arrays!r}], ...)"
        )
    scope = [str(a) for a in arrays]
    if not scope:
        raise ValueError(f"applies([], {transform!r}) has an empty scope; name at least one array")
    validate = getattr(transform, "validate_scope", None)
    if validate is not None:
        validate(scope)
    return _Scoped(scope, transform)


def _chunk_transform(t: Any) -> tuple[list[str] | None, Any]:
    if isinstance(t, _Scoped):
        return t.arrays, t.transform
    if not (callable(t) or isinstance(t, StandardScaler)):
        raise TypeError(f"a chunk transform must be callable (DecodedChunk) -> DecodedChunk, got {t!r}")
    return None, t


@dataclasses.dataclass(eq=False, repr=False, slots=True)
class Batch(Mapping[str, np.ndarray]):
    """A model-ready batch: label → ``(rows, *inner)`` numpy array, rows aligned.

    The arrays are zero-copy views of engine buffers; dropping them returns the memory
    to the engine for reuse. numpy has no bfloat16: a bfloat16 array comes as
    ``ml_dtypes.bfloat16`` when ml_dtypes is importable (JAX brings it;
    ``pip install ml_dtypes`` otherwise), else as its raw ``uint16`` words.

    A dataclass like the anchor's ``Batch(arrays, sample_indices, offsets)``, so a batch
    transform may return ``dataclasses.replace(batch, arrays={...})``.
    """

    arrays: dict[str, np.ndarray]
    sample_indices: np.ndarray
    offsets: dict[str, int] = dataclasses.field(default_factory=dict)
    index: int = 0
    epoch: int = 0

    def __getitem__(self, label: str) -> np.ndarray:
        return self.arrays[label]

    def __iter__(self) -> Iterator[str]:
        return iter(self.arrays)

    def __len__(self) -> int:
        """Rows in the batch (only an epoch's last batch is short)."""
        return int(self.sample_indices.shape[0])

    @property
    def labels(self) -> list[str]:
        return list(self.arrays)

    def read_indices(self, label: str) -> np.ndarray:
        """Where each row of ``label`` was read on the sample axis: anchor + offset."""
        if label not in self.arrays:
            raise KeyError(label)
        return self.sample_indices + np.int64(self.offsets.get(label, 0))

    def stack(self, labels: Sequence[str], axis: int = 1) -> np.ndarray:
        """Stack ``labels`` along a new ``axis`` (default 1: ``(rows, len(labels), *inner)``), a copy."""
        if not labels:
            raise ValueError("stack needs at least one label")
        arrays = []
        for label in labels:
            if label not in self.arrays:
                raise ValueError(f"batch has no label {label!r}")
            arrays.append(self.arrays[label])
        first = arrays[0]
        if any(a.shape != first.shape or a.dtype != first.dtype for a in arrays):
            raise ValueError(f"cannot stack {list(labels)!r}: shapes or dtypes differ")
        return np.stack(arrays, axis=axis)

    def __repr__(self) -> str:
        shapes = ", ".join(f"{k}: {v.dtype}{list(v.shape)}" for k, v in self.arrays.items())
        return f"Batch(epoch={self.epoch}, index={self.index}, rows={len(self)}, {{{shapes}}})"


class BatchIterator(Iterator[Batch]):
    """One pass over a view. ``next()`` blocks with the GIL released; Ctrl-C interrupts it
    (and ends the pass). Dropping or closing it ends the pass."""

    def __init__(self, stream: _native.NativeStream) -> None:
        self._stream = stream

    def __iter__(self) -> BatchIterator:
        return self

    def __next__(self) -> Batch:
        item = self._stream.next()
        if item is None:
            raise StopIteration
        arrays, idx, offsets, index, epoch = item
        return Batch(arrays, idx, offsets, index, epoch)

    def __len__(self) -> int:
        return len(self._stream)

    @property
    def stats(self) -> dict[str, Any] | None:
        s = self._stream.stats_json()
        return None if s is None else json.loads(s)

    def close(self) -> None:
        self._stream.close()


class View:
    """A re-iterable split view; each ``iter()`` starts a pass at the dataset's epoch."""

    def __init__(self, dataset: InSituDataset, split: str) -> None:
        self.dataset = dataset
        self.split = split

    def __iter__(self) -> BatchIterator:
        return BatchIterator(self.dataset._ds().iter(self.split))

    def __len__(self) -> int:
        """Batches one pass over this view yields (the last may be short)."""
        n = len(self.dataset.draw_order(self.split))
        return -(-n // self.dataset.batch_size)

    def sample_indices(self) -> np.ndarray:
        """The samples this view reads, in chunk order."""
        return self.dataset.manifest.sample_indices(self.split)

    def __repr__(self) -> str:
        return f"View({self.split!r}, {self.dataset._url!r})"


class InSituDataset:
    """A dataset over one Zarr store: shuffled/sequential split views sharing one pool.

    ``geometries`` maps batch labels to ``ArrayGeometry`` (several labels may read one array
    at different offsets via ``geom.shift(k)``); ``None`` discovers every data array. The
    ``manifest`` defaults to ``split_by_chunk`` of the first geometry.

    ``chunk_transforms``: callables ``(DecodedChunk) -> DecodedChunk`` (or returning the new
    ``data`` array), ``applies([...], fn)`` to scope one to some array paths, or a
    ``StandardScaler``. They run once per chunk on the engine's pool (cached with the chunk);
    a transform that reshapes or recasts declares ``output_inner(geom) -> (inner_shape, dtype)``.
    ``batch_transforms``: callables ``(Batch) -> Batch`` run per batch after gather. A
    transform's exception ends the pass and is re-raised by the iteration.

    ``cache_dir`` spills decoded chunks to memory-mapped files there (local disk) under the
    same byte budget; ``persist=True`` keeps them across epochs, evictions and runs (a later
    run revives them with no fetch or decode); ``readonly_cache=True`` reads a complete warm
    cache shared by many processes and raises on a miss; ``reset_stale_cache=True`` drops
    the chunks of arrays whose pipeline changed instead of raising. One writer or many
    readers per directory (an advisory lock held until ``close()``).
    """

    def __init__(
        self,
        url: str,
        manifest: SplitManifest | None = None,
        geometries: Mapping[str, ArrayGeometry] | None = None,
        *,
        batch_size: int = 32,
        block_chunks: int = 16,
        max_inflight: int = 32,
        seed: int = 0,
        shuffle: bool = True,
        prefetch_depth: int = 2,
        cache_budget_bytes: int | None = None,
        on_bad_chunk: str = "raise",
        storage_options: Mapping[str, Any] | None = None,
        threads: int | None = None,
        chunk_transforms: Sequence[Any] = (),
        batch_transforms: Sequence[Any] = (),
        cache_dir: str | os.PathLike[str] | None = None,
        persist: bool = False,
        readonly_cache: bool = False,
        reset_stale_cache: bool = False,
    ) -> None:
        if not isinstance(url, str):
            raise TypeError(f"url must be a str store URL (file://, s3://, ...), got {type(url).__name__}")
        self._url = url
        _check_local(url)
        variables = None if geometries is None else list(geometries.items())
        chunk = [_chunk_transform(t) for t in chunk_transforms]
        for t in batch_transforms:
            if not callable(t):
                raise TypeError(f"a batch transform must be callable (Batch) -> Batch, got {t!r}")
        self.batch_size = batch_size
        self._native: _native.NativeDataset = _native.NativeDataset(
            url,
            manifest,
            variables,
            batch_size=batch_size,
            block_chunks=block_chunks,
            max_inflight=max_inflight,
            seed=seed,
            shuffle=shuffle,
            prefetch_depth=prefetch_depth,
            cache_budget_bytes=cache_budget_bytes,
            on_bad_chunk=on_bad_chunk,
            storage_options=_storage_options(storage_options),
            threads=threads,
            chunk_transforms=chunk,
            batch_transforms=list(batch_transforms),
            cache_dir=None if cache_dir is None else os.fspath(cache_dir),
            persist=persist,
            readonly_cache=readonly_cache,
            reset_stale_cache=reset_stale_cache,
        )
        if cache_dir is not None:
            import warnings

            for message in self._native.cache_warnings():
                warnings.warn(message, RuntimeWarning, stacklevel=2)
        self.train = View(self, "train")
        self.val = View(self, "val")
        self.test = View(self, "test")
        self.all = View(self, "all")

    def _ds(self) -> _native.NativeDataset:
        return self._native

    def view(self, split: str) -> View:
        if split not in _SPLITS:
            raise ValueError(f"unknown split {split!r}; expected one of {_SPLITS}")
        return getattr(self, split)

    def set_epoch(self, epoch: int) -> None:
        """Reshuffle deterministically for ``epoch`` (applies to passes started after)."""
        self._native.set_epoch(epoch)

    @property
    def epoch(self) -> int:
        return self._native.epoch

    @property
    def manifest(self) -> SplitManifest:
        return self._native.manifest

    @property
    def geometries(self) -> dict[str, ArrayGeometry]:
        return dict(self._native.variables)

    @property
    def block_chunks(self) -> int:
        """Chunks per shuffle block, after widening."""
        return self._native.block_chunks

    def draw_order(self, split: str, epoch: int | None = None) -> np.ndarray:
        """The anchors a pass over ``split`` at ``epoch`` will yield, in order."""
        return self._native.draw_order(split, self.epoch if epoch is None else epoch)

    def describe(self, iterations: int = 1) -> dict[str, Any]:
        """The static report (geometry + configuration only; never touches the store)."""
        return json.loads(self._native.describe_json(iterations))

    def print_summary(self, iterations: int = 1) -> None:
        print(self._native.render_summary(iterations))

    @property
    def last_pass(self) -> dict[str, Any] | None:
        """Stats of the last pass that ended, or ``None``."""
        s = self._native.last_pass_json()
        return None if s is None else json.loads(s)

    @property
    def bad_chunks(self) -> list[dict[str, Any]]:
        """Chunks filled under ``on_bad_chunk="nan"``."""
        return json.loads(self._native.bad_chunks_json())

    def close(self) -> None:
        self._native.close()

    @property
    def closed(self) -> bool:
        return self._native.closed

    def __enter__(self) -> InSituDataset:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"epoch={self.epoch}"
        return f"InSituDataset({self._url!r}, {state})"


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


def to_torch(batch: Mapping[str, np.ndarray]) -> dict[str, Any]:
    """``{label: torch.Tensor}`` sharing memory with the batch (DLPack, no copy).

    bfloat16 arrays (``ml_dtypes.bfloat16``) become ``torch.bfloat16`` tensors over the same
    memory. Without ml_dtypes they arrive as ``uint16`` words and stay ``torch.uint16``.
    """
    torch = _require("torch", "torch")

    def tensor(a: np.ndarray) -> Any:
        if _is_bfloat16(a):  # numpy's DLPack cannot export ml_dtypes: pass the words, relabel
            return torch.from_dlpack(a.view(np.uint16)).view(torch.bfloat16)
        return torch.from_dlpack(a)

    return {k: tensor(v) for k, v in batch.items()}


def to_jax(batch: Mapping[str, np.ndarray]) -> dict[str, Any]:
    """``{label: jax.Array}`` via DLPack (zero-copy on CPU where jax allows it).

    bfloat16 arrays become ``jnp.bfloat16`` (JAX copies those: DLPack cannot carry them).
    """
    jnp = _require("jax.numpy", "jax")
    return {k: jnp.asarray(v) if _is_bfloat16(v) else jnp.from_dlpack(v) for k, v in batch.items()}


def as_torch(view: View) -> Any:
    """A ``torch.utils.data.IterableDataset`` over ``view`` yielding dicts of tensors.

    Use with ``DataLoader(as_torch(ds.train), batch_size=None, num_workers=0)``: batching
    and parallelism already happen in the engine.
    """
    _require("torch", "torch")
    from torch.utils.data import IterableDataset

    class _TorchView(IterableDataset):  # type: ignore[type-arg]
        def __init__(self, view: View) -> None:
            super().__init__()
            self.view = view

        def __iter__(self) -> Iterator[dict[str, Any]]:
            for batch in self.view:
                yield to_torch(batch)

    return _TorchView(view)
