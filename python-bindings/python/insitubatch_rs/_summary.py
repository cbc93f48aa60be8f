"""``describe()``: the engine's static report in insitubatch 0.2.0's ``DatasetReport`` shape.

The engine computes every number (``core/src/describe.rs``, from the same functions that
size the pool); this module only reshapes it. The shapes are declared once, on the Rust types
(their ``x-python`` extension), and generated with the TypedDicts into ``_reports.py``
(tools/boundary-types): ``variables`` keyed by label, ``[name, value]`` pairs as dicts, shapes
as tuples, and the reference implementation's keys where ours were named differently or are
the package's own (``memory.working_set_bytes``, ``config.cache_dir``/``persist``/
``readonly_cache``/``assembles``, ``logical_chunk_bytes``), which this module fills in. Our extra keys stay
(``codecs``, ``shard``, ``floor_bytes``, ``read_once_bytes``, ``recycled_bytes``,
``disk_tier``, ``batches_per_epoch``, ...).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ._reports import (
    DICT_FIELDS,
    PYTHON_NAMES,
    TUPLE_FIELDS,
    ConfigReport,
    DatasetReport,
    DatasetReportJson,
    MemoryReport,
    Note,
    ProbeReport,
    VariableReport,
    VariableReportJson,
)
from ._types import itemsize

# The report's TypedDicts, generated from the Rust types (re-exported: the public names).
__all__ = [
    "ConfigReport",
    "DatasetReport",
    "MemoryReport",
    "Note",
    "ProbeReport",
    "VariableReport",
    "dataset_report",
    "reshape",
]


def reshape(struct: str, raw: Mapping[str, Any]) -> dict[str, Any]:
    """The engine's JSON object of the Rust struct ``struct`` as the package shows it, by
    ``_reports``' tables (the ``x-python`` extension of the Rust types): its lists given as
    tuples, its ``[name, value]`` pairs as dicts, its fields under the reference
    implementation's names; the rest as it came, in its order."""
    tuples = TUPLE_FIELDS.get(struct, frozenset())
    dicts = DICT_FIELDS.get(struct, frozenset())
    names = PYTHON_NAMES.get(struct, {})
    out: dict[str, Any] = {}
    for key, value in raw.items():
        if key in tuples and value is not None:
            value = tuple(value)
        elif key in dicts:
            value = {name: v for name, v in value}
        out[names.get(key, key)] = value
    return out


def _variable(v: VariableReportJson) -> VariableReport:
    out = reshape("VariableReport", v)
    rows = min(v["sample_chunk_size"], v["n_samples"])
    out["logical_chunk_bytes"] = rows * math.prod(v["output_inner_shape"]) * itemsize(v["output_dtype"])
    return out  # type: ignore[return-value]


def dataset_report(raw: DatasetReportJson, *, cache: Mapping[str, Any]) -> DatasetReport:
    """Reshape the engine's report. ``cache`` holds the disk-tier arguments the dataset was
    built with (``cache_dir``, ``persist``, ``readonly_cache``, ``reset_stale_cache``,
    ``shared_cache``)."""
    variables = {v["label"]: _variable(v) for v in raw["variables"]}
    memory = reshape("MemoryReport", raw["memory"])
    # The automatic budget of one iteration, as the engine sized it (read-once within half
    # the memory available, never below the floor).
    memory["working_set_bytes"] = memory["automatic_budget_bytes"]
    c = reshape("ConfigReport", raw["config"])
    c["n_chunks"] = {label: v["n_chunks"] for label, v in variables.items()}
    explicit = c["cache_budget_bytes"]
    c["cache_budget_bytes"] = memory["working_set_bytes"] if explicit is None else explicit
    c.update(cache)
    # Every chunk is assembled into one sample-first slot on the thread pool, transform or not.
    c["assembles"] = True
    if c["drawable_samples"].get("train", 0) < 2:
        c["shuffle_quality"] = None  # one anchor or none has no order to score
    notes = [reshape("Note", n) for n in raw["notes"]]
    return DatasetReport(variables=variables, config=c, memory=memory, notes=notes)  # type: ignore[typeddict-item]
