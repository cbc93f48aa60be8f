#!/usr/bin/env python3
"""Ranks on one machine: N CLI processes, each `--rank r --world-size N`, against one process.

    bench/ranks.py --url file:///.../c8.zarr [--cli PATH] [--world-sizes 1,2] [--reps 3]

For each round and world size (the sizes in a rotated order per round), N processes of
`insitubatch bench URL --fractions 1,0,0 --rank r --world-size N --threads T --epochs 1 --json`
(T = cores / N decode threads each) start
together; the job's cold-epoch rate is the decoded bytes of all ranks over the slowest
rank's epoch seconds. Also summed over ranks: chunk reads (read-once across the job means
the same count as one process) and samples served; and the samples the job drops to keep
the ranks' batch counts equal (each rank reports that job-wide figure). Prints a markdown
table of medians with min-max.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from report import command_line  # noqa: E402
KNOBS = ["--batch-size", "32", "--block-chunks", "16", "--max-inflight", "32", "--fractions", "1,0,0"]


def threads_per_rank(world):
    """The machine's cores shared out among the ranks (what a launcher on one node should do)."""
    return max(1, (os.cpu_count() or 1) // world)


def run_job(cli, url, world):
    """One cold epoch on `world` ranks at once: the job's MB/s and the sums over ranks."""
    procs = [
        subprocess.Popen([cli, "bench", url, *KNOBS, "--rank", str(r), "--world-size", str(world), "--threads",
                          str(threads_per_rank(world)), "--epochs", "1", "--json"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for r in range(world)
    ]
    epochs = []
    for p in procs:
        out, err = p.communicate()
        if p.returncode != 0:
            raise SystemExit(f"ranks.py: a rank failed ({p.returncode}): {err.strip()[-300:]}")
        row = json.loads([line for line in out.splitlines() if line.startswith("{")][-1])
        epochs.append(row["epochs"][0])
    seconds = max(e["seconds"] for e in epochs)
    total = sum(e["decoded_bytes"] for e in epochs)
    return {
        "mb_per_s": total / 1e6 / seconds,
        "reads": sum(e["storage_reads"] for e in epochs),
        "samples": sum(e["samples"] for e in epochs),
        # Each rank reports the job's dropped samples (the same number), not its own.
        "dropped": epochs[0].get("dropped_samples", 0),
    }


def spread(xs):
    return f"{statistics.median(xs):.0f} [{min(xs):.0f}–{max(xs):.0f}]"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", required=True)
    ap.add_argument("--cli", default=os.path.expanduser("~/.cache/insitubatch/target/release/insitubatch"))
    ap.add_argument("--world-sizes", default="1,2")
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    sizes = [int(w) for w in args.world_sizes.split(",")]
    seen = {w: [] for w in sizes}
    for r in range(args.reps):
        for w in sizes[r % len(sizes):] + sizes[:r % len(sizes)]:
            seen[w].append(run_job(args.cli, args.url, w))
    base = statistics.median(j["mb_per_s"] for j in seen[sizes[0]])
    print(f"- command: `{command_line(sys.argv[0], sys.argv[1:])}`")
    print(f"- {args.reps} rounds, world sizes in a rotated order; each rank a fresh process, all ranks at once, "
          f"with {os.cpu_count()} cores / ranks decode threads each")
    print()
    print("| ranks | job cold MB/s (median [min–max]) | × one process | chunk reads, all ranks | samples served + dropped |")
    print("|--:|--:|--:|--:|--:|")
    for w in sizes:
        jobs = seen[w]
        reads = sorted({j["reads"] for j in jobs})
        served = sorted({(j["samples"], j["dropped"]) for j in jobs})
        print(f"| {w} | {spread([j['mb_per_s'] for j in jobs])} | "
              f"{statistics.median(j['mb_per_s'] for j in jobs) / base:.2f} | {', '.join(map(str, reads))} | "
              f"{', '.join(f'{s} + {d}' for s, d in served)} |")


if __name__ == "__main__":
    main()
