"""``describe()``: the engine's static report in insitubatch 0.2.0's ``DatasetReport`` shape.

The engine computes every number (``core/src/describe.rs``, from the same functions that
size the pool); this module only reshapes it. The shapes are declared once, on the Rust types
(their ``x-python`` extension), and generated with the TypedDicts into ``_reports.py``
(tools/boundary-types): ``variables`` keyed by label, ``[name, value]`` pairs as dicts, shapes
as tuples, the reference implementation's names where ours differ (``config.n_chunks`` and
``cache_budget_bytes``, ``memory.working_set_bytes``), its fixed ``config.assembles``; the
disk-tier arguments (``config.cache_dir``/``persist``/``readonly_cache``/...), which core does
not hold, are the package's own. Our extra keys stay (``codecs``, ``shard``, ``floor_bytes``,
``read_once_bytes``, ``recycled_bytes``, ``disk_tier``, ``batches_per_epoch``, ...).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from ._reports import (
    DICT_FIELDS,
    FIXED_VALUES,
    OMITTED_FIELDS,
    PYTHON_ALIASES,
    PYTHON_NAMES,
    TUPLE_FIELDS,
    ConfigReport,
    DatasetReport,
    DatasetReportJson,
    MemoryReport,
    Note,
    ProbeReport,
    VariableReport,
)

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
    implementation's names (some under ours too; none where another field takes the name),
    and the keys it adds with a fixed value; the rest as it came, in its order."""
    tuples = TUPLE_FIELDS.get(struct, frozenset())
    dicts = DICT_FIELDS.get(struct, frozenset())
    names = PYTHON_NAMES.get(struct, {})
    aliases = PYTHON_ALIASES.get(struct, {})
    omitted = OMITTED_FIELDS.get(struct, frozenset())
    out: dict[str, Any] = {}
    for key, value in raw.items():
        if key in omitted:
            continue
        if key in tuples and value is not None:
            value = tuple(value)
        elif key in dicts:
            value = {name: v for name, v in value}
        out[names.get(key, key)] = value
        if key in aliases:
            out[aliases[key]] = value
    out.update(FIXED_VALUES.get(struct, {}))
    return out


def dataset_report(raw: DatasetReportJson, *, cache: Mapping[str, Any]) -> DatasetReport:
    """Reshape the engine's report. ``cache`` holds the disk-tier arguments the dataset was
    built with (``cache_dir``, ``persist``, ``readonly_cache``, ``reset_stale_cache``,
    ``shared_cache``)."""
    config = reshape("ConfigReport", raw["config"])
    config.update(cache)
    report = {
        "variables": {v["label"]: reshape("VariableReport", v) for v in raw["variables"]},
        "config": config,
        "memory": reshape("MemoryReport", raw["memory"]),
        "notes": [reshape("Note", n) for n in raw["notes"]],
    }
    return cast("DatasetReport", report)
