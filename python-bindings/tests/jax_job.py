"""One process of a JAX multi-process job over a fixture store, for test_distributed.py.

    python jax_job.py COORDINATOR PROCESS_ID NUM_PROCESSES STORE OUT

``jax.distributed.initialize`` joins the job; the dataset takes ``jax.process_index()`` and
``jax.process_count()`` as its rank and world size. Writes ``OUT/rank<i>.json``: the samples
this process drew per epoch, a checksum computed by JAX on its batches, and per batch what
``to_jax_global`` made of them: the global shape, whether this process's shard is its own batch,
and the global array's sum (one jitted sum across both processes).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import insitubatch_rs as ib


def main() -> None:
    coordinator, pid, n, store, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], Path(sys.argv[5])
    jax.distributed.initialize(coordinator_address=coordinator, num_processes=n, process_id=pid)
    ds = ib.InSituDataset(store, batch_size=5, seed=3, rank=jax.process_index(), world_size=jax.process_count())
    epochs = []
    for epoch in range(2):
        ds.set_epoch(epoch)
        samples, total, global_batches = [], 0.0, []
        for batch in ds.train:
            samples += batch.sample_indices.tolist()
            local = float(jnp.sum(ib.to_jax(batch)["t2m"]))
            total += local
            global_batches.append(global_view(batch, local))
        epochs.append({"samples": samples, "sum": total, "dropped": ds.last_pass.dropped_samples,
                       "global": global_batches})
    record = {"process_index": jax.process_index(), "process_count": jax.process_count(), "epochs": epochs}
    (out / f"rank{pid}.json").write_text(json.dumps(record))
    jax.distributed.shutdown()


def global_view(batch, local_sum: float) -> dict:
    g = ib.to_jax_global(batch)["t2m"]
    (shard,) = g.addressable_shards  # one CPU device per process
    own = bool(np.array_equal(np.asarray(shard.data), batch.arrays["t2m"]))
    return {"shape": list(g.shape), "own_shard": own, "shard_start": shard.index[0].start,
            "local_sum": local_sum, "global_sum": float(jax.jit(jnp.sum)(g))}


if __name__ == "__main__":
    main()
