"""Ray Train: a ``TorchTrainer`` whose workers train a small model on a Zarr store through
insitubatch_rs, each reading its own share of every epoch.

    python ray_train.py STORE [--workers 2] [--epochs 2] [--out DIR]

Ray Train starts one process per worker and initializes ``torch.distributed`` (gloo on CPU)
in each before the training function runs, so ``InSituDataset(..., rank=None,
world_size=None)`` (the defaults) takes its rank and world size from there: each stored chunk
is read by one worker per epoch, and every worker takes the same number of steps (DDP needs
it). ``ray.train.get_context().get_world_rank()`` says the same number; the example checks it.

Ray runs on this machine only (``ray.init`` with ``num_cpus``, no dashboard, a small object
store, a temporary directory of its own) and is shut down at the end, which stops every
process it started. With ``--out DIR`` each worker writes ``DIR/rank<r>.json``: per epoch the
sample ids and the batch count it drew (python-bindings/tests/test_ray_train.py checks them).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import ray
import ray.train
import torch
from ray.train.torch import TorchTrainer

import insitubatch_rs as ib


def train_loop(config: dict[str, Any]) -> None:
    """One Ray Train worker: its share of every epoch, one SGD step per batch."""
    import torch.distributed as dist

    ctx = ray.train.get_context()
    # rank=None, world_size=None: torch.distributed's, which Ray Train has initialized.
    ds = ib.InSituDataset(config["store"], batch_size=config["batch_size"], block_chunks=2, seed=11, threads=1)
    assert dist.is_initialized() and (ds.rank, ds.world_size) == (ctx.get_world_rank(), ctx.get_world_size())
    label = ds.variables[0]
    sample_size = int(np.prod(ds.geometries[label].inner_shape))
    torch.manual_seed(0)
    model = ray.train.torch.prepare_model(torch.nn.Linear(sample_size, 1))  # DDP over gloo
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    epochs = []
    for epoch in range(config["epochs"]):
        ds.set_epoch(epoch)
        samples, steps, loss = [], 0, torch.tensor(0.0)
        for batch in ds.train:
            x = torch.from_numpy(np.ascontiguousarray(batch[label])).reshape(len(batch), -1)
            x = (x - x.mean()) / (x.std() + 1e-6)  # raw values (kelvin, ...) would blow SGD up
            y = x.mean(1, keepdim=True)  # a target the model can learn: the sample's mean
            opt.zero_grad()
            loss = ((model(x) - y) ** 2).mean()
            loss.backward()  # DDP all-reduces the gradients: every rank must step as often
            opt.step()
            samples.extend(int(i) for i in batch.sample_indices)
            steps += 1
        dropped = ds.last_pass.dropped_samples if ds.last_pass else 0
        epochs.append({"samples": samples, "steps": steps, "dropped": dropped})
        ray.train.report({"epoch": epoch, "steps": steps, "loss": loss.item()})
    if config.get("out"):
        record = {"rank": ds.rank, "world_size": ds.world_size, "epochs": epochs}
        Path(config["out"], f"rank{ds.rank}.json").write_text(json.dumps(record))
    ds.close()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("store", help="a store URL or path (file://, s3://, ...)")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=5)
    p.add_argument("--out", help="each worker writes OUT/rank<r>.json (what it drew)")
    p.add_argument("--tmp", default="/tmp", help="where Ray's session directory goes (keep it short: "
                   "Ray's unix socket paths under it are limited to 107 bytes)")
    args = p.parse_args()
    scratch = tempfile.mkdtemp(prefix="ibray", dir=args.tmp)
    ray.init(
        num_cpus=args.workers,
        include_dashboard=False,
        object_store_memory=80 * 1024 * 1024,
        _temp_dir=os.path.join(scratch, "ray"),
        # The workers run this file's train_loop and import insitubatch_rs from this venv.
        runtime_env={"env_vars": {"OMP_NUM_THREADS": "1"}},
    )
    try:
        trainer = TorchTrainer(
            train_loop,
            train_loop_config={"store": args.store, "epochs": args.epochs, "batch_size": args.batch_size,
                               "out": args.out},
            scaling_config=ray.train.ScalingConfig(num_workers=args.workers, use_gpu=False,
                                                   resources_per_worker={"CPU": 1}),
            run_config=ray.train.RunConfig(name="insitubatch", storage_path=os.path.join(scratch, "results")),
        )
        result = trainer.fit()
        if result.error is not None:
            raise result.error
        print(f"ray_train: done, {args.workers} workers, {args.epochs} epochs")
    finally:
        ray.shutdown()  # stops the processes ray.init started
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
