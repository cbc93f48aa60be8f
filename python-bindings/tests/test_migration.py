"""The reference implementation's documented examples, run on insitubatch_rs with only the
import changed.

Each test names where its code comes from in the Python insitubatch 0.2.0 docs (README,
API reference, tuning guide). The code is insitubatch 0.2.0's, with ``import insitubatch_rs as
insitubatch`` (or ``from insitubatch_rs import ...``) and a fixture store in place of a
cloud URL; the values are checked against the arrays the fixtures were written from.
"""

from __future__ import annotations

import dataclasses
import io
import json
import logging
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import insitubatch_rs as insitubatch
from insitubatch_rs._runtime import rule
from conftest import source, store, url


@pytest.fixture
def era5(fixtures, manifest):
    """The v3_zstd store (t2m and u10, 80 samples, 8 per chunk) and its source values."""
    s = store(manifest, "v3_zstd")
    return url(fixtures, s["path"]), {k: source(fixtures, a, 0) for k, a in s["arrays"].items()}


def check(batch, srcs):
    """Every label of ``batch`` holds the source rows it says it read."""
    assert len(batch) == len(batch.sample_indices)
    for label, arr in batch.arrays.items():
        np.testing.assert_array_equal(arr, srcs[label][batch.read_indices(label)])


def store_for(form, u):
    """The README builds a zarr Store with ``obstore_store``; ours also takes the URL itself."""
    if form == "url":
        return u
    for module in ("obstore", "zarr.storage"):
        pytest.importorskip(module, reason=f"{module} is not installed in this venv: obstore_store untested here")
    return insitubatch.obstore_store(u)


# -- README: "Shape of the API" ------------------------------------------------------------


@pytest.mark.parametrize("form", ["url", "obstore_store"])
def test_readme_quick_start(era5, form):
    from insitubatch_rs import InSituDataset, open_geometries, split_by_chunk

    u, srcs = era5
    store_ = store_for(form, u)
    geoms = open_geometries(store_)  # {var: ArrayGeometry} from zarr metadata
    manifest = split_by_chunk(geoms["t2m"], fractions=(0.8, 0.1, 0.1))

    ds = InSituDataset(store_, manifest, batch_size=32, block_chunks=16)

    orders = []
    for epoch in range(2):
        ds.set_epoch(epoch)
        train, val = [], []
        for batch in ds.train:  # numpy Batch: {var: np.ndarray} + sample_indices
            check(batch, srcs)
            assert set(batch.arrays) == {"t2m", "u10"}
            train.extend(batch.sample_indices.tolist())
        for batch in ds.val:  # deterministic; shares the pool with train
            check(batch, srcs)
            val.extend(batch.sample_indices.tolist())
        assert sorted(train) == manifest.sample_indices(insitubatch.SplitName.TRAIN, geoms["t2m"]).tolist()
        assert val == manifest.sample_indices("val", geoms["t2m"]).tolist(), "val is sequential"
        orders.append(train)
    assert orders[0] != orders[1], "set_epoch reshuffles"


def test_readme_framework_hand_off_torch_and_jax(era5):
    torch = pytest.importorskip("torch")
    from torch.utils.data import DataLoader

    from insitubatch_rs import as_torch, to_jax

    u, srcs = era5
    geoms = insitubatch.open_geometries(u)
    ds = insitubatch.InSituDataset(u, insitubatch.split_by_chunk(geoms["t2m"]), geoms, batch_size=16)

    # torch: parallelism is in our event loop, so num_workers=0, batch_size=None
    loader = DataLoader(as_torch(ds.train), batch_size=None, num_workers=0)  # {var: torch.Tensor}
    anchors = ds.draw_order("train")
    n = 0
    for k, tbatch in enumerate(loader):
        rows = anchors[16 * k : 16 * (k + 1)]
        for label, t in tbatch.items():
            assert isinstance(t, torch.Tensor)
            np.testing.assert_array_equal(t.numpy(), srcs[label][rows])
        n += len(rows)
    assert n == len(anchors)

    pytest.importorskip("jax")
    for batch in ds.train:  # JAX: iterate a view, convert each batch
        jbatch = to_jax(batch)  # {var: jax.Array}
        for label, x in jbatch.items():
            np.testing.assert_array_equal(np.asarray(x), srcs[label][batch.sample_indices])


def test_readme_framework_hand_off_tf(era5, tf):
    u, srcs = era5
    ds = insitubatch.InSituDataset(u, batch_size=8)
    tfds = insitubatch.as_tf_dataset(ds.val)  # a tf.data.Dataset
    rows = ds.manifest.sample_indices("val")
    got = np.concatenate([e["t2m"].numpy() for e in tfds])
    np.testing.assert_array_equal(got, srcs["t2m"][rows])
    assert isinstance(insitubatch.to_tf(next(iter(ds.val)))["t2m"], tf.Tensor)


# -- README / examples/transforms.py: "Transforms" -----------------------------------------


def kelvin_to_celsius(chunk: insitubatch.DecodedChunk) -> insitubatch.DecodedChunk:
    """Shape-preserving chunk stage (examples/transforms.py)."""
    chunk.data = chunk.data - np.float32(273.15)
    return chunk


class Coarsen:
    """A chunk-local regrid: block mean over the last two axes, declaring ``output_inner``."""

    def __init__(self, factor: int = 2) -> None:
        self.factor = factor

    def output_inner(self, geom):
        *lead, h, w = geom.inner_shape
        return (*lead, h // self.factor, w // self.factor), geom.dtype

    def __call__(self, chunk):
        return dataclasses.replace(chunk, data=coarsen(chunk.data, self.factor))


def coarsen(data: np.ndarray, f: int) -> np.ndarray:
    *lead, h, w = data.shape
    trimmed = data[..., : h // f * f, : w // f * f]
    return trimmed.reshape(*lead, h // f, f, w // f, f).mean(axis=(-3, -1)).astype(data.dtype)


def add_windspeed(batch: insitubatch.Batch) -> insitubatch.Batch:
    """Batch stage: a cross-variable derived field."""
    ws = np.sqrt(batch.arrays["u10"] ** 2 + batch.arrays["v10"] ** 2)
    return dataclasses.replace(batch, arrays={**batch.arrays, "windspeed": ws})


def test_transforms_chunk_stage_scoped_and_reshaping(era5):
    u, srcs = era5
    geoms = insitubatch.open_geometries(u)
    ds = insitubatch.InSituDataset(
        u,
        insitubatch.split_by_chunk(geoms["t2m"]),
        geoms,
        batch_size=8,
        chunk_transforms=[
            insitubatch.applies(["t2m"], kelvin_to_celsius),
            insitubatch.applies(["u10"], Coarsen(2)),
        ],
    )
    assert isinstance(kelvin_to_celsius, insitubatch.ChunkTransform)
    assert isinstance(Coarsen(2), insitubatch.ChunkTransform)
    for batch in ds.train:
        idx = batch.sample_indices
        np.testing.assert_array_equal(batch.arrays["t2m"], srcs["t2m"][idx] - np.float32(273.15))
        np.testing.assert_allclose(batch.arrays["u10"], coarsen(srcs["u10"][idx], 2), rtol=1e-6)
        assert batch.arrays["u10"].shape[1:] == (3, 3)
    out = ds.train.geometries  # post-transform geometries (what the adapters infer shapes from)
    assert out["u10"].inner_shape == (3, 3) and out["t2m"].inner_shape == (6, 7)
    cfg = ds.describe()["config"]
    assert cfg["chunk_transforms"] == ("kelvin_to_celsius[t2m]", "Coarsen[u10]")
    v = ds.describe()["variables"]["u10"]
    assert v["output_inner_shape"] == (3, 3) and v["logical_chunk_bytes"] == 8 * 3 * 3 * 4


def test_transforms_batch_stage(era5):
    u, srcs = era5
    g = insitubatch.open_geometries(u)
    geoms = {"u10": g["u10"], "v10": g["t2m"]}  # labels are free; the data stands in for v10
    ds = insitubatch.InSituDataset(
        u, insitubatch.split_by_chunk(g["t2m"]), geoms, batch_size=8, batch_transforms=[add_windspeed]
    )
    for batch in ds.val:
        idx = batch.sample_indices
        want = np.sqrt(srcs["u10"][idx] ** 2 + srcs["t2m"][idx] ** 2)
        np.testing.assert_array_equal(batch.arrays["windspeed"], want)
        np.testing.assert_array_equal(batch.arrays["v10"], srcs["t2m"][idx])
    assert ds.describe()["config"]["batch_transforms"] == ("add_windspeed",)


# -- tuning guide: "Sharing a cache_dir between processes" ---------------------------------


def test_cache_sharing_one_writer_many_readers(era5, tmp_path):
    u, srcs = era5
    geoms = insitubatch.open_geometries(u)
    manifest = insitubatch.split_by_chunk(geoms["t2m"])
    cache = str(tmp_path / "era5-cache")

    # Run once: warm the cache.
    warm = insitubatch.InSituDataset(u, manifest, cache_dir=cache, persist=True)
    for batch in warm.all:
        check(batch, srcs)
    warm.close()

    # Then, concurrently, as many readers as you like.
    readers = [insitubatch.InSituDataset(u, manifest, cache_dir=cache, readonly_cache=True) for _ in range(2)]
    with pytest.raises(RuntimeError):  # ... and no writer while they read
        insitubatch.InSituDataset(u, manifest, cache_dir=cache, persist=True)
    for ds in readers:
        n = 0
        for batch in ds.val:
            check(batch, srcs)
            n += len(batch)
        assert n == 8
        assert ds.last_pass.storage_reads == 0 and ds.last_pass.revived_chunks > 0, "served from the cache"
        cfg = ds.describe()["config"]
        assert (cfg["cache_dir"], cfg["readonly_cache"], cfg["persist"]) == (cache, True, False)
        ds.close()


# -- tuning guide: the memory model, print_summary and describe() -------------------------


def test_describe_and_print_summary(era5):
    u, _ = era5
    geoms = insitubatch.open_geometries(u)
    manifest = insitubatch.split_by_chunk(geoms["t2m"], fractions=(0.8, 0.1, 0.1))
    ds = insitubatch.InSituDataset(u, manifest, batch_size=32, block_chunks=16)
    buf = io.StringIO()
    ds.print_summary(file=buf)  # ds.print_summary(iterations=2) if you will zip two views
    ds.print_summary(iterations=2, file=buf)
    assert "t2m" in buf.getvalue() and "2 iterations" in buf.getvalue()

    geom = insitubatch.open_geometries(u, variables=["t2m"])["t2m"]
    assert geom.chunk_bytes == 8 * 6 * 7 * 4  # bytes one sample-axis chunk occupies once resident
    assert 2 * ds.block_chunks * geom.chunk_bytes > 0  # the floor: current block + one read-ahead

    report = ds.describe()
    assert set(report) == {"variables", "config", "memory", "notes"}
    t2m, u10 = report["variables"]["t2m"], report["variables"]["u10"]
    assert (t2m["label"], t2m["path"], t2m["dtype"]) == ("t2m", "t2m", "float32")
    assert t2m["shape"] == (80, 6, 7) and t2m["chunks"] == (8, 6, 7) and t2m["inner_shape"] == (6, 7)
    assert (t2m["n_samples"], t2m["sample_chunk_size"], t2m["n_chunks"], t2m["offset"]) == (80, 8, 10, 0)
    assert t2m["stored_chunks_per_chunk"] == 1 and u10["stored_chunks_per_chunk"] == 4
    assert t2m["stored_chunk_bytes"] == 8 * 6 * 7 * 4 and u10["stored_chunk_bytes"] == 8 * 3 * 4 * 4
    assert t2m["logical_chunk_bytes"] == 8 * 6 * 7 * 4 and t2m["slot_bytes"] >= t2m["logical_chunk_bytes"]
    assert u10["ragged_multiplier"] == pytest.approx((2 * 3 * 2 * 4) / (6 * 7)), "u10's 3x4 tiles pad 6x7 to 6x8"
    assert t2m["gather_run_bytes"] == 6 * 7 * 4
    assert t2m["output_inner_shape"] == (6, 7) and t2m["output_dtype"] == "float32"

    cfg = report["config"]
    assert (cfg["batch_size"], cfg["block_chunks_requested"], cfg["max_inflight"]) == (32, 16, 32)
    assert (cfg["cache_dir"], cfg["persist"], cfg["readonly_cache"], cfg["assembles"]) == (None, False, False, True)
    assert cfg["n_chunks"] == {"t2m": 10, "u10": 10} and cfg["samples_per_chunk"] == 8
    assert cfg["split_chunks"] == {"train": 8, "val": 1, "test": 1}
    assert cfg["drawable_samples"] == {"train": 64, "val": 8, "test": 8}
    assert cfg["offsets"] == {"t2m": 0, "u10": 0} and cfg["windowed"] is False
    assert 0.0 < cfg["shuffle_quality"] <= 1.0

    mem = report["memory"]
    assert mem["budget_is_automatic"] is True and mem["iterations"] == 1
    assert mem["residency_bytes"] == mem["working_set_bytes"] == cfg["cache_budget_bytes"] == ds.cache_budget_bytes
    parts = ("resident_max_bytes", "inflight_bytes", "queue_bytes", "scratch_bytes", "recycled_bytes")
    assert mem["accounted_bytes"] == sum(mem[k] for k in parts)
    assert mem["estimated_peak_bytes"] > mem["accounted_bytes"]
    assert ds.describe(iterations=2)["memory"]["residency_bytes"] >= 2 * mem["working_set_bytes"] - 1
    assert all(set(n) == {"code", "severity", "subject", "message"} for n in report["notes"])
    with pytest.raises(ValueError):
        ds.describe(iterations=0)


# -- tuning guide: "Which stage is actually the bottleneck?" -------------------------------


def test_last_pass_and_the_per_epoch_log_line(era5, caplog):
    u, srcs = era5
    geoms = insitubatch.open_geometries(u)
    manifest = insitubatch.split_by_chunk(geoms["t2m"], fractions=(0.8, 0.1, 0.1))
    ds = insitubatch.InSituDataset(u, manifest, batch_size=16, block_chunks=8, max_inflight=1)
    assert ds.last_pass is None and ds.cache_hits == 0 and ds.inflight_peak == 0

    caplog.set_level(logging.INFO, logger="insitubatch")
    for i, batch in enumerate(ds.train):
        check(batch, srcs)
        if i == 2:
            break

    st = ds.last_pass
    assert isinstance(st, insitubatch.PassStats)
    assert st.limiting_stage in {"consumer", "store", "decode", "residency", "gather", "batch_transform", "unknown"}
    assert st.times.admission_parked_s >= 0.0  # the evidence behind it
    assert (st.split, st.epoch, st.batches, st.samples) == ("train", 0, 3, 48)
    assert st.depths.max_inflight == 1 and st.depths.inflight_peak == 1
    assert st.depths.batch_queue_capacity == 2 and st.depths.batch_queue_samples >= 3
    assert 0.0 <= st.depths.starved_frac <= 1.0
    assert st.times.producer_s >= st.times.fetch_wait_s >= 0.0
    assert st.cache_misses > 0 and st.storage_reads > 0 and st.ttfb_s is not None
    assert (ds.cache_hits, ds.cache_misses, ds.inflight_peak) == (st.cache_hits, st.cache_misses, 1)
    assert ds.resident_peak == st.depths.resident_peak > 0
    # The verdict is the engine's, and the Python rule for hand-built stats agrees with it.
    engine = json.loads(ds._native.last_pass_json())
    assert insitubatch.bottleneck(st) == (st.limiting_stage, st.advice) == (engine["limiting_stage"], engine["advice"])
    assert st.consumer_idle == engine["consumer_idle"]
    assert rule(st) == rule(dataclasses.replace(st)) == (st.limiting_stage, st.advice, st.consumer_idle)
    d = st.as_dict()
    assert d["limiting_stage"] == st.limiting_stage and d["times"]["decode_s"] == st.times.decode_s
    assert d["depths"]["inflight_peak"] == 1 and d["times"]["assemble_s"] >= 0.0
    assert d["depths"]["decode_queue_peak"] >= 1  # every miss decoded a tile on the pool
    fed = st.depths.batch_queue_full_enough
    assert 0 <= fed <= st.depths.batch_queue_samples and st.depths.fed_frac == fed / st.depths.batch_queue_samples
    # The derived figures are the engine's, and its rules give hand-built copies the same.
    shares = (st.depths.starved_frac, st.depths.fed_frac)
    assert shares == (engine["depths"]["starved_frac"], engine["depths"]["fed_frac"])
    assert st.times.producer_s == engine["times"]["producer_s"] > 0.0
    again = dataclasses.replace(st.depths), dataclasses.replace(st.times)
    assert (again[0].starved_frac, again[0].fed_frac, again[1].producer_s) == (
        st.depths.starved_frac,
        st.depths.fed_frac,
        st.times.producer_s,
    )
    assert "_engine" not in d and "_engine" not in d["times"] and "producer_s" not in d["times"]
    json.dumps(d)  # plain values all the way down

    lines = [r.getMessage() for r in caplog.records if r.name == "insitubatch"]
    assert any(line.startswith("epoch 0 (train): 3 batches") for line in lines), lines
    assert any(line.endswith(f"limited by: {st.limiting_stage} -- {st.advice}") for line in lines), lines


def test_bottleneck_on_hand_built_stats():
    """The rule, on PassStats built by hand (no timing involved)."""
    S, T, D = insitubatch.PassStats, insitubatch.StageTimes, insitubatch.Depths
    assert insitubatch.bottleneck(S("train", 0))[0] == "unknown", "no samples: nothing to attribute"
    fed = S("train", 0, times=T(consumer_s=9.0, consumer_wait_s=1.0), depths=D(batch_queue_samples=10))
    assert insitubatch.bottleneck(fed)[0] == "consumer"
    store = S(
        "train",
        0,
        times=T(consumer_s=1.0, consumer_wait_s=9.0),
        depths=D(batch_queue_samples=10, inflight_peak=4, max_inflight=32),
        blocked_s={"store": 9.0},
    )
    stage, advice = insitubatch.bottleneck(store)
    assert stage == "store" and "peaked at 4 of max_inflight 32" in advice
    spread = dataclasses.replace(store, blocked_s={"store": 3.0, "decode": 3.0, "gather": 3.0})
    assert insitubatch.bottleneck(spread)[0] == "unknown", "no stage owns 40% of the wait"
    idle = dataclasses.replace(store, times=T(consumer_s=0.1, consumer_wait_s=9.9))
    assert idle.consumer_idle and "throughput measurement" in idle.advice
    assert store.depths.fed_frac is None, "the engine does not count a full-enough queue"
    assert (store.depths.starved_frac, D().starved_frac) == (0.0, 0.0)
    assert D(batch_queue_samples=8, batch_queue_empty=2, batch_queue_full_enough=6).fed_frac == 0.75
    assert D(batch_queue_samples=8, batch_queue_empty=2).starved_frac == 0.25
    assert T(fetch_wait_s=1.0, decode_s=2.0, gather_s=0.5, batch_transform_s=0.25, consumer_s=9.0).producer_s == 3.75
    assert T(admission_parked_s=1.0, assemble_s=2.0).producer_s == 3.0


# -- API reference: Batch, windows, drop_last ----------------------------------------------


def test_windowed_views_stack_and_drop_last(era5):
    u, srcs = era5
    g = insitubatch.open_geometries(u)["t2m"]
    geoms = {"t_m1": g, "t_0": g.shift(1), "target": g.shift(1).shift(1)}
    manifest = insitubatch.split_by_chunk(g)
    ds = insitubatch.InSituDataset(u, manifest, geometries=geoms, batch_size=5)
    lo, hi = insitubatch.valid_anchor_range([0, 1, 2], g.n_samples)
    assert (lo, hi) == (0, 78)
    seen = []
    for batch in ds.train:
        if len(batch) < ds.batch_size:
            continue  # insitubatch 0.2.0's drop_last idiom
        x = batch.stack(["t_m1", "t_0"])  # (batch, 2, *inner)
        assert x.shape == (5, 2, 6, 7)
        np.testing.assert_array_equal(batch.read_indices("target"), batch.sample_indices + 2)
        np.testing.assert_array_equal(batch.arrays["target"], srcs["t2m"][batch.sample_indices + 2])
        np.testing.assert_array_equal(x[:, 1], srcs["t2m"][batch.sample_indices + 1])
        assert batch.offsets == {"t_m1": 0, "t_0": 1, "target": 2}
        seen.extend(batch.sample_indices.tolist())
    assert all(lo <= i < hi for i in seen) and len(seen) == 60
    assert ds.describe()["config"]["offsets"] == {"t_m1": 0, "t_0": 1, "target": 2}


# -- our spec's shuffle, through insitubatch 0.2.0's functions -----------------------------


def test_shuffle_functions_reproduce_the_engine_order(era5):
    u, _ = era5
    geoms = insitubatch.open_geometries(u)
    manifest = insitubatch.split_by_chunk(geoms["t2m"])
    ds = insitubatch.InSituDataset(u, manifest, geoms, batch_size=4, block_chunks=3, seed=7)
    spc, n = manifest.sample_chunk_size, manifest.n_samples
    for epoch in (0, 1):
        order = insitubatch.block_shuffled_order(
            manifest.chunks["train"], spc, n, block_chunks=ds.block_chunks, seed=7, epoch=epoch
        )
        assert isinstance(order, insitubatch.DrawOrder) and order.rows.shape == (64, 2)
        np.testing.assert_array_equal(order.rows[:, 0] * spc + order.rows[:, 1], ds.draw_order("train", epoch))
        assert order.n_blocks == 3 and order.block(0) == (0, 24)
        perm = insitubatch.chunk_permutation(manifest.chunks["train"], seed=7, epoch=epoch)
        for b in range(order.n_blocks):
            start, stop = order.block(b)
            assert set(order.rows[start:stop, 0].tolist()) == set(perm[3 * b : 3 * b + 3].tolist())
    q = insitubatch.shuffle_quality(order.rows, spc)
    ds.set_epoch(1)
    assert q == ds.describe()["config"]["shuffle_quality"]
    seq = insitubatch.sequential_order(manifest.chunks["val"], spc, n, block_chunks=2)
    np.testing.assert_array_equal(seq.anchors, ds.draw_order("val"))
    narrowed = order.keep(order.rows[:, 1] != 0)
    assert len(narrowed) == 56 and narrowed.n_blocks == 3 and narrowed.block(0) == (0, 21)
    with pytest.raises(IndexError, match="one boolean per row: the mask holds 3"):
        order.keep([True, False, True])  # a short mask would silently drop the rest
    assert insitubatch.sequential_order([], spc, n, block_chunks=2).rows.shape == (0, 2)


def test_shuffle_functions_reproduce_a_smaller_first_block(era5):
    """``first_block_chunks`` (ours) cuts the functions' first block as the dataset's."""
    u, _ = era5
    geoms = insitubatch.open_geometries(u)
    manifest = insitubatch.split_by_chunk(geoms["t2m"])
    ds = insitubatch.InSituDataset(u, manifest, geoms, batch_size=4, block_chunks=3, seed=7, first_block_chunks=1)
    config = ds.describe()["config"]
    spc, n = manifest.sample_chunk_size, manifest.n_samples
    kw = {"block_chunks": config["block_chunks"], "first_block_chunks": config["first_block_chunks"]}
    order = insitubatch.block_shuffled_order(manifest.chunks["train"], spc, n, seed=7, epoch=1, **kw)
    np.testing.assert_array_equal(order.anchors, ds.draw_order("train", 1))
    assert order.block(0) == (0, 8) and order.n_blocks == 4  # 8 chunks: 1, then 3, 3, 1
    plain = insitubatch.block_shuffled_order(
        manifest.chunks["train"], spc, n, seed=7, epoch=1, block_chunks=config["block_chunks"]
    )
    assert not np.array_equal(plain.anchors, order.anchors)
    seq = insitubatch.sequential_order(manifest.chunks["val"], spc, n, **kw)
    np.testing.assert_array_equal(seq.anchors, ds.draw_order("val"))
    with pytest.raises(ValueError, match="first_block_chunks must be >= 1"):
        insitubatch.sequential_order(manifest.chunks["val"], spc, n, block_chunks=2, first_block_chunks=0)


def test_windowed_order_with_anchor_range(era5):
    u, _ = era5
    g = insitubatch.open_geometries(u)["t2m"]
    manifest = insitubatch.split_by_chunk(g, fractions=(1.0, 0.0, 0.0))
    ds = insitubatch.InSituDataset(u, manifest, {"x": g.shift(-9), "y": g}, batch_size=4, block_chunks=2)
    rng = insitubatch.valid_anchor_range([-9, 0], g.n_samples)
    order = insitubatch.block_shuffled_order(
        manifest.chunks["train"], 8, g.n_samples, block_chunks=2, seed=0, epoch=0, anchor_range=rng
    )
    np.testing.assert_array_equal(order.anchors, ds.draw_order("train"))


# -- API reference: SplitManifest, SplitName, ArrayGeometry ---------------------------------


def test_split_manifest_constructible_and_either_librarys_json(era5, tmp_path):
    u, _ = era5
    g = insitubatch.open_geometries(u)["t2m"]
    made = insitubatch.SplitManifest(
        n_chunks=10, sample_chunk_size=8, n_samples=80, chunks={"train": [0, 1, 2], "val": [3], "test": [4]}, seed=0
    )
    assert made.sample_indices(insitubatch.SplitName.VAL, g).tolist() == list(range(24, 32))
    ds = insitubatch.InSituDataset(u, made, {"t2m": g}, batch_size=8)
    assert sum(len(b) for b in ds.train) == 24 and ds.manifest == made
    # insitubatch 0.2.0 writes json.dumps(asdict(manifest), indent=2); read it back here.
    reference_json = tmp_path / "reference.json"
    reference_json.write_text(json.dumps(dataclasses.asdict(made), indent=2))
    assert insitubatch.SplitManifest.from_json(reference_json) == made
    ours = tmp_path / "ours.json"
    made.to_json(ours)
    assert ours.read_text() == made.to_json() == json.dumps(dataclasses.asdict(made), indent=2), "its text too"
    # The engine answers for the dataclass's fields as they are: unchecked until a dataset is built.
    assert made.chunks_of("all") == [0, 1, 2, 3, 4] and made.chunks_of(None) == made.chunks_of("all")
    made.chunks["train"] = [7, 5]
    assert made.chunks_of("train") == [7, 5]
    assert made.sample_indices("train").tolist() == [*range(56, 64), *range(40, 48)]
    with pytest.raises(ValueError, match="tran"):
        insitubatch.SplitManifest(1, 8, 8, {"tran": [0]}).chunks_of("train")
    assert [s.value for s in insitubatch.SplitName] == ["train", "val", "test"]
    assert insitubatch.SplitName.TRAIN == "train" and str(insitubatch.SplitName.TEST) == "test"
    bad = dataclasses.replace(made, chunks={"train": [10]})
    assert bad.chunks_of("train") == [10] and bad.sample_indices("train").tolist() == [] and "10" in bad.to_json()
    with pytest.raises(ValueError, match="chunk 10"):
        insitubatch.InSituDataset(u, bad, {"t2m": g})


def test_array_geometry_reference_signature_and_members():
    g = insitubatch.ArrayGeometry("t2m", (37, 13, 17), (5, 6, 6), np.float32)
    assert g == insitubatch.ArrayGeometry("t2m", [37, 13, 17], [5, 6, 6], np.dtype("<f4"), 0, 0)
    assert g == insitubatch.ArrayGeometry("t2m", (37, 13, 17), (5, 6, 6), "float32", offset=0, sample_axis=0)
    assert g.dtype == np.float32 and isinstance(g.dtype, np.dtype) and g.dtype.itemsize == 4
    assert (g.n_samples, g.sample_chunk_size, g.n_chunks) == (37, 5, 8)
    assert g.inner_shape == (13, 17) and g.inner_chunks == (6, 6)
    assert g.chunk_of(36) == 7 and g.samples_in_chunk(7) == range(35, 37)
    assert g.inner_grid() == (range(3), range(3)) and list(g.inner_coords())[:2] == [(0, 0), (0, 1)]
    assert g.n_inner_chunks(0) == 9 and g.inner_index((2, 1)) == 7
    assert g.physical_chunk_coord(4, (2, 1)) == (4, 2, 1)
    assert g.slot_shape(7) == (2, 13, 17) and g.tile_shape() == (5, 6, 6)
    assert g.chunk_bytes == 9 * 5 * 6 * 6 * 4
    p = g.tile_placement(7, (2, 2))
    assert p.out_selection == (slice(0, 2), slice(12, 13), slice(12, 17))
    assert p.chunk_selection == (slice(0, 2), slice(0, 1), slice(0, 5)) and not p.is_complete_chunk
    assert g.tile_placement(0, (0, 0)).is_complete_chunk
    z = insitubatch.ArrayGeometry("raw", (1, 2, 30, 16, 15), (1, 1, 4, 8, 8), np.uint16, sample_axis=2)
    assert (
        z.n_samples == 30
        and z.inner_shape == (1, 2, 16, 15)
        and z.physical_chunk_coord(3, (0, 1, 1, 0))
        == (
            0,
            1,
            3,
            1,
            0,
        )
    )
    assert g.shift(2).shift(-1).offset == 1 and hash(g.shift(1)) == hash(g.shift(1))
    with pytest.raises(dataclasses.FrozenInstanceError):
        g.offset = 3
    with pytest.raises(ValueError, match="sample_axis 3 out of range"):
        insitubatch.ArrayGeometry("t2m", (37, 13, 17), (5, 6, 6), np.float32, sample_axis=3)


# -- insitubatch 0.2.0's error types -------------------------------------------------------


def test_errors_have_the_reference_types(era5, tmp_path):
    import shutil

    u, _ = era5
    with pytest.raises(KeyError):
        insitubatch.open_geometries(u, ["nope"])  # an unknown variable
    copy = tmp_path / "with_group"
    shutil.copytree(u.removeprefix("file://"), copy)
    root = json.loads((copy / "zarr.json").read_text())
    root.pop("consolidated_metadata", None)
    (copy / "zarr.json").write_text(json.dumps(root))
    (copy / "sub").mkdir()
    (copy / "sub" / "zarr.json").write_text(json.dumps({"zarr_format": 3, "node_type": "group", "attributes": {}}))
    with pytest.raises(TypeError):
        insitubatch.open_geometries(copy.as_uri(), ["sub"])  # a group, not an array
    geoms = insitubatch.open_geometries(u)
    m = insitubatch.split_by_chunk(geoms["t2m"])
    with pytest.raises(KeyError):
        insitubatch.InSituDataset(u, m, {"x": insitubatch.ArrayGeometry("nope", (80, 6, 7), (8, 6, 7), "float32")})
    for bad in (
        dict(batch_size=0),
        dict(batch_size=-3),
        dict(max_inflight=0),
        dict(cache_budget_bytes=1),
        dict(cache_budget_bytes=-1),
        dict(on_bad_chunk="ignore"),
        dict(persist=True),
        dict(readonly_cache=True),
        dict(cache_dir=str(tmp_path / "absent"), readonly_cache=True),
        dict(cache_dir=str(tmp_path), readonly_cache=True, reset_stale_cache=True),
        dict(seed=-1),
    ):
        with pytest.raises(ValueError):
            insitubatch.InSituDataset(u, m, geoms, **bad)
    with pytest.raises(ValueError):
        insitubatch.split_by_chunk(geoms["t2m"], fractions=(0.5, 0.1, 0.1))
    with pytest.raises(ValueError):
        insitubatch.split_by_chunk(geoms["t2m"], sample_range=(-1, 10))
    with pytest.raises(TypeError):
        insitubatch.applies("t2m", kelvin_to_celsius)
    with pytest.raises(ValueError):
        insitubatch.applies([], kelvin_to_celsius)
    with pytest.raises(ValueError):
        insitubatch.InSituDataset(u, m, geoms, chunk_transforms=[insitubatch.applies(["nope"], kelvin_to_celsius)])


# -- the escape hatch, observability attributes, debug info ---------------------------------


def test_no_buffer_reuse_escape_hatch(era5, monkeypatch, caplog):
    u, srcs = era5
    reused = next(iter(insitubatch.InSituDataset(u, batch_size=8).train))
    assert all(a.base is not None and not a.flags.owndata for a in reused.arrays.values()), "engine buffers"
    monkeypatch.setenv("INSITUBATCH_NO_BUFFER_REUSE", "1")
    caplog.set_level(logging.INFO, logger="insitubatch")
    ds = insitubatch.InSituDataset(u, batch_size=8)
    for batch in ds.train:
        check(batch, srcs)
        assert all(a.flags.owndata for a in batch.arrays.values()), "fresh memory per batch"
    assert any("reuse OFF via INSITUBATCH_NO_BUFFER_REUSE" in r.getMessage() for r in caplog.records)
    monkeypatch.setenv("INSITUBATCH_NO_BUFFER_REUSE", "off")  # names the thing it enables: "off" keeps reuse
    again = next(iter(insitubatch.InSituDataset(u, batch_size=8).train))
    assert not any(a.flags.owndata for a in again.arrays.values())


def test_observability_attributes(era5):
    u, _ = era5
    ds = insitubatch.InSituDataset(u, batch_size=8, max_inflight=None, threads=2)
    cfg = ds.scheduler_config
    assert isinstance(cfg, insitubatch.SchedulerConfig)
    assert (cfg.max_inflight, cfg.read_ahead_chunks, cfg.decode_threads, cfg.on_bad_chunk) == (32, 0, 2, "raise")
    with pytest.raises(AttributeError, match="max_inflight="):
        ds.scheduler_config = insitubatch.SchedulerConfig(max_inflight=4)
    assert ds.cache_budget_bytes == ds.describe()["memory"]["working_set_bytes"]
    assert ds.variables == ["t2m", "u10"] and set(ds.geometries) == {"t2m", "u10"}
    assert ds.train.geometries == ds.geometries, "no reshaping transform: same geometry out"
    list(ds.all)
    assert ds.cache_misses == 20 and ds.cache_hits == 0, "2 arrays x 10 chunks, all loaded"
    list(ds.all)
    assert ds.last_pass.cache_hits + ds.last_pass.cache_misses == 20
    ds.close()
    assert ds.last_pass is not None and ds.last_pass.split == "all", "the report survives close()"


def test_debug_info():
    info = insitubatch.debug_info()
    for key in ("insitubatch_rs", "python", "free-threading", "platform", "cpu count", "numpy", "torch"):
        assert key in info, key
    buf = io.StringIO()
    insitubatch.print_debug_info(file=buf)
    assert buf.getvalue().startswith("insitubatch_rs debug info") and info["python"] in buf.getvalue()
    # Importing it pulls in no framework (they are read from distribution metadata).
    code = "import sys, insitubatch_rs as ib; ib.debug_info(); print(sorted({'torch', 'jax'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_every_reference_name_is_accounted_for():
    """Each name of insitubatch 0.2.0's __all__ is ours or is listed in docs/migration.md as absent."""
    reference_all = textwrap.dedent(
        """ArrayGeometry Batch BatchTransform ChunkPool ChunkRead ChunkTransform DatasetReport DecodedChunk Depths
        InSituDataset PassStats Scheduler SchedulerConfig StageTimes SplitManifest SplitName StandardScaler
        StoredChunkRead applies arraylake_store icechunk_store as_tf_dataset as_torch close_store DrawOrder
        block_shuffled_order bottleneck build_stored_chunk_reads chunk_permutation debug_info ensure_local_dir
        fsspec_store obstore_store open_geometries print_debug_info sequential_order shuffle_quality split_by_chunk
        to_jax to_tf to_torch valid_anchor_range"""
    ).split()
    doc = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "migration.md")
    if not os.path.exists(doc):
        pytest.skip("docs/migration.md is not next to this checkout's tests")
    text = open(doc, encoding="utf-8").read()
    for name in reference_all:
        assert f"`{name}`" in text, f"{name} has no row in docs/migration.md"
        if not hasattr(insitubatch, name):
            row = next(line for line in text.splitlines() if line.startswith(f"| `{name}`"))
            assert "✗" in row or "in progress" in row, f"{name} is missing here but its row does not say so"
