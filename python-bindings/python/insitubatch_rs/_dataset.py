"""``InSituDataset`` and its split views: insitubatch 0.2.0's dataset API over the Rust engine."""

from __future__ import annotations

import dataclasses
import json
import logging
import operator
import os
import sys
import threading
import warnings
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, TextIO, cast

import numpy as np

from . import _native
from ._runtime import PassStats, format_pass
from ._split import SplitManifest, native_manifest
from ._store import close_store, engine_store, reference_errors
from ._options import DatasetSpec, ReadPolicySpec
from ._reports import BadChunkJson, QualityPoint
from ._summary import DatasetReport, dataset_report
from ._transforms import native_chunk_transform
from ._types import ArrayGeometry, Batch, StoredChunkRead, native_geometry, split_name

logger = logging.getLogger("insitubatch")

# The engine's defaults (core's DatasetSpec::default()): one home, restated nowhere here.
_D = _native.defaults()
DEFAULT_MAX_INFLIGHT = _D["max_inflight"]
NO_REUSE_ENV = "INSITUBATCH_NO_BUFFER_REUSE"
# Values of the variable that leave reuse on; "off" reads as "no-reuse off".
_FALSY = ("", "0", "false", "no", "off")


def _reuse_enabled() -> bool:
    return os.environ.get(NO_REUSE_ENV, "").strip().lower() in _FALSY


@dataclasses.dataclass(frozen=True)
class SchedulerConfig:
    """The fetch configuration a dataset resolved to (read-only here).

    ``max_inflight``: storage reads in flight at once. ``read_ahead_chunks``: always ``0``,
    meaning computed (the engine derives each pass's read-ahead from its plan).
    ``decode_threads``: the thread pool's size, ``0`` for automatic. ``on_bad_chunk``:
    ``"raise"`` or ``"nan"``.
    """

    max_inflight: int = DEFAULT_MAX_INFLIGHT
    read_ahead_chunks: int = 0
    decode_threads: int = 0
    on_bad_chunk: str = _D["on_bad_chunk"]


def _node_ranks(node_affinity: Any) -> int | None:
    """The spec's ``node_ranks`` (ranks per node) from ``node_affinity``: ``None`` when off;
    ``True`` reads the launcher's ``LOCAL_WORLD_SIZE`` (torchrun, Lightning and Ray set it).
    The engine checks that it divides ``world_size``."""
    if node_affinity is False or node_affinity is None:
        return None
    if node_affinity is True:
        local = os.environ.get("LOCAL_WORLD_SIZE")
        if local is None or not local.strip().isdigit():
            raise ValueError(
                "node_affinity=True takes the ranks per node from the launcher's LOCAL_WORLD_SIZE, which is "
                f"{'not set' if local is None else repr(local)}; pass node_affinity=<ranks per node> instead"
            )
        return int(local)
    return _int("node_affinity", node_affinity)


def _ranks(rank: Any, world_size: Any) -> tuple[int, int]:
    """``(rank, world_size)``: as given, or ``torch.distributed``'s when it is initialized
    (looked up only if torch is already imported: a job that never imported it has no
    process group), else the spec's defaults. The engine checks them."""
    dist = sys.modules.get("torch.distributed")
    if (rank is None or world_size is None) and dist is not None and dist.is_available() and dist.is_initialized():
        rank = dist.get_rank() if rank is None else rank
        world_size = dist.get_world_size() if world_size is None else world_size
    rank = _D["rank"] if rank is None else rank
    world_size = _D["world_size"] if world_size is None else world_size
    return _int("rank", rank), _int("world_size", world_size)


def _int(name: str, value: Any) -> int:
    """An integer option as a Python ``int`` (``TypeError`` for a non-integer, as
    ``operator.index`` says); its range is the engine's to check (a ``ValueError`` naming it)."""
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an integer, got {type(value).__name__}") from None


def _axis_sizes(name: str, sizes: Mapping[Any, Any] | None) -> dict[str | int, int] | None:
    """``{axis: count}`` with each axis a dimension name or an axis index and each count an
    integer (``TypeError`` otherwise); the engine checks the rest."""
    if sizes is None:
        return None
    out: dict[str | int, int] = {}
    for k, v in sizes.items():
        if not isinstance(k, str):
            try:
                k = operator.index(k)
            except TypeError:
                raise TypeError(f"a {name} axis is a dimension name or an axis index, got {k!r}") from None
        out[k] = _int(f"{name}[{k!r}]", v)
    return out


def _count(name: str, value: Any, minimum: int) -> int:
    """An integer argument of a method (not an option): converted here (``TypeError`` for a
    non-integer), then checked by the engine's count rule (``ValueError`` naming it)."""
    try:
        v = operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an integer, got {type(value).__name__}") from None
    return _native.checked_count(name, v, minimum)


def _per_sample(name: str, values: Any, dtype: Any) -> list[Any] | None:
    """A per-sample array (a numpy array, list, ...) as the list the engine takes; the engine
    checks its length and values."""
    if values is None:
        return None
    a = np.asarray(values)
    if a.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional (one entry per sample), got shape {a.shape}")
    if dtype is bool and a.dtype != np.bool_:
        raise TypeError(f"{name} must be booleans, got dtype {a.dtype}; compare to get a mask, e.g. values > 0")
    return a.astype(dtype).tolist()  # type: ignore[no-any-return]


def _computed_mask(store: Any, spec: Any, storage_options: Mapping[str, Any] | None, concat_dim: str | None) -> Any:
    """``sample_mask=(variable, fn)``: ``variable`` (an array path of the store, sample axis 0)
    read whole once at open, through the engine (the same store, options and reads as the
    dataset), and ``fn`` called on its values, sample axis first; what it returns is the mask.
    Any other ``sample_mask`` is returned as given."""
    if not (isinstance(spec, tuple) and len(spec) == 2 and callable(spec[1])):
        return spec
    variable, fn = spec
    from ._store import open_geometries

    opts = dict(storage_options or {})
    geom = open_geometries(store, [str(variable)], concat_dim=concat_dim, **opts)[str(variable)]
    n = geom.n_samples
    values: np.ndarray | None = None
    with InSituDataset(
        store,
        geometries={"v": geom},
        batch_size=geom.sample_chunk_size,
        shuffle=False,
        storage_options=storage_options,
        concat_dim=concat_dim,
    ) as reader:
        for b in reader.all:
            if values is None:
                values = np.empty((n, *b["v"].shape[1:]), b["v"].dtype)
            values[b.sample_indices] = b["v"]
    mask = np.asarray(fn(values))
    if mask.shape != (n,) or mask.dtype != np.bool_:
        raise ValueError(
            f"sample_mask's function must return one bool per sample ({n} for {variable!r}), got "
            f"{mask.dtype} of shape {mask.shape}; return a comparison, e.g. lambda v: v.mean(axis=(1, 2)) > 0"
        )
    return mask


def _sel(sel: Mapping[str, Any] | None) -> dict[str, Any]:
    """``sel={"time": (lo, hi), "lat": slice(lo, hi), "level": [500, 850]}`` as the spec's
    ``sel``: a tuple or a slice is an inclusive range ``[lo, hi]``, a list exactly those
    labels in that order (as xarray's ``sel``), ``{"labels": [...]}``; dates (strings,
    ``datetime``, ``datetime64``) as ISO text to the nanosecond, numbers as floats. The engine
    checks them against each coordinate and decides which is the sample axis."""
    out: dict[str, Any] = {}
    for dim, pick in (sel or {}).items():
        if isinstance(pick, slice) and pick.step is None:
            pick = (pick.start, pick.stop)
        is_range = isinstance(pick, tuple)
        values = list(pick) if isinstance(pick, (tuple, list, np.ndarray)) else None
        if values is None or (is_range and (len(values) != 2 or None in values)) or not values:
            raise ValueError(
                f"sel[{dim!r}] must be a (low, high) tuple or slice(low, high), both inclusive, or a list of labels; "
                f"got {pick!r}"
            )
        labels = [_label(v) for v in values]
        out[str(dim)] = labels if is_range else {"labels": labels}
    return out


def _label(v: Any) -> float | str:
    """One ``sel`` label as the spec writes it: a number, or a date as ISO text."""
    if isinstance(v, (int, float, np.number)) and not isinstance(v, (bool, np.bool_)):
        return float(v)
    return str(np.datetime_as_string(np.datetime64(v, "ns"), unit="ns"))


def _probe_chunks(probe: bool | int) -> int:
    """``probe=True``: the engine's default number of chunks read at once; a number: that many."""
    if probe is True:
        return _D["probe_chunks"]
    return _count("probe", probe, 1)


class BatchIterator(Iterator[Batch]):
    """One pass over a view. ``next()`` blocks with the GIL released; Ctrl-C interrupts it
    (and ends the pass). Closing or dropping it ends the pass, which logs its summary line
    at INFO on the ``insitubatch`` logger and updates ``ds.last_pass``. Threads may share
    one: each batch goes to exactly one ``next()``, and the pass ends once."""

    def __init__(self, dataset: InSituDataset, split: str, stream: _native.NativeStream) -> None:
        self._dataset = dataset
        self._split = split
        self._epoch = dataset.epoch
        self._stream = stream
        self._reuse = dataset._reuse
        self._done = False
        self._finish_lock = threading.Lock()  # several threads may see the end at once

    def __iter__(self) -> BatchIterator:
        return self

    def __next__(self) -> Batch:
        """The pass's next batch; an error ends the pass.

        A chunk or batch transform's own exception is re-raised with its type and traceback.

        Raises:
            StopIteration: the pass has yielded every batch, or was closed.
            InsitubatchIOError: a storage request failed (after retries), or a stored chunk
                could not be decoded under ``on_bad_chunk="raise"``.
            RuntimeError: the disk tier refused (a chunk missing from a ``readonly_cache``),
                or the engine found a stall it cannot resolve.
            KeyboardInterrupt: Ctrl-C while waiting for the batch.
        """
        if self._done:
            raise StopIteration
        try:
            item = self._stream.next()
        except BaseException:
            self._finish()
            raise
        if item is None:
            self._finish()
            raise StopIteration
        arrays, idx, offsets, index, epoch, origins, dims, part, coords = item
        if not self._reuse:  # the escape hatch: batches in fresh memory, never a recycled buffer
            arrays = {k: np.array(v, copy=True) for k, v in arrays.items()}
            idx = np.array(idx, copy=True)
            origins = None if origins is None else np.array(origins, copy=True)
        return Batch(arrays, idx, offsets, index, epoch, origins, dims, part, coords)

    def __len__(self) -> int:
        return len(self._stream)

    def state_dict(self) -> dict[str, Any]:
        """Where this pass stands after the batch it returned last: a small dict (seed,
        epoch, split, batch size, world size, samples and batches consumed per rank, earlier
        world sizes). ``ds.load_state_dict`` resumes it in any process, with any world size."""
        return json.loads(self._stream.checkpoint_json())

    @property
    def stats(self) -> PassStats | None:
        """This pass's stats so far (``None`` once it ended: see ``ds.last_pass``)."""
        s = self._stream.stats_json()
        return None if s is None else PassStats._from_engine(json.loads(s))

    def close(self) -> None:
        """End the pass now."""
        self._finish()

    def _finish(self) -> None:
        with self._finish_lock:
            if self._done:
                return
            self._done = True
        self._stream.close()
        self._dataset._pass_ended(self._split, self._epoch)

    def __del__(self) -> None:
        try:
            self._finish()
        except Exception:  # noqa: BLE001 - best effort at garbage collection
            pass


class _SplitView:
    """A re-iterable split view (``ds.train``, ``ds.val``, ``ds.test``, ``ds.all``); each
    ``iter()`` starts a pass at the dataset's epoch, over the dataset's one shared pool.

    ``dataset`` and ``split`` are the dataset and the split's name. Iterating a view of a
    closed dataset raises ``ValueError``; what a pass raises is under ``BatchIterator``.
    """

    def __init__(self, dataset: InSituDataset, split: str) -> None:
        self.dataset = dataset
        self.split = split

    def __iter__(self) -> BatchIterator:
        return self.dataset._start(self.split)

    def __len__(self) -> int:
        """Batches one pass over this view yields on this rank (the last may be short)."""
        n = len(self.dataset.draw_order(self.split))
        return -(-n // self.dataset.batch_size)

    @property
    def geometries(self) -> dict[str, ArrayGeometry]:
        """Each label's geometry after the chunk transforms (what the batches hold)."""
        return self.dataset._out_geometries()

    def sample_indices(self) -> np.ndarray:
        """The samples this view reads, in chunk order."""
        return self.dataset.manifest.sample_indices(self.split)

    def __repr__(self) -> str:
        return f"View({self.split!r}, {self.dataset._url!r})"


View = _SplitView  # the name this package used before insitubatch 0.2.0's


class InSituDataset:
    """A dataset over one Zarr store: shuffled/sequential split views sharing one pool.

    ``store`` is the store's URL (``file://``, ``s3://``, ``gs://``, ``az://``,
    ``http(s)://``) or a local path, an obstore store (read in Rust, at the URL's speed; a
    zarr ``ObjectStore`` over one, as ``obstore_store`` makes, is unwrapped), or any
    zarr-python v3 ``Store`` (``FsspecStore``, an Icechunk session's store, ...: read through
    its async API, slower). A dict ``{name: store}`` of these joins several stores that share
    the sample axis into one dataset: store ``name``'s arrays are ``name/path`` (labels,
    ``geometries``, ``patch`` and transforms name them so), read under one plan, one
    ``max_inflight`` and one byte budget; their sample-axis lengths and, where each has
    the sample axis's coordinate, its values must agree (docs/joins.md). A list ``[store, ...]``
    reads the stores end to end along the sample axis (a decade kept one store per year):
    every array with the dimension ``concat_dim`` (default ``"time"``; for arrays without
    dimension names, the sample axis) is the stores' arrays in order, the others come from
    the first store; the stores must agree on all but that length, and each but the last hold
    whole chunks along it (docs/joins.md). A list inside a join (``{"era5": [a, b],
    "static": c}``) is concatenated first. ``manifest`` defaults
    to ``split_by_chunk`` of the first variable. ``geometries`` maps batch labels to ``ArrayGeometry`` (several labels may
    read one array at different offsets via ``geom.shift(k)``); ``None`` discovers every
    data array.

    ``batch_size``: samples per batch (an epoch's last batch may be short). ``block_chunks``:
    chunks per shuffle block (widened so a block holds a batch). ``max_inflight``: storage
    reads in flight (``None``: the engine's default). ``seed``: the draw order's seed, the same
    ``(seed, epoch)`` giving the same batches on every target. ``shuffle=False`` reads the train
    view in order. ``prefetch_depth``: batches queued ahead (0 is taken as 1).
    ``cache_budget_bytes``: the pool's byte budget (``None``: sized automatically).
    ``on_bad_chunk``: ``"raise"`` or ``"nan"`` for a chunk that cannot be read (docs/errors.md).
    Every option's default and its spelling in JavaScript and on the CLI: docs/reference/options.md.

    ``chunk_transforms``: callables ``(DecodedChunk) -> DecodedChunk`` (or returning the new
    ``data`` array), ``applies([...], fn)`` to scope one to some array paths, or a
    ``StandardScaler``. They run once per chunk on the engine's pool (cached with the chunk);
    a transform that reshapes or recasts declares ``output_inner(geom) -> (inner_shape, dtype)``.
    ``batch_transforms``: callables ``(Batch) -> Batch`` run per batch after gather. A
    transform's exception ends the pass and is re-raised by the iteration.

    ``cache_dir`` spills decoded chunks to memory-mapped files there (local disk) under the
    same byte budget; ``persist=True`` keeps them across epochs, evictions and runs;
    ``readonly_cache=True`` reads a complete warm cache shared by many processes and raises
    on a miss; ``reset_stale_cache=True`` drops the chunks of arrays whose pipeline changed
    instead of raising. One writer or many readers per directory (a lock held until
    ``close()``); ours beyond that: ``shared_cache=True`` (with ``persist=True``) lets any
    number of processes fill and read one directory together, each chunk written once by
    whichever process fetched it first (a machine's ranks; docs/distributed.md).

    Ours beyond insitubatch 0.2.0's arguments: ``storage_options`` (object_store settings, for a
    URL; a store object carries its own), ``threads`` (the engine's thread-pool size; ``None`` = one per core),
    and ``rank``/``world_size``: this process's share of every epoch (each rank reads its own
    chunks and draws as many samples as every other; ``None`` takes them from an initialized
    ``torch.distributed``, else 0 and 1), and ``first_block_chunks``: a smaller first shuffle
    block for each epoch, so the first batch waits for fewer chunks (fat chunks: a faster
    first batch), at a cost in mixing the epoch's first samples that ``describe()`` reports
    (``None``: ``block_chunks``, the specified order). ``node_affinity``: each node (a run
    of ranks per node: ``True`` takes the launcher's ``LOCAL_WORLD_SIZE``, or pass the count)
    draws the same chunks in every epoch, reshuffled, so with a ``shared_cache`` per node the
    second epoch reads from it; ``describe()`` reports the mixing cost.
    ``state_dict()``/``load_state_dict()`` save and resume
    a pass mid-epoch, with the same or another world size (docs/distributed.md).
    ``read_policy``: how reads are made, over the engine's defaults: ``retries``,
    ``backoff_s``, ``request_timeout_s``; ``coalesce_gap_bytes`` and ``coalesce_max_bytes``
    (inner chunks of one shard this close are read by one request, up to that size);
    ``hedge=False`` never sends a second request for a slow read (docs/cloud.md).
    ``patch``: cut each sample into patches, ``{axis: size}`` keyed by dimension name (the
    arrays' ``dimension_names``/``_ARRAY_DIMENSIONS``) or axis index; a variable without
    those axes is read whole. ``patch_mode="grid"`` (the default) draws every patch of a
    grid stepping ``patch_stride`` (``{axis: step}``, default the size; a remainder narrower
    than a patch at the far edge is not drawn); ``"random"`` draws ``patches_per_sample`` patches at
    random origins per sample and epoch (default 1), the same for the same ``(seed, epoch)``.
    Each batch row is then a patch (``batch.patch_origins``), every chunk is read at most once
    per epoch, and of a chunk tiled on the patched axes only the tiles the patches touch are
    read and held (the budget counts them; docs/patches.md).
    ``sample_mask``: one bool per sample on the sample axis; a ``False`` sample is never
    drawn. Or ``(variable, fn)``: the array ``variable`` of the store (a cheap one: a
    per-sample series, a coarse field) is read whole at open and ``fn(values)`` (sample axis
    first) returns the mask, e.g. ``("land_frac", lambda v: v.mean(axis=(1, 2)) > 0.3)``.
    ``sample_weights``: one weight per sample, its expected draws per epoch (0 to
    1024; a weight of 2 is drawn twice as often as a weight of 1, a fractional part is one
    more draw with that probability, the same for the same ``(seed, epoch)``). Every chunk
    is still read once per epoch; an epoch has about the sum of the weights in rows, and
    ``describe()`` says so with the weights' effective sample size (docs/sampling.md).
    ``model_parallel=k`` with ``model_parallel_axis``: a rank mesh, ``world_size / k``
    data-parallel groups of ``k`` consecutive ranks; the ranks of a group draw the same rows
    and each gets its part of every row along that axis (``numpy.array_split``'s parts,
    ``batch.model_part``), so a model sharded over the group's devices gets its slices
    (docs/distributed.md).
    ``callbacks``: callables ``(PassStats) -> None``, each called with every pass's report
    when the pass ends (TensorBoard, W&B, OpenTelemetry; an exception goes to
    ``sys.unraisablehook``). ``metrics_address="HOST:PORT"``: serve the reports as
    Prometheus metrics there (port 0 picks a free one: ``ds.metrics_address``; a port alone
    listens on loopback), every series labelled with the split, rank and world size
    (docs/distributed.md). ``metrics_cors_origin="http://host:port"``: the one web origin
    whose pages may read them (the dashboard watching the job); without it no page may
    (docs/security.md).
    ``coords=True``: read the sample axis's coordinate (the 1-d array named like its
    dimension, CF time decoded to ``datetime64[ns]``) once at open; every batch carries each
    row's value in ``batch.coords``. ``sel={"time": ("2010-01-01", "2019-12-31")}``: only
    the samples whose coordinate lies in that range (inclusive), split as ``sample_range``
    is; a list draws exactly the samples of those labels. On an inner dimension's coordinate
    a range (``"lat": (30, 60)``, a tuple or a ``slice``; a decreasing coordinate too) cuts
    every row to that region and a list (``"level": [500, 850]``) picks those positions in
    that order, reading only the tiles they touch; patches on a selected axis lie inside its
    range (docs/coordinates.md).

    The split views are ``ds.train``, ``ds.val``, ``ds.test`` and ``ds.all`` (``View``); the
    arguments ``store``, ``chunk_transforms`` and ``batch_transforms`` stay attributes. After
    ``close()``, what needs the engine (a pass, ``describe``, ``epoch``, ``manifest``,
    ``state_dict``, ...) raises ``ValueError``.

    Raises:
        TypeError: a numeric argument that is not an integer; a ``store`` that is not a URL,
            a path, an obstore store or a zarr-python ``Store``; a ``manifest`` that is not a
            ``SplitManifest``; a geometry that is not an ``ArrayGeometry``; a transform that
            is not callable.
        ValueError: an argument out of range (``batch_size < 1``, ``rank >= world_size``,
            ``on_bad_chunk`` not ``"raise"`` or ``"nan"``, ...); an unparsable URL; a
            ``cache_budget_bytes`` below the residency floor; an unknown ``read_policy`` key;
            a chunk transform scoped to an array the dataset does not read; a
            ``readonly_cache`` whose ``cache_dir`` does not exist; a geometry or configuration
            the engine refuses.
        ArrayNotFoundError: ``geometries`` names an array the store does not have (also a
            ``KeyError``).
        NotAnArrayError: ``geometries`` names a group (also a ``TypeError``).
        InsitubatchIOError: the store cannot be opened or read: nothing at the path, an
            unsupported URL scheme, ``storage_options`` for a local store, a failed request,
            malformed metadata.
        RuntimeError: the disk tier refuses ``cache_dir``: another writer holds its lock
            (or readers and ``shared_cache`` fillers meet), or its chunks are stale and
            ``reset_stale_cache`` is not set.
    """

    def __init__(
        self,
        store: Any,
        manifest: SplitManifest | None = None,
        geometries: Mapping[str, ArrayGeometry] | None = None,
        *,
        batch_size: int = _D["batch_size"],
        block_chunks: int = _D["block_chunks"],
        max_inflight: int | None = None,
        seed: int = _D["seed"],
        shuffle: bool = _D["shuffle"],
        prefetch_depth: int = _D["prefetch_depth"],
        cache_dir: str | os.PathLike[str] | None = None,
        cache_budget_bytes: int | None = _D["cache_budget_bytes"],
        persist: bool = _D["persist"],
        readonly_cache: bool = _D["readonly_cache"],
        reset_stale_cache: bool = _D["reset_stale_cache"],
        shared_cache: bool = _D["shared_cache"],
        on_bad_chunk: str = _D["on_bad_chunk"],
        chunk_transforms: Sequence[Any] = (),
        batch_transforms: Sequence[Any] = (),
        storage_options: Mapping[str, Any] | None = None,
        threads: int | None = _D["threads"],
        rank: int | None = None,
        world_size: int | None = None,
        node_affinity: bool | int = False,
        first_block_chunks: int | None = _D["first_block_chunks"],
        read_policy: Mapping[str, Any] | None = None,
        patch: Mapping[str | int, int] | None = None,
        patch_mode: str | None = _D["patch_mode"],
        patch_stride: Mapping[str | int, int] | None = None,
        patches_per_sample: int | None = _D["patches_per_sample"],
        sample_mask: Any = None,
        sample_weights: Any = None,
        model_parallel: int = _D["model_parallel"],
        model_parallel_axis: str | int | None = None,
        callbacks: Sequence[Any] = (),
        metrics_address: str | None = _D["metrics_address"],
        metrics_cors_origin: str | None = _D["metrics_cors_origin"],
        coords: bool = _D["coords"],
        sel: Mapping[str, tuple[Any, Any] | slice | Sequence[Any]] | None = None,
        concat_dim: str | None = None,
    ) -> None:
        lists = isinstance(store, (list, tuple)) or (
            isinstance(store, Mapping) and any(isinstance(s, (list, tuple)) for s in store.values())
        )
        if concat_dim is not None and not lists:
            raise ValueError("concat_dim names the dimension a list of stores is concatenated along; pass a list")
        self.store = store
        self._store = engine_store(store)
        self._url = self._store if isinstance(self._store, str) else str(self._store)
        rank_, world_size_ = _ranks(rank, world_size)
        # Every option as the engine's spec (its type generated from core's DatasetSpec, so
        # mypy checks each key; the extension reads it with serde and refuses a key it lacks,
        # and core resolves it: defaults, bounds and the rules between options). Here only
        # what Python alone can do: integers as ints, numpy as lists, torch's ranks, the
        # launcher's LOCAL_WORLD_SIZE, dates as text. `None` is the spec's default.
        spec: DatasetSpec = {
            "batch_size": _int("batch_size", batch_size),
            "block_chunks": _int("block_chunks", block_chunks),
            "first_block_chunks": None if first_block_chunks is None else _int("first_block_chunks", first_block_chunks),
            "seed": _int("seed", seed),
            "shuffle": bool(shuffle),
            "prefetch_depth": _int("prefetch_depth", prefetch_depth),
            "cache_budget_bytes": None if cache_budget_bytes is None else _int("cache_budget_bytes", cache_budget_bytes),
            "on_bad_chunk": on_bad_chunk,
            "coords": bool(coords),
            "threads": None if threads is None else _int("threads", threads),
            "rank": rank_,
            "world_size": world_size_,
            "node_ranks": _node_ranks(node_affinity),
            "model_parallel": _int("model_parallel", model_parallel),
            "model_parallel_axis": model_parallel_axis,
            "sel": _sel(sel),
            "sample_mask": _per_sample("sample_mask", _computed_mask(store, sample_mask, storage_options, concat_dim), bool),
            "sample_weights": _per_sample("sample_weights", sample_weights, np.float64),
            "patch": _axis_sizes("patch", patch),
            "patch_mode": patch_mode,
            "patch_stride": _axis_sizes("patch_stride", patch_stride),
            "patches_per_sample": None if patches_per_sample is None else _int("patches_per_sample", patches_per_sample),
            "storage_options": {str(k): str(v) for k, v in (storage_options or {}).items()},
            "cache_dir": None if cache_dir is None else os.fspath(cache_dir),
            "persist": bool(persist),
            "readonly_cache": bool(readonly_cache),
            "reset_stale_cache": bool(reset_stale_cache),
            "shared_cache": bool(shared_cache),
            "metrics_address": metrics_address,
            "metrics_cors_origin": metrics_cors_origin,
        }
        # Absent (`None` here) is the engine's default.
        if max_inflight is not None:
            spec["max_inflight"] = _int("max_inflight", max_inflight)
        if read_policy is not None:
            spec["read_policy"] = cast(ReadPolicySpec, dict(read_policy))  # its keys are the engine's to check
        if concat_dim is not None:
            spec["concat_dim"] = concat_dim
        self._spec = spec
        # The stream of the latest pass per split (its checkpoint outlives the pass), and a
        # loaded state waiting for the next pass over its split.
        self._streams: dict[str, _native.NativeStream] = {}
        self._pending: dict[str, str] = {}
        self.chunk_transforms = tuple(chunk_transforms)
        self.batch_transforms = tuple(batch_transforms)
        for t in self.batch_transforms:
            if not callable(t):
                raise TypeError(f"a batch transform must be callable (Batch) -> Batch, got {t!r}")
        self._callbacks = list(callbacks)
        self._reuse = _reuse_enabled()
        self._native = self._open(manifest, geometries)
        self._url = self._native.url  # a join's names every store
        if cache_dir is not None:
            for message in self._native.cache_warnings():
                warnings.warn(message, RuntimeWarning, stacklevel=2)
        asked = self._spec["block_chunks"]
        if self._native.block_chunks != asked:
            logger.info(
                "block_chunks widened %d -> %d so a %d-sample batch fits one shuffle-block (%d sample(s) per chunk)",
                asked,
                self._native.block_chunks,
                self.batch_size,
                self._native.manifest.sample_chunk_size,
            )
        self._last_pass: PassStats | None = None
        self.train = _SplitView(self, "train")
        self.val = _SplitView(self, "val")
        self.test = _SplitView(self, "test")
        self.all = _SplitView(self, "all")

    def _open(self, manifest: Any, geometries: Mapping[str, ArrayGeometry] | None) -> _native.NativeDataset:
        """Build the engine's dataset (it opens the arrays and checks the rest)."""
        variables = None
        if geometries is not None:
            variables = [(str(label), native_geometry(g)) for label, g in geometries.items()]
        with reference_errors():
            return _native.NativeDataset(
                self._store,
                native_manifest(manifest),
                variables,
                self._spec,
                chunk_transforms=[native_chunk_transform(t) for t in self.chunk_transforms],
                batch_transforms=list(self.batch_transforms),
                callbacks=self._callbacks,
            )

    def _option(self, key: str) -> Any:
        """An option as given, else the spec's default."""
        return self._spec.get(key, _D[key])  # type: ignore[literal-required]  # a key of the spec

    # -- the engine -------------------------------------------------------------------
    def _ds(self) -> _native.NativeDataset:
        return self._native

    def _start(self, split: str) -> BatchIterator:
        """A pass over ``split``: resumed from a loaded state for this epoch, else fresh."""
        native = self._ds()
        pending = self._pending.pop(split, None)
        if pending is not None and json.loads(pending)["epoch"] == self.epoch:
            stream = native.resume(pending)
        else:
            stream = native.iter(split)
        self._streams[split] = stream
        return BatchIterator(self, split, stream)

    @property
    def rank(self) -> int:
        """This process's rank (its share of every epoch)."""
        return int(self._option("rank"))

    @property
    def world_size(self) -> int:
        """Processes sharing every epoch."""
        return int(self._option("world_size"))

    def state_dict(self, split: str = "train") -> dict[str, Any]:
        """Where the latest pass over ``split`` (default ``train``) stands, as a small dict
        (torchdata's ``Stateful``): the same on every rank of a job that steps in lockstep,
        so rank 0 may save it alone. Before a pass at the current epoch, a fresh one.

        Raises:
            ValueError: an unknown split, or the dataset is closed.
        """
        name = split_name(split)
        stream = self._streams.get(name)
        if stream is not None:
            state: dict[str, Any] = json.loads(stream.checkpoint_json())
            if state["epoch"] == self.epoch:
                return state
        return json.loads(self._native.fresh_checkpoint_json(name, self.epoch))

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resume from ``state_dict()``'s dict, saved with this or another world size: sets the
        epoch to the state's, and the next pass over its split continues where it stopped
        (with the same world size, exactly the batches the uninterrupted pass would have
        yielded next; with another, this rank's share of the samples no rank had consumed).
        ``set_epoch`` to another epoch first discards it.

        Raises:
            ValueError: a state this dataset cannot resume (malformed, or taken with another
                seed or batch size), or the dataset is closed.
        """
        raw = json.dumps(dict(state))
        self._native.check_resume(raw)  # refused here, not at the next pass
        self._pending[split_name(state["split"])] = raw
        self.set_epoch(state["epoch"])

    def _pass_ended(self, split: str, epoch: int) -> None:
        """A pass of ours ended: keep its stats and log them (if they are its own)."""
        raw = None if self._native.closed else self._native.last_pass_json()
        if raw is None:
            return
        stats = PassStats._from_engine(json.loads(raw))
        if stats.split != split or stats.epoch != epoch:
            return  # another pass ended meanwhile (threads): do not report it as this one
        self._last_pass = stats
        if logger.isEnabledFor(logging.INFO):
            logger.info("%s", format_pass(stats, reuse=self._reuse))

    def view(self, split: str) -> _SplitView:
        """The view of ``split`` (``"train"``, ``"val"``, ``"test"``, ``"all"`` or a
        ``SplitName``): ``ds.view("train")`` is ``ds.train``.

        Raises:
            ValueError: an unknown split.
        """
        return getattr(self, _native.parse_split(split_name(split)))

    def set_epoch(self, epoch: int) -> None:
        """Reshuffle deterministically for ``epoch`` (applies to passes started after).

        Raises:
            TypeError: ``epoch`` is not an integer.
            ValueError: ``epoch < 0``, or the dataset is closed.
        """
        self._native.set_epoch(_count("epoch", epoch, 0))

    @property
    def epoch(self) -> int:
        """The epoch the next pass draws (``set_epoch``)."""
        return self._native.epoch

    @property
    def manifest(self) -> SplitManifest:
        """Which chunks belong to each split (as given, or ``split_by_chunk`` of the first
        variable)."""
        return SplitManifest._from_native(self._native.manifest)

    @property
    def geometries(self) -> dict[str, ArrayGeometry]:
        """Label → geometry as read (before chunk transforms; see ``view.geometries``)."""
        return {label: ArrayGeometry._wrap(g) for label, g in self._native.variables}

    @property
    def variables(self) -> list[str]:
        """The batch labels, in order."""
        return [label for label, _ in self._native.variables]

    @property
    def batch_size(self) -> int:
        """Samples per batch (an epoch's last batch may be short)."""
        return int(self._option("batch_size"))

    @property
    def seed(self) -> int:
        """The seed of every epoch's draw order."""
        return int(self._option("seed"))

    @property
    def shuffle(self) -> bool:
        """Whether the train view is shuffled (the other views are read in order)."""
        return bool(self._option("shuffle"))

    @property
    def prefetch_depth(self) -> int:
        """Batches queued ahead (at least 1: the engine's, as resolved)."""
        return self._native.prefetch_depth

    @property
    def block_chunks(self) -> int:
        """Chunks per shuffle block, after widening."""
        return self._native.block_chunks

    @property
    def scheduler_config(self) -> SchedulerConfig:
        """The fetch configuration (read-only: fixed when the dataset is built).

        Raises:
            AttributeError: on assignment (pass ``max_inflight=``, ``threads=`` and
                ``on_bad_chunk=`` to ``InSituDataset`` instead).
        """
        threads = self._option("threads")
        return SchedulerConfig(self._option("max_inflight"), 0, threads or 0, self._option("on_bad_chunk"))

    @scheduler_config.setter
    def scheduler_config(self, value: object) -> None:
        raise AttributeError(
            "scheduler_config is fixed when the dataset is built here: pass max_inflight=, threads= and "
            "on_bad_chunk= to InSituDataset (the read-ahead is always computed)"
        )

    def draw_order(self, split: str, epoch: int | None = None) -> np.ndarray:
        """The anchors a pass over ``split`` at ``epoch`` (default: the current one) will
        yield, in order.

        Raises:
            TypeError: ``epoch`` is not an integer.
            ValueError: an unknown split, ``epoch < 0``, or the dataset is closed.
        """
        return self._native.draw_order(split_name(split), self.epoch if epoch is None else _count("epoch", epoch, 0))

    # -- reports ----------------------------------------------------------------------
    def describe(self, iterations: int = 1, *, probe: bool | int = False) -> DatasetReport:
        """The static report (geometry + configuration only; never touches the store).

        ``probe=True`` (or a number of chunks; ``True``: the engine's default number) also times a few real reads and
        decodes of the store and adds ``report["probe"]``: the measured time to first byte,
        per-connection and concurrent rates, decode rate, the epoch it predicts for the train
        view (``predicted``: seconds, MB/s, first batch, limiting stage, requests) and a
        ``suggested_max_inflight`` / ``suggested_block_chunks`` for the measured latency
        (docs/cloud.md). The probe's reads are not kept: the next pass starts cold.

        Raises:
            TypeError: ``iterations`` is not an integer, or ``probe`` neither a bool nor one.
            ValueError: ``iterations < 1`` or a number ``probe < 1``, or the dataset is closed.
            InsitubatchIOError: a read or decode of the probe failed.
        """
        raw = json.loads(self._native.describe_json(_count("iterations", iterations, 1)))
        cache = ("cache_dir", "persist", "readonly_cache", "reset_stale_cache", "shared_cache")
        report = dataset_report(raw, cache={k: self._option(k) for k in cache})
        if probe:
            report["probe"] = json.loads(self._native.probe("train", _probe_chunks(probe))[0])
        return report

    def quality_curve(self, block_chunks: Sequence[int]) -> list[QualityPoint]:
        """What-ifs (ours): for each ``block_chunks`` value, what :meth:`describe` would say
        with it, the rest of this dataset's options kept, at the current epoch: the widened
        block size, ``quality`` (the train order's shuffle quality), ``floor_bytes`` and
        ``estimated_peak_bytes``. Built from the metadata already read; nothing is fetched.
        An explicit ``cache_budget_bytes`` and the disk tier are left out of these builds.
        The dashboard's quality-against-memory plot and the CLI's ``describe
        --sweep-block-chunks`` are the same function.

        Raises:
            TypeError: a value is not an integer.
            ValueError: a value ``< 1``, one the engine refuses, or the dataset is closed.
        """
        values = [_count("block_chunks", v, 1) for v in block_chunks]
        return list(json.loads(self._native.quality_curve_json(values)))

    def print_summary(self, iterations: int = 1, file: TextIO | None = None, *, probe: bool | int = False) -> None:
        """Print :meth:`describe` for a human (to ``file``, default stdout); ``probe`` as there.

        Raises:
            TypeError: ``iterations`` is not an integer, or ``probe`` neither a bool nor one.
            ValueError: ``iterations < 1`` or a number ``probe < 1``, or the dataset is closed.
            InsitubatchIOError: a read or decode of the probe failed.
        """
        text = self._native.render_summary(_count("iterations", iterations, 1))
        if probe:
            text += self._native.probe("train", _probe_chunks(probe))[1]
        print(text, end="", file=file)

    @property
    def metrics_address(self) -> str | None:
        """Where the Prometheus endpoint listens (``HOST:PORT``), or ``None`` without one."""
        return self._native.metrics_address()

    @property
    def last_pass(self) -> PassStats | None:
        """Stats of the last pass that ended, or ``None`` before one has."""
        if self._native.closed:
            return self._last_pass
        raw = self._native.last_pass_json()
        return None if raw is None else PassStats._from_engine(json.loads(raw))

    @property
    def cache_hits(self) -> int:
        """Chunk admissions served from residency in the last pass."""
        lp = self.last_pass
        return 0 if lp is None else lp.cache_hits

    @property
    def cache_misses(self) -> int:
        """Chunk admissions that loaded (fetch + decode, or a disk revive) in the last pass."""
        lp = self.last_pass
        return 0 if lp is None else lp.cache_misses

    @property
    def resident_peak(self) -> int:
        """Most chunks resident at once during the last pass (pool-wide)."""
        lp = self.last_pass
        return 0 if lp is None else lp.depths.resident_peak

    @property
    def inflight_peak(self) -> int:
        """Most storage reads in flight at once during the last pass."""
        lp = self.last_pass
        return 0 if lp is None else lp.depths.inflight_peak

    @property
    def cache_budget_bytes(self) -> int:
        """The residency budget in force for one iteration (explicit, or the automatic floor)."""
        return int(self.describe()["config"]["cache_budget_bytes"])

    @property
    def bad_chunks(self) -> list[StoredChunkRead]:
        """Tiles filled under ``on_bad_chunk="nan"``, as ``StoredChunkRead(array, chunk_index,
        inner_coord)`` (``error`` says why)."""
        bad: list[BadChunkJson] = json.loads(self._native.bad_chunks_json())
        return [StoredChunkRead(b["array"], b["chunk_index"], tuple(b["inner_coord"]), b["error"]) for b in bad]

    def _out_geometries(self) -> dict[str, ArrayGeometry]:
        """Each label's geometry after the chunk transforms (the engine's)."""
        return {label: ArrayGeometry._wrap(g) for label, g in self._native.output_geometries}

    # -- lifetime ---------------------------------------------------------------------
    def close(self) -> None:
        """Release the pool, its cache files' handles, the lock on ``cache_dir`` and an
        fsspec store's session (``close_store``). Idempotent; ``with InSituDataset(...) as
        ds:`` calls it on leaving the block."""
        if not self._native.closed:
            raw = self._native.last_pass_json()
            if raw is not None:
                self._last_pass = PassStats._from_engine(json.loads(raw))
            # A session our reads made, on zarr's loop (python-bindings/src/pystore.rs).
            close_store(self.store)
        self._native.close()

    @property
    def closed(self) -> bool:
        """Whether ``close()`` was called."""
        return self._native.closed

    def __enter__(self) -> InSituDataset:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"epoch={self.epoch}"
        return f"InSituDataset({self._url!r}, {state})"
