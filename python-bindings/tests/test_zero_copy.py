from __future__ import annotations

import gc
import threading

import numpy as np
import pytest

import insitubatch_rs as ib
from conftest import source, url


def first_batch(fixtures):
    ds = ib.InSituDataset(url(fixtures, "v3_zstd"), batch_size=8)
    return ds, next(iter(ds.train))


def test_numpy_arrays_are_views_of_engine_buffers(fixtures):
    ds, b = first_batch(fixtures)
    for label, a in b.items():
        base = a.base
        assert isinstance(base, ib._native.Buffer)
        assert a.ctypes.data == base.address, f"{label}: numpy points at the Rust buffer"
        assert ib._native.buffer_address(base) == base.address
        assert a.ctypes.data % 128 == 0, "engine buffers are 128-byte aligned"
        assert a.flags.c_contiguous and not a.flags.owndata
    assert b.sample_indices.dtype == np.int64
    assert b.sample_indices.ctypes.data == b.sample_indices.base.address


def test_arrays_outlive_batch_dataset_and_pass(fixtures):
    ds, b = first_batch(fixtures)
    a = b["t2m"]
    idx = b.sample_indices.copy()
    del b, ds
    gc.collect()
    src = source(fixtures, {"values_file": "values/v3_zstd__t2m.bin", "dtype": "float32", "shape": [80, 6, 7]}, 0)
    np.testing.assert_array_equal(a, src[idx])


def test_iteration_releases_the_gil(fixtures):
    ds = ib.InSituDataset(url(fixtures, "v3_zstd"), batch_size=4)
    results = []

    def work():
        results.append(sum(len(b) for b in ds.all))

    threads = [threading.Thread(target=work) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert results == [80, 80, 80]


def test_torch_zero_copy_and_training(fixtures):
    torch = pytest.importorskip("torch")
    from torch.utils.data import DataLoader

    ds, b = first_batch(fixtures)
    t = ib.to_torch(b)
    for label, x in t.items():
        assert x.data_ptr() == b[label].ctypes.data, f"{label}: torch shares the engine buffer"
        assert tuple(x.shape) == b[label].shape and x.dtype == torch.float32

    torch.manual_seed(0)
    model = torch.nn.Linear(42, 42)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    loader = DataLoader(ib.as_torch(ds.train), batch_size=None, num_workers=0)
    losses = []
    for step, batch in enumerate(loader):
        x = batch["t2m"].reshape(batch["t2m"].shape[0], -1)
        y = batch["u10"].reshape(batch["u10"].shape[0], -1)
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if step == 4:
            break
    assert len(losses) == 5 and all(np.isfinite(losses))


def test_missing_framework_message(monkeypatch):
    import builtins

    real = builtins.__import__

    def fake(name, *a, **k):
        if name.startswith("jax"):
            raise ImportError("no jax")
        return real(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", fake)
    monkeypatch.setattr("importlib.import_module", lambda n: fake(n))
    with pytest.raises(ImportError, match="insitubatch-rs\\[jax\\]"):
        ib.to_jax({"a": np.zeros(2)})


def test_jax_zero_copy_and_a_step(fixtures):
    jax = pytest.importorskip("jax")
    jnp = pytest.importorskip("jax.numpy")

    ds, b = first_batch(fixtures)
    j = ib.to_jax(b)
    for label, x in j.items():
        assert x.shape == b[label].shape and x.dtype == jnp.float32
        ptr = x.unsafe_buffer_pointer()
        assert ptr == b[label].ctypes.data, f"{label}: jax shares the engine buffer (128-byte aligned)"
        np.testing.assert_array_equal(np.asarray(x), b[label])

    @jax.jit
    def loss(w, x, y):
        return jnp.mean((x.reshape(x.shape[0], -1) @ w - y.reshape(y.shape[0], -1)) ** 2)

    w = jnp.zeros((42, 42), jnp.float32)
    for batch in ds.train:
        jb = ib.to_jax(batch)
        g = jax.grad(loss)(w, jb["t2m"], jb["u10"])
        w = w - 1e-6 * g
    assert bool(jnp.all(jnp.isfinite(w)))
