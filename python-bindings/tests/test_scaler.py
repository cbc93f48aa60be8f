"""StandardScaler: save/load (JSON, and the anchor's npz layout) and its cache identity."""

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
    # Values a decimal round trip through float64 text would not keep exactly as float32
    # unless written with every digit.
    return ib.StandardScaler(
        {"t2m": np.float32(0.1) + float(t.mean()), "u10": per_lat},
        {"t2m": float(t.std()) / 3, "u10": per_lat_std},
        eps=1e-6,
    )


@pytest.mark.parametrize("suffix", ["json", "npz"])
def test_save_load_round_trips_exactly(fixtures, manifest, tmp_path, suffix):
    sc = fitted(fixtures, manifest)
    path = tmp_path / f"scaler.{suffix}"
    sc.save(path)
    back = ib.StandardScaler.load(str(path))
    for k in ("t2m", "u10"):
        assert back.mean[k].shape == sc.mean[k].shape and back.mean[k].dtype == np.float32
        assert back.mean[k].tobytes() == sc.mean[k].tobytes()
        assert back.std[k].tobytes() == sc.std[k].tobytes()
    if suffix == "json":
        assert back == sc and back.eps == sc.eps and back.cache_token == sc.cache_token
    else:  # the anchor's npz carries statistics only
        assert back.eps == pytest.approx(1e-8) and back.cache_key is None
    # The loaded scaler normalizes a pass exactly as the original does.
    u = url(fixtures, "v3_zstd")
    geoms = ib.open_geometries(u)
    m = ib.split_by_chunk(geoms["t2m"])
    runs = []
    for s in (sc, ib.StandardScaler(back.mean, back.std, eps=sc.eps)):
        with ib.InSituDataset(u, m, geoms, batch_size=7, chunk_transforms=[s]) as ds:
            runs.append([{k: v.copy() for k, v in b.items()} for b in ds.all])
    for a, b in zip(*runs):
        for k in a:
            assert a[k].tobytes() == b[k].tobytes()


def test_anchor_npz_layout(tmp_path):
    path = tmp_path / "anchor.npz"
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
    cases = {
        "not JSON": "{\"format\": ",
        "not an object": "[1, 2]",
        "no \"format\"": json.dumps({"arrays": {}}),
        "format version 9": json.dumps({**good, "version": 9}),
        "\"eps\" is missing": json.dumps({k: v for k, v in good.items() if k != "eps"}),
        "\"cache_key\" is neither": json.dumps({**good, "cache_key": 3}),
        "\"arrays\" is missing": json.dumps({k: v for k, v in good.items() if k != "arrays"}),
        "holds 2 values but mean has 1": json.dumps(
            {**good, "arrays": {"t2m": {"shape": [2], "mean": [1.0], "std": [1.0, 2.0]}}}
        ),
        "\"std\" is missing or not a list of numbers": json.dumps(
            {**good, "arrays": {"t2m": {"shape": [1], "mean": [1.0], "std": ["x"]}}}
        ),
        "\"shape\" is missing": json.dumps({**good, "arrays": {"t2m": {"mean": [1.0], "std": [1.0]}}}),
    }
    for what, text in cases.items():
        p = write(tmp_path, text)
        with pytest.raises(ValueError, match=what.replace("(", r"\(")) as e:
            ib.StandardScaler.load(p)
        assert str(e.value).endswith(str(p)), "the file is named last"
    with pytest.raises(FileNotFoundError, match="cannot read the StandardScaler file"):
        ib.StandardScaler.load(tmp_path / "missing.json")
    np.savez(tmp_path / "odd.npz", weights=np.ones(3))
    with pytest.raises(ValueError, match="not \"<array>.mean\""):
        ib.StandardScaler.load(tmp_path / "odd.npz")
    np.savez(tmp_path / "half.npz", **{"t2m.mean": np.ones(1)})
    with pytest.raises(ValueError, match="mean but no std"):
        ib.StandardScaler.load(tmp_path / "half.npz")


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
    with pytest.raises(ValueError, match="differ in size"):
        ib.StandardScaler({"t2m": [1.0, 2.0]}, {"t2m": 1.0})
    with pytest.raises(ValueError, match="eps"):
        ib.StandardScaler({"t2m": 1.0}, {"t2m": 1.0}, eps=float("nan"))


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
