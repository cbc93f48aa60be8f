"""Lightning: a ``LightningDataModule`` over a Zarr store that checkpoints mid-epoch, is killed,
and resumes exactly where it stopped.

    python lightning_resume.py STORE OUT [--epochs 2] [--kill-after-step K] [--resume CKPT]

``InSituDataModule.train_dataloader`` is torchdata's ``StatefulDataLoader`` over
``as_torch(ds.train)``. Lightning keeps a stateful loader's ``state_dict()`` in every checkpoint
(``loops.fit_loop.state_dict.combined_loader``) and loads it when ``fit(ckpt_path=...)`` resumes;
the view's state is the engine's checkpoint (seed, epoch, position), so the resumed run reads
exactly the batches the killed one had left, without reading the ones before to skip them. The
view has a length, so Lightning does not fetch a batch ahead of the one it trains (a batch
fetched ahead would be in the checkpoint's position and lost on resume). ``SetEpoch`` gives the
dataset the trainer's epoch at each epoch's start, as ``DistributedSampler.set_epoch`` does for
map-style data; Lightning skips that hook when it resumes mid-epoch, where the checkpoint
carries the epoch.

With ``--kill-after-step K`` a ``ModelCheckpoint`` saves every K steps into ``OUT/ckpt`` and the
process kills itself (SIGKILL, no clean-up) as the step after the first checkpoint starts.
``--resume CKPT`` continues from such a checkpoint. Each training step appends a line to
``OUT/steps.jsonl`` (the epoch and a digest of each sample in the batch); the end of ``fit``
writes ``OUT/final.json`` (a digest of the model's weights).
python-bindings/tests/test_lightning.py runs it uninterrupted, killed and resumed, and compares.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from torchdata.stateful_dataloader import StatefulDataLoader

import insitubatch_rs as ib


class InSituDataModule(L.LightningDataModule):
    """The store's train split as a resumable loader (see the module's docstring)."""

    def __init__(self, store: str, batch_size: int = 5, seed: int = 11) -> None:
        super().__init__()
        self.ds = ib.InSituDataset(store, batch_size=batch_size, block_chunks=2, seed=seed, threads=1)

    def train_dataloader(self) -> StatefulDataLoader:
        return StatefulDataLoader(ib.as_torch(self.ds.train), batch_size=None, num_workers=0)

    def teardown(self, stage: str) -> None:
        self.ds.close()


class SetEpoch(L.Callback):
    """The dataset draws the trainer's epoch (a new shuffle each epoch)."""

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        trainer.datamodule.ds.set_epoch(trainer.current_epoch)


class KillAfter(L.Callback):
    """SIGKILL at the start of the step after ``step``: its checkpoint is on disk by then."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_start(self, trainer: L.Trainer, *args: Any) -> None:
        if trainer.global_step == self.step:
            os.kill(os.getpid(), signal.SIGKILL)


class MeanModel(L.LightningModule):
    """A linear model that learns each sample's mean; logs what every step trained on."""

    def __init__(self, sample_size: int, steps_log: Path) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(sample_size, 1)
        self.steps_log = steps_log

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x = batch["t2m"].reshape(len(batch["t2m"]), -1)
        rows = [hashlib.sha256(r.numpy().tobytes()).hexdigest()[:16] for r in x]
        with self.steps_log.open("a") as f:  # closed per step: a SIGKILL loses no line
            f.write(json.dumps({"epoch": self.current_epoch, "step": self.global_step, "rows": rows}) + "\n")
        x = (x - x.mean()) / (x.std() + 1e-6)  # raw kelvin would blow SGD up
        return ((self.linear(x) - x.mean(1, keepdim=True)) ** 2).mean()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=1e-3, momentum=0.9)


def weights_digest(model: torch.nn.Module) -> str:
    h = hashlib.sha256()
    for name, p in sorted(model.state_dict().items()):
        h.update(name.encode() + p.detach().numpy().tobytes())
    return h.hexdigest()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("store")
    ap.add_argument("out", type=Path)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--kill-after-step", type=int, help="checkpoint every K steps; SIGKILL after the first")
    ap.add_argument("--resume", help="a checkpoint of a killed run to continue")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)

    dm = InSituDataModule(args.store)
    torch.manual_seed(0)
    model = MeanModel(int(np.prod(dm.ds.geometries["t2m"].inner_shape)), args.out / "steps.jsonl")
    callbacks: list[L.Callback] = [SetEpoch()]
    if args.kill_after_step:
        k = args.kill_after_step
        callbacks += [ModelCheckpoint(args.out / "ckpt", every_n_train_steps=k, save_top_k=-1), KillAfter(k)]
    trainer = L.Trainer(
        max_epochs=args.epochs,
        accelerator="cpu",
        devices=1,
        callbacks=callbacks,
        enable_checkpointing=bool(args.kill_after_step),
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
        num_sanity_val_steps=0,
    )
    trainer.fit(model, datamodule=dm, ckpt_path=args.resume)
    (args.out / "final.json").write_text(json.dumps({"weights": weights_digest(model), "steps": trainer.global_step}))
    print("lightning_resume: done", flush=True)


if __name__ == "__main__":
    main()
