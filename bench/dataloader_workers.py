"""Is splitting a rank's share among DataLoader workers worth it? (docs/distributed.md)

    python bench/dataloader_workers.py STORE_URL [EPOCHS]     (bench/run.py workers runs it)

Measures decoded MB/s of the train view two ways, over the same store and seed:
- ``num_workers=0``: ``DataLoader(as_torch(ds.train), batch_size=None)``, the engine's own
  threads decoding in this process (what ``as_torch`` supports);
- ``num_workers=N``: each worker opens its own dataset as rank ``worker_id`` of ``N``
  (the share split among workers, the same guarantees), batches travelling to the main
  process through torch's worker queues (pickled tensors in shared memory).
Every dataset's budget is its residency floor, so each epoch decodes again (with the
automatic budget a small store stays resident and warm epochs measure nothing but the
gather). Prints one JSON line per configuration.
"""

from __future__ import annotations

import json
import sys
import time

import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

import insitubatch_rs as ib


def run(loader: DataLoader, epochs: int, on_epoch=None) -> dict:  # type: ignore[no-untyped-def]
    rows = []
    for e in range(epochs):
        if on_epoch is not None:
            on_epoch(e)
        t0 = time.perf_counter()
        nbytes = 0
        for batch in loader:
            nbytes += sum(t.numel() * t.element_size() for t in batch.values())
        secs = time.perf_counter() - t0
        rows.append({"epoch": e, "mb_per_s": nbytes / 1e6 / secs, "seconds": secs, "mb": nbytes / 1e6})
    return {"epochs": rows, "warm_mb_per_s": sum(r["mb_per_s"] for r in rows[1:]) / max(1, len(rows) - 1)}


class WorkerShare(IterableDataset):  # type: ignore[type-arg]
    """Each worker: its own dataset as rank ``worker_id`` of ``num_workers`` (opened in the
    worker, after the fork: an engine's threads do not survive a fork)."""

    def __init__(self, url: str, batch_size: int, budget: int) -> None:
        super().__init__()
        self.url, self.batch_size, self.budget, self.ds, self.epoch = url, batch_size, budget, None, 0

    def __iter__(self):  # type: ignore[no-untyped-def]
        info = get_worker_info()
        if self.ds is None:
            self.ds = ib.InSituDataset(self.url, batch_size=self.batch_size, block_chunks=2, rank=info.id,
                                       world_size=info.num_workers, cache_budget_bytes=self.budget)  # fmt: skip
        self.ds.set_epoch(self.epoch)
        self.epoch += 1
        for b in self.ds.train:
            yield ib.to_torch(b)


def main() -> None:
    url = sys.argv[1]
    epochs = int(sys.argv[2]) if len(sys.argv) > 2 else 4
    batch = 16
    budget = ib.InSituDataset(url, batch_size=batch, block_chunks=2).describe()["memory"]["floor_bytes"]
    ds = ib.InSituDataset(url, batch_size=batch, block_chunks=2, cache_budget_bytes=budget)
    out = run(DataLoader(ib.as_torch(ds.train), batch_size=None, num_workers=0), epochs, ds.set_epoch)
    print(json.dumps({"num_workers": 0, **out}))
    for workers in (1, 2):
        loader = DataLoader(WorkerShare(url, batch, budget), batch_size=None, num_workers=workers, persistent_workers=True)
        print(json.dumps({"num_workers": workers, **run(loader, epochs)}))
    print(json.dumps({"torch": torch.__version__, "threads": torch.get_num_threads()}))


if __name__ == "__main__":
    main()
