"""The spec walk in Python (issue #46): every case of ``tests/options/cases.json``, the one table
of options every surface walks (the CLI, Node, the browser, here), as ``InSituDataset``'s
keywords over the committed store ``tests/options/store.zarr``. An accepted case's train epoch
has the table's digest (the same as the CLI's ``bench --digest`` and Node's), a refused one
raises the exception of its kind with the engine's ``kind`` and ``option``. And
``InSituDataset``'s docstring and signature against the spec: every option a Python user can
pass is documented there, with no default other than the engine's."""

from __future__ import annotations

import hashlib
import inspect
import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import insitubatch_rs as ib
from insitubatch_rs import _native
from insitubatch_rs._options import DatasetSpec

ROOT = Path(__file__).resolve().parents[2]
TABLE = json.loads((ROOT / "tests" / "options" / "cases.json").read_text())
STORE = (ROOT / TABLE["store"]).as_uri()
SKIP = TABLE["skip"]["python"]
# The split's options are split_by_chunk's keywords; the manifest it makes is the dataset's.
SPLIT = ("fractions", "shuffle_splits", "split_seed", "sample_range")
# Spec options a Python user passes under another keyword.
KEYWORD = {"node_ranks": "node_affinity"}


def digest(batches: list[ib.Batch]) -> str:
    """insitubatch_native::BatchDigest of a pass: each batch's sample indices (u64 LE), then
    each label (in order) and its bytes."""
    h = hashlib.sha256()
    for b in batches:
        for t in b.sample_indices:
            h.update(int(t).to_bytes(8, "little"))
        for label in sorted(b.arrays):
            h.update(label.encode())
            h.update(np.ascontiguousarray(b.arrays[label]).tobytes())
    return h.hexdigest()


def python_sel(sel: dict[str, Any]) -> dict[str, Any]:
    """The spec's ``sel`` as Python writes it: a range as a tuple, labels as a list."""
    return {dim: tuple(p) if isinstance(p, list) else list(p["labels"]) for dim, p in sel.items()}


def keywords(options: dict[str, Any], tmp_path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(InSituDataset keywords, split_by_chunk keywords)`` for the spec's ``options``."""
    kw: dict[str, Any] = {}
    split: dict[str, Any] = {}
    for key, value in options.items():
        if value == "$CACHE_DIR":
            value = str(tmp_path / "cache")
        if key in SPLIT:
            split[key] = value
        elif key == "sel":
            kw["sel"] = python_sel(value)
        else:
            kw[KEYWORD.get(key, key)] = value
    return kw, split


def manifest(split: dict[str, Any], seed: int) -> Any:
    """The split as a Python user makes it: ``split_by_chunk`` of the first variable, its seed
    the dataset's unless given (the engine's default when there is no manifest)."""
    geom = ib.open_geometries(STORE)["t2m"]
    return ib.split_by_chunk(
        geom,
        fractions=tuple(split.get("fractions", _native.defaults()["fractions"])),
        contiguous=not split.get("shuffle_splits", False),
        seed=split.get("split_seed") or seed,
        sample_range=None if split.get("sample_range") is None else tuple(split["sample_range"]),
    )


def open_case(case: dict[str, Any], tmp_path: Path) -> ib.InSituDataset:
    options = {**TABLE["base"], **case["options"]}
    kw, split = keywords(options, tmp_path)
    store: Any = STORE if case.get("stores", 1) == 1 else [STORE] * case["stores"]
    made = None if not split else manifest(split, options.get("seed", 0))
    return ib.InSituDataset(store, made, **kw)


def train_digest(case: dict[str, Any], tmp_path: Path) -> str:
    if "warm" in case:
        warm = {"name": "warm", "options": case["warm"]}
        with open_case(warm, tmp_path) as ds:
            list(ds.train)
    with open_case(case, tmp_path) as ds:
        return digest(list(ds.train))


def skipped(case: dict[str, Any]) -> str | None:
    why = case.get("skip", {}).get("python")
    if why:
        return why
    return next((f"{k}: {SKIP[k]}" for k in case["options"] if k in SKIP), None)


@pytest.mark.parametrize("case", TABLE["cases"], ids=[c["name"] for c in TABLE["cases"]])
def test_every_case_of_the_table(case, tmp_path):
    why = skipped(case)
    if why:
        pytest.skip(f"not in Python: {why}")
    expect = case["expect"]
    if expect == "batches":
        assert train_digest(case, tmp_path) == case["digest"], "other batches than the CLI's and Node's"
    elif expect == "opens":
        open_case(case, tmp_path).close()
    else:
        with pytest.raises(Exception) as e:
            train_digest(case, tmp_path)
        assert getattr(e.value, "kind", None) == expect["kind"], repr(e.value)
        assert getattr(e.value, "option", None) == expect.get("option"), repr(e.value)
        # Each kind is its class: an option a ValueError, an array the store lacks a KeyError.
        cls = {"invalid_option": ValueError, "array_not_found": ib.ArrayNotFoundError}[expect["kind"]]
        assert isinstance(e.value, cls), repr(e.value)
        if expect.get("option"):
            assert expect["option"].split(".")[0] in str(e.value), "the message names the option"


def test_every_spec_field_is_walked_or_skipped_with_why():
    walked = {k for c in TABLE["cases"] if not skipped(c) for k in c["options"]}
    missing = set(DatasetSpec.__annotations__) - walked - set(SKIP)
    assert not missing, f"spec fields no case walks in Python: {sorted(missing)}"


# -- InSituDataset's docstring and signature against the spec --------------------------------

DEFAULTS = _native.defaults()
PARAMS = inspect.signature(ib.InSituDataset.__init__).parameters


def python_options() -> list[tuple[str, str]]:
    """``(spec field, Python keyword)`` of each option ``InSituDataset`` takes."""
    out = []
    for field in DatasetSpec.__annotations__:
        kw = KEYWORD.get(field, field)
        if kw in PARAMS:
            out.append((field, kw))
    return out


def test_every_option_is_documented_in_the_docstring():
    doc = ib.InSituDataset.__doc__ or ""
    options = python_options()
    assert len(options) > 30, options
    undocumented = [kw for _, kw in options if f"``{kw}" not in doc]
    assert not undocumented, f"InSituDataset's docstring does not mention {undocumented}"


def test_no_default_differs_from_the_engines():
    """A keyword's default in the signature is the spec's (or ``None``: the engine's), and no
    docstring sentence about an option names another default."""
    doc = " ".join((ib.InSituDataset.__doc__ or "").split())
    for field, kw in python_options():
        default = PARAMS[kw].default
        if default is not None and kw != "node_affinity":
            assert default == DEFAULTS[field], f"{kw}={default!r} but the engine's default is {DEFAULTS[field]!r}"
        if DEFAULTS[field] is None:
            continue  # absent has a meaning of its own, which the docstring states in words
        # "``kw`` ... (default X" or "``kw=X`` (the default)": X is the engine's.
        for said in re.findall(rf"``{kw}``[^.;]*?\(default ``?([^`),;]+)", doc):
            assert said.strip("\"'") == str(DEFAULTS[field]), f"the docstring gives {kw} a default of {said}"
        for said in re.findall(rf"``{kw}=([^`]+)``\s*\(the default\)", doc):
            assert said.strip("\"'") == str(DEFAULTS[field]), f"the docstring gives {kw} a default of {said}"
