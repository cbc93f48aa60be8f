"""Kerchunk reference sets over NetCDF4 files (tests/fixtures/make_virtual.py), JSON and Parquet, read natively:
``reference_store`` and ``reference+`` URLs give xarray's reading of the original files, in joins
and concatenations too; coordinates decode as CF time; bad sets fail naming the chunk and the file."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from conftest import fixtures_dir

from insitubatch_rs import InSituDataset, InsitubatchIOError, icechunk_store, open_geometries, reference_store

VARIABLES = ["t2m", "tp", "msl", "sst"]


@pytest.fixture(scope="module")
def virtual() -> Path:
    d = os.environ.get("INSITUBATCH_VIRTUAL_FIXTURES")
    path = Path(d) if d else fixtures_dir() / "virtual"
    if not (path / "manifest.json").exists():
        why = f"no virtual fixtures in {path} (tests/fixtures/make_virtual.py, made by the test venv)"
        if os.environ.get("CI", "").strip().lower() not in ("", "0", "false"):
            pytest.fail(f"{why}; CI is set, where this is a failure, not a skip")
        pytest.skip(why)
    return path


@pytest.fixture(scope="module")
def manifest(virtual: Path) -> dict:
    return json.loads((virtual / "manifest.json").read_text())


def truth(virtual: Path, manifest: dict, store: str) -> dict[str, np.ndarray]:
    """xarray's raw reading of the original NetCDF files, as the fixture script saved it."""
    s = next(s for s in manifest["stores"] if s["name"] == f"virtual_{store}")
    out = {}
    for name, a in s["arrays"].items():
        raw = np.fromfile(virtual / a["values_file"], dtype=np.dtype(a["dtype"]).newbyteorder("<"))
        out[name] = raw.reshape(a["shape"])
    return out


def check_epoch(ds: InSituDataset, want: dict[str, np.ndarray], prefix: str = "") -> None:
    seen = []
    for b in ds.all:
        for name in VARIABLES:
            np.testing.assert_array_equal(b[prefix + name], want[name][b.sample_indices], err_msg=name)
        seen += [int(t) for t in b.sample_indices]
    assert sorted(seen) == list(range(len(want["t2m"])))


@pytest.mark.parametrize("name", ["single", "combined", "relative", "templated", "h5netcdf", "parquet"])
def test_a_reference_store_gives_xarrays_reading_of_the_netcdf_files(virtual, manifest, name):
    want = truth(virtual, manifest, name)
    path = next(s["path"] for s in manifest["stores"] if s["name"] == f"virtual_{name}")
    with InSituDataset(reference_store(virtual / path), batch_size=5, seed=2) as ds:
        check_epoch(ds, want)
        stats = ds.last_pass
        assert stats.storage_reads < stats.tiles_read, "the chunks of one file coalesced"
    url = "reference+" + str(virtual / path)
    with InSituDataset(url, batch_size=5, seed=2) as ds:
        check_epoch(ds, want)


def test_geometries_and_cf_time_come_from_the_references(virtual, manifest):
    store = reference_store(virtual / "combined.json")
    geoms = open_geometries(store)
    assert sorted(geoms) == sorted(VARIABLES), "time, lat and lon are coordinates, skipped"
    assert geoms["t2m"].shape == (72, 10, 12) and geoms["tp"].chunks == (8, 10, 12)
    hours = truth(virtual, manifest, "combined")["time"]
    times = np.datetime64("2000-01-01T00:00", "ns") + hours.astype("i8") * np.timedelta64(1, "h")
    with InSituDataset(store, geometries={"t2m": geoms["t2m"]}, batch_size=8, coords=True) as ds:
        for b in ds.all:
            np.testing.assert_array_equal(b.coords["time"], times[b.sample_indices])


def test_reference_stores_join_and_concatenate_like_any_store(virtual, manifest):
    want = truth(virtual, manifest, "combined")
    joined = {"refs": reference_store(virtual / "combined.json"), "again": "reference+" + str(virtual / "relative.json")}
    with InSituDataset(joined, batch_size=6) as ds:
        for b in ds.all:
            for s in joined:
                for v in VARIABLES:
                    np.testing.assert_array_equal(b[f"{s}/{v}"], want[v][b.sample_indices], err_msg=f"{s}/{v}")
    parts = [reference_store(virtual / f"file_{i}.json") for i in range(3)]
    with InSituDataset(parts, batch_size=9, seed=1) as ds:
        check_epoch(ds, want)
        assert ds.last_pass.storage_reads < ds.last_pass.tiles_read, "coalesced within each file"


def test_bad_reference_sets_fail_naming_the_chunk_and_the_file(virtual, manifest):
    for name, case in manifest["bad"].items():
        with pytest.raises((InsitubatchIOError, ValueError)) as e:
            with InSituDataset(reference_store(virtual / case["path"]), batch_size=5) as ds:
                for _ in ds.all:
                    pass
        msg = str(e.value)
        assert (case["chunk"] or 'chunk "') in msg, f"{name}: {msg}"
        if case["file"]:
            assert case["file"] in msg, f"{name}: {msg}"


def test_a_missing_set_and_bad_options_are_refused_at_once(virtual, tmp_path):
    with pytest.raises(InsitubatchIOError, match="no reference set at this URL"):
        reference_store(tmp_path / "nothing.json")
    (tmp_path / "not.json").write_text("[1, 2]")
    with pytest.raises(InsitubatchIOError, match="a JSON object of references") as e:
        reference_store(tmp_path / "not.json")
    assert str(e.value).endswith(str(tmp_path / "not.json"))


def test_an_icechunk_repository_is_read_by_the_engine_at_the_sessions_snapshot(virtual, manifest):
    """The fixtures' Icechunk repository (make_virtual.py ``build_icechunk``): icechunk_store's
    session store and the ``icechunk+`` URL read natively give xarray's values; main removed sst
    after tag v1."""
    pytest.importorskip("icechunk", reason="insitubatch-rs[icechunk] is not installed")
    entry = manifest["icechunk"]
    want = {name: np.fromfile(virtual / a["values_file"], dtype=np.dtype(a["dtype"]).newbyteorder("<"))
            .reshape(a["shape"]) for name, a in entry["arrays"].items()}
    repo = virtual / entry["path"]
    store = icechunk_store(repo.as_uri())
    url, _ = store._insitubatch_native
    assert url == f"icechunk+{repo}#snapshot={entry['snapshots']['main']}"
    assert sorted(open_geometries(store)) == ["msl", "t2m", "tp"], "main removed sst"
    with InSituDataset(store, batch_size=5, seed=2) as ds:
        for b in ds.all:
            for name in ("t2m", "tp", "msl"):
                np.testing.assert_array_equal(b[name], want[name][b.sample_indices], err_msg=name)
        assert ds.last_pass.storage_reads < ds.last_pass.tiles_read, "the chunks of one file coalesced"
    with InSituDataset(f"icechunk+{repo}#tag=v1", batch_size=5, seed=2) as ds:
        check_epoch(ds, want)
    with pytest.raises(InsitubatchIOError, match="era_gone.nc"):
        with InSituDataset(f"icechunk+{repo}#branch=bad", batch_size=5) as ds:
            list(ds.all)
