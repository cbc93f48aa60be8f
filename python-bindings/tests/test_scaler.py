"""StandardScaler: save/load (JSON, and insitubatch 0.2.0's npz layout) and its cache identity."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

import insitubatch_rs as ib
from conftest import source, store, url


def fitted(fixtures, manifest):
    s = store(manifest, "v3_zstd")
    t = source(fixtures, s["arrays"]["t2m"], 0)
    per_lat = t.mean(axis=(0, 2)).reshape(6, 1)
    per_lat_std = t.std(axis=(0, 2)).reshape(6, 1)
    # Values a decimal round trip through text would not keep exactly unless written with
    # every digit; statistics of several dtypes and kinds (a Python float stays one).
    return ib.StandardScaler(
        {"t2m": np.float32(0.1) + float(t.mean()), "u10": per_lat.astype(np.float64) + 1e-9},
        {"t2m": float(t.std()) / 3, "u10": per_lat_std},
        eps=1e-6,
        cache_key="fit-3",
    )


def same(a, b) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        return type(a) is type(b) and a == b
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


@pytest.mark.parametrize("suffix", ["json", "npz"])
def test_save_load_round_trips_exactly(fixtures, manifest, tmp_path, suffix):
    sc = fitted(fixtures, manifest)
    path = tmp_path / f"scaler.{suffix}"
    sc.save(path)
    back = ib.StandardScaler.load(str(path))
    if suffix == "json":  # every bit, dtype, shape and kind, eps and cache_key
        assert back == sc and back.eps == sc.eps and back.cache_token == sc.cache_token
        for k in ("t2m", "u10"):
            assert same(back.mean[k], sc.mean[k]) and same(back.std[k], sc.std[k])
    else:  # insitubatch 0.2.0's npz: statistics only, a Python float saved as numpy saves it (float64)
        assert back.eps == 1e-8 and back.cache_key is None
        assert same(back.mean["u10"], sc.mean["u10"]) and same(back.std["u10"], sc.std["u10"])
        assert same(back.mean["t2m"], sc.mean["t2m"])
        assert same(back.std["t2m"], np.asarray(sc.std["t2m"]))
        with np.load(path) as z:  # and numpy reads it as insitubatch 0.2.0's load does
            assert sorted(z.files) == ["t2m.mean", "t2m.std", "u10.mean", "u10.std"]
            assert same(z["u10.mean"], sc.mean["u10"]) and same(z["t2m.std"], np.asarray(sc.std["t2m"]))
    if suffix == "npz":
        return
    # The loaded scaler normalizes a pass exactly as the original does.
    u = url(fixtures, "v3_zstd")
    geoms = ib.open_geometries(u)
    m = ib.split_by_chunk(geoms["t2m"])
    runs = []
    for s in (sc, back):
        with ib.InSituDataset(u, m, geoms, batch_size=7, chunk_transforms=[s]) as ds:
            runs.append([{k: v.copy() for k, v in b.items()} for b in ds.all])
    for a, b in zip(*runs):
        for k in a:
            assert a[k].tobytes() == b[k].tobytes()


def test_bfloat16_and_float16_statistics_round_trip(tmp_path):
    ml_dtypes = pytest.importorskip("ml_dtypes", reason="bfloat16 statistics need ml_dtypes")
    sc = ib.StandardScaler({"a": np.array([0.1, 3.0], ml_dtypes.bfloat16)}, {"a": np.array([[2.5]], np.float16)})
    for suffix in ("json", "npz"):
        sc.save(tmp_path / f"s.{suffix}")
        back = ib.StandardScaler.load(tmp_path / f"s.{suffix}")
        assert same(back.mean["a"], sc.mean["a"]) and same(back.std["a"], sc.std["a"]), suffix


def test_reference_npz_layout(tmp_path):
    path = tmp_path / "reference.npz"
    np.savez(path, **{"t2m.mean": np.array([[280.0]]), "t2m.std": np.array([[12.5]])})
    sc = ib.StandardScaler.load(path)
    assert sc.mean["t2m"].shape == (1, 1) and float(sc.std["t2m"][0, 0]) == 12.5
    sc.save(tmp_path / "ours.npz")
    with np.load(tmp_path / "ours.npz") as z:
        assert sorted(z.files) == ["t2m.mean", "t2m.std"]


def write(tmp_path, text: str, name: str = "s.json"):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_load_refuses_bad_files_clearly(tmp_path):
    good = json.loads(_saved_text(tmp_path))
    entry = good["arrays"]["t2m"]
    cases = {
        "not JSON": "{\"format\": ",
        "not an object": "[1, 2]",
        "no \"format\"": json.dumps({"arrays": {}}),
        "format version 9": json.dumps({**good, "version": 9}),
        "\"eps\" is missing": json.dumps({k: v for k, v in good.items() if k != "eps"}),
        "\"cache_key\" is neither": json.dumps({**good, "cache_key": 3}),
        "\"arrays\" is missing": json.dumps({k: v for k, v in good.items() if k != "arrays"}),
        "\"std\" is missing": json.dumps({**good, "arrays": {"t2m": {"mean": entry["mean"]}}}),
        "\"mean\".\"dtype\" is missing or not one of": json.dumps(
            {**good, "arrays": {"t2m": {**entry, "mean": {**entry["mean"], "dtype": "int8"}}}}
        ),
        "\"std\".\"values\" is missing or not a list of numbers": json.dumps(
            {**good, "arrays": {"t2m": {**entry, "std": {**entry["std"], "values": ["x"]}}}}
        ),
        "shape [2] does not hold 1 values": json.dumps(
            {**good, "arrays": {"t2m": {**entry, "mean": {**entry["mean"], "dtype": "float32", "shape": [2]}}}}
        ),
        # Version 1 (float32 numbers, one shape per array) is still read, and checked.
        "holds 2 values but mean has 1": json.dumps(
            {**good, "version": 1, "eps": 1e-8, "arrays": {"t2m": {"shape": [2], "mean": [1.0], "std": [1.0, 2.0]}}}
        ),
        "\"shape\" is missing": json.dumps(
            {**good, "version": 1, "eps": 1e-8, "arrays": {"t2m": {"mean": [1.0], "std": [1.0]}}}
        ),
    }
    for what, text in cases.items():
        p = write(tmp_path, text)
        with pytest.raises(ValueError, match=what.replace("(", r"\(").replace("[", r"\[")) as e:
            ib.StandardScaler.load(p)
        assert str(e.value).endswith(str(p)), "the file is named last"
    v1 = {**good, "version": 1, "eps": 1e-6, "arrays": {"t2m": {"shape": [1, 2], "mean": [0.1, 2.0], "std": [3.0, 4.0]}}}
    old = ib.StandardScaler.load(write(tmp_path, json.dumps(v1)))
    assert same(old.mean["t2m"], np.array([[0.1, 2.0]], np.float32)) and old.eps == 1e-6
    with pytest.raises(FileNotFoundError, match="cannot read the StandardScaler file"):
        ib.StandardScaler.load(tmp_path / "missing.json")
    np.savez(tmp_path / "odd.npz", weights=np.ones(3))
    with pytest.raises(ValueError, match="not \"<array>.mean\""):
        ib.StandardScaler.load(tmp_path / "odd.npz")
    np.savez(tmp_path / "half.npz", **{"t2m.mean": np.ones(1)})
    with pytest.raises(ValueError, match="mean but no std"):
        ib.StandardScaler.load(tmp_path / "half.npz")
    np.savez(tmp_path / "ints.npz", **{"t2m.mean": np.ones(1, np.int64), "t2m.std": np.ones(1)})
    with pytest.raises(ValueError, match="<i8"):
        ib.StandardScaler.load(tmp_path / "ints.npz")
    # numpy's compressed and Fortran-order npz read as insitubatch 0.2.0's np.load reads them.
    f = np.asfortranarray(np.arange(6.0).reshape(2, 3))
    np.savez_compressed(tmp_path / "c.npz", **{"t2m.mean": f, "t2m.std": np.float32(2.0)})
    c = ib.StandardScaler.load(tmp_path / "c.npz")
    assert same(c.mean["t2m"], np.arange(6.0).reshape(2, 3)) and same(c.std["t2m"], np.array(2.0, np.float32))


def _saved_text(tmp_path) -> str:
    p = tmp_path / "good.json"
    ib.StandardScaler({"t2m": 1.0}, {"t2m": 2.0}).save(p)
    return p.read_text()


def test_constructor_refuses_unusable_statistics():
    with pytest.raises(ValueError, match="NaN or infinity"):
        ib.StandardScaler({"t2m": np.nan}, {"t2m": 1.0})
    with pytest.raises(ValueError, match="no std for"):
        ib.StandardScaler({"t2m": 1.0}, {})
    with pytest.raises(ValueError, match="no mean for"):
        ib.StandardScaler({"t2m": 1.0}, {"t2m": 1.0, "u10": 1.0})
    with pytest.raises(ValueError, match="do not broadcast together"):
        ib.StandardScaler({"t2m": [1.0, 2.0]}, {"t2m": [1.0, 2.0, 3.0]})
    with pytest.raises(ValueError, match="eps"):
        ib.StandardScaler({"t2m": 1.0}, {"t2m": 1.0}, eps=float("nan"))
    with pytest.raises(ValueError, match="empty"):
        ib.StandardScaler({"t2m": np.zeros((0, 3))}, {"t2m": 1.0})


TOKEN_SCRIPT = """
import numpy as np, insitubatch_rs as ib
m = np.linspace(0, 1, 2000, dtype=np.float32).reshape(20, 100)
print(ib.StandardScaler({"t2m": m, "u10": 3.0}, {"t2m": m + 1, "u10": 2.0}).cache_token)
"""


def test_cache_token_is_stable_across_processes_and_sees_every_value():
    tokens = {subprocess.run([sys.executable, "-c", TOKEN_SCRIPT], capture_output=True, text=True, check=True).stdout
              for _ in range(2)}
    assert len(tokens) == 1
    token = tokens.pop().strip()
    assert token.startswith("standard_scaler:sha256:") and len(token) == len("standard_scaler:sha256:") + 64
    m = np.linspace(0, 1, 2000, dtype=np.float32).reshape(20, 100)
    same = ib.StandardScaler({"u10": 3.0, "t2m": m}, {"t2m": m + 1, "u10": 2.0})
    assert same.cache_token == token, "the same statistics give the same token, in any dict order"
    # One value deep inside a statistic numpy's repr would summarize away changes the token.
    m2 = m.copy()
    m2[10, 50] = np.nextafter(m2[10, 50], np.float32(2))
    assert ib.StandardScaler({"t2m": m2, "u10": 3.0}, {"t2m": m + 1, "u10": 2.0}).cache_token != token
    assert ib.StandardScaler({"t2m": m, "u10": 3.0}, {"t2m": m + 1, "u10": 2.0}, eps=1e-7).cache_token != token
    # A declared cache_key is the identity, whatever the statistics.
    a = ib.StandardScaler({"t2m": 1.0}, {"t2m": 2.0}, cache_key="era5-stats-v3")
    b = ib.StandardScaler({"t2m": 5.0}, {"t2m": 9.0}, cache_key="era5-stats-v3")
    assert a.cache_key == "era5-stats-v3" and a.cache_token == b.cache_token == "standard_scaler:key:era5-stats-v3"
    assert ib.StandardScaler({"t2m": 1.0}, {"t2m": 2.0}, cache_key="era5-stats-v4").cache_token != a.cache_token
    assert ib.StandardScaler({"t2m": 1.0}, {"t2m": 2.0}).cache_key is None
