"""ranks: ranks on one machine: N CLI processes, each `--rank r --world-size N`, against one
process.

    bench/run.py ranks --stores DIR [--only c8] [--world-sizes 1,2] [--reps 3]

For each round and world size (the sizes in a rotated order per round), N processes of
`insitubatch bench URL --rank r --world-size N --threads T --epochs 1 --json` (T = cores / N
decode threads each, what a launcher on one node should do) start together; the job's
cold-epoch rate is the decoded bytes of all ranks over the slowest rank's epoch seconds. Also
summed over ranks: chunk reads (read-once across the job means the same count as one process)
and samples served; and the samples the job drops to keep the ranks' batch counts equal (each
rank reports that job-wide figure).
"""
import json
import os
import statistics
import subprocess
import sys
import time

import engines as registry
from report import cell, header, stat

from .common import knobs, rotated

NAME = "ranks"
STORES = "c8"
CHOICES = []
ENGINES = []
ALWAYS = ["ours"]
REPS = 3
QUICK = {"reps": 1}


def add_args(ap):
    ap.add_argument("--world-sizes", default="1,2", help="comma list of rank counts (the first is the baseline)")


def check(args, error):
    try:
        args.world_size_list = [int(w) for w in args.world_sizes.split(",") if w]
    except ValueError:
        error(f"--world-sizes takes whole numbers separated by commas, not {args.world_sizes!r}")
    if not args.world_size_list or min(args.world_size_list) < 1:
        error("--world-sizes needs at least one size, each at least 1")


def threads_per_rank(world):
    """The machine's cores shared out among the ranks."""
    return max(1, (os.cpu_count() or 1) // world)


def job(args, ctx, url, world):
    """The argv of each rank of a job of ``world`` ranks."""
    out = []
    for r in range(world):
        k = knobs(args, epochs=1, extra=["--rank", str(r), "--world-size", str(world), "--threads",
                                         str(threads_per_rank(world))])
        out.append(registry.engine("ours").command(ctx, url, k))
    return out


def commands(args, ctx, store, url, which=None):
    return {f"ours-w{w}-r{r}": cmd for w in args.world_size_list for r, cmd in enumerate(job(args, ctx, url, w))}


def run_job(cmds, timeout):
    """All ranks at once: each rank's cold epoch (or why it failed), and the job's figures."""
    t0 = time.perf_counter()
    procs = [subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for c in cmds]
    ranks = []
    for p in procs:
        try:
            out, err = p.communicate(timeout=max(1.0, timeout - (time.perf_counter() - t0)))
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
            err += f"\ntimeout after {timeout:g} s"
        lines = [ln for ln in out.splitlines() if ln.startswith("{")]
        if p.returncode != 0 or not lines:
            ranks.append({"rc": p.returncode, "error": (err.strip().splitlines() or ["no JSON on stdout"])[-1][-300:]})
        else:
            ranks.append({"rc": 0, "epoch": json.loads(lines[-1])["epochs"][0]})
    row = {"ranks": ranks, "wall_s": time.perf_counter() - t0}
    failed = [r["error"] for r in ranks if "error" in r]
    if failed:
        row["error"] = f"{len(failed)} of {len(ranks)} ranks failed: {failed[0]}"
        return row
    epochs = [r["epoch"] for r in ranks]
    row["job"] = {"mb_per_s": sum(e["decoded_bytes"] for e in epochs) / 1e6 / max(e["seconds"] for e in epochs),
                  "reads": sum(e["storage_reads"] for e in epochs), "samples": sum(e["samples"] for e in epochs),
                  # Each rank reports the job's dropped samples (the same number), not its own.
                  "dropped": epochs[0].get("dropped_samples", 0)}
    return row


def run(session):
    a, rows = session.args, []
    if not session.runnable(ALWAYS):
        return rows
    for name, path in session.stores():
        url = "file://" + path
        for rnd in range(a.reps):
            for slot, w in enumerate(rotated(a.world_size_list, rnd)):
                cmds = job(a, session.ctx, url, w)
                row = dict(run_job(cmds, a.timeout), suite=NAME, store=name, engine="ours", round=rnd, slot=slot, world=w,
                           url=url, cmd=cmds[0])
                rows.append(session.keep(row))
                print(f"[ranks] {name} round {rnd} world {w}: "
                      f"{row.get('error') or '%.0f MB/s' % row['job']['mb_per_s']}", file=sys.stderr)
    return rows


def config(args):
    return (f"{args.reps} rounds, world sizes in a rotated order; each rank a fresh process, all ranks at once, "
            f"with {os.cpu_count()} cores / ranks decode threads each; batch {args.batch_size}, block_chunks "
            f"{args.block_chunks}, max_inflight {args.max_inflight}, one cold epoch")


def markdown(meta, rows):
    L = header(meta, ["# Ranks on one machine", ""])
    listed = [int(w) for w in str(meta.get("options", {}).get("world_sizes") or "").split(",") if w]
    for store in dict.fromkeys(r["store"] for r in rows):
        mine = [r for r in rows if r["store"] == store]
        # The first size asked for is the baseline.
        sizes = [w for w in listed if any(r["world"] == w for r in mine)] or sorted({r["world"] for r in mine})
        seen = {w: [r["job"] for r in mine if r["world"] == w and r.get("job")] for w in sizes}
        L += ["", f"{store}:", "",
              "| ranks | job cold MB/s (median [min–max ×max/min]) | × one process | chunk reads, all ranks | "
              "samples served + dropped |", "|--:|--:|--:|--:|--:|"]
        base = statistics.median(j["mb_per_s"] for j in seen[sizes[0]]) if seen[sizes[0]] else None
        for w in sizes:
            jobs = seen[w]
            if not jobs:
                why = next((r.get("error") for r in mine if r["world"] == w), "failed")
                L.append(f"| {w} | n/a ({why[:60].replace('|', '/')}) | | | |")
                continue
            reads = sorted({j["reads"] for j in jobs})
            served = sorted({(j["samples"], j["dropped"]) for j in jobs})
            times = f"{statistics.median(j['mb_per_s'] for j in jobs) / base:.2f}" if base else "n/a"
            L.append(f"| {w} | {cell(stat([j['mb_per_s'] for j in jobs]))} | {times} | {', '.join(map(str, reads))} | "
                     f"{', '.join(f'{s} + {d}' for s, d in served)} |")
    if meta.get("results"):
        L += ["", f"Rows: `{meta['results']}`."]
    L.append("")
    return "\n".join(L)
