"""Batches consumed from several threads at once: one iterator shared by four threads, and
four datasets over the same store, each in its own thread. Every sample comes exactly once
per epoch, with the values a single-threaded run gets. On free-threaded CPython
(scripts/test-python.sh runs this file there with ``PYTHON_GIL=0``) the threads really run
in parallel, and importing the extension must leave the GIL off."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import insitubatch_rs as ib
from conftest import store, url

THREADS = 4
EPOCHS = 2


def free_threaded() -> bool:
    return bool(sysconfig.get_config_var("Py_GIL_DISABLED"))


def test_gil_stays_disabled_after_import():
    """Importing a module that does not declare ``gil_used = false`` turns the GIL back on
    (with a RuntimeWarning), so this is the check that the extension says it is thread-safe.
    In a fresh interpreter without ``PYTHON_GIL``: ``PYTHON_GIL=0`` (how the suite runs) would
    keep the GIL off whatever the module declares."""
    if not free_threaded():
        if os.environ.get("IB_EXPECT_FREE_THREADED") == "1":
            pytest.fail(f"IB_EXPECT_FREE_THREADED=1 but {sys.version} is not free-threaded")
        pytest.skip(f"not a free-threaded interpreter ({sys.version.split()[0]}): the GIL is always on")
    env = {k: v for k, v in os.environ.items() if k != "PYTHON_GIL"}
    probe = "import sys, insitubatch_rs._native; print(sys._is_gil_enabled())"
    run = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "False", f"importing insitubatch_rs re-enabled the GIL: {run.stderr}"
    assert not sys._is_gil_enabled()  # and in this process (PYTHON_GIL=0 under test-python.sh)


def open_ds(fixtures, manifest) -> ib.InSituDataset:
    s = store(manifest, "v3_zstd")
    geoms = ib.open_geometries(url(fixtures, s["path"]), sample_axis=s["sample_axis"])
    m = ib.split_by_chunk(next(iter(geoms.values())))
    return ib.InSituDataset(url(fixtures, s["path"]), m, geoms, batch_size=3, block_chunks=2, seed=7)


Run = dict[int, tuple[list[int], dict[str, np.ndarray]]]  # batch index -> (samples, arrays)


def copy_batch(b: ib.Batch) -> tuple[int, list[int], dict[str, np.ndarray]]:
    return b.index, b.sample_indices.tolist(), {k: np.array(v, copy=True) for k, v in b.items()}


def single_threaded(ds: ib.InSituDataset, epoch: int) -> Run:
    ds.set_epoch(epoch)
    return {i: (samples, arrays) for i, samples, arrays in map(copy_batch, ds.train)}


def assert_same_run(got: list[tuple[int, list[int], dict[str, np.ndarray]]], want: Run) -> None:
    indices = sorted(i for i, _, _ in got)
    assert indices == sorted(want), "every batch exactly once"
    samples = [s for _, ss, _ in got for s in ss]
    assert sorted(samples) == sorted(s for ss, _ in want.values() for s in ss), "every sample exactly once"
    for i, ss, arrays in got:
        assert ss == want[i][0], f"batch {i} holds other samples than the single-threaded run"
        for label, a in arrays.items():
            np.testing.assert_array_equal(a, want[i][1][label], err_msg=f"batch {i}, {label}")


def test_four_threads_share_one_iterator(fixtures, manifest):
    ds = open_ds(fixtures, manifest)
    for epoch in range(EPOCHS):
        want = single_threaded(ds, epoch)
        assert len(want) > THREADS, "the store must give every thread batches"
        ds.set_epoch(epoch)
        it = iter(ds.train)
        start = threading.Barrier(THREADS)

        def consume(_: int) -> list[tuple[int, list[int], dict[str, np.ndarray]]]:
            start.wait()  # all four call next() concurrently from the first batch
            return [copy_batch(b) for b in it]

        with ThreadPoolExecutor(THREADS) as pool:
            per_thread = list(pool.map(consume, range(THREADS)))
        assert_same_run([b for got in per_thread for b in got], want)
        assert ds.last_pass is not None and ds.last_pass.epoch == epoch
        assert ds.last_pass.samples == sum(len(ss) for ss, _ in want.values())


def test_one_dataset_per_thread_over_one_store(fixtures, manifest):
    reference = open_ds(fixtures, manifest)
    want = [single_threaded(reference, e) for e in range(EPOCHS)]
    start = threading.Barrier(THREADS)

    def train(_: int) -> list[list[tuple[int, list[int], dict[str, np.ndarray]]]]:
        ds = open_ds(fixtures, manifest)
        start.wait()
        epochs = []
        for epoch in range(EPOCHS):
            ds.set_epoch(epoch)
            epochs.append([copy_batch(b) for b in ds.train])
        ds.close()
        return epochs

    with ThreadPoolExecutor(THREADS) as pool:
        for epochs in pool.map(train, range(THREADS)):
            for got, w in zip(epochs, want, strict=True):
                assert_same_run(got, w)
