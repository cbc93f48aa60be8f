#!/usr/bin/env python3
"""Benchmark the reference implementation (insitubatch 0.2.0, the Python project
insitubatch-rs rebuilds) with the same JSON contract as `insitubatch bench URL ... --json`.

    reference_bench.py --url file:///abs/store.zarr [--var t2m] --batch-size 32 \
        --block-chunks 16 --max-inflight 32 --epochs 2 [--cache-budget-bytes B] --json

One cold epoch, then warm epochs over the same dataset object (its in-memory pool).
The whole array is the train split (split_by_chunk(fractions=(1.0, 0.0, 0.0))).
Run it inside the reference venv (bench/setup_reference.sh); bench/run.py runs it as the engine
`reference`.
"""
import argparse
import json
import resource
import sys
import time


def vm_hwm_bytes():
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def cpu_times():
    """(user, system) CPU seconds of this process so far, every thread (not a DataLoader's
    worker processes)."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime, r.ru_stime


def cpu_fields(before, after, decoded_bytes):
    """An epoch row's CPU fields, as `insitubatch bench --json` writes them: ``cpu_user_s``,
    ``cpu_sys_s`` and ``cpu_s_per_gb`` (user + system per 1e9 decoded bytes)."""
    user, sys_s = after[0] - before[0], after[1] - before[1]
    per_gb = (user + sys_s) / (decoded_bytes / 1e9) if decoded_bytes else None
    return {"cpu_user_s": user, "cpu_sys_s": sys_s, "cpu_s_per_gb": per_gb}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--url", required=True)
    ap.add_argument("--var", action="append", default=None,
                    help="variable(s) to load (default: all non-coordinate arrays)")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--block-chunks", type=int, default=16)
    ap.add_argument("--max-inflight", type=int, default=32)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--sample-axis", type=int, default=0)
    ap.add_argument("--json", action="store_true", help="print one JSON object (always on)")
    ap.add_argument("--cache-dir", default=None, help="insitubatch 0.2.0's cache_dir (mmap tier)")
    ap.add_argument("--persist", action="store_true", help="persist=True (needs --cache-dir)")
    ap.add_argument("--cache-budget-bytes", type=int, default=None,
                    help="the residency budget (default: insitubatch 0.2.0's automatic floor)")
    args = ap.parse_args(argv)

    t_import = time.perf_counter()
    import insitubatch as ib

    t_open = time.perf_counter()
    # A loopback cloud-like store (bench/run.py cloud) is plain http://, which obstore refuses
    # unless told.
    kw = {"client_options": {"allow_http": True}} if args.url.startswith("http://") else {}
    store = ib.obstore_store(args.url, **kw)
    geoms = ib.open_geometries(store, args.var, sample_axis=args.sample_axis)
    first = next(iter(geoms.values()))
    manifest = ib.split_by_chunk(first, fractions=(1.0, 0.0, 0.0))
    ds = ib.InSituDataset(store, manifest, geoms, batch_size=args.batch_size,
                          block_chunks=args.block_chunks, max_inflight=args.max_inflight,
                          seed=args.seed, shuffle=True, cache_budget_bytes=args.cache_budget_bytes,
                          **({"cache_dir": args.cache_dir, "persist": args.persist} if args.cache_dir else {}))
    open_s = time.perf_counter() - t_open
    try:
        est = int(ds.describe()["memory"]["estimated_peak_bytes"])
    except Exception:  # noqa: BLE001 - describe is observability only
        est = 0

    epochs = []
    for e in range(args.epochs):
        ds.set_epoch(e)
        samples = 0
        nbytes = 0
        ttfb = None
        cpu0 = cpu_times()
        t0 = time.perf_counter()
        for batch in ds.train:
            if ttfb is None:
                ttfb = time.perf_counter() - t0
            samples += len(batch)
            nbytes += sum(int(a.nbytes) for a in batch.arrays.values())
        secs = time.perf_counter() - t0
        cpu = cpu_fields(cpu0, cpu_times(), nbytes)
        lp = ds.last_pass
        stage = str(getattr(lp, "limiting_stage", "")) if lp is not None else ""
        epochs.append({
            "epoch": e,
            "kind": "cold" if e == 0 else "warm",
            "seconds": secs,
            "samples": samples,
            "decoded_bytes": nbytes,
            "mb_per_s": nbytes / 1e6 / secs if secs > 0 else 0.0,
            "samples_per_s": samples / secs if secs > 0 else 0.0,
            "ttfb_s": ttfb if ttfb is not None else secs,
            # From the start of work (import and open included): the first epoch only.
            "first_batch_since_start_s": (t0 - t_import) + (ttfb if ttfb is not None else secs) if e == 0 else None,
            "limiting_stage": stage,
            **cpu,
        })
    ds.close()

    out = {
        "url": args.url,
        "variables": list(geoms.keys()),
        "config": {
            "engine": "insitubatch-py",
            "engine_version": getattr(ib, "__version__", "?"),
            "batch_size": args.batch_size,
            "block_chunks": int(getattr(ds, "block_chunks", args.block_chunks)),
            "block_chunks_requested": args.block_chunks,
            "max_inflight": args.max_inflight,
            "cache_budget_bytes": args.cache_budget_bytes,
            "epochs": args.epochs,
            "shuffle": True,
            "seed": args.seed,
            "sample_axis": args.sample_axis,
            "open_s": open_s,
            "import_s": t_open - t_import,
            "python": sys.version.split()[0],
        },
        "epochs": epochs,
        "peak_rss_bytes": vm_hwm_bytes(),
        "describe_estimated_peak_bytes": est,
    }
    sys.stdout.write(json.dumps(out) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
