"""TensorFlow: ``to_tf`` exact (dtype, shape, values; TF owns its copy) and ``as_tf_dataset``
in a ``tf.data`` pipeline and a Keras ``fit``. Runs in the TF venv (just test-python fw=tf);
elsewhere it skips, saying so."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import insitubatch_rs as ib
from conftest import source, store, url


def test_to_tf_exact_and_owns_its_copy(tf, zstd):
    u, srcs = zstd
    ds = ib.InSituDataset(u, batch_size=8)
    b = next(iter(ds.train))
    want = {k: srcs[k][b.sample_indices] for k in b}
    t = ib.to_tf(b)
    assert set(t) == {"t2m", "u10"}
    for label, x in t.items():
        assert isinstance(x, tf.Tensor) and x.dtype == tf.float32
        assert tuple(x.shape) == b[label].shape == (8, 6, 7)
        np.testing.assert_array_equal(x.numpy(), want[label])
    del b
    for _ in ds.all:  # the engine reuses the batch's buffers: TF's copy must not change
        pass
    for label, x in t.items():
        np.testing.assert_array_equal(x.numpy(), want[label])


def test_to_tf_integer_arrays_and_every_dtype(tf, fixtures, manifest):
    s = store(manifest, "ome_ngff")
    geoms = ib.open_geometries(url(fixtures, s["path"]), sample_axis=2)
    ds = ib.InSituDataset(url(fixtures, s["path"]), ib.split_by_chunk(geoms["raw"]), geoms, batch_size=3)
    b = next(iter(ds.train))
    t = ib.to_tf(b)
    for label, dtype in (("raw", tf.uint16), ("mask", tf.uint8)):
        assert t[label].dtype == dtype and tuple(t[label].shape) == b[label].shape
        np.testing.assert_array_equal(t[label].numpy(), source(fixtures, s["arrays"][label], 2)[b.sample_indices])
    rng = np.random.default_rng(0)
    arrays = {
        str(np.dtype(d)): (rng.standard_normal((3, 2, 5)) * 100).astype(d)
        for d in (np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.float16, np.float64)
    }
    for name, x in ib.to_tf(arrays).items():
        assert x.dtype == tf.as_dtype(arrays[name].dtype) and tuple(x.shape) == (3, 2, 5)
        np.testing.assert_array_equal(x.numpy(), arrays[name])


def test_as_tf_dataset_in_a_tf_data_pipeline(tf, zstd):
    u, srcs = zstd
    ds = ib.InSituDataset(u, batch_size=8)
    tfds = ib.as_tf_dataset(ds.train)
    assert tfds.element_spec == {
        label: tf.TensorSpec(shape=(None, 6, 7), dtype=tf.float32) for label in ("t2m", "u10")
    }
    pipeline = (
        tfds.map(lambda e: (tf.reshape(e["t2m"], (-1, 42)), tf.reshape(e["u10"], (-1, 42)) * 2.0))
        .unbatch()
        .batch(5)
    )
    xs, ys = zip(*[(x.numpy(), y.numpy()) for x, y in pipeline])
    order = ds.draw_order("train")  # the pass's rows, in the order it yields them
    assert [len(x) for x in xs] == [5] * (len(order) // 5) + ([len(order) % 5] if len(order) % 5 else [])
    np.testing.assert_array_equal(np.concatenate(xs), srcs["t2m"][order].reshape(-1, 42))
    np.testing.assert_array_equal(np.concatenate(ys), srcs["u10"][order].reshape(-1, 42) * 2.0)


def test_keras_fit_one_step(tf, zstd):
    u, _ = zstd
    ds = ib.InSituDataset(u, batch_size=8)
    pairs = ib.as_tf_dataset(ds.train, prefetch=0).map(lambda e: (e["t2m"], e["u10"]))
    tf.keras.utils.set_random_seed(0)
    model = tf.keras.Sequential(
        [tf.keras.Input((6, 7)), tf.keras.layers.Flatten(), tf.keras.layers.Dense(42), tf.keras.layers.Reshape((6, 7))]
    )
    model.compile(optimizer=tf.keras.optimizers.SGD(1e-6), loss="mse")
    before = [w.copy() for w in model.get_weights()]
    history = model.fit(pairs, epochs=1, steps_per_epoch=1, verbose=0)
    assert len(history.history["loss"]) == 1 and np.isfinite(history.history["loss"][0])
    assert any(not np.array_equal(a, b) for a, b in zip(before, model.get_weights())), "one step moved the weights"


class Coarsen:
    """Block mean over the last two axes, declaring its output (a reshaping transform)."""

    def output_inner(self, geom):
        *lead, h, w = geom.inner_shape
        return (*lead, h // 2, w // 2), geom.dtype

    def __call__(self, chunk):
        *lead, h, w = chunk.data.shape
        d = chunk.data[..., : h // 2 * 2, : w // 2 * 2].reshape(*lead, h // 2, 2, w // 2, 2).mean(axis=(-3, -1))
        return dataclasses.replace(chunk, data=d.astype(chunk.data.dtype))


def test_as_tf_dataset_signature_follows_chunk_transforms(tf, zstd):
    u, srcs = zstd
    ds = ib.InSituDataset(u, batch_size=8, chunk_transforms=[ib.applies(["u10"], Coarsen())])
    tfds = ib.as_tf_dataset(ds.val, prefetch=0)
    assert tfds.element_spec["u10"].shape.as_list() == [None, 3, 3]
    assert tfds.element_spec["t2m"].shape.as_list() == [None, 6, 7]
    rows = ds.manifest.sample_indices("val")
    got = np.concatenate([e["u10"].numpy() for e in tfds])
    want = srcs["u10"][rows][:, :6, :6].reshape(len(rows), 3, 2, 3, 2).mean(axis=(2, 4))
    np.testing.assert_allclose(got, want, rtol=1e-6)
