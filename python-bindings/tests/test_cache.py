"""The disk tier from Python: cache_dir, persist, readonly_cache, reset_stale_cache, and the
one-writer / many-readers lock across real processes."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import insitubatch_rs as ib


def make(u, **kw):
    geoms = ib.open_geometries(u)
    kw.setdefault("batch_size", 5)
    kw.setdefault("block_chunks", 2)
    return ib.InSituDataset(u, ib.split_by_chunk(geoms["t2m"], fractions=(1.0, 0.0, 0.0)), geoms, **kw)


def epoch(ds, split="train"):
    return [(b.sample_indices.copy(), {k: b[k].copy() for k in b}) for b in getattr(ds, split)]


def same(a, b):
    assert len(a) == len(b)
    for (ia, xa), (ib_, xb) in zip(a, b):
        np.testing.assert_array_equal(ia, ib_)
        for k in xa:
            np.testing.assert_array_equal(xa[k], xb[k])


def test_persist_across_runs_reads_nothing_and_serves_the_same_batches(zstd, tmp_path):
    u, srcs = zstd
    cache = tmp_path / "cache"
    plain = epoch(make(u))
    with make(u, cache_dir=cache, persist=True) as ds:
        same(epoch(ds), plain)
        assert ds.last_pass.storage_reads > 0
        assert ds.describe()["config"]["disk_tier"].endswith("[persist (writer lock)]")
    assert any(p.suffix == ".npy" for p in cache.iterdir())
    with make(u, cache_dir=cache, persist=True) as ds:
        got = epoch(ds)
        same(got, plain)
        assert ds.last_pass.storage_reads == 0
        assert ds.last_pass.revived_chunks > 0
    for idx, arrays in got:
        np.testing.assert_array_equal(arrays["t2m"], srcs["t2m"][idx])
    # The files are ordinary NPY: numpy maps them.
    f = next(p for p in cache.iterdir() if p.name.startswith("t2m__"))
    assert np.load(f, mmap_mode="r").dtype == np.float32


def test_altered_chunk_files_are_never_served(zstd, tmp_path):
    """A flipped byte, a truncation, another chunk's file under a chunk's name and an NPY
    planted under one are refused read-only (naming the file) and read from the store by a
    writer, which writes them again."""
    u, srcs = zstd
    cache = tmp_path / "cache"
    plain = epoch(make(u))
    with make(u, cache_dir=cache, persist=True) as ds:
        epoch(ds)
    files = sorted((p for p in cache.iterdir() if p.name.startswith("t2m__")), key=lambda p: int(p.stem.rsplit("__")[-1]))
    assert len(files) >= 4
    data = bytearray(files[0].read_bytes())
    data[128 + 4] ^= 0x01
    with open(files[0], "r+b") as f:  # in place
        f.write(data)
    os.truncate(files[1], files[1].stat().st_size // 2)
    files[2].write_bytes(files[3].read_bytes())
    np.save(files[3], np.full(np.load(files[3], mmap_mode="r").shape, 42, np.float32), allow_pickle=False)
    # Their times set back to 1970: this process checked (wrote) them moments ago, and a
    # change within the clock's tick of that keeps a file's times (docs/security.md).
    for f in files[:4]:
        os.utime(f, ns=(10**9, 10**9))
    with make(u, cache_dir=cache, readonly_cache=True) as ds, pytest.raises(RuntimeError, match="not served") as e:
        epoch(ds)
    assert any(str(e.value).endswith(str(f)) for f in files[:4]), str(e.value)
    with make(u, cache_dir=cache, persist=True) as ds:
        same(epoch(ds), plain)
        assert ds.last_pass.storage_reads > 0
    with make(u, cache_dir=cache, readonly_cache=True) as ds:
        got = epoch(ds)
        same(got, plain)
        assert ds.last_pass.storage_reads == 0
    for idx, arrays in got:
        np.testing.assert_array_equal(arrays["t2m"], srcs["t2m"][idx])


def test_a_cache_folder_writable_by_every_user_is_refused_and_created_files_are_the_owners(zstd, tmp_path):
    u, _ = zstd
    cache = tmp_path / "new" / "cache"
    with make(u, cache_dir=cache, persist=True) as ds:
        epoch(ds)
    assert cache.stat().st_mode & 0o777 == 0o700
    assert {p.stat().st_mode & 0o777 for p in cache.iterdir()} == {0o600}
    cache.chmod(0o777)
    with pytest.raises(RuntimeError, match="writable by every user") as e:
        make(u, cache_dir=cache, persist=True)
    assert str(e.value).endswith(str(cache))


def test_options_that_cannot_work_are_refused_up_front(zstd, tmp_path):
    u, _ = zstd
    with pytest.raises(ValueError, match="requires cache_dir"):
        make(u, persist=True)
    with pytest.raises(ValueError, match="requires cache_dir"):
        make(u, readonly_cache=True)
    with pytest.raises(ValueError, match="does not exist"):
        make(u, cache_dir=tmp_path / "nope", readonly_cache=True)
    tmp_path.joinpath("c").mkdir()
    with pytest.raises(ValueError, match="contradict"):
        make(u, cache_dir=tmp_path / "c", readonly_cache=True, reset_stale_cache=True)


def test_one_writer_per_directory_and_close_releases_it(zstd, tmp_path):
    u, _ = zstd
    cache = tmp_path / "cache"
    first = make(u, cache_dir=cache, persist=True)
    with pytest.raises(RuntimeError, match=f"pid {os.getpid()}") as e:
        make(u, cache_dir=cache)
    assert "Do NOT delete the lockfile" in str(e.value)
    first.close()
    make(u, cache_dir=cache, persist=True).close()


HOLDER = textwrap.dedent(
    """
    import sys, insitubatch_rs as ib
    u, cache, mode = sys.argv[1:4]
    geoms = ib.open_geometries(u)
    kw = {"writer": {"persist": True}, "reader": {"readonly_cache": True},
          "filler": {"persist": True, "shared_cache": True}}[mode]
    ds = ib.InSituDataset(u, ib.split_by_chunk(geoms["t2m"], fractions=(1.0, 0.0, 0.0)), geoms,
                          batch_size=5, block_chunks=2, cache_dir=cache, **kw)
    print("opened", flush=True)
    sys.stdin.read()
    n = sum(1 for _ in ds.train)
    print("batches", n, ds.last_pass.storage_reads, flush=True)
    """
)


def holder(u, cache, mode):
    p = subprocess.Popen(
        [sys.executable, "-c", HOLDER, u, str(cache), mode],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    line = p.stdout.readline()
    assert line.strip() == "opened", p.stderr.read()
    return p


def test_processes_a_writer_excludes_all_readers_coexist_and_sigkill_releases(zstd, tmp_path):
    u, _ = zstd
    cache = tmp_path / "cache"
    w = holder(u, cache, "writer")
    with pytest.raises(RuntimeError, match=f"pid {w.pid}"):
        make(u, cache_dir=cache, persist=True)
    with pytest.raises(RuntimeError, match="read-only while a writer"):
        make(u, cache_dir=cache, readonly_cache=True)
    out, _ = w.communicate("")
    assert w.returncode == 0 and out.startswith("batches")
    r1, r2 = holder(u, cache, "reader"), holder(u, cache, "reader")
    with pytest.raises(RuntimeError, match="read-only openers"):
        make(u, cache_dir=cache, persist=True)
    for r in (r1, r2):
        out, err = r.communicate("")
        assert r.returncode == 0, err
        assert out.split()[2] == "0", "a reader of a warm cache fetched"
    w = holder(u, cache, "writer")
    w.send_signal(signal.SIGKILL)
    w.wait()
    make(u, cache_dir=cache, persist=True).close()


def test_fillers_share_a_directory_and_find_what_the_others_wrote_since_they_opened(zstd, tmp_path):
    u, _ = zstd
    cache = tmp_path / "cache"
    f1, f2 = holder(u, cache, "filler"), holder(u, cache, "filler")
    with pytest.raises(RuntimeError, match="read-only while processes fill it"):
        make(u, cache_dir=cache, readonly_cache=True)
    with pytest.raises(RuntimeError, match="shared_cache fillers"):
        make(u, cache_dir=cache, persist=True)
    # f1 reads and writes every chunk; f2, open all along, then reads them all from disk.
    out, err = f1.communicate("")
    assert f1.returncode == 0 and int(out.split()[2]) > 0, err
    out, err = f2.communicate("")
    assert f2.returncode == 0, err
    assert out.split()[2] == "0", "a filler fetched chunks another filler had written"
    with make(u, cache_dir=cache, persist=True, shared_cache=True) as ds:
        assert ds.describe()["config"]["disk_tier"].endswith("[persist, shared with other processes (shared lock)]")
        assert sum(len(b) for b in ds.train) > 0 and ds.last_pass.storage_reads == 0
    with pytest.raises(ValueError, match="needs persist and not readonly_cache"):
        make(u, cache_dir=cache, shared_cache=True)
    w = holder(u, cache, "writer")
    with pytest.raises(RuntimeError, match="while a writer without shared_cache holds it"):
        make(u, cache_dir=cache, persist=True, shared_cache=True)
    w.communicate("")


def test_node_affinity_takes_the_launchers_local_world_size_and_is_noted(zstd, monkeypatch):
    u, _ = zstd
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    with pytest.raises(ValueError, match="LOCAL_WORLD_SIZE, which is not set"):
        make(u, rank=0, world_size=4, node_affinity=True)
    with pytest.raises(ValueError, match="divide world_size"):
        make(u, rank=0, world_size=4, node_affinity=3)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    with make(u, rank=1, world_size=4, node_affinity=True) as ds:
        notes = [n for n in ds.describe()["notes"] if n["code"] == "node-affinity"]
        assert len(notes) == 1 and "each of the 2 nodes (2 ranks each)" in notes[0]["message"], notes
        state = ds.state_dict()
        assert state["node_ranks"] == 2
        # Rank 1 draws only from node 0's chunks, in every epoch.
        seen = set()
        for e in range(3):
            ds.set_epoch(e)
            seen |= {int(i) for b in ds.train for i in b.sample_indices}
    with make(u, rank=3, world_size=4, node_affinity=2) as other:
        theirs = set()
        for e in range(3):
            other.set_epoch(e)
            theirs |= {int(i) for b in other.train for i in b.sample_indices}
    assert seen and theirs and not seen & theirs, "two nodes drew the same samples across epochs"


def test_an_edited_python_transform_is_stale_then_reset(zstd, tmp_path):
    u, srcs = zstd
    cache = tmp_path / "cache"

    def make_scale(k):
        def scale(chunk):
            return chunk.replace(chunk.data * k)

        return scale

    with make(u, cache_dir=cache, persist=True, chunk_transforms=[ib.applies(["t2m"], make_scale(2.0))]) as ds:
        epoch(ds)
    edited = [ib.applies(["t2m"], make_scale(3.0))]
    with pytest.raises(RuntimeError, match=r"stale.*\['t2m'\]|\[\"t2m\"\].*stale"):
        make(u, cache_dir=cache, persist=True, chunk_transforms=edited)
    with make(u, cache_dir=cache, persist=True, chunk_transforms=edited, reset_stale_cache=True) as ds:
        for idx, arrays in epoch(ds):
            np.testing.assert_array_equal(arrays["t2m"], srcs["t2m"][idx] * 3.0)
            np.testing.assert_array_equal(arrays["u10"], srcs["u10"][idx])
        assert ds.last_pass.revived_chunks > 0, "u10 kept its cached chunks"


def test_refitting_one_arrays_scaler_statistics_leaves_the_other_arrays_cached(zstd, tmp_path):
    u, srcs = zstd
    cache = tmp_path / "cache"

    def scaler(u10_mean):
        return ib.StandardScaler({"t2m": 280.0, "u10": u10_mean}, {"t2m": 10.0, "u10": 3.0})

    with make(u, cache_dir=cache, persist=True, chunk_transforms=[scaler(0.5)]) as ds:
        epoch(ds)
    with pytest.raises(RuntimeError) as e:
        make(u, cache_dir=cache, persist=True, chunk_transforms=[scaler(0.25)])
    assert '["u10"]' in str(e.value) and "t2m" not in str(e.value).split("stale")[0], str(e.value)
    with make(u, cache_dir=cache, persist=True, chunk_transforms=[scaler(0.25)], reset_stale_cache=True) as ds:
        for idx, arrays in epoch(ds):
            np.testing.assert_allclose(arrays["u10"], (srcs["u10"][idx] - 0.25) / 3.0, rtol=1e-6, atol=1e-6)
            np.testing.assert_allclose(arrays["t2m"], (srcs["t2m"][idx] - 280.0) / 10.0, rtol=1e-6, atol=1e-5)
        lp = ds.last_pass
        assert lp.revived_chunks > 0 and lp.storage_reads > 0, "t2m revived, u10 read again"


def test_cache_token_prefers_a_declared_key():
    class Scale:
        cache_key = "stats-v7"

        def __call__(self, chunk):
            return chunk

    assert ib._cache_token(Scale()) == "key:stats-v7"

    def a(chunk):
        return chunk

    def b(chunk):
        return chunk.replace(chunk.data + 1)

    with pytest.warns(UserWarning) if not _has_cloudpickle() else contextlib.nullcontext():
        ta, tb = ib._cache_token(a), ib._cache_token(b)
    assert ta != tb and ta == ib._cache_token(a)


def _has_cloudpickle() -> bool:
    try:
        import cloudpickle  # noqa: F401
    except ImportError:
        return False
    return True
