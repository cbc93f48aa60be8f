"""Soak: many epochs of ``zip(train, val)`` with early breaks and ``set_epoch``, and the
process does not grow: resident memory, open files and threads stay flat after a warm-up.

``IB_SOAK_EPOCHS`` sets the length (default 200, the CI run); ``scripts/soak.sh`` runs a
longer one. Breaks are drawn from a seeded generator, so every run is the same run.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import insitubatch_rs as ib
from conftest import wait_until

EPOCHS = int(os.environ.get("IB_SOAK_EPOCHS", "200"))
WARMUP = max(EPOCHS // 10, 10)
#: Allowed growth of resident memory after the warm-up.
RSS_GROWTH = 0.05


def process_state() -> tuple[int, int, int]:
    """(resident bytes, open file descriptors, threads) of this process, from /proc."""
    status = Path("/proc/self/status").read_text().splitlines()
    rss_kb = next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))
    return rss_kb * 1024, len(os.listdir("/proc/self/fd")), len(os.listdir("/proc/self/task"))


def open_files() -> list[str]:
    """What each open file descriptor of this process points at (for a failure message)."""
    out = []
    for fd in sorted(os.listdir("/proc/self/fd"), key=int):
        try:
            out.append(f"{fd}:{os.readlink(f'/proc/self/fd/{fd}')}")
        except OSError:  # closed since the listing
            pass
    return out


def one_epoch(ds: ib.InSituDataset, epoch: int, rng: random.Random) -> int:
    """``zip(train, val)`` for one epoch, abandoned early half of the time; rows seen."""
    ds.set_epoch(epoch)
    stop_at = rng.randrange(1, 6) if rng.random() < 0.5 else None
    rows = 0
    for i, (train, val) in enumerate(zip(ds.train, ds.val)):
        rows += len(train["t2m"]) + len(val["t2m"])
        if stop_at is not None and i + 1 >= stop_at:
            break
    return rows


def test_soak_zip_train_val_with_breaks_stays_flat(zstd):
    url, _ = zstd
    rng = random.Random(7)
    manifest = ib.split_by_chunk(ib.open_geometries(url)["t2m"], fractions=(0.6, 0.3, 0.1))
    with ib.InSituDataset(url, manifest, batch_size=4, block_chunks=2) as ds:
        rows = sum(one_epoch(ds, e, rng) for e in range(WARMUP))
        rss0, fds0, threads0 = process_state()
        rows += sum(one_epoch(ds, e, rng) for e in range(WARMUP, EPOCHS))
        rss1, fds1, threads1 = process_state()
        print(f"soak: {EPOCHS} epochs, rss {rss0 / 2**20:.1f} -> {rss1 / 2**20:.1f} MiB, fds {fds0} -> {fds1}, "
              f"threads {threads0} -> {threads1}")
        # A read abandoned by an early break goes on in tokio's blocking pool after its pass
        # is gone: it holds its file until it ends, and the pool keeps its thread a while
        # after. So the counts at one moment depend on timing: wait, with the dataset still
        # open, for both to come back to where they were after the warm-up. What leaked
        # never does, and fails at the hang guard.
        def settled() -> bool:
            _, fds, threads = process_state()
            return fds <= fds0 and threads <= threads0

        wait_until(settled, lambda: (
            f"open files and threads did not fall back to {fds0} and {threads0} after {EPOCHS} epochs "
            f"(they were {fds1} and {threads1} when the epochs ended); open now: {open_files()}"))
    assert rows > 0
    assert rss1 <= rss0 * (1 + RSS_GROWTH), f"resident memory grew {rss1 / rss0 - 1:.1%} after {WARMUP} epochs"
