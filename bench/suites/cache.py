"""cache: the disk tier: a warm epoch from a persisted cache in a fresh process, insitubatch-rs
(the CLI) against insitubatch 0.2.0 (the reference implementation, persist=True, reopened).

    bench/run.py cache --stores DIR [--only c1,c8,c8s] [--cache-root DIR] [--reps 1]

Per store, engine and round, in fresh processes: run 1 (write) opens with cache_dir + persist
and reads one cold epoch (fetch, decode, write the cache); run 2 (reopen) reopens the same
directory in a new process and reads one epoch from the cache (after a `sync`, so the first
run's writeback is over). Reported: MB/s of both runs, the time to the first batch of run 2
from the start of its iteration and from the start of the process (open included), the storage
reads of run 2 (ours), and the peak RSS of the process tree. The cache directory is deleted
after each engine. The page cache is not dropped: both engines read their cache files from
memory, as a second job on the same node would.
"""
import os
import shutil
import subprocess

import engines as registry
from report import cell, fmt, header, ratio, stat

from .common import knobs, rotated

NAME = "cache"
STORES = "c1,c8,c8s"
CHOICES = ["ours", "reference"]
ENGINES = CHOICES
ALWAYS = []
REPS = 1
QUICK = {}
PHASES = ("write", "reopen")


def add_args(ap):
    ap.add_argument("--cache-root", default=None, help="where the cache dirs go (default: next to the stores)")


def check(args, error):
    pass


def cache_dir(args, engine):
    root = args.cache_root or os.path.normpath(os.path.join(os.path.abspath(os.path.expanduser(args.stores)), "..", "cache-bench"))
    return os.path.join(root, f"cache-{engine}")


def commands(args, ctx, store, url, which=None):
    """{engine: argv}: the same command writes the cache and then reads it back."""
    out = {}
    for e in args.engine_list:
        if which is None or e in which:
            k = knobs(args, epochs=1, extra=["--cache-dir", cache_dir(args, e), "--persist"])
            out[e] = registry.engine(e).command(ctx, url, k)
    return out


def run(session):
    a, rows = session.args, []
    which = session.runnable(a.engine_list)
    for name, path in session.stores():
        url = "file://" + path
        cmds = commands(a, session.ctx, path, url, which)
        for rnd in range(a.reps):
            for slot, eng in enumerate(rotated(cmds, rnd)):
                cache = cache_dir(a, eng)
                shutil.rmtree(cache, ignore_errors=True)
                os.makedirs(os.path.dirname(cache), exist_ok=True)
                for phase in PHASES:
                    if phase == "reopen":
                        # Let the kernel finish writing the cache back first, so the reopened run does
                        # not share the disk with the previous run's writeback (the same for both engines).
                        subprocess.run(["sync"], check=False)
                    row = session.measure(name, eng, rnd, slot, url, cmds[eng], phase=phase)
                    if phase == "reopen":
                        du = subprocess.run(["du", "-sb", cache], stdout=subprocess.PIPE, text=True).stdout.split()
                        row["cache_bytes"] = int(du[0]) if du else None
                    rows.append(session.keep(row))
                    if row.get("error"):
                        break
                shutil.rmtree(cache, ignore_errors=True)
    return rows


def config(args):
    return (f"var `{args.var}`, batch {args.batch_size}, block_chunks {args.block_chunks}, max_inflight "
            f"{args.max_inflight}, shuffle on, whole array as train; {args.reps} round(s); each run a fresh process; "
            "run 1 = cold epoch writing the cache (`cache_dir` + `persist`), run 2 = reopened in a new process after "
            "`sync`, one epoch from the cache; page cache not dropped (both engines read their cache files from "
            "memory).")


def summary(row):
    res = row.get("result") or {}
    if row.get("error") or not res.get("epochs"):
        return None
    e = res["epochs"][0]
    return {"mb_per_s": e["mb_per_s"], "ttfb_s": e["ttfb_s"],
            "first_batch_since_start_s": e.get("first_batch_since_start_s"),
            "storage_reads": e.get("storage_reads"),
            "peak_rss_bytes": max(row.get("tree_peak_rss_bytes") or 0, res.get("peak_rss_bytes") or 0),
            "cache_bytes": row.get("cache_bytes")}


def markdown(meta, rows):
    L = header(meta, ["# Disk tier: a warm epoch from a persisted cache in a fresh process", ""])
    L += ["- TTFB = first batch after the iteration starts; from start = first batch after the process "
          "started its work (imports and open included); cells are medians [min–max] over the rounds.", "",
          "| store | ours write / reopen MB/s | 0.2.0 write / reopen MB/s | ×0.2.0 reopen | "
          "TTFB reopen ours / 0.2.0 | ×0.2.0 TTFB | from start ours / 0.2.0 | reads in reopen (ours) | "
          "peak RSS reopen ours / 0.2.0 GB | cache size ours / 0.2.0 GB |",
          "|---|---|---|--:|---|--:|---|--:|---|---|"]
    failures = []
    for store in dict.fromkeys(r["store"] for r in rows):
        runs = {}
        for r in rows:
            if r["store"] != store:
                continue
            s = summary(r)
            if s is None:
                failures.append(f"{store} {r['engine']} {r.get('phase')} failed: {r.get('error') or 'no result'}")
            else:
                runs.setdefault((r["engine"], r.get("phase")), []).append(s)

        def st(eng, phase, key, scale=1.0):
            return stat([s[key] * scale if s[key] is not None else None for s in runs.get((eng, phase), [])])

        def both(key, spec="{:.0f}", scale=1.0, phases=("reopen",), engs=("ours", "reference")):
            return " / ".join(cell(st(e, p, key, scale), spec) for e in engs for p in phases)

        def x(key, spec):
            o, r = st("ours", "reopen", key), st("reference", "reopen", key)
            return fmt(ratio(o and o["median"], r and r["median"]), spec)

        L.append("| " + " | ".join([
            store,
            both("mb_per_s", phases=PHASES, engs=("ours",)),
            both("mb_per_s", phases=PHASES, engs=("reference",)),
            x("mb_per_s", "{:.2f}"),
            both("ttfb_s", "{:.3f}") + " s",
            x("ttfb_s", "{:.3f}"),
            both("first_batch_since_start_s", "{:.3f}") + " s",
            cell(st("ours", "reopen", "storage_reads")),
            both("peak_rss_bytes", "{:.2f}", 1e-9),
            both("cache_bytes", "{:.2f}", 1e-9),
        ]) + " |")
    L += [""] + failures
    if meta.get("results"):
        L += ["", f"Rows: `{meta['results']}`."]
    L.append("")
    return "\n".join(L)
