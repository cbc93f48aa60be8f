"""Coordinates in every batch and selection by label (``coords=True``, ``sel=``) over the CF
stores written by zarr-python (v3 and v2): the sample axis's CF time decoded to
``datetime64[ns]`` (truth: numpy's own date arithmetic on the stored units), and ``sel``
equal to selecting those dates."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import stored, url

from insitubatch_rs import InSituDataset

# cf: time = arange(24) * 6, "hours since 2020-01-01", proleptic_gregorian.
TIMES = np.datetime64("2020-01-01T00:00", "ns") + np.arange(24) * np.timedelta64(6, "h")


@pytest.mark.parametrize("name", ["cf", "cf_v2"])
def test_every_batch_carries_its_decoded_times(fixtures, name):
    ds = InSituDataset(url(fixtures, name), batch_size=5, coords=True)
    seen = 0
    for b in ds.all:
        t = b.coords["time"]
        assert t.dtype == np.dtype("datetime64[ns]")
        np.testing.assert_array_equal(t, TIMES[b.sample_indices])
        seen += len(b)
    assert seen == 24
    plain = next(iter(InSituDataset(url(fixtures, name), batch_size=5).all))
    assert plain.coords == {}, "coordinates are read only when asked for"


def test_sel_by_dates_draws_exactly_those_samples(fixtures):
    lo, hi = "2020-01-02", "2020-01-04T06:00"
    ds = InSituDataset(url(fixtures, "cf"), batch_size=4, sel={"time": (lo, hi)})
    drawn = sorted(int(t) for b in ds.all for t in b.sample_indices)
    want = [i for i, t in enumerate(TIMES) if np.datetime64(lo) <= t <= np.datetime64(hi)]
    assert drawn == want and want == list(range(4, 14))
    times = np.concatenate([b.coords["time"] for b in ds.all])
    assert times.min() >= np.datetime64(lo) and times.max() <= np.datetime64(hi)


def test_bad_selections_are_clear_errors(fixtures):
    with pytest.raises(ValueError, match="selects nothing"):
        InSituDataset(url(fixtures, "cf"), sel={"time": ("2030-01-01", "2030-02-01")})
    with pytest.raises(ValueError, match="needs time bounds"):
        InSituDataset(url(fixtures, "cf"), sel={"time": (0, 5)})
    with pytest.raises(ValueError, match="sample axis's coordinate"):
        InSituDataset(url(fixtures, "cf"), sel={"level": (0, 5)})
    with pytest.raises(ValueError, match="no patch was given"):
        InSituDataset(url(fixtures, "cf"), patches_per_sample=2)
    with pytest.raises(ValueError, match="a list of labels"):
        InSituDataset(url(fixtures, "cf"), sel={"lat": {45, 55}})
    with pytest.raises(ValueError, match="47 is not among its 5 values"):
        InSituDataset(url(fixtures, "cf"), sel={"lat": [45, 47]})


def test_patches_carry_the_coordinates_they_cover(fixtures):
    lat, lon = stored(fixtures, "cf", "lat"), stored(fixtures, "cf", "lon")
    kw = dict(patch={"lat": 2, "lon": 3}, patch_mode="random", patches_per_sample=2, coords=True)
    ds = InSituDataset(url(fixtures, "cf"), batch_size=5, **kw)
    rows = 0
    for b in ds.all:
        assert b.coords["lat"].shape == (len(b), 2) and b.coords["lon"].shape == (len(b), 3)
        for i, (y, x) in enumerate(b.patch_origins):
            np.testing.assert_array_equal(b.coords["lat"][i], lat[y : y + 2])
            np.testing.assert_array_equal(b.coords["lon"][i], lon[x : x + 3])
        np.testing.assert_array_equal(b.coords["time"], TIMES[b.sample_indices])
        rows += len(b)
    assert rows == 48


def test_sel_on_inner_axes_cuts_every_row_like_numpy_slicing(fixtures):
    # lat runs 60 to 40 (decreasing), lon 0 to 5: the truth is the positions whose label lies
    # in each range, inclusive, as xarray's sel with a slice picks them.
    lat, lon, t2m = (stored(fixtures, "cf", k) for k in ("lat", "lon", "t2m"))
    ys = np.flatnonzero((lat >= 42) & (lat <= 56))
    xs = np.flatnonzero((lon >= 1) & (lon <= 4))
    assert list(ys) == [1, 2, 3] and list(xs) == [1, 2, 3, 4]
    ds = InSituDataset(url(fixtures, "cf"), batch_size=5, sel={"lat": (42, 56), "lon": slice(1, 4)})
    seen = 0
    for b in ds.all:
        np.testing.assert_array_equal(b["t2m"], t2m[b.sample_indices][:, ys[0] : ys[-1] + 1, xs[0] : xs[-1] + 1])
        seen += len(b)
    assert seen == 24
    assert any(n["code"] == "region" for n in ds.describe()["notes"])
    # Patches on a selected axis lie inside its region.
    kw = dict(patch={"lon": 2}, patch_mode="random", patches_per_sample=3)
    ds = InSituDataset(url(fixtures, "cf"), batch_size=5, sel={"lon": (1, 4)}, **kw)
    starts = set()
    for b in ds.all:
        for i, (x,) in enumerate(b.patch_origins):
            np.testing.assert_array_equal(b["t2m"][i], t2m[b.sample_indices[i]][:, x : x + 2])
            starts.add(int(x))
    assert starts == {1, 2, 3}


def test_sel_lists_pick_labels_in_their_order(fixtures):
    # As xarray's sel with a list: lat [40, 60] is positions [4, 0]; time a list of dates.
    lat, t2m = stored(fixtures, "cf", "lat"), stored(fixtures, "cf", "t2m")
    ys = [int(np.flatnonzero(lat == v)[0]) for v in (40, 60)]
    assert ys == [4, 0]
    dates = [str(TIMES[i]) for i in (7, 2, 19)]
    ds = InSituDataset(url(fixtures, "cf"), batch_size=2, sel={"lat": [40, 60], "time": dates})
    drawn = []
    for b in ds.all:
        np.testing.assert_array_equal(b["t2m"], t2m[b.sample_indices][:, ys, :])
        drawn += [int(t) for t in b.sample_indices]
    assert sorted(drawn) == [2, 7, 19]

