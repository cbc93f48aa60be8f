"""Spatial patches (``patch=``) over stores written by zarr-python: every grid patch of every
sample once per epoch, random patches per (seed, epoch), values equal to numpy slicing of
the values the fixture writer saved, each chunk read as often as for whole samples when the
patches touch all of it and only the touched tiles otherwise, resume."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import stored, url

from insitubatch_rs import InSituDataset


def _open(fixtures, name: str, **kw) -> InSituDataset:
    return InSituDataset(url(fixtures, name), batch_size=kw.pop("batch_size", 7), seed=3, **kw)


def _truth(fixtures, name: str, label: str) -> np.ndarray:
    return stored(fixtures, name, label)


def _rows(view, truth: dict[str, np.ndarray], size: tuple[int, int], axes: tuple[int, int] = (1, 2)):
    """Every row of one pass checked against slicing ``truth``; the (sample, origin) pairs."""
    seen = []
    for b in view:
        assert b.patch_origins is not None and b.patch_origins.shape == (len(b), 2)
        for label, arr in truth.items():
            assert b[label].shape == (len(b), *size)
            for i, t in enumerate(b.sample_indices):
                o = b.patch_origins[i]
                box = [slice(None)] * (arr.ndim - 1)
                for k, ax in enumerate(axes):
                    box[ax - 1] = slice(int(o[k]), int(o[k]) + size[k])
                np.testing.assert_array_equal(b[label][i], arr[int(t)][tuple(box)], err_msg=f"{label} {t} {o}")
        seen += [(int(t), tuple(int(x) for x in o)) for t, o in zip(b.sample_indices, b.patch_origins, strict=True)]
    return seen


def test_every_grid_patch_once_per_epoch_equals_slicing(fixtures):
    ds = _open(fixtures, "v3_zstd", patch={"lat": 3, "lon": 3})
    truth = {k: _truth(fixtures, "v3_zstd", k) for k in ("t2m", "u10")}
    for view in (ds.train, ds.val):
        seen = _rows(view, truth, (3, 3))
        samples = view.sample_indices()
        # lat 6 / 3 = 2 positions; lon 7: origins 0 and 3 (a column of 1 at the edge is not drawn)
        want = {(int(t), (a, c)) for t in samples for a in (0, 3) for c in (0, 3)}
        assert len(seen) == len(want) == len(set(seen)) and set(seen) == want
        assert len(view) == -(-len(want) // 7)
    b = next(iter(ds.train))
    assert b.patch_dims == ("lat", "lon")


def test_patches_read_each_chunk_as_often_as_whole_samples(fixtures):
    reads = []
    for patch in ({"lat": 3, "lon": 3}, None):
        ds = _open(fixtures, "v3_zstd", patch=patch)
        for _ in ds.train:
            pass
        reads.append((ds.last_pass.storage_reads, ds.last_pass.bytes_fetched))
    assert reads[0] == reads[1]


def test_random_patches_fetch_only_the_tiles_they_touch(fixtures):
    # v3_ragged: (37, 13, 17) in chunks of (5, 6, 6), so 3 x 3 tiles per chunk, the last ragged.
    ds = _open(fixtures, "v3_ragged", patch={1: 2, 2: 2}, patch_mode="random")
    truth = {"t2m": _truth(fixtures, "v3_ragged", "t2m")}
    touched = set()
    for t, (a, c) in _rows(ds.all, truth, (2, 2)):
        touched |= {(t // 5, y, x) for y in (a // 6, (a + 1) // 6) for x in (c // 6, (c + 1) // 6)}
    assert len(touched) < 8 * 9, "the seed should leave some tiles untouched"
    # One object per tile on this store: each touched tile read once, no other.
    assert ds.last_pass.tiles_read == ds.last_pass.storage_reads == len(touched)
    note = next(n for n in ds.describe()["notes"] if n["code"] == "patches")
    assert "tiles of the chunks it reads" in note["message"], note


def test_sharded_axes_by_index_random_patches_reproducible(fixtures):
    truth = {"t2m": _truth(fixtures, "v3_sharded", "t2m")}
    kw = dict(patch={1: 4, 2: 5}, patch_mode="random", patches_per_sample=3)
    first = _rows(_open(fixtures, "v3_sharded", **kw).train, truth, (4, 5))
    again = _rows(_open(fixtures, "v3_sharded", **kw).train, truth, (4, 5))
    assert first == again
    counts: dict[int, int] = {}
    for t, (a, c) in first:
        counts[t] = counts.get(t, 0) + 1
        assert 0 <= a <= 10 - 4 and 0 <= c <= 12 - 5
    assert set(counts.values()) == {3}
    ds = _open(fixtures, "v3_sharded", **kw)
    ds.set_epoch(1)
    assert _rows(ds.train, truth, (4, 5)) != first
    assert ds.train.__iter__().__next__().patch_dims == ("axis1", "axis2")


def test_an_overlapping_grid_on_a_v2_store(fixtures):
    ds = _open(fixtures, "v2_blosc", patch={"lon": 4}, patch_stride={"lon": 1})
    truth = {"t2m": _truth(fixtures, "v2_blosc", "t2m")}
    seen = []
    for b in ds.all:
        assert b["t2m"].shape == (len(b), 6, 4)
        for i, t in enumerate(b.sample_indices):
            o = int(b.patch_origins[i][0])
            np.testing.assert_array_equal(b["t2m"][i], truth["t2m"][int(t), :, o : o + 4])
            seen.append((int(t), o))
    assert sorted(seen) == [(t, o) for t in range(48) for o in range(3)]


def test_a_patched_pass_resumes_exactly(fixtures):
    kw = dict(patch={"lat": 2, "lon": 3}, patch_mode="random", patches_per_sample=2)
    ds = _open(fixtures, "v3_zstd", **kw)
    whole = [(b.sample_indices.tolist(), b.patch_origins.tolist(), b["t2m"].copy()) for b in ds.train]
    it = iter(ds.train)
    head = [next(it) for _ in range(3)]
    state = ds.state_dict()
    assert state["rows_per_sample"] == 2
    fresh = _open(fixtures, "v3_zstd", **kw)
    fresh.load_state_dict(state)
    tail = [(b.sample_indices.tolist(), b.patch_origins.tolist(), b["t2m"].copy()) for b in fresh.train]
    got = [(b.sample_indices.tolist(), b.patch_origins.tolist(), b["t2m"]) for b in head] + tail
    assert [(s, o) for s, o, _ in got] == [(s, o) for s, o, _ in whole]
    for (_, _, a), (_, _, w) in zip(got, whole, strict=True):
        np.testing.assert_array_equal(a, w)
    other = _open(fixtures, "v3_zstd", patch={"lat": 2})
    with pytest.raises(ValueError, match="rows per sample"):
        other.load_state_dict(state)
        next(iter(other.train))


def test_bad_patch_options_are_clear_errors(fixtures):
    with pytest.raises(ValueError, match='"level"'):
        _open(fixtures, "v3_zstd", patch={"level": 2})
    with pytest.raises(ValueError, match="'grid' or 'random'"):
        _open(fixtures, "v3_zstd", patch={"lat": 2}, patch_mode="tiles")
    with pytest.raises(ValueError, match="axis length 6"):
        _open(fixtures, "v3_zstd", patch={"lat": 7})
    with pytest.raises(ValueError, match="patches_per_sample"):
        _open(fixtures, "v3_zstd", patch={"lat": 2}, patches_per_sample=2)
    with pytest.raises(ValueError, match="sample axis"):
        _open(fixtures, "v3_zstd", patch={"time": 2})
    with pytest.raises(TypeError, match="dimension name or an axis index"):
        _open(fixtures, "v3_zstd", patch={1.5: 2})
    ds = _open(fixtures, "v3_zstd", patch={"lat": 3})
    notes = [n for n in ds.describe()["notes"] if n["code"] == "patches"]
    assert notes and "read whole" in notes[0]["message"]
