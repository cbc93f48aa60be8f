"""Parity with the installed reference implementation (insitubatch 0.2.0 on Python 3.12, built
by bench/setup_reference.sh): the same store opened with both, compared on the shape of
``describe()``, the attributes of ``last_pass``, geometry arithmetic, split manifests in
both directions, and the error types for the same bad inputs.

The reference implementation runs in its own venv (a subprocess); it reports what it saw as
JSON. Skips, saying so, when that venv is absent.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import insitubatch_rs as ib
from conftest import url


def reference_python() -> Path:
    candidates = [os.environ.get("IB_REFERENCE_PY")]
    for cache in (os.environ.get("INSITUBATCH_CACHE"), os.path.expanduser("~/.cache/insitubatch")):
        if cache:
            candidates.append(os.path.join(cache, "venv-reference", "bin", "python"))
    for c in candidates:
        if c and os.access(c, os.X_OK):
            return Path(c)
    pytest.skip(
        "the reference implementation's venv is absent: run bench/setup_reference.sh (or set IB_REFERENCE_PY) "
        "for the parity tests"
    )


# Run by the reference implementation. Everything it prints is one JSON document.
REFERENCE = textwrap.dedent(
    """
    import dataclasses, json, sys
    import numpy as np
    import insitubatch as ib

    store_url, group_url, cache_dir, ours_manifest, out_manifest = sys.argv[1:6]

    def kinds(d):
        return {k: type(v).__name__ for k, v in d.items()}

    def attrs(obj):
        out = {}
        for name in dir(obj):
            if name.startswith("_"):
                continue
            v = getattr(obj, name)
            if callable(v):
                continue
            out[name] = type(v).__name__
        return out

    store = ib.obstore_store(store_url)
    geoms = ib.open_geometries(store)
    m = ib.split_by_chunk(geoms["t2m"], fractions=(0.8, 0.1, 0.1))
    ds = ib.InSituDataset(store, m, geoms, batch_size=5, block_chunks=2)
    report = ds.describe()
    batches = list(ds.train)
    lp = ds.last_pass

    def err(fn):
        try:
            fn()
        except Exception as e:
            return [c.__name__ for c in type(e).__mro__]
        return None

    def make(**kw):
        d = ib.InSituDataset(store, m, geoms, **kw)
        for _ in d.train:
            pass

    def scaler():
        s = ib.StandardScaler(mean={"t2m": np.zeros((1, 1))}, std={"t2m": np.ones((1, 1))})
        return ib.applies(["u10"], s)

    other = ib.split_by_chunk(ib.ArrayGeometry("x", (40, 6, 7), (8, 6, 7), np.dtype("float32")))
    errors = {
        "unknown_variable": err(lambda: ib.open_geometries(store, ["nope"])),
        "group": err(lambda: ib.open_geometries(ib.obstore_store(group_url), ["sub"])),
        "fractions": err(lambda: ib.split_by_chunk(geoms["t2m"], fractions=(0.5, 0.1, 0.1))),
        "sample_range_reversed": err(lambda: ib.split_by_chunk(geoms["t2m"], sample_range=(50, 10))),
        "sample_range_past_end": err(lambda: ib.split_by_chunk(geoms["t2m"], sample_range=(0, 10_000))),
        "sample_axis": err(lambda: ib.ArrayGeometry("t2m", (80, 6, 7), (8, 6, 7), np.dtype("float32"), sample_axis=3)),
        "budget_below_floor": err(lambda: make(cache_budget_bytes=1)),
        "persist_without_dir": err(lambda: make(persist=True)),
        "readonly_without_dir": err(lambda: make(readonly_cache=True)),
        "readonly_missing_dir": err(lambda: make(cache_dir=cache_dir + "/absent", readonly_cache=True)),
        "readonly_and_reset": err(lambda: make(cache_dir=cache_dir, readonly_cache=True, reset_stale_cache=True)),
        "on_bad_chunk": err(lambda: make(on_bad_chunk="ignore")),
        "iterations_zero": err(lambda: ds.describe(iterations=0)),
        "applies_string": err(lambda: ib.applies("t2m", lambda c: c)),
        "applies_empty": err(lambda: ib.applies([], lambda c: c)),
        "applies_unknown": err(lambda: make(chunk_transforms=[ib.applies(["nope"], lambda c: c)])),
        "scaler_scope": err(scaler),
        "manifest_mismatch": err(lambda: ib.InSituDataset(store, other, geoms)),
    }

    g = ib.ArrayGeometry("t2m", (37, 13, 17), (5, 6, 6), np.dtype("float32"))
    z = ib.ArrayGeometry("raw", (1, 2, 30, 16, 15), (1, 1, 4, 8, 8), np.dtype("uint16"), sample_axis=2)
    def geometry(g):
        p = g.tile_placement(g.n_chunks - 1, tuple(len(r) - 1 for r in g.inner_grid()))
        sl = lambda t: [[s.start, s.stop] for s in t]
        return {
            "n_samples": g.n_samples, "sample_chunk_size": g.sample_chunk_size, "n_chunks": g.n_chunks,
            "inner_shape": list(g.inner_shape), "inner_chunks": list(g.inner_chunks),
            "chunk_of": g.chunk_of(g.n_samples - 1), "samples_in_chunk": list(g.samples_in_chunk(g.n_chunks - 1)),
            "inner_grid": [len(r) for r in g.inner_grid()], "inner_coords": [list(c) for c in g.inner_coords()],
            "n_inner_chunks": g.n_inner_chunks(0),
            "inner_index": g.inner_index(tuple(len(r) - 1 for r in g.inner_grid())),
            "physical_chunk_coord": list(g.physical_chunk_coord(2, tuple(0 for _ in g.inner_grid()))),
            "slot_shape": list(g.slot_shape(g.n_chunks - 1)), "tile_shape": list(g.tile_shape()),
            "chunk_bytes": g.chunk_bytes, "out_selection": sl(p.out_selection),
            "chunk_selection": sl(p.chunk_selection), "is_complete_chunk": p.is_complete_chunk,
            "shift": g.shift(2).shift(-1).offset,
        }

    m.to_json(out_manifest)
    read_back = ib.SplitManifest.from_json(ours_manifest)

    # Values both engines derive by the same rule (gather_run_bytes is not one: our pool
    # assembles chunks sample-first, so gather copies whole samples).
    same_rule_var = ("n_samples", "n_chunks", "sample_chunk_size", "stored_chunk_bytes", "logical_chunk_bytes",
                     "stored_chunks_per_chunk", "inner_shape", "output_inner_shape")
    same_rule_cfg = ("batch_size", "block_chunks", "block_chunks_requested", "max_inflight", "prefetch_depth",
                     "shuffle", "seed", "split_chunks", "drawable_samples", "n_chunks", "offsets", "windowed",
                     "samples_per_chunk", "cache_dir", "persist", "readonly_cache")
    print(json.dumps({
        "describe": {
            "top": sorted(report),
            "variables": {label: kinds(v) for label, v in report["variables"].items()},
            "config": kinds(report["config"]),
            "memory": kinds(report["memory"]),
            "note_keys": sorted({k for n in report["notes"] for k in n}),
            "values": {
                "variables": {label: {k: v[k] for k in same_rule_var} for label, v in report["variables"].items()},
                "config": {k: report["config"][k] for k in same_rule_cfg},
            },
        },
        "last_pass": {
            "attrs": attrs(lp), "times": attrs(lp.times), "depths": attrs(lp.depths),
            "as_dict": sorted(lp.as_dict()), "split": lp.split, "batches": lp.batches,
        },
        "module": sorted(ib.__all__),
        "errors": errors,
        "geometry": {"g": geometry(g), "z": geometry(z)},
        "manifest": dataclasses.asdict(m),
        "read_back": dataclasses.asdict(read_back),
        "samples": sum(len(b) for b in batches),
    }))
    """
)


def strip_consolidated(store_dir: Path) -> None:
    root = json.loads((store_dir / "zarr.json").read_text())
    root.pop("consolidated_metadata", None)
    (store_dir / "zarr.json").write_text(json.dumps(root))


@pytest.fixture(scope="module")
def reference(fixtures, tmp_path_factory) -> dict[str, Any]:
    py = reference_python()
    tmp = tmp_path_factory.mktemp("parity")
    group = tmp / "with_group"
    shutil.copytree(fixtures / "v3_zstd", group)
    strip_consolidated(group)  # else zarr answers from the consolidated listing, which lacks "sub"
    (group / "sub").mkdir()
    (group / "sub" / "zarr.json").write_text(json.dumps({"zarr_format": 3, "node_type": "group", "attributes": {}}))
    ours = ib.split_by_chunk(ib.open_geometries(url(fixtures, "v3_zstd"))["t2m"], fractions=(0.6, 0.2, 0.2))
    ours.to_json(tmp / "ours.json")
    (tmp / "cache").mkdir()
    args = [
        url(fixtures, "v3_zstd"),
        group.as_uri(),
        str(tmp / "cache"),
        str(tmp / "ours.json"),
        str(tmp / "reference.json"),
    ]
    done = subprocess.run([str(py), "-c", REFERENCE, *args], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    out = json.loads(done.stdout)
    out["tmp"] = tmp
    out["ours_manifest"] = ours
    out["group_url"] = group.as_uri()
    return out


@pytest.fixture(scope="module")
def mine(fixtures) -> tuple[ib.InSituDataset, dict[str, Any]]:
    u = url(fixtures, "v3_zstd")
    geoms = ib.open_geometries(u)
    m = ib.split_by_chunk(geoms["t2m"], fractions=(0.8, 0.1, 0.1))
    ds = ib.InSituDataset(u, m, geoms, batch_size=5, block_chunks=2)
    report = ds.describe()
    list(ds.train)
    return ds, report


def kinds(d: dict[str, Any]) -> dict[str, str]:
    return {k: type(v).__name__ for k, v in d.items()}


def attrs(obj: Any) -> dict[str, str]:
    return {
        name: type(getattr(obj, name)).__name__
        for name in dir(obj)
        if not name.startswith("_") and not callable(getattr(obj, name))
    }


def same_keys_and_types(theirs: dict[str, str], ours: dict[str, str], where: str, none_ok: set[str] = frozenset()):
    """Every key of the reference implementation's is ours too, holding a value of the same type
    (extra keys welcome)."""
    missing = sorted(set(theirs) - set(ours))
    assert not missing, f"{where}: missing {missing}"
    for k, t in theirs.items():
        if ours[k] == t or f"{where}.{k}" in none_ok and ours[k] == "NoneType":
            continue
        # A budget the reference implementation leaves unset (None) and ours reports, or the
        # reverse, is still a number slot.
        assert {t, ours[k]} <= {"int", "NoneType"} and "int" in {t, ours[k]}, f"{where}.{k}: {t} there, {ours[k]} here"


def test_describe_has_the_reference_keys_and_types(reference, mine):
    _, report = mine
    d = reference["describe"]
    assert sorted(report) == d["top"]
    for label, theirs in d["variables"].items():
        same_keys_and_types(theirs, kinds(report["variables"][label]), f"variables[{label}]")
    same_keys_and_types(d["config"], kinds(report["config"]), "config")
    same_keys_and_types(d["memory"], kinds(report["memory"]), "memory")
    assert set(d["note_keys"]) <= {"code", "severity", "subject", "message"}


def test_describe_agrees_where_the_engines_share_a_rule(reference, mine):
    _, report = mine
    v = reference["describe"]["values"]
    for label, theirs in v["variables"].items():
        for k, want in theirs.items():
            got = report["variables"][label][k]
            assert (list(got) if isinstance(got, tuple) else got) == want, f"variables[{label}][{k}]"
    for k, want in v["config"].items():
        assert report["config"][k] == want, f"config[{k}]"


def test_last_pass_has_the_reference_attributes_and_types(reference, mine):
    ds, _ = mine
    lp = ds.last_pass
    a = reference["last_pass"]
    assert (lp.split, lp.batches) == (a["split"], a["batches"])
    same_keys_and_types(a["attrs"], attrs(lp), "last_pass")
    same_keys_and_types(a["times"], attrs(lp.times), "times")
    same_keys_and_types(a["depths"], attrs(lp.depths), "depths")
    assert set(a["as_dict"]) <= set(lp.as_dict())
    assert reference["samples"] == sum(len(b) for b in ds.train)


def test_geometry_arithmetic_agrees(reference):
    g = ib.ArrayGeometry("t2m", (37, 13, 17), (5, 6, 6), np.dtype("float32"))
    z = ib.ArrayGeometry("raw", (1, 2, 30, 16, 15), (1, 1, 4, 8, 8), np.dtype("uint16"), sample_axis=2)
    for name, geom in (("g", g), ("z", z)):
        last = tuple(len(r) - 1 for r in geom.inner_grid())
        p = geom.tile_placement(geom.n_chunks - 1, last)
        mine = {
            "n_samples": geom.n_samples,
            "sample_chunk_size": geom.sample_chunk_size,
            "n_chunks": geom.n_chunks,
            "inner_shape": list(geom.inner_shape),
            "inner_chunks": list(geom.inner_chunks),
            "chunk_of": geom.chunk_of(geom.n_samples - 1),
            "samples_in_chunk": list(geom.samples_in_chunk(geom.n_chunks - 1)),
            "inner_grid": [len(r) for r in geom.inner_grid()],
            "inner_coords": [list(c) for c in geom.inner_coords()],
            "n_inner_chunks": geom.n_inner_chunks(0),
            "inner_index": geom.inner_index(last),
            "physical_chunk_coord": list(geom.physical_chunk_coord(2, tuple(0 for _ in last))),
            "slot_shape": list(geom.slot_shape(geom.n_chunks - 1)),
            "tile_shape": list(geom.tile_shape()),
            "chunk_bytes": geom.chunk_bytes,
            "out_selection": [[s.start, s.stop] for s in p.out_selection],
            "chunk_selection": [[s.start, s.stop] for s in p.chunk_selection],
            "is_complete_chunk": p.is_complete_chunk,
            "shift": geom.shift(2).shift(-1).offset,
        }
        assert mine == reference["geometry"][name], name


def test_manifests_cross_both_ways(reference):
    theirs = ib.SplitManifest.from_json(reference["tmp"] / "reference.json")
    assert dataclasses.asdict(theirs) == reference["manifest"], "the reference implementation's manifest read here"
    assert reference["read_back"] == dataclasses.asdict(reference["ours_manifest"]), "ours read by the reference"


def test_every_public_name_of_the_reference_is_here_or_listed(reference):
    missing = [n for n in reference["module"] if not hasattr(ib, n)]
    # The engine internals have no Python form.
    assert set(missing) <= {"ChunkPool", "Scheduler", "build_stored_chunk_reads"}, missing


def test_same_bad_inputs_raise_the_same_types(reference, fixtures, tmp_path):
    u = url(fixtures, "v3_zstd")
    geoms = ib.open_geometries(u)
    m = ib.split_by_chunk(geoms["t2m"], fractions=(0.8, 0.1, 0.1))
    cache_dir = str(reference["tmp"] / "cache")

    def make(**kw: Any) -> None:
        d = ib.InSituDataset(u, m, geoms, batch_size=5, block_chunks=2, **kw)
        for _ in d.train:
            pass

    def scaler() -> Any:
        s = ib.StandardScaler({"t2m": np.zeros((1, 1))}, {"t2m": np.ones((1, 1))})
        return ib.applies(["u10"], s)

    other = ib.split_by_chunk(ib.ArrayGeometry("x", (40, 6, 7), (8, 6, 7), np.dtype("float32")))
    ds = ib.InSituDataset(u, m, geoms)
    cases = {
        "unknown_variable": lambda: ib.open_geometries(u, ["nope"]),
        "group": lambda: ib.open_geometries(reference["group_url"], ["sub"]),
        "fractions": lambda: ib.split_by_chunk(geoms["t2m"], fractions=(0.5, 0.1, 0.1)),
        "sample_range_reversed": lambda: ib.split_by_chunk(geoms["t2m"], sample_range=(50, 10)),
        "sample_range_past_end": lambda: ib.split_by_chunk(geoms["t2m"], sample_range=(0, 10_000)),
        "sample_axis": lambda: ib.ArrayGeometry("t2m", (80, 6, 7), (8, 6, 7), np.dtype("float32"), sample_axis=3),
        "budget_below_floor": lambda: make(cache_budget_bytes=1),
        "persist_without_dir": lambda: make(persist=True),
        "readonly_without_dir": lambda: make(readonly_cache=True),
        "readonly_missing_dir": lambda: make(cache_dir=cache_dir + "/absent", readonly_cache=True),
        "readonly_and_reset": lambda: make(cache_dir=cache_dir, readonly_cache=True, reset_stale_cache=True),
        "on_bad_chunk": lambda: make(on_bad_chunk="ignore"),
        "iterations_zero": lambda: ds.describe(iterations=0),
        "applies_string": lambda: ib.applies("t2m", lambda c: c),
        "applies_empty": lambda: ib.applies([], lambda c: c),
        "applies_unknown": lambda: make(chunk_transforms=[ib.applies(["nope"], lambda c: c)]),
        "scaler_scope": scaler,
        "manifest_mismatch": lambda: ib.InSituDataset(u, other, geoms),
    }
    assert set(cases) == set(reference["errors"])
    for name, fn in cases.items():
        theirs = reference["errors"][name]
        assert theirs is not None, f"{name}: the reference implementation accepted it"
        with pytest.raises(Exception) as got:
            fn()
        ours = [c.__name__ for c in type(got.value).__mro__]
        assert theirs[0] in ours, f"{name}: the reference raises {theirs[0]}, we raise {ours[0]}: {got.value}"


# The reference implementation's StandardScaler over a store written here, every batch saved as .npy files.
REFERENCE_SCALER = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    import insitubatch as ib

    store_url, stats_dir, out_dir, sample_axis = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    spec = json.load(open(f"{stats_dir}/spec.json"))
    stat = lambda v: float(v) if isinstance(v, (int, float)) else np.load(f"{stats_dir}/{v}")
    mean = {k: stat(v[0]) for k, v in spec.items()}
    std = {k: stat(v[1]) for k, v in spec.items()}
    store = ib.obstore_store(store_url)
    geoms = ib.open_geometries(store, sample_axis=sample_axis)
    m = ib.split_by_chunk(next(iter(geoms.values())), fractions=(1.0, 0.0, 0.0))
    ds = ib.InSituDataset(store, m, geoms, batch_size=8, shuffle=False,
                          chunk_transforms=[ib.StandardScaler(mean, std)])
    for i, b in enumerate(ds.train):
        np.save(f"{out_dir}/{i}.idx.npy", np.asarray(b.sample_indices))
        for k, v in b.arrays.items():
            np.save(f"{out_dir}/{i}.{k}.npy", v)
    """
)


@pytest.mark.parametrize("sample_axis", [0, 1])
def test_standard_scaler_matches_the_reference_bit_for_bit(reference, tmp_path, sample_axis):
    """The reference implementation's own StandardScaler (numpy, cast into the array's dtype)
    against ours, on float16/float32/float64 arrays with statistics of several shapes and
    dtypes, including (1, nlon), float64 statistics on float32 data, and Python floats."""
    zarr = pytest.importorskip("zarr", minversion="3", reason="zarr-python 3 writes the store")
    py = reference_python()
    rng = np.random.default_rng(11)
    stats = {
        "nlon": ((280 + rng.standard_normal((1, 5))).astype(np.float32), (4 + rng.random((1, 5))).astype(np.float32)),
        "promoted": (280 + rng.standard_normal((3, 1)), np.float32(4.5)),
        "python": (280.123456789, 3.3),
        "half": ((280 + rng.standard_normal((3, 5))).astype(np.float16), (2 + rng.random(5)).astype(np.float16)),
    }
    stats_dir = tmp_path / "stats"
    stats_dir.mkdir()
    spec, arrays = {}, {}
    for dtype in ("float16", "float32", "float64"):
        for name, (m, s) in stats.items():
            key = f"{name}_{dtype}"
            arrays[key] = (280 + 10 * rng.standard_normal((20, 3, 5))).astype(dtype)
            ref = []
            for which, v in (("mean", m), ("std", s)):
                if isinstance(v, float):
                    ref.append(v)
                else:
                    np.save(stats_dir / f"{key}.{which}.npy", v)
                    ref.append(f"{key}.{which}.npy")
            spec[key] = ref
    (stats_dir / "spec.json").write_text(json.dumps(spec))
    path = tmp_path / "s.zarr"
    g = zarr.open_group(str(path), mode="w", zarr_format=3)
    for key, x in arrays.items():
        phys = np.moveaxis(x, 0, sample_axis)
        chunks = list(phys.shape)
        chunks[sample_axis] = 6
        g.create_array(key, shape=phys.shape, chunks=tuple(chunks), dtype=phys.dtype)[:] = phys
    out = tmp_path / "reference_out"
    out.mkdir()
    done = subprocess.run([str(py), "-c", REFERENCE_SCALER, path.as_uri(), str(stats_dir), str(out), str(sample_axis)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    theirs: dict[str, np.ndarray] = {}
    n_batches = len(list(out.glob("*.idx.npy")))
    for i in range(n_batches):
        idx = np.load(out / f"{i}.idx.npy")
        for key in arrays:
            theirs.setdefault(key, np.zeros_like(arrays[key]))[idx] = np.load(out / f"{i}.{key}.npy")
    mean = {k: stats[k.rsplit("_", 1)[0]][0] for k in arrays}
    std = {k: stats[k.rsplit("_", 1)[0]][1] for k in arrays}
    u = path.resolve().as_uri()
    geoms = ib.open_geometries(u, sample_axis=sample_axis)
    ours = {k: np.zeros_like(v) for k, v in arrays.items()}
    with ib.InSituDataset(u, ib.split_by_chunk(geoms["nlon_float32"]), geoms, batch_size=8, shuffle=False,
                          chunk_transforms=[ib.StandardScaler(mean, std)]) as ds:
        for b in ds.all:
            for k in arrays:
                ours[k][b.sample_indices] = b[k]
    assert n_batches * 8 >= 20
    differ = [k for k in arrays if theirs[k].dtype != ours[k].dtype or theirs[k].tobytes() != ours[k].tobytes()]
    assert not differ, f"differ from the reference implementation: {differ}"
