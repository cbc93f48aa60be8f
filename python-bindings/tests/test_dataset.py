from __future__ import annotations

import shutil

import numpy as np
import pytest

import insitubatch_rs as ib
from conftest import source, store, url

STORES = ["v3_zstd", "v3_blosc", "v3_gzip", "v2_blosc", "v2_zlib", "v3_sharded", "v3_ragged",
          "ome_ngff", "cf", "cf_v2", "multi_spc", "missing_chunks"]


def data_arrays(s: dict) -> dict:
    return {k: a for k, a in s["arrays"].items() if not a["is_coordinate"]}


def open_ds(fixtures, s, **kw):
    geoms = ib.open_geometries(url(fixtures, s["path"]), sample_axis=s["sample_axis"])
    first = next(iter(geoms.values()))
    m = ib.split_by_chunk(first)
    kw.setdefault("batch_size", 5)
    kw.setdefault("block_chunks", 2)
    return ib.InSituDataset(url(fixtures, s["path"]), m, geoms, **kw), geoms, m


def check_pass(fixtures, s, batches, expected):
    srcs = {k: source(fixtures, a, s["sample_axis"]) for k, a in data_arrays(s).items()}
    seen = []
    for b in batches:
        assert set(b) == set(srcs)
        for label, src in srcs.items():
            np.testing.assert_array_equal(b[label], src[b.read_indices(label)])
            assert b[label].dtype == src.dtype
        seen.extend(b.sample_indices.tolist())
    assert sorted(seen) == sorted(expected.tolist()), "every sample exactly once"
    return seen


@pytest.mark.parametrize("name", STORES)
def test_every_sample_once_and_equal_to_source(fixtures, manifest, name):
    s = store(manifest, name)
    ds, geoms, m = open_ds(fixtures, s)
    assert set(geoms) == set(data_arrays(s)), "coordinates skipped on discovery"
    train = list(ds.train)
    seen = check_pass(fixtures, s, train, m.sample_indices("train"))
    assert all(len(b) == 5 for b in train[:-1])
    everything = list(ds.all)
    seen_all = check_pass(fixtures, s, everything, m.sample_indices("all"))
    assert seen_all == sorted(seen_all), "all is sequential"
    if len(seen) > 10:
        assert seen != sorted(seen), "train is shuffled"
    assert ds.last_pass.split == "all"
    assert ds.last_pass.samples == len(seen_all)


def test_sample_axis_2_ome_ngff(fixtures, manifest):
    s = store(manifest, "ome_ngff")
    geoms = ib.open_geometries(url(fixtures, s["path"]), ["raw"], sample_axis=2)
    g = geoms["raw"]
    assert (g.sample_axis, g.n_samples, g.sample_chunk_size, g.n_chunks) == (2, 30, 4, 8)
    ds = ib.InSituDataset(url(fixtures, s["path"]), ib.split_by_chunk(g), geoms, batch_size=3)
    src = source(fixtures, s["arrays"]["raw"], 2)
    n = 0
    for b in ds.train:
        assert b["raw"].shape[1:] == (1, 2, 16, 15)
        np.testing.assert_array_equal(b["raw"], src[b.sample_indices])
        n += len(b)
    assert n == len(ds.manifest.sample_indices("train"))


def test_determinism_same_seed_and_epochs(fixtures, manifest):
    s = store(manifest, "v3_zstd")

    def run(seed, epoch):
        ds, _, _ = open_ds(fixtures, s, seed=seed)
        ds.set_epoch(epoch)
        out = [(b.sample_indices.copy(), {k: v.copy() for k, v in b.items()}) for b in ds.train]
        assert ds.draw_order("train").tolist() == [i for idx, _ in out for i in idx.tolist()]
        return out

    a, b = run(7, 0), run(7, 0)
    assert len(a) == len(b)
    for (ia, xa), (ib_, xb) in zip(a, b):
        np.testing.assert_array_equal(ia, ib_)
        for k in xa:
            np.testing.assert_array_equal(xa[k], xb[k])
    order = lambda r: np.concatenate([i for i, _ in r]).tolist()  # noqa: E731
    assert order(run(7, 1)) != order(a), "another epoch, another order"
    assert sorted(order(run(7, 1))) == sorted(order(a))
    assert order(run(8, 0)) != order(a), "another seed, another order"


def test_epoch_on_same_dataset_reiterable_view(fixtures, manifest):
    s = store(manifest, "v3_zstd")
    ds, _, _ = open_ds(fixtures, s)
    first = np.concatenate([b.sample_indices for b in ds.train])
    again = np.concatenate([b.sample_indices for b in ds.train])
    np.testing.assert_array_equal(first, again)
    ds.set_epoch(1)
    assert ds.epoch == 1
    other = np.concatenate([b.sample_indices for b in ds.train])
    assert other.tolist() != first.tolist() and sorted(other) == sorted(first)
    assert [b.epoch for b in ds.train][0] == 1


def test_windowed_pair_exact_under_shuffle(fixtures, manifest):
    s = store(manifest, "v3_zstd")
    g = ib.open_geometries(url(fixtures, s["path"]), ["t2m"])["t2m"]
    assert g.shift(1).offset == 1 and g.shift(1).shift(2).offset == 3
    m = ib.split_by_chunk(g)
    ds = ib.InSituDataset(url(fixtures, s["path"]), m, {"x": g, "y": g.shift(1)}, batch_size=4, block_chunks=2)
    src = source(fixtures, s["arrays"]["t2m"], 0)
    lo, hi = ib.valid_anchor_range([0, 1], g.n_samples)
    assert (lo, hi) == (0, g.n_samples - 1)
    seen = []
    for b in ds.train:
        assert b.offsets == {"x": 0, "y": 1}
        np.testing.assert_array_equal(b.read_indices("y"), b.sample_indices + 1)
        np.testing.assert_array_equal(b["x"], src[b.sample_indices])
        np.testing.assert_array_equal(b["y"], src[b.sample_indices + 1])
        st = b.stack(["x", "y"])
        assert st.shape == (len(b), 2, *src.shape[1:])
        np.testing.assert_array_equal(st[:, 1], b["y"])
        seen.extend(b.sample_indices.tolist())
    expected = [i for i in m.sample_indices("train").tolist() if lo <= i < hi]
    assert sorted(seen) == expected and seen != expected


def test_empty_split_yields_nothing(fixtures, manifest):
    s = store(manifest, "v3_zstd")
    g = ib.open_geometries(url(fixtures, s["path"]), ["t2m"])["t2m"]
    m = ib.split_by_chunk(g, fractions=(1.0, 0.0, 0.0))
    assert m.chunks["val"] == [] and len(m.sample_indices("val")) == 0
    ds = ib.InSituDataset(url(fixtures, s["path"]), m, {"t2m": g})
    assert list(ds.val) == [] and list(ds.test) == []
    assert len(iter(ds.val)) == 0
    assert sum(len(b) for b in ds.train) == g.n_samples


def test_on_bad_chunk_nan_and_raise(fixtures, manifest):
    bad = manifest["bad"]
    u = url(fixtures, bad["path"])
    g = ib.open_geometries(u, ["corrupt_chunk"])["corrupt_chunk"]
    spc = g.sample_chunk_size
    ds = ib.InSituDataset(u, ib.split_by_chunk(g), {"v": g}, on_bad_chunk="nan", batch_size=4)
    rows = {}
    for b in ds.all:
        for i, r in zip(b.sample_indices.tolist(), b["v"]):
            rows[i] = r.copy()
    assert sorted(rows) == list(range(g.n_samples))
    for i, r in rows.items():
        if i // spc == 1:
            assert np.isnan(r).all(), f"sample {i} of the bad chunk is NaN"
        else:
            assert not np.isnan(r).any()
    assert len(ds.bad_chunks) == 1 and ds.bad_chunks[0].chunk_index == 1
    assert ds.bad_chunks[0].inner_coord == (0, 0) and ds.bad_chunks[0].coords == (1, 0, 0)
    raising = ib.InSituDataset(u, ib.split_by_chunk(g), {"v": g}, batch_size=4)
    with pytest.raises(ib.InsitubatchIOError, match="c/1/0/0"):
        list(raising.all)
    assert isinstance(ib.InsitubatchIOError("x"), OSError)


def test_describe_never_touches_the_store(fixtures, manifest, tmp_path, capsys):
    s = store(manifest, "v3_zstd")
    copy = tmp_path / "store"
    shutil.copytree(fixtures / s["path"], copy)
    ds = ib.InSituDataset(copy.as_uri(), batch_size=8, block_chunks=4)
    shutil.rmtree(copy)
    d = ds.describe()
    assert d["config"]["batch_size"] == 8 and d["config"]["block_chunks"] >= 4
    v = d["variables"]
    assert v["t2m"]["n_samples"] == 80 and v["t2m"]["sample_chunk_size"] == 8 and v["t2m"]["n_chunks"] == 10
    assert d["memory"] and isinstance(d["notes"], list)
    assert ds.describe(iterations=2)["memory"] != d["memory"]
    ds.print_summary()
    assert "t2m" in capsys.readouterr().out
    assert ds.last_pass is None
    with pytest.raises(ValueError):
        ds.describe(iterations=0)


def test_quality_curve_is_describe_at_each_block_size(fixtures, manifest, tmp_path):
    """``quality_curve`` (ours): each point is what ``describe()`` says with that
    ``block_chunks`` (and no explicit budget), built from the metadata already read: the store
    may be gone. Bad values are the same errors as the knob's."""
    s = store(manifest, "v3_zstd")
    copy = tmp_path / "store"
    shutil.copytree(fixtures / s["path"], copy)
    ds = ib.InSituDataset(copy.as_uri(), batch_size=8, block_chunks=2, cache_budget_bytes=1 << 30)
    shutil.rmtree(copy)
    curve = ds.quality_curve([1, 4, 10])
    assert [p["block_chunks"] for p in curve] == [1, 4, 10]
    shutil.copytree(fixtures / s["path"], copy)
    for p in curve:
        alone = ib.InSituDataset(copy.as_uri(), batch_size=8, block_chunks=p["block_chunks"]).describe()
        assert p["block_chunks_widened"] == alone["config"]["block_chunks"]
        assert p["quality"] == alone["config"]["shuffle_quality"]
        assert p["floor_bytes"] == alone["memory"]["floor_bytes"]
        assert p["estimated_peak_bytes"] == alone["memory"]["estimated_peak_bytes"]
    assert curve[-1]["quality"] > curve[0]["quality"]
    with pytest.raises(ValueError, match="block_chunks"):
        ds.quality_curve([0])
    with pytest.raises(TypeError, match="block_chunks"):
        ds.quality_curve([2.5])


def test_errors_are_the_right_classes(fixtures, manifest):
    bad = manifest["bad"]
    u = url(fixtures, bad["path"])
    with pytest.raises(ib.InsitubatchIOError, match="absent"):
        ib.open_geometries(u, ["absent"])
    with pytest.raises(ib.InsitubatchIOError):
        ib.open_geometries(u, ["malformed_metadata"])
    with pytest.raises(ib.InsitubatchIOError):
        ib.open_geometries(u, ["unsupported_codec"])
    for hostile in ("hostile_shape", "hostile_huge"):
        with pytest.raises((ValueError, ib.InsitubatchIOError)):
            ib.open_geometries(u, [hostile])
    with pytest.raises(OSError):
        ib.InSituDataset(url(fixtures, "no_such_store"))
    zs = url(fixtures, "v3_zstd")
    g = ib.open_geometries(zs, ["t2m"])["t2m"]
    with pytest.raises(ValueError):
        ib.split_by_chunk(g, fractions=(0.5, 0.1, 0.1))
    with pytest.raises(ValueError):
        ib.split_by_chunk(g, sample_range=(50, 10))
    with pytest.raises(ValueError):
        ib.InSituDataset(zs, batch_size=0)
    with pytest.raises(ValueError):
        ib.InSituDataset(zs, on_bad_chunk="ignore")
    with pytest.raises(ValueError, match="below|floor"):
        ib.InSituDataset(zs, cache_budget_bytes=1)
    with pytest.raises(ValueError):
        ib.open_geometries(zs, ["t2m"], sample_axis=5)
    with pytest.raises(ValueError):
        ib.ArrayGeometry("x", [10, 4], [0, 4], "float32")
    ds = ib.InSituDataset(zs)
    with pytest.raises(ValueError):
        ds.view("nope")
    with ds:
        pass
    assert ds.closed
    with pytest.raises(ValueError, match="closed"):
        iter(ds.train)


def test_the_options_arrive_as_one_spec_that_core_reads(fixtures):
    """Every option reaches the extension as one dict (``_options.DatasetSpec``, generated from
    core's ``DatasetSpec``), read by core's serde derive: an unknown key is refused naming the
    known ones, a wrong value names its key, an absent one takes core's default, and a wrong
    ``on_bad_chunk`` word gets core's message; each refusal carries its ``kind`` and ``option``."""
    from insitubatch_rs import _native
    from insitubatch_rs._options import DatasetSpec

    zs = url(fixtures, "v3_zstd")
    defaults = _native.defaults()
    assert set(DatasetSpec.__annotations__) <= set(defaults), "every option has the engine's default"

    def open_with(spec):
        return _native.NativeDataset(zs, None, None, spec)

    with pytest.raises(ValueError, match='unknown option "batch_sise"; the known ones are batch_size') as e:
        open_with({"batch_sise": 8})
    assert (e.value.kind, e.value.option) == ("invalid_option", "batch_sise")
    with pytest.raises(ValueError, match="^batch_size: ") as e:
        open_with({"batch_size": "8"})
    assert e.value.option == "batch_size"
    with pytest.raises(ValueError, match='on_bad_chunk must be "raise" or "nan", got "ignore"'):
        ib.InSituDataset(zs, on_bad_chunk="ignore")
    with pytest.raises(ValueError, match="^on_bad_chunk: "):
        ib.InSituDataset(zs, on_bad_chunk=float("nan"))
    ds = open_with({"batch_size": 8, "seed": 3})
    assert ds.block_chunks == defaults["block_chunks"]
    ds.close()


def test_manifest_roundtrip_and_geometry(fixtures, tmp_path):
    g = ib.open_geometries(url(fixtures, "v3_sharded"))["t2m"]
    assert g.shard is not None and g.chunks != g.shard
    assert g.chunk_bytes > 0 and g.dtype == "float32"
    assert g == ib.ArrayGeometry(g.path, list(g.shape), list(g.chunks), g.dtype) or g.shard is not None
    m = ib.split_by_chunk(g, contiguous=False, seed=3)
    p = tmp_path / "m.json"
    m.to_json(p)
    m2 = ib.SplitManifest.from_json(p)
    assert m2 == m and m2.chunks == m.chunks and m2.seed == 3
    idx = m.sample_indices("train")
    assert idx.dtype == np.int64
    assert sorted(m.chunks["train"] + m.chunks["val"] + m.chunks["test"]) == list(range(m.n_chunks))
    r = ib.split_by_chunk(g, sample_range=(0, g.sample_chunk_size * 2))
    assert sorted(sum(r.chunks.values(), [])) == [0, 1]
    assert ib.valid_anchor_range([-2, 3], 10) == (2, 7)
    assert ib.valid_anchor_range([0, 20], 10)[0] == ib.valid_anchor_range([0, 20], 10)[1]


# core/src/shuffle.rs pins the chunk permutation of key (seed=0, epoch=0, train, chunks):
# shuffling chunk ids 0..10 gives this order on every target.
RUST_PINNED_ORDER = [1, 2, 8, 4, 3, 6, 9, 7, 5, 0]


def test_parity_with_rust_pinned_order(fixtures, manifest):
    s = store(manifest, "v3_zstd")
    u = url(fixtures, s["path"])
    geoms = ib.open_geometries(u)
    m = ib.split_by_chunk(geoms["t2m"], fractions=(1.0, 0.0, 0.0))
    assert m.chunks_of("train") == list(range(10))
    ds = ib.InSituDataset(u, m, geoms, batch_size=5, block_chunks=1, seed=0)
    assert ds.block_chunks == 1
    drawn = np.concatenate([b.sample_indices for b in ds.train])
    np.testing.assert_array_equal(drawn, ds.draw_order("train", 0))
    with pytest.raises(ValueError, match="epoch must be >= 0"):
        ds.draw_order("train", -1)
    chunk_seq = [int(c) for i, c in enumerate(drawn // 8) if i == 0 or c != drawn[i - 1] // 8]
    assert chunk_seq == RUST_PINNED_ORDER, "the Python pass draws chunks in the Rust engine's pinned order"
    for k, c in enumerate(RUST_PINNED_ORDER):
        block = drawn[8 * k : 8 * (k + 1)]
        assert sorted(block.tolist()) == list(range(8 * c, 8 * c + 8))
    assert [len(b) for b in ds.train] == [5] * 16
    assert len(ds.train) == 16


def test_a_smaller_first_block_is_an_option_whose_cost_describe_reports(zstd):
    """``first_block_chunks``: the first batch of each epoch is drawn from that many chunks
    (widened to hold a batch), every sample is still drawn once, the cost is a ``describe()``
    note, and 0 is a ValueError naming it. Unset, the specified order."""
    u, src = zstd
    specified = ib.InSituDataset(u, batch_size=8, block_chunks=8, seed=1)
    fast = ib.InSituDataset(u, batch_size=8, block_chunks=8, seed=1, first_block_chunks=1)
    first_specified = list(specified.train)[0].sample_indices
    batches = list(fast.train)
    assert len({int(t) // 8 for t in batches[0].sample_indices}) == 1, "the first batch is one chunk's samples"
    assert len({int(t) // 8 for t in first_specified}) > 1, "the specified order mixes the first batch"
    drawn = sorted(int(t) for b in batches for t in b.sample_indices)
    assert drawn == sorted(int(t) for b in specified.train for t in b.sample_indices), "every sample once"
    for b in batches:
        np.testing.assert_array_equal(b["t2m"], src["t2m"][np.asarray(b.sample_indices)])
    report = fast.describe()
    assert report["config"]["first_block_chunks"] == 1
    assert specified.describe()["config"]["first_block_chunks"] == specified.block_chunks
    note = next(n for n in report["notes"] if n["code"] == "first-block-smaller")
    assert "drawn from 1 chunk(s)" in note["message"], note
    assert not any(n["code"] == "first-block-smaller" for n in specified.describe()["notes"])
    with pytest.raises(ValueError, match="first_block_chunks"):
        ib.InSituDataset(u, first_block_chunks=0)
