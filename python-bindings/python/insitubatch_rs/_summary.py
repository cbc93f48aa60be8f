"""``describe()``: the engine's static report in the anchor's ``DatasetReport`` shape.

The engine computes every number (``core/src/describe.rs``, from the same functions that
size the pool); this module only reshapes it: ``variables`` keyed by label, dict-valued
config fields, shapes as tuples, and the anchor's keys where ours were named differently
(``memory.working_set_bytes``, ``config.cache_dir``/``persist``/``readonly_cache``/
``assembles``). Our extra keys stay (``codecs``, ``shard``, ``floor_bytes``,
``read_once_bytes``, ``recycled_bytes``, ``disk_tier``, ``batches_per_epoch``, ...).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Literal, TypedDict

from ._types import itemsize


class VariableReport(TypedDict, total=False):
    """One variable's geometry and the per-chunk bytes derived from it."""

    label: str
    path: str
    dtype: str
    shape: tuple[int, ...]
    chunks: tuple[int, ...]  # the fetch unit (a sharded array's inner chunk)
    shard: tuple[int, ...] | None
    codecs: list[str]
    sample_axis: int
    sample_chunk_size: int
    n_samples: int
    n_chunks: int
    offset: int
    inner_shape: tuple[int, ...]
    inner_chunks: tuple[int, ...]
    stored_chunks_per_chunk: int
    stored_chunk_bytes: int  # one decoded tile, padding included
    logical_chunk_bytes: int  # the first chunk after chunk transforms, no padding
    slot_bytes: int  # what the pool charges for one chunk
    ragged_multiplier: float  # decoded (padded) bytes over logical bytes
    gather_run_bytes: int
    output_inner_shape: tuple[int, ...]
    output_dtype: str


class ConfigReport(TypedDict, total=False):
    """What the dataset resolved to: derived values, not the arguments passed in."""

    batch_size: int
    block_chunks: int
    block_chunks_requested: int
    first_block_chunks: int  # block_chunks unless a smaller first block was asked for
    max_inflight: int
    prefetch_depth: int
    shuffle: bool
    seed: int
    epoch: int
    cache_budget_bytes: int  # the budget in force for one iteration (explicit or automatic)
    cache_dir: str | None
    persist: bool
    readonly_cache: bool
    reset_stale_cache: bool
    shared_cache: bool  # ours: several processes fill this cache_dir together
    disk_tier: str | None
    on_bad_chunk: str
    chunk_transforms: tuple[str, ...]
    batch_transforms: tuple[str, ...]
    assembles: bool
    windowed: bool
    offsets: dict[str, int]
    samples_per_chunk: int
    n_chunks: dict[str, int]
    split_chunks: dict[str, int]
    drawable_samples: dict[str, int]
    batches_per_epoch: dict[str, int]
    shuffle_quality: float | None


class MemoryReport(TypedDict, total=False):
    """The memory model, evaluated for this configuration."""

    iterations: int
    residency_bytes: int
    resident_max_bytes: int  # the most the pool can hold: the budget, or the whole store when less
    inflight_bytes: int
    read_ahead_bytes: int  # stored bytes of a shard's inner chunks read ahead, at most
    queue_bytes: int
    scratch_bytes: int
    recycled_bytes: int
    accounted_bytes: int
    estimated_peak_bytes: int
    budget_is_automatic: bool
    working_set_bytes: int  # the automatic budget for one iteration
    floor_bytes: int
    read_once_bytes: int
    automatic_budget_bytes: int
    memory_available_bytes: int | None  # what the automatic budget takes at most half of
    reread_bytes_max: int  # below read-once: chunk bytes a train epoch may fetch again


class Note(TypedDict):
    """One finding; ``severity`` is ``warn`` or ``note``."""

    code: str
    severity: Literal["warn", "note", "warning"]
    subject: str
    message: str


class _ProbeField(TypedDict, total=False):
    probe: dict[str, Any]


class DatasetReport(_ProbeField):
    """The whole static picture, returned by ``InSituDataset.describe``; with ``probe=True``
    also ``probe``: what a few timed reads measured and the epoch they predict (the engine's
    ``ProbeReport``, docs/cloud.md)."""

    variables: dict[str, VariableReport]
    config: ConfigReport
    memory: MemoryReport
    notes: list[Note]


_SHAPES = ("shape", "chunks", "inner_shape", "inner_chunks", "output_inner_shape")


def _variable(v: dict[str, Any]) -> VariableReport:
    out: dict[str, Any] = dict(v)
    for k in _SHAPES:
        out[k] = tuple(int(x) for x in v[k])
    if v.get("shard") is not None:
        out["shard"] = tuple(int(x) for x in v["shard"])
    rows = min(v["sample_chunk_size"], v["n_samples"])
    out["logical_chunk_bytes"] = rows * math.prod(out["output_inner_shape"]) * itemsize(v["output_dtype"])
    return out  # type: ignore[return-value]


def dataset_report(raw: dict[str, Any], *, cache: Mapping[str, Any]) -> DatasetReport:
    """Reshape the engine's report. ``cache`` holds the disk-tier arguments the dataset was
    built with (``cache_dir``, ``persist``, ``readonly_cache``, ``reset_stale_cache``,
    ``shared_cache``)."""
    variables = {v["label"]: _variable(v) for v in raw["variables"]}
    memory: dict[str, Any] = dict(raw["memory"])
    # The automatic budget of one iteration, as the engine sized it (read-once within half
    # the memory available, never below the floor).
    memory["working_set_bytes"] = memory["automatic_budget_bytes"]
    c: dict[str, Any] = dict(raw["config"])
    for k in ("offsets", "split_chunks", "drawable_samples", "batches_per_epoch"):
        c[k] = {name: value for name, value in c[k]}
    c["chunk_transforms"] = tuple(c["chunk_transforms"])
    c["batch_transforms"] = tuple(c["batch_transforms"])
    c["n_chunks"] = {label: v["n_chunks"] for label, v in variables.items()}
    explicit = c["cache_budget_bytes"]
    c["cache_budget_bytes"] = memory["working_set_bytes"] if explicit is None else explicit
    c.update(cache)
    # Every chunk is assembled into one sample-first slot on the thread pool, transform or not.
    c["assembles"] = True
    if c["drawable_samples"].get("train", 0) < 2:
        c["shuffle_quality"] = None  # one anchor or none has no order to score
    notes = [dict(n) for n in raw["notes"]]
    return DatasetReport(variables=variables, config=c, memory=memory, notes=notes)  # type: ignore[typeddict-item]
