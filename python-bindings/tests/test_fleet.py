"""The fleet verdict from Python: each rank's ``last_pass`` in, the straggler and the stage it
waits on out (core/src/fleet.rs decides; native/tests/fleet.rs checks it on ranks behind a
slow link on the virtual clock)."""

from __future__ import annotations

import dataclasses

import pytest

import insitubatch_rs as ib
from insitubatch_rs import Depths, PassStats, StageTimes


def rank_stats(rank: int, wall_s: float, stage: str) -> PassStats:
    return PassStats(
        "train",
        0,
        wall_s=wall_s,
        samples=1000,
        rank=rank,
        world_size=3,
        times=StageTimes(consumer_s=1.0, consumer_wait_s=9.0),
        depths=Depths(batch_queue_samples=10, inflight_peak=32, max_inflight=32),
        blocked_s={stage: 9.0},
    )


def test_the_slow_rank_is_named_with_the_stage_it_waits_on():
    ranks = [rank_stats(0, 10.0, "decode"), rank_stats(1, 30.0, "store"), rank_stats(2, 11.0, "decode")]
    s = ib.fleet_summary(ranks)
    assert s["straggler"] and s["slowest"]["rank"] == 1 and s["slowest"]["limiting_stage"] == "store"
    assert s["verdict"].startswith("rank 1 is the straggler") and "max_inflight" in s["verdict"]
    assert s["ranks"] == 3 and s["median_samples_per_s"] == pytest.approx(1000 / 11.0)
    # The same from as_dict() copies (what a JSON log or all_gather_object of dicts holds).
    assert ib.fleet_summary([r.as_dict() for r in ranks]) == s
    even = [dataclasses.replace(r, wall_s=10.0) for r in ranks]
    assert not ib.fleet_summary(even)["straggler"]


def test_real_pass_reports_go_in_and_a_malformed_entry_is_refused(zstd):
    u, _ = zstd
    geoms = ib.open_geometries(u)
    manifest = ib.split_by_chunk(geoms["t2m"], fractions=(1.0, 0.0, 0.0))
    passes = []
    for rank in range(2):
        with ib.InSituDataset(u, manifest, geoms, batch_size=5, rank=rank, world_size=2) as ds:
            assert sum(len(b) for b in ds.train) > 0
            passes.append(ds.last_pass)
    for p in passes:  # the caller's waits after the first batch, in quantiles
        assert p.batches >= 2 and 0 < p.batch_wait_p50_s <= p.batch_wait_p95_s <= p.batch_wait_p99_s
    s = ib.fleet_summary(passes)
    assert s["ranks"] == 2 and s["slowest"]["rank"] in (0, 1) and s["verdict"]
    with pytest.raises(ValueError, match="lacks 'wall_s'"):
        ib.fleet_summary([{"rank": 0, "samples": 1}])
