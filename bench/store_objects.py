#!/usr/bin/env python3
"""Store objects against the URL: the same local store read by insitubatch_rs through its
URL (`rs-python`), an obstore LocalStore (`rs-obstore`) and a zarr-python LocalStore
(`rs-zarrstore`), and by the anchor through its obstore store (`anchor-py`) and the zarr
LocalStore (`anchor-zarrstore`).

    store_objects.py --stores DIR [--only c8,c1] [--rounds 5] [--epochs 1]
                     [--anchor-python PY] [--out FILE.md]

Each engine runs in a fresh subprocess (bench/py_engines.py), `--rounds` times, the engines
in a rotated order each round so drift on a shared machine spreads over all of them. The
table gives the median cold MB/s and its spread (min-max), the median over rounds of each
run's cold MB/s divided by the URL run's of the same round (paired, so drift between rounds
cancels), and the run's user CPU seconds (all epochs, open included) against the URL's, and
its system CPU seconds. Warm epochs are served from the engine's pool (they read nothing), so
the default is one cold epoch. Raw rows go to
bench/results/store-objects-latest.jsonl; the markdown table to stdout (and --out).
"""

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from report import command_line  # noqa: E402
OURS = ["rs-python", "rs-obstore", "rs-zarrstore"]
ANCHOR = ["anchor-py", "anchor-zarrstore"]


def run_engine(python, engine, url, epochs):
    """One run's JSON row, plus the subprocess's ``user_s`` and ``sys_s`` CPU seconds. User
    time is the steadiest measure of the work a loader does on a shared machine; wall time and
    system time also move with the machine (page cache, other processes)."""
    cmd = [python, os.path.join(HERE, "py_engines.py"), engine, "--url", url, "--epochs", str(epochs)]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if out.returncode != 0:
        raise SystemExit(f"{engine} failed ({out.returncode}):\n{out.stderr[-2000:]}")
    row = json.loads(out.stdout.strip().splitlines()[-1])
    row["user_s"] = after.ru_utime - before.ru_utime
    row["sys_s"] = after.ru_stime - before.ru_stime
    return row


def mbps(row, kind):
    return [e["mb_per_s"] for e in row["epochs"] if e["kind"] == kind]


def main(argv=None):
    cache = os.environ.get("INSITUBATCH_CACHE", os.path.expanduser("~/.cache/insitubatch"))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--stores", required=True)
    ap.add_argument("--only", default="c8,c1")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--anchor-python", default=os.path.join(cache, "venv-anchor", "bin", "python"))
    ap.add_argument("--out")
    args = ap.parse_args(argv)
    engines = [(e, args.python) for e in OURS]
    if os.path.exists(args.anchor_python):
        engines += [(e, args.anchor_python) for e in ANCHOR]
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    raw = open(os.path.join(HERE, "results", "store-objects-latest.jsonl"), "w")
    results = {}  # (store, engine) -> {"cold": [...], "user": [...], "sys": [...], "paired": [...]}
    for store in args.only.split(","):
        url = "file://" + os.path.abspath(os.path.join(args.stores, f"{store}.zarr"))
        for r in range(args.rounds):
            k = r % len(engines)
            this_round = {}
            for engine, python in engines[k:] + engines[:k]:
                row = run_engine(python, engine, url, args.epochs)
                raw.write(json.dumps({"store": store, "round": r, **row}) + "\n")
                raw.flush()
                acc = results.setdefault((store, engine), {"cold": [], "user": [], "sys": [], "paired": []})
                acc["cold"] += mbps(row, "cold")
                acc["user"].append(row["user_s"])
                acc["sys"].append(row["sys_s"])
                this_round[engine] = mbps(row, "cold")[0]
                print(f"{store} round {r} {engine}: cold {acc['cold'][-1]:.0f} MB/s", file=sys.stderr)
            for engine, cold in this_round.items():  # against the URL run of the same round
                results[(store, engine)]["paired"].append(cold / this_round["rs-python"])
    raw.close()
    lines = [
        f"- command: `{command_line(sys.argv[0], sys.argv[1:])}`",
        f"- date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; machine: {platform.node() or 'vm'}, "
        f"nproc {os.cpu_count()}, python {platform.python_version()}",
        f"- {args.rounds} runs per engine in rotated order; each run: 1 cold + {args.epochs - 1} warm epoch(s), "
        "batch 32, block_chunks 16, max_inflight 32, whole array as train, shuffle on",
        "",
        "| store | engine | store object | cold MB/s (median) | cold min–max | ÷ URL cold (paired median) "
        "| user CPU s (median) | ÷ URL user CPU | system CPU s (median) |",
        "|---|---|---|--:|--:|--:|--:|--:|--:|",
    ]
    kinds = {
        "rs-python": "URL string",
        "rs-obstore": "obstore LocalStore",
        "rs-zarrstore": "zarr LocalStore",
        "anchor-py": "obstore_store (zarr ObjectStore)",
        "anchor-zarrstore": "zarr LocalStore",
    }
    for store in args.only.split(","):
        base_user = statistics.median(results[(store, "rs-python")]["user"])
        for engine, _ in engines:
            acc = results[(store, engine)]
            user = statistics.median(acc["user"])
            lines.append(
                f"| {store} | {engine} | {kinds[engine]} | {statistics.median(acc['cold']):.0f} "
                f"| {min(acc['cold']):.0f}–{max(acc['cold']):.0f} | {statistics.median(acc['paired']):.2f} "
                f"| {user:.2f} | {user / base_user:.3f} | {statistics.median(acc['sys']):.2f} |"
            )
    table = "\n".join(lines) + "\n"
    sys.stdout.write(table)
    if args.out:
        with open(args.out, "w") as f:
            f.write(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
