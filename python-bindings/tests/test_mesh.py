"""A rank mesh (``model_parallel=k``): the ranks of a group draw the same rows and each gets
its part of every row; in one process (datasets standing for the ranks), then as a real
torchrun job of 4 ranks as 2 × 2 (gloo, CPU) that rebuilds whole rows with ``all_gather``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import stored, url
from test_distributed import need_torch

import insitubatch_rs as ib

JOB = Path(__file__).with_name("mesh_job.py")


def _truth(fixtures) -> np.ndarray:
    return stored(fixtures, "v3_zstd", "t2m")


def test_the_ranks_of_a_group_draw_alike_and_split_each_patch(fixtures):
    truth = _truth(fixtures)
    kw = dict(batch_size=4, seed=3, world_size=4, model_parallel=2, model_parallel_axis="lon", patch={"lon": 4})
    groups = []
    for g in range(2):
        views = [ib.InSituDataset(url(fixtures, "v3_zstd"), rank=2 * g + p, **kw).train for p in range(2)]
        seen = set()
        for b0, b1 in zip(*views, strict=True):
            assert b0.sample_indices.tolist() == b1.sample_indices.tolist()
            assert (b0.patch_origins == b1.patch_origins).all()
            assert (b0.model_part, b1.model_part) == (("lon", 0, 2), ("lon", 2, 4))
            for i, t in enumerate(b0.sample_indices):
                o = int(b0.patch_origins[i][0])
                whole = np.concatenate([b0["t2m"][i], b1["t2m"][i]], axis=1)
                np.testing.assert_array_equal(whole, truth[t, :, o : o + 4])
            seen |= set(b0.sample_indices.tolist())
        groups.append(seen)
    assert not groups[0] & groups[1]


def test_a_mesh_needs_an_axis_and_whole_groups(fixtures):
    with pytest.raises(ValueError, match="model_parallel_axis"):
        ib.InSituDataset(url(fixtures, "v3_zstd"), world_size=2, model_parallel=2)
    with pytest.raises(ValueError, match="divide world_size=3"):
        ib.InSituDataset(url(fixtures, "v3_zstd"), world_size=3, model_parallel=2, model_parallel_axis="lat")
    with pytest.raises(ValueError, match="no variable has it"):
        ib.InSituDataset(url(fixtures, "v3_zstd"), world_size=2, model_parallel=2, model_parallel_axis="level")


def test_a_two_by_two_mesh_under_torchrun(fixtures, tmp_path):
    need_torch()
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(JOB.parent))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=4", str(JOB),
           str(fixtures / "v3_zstd"), str(tmp_path)]  # fmt: skip
    # The timeout only stops a hung job from hanging the suite; nothing is timed.
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(4)]
    truth = _truth(fixtures)
    drawn = []
    for g in range(2):
        a, b = ranks[2 * g]["batches"], ranks[2 * g + 1]["batches"]
        assert [x["samples"] for x in a] == [x["samples"] for x in b], "a group's ranks draw alike"
        for x, y in zip(a, b, strict=True):
            assert (x["part"], y["part"]) == (["lat", 0, 3], ["lat", 3, 6])
            np.testing.assert_array_equal(np.asarray(x["values"]), truth[x["samples"], 0:3])
            np.testing.assert_array_equal(np.asarray(y["values"]), truth[y["samples"], 3:6])
            np.testing.assert_array_equal(np.asarray(x["whole"]), truth[x["samples"]])
            drawn += x["samples"]
    assert len(drawn) == len(set(drawn)), "the two groups drew one sample"
    assert set(drawn) <= set(ib.InSituDataset(url(fixtures, "v3_zstd"), seed=3).draw_order("train").tolist())
