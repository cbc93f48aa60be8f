"""Ranks, resumes and elastic world sizes: in one process (several datasets standing for the
ranks), then as real torchrun jobs (gloo, CPU) over a counting zarr-python store, including a
job killed with SIGKILL after its checkpoint and resumed with 2 and with 3 ranks."""

from __future__ import annotations

import gc
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import insitubatch_rs as ib

from conftest import store, url

JOB = Path(__file__).with_name("dist_job.py")


def frameworks_required() -> bool:
    """Whether a missing torch/JAX is a failure: under CI, in the venv that installs them
    (scripts/test-python.sh sets IB_FRAMEWORKS=1 there; the other Pythons' venvs have none)."""
    ci = os.environ.get("CI", "").strip().lower() not in ("", "0", "false")
    return ci and os.environ.get("IB_FRAMEWORKS") == "1"


def need_torch() -> Any:
    """torch, or a skip that says why (a failure where CI installs it)."""
    try:
        import torch
        import torch.distributed as dist
    except ImportError:
        why = "torch is not installed (tools/python/torch.in)"
        if frameworks_required():
            pytest.fail(f"{why}; CI installs it in this venv, so this is a failure, not a skip")
        pytest.skip(why)
    if not dist.is_available():
        pytest.skip("this torch build has no torch.distributed")
    return torch


def batches(ds: ib.InSituDataset, it: Any = None, take: int | None = None) -> list[tuple]:
    """(index, sample indices, each label's bytes) of the batches of a pass."""
    out = []
    for b in it if it is not None else ds.train:
        out.append((b.index, b.sample_indices.tolist(), {k: np.asarray(v).tobytes() for k, v in b.items()}))
        if take is not None and len(out) == take:
            break
    return out


def zstd_ds(fixtures: Path, manifest: dict, **kw: Any) -> ib.InSituDataset:
    return ib.InSituDataset(url(fixtures, store(manifest, "v3_zstd")["path"]), batch_size=5, block_chunks=2,
                            seed=11, **kw)  # fmt: skip


@pytest.mark.parametrize(("name", "world"), [("v3_zstd", 2), ("v3_zstd", 3), ("multi_spc", 2), ("multi_spc", 3)])
def test_ranks_draw_disjoint_equal_shares(fixtures, manifest, name, world):
    u = url(fixtures, store(manifest, name)["path"])
    whole = ib.InSituDataset(u, batch_size=4)
    drawable = set(whole.draw_order("train").tolist())
    seen: set[int] = set()
    counts, dropped = [], set()
    for rank in range(world):
        ds = ib.InSituDataset(u, batch_size=4, rank=rank, world_size=world)
        ds.set_epoch(2)
        idx = [i for _, s, _ in batches(ds) for i in s]
        assert not seen & set(idx), "two ranks drew one sample"
        seen |= set(idx)
        counts.append((len(idx), len(ds.train)))
        dropped.add(ds.last_pass.dropped_samples)
        assert (ds.last_pass.rank, ds.last_pass.world_size) == (rank, world)
        # The eval view shards the same way, in order.
        val = ds.draw_order("val").tolist()
        assert val == sorted(val)
    assert len(set(counts)) == 1, f"unequal shares {counts}"
    assert len(dropped) == 1
    assert seen <= drawable and len(seen) + dropped.pop() == len(drawable)


def test_state_dict_resumes_the_rest_of_the_epoch_bit_for_bit(fixtures, manifest):
    for world, rank in [(1, 0), (2, 1)]:
        ds = zstd_ds(fixtures, manifest, rank=rank, world_size=world)
        ds.set_epoch(4)
        whole = batches(ds)
        ds = zstd_ds(fixtures, manifest, rank=rank, world_size=world)
        ds.set_epoch(4)
        it = iter(ds.train)
        head = batches(ds, it, take=3)
        state = ds.state_dict()
        assert state == it.state_dict()
        it.close()
        assert head == whole[:3]
        assert (state["epoch"], state["position"], state["batches"], state["world_size"]) == (4, 15, 3, world)
        assert len(json.dumps(state)) < 300, state
        fresh = zstd_ds(fixtures, manifest, rank=rank, world_size=world)
        fresh.load_state_dict(json.loads(json.dumps(state)))
        assert fresh.epoch == 4
        assert batches(fresh) == whole[3:], f"world {world}: the resumed batches differ"
        assert fresh.last_pass.resumed_at == 15
        # The resume is used once: the next pass over the epoch is whole again.
        assert batches(fresh) == whole


def test_state_before_a_pass_and_refusals(fixtures, manifest):
    ds = zstd_ds(fixtures, manifest)
    ds.set_epoch(3)
    assert ds.state_dict()["position"] == 0 and ds.state_dict()["epoch"] == 3
    bad = dict(ds.state_dict(), seed=99)
    with pytest.raises(ValueError, match="seed 99"):
        zstd_ds(fixtures, manifest).load_state_dict(bad)
    with pytest.raises(ValueError, match="past the end"):
        zstd_ds(fixtures, manifest).load_state_dict(dict(ds.state_dict(), position=10_000))
    with pytest.raises(ValueError, match="rank=2 world_size=2"):
        zstd_ds(fixtures, manifest, rank=2, world_size=2)
    # A state for another epoch than the one a pass runs is left unused.
    fresh = zstd_ds(fixtures, manifest)
    fresh.load_state_dict(dict(ds.state_dict(), position=5, batches=1))
    fresh.set_epoch(0)
    assert len(batches(fresh)) == len(fresh.train)


def test_elastic_state_serves_the_rest_once_across_new_ranks(fixtures, manifest):
    served: list[int] = []
    state = None
    for rank in range(2):
        ds = zstd_ds(fixtures, manifest, rank=rank, world_size=2)
        it = iter(ds.train)
        served += [i for _, s, _ in batches(ds, it, take=2) for i in s]
        state = ds.state_dict()
        it.close()
    first_dropped = ds.describe()["config"]["dropped_samples"][0][1]
    new_dropped = set()
    for rank in range(3):
        ds = zstd_ds(fixtures, manifest, rank=rank, world_size=3)
        ds.load_state_dict(state)
        served += [i for _, s, _ in batches(ds) for i in s]
        new_dropped.add(ds.last_pass.dropped_samples)
        assert ds.state_dict()["history"] == [{"world_size": 2, "position": 10}]
    assert len(served) == len(set(served)), "a sample served twice"
    drawable = len(zstd_ds(fixtures, manifest).draw_order("train"))
    assert len(served) + first_dropped + new_dropped.pop() == drawable


def test_rank_and_world_size_come_from_torch_distributed(fixtures, manifest, tmp_path):
    need_torch()
    import torch.distributed as dist

    assert (zstd_ds(fixtures, manifest).rank, zstd_ds(fixtures, manifest).world_size) == (0, 1)
    dist.init_process_group("gloo", init_method=(tmp_path / "pg").as_uri(), rank=0, world_size=1)
    try:
        ds = zstd_ds(fixtures, manifest)
        assert (ds.rank, ds.world_size) == (0, 1)
        assert zstd_ds(fixtures, manifest, world_size=2, rank=1).rank == 1  # explicit wins
    finally:
        dist.destroy_process_group()


# -- real torchrun jobs -------------------------------------------------------------------


def torchrun(n: int, *args: str) -> subprocess.Popen:
    # PYTHONFAULTHANDLER: a rank that dies of a signal (SIGABRT, SIGSEGV) prints every thread's
    # Python stack into the output the test shows on failure.
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(JOB.parent), PYTHONFAULTHANDLER="1")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={n}", str(JOB), *args]
    # A session of its own, so the test can SIGKILL the launcher and its workers together.
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)  # fmt: skip


def finished(proc: subprocess.Popen) -> None:
    # The timeout only stops a hung job from hanging the suite; nothing is timed.
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, out


def ranks(out: Path, n: int) -> list[dict]:
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(n)]


def zstd_path(fixtures: Path, manifest: dict) -> str:
    return str(fixtures / store(manifest, "v3_zstd")["path"])


@pytest.mark.parametrize("world", [2, 3])
def test_torchrun_ranks_share_epochs_and_read_each_chunk_once(fixtures, manifest, tmp_path, world):
    need_torch()
    path = zstd_path(fixtures, manifest)
    runs = []
    for run in range(2 if world == 2 else 1):
        out = tmp_path / f"run{run}"
        out.mkdir()
        finished(torchrun(world, "train", path, str(out)))
        runs.append(ranks(out, world))
    drawable = set(zstd_ds(fixtures, manifest).draw_order("train").tolist())
    for epoch in range(2):
        rows = [r["epochs"][epoch] for r in runs[0]]
        assert len({r["batches"] for r in rows}) == 1, "unequal batch counts"
        assert len({len(r["samples"]) for r in rows}) == 1
        drawn = [i for r in rows for i in r["samples"]]
        assert len(drawn) == len(set(drawn)), "two ranks drew one sample"
        assert len(drawn) + rows[0]["dropped"] == len(drawable) and set(drawn) <= drawable
        reads = [k for r in rows for k in r["reads"]]
        assert len(reads) == len(set(reads)), "a chunk key read twice in one epoch"
        assert reads or epoch > 0, "the counting store saw no chunk read"
    assert len({r["digest"] for r in runs[0]}) == 1, "DDP ranks disagree on the model"
    if len(runs) == 2:
        assert runs[0][0]["digest"] == runs[1][0]["digest"], "two runs trained different models"
        assert [r["epochs"] for r in runs[0]] == [r["epochs"] for r in runs[1]]


def test_torchrun_killed_after_its_checkpoint_resumes_with_2_and_3_ranks(fixtures, manifest, tmp_path):
    need_torch()
    path = zstd_path(fixtures, manifest)
    old, state = tmp_path / "old", tmp_path / "state.json"
    old.mkdir()
    job = torchrun(2, "kill", path, str(old), str(state))
    # Each rank says CHECKPOINTED after the state is on disk, then blocks: read until both did.
    said: dict[str, int] = {}
    lines = []
    for line in job.stdout:
        lines.append(line)
        # Anywhere in the line: a launcher's own output may share it.
        for rank, pid in re.findall(r"CHECKPOINTED (\d+) (\d+)", line):
            said[rank] = int(pid)
        if len(said) == 2:
            break
    assert len(said) == 2, "".join(lines)
    # SIGKILL the whole job: the workers (torchrun puts each in a session of its own) and
    # the launcher with its group.
    for pid in said.values():
        os.kill(pid, signal.SIGKILL)
    os.killpg(job.pid, signal.SIGKILL)
    job.communicate()
    assert job.returncode == -signal.SIGKILL
    before = [i for r in ranks(old, 2) for i in r["samples"]]
    dropped0 = ranks(old, 2)[0]["dropped"]
    drawable = set(zstd_ds(fixtures, manifest).draw_order("train").tolist())
    for world in (2, 3):
        new = tmp_path / f"new{world}"
        new.mkdir()
        finished(torchrun(world, "resume", path, str(new), str(state)))
        rows = ranks(new, world)
        after = [i for r in rows for i in r["samples"]]
        served = before + after
        assert len(served) == len(set(served)), f"{world} ranks: a sample served twice"
        assert len({r["batches"] for r in rows}) == 1
        dropped = dropped0 + (rows[0]["dropped"] if world != 2 else 0)
        assert len(served) + dropped == len(drawable), f"{world} ranks: a sample lost"
        assert {r["resumed_at"] for r in rows} == ({10} if world == 2 else {0})
        reads = [k for r in rows for k in r["reads"]]
        assert len(reads) == len(set(reads)), "a chunk read by two new ranks"


def test_as_torch_refuses_dataloader_workers_saying_why(fixtures, manifest):
    need_torch()
    from torch.utils.data import DataLoader

    ds = zstd_ds(fixtures, manifest, rank=1, world_size=2)
    n = sum(1 for _ in DataLoader(ib.as_torch(ds.train), batch_size=None, num_workers=0))
    assert n == len(ds.train)
    with pytest.raises(RuntimeError, match=r"(?s)num_workers=0\) only.*threads="):
        next(iter(DataLoader(ib.as_torch(ds.train), batch_size=None, num_workers=1)))


def test_a_forked_child_closes_the_dataset_without_touching_its_threads(fixtures, manifest):
    """A fork (DataLoader workers; multiprocessing's default start method on Linux) copies the
    engine's memory but none of its threads. Closing the dataset there must leave the parent's
    runtime alone: it once shut the tokio runtime down in the child, and glibc's pthread_detach
    segfaulted on the threads that do not exist there."""
    ds = zstd_ds(fixtures, manifest)
    assert sum(len(b) for b in ds.train) == len(ds.train.sample_indices())  # the I/O threads ran
    pid = os.fork()
    if pid == 0:  # the child: close, collect, and say how it went by the exit status only
        code = 1
        try:
            ds.close()
            gc.collect()
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, f"the forked child ended with wait status {status}"
    assert sum(len(b) for b in ds.train) == len(ds.train.sample_indices()), "the parent's engine still runs"
    ds.close()


def test_jax_multiprocess_job_shares_epochs(fixtures, manifest, tmp_path):
    """Two local JAX processes (``jax.distributed.initialize``, CPU) with
    ``rank=jax.process_index(), world_size=jax.process_count()``; ``to_jax_global`` joins their
    batches into one array that a jitted sum reads across both."""
    try:
        import jax  # noqa: F401
    except ImportError:
        why = "jax is not installed (tools/python/jax.in)"
        if frameworks_required():
            pytest.fail(f"{why}; CI installs it in this venv, so this is a failure, not a skip")
        pytest.skip(why)
    import socket

    with socket.socket() as s:  # a free loopback port for the coordinator
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    job = Path(__file__).with_name("jax_job.py")
    env = dict(os.environ, JAX_PLATFORMS="cpu", OMP_NUM_THREADS="1")
    procs = [
        subprocess.Popen([sys.executable, str(job), f"127.0.0.1:{port}", str(i), "2", zstd_path(fixtures, manifest),
                          str(tmp_path)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for i in range(2)
    ]  # fmt: skip
    for p in procs:
        finished(p)
    rows = ranks(tmp_path, 2)
    assert [(r["process_index"], r["process_count"]) for r in rows] == [(0, 2), (1, 2)]
    drawable = set(ib.InSituDataset(url(fixtures, store(manifest, "v3_zstd")["path"]), seed=3).draw_order("train"))
    for epoch in range(2):
        parts = [r["epochs"][epoch] for r in rows]
        drawn = [i for p in parts for i in p["samples"]]
        assert len(parts[0]["samples"]) == len(parts[1]["samples"])
        assert len(drawn) == len(set(drawn)) and set(drawn) <= drawable
        assert len(drawn) + parts[0]["dropped"] == len(drawable)
        # to_jax_global: process p's batch is rows [p*n, (p+1)*n) of one array over both processes.
        for k, (g0, g1) in enumerate(zip(parts[0]["global"], parts[1]["global"], strict=True)):
            n = g0["shape"][0] // 2
            assert g0["shape"] == g1["shape"] and n > 0, (epoch, k)
            assert (g0["shard_start"], g1["shard_start"]) == (0, n) and g0["own_shard"] and g1["own_shard"]
            both = g0["local_sum"] + g1["local_sum"]
            assert g0["global_sum"] == g1["global_sum"] == pytest.approx(both, rel=1e-5), (epoch, k)
