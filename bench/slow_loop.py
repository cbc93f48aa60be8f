"""Peak memory of a plain training loop against describe()'s estimate.

    python bench/slow_loop.py STORE [STEP_S ...]

For each STEP_S (default: 0 and 1.5), opens STORE's `t2m` as one train split with
bench/run.py's knobs (batch 32, block_chunks 16, max_inflight 32, automatic budget) in a
fresh process, runs one epoch of `for b in ds.train: time.sleep(STEP_S)` and prints the
process's peak RSS (VmHWM) beside `describe()["memory"]["estimated_peak_bytes"]`.

The loop keeps each batch alive while it asks for the next one, as a training loop does,
and a loop slower than the loader lets the pass fill its whole batch queue: that is the
peak describe() has to cover (it is never allowed below a measured peak), so a fast loop
shows how far above it sits and a slow one how close it comes. The step must be longer
than the loader takes for a batch: on a busy machine the loader falls behind and the
queue never fills, so run it on a quiet one. Linux only (/proc/self/status).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from anchor_bench import vm_hwm_bytes  # noqa: E402
from py_engines import _rs_dataset  # noqa: E402  (bench/run.py's knobs for insitubatch_rs)


def one_epoch(url: str, step_s: float) -> None:
    _, ds = _rs_dataset(url, "t2m", batch_size=32)
    estimate = int(ds.describe()["memory"]["estimated_peak_bytes"])
    batches = 0
    for _batch in ds.train:
        batches += 1
        time.sleep(step_s)
    peak = vm_hwm_bytes()
    ds.close()
    print(
        f"{url} step {step_s} s: {batches} batches, peak RSS {peak / 2**20:.1f} MiB, "
        f"describe {estimate / 2**20:.1f} MiB, estimate/peak {estimate / peak:.2f}",
        flush=True,
    )


def main() -> None:
    if len(sys.argv) >= 4 and sys.argv[1] == "--one":
        one_epoch(sys.argv[2], float(sys.argv[3]))
        return
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    url, steps = sys.argv[1], sys.argv[2:] or ["0", "1.5"]
    for step in steps:  # a fresh process each: VmHWM only ever grows
        subprocess.run([sys.executable, __file__, "--one", url, step], check=True)


if __name__ == "__main__":
    main()
