"""One process of a JAX multi-process job over a fixture store, for test_distributed.py.

    python jax_job.py COORDINATOR PROCESS_ID NUM_PROCESSES STORE OUT

``jax.distributed.initialize`` joins the job; the dataset takes ``jax.process_index()`` and
``jax.process_count()`` as its rank and world size. Writes ``OUT/rank<i>.json``: the samples
this process drew per epoch and a checksum computed by JAX on its batches.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import jax
import jax.numpy as jnp

import insitubatch_rs as ib


def main() -> None:
    coordinator, pid, n, store, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], Path(sys.argv[5])
    jax.distributed.initialize(coordinator_address=coordinator, num_processes=n, process_id=pid)
    ds = ib.InSituDataset(store, batch_size=5, seed=3, rank=jax.process_index(), world_size=jax.process_count())
    epochs = []
    for epoch in range(2):
        ds.set_epoch(epoch)
        samples, total = [], 0.0
        for batch in ds.train:
            samples += batch.sample_indices.tolist()
            total += float(jnp.sum(ib.to_jax(batch)["t2m"]))
        epochs.append({"samples": samples, "sum": total, "dropped": ds.last_pass.dropped_samples})
    record = {"process_index": jax.process_index(), "process_count": jax.process_count(), "epochs": epochs}
    (out / f"rank{pid}.json").write_text(json.dumps(record))
    jax.distributed.shutdown()


if __name__ == "__main__":
    main()
