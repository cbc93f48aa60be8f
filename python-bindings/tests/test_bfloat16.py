"""bfloat16 arrays: ml_dtypes.bfloat16 when ml_dtypes is importable, else raw uint16 words;
torch.bfloat16 over the same memory through to_torch."""

from __future__ import annotations

import json

import numpy as np
import pytest

import insitubatch_rs as ib


def bf16_bits(values: np.ndarray) -> np.ndarray:
    """bfloat16 words of float32 values that bfloat16 holds exactly (the top 16 bits)."""
    bits = (values.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    assert np.array_equal((bits.astype(np.uint32) << 16).view(np.float32), values), "values must be exact in bf16"
    return bits


@pytest.fixture
def bf16_store(tmp_path):
    """A v3 store with a bfloat16 array (zstd). zarr-python has no bfloat16 data type, so it
    writes the words as uint16 and the metadata is relabelled; the codecs are zarr-python's."""
    zarr = pytest.importorskip("zarr", minversion="3", reason="zarr-python 3 (Python >= 3.11) writes the store")
    values = (np.arange(24 * 3 * 4, dtype=np.float32).reshape(24, 3, 4) - 100) / 4
    bits = bf16_bits(values)
    path = tmp_path / "bf16.zarr"
    g = zarr.open_group(store=str(path), mode="w", zarr_format=3)
    a = g.create_array("x", shape=bits.shape, chunks=(5, 3, 2), dtype="uint16",
                       compressors=zarr.codecs.ZstdCodec(level=3))
    a[:] = bits
    meta_path = path / "x" / "zarr.json"
    meta = json.loads(meta_path.read_text())
    meta["data_type"] = "bfloat16"
    meta_path.write_text(json.dumps(meta))
    return path.resolve().as_uri(), values, bits


def batches(u: str, **kw):
    geoms = ib.open_geometries(u)
    assert geoms["x"].dtype == "bfloat16"
    ds = ib.InSituDataset(u, ib.split_by_chunk(geoms["x"]), geoms, batch_size=4, **kw)
    return ds, list(ds.all)


def test_bfloat16_batches(bf16_store):
    u, values, bits = bf16_store
    ds, bs = batches(u)
    try:
        import ml_dtypes
    except ImportError:
        ml_dtypes = None
    for b in bs:
        x = b["x"]
        assert ib._native.buffer_address(_buffer(x)) == x.__array_interface__["data"][0], "zero-copy"
        if ml_dtypes is None:  # the documented fallback: the raw words
            assert x.dtype == np.uint16
            assert np.array_equal(x, bits[b.sample_indices])
        else:
            assert x.dtype == ml_dtypes.bfloat16
            assert np.array_equal(x.astype(np.float32), values[b.sample_indices])
            assert np.array_equal(x.view(np.uint16), bits[b.sample_indices])
    ds.close()


def _buffer(a: np.ndarray):
    while not isinstance(a, ib._native.Buffer):
        a = a.base
    return a


def test_bfloat16_chunk_transform_sees_and_returns_bfloat16(bf16_store):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    u, values, _ = bf16_store
    seen = []

    def negate(chunk):
        seen.append(chunk.data.dtype)
        return chunk.replace(-chunk.data)

    _, bs = batches(u, chunk_transforms=[negate])
    assert set(seen) == {np.dtype(ml_dtypes.bfloat16)}
    for b in bs:
        assert b["x"].dtype == ml_dtypes.bfloat16
        assert np.array_equal(b["x"].astype(np.float32), -values[b.sample_indices])


def test_bfloat16_to_torch_zero_copy(bf16_store):
    torch = pytest.importorskip("torch")
    pytest.importorskip("ml_dtypes")
    u, values, _ = bf16_store
    ds, bs = batches(u)
    for b in bs:
        t = ib.to_torch(b)["x"]
        assert t.dtype == torch.bfloat16
        assert t.data_ptr() == b["x"].__array_interface__["data"][0], "same memory"
        assert torch.equal(t.float(), torch.from_numpy(values[b.sample_indices]))
    from torch.utils.data import DataLoader

    got = [d["x"] for d in DataLoader(ib.as_torch(ds.train), batch_size=None, num_workers=0)]
    assert got and all(t.dtype == torch.bfloat16 for t in got)


def test_bfloat16_to_jax(bf16_store):
    jnp = pytest.importorskip("jax.numpy")
    u, values, _ = bf16_store
    _, bs = batches(u)
    for b in bs:
        x = ib.to_jax(b)["x"]
        assert x.dtype == jnp.bfloat16
        assert np.array_equal(np.asarray(x.astype(jnp.float32)), values[b.sample_indices])
