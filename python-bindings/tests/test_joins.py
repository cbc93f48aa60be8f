"""Stores joined by name (``InSituDataset({name: store})``) over stores written by zarr-python:
variables of each store paired by sample, each chunk of every store read once per epoch,
URLs and store objects mixed, and joins whose sample axes disagree refused, naming both."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from conftest import stored, url

from insitubatch_rs import InSituDataset, open_geometries


def test_joined_variables_pair_by_sample_and_every_sample_comes_once(fixtures):
    stores = {"a": url(fixtures, "v3_zstd"), "b": fixtures / "v3_sharded"}
    truth = {"a/t2m": stored(fixtures, "v3_zstd", "t2m"), "a/u10": stored(fixtures, "v3_zstd", "u10"),
             "b/t2m": stored(fixtures, "v3_sharded", "t2m")}
    ds = InSituDataset(stores, batch_size=7, seed=4)
    for epoch in range(2):
        ds.set_epoch(epoch)
        seen = []
        for b in ds.all:
            assert sorted(b.arrays) == sorted(truth)
            for label, arr in truth.items():
                np.testing.assert_array_equal(b[label], arr[b.sample_indices], err_msg=label)
            seen += [int(t) for t in b.sample_indices]
        assert sorted(seen) == list(range(80))
        assert ds.last_pass.reread_chunks == 0, "each chunk of either store loaded once in the pass"


def test_geometries_of_a_join_name_each_store(fixtures):
    geoms = open_geometries({"era5": url(fixtures, "cf"), "again": url(fixtures, "cf_v2")})
    assert sorted(geoms) == ["again/t2m", "era5/t2m"], "coordinates are skipped, each array named by its store"
    ds = InSituDataset({"era5": url(fixtures, "cf"), "again": url(fixtures, "cf_v2")}, geometries=geoms,
                       batch_size=5, coords=True)
    truth = {"era5/t2m": stored(fixtures, "cf", "t2m"), "again/t2m": stored(fixtures, "cf_v2", "t2m")}
    times = np.datetime64("2020-01-01T00:00", "ns") + np.arange(24) * np.timedelta64(6, "h")
    for b in ds.all:
        for label, arr in truth.items():
            np.testing.assert_array_equal(b[label], arr[b.sample_indices], err_msg=label)
        np.testing.assert_array_equal(b.coords["time"], times[b.sample_indices])


def test_unequal_lengths_are_refused_naming_both_stores(fixtures):
    with pytest.raises(ValueError, match="share the same sample-axis length") as e:
        InSituDataset({"a": url(fixtures, "v3_zstd"), "b": url(fixtures, "v2_blosc")}, batch_size=4)
    assert "a/t2m" in str(e.value) and "b/t2m" in str(e.value)
    assert str(e.value).endswith(f"join(a={url(fixtures, 'v3_zstd')}, b={url(fixtures, 'v2_blosc')})")


def test_a_shifted_time_axis_is_refused_saying_where(fixtures, tmp_path):
    late = tmp_path / "late"
    shutil.copytree(fixtures / "cf", late)
    meta = late / "time" / "zarr.json"
    m = json.loads(meta.read_text())
    m["attributes"]["units"] = "hours since 2020-01-01T06:00"
    meta.write_text(json.dumps(m))
    root = late / "zarr.json"  # consolidated metadata holds the same attributes
    r = json.loads(root.read_text())
    if "consolidated_metadata" in r and r["consolidated_metadata"]:
        r["consolidated_metadata"]["metadata"]["time"]["attributes"]["units"] = "hours since 2020-01-01T06:00"
        root.write_text(json.dumps(r))
    with pytest.raises(ValueError, match="sample axes disagree") as e:
        InSituDataset({"era5": url(fixtures, "cf"), "late": late.as_uri()}, batch_size=5)
    assert '"era5/time" and "late/time" differ first at sample 0 (2020-01-01T00:00:00 against 2020-01-01T06:00:00)' in str(e.value)


@pytest.mark.parametrize("bad, what", [({"": "x"}, "path segment"), ({"a/b": "x"}, "path segment"), ({}, "at least one")])
def test_bad_names_are_refused(fixtures, bad, what):
    bad = {k: url(fixtures, "v3_zstd") for k in bad}
    with pytest.raises(ValueError, match=what):
        InSituDataset(bad, batch_size=4)


def test_a_join_with_a_non_string_name_is_a_type_error(fixtures):
    with pytest.raises(TypeError, match="name must be a str"):
        InSituDataset({1: url(fixtures, "v3_zstd")}, batch_size=4)
