"""Chunk and batch transforms written in Python (and the engine's StandardScaler)."""

from __future__ import annotations

import dataclasses
import threading

import numpy as np
import pytest

import insitubatch_rs as ib


def make(u, **kw):
    geoms = ib.open_geometries(u)
    kw.setdefault("batch_size", 5)
    kw.setdefault("block_chunks", 2)
    return ib.InSituDataset(u, ib.split_by_chunk(geoms["t2m"]), geoms, **kw)


def test_chunk_transform_doubles_once_per_chunk(zstd):
    u, srcs = zstd
    calls = []
    lock = threading.Lock()

    def double(chunk: ib.DecodedChunk) -> ib.DecodedChunk:
        assert chunk.array == "t2m"
        assert chunk.data.shape[1:] == (6, 7) and chunk.data.dtype == np.float32
        assert chunk.sample_offset == chunk.chunk_index * 8
        with lock:
            calls.append(chunk.chunk_index)
        return chunk.replace(chunk.data * 2)

    ds = make(u, chunk_transforms=[ib.applies(["t2m"], double)])
    batches = list(ds.all)
    assert len(batches) == 16
    for b in batches:
        np.testing.assert_array_equal(b["t2m"], srcs["t2m"][b.sample_indices] * 2)
        np.testing.assert_array_equal(b["u10"], srcs["u10"][b.sample_indices]), "scoped away"
    assert sorted(calls) == list(range(10)), "once per chunk read, not per batch"
    assert ds.describe()["config"]["chunk_transforms"] == ("double[t2m]",)


def test_bare_chunk_transform_applies_everywhere_and_may_return_array(zstd):
    u, srcs = zstd
    ds = make(u, chunk_transforms=[lambda c: c.data + 1.0])
    for b in ds.train:
        for k in ("t2m", "u10"):
            np.testing.assert_allclose(b[k], srcs[k][b.sample_indices] + 1.0)


class BlockMean2:
    """A reshaping transform: 2x2 block mean over the last two axes (trims ragged edges)."""

    def output_inner(self, geom):
        inner = geom.shape[1:]
        return (*inner[:-2], inner[-2] // 2, inner[-1] // 2), np.float32

    def __call__(self, chunk):
        d = chunk.data
        r, h, w = d.shape[0], d.shape[1] // 2 * 2, d.shape[2] // 2 * 2
        out = d[:, :h, :w].reshape(r, h // 2, 2, w // 2, 2).mean(axis=(2, 4), dtype=np.float32)
        return chunk.replace(out)


def test_reshaping_chunk_transform_with_output_inner(zstd):
    u, srcs = zstd
    ds = make(u, chunk_transforms=[ib.applies(["u10"], BlockMean2())])
    n = 0
    for b in ds.train:
        assert b["u10"].shape[1:] == (3, 3) and b["t2m"].shape[1:] == (6, 7)
        src = srcs["u10"][b.sample_indices][:, :6, :6]
        expected = src.reshape(len(b), 3, 2, 3, 2).mean(axis=(2, 4))
        np.testing.assert_allclose(b["u10"], expected, rtol=1e-6)
        n += len(b)
    assert n == len(ds.manifest.sample_indices("train"))


def test_undeclared_reshape_fails_the_pass(zstd):
    u, _ = zstd
    ds = make(u, chunk_transforms=[lambda c: c.data[:, :3]])
    with pytest.raises(RuntimeError, match=r"returned float32 \[8, 3, 7\] but declared float32 \[8, 6, 7\]"):
        list(ds.train)


class DeclaresTwoByTwo(BlockMean2):
    """Returns BlockMean2's 3x3 but declares 2x2: a wrong ``output_inner``."""

    def output_inner(self, geom):
        return (2, 2), geom.dtype


def test_a_wrong_output_inner_fails_naming_the_transform_and_both_shapes(zstd):
    # insitubatch 0.2.0's declared-vs-actual check could never fire; this one must. After an honest
    # transform, so the check is shown to pin the declaration on the one that made it.
    u, _ = zstd
    ds = make(u, chunk_transforms=[ib.applies(["u10"], lambda c: c.data * 2), ib.applies(["u10"], DeclaresTwoByTwo())])
    assert ds.describe()["variables"]["u10"]["output_inner_shape"] == (2, 2), "the pool is sized from the declaration"
    with pytest.raises(RuntimeError) as e:
        list(ds.train)
    msg = str(e.value)
    assert "transform DeclaresTwoByTwo failed: it returned float32 [8, 3, 3] but declared float32 [8, 2, 2]" in msg
    assert msg.endswith('of array "u10"') and "<lambda>" not in msg, msg


def test_output_inner_sees_the_real_geometry(fixtures, manifest):
    from conftest import source, store, url

    s = store(manifest, "ome_ngff")
    u = url(fixtures, s["path"])
    geoms = ib.open_geometries(u, ["raw"], sample_axis=2)
    seen = []

    class DropChannelAxis:
        """(c=1, z, y, x) -> (z, y, x) per sample: a reshape of the inner axes only."""

        def output_inner(self, geom):
            seen.append(geom)
            return geom.inner_shape[1:], geom.dtype

        def __call__(self, chunk):
            return chunk.replace(chunk.data[:, 0])

    ds = ib.InSituDataset(
        u, ib.split_by_chunk(geoms["raw"]), geoms, batch_size=3, chunk_transforms=[DropChannelAxis()]
    )
    g = seen[0]
    assert isinstance(g, ib.ArrayGeometry) and g == geoms["raw"], "the array's own geometry, not a stand-in"
    assert (g.path, g.sample_axis, g.shape, g.chunks) == ("raw", 2, (1, 2, 30, 16, 15), geoms["raw"].chunks)
    assert g.inner_shape == (1, 2, 16, 15) and g.dtype == np.uint16
    src = source(fixtures, s["arrays"]["raw"], 2)
    n = 0
    for b in ds.train:
        assert b["raw"].shape[1:] == (2, 16, 15)
        np.testing.assert_array_equal(b["raw"], src[b.sample_indices][:, 0])
        n += len(b)
    assert n == len(ds.manifest.sample_indices("train"))


def test_batch_transform_windspeed(zstd):
    u, srcs = zstd
    seen = []

    def windspeed(batch: ib.Batch) -> ib.Batch:
        seen.append(batch.index)
        arrays = dict(batch)
        arrays["ws"] = np.sqrt(batch["t2m"] ** 2 + batch["u10"] ** 2)
        return ib.Batch(arrays, batch.sample_indices, batch.offsets, batch.index, batch.epoch)

    ds = make(u, batch_transforms=[windspeed])
    batches = list(ds.train)
    assert sorted(seen) == list(range(len(batches))), "once per batch (they run concurrently)"
    for b in batches:
        assert set(b) == {"t2m", "u10", "ws"}
        t, w = srcs["t2m"][b.sample_indices], srcs["u10"][b.sample_indices]
        np.testing.assert_allclose(b["ws"], np.sqrt(t**2 + w**2), rtol=1e-6)


def test_standard_scaler_known_stats(zstd):
    u, srcs = zstd
    t = srcs["t2m"]
    mean, std = float(t.mean()), float(t.std())
    per_lat = t.mean(axis=(0, 2)).reshape(6, 1)  # broadcast over (lat, lon): one per lat
    per_lat_std = t.std(axis=(0, 2)).reshape(6, 1)
    sc = ib.StandardScaler({"t2m": mean, "u10": per_lat}, {"t2m": std, "u10": per_lat_std})
    ds = make(u, chunk_transforms=[sc])
    for b in ds.all:
        np.testing.assert_allclose(b["t2m"], (t[b.sample_indices] - mean) / (std + 1e-8), rtol=1e-5, atol=1e-5)
        exp = (srcs["u10"][b.sample_indices] - per_lat) / (per_lat_std + 1e-8)
        np.testing.assert_allclose(b["u10"], exp, rtol=1e-5, atol=1e-5)
    # Scaled over the whole array: mean 0, std 1.
    full = np.concatenate([b["t2m"] for b in ds.all])
    assert abs(full.mean()) < 1e-4 and abs(full.std() - 1) < 1e-4
    with pytest.raises(ValueError, match="no mean/std"):
        ib.applies(["t2m", "u10"], ib.StandardScaler({"t2m": 0.0}, {"t2m": 1.0}))


def test_applies_errors(zstd):
    u, _ = zstd
    f = lambda c: c  # noqa: E731
    with pytest.raises(TypeError, match="a string would scope to its characters"):
        ib.applies("t2m", f)
    with pytest.raises(ValueError, match="empty scope"):
        ib.applies([], f)
    with pytest.raises(ValueError, match=r"not arrays in this dataset. Known arrays: \[.t2m., .u10.\]"):
        make(u, chunk_transforms=[ib.applies(["nope"], f)])
    with pytest.raises(TypeError, match="must be callable"):
        make(u, chunk_transforms=[42])
    with pytest.raises(TypeError, match="must be callable"):
        make(u, batch_transforms=["x"])


def test_raising_transforms_surface_on_iteration(zstd):
    u, _ = zstd

    def boom(chunk):
        raise ValueError(f"bad chunk {chunk.chunk_index}")

    ds = make(u, chunk_transforms=[ib.applies(["u10"], boom)])
    with pytest.raises(ValueError, match="bad chunk"):
        for _ in ds.train:
            pass

    def bad_batch(batch):
        raise KeyError("no such label")

    ds = make(u, batch_transforms=[bad_batch])
    with pytest.raises(KeyError, match="no such label"):
        next(iter(ds.train))
    # The dataset still works for a pass without the failure (a fresh one).
    assert sum(len(b) for b in make(u).train) == len(ds.manifest.sample_indices("train"))


def test_output_inner_error_is_a_value_error(zstd):
    u, _ = zstd

    class Bad:
        def output_inner(self, geom):
            raise RuntimeError("cannot say")

        def __call__(self, c):
            return c

    with pytest.raises(ValueError, match="cannot say"):
        make(u, chunk_transforms=[Bad()])


def test_view_len(zstd):
    u, _ = zstd
    ds = make(u)
    assert len(ds.train) == len(list(ds.train))
    assert len(ds.all) == 16


def test_decoded_chunk_has_the_reference_read(zstd):
    """insitubatch 0.2.0's ``DecodedChunk(read, data, sample_offset)`` with ``read =
    ChunkRead(array, chunk_index)``: a transform written against it (reading
    ``chunk.read.array``, building its result with that constructor) runs unchanged."""
    u, srcs = zstd
    reads = []
    lock = threading.Lock()

    def k_to_c(chunk):
        assert isinstance(chunk.read, ib.ChunkRead)
        assert (chunk.read.array, chunk.read.chunk_index) == (chunk.array, chunk.chunk_index)
        assert chunk.sample_offset == chunk.read.chunk_index * 8
        with lock:
            reads.append(chunk.read)
        return ib.DecodedChunk(chunk.read, chunk.data - 273.15, chunk.sample_offset)

    ds = make(u, chunk_transforms=[k_to_c])
    for b in ds.all:
        for k in ("t2m", "u10"):
            np.testing.assert_allclose(b[k], srcs[k][b.sample_indices] - np.float32(273.15), rtol=1e-6)
    assert len(reads) == len(set(reads)) == 20, "ChunkRead is hashable; one call per (array, chunk)"
    assert set(reads) == {ib.ChunkRead(a, c) for a in ("t2m", "u10") for c in range(10)}
    r = ib.ChunkRead("t2m", 3)
    assert r == ib.ChunkRead("t2m", 3) and r != ib.ChunkRead("u10", 3) and hash(r) == hash(ib.ChunkRead("t2m", 3))
    with pytest.raises(AttributeError):
        r.array = "u10"  # frozen
    dc = ib.DecodedChunk(r, np.zeros((2, 3), np.float32), 24)
    assert (dc.array, dc.chunk_index, dc.sample_offset) == ("t2m", 3, 24)
    dc2 = dataclasses.replace(dc, data=np.ones((2, 3), np.float32))
    assert dc2.read == r and dc2.sample_offset == 24 and dc2.data.sum() == 6
    assert "ChunkRead(array='t2m', chunk_index=3)" in repr(dc)


def test_dataclass_replace_in_chunk_and_batch_transforms(zstd):
    """insitubatch 0.2.0's DecodedChunk and Batch are dataclasses; transforms written for it return
    ``dataclasses.replace(...)``."""
    u, srcs = zstd

    def k_to_c(chunk):
        return dataclasses.replace(chunk, data=chunk.data - np.float32(273.15))

    def windspeed(batch):
        return dataclasses.replace(batch, arrays={**batch.arrays, "ws": np.hypot(batch["t2m"], batch["u10"])})

    ds = make(u, chunk_transforms=[ib.applies(["t2m"], k_to_c)], batch_transforms=[windspeed])
    for b in ds.all:
        t = srcs["t2m"][b.sample_indices] - np.float32(273.15)
        np.testing.assert_allclose(b["t2m"], t, rtol=1e-6)
        np.testing.assert_allclose(b["ws"], np.hypot(t, srcs["u10"][b.sample_indices]), rtol=1e-6)
    b = ib.Batch({"x": np.zeros((2, 1))}, np.array([4, 9]))
    assert b.offsets == {} and b.read_indices("x").tolist() == [4, 9] and len(b) == 2


def test_batch_arrays_and_stack_axis(zstd):
    u, _ = zstd
    b = next(iter(make(u).train))
    assert b.arrays.keys() == {"t2m", "u10"} and b.arrays["t2m"] is b["t2m"]
    assert b.stack(["t2m", "u10"]).shape == (5, 2, 6, 7)
    s0 = b.stack(["t2m", "u10"], axis=0)
    assert s0.shape == (2, 5, 6, 7)
    np.testing.assert_array_equal(s0[1], b["u10"])
    np.testing.assert_array_equal(b.stack(["u10", "t2m"], axis=-1)[..., 0], b["u10"])
