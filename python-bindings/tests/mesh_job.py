"""A torchrun job for test_mesh.py: a rank mesh of ``world_size / 2`` data-parallel groups
of 2 model-parallel ranks over a zarr-python fixture store.

    python -m torch.distributed.run --standalone --nproc_per_node 4 mesh_job.py STORE OUT

Each rank takes its rank and world size from ``torch.distributed`` and writes
``OUT/rank<r>.json``: per batch of one train epoch, the sample indices, its ``model_part``
and its ``t2m`` values; and, to show the parts make whole rows on the devices, the rows its
group rebuilds with one ``all_gather`` over the group's ranks.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

import insitubatch_rs as ib


def main() -> None:
    store, out = sys.argv[1], Path(sys.argv[2])
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    groups = [dist.new_group([g * 2, g * 2 + 1]) for g in range(world // 2)]
    group = groups[rank // 2]
    ds = ib.InSituDataset(store, batch_size=4, seed=3, model_parallel=2, model_parallel_axis="lat", threads=1)
    ds.set_epoch(1)
    batches = []
    for b in ds.train:
        part = torch.from_numpy(np.ascontiguousarray(b["t2m"]))
        both = [torch.empty_like(part) for _ in range(2)]
        dist.all_gather(both, part, group=group)
        whole = torch.cat(both, dim=1)  # the parts along lat, in rank order: the full rows
        batches.append(
            {
                "samples": b.sample_indices.tolist(),
                "part": list(b.model_part),
                "values": b["t2m"].tolist(),
                "whole": whole.numpy().tolist(),
            }
        )
    (out / f"rank{rank}.json").write_text(json.dumps({"rank": rank, "world": world, "batches": batches}))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
