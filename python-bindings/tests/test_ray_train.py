"""Ray Train: python-bindings/examples/ray_train.py (a ``TorchTrainer`` with 2 CPU workers,
local processes) over a fixture store. The two ranks together draw every sample of each
epoch exactly once (besides the counted remainder), each rank exactly its share, in equal
step counts; and Ray leaves no process behind.

Ray lives in its own venv (tools/python/ray.in); scripts/test-python.sh runs this file there
with ``IB_EXPECT_RAY=1``, where a missing Ray is a failure. Elsewhere it skips, saying so."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

import insitubatch_rs as ib
from conftest import store, url

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "ray_train.py"
WORKERS, EPOCHS, BATCH = 2, 2, 5


@pytest.fixture(scope="module")
def ray_installed() -> None:
    try:
        import ray.train.torch  # noqa: F401
    except ImportError as e:
        why = f"Ray Train is not installed here ({e}); just test-python fw=ray runs it in its venv"
        if os.environ.get("IB_EXPECT_RAY") == "1":
            pytest.fail(f"{why}; IB_EXPECT_RAY=1 says this venv should have it")
        pytest.skip(why)


def ray_processes(marker: str) -> list[str]:
    """Command lines of live processes that name ``marker`` (Ray's temp dir is in every one)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # ended meanwhile
            continue
        if marker in cmd:
            found.append(f"{proc.name}: {cmd[:200]}")
    return found


def test_torch_trainer_ranks_share_every_epoch(ray_installed, fixtures, manifest, tmp_path):
    s = store(manifest, "v3_zstd")
    u = url(fixtures, s["path"])
    out = tmp_path / "out"
    out.mkdir()
    # Ray's session dir: short (its unix socket paths are limited to 107 bytes), and named in
    # the command line of every process Ray starts, which is how leftovers are found.
    ray_tmp = tempfile.mkdtemp(prefix="ib-ray-test", dir="/tmp")
    try:
        cmd = [sys.executable, str(EXAMPLE), u, "--workers", str(WORKERS), "--epochs", str(EPOCHS),
               "--batch-size", str(BATCH), "--out", str(out), "--tmp", ray_tmp]
        env = dict(os.environ, OMP_NUM_THREADS="1")
        run = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900, check=False)
        assert run.returncode == 0, f"ray_train.py failed:\n{run.stdout[-4000:]}\n{run.stderr[-8000:]}"
        assert "ray_train: done" in run.stdout
        # ray.shutdown() ended every process ray.init started.
        assert ray_processes(ray_tmp) == [], "Ray left processes running"
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)

    records = {r["rank"]: r for r in (json.loads(p.read_text()) for p in out.glob("rank*.json"))}
    assert sorted(records) == list(range(WORKERS)), "every worker reported"
    split = set(ib.InSituDataset(u, seed=11).manifest.sample_indices("train").tolist())
    for epoch in range(EPOCHS):
        shares = {r: rec["epochs"][epoch] for r, rec in records.items()}
        for r, share in shares.items():
            assert records[r]["world_size"] == WORKERS
            want = ib.InSituDataset(u, batch_size=BATCH, block_chunks=2, seed=11, rank=r, world_size=WORKERS)
            assert share["samples"] == want.draw_order("train", epoch).tolist(), f"rank {r}, epoch {epoch}"
        assert len({sh["steps"] for sh in shares.values()}) == 1, f"equal step counts: {shares}"
        drawn = [i for sh in shares.values() for i in sh["samples"]]
        assert len(drawn) == len(set(drawn)), "no sample drawn twice"
        dropped = shares[0]["dropped"]
        assert set(drawn) <= split and len(drawn) + dropped == len(split), "every sample once, or counted"
