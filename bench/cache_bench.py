#!/usr/bin/env python3
"""Disk-tier benchmark: a warm epoch from a persisted cache in a fresh process, insitubatch-rs
vs the Python anchor (insitubatch 0.2.0 with persist=True, reopened).

    bench/cache_bench.py --stores DIR [--only c1,c8] [--cli PATH] [--cache-root DIR]
                         [--out docs/benchmarks-cache.md]

Per store and engine, in fresh processes: run 1 opens with cache_dir + persist and reads one
cold epoch (fetch, decode, write the cache); run 2 reopens the same directory in a new process
and reads one epoch from the cache (after a `sync`, so the first run's writeback is over). Reported: MB/s of both runs, the time to the first batch
of run 2 from the start of its iteration and from the start of the process (open included),
the storage reads of run 2 (ours), and the peak RSS of the process tree. The cache directory
is deleted after each engine. The page cache is not dropped: both engines read their cache
files from memory, as a second job on the same node would.
"""
import argparse
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from run import REPO, command_line, fmt, gb, last_json, ratio, run_measured, write_markdown  # noqa: E402


def engine_cmds(args, url, cache, engine):
    common = ["--batch-size", str(args.batch_size), "--block-chunks", str(args.block_chunks),
              "--max-inflight", str(args.max_inflight), "--epochs", "1"]
    if engine == "ours":
        return [args.cli, "bench", url, "--var", args.var, "--json", "--cache-dir", cache,
                "--persist"] + common
    return [args.anchor_python, os.path.join(HERE, "anchor_bench.py"), "--url", "file://" + url,
            "--var", args.var, "--cache-dir", cache, "--persist"] + common


def one(args, url, engine):
    cache = os.path.join(args.cache_root, f"cache-{engine}")
    shutil.rmtree(cache, ignore_errors=True)
    os.makedirs(args.cache_root, exist_ok=True)
    out = {"engine": engine}
    for run in ("write", "reopen"):
        if run == "reopen":
            # Let the kernel finish writing the cache back first, so the reopened run does not
            # share the disk with the previous run's writeback (the same for both engines).
            subprocess.run(["sync"], check=False)
        r = run_measured(engine_cmds(args, url, cache, engine), args.timeout)
        res = last_json(r["stdout"])
        if r["error"] or not res:
            out[run] = {"error": r["error"] or "no JSON", "stderr": (r["stderr"] or "")[-2000:]}
            break
        e = res["epochs"][0]
        out[run] = {
            "mb_per_s": e["mb_per_s"],
            "ttfb_s": e["ttfb_s"],
            "first_batch_since_start_s": e.get("first_batch_since_start_s"),
            "storage_reads": e.get("storage_reads"),
            "revived_chunks": e.get("revived_chunks"),
            "peak_rss_bytes": max(r["tree_peak_rss_bytes"], res.get("peak_rss_bytes") or 0),
            "wall_s": r["wall_s"],
        }
    du = subprocess.run(["du", "-sb", cache], stdout=subprocess.PIPE, text=True).stdout.split()
    out["cache_bytes"] = int(du[0]) if du else None
    shutil.rmtree(cache, ignore_errors=True)
    return out


def markdown(args, cmdline, rows):
    L = ["# Disk tier: a warm epoch from a persisted cache in a fresh process", "",
         "(insitubatch 0.2.0, the Python project insitubatch-rs rebuilds, is called \"anchor\" in the table.)", "",
         f"- command: `{cmdline}`",
         f"- date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC",
         f"- machine: {platform.node()}, nproc {os.cpu_count()}, {platform.platform()}",
         f"- config: var `{args.var}`, batch {args.batch_size}, block_chunks {args.block_chunks}, "
         f"max_inflight {args.max_inflight}, shuffle on, whole array as train; each run a fresh process; "
         "run 1 = cold epoch writing the cache (`cache_dir` + `persist`), run 2 = reopened in a new "
         "process after `sync`, one epoch from the cache; page cache not dropped (both engines read "
         "their cache files from memory).",
         "- TTFB = first batch after the iteration starts; from start = first batch after the process "
         "started its work (imports and open included).", "",
         "| store | ours write / reopen MB/s | anchor write / reopen MB/s | ×anchor reopen | "
         "TTFB reopen ours / anchor | ×anchor TTFB | from start ours / anchor | reads in reopen (ours) | "
         "peak RSS reopen ours / anchor GB | cache size ours / anchor GB |",
         "|---|---|---|--:|---|--:|---|--:|---|---|"]
    for row in rows:
        o, a = row["ours"], row["anchor"]
        ow, orr, aw, ar = (o.get("write", {}), o.get("reopen", {}), a.get("write", {}), a.get("reopen", {}))
        L.append("| " + " | ".join([
            row["store"],
            f"{fmt(ow.get('mb_per_s'))} / {fmt(orr.get('mb_per_s'))}",
            f"{fmt(aw.get('mb_per_s'))} / {fmt(ar.get('mb_per_s'))}",
            fmt(ratio(orr.get("mb_per_s"), ar.get("mb_per_s")), "{:.2f}"),
            f"{fmt(orr.get('ttfb_s'), '{:.3f}')} / {fmt(ar.get('ttfb_s'), '{:.3f}')} s",
            fmt(ratio(orr.get("ttfb_s"), ar.get("ttfb_s")), "{:.3f}"),
            f"{fmt(orr.get('first_batch_since_start_s'), '{:.3f}')} / "
            f"{fmt(ar.get('first_batch_since_start_s'), '{:.3f}')} s",
            fmt(orr.get("storage_reads")),
            f"{fmt(gb(orr.get('peak_rss_bytes')), '{:.2f}')} / {fmt(gb(ar.get('peak_rss_bytes')), '{:.2f}')}",
            f"{fmt(gb(o.get('cache_bytes')), '{:.2f}')} / {fmt(gb(a.get('cache_bytes')), '{:.2f}')}",
        ]) + " |")
        for eng in ("ours", "anchor"):
            for run in ("write", "reopen"):
                err = row[eng].get(run, {}).get("error")
                if err:
                    L.append(f"\n{row['store']} {eng} {run} failed: {err}")
    L += ["", "Raw rows: `bench/results/cache-latest.jsonl`.", ""]
    return "\n".join(L)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--stores", required=True)
    ap.add_argument("--only", default="c1,c8,c8s")
    ap.add_argument("--cli", default="insitubatch")
    ap.add_argument("--anchor-python", default=None)
    ap.add_argument("--cache-root", default=None, help="where the cache dirs go (default: next to the stores)")
    ap.add_argument("--out", default=os.path.join(REPO, "docs", "benchmarks-cache.md"))
    ap.add_argument("--results", default=os.path.join(HERE, "results", "cache-latest.jsonl"))
    ap.add_argument("--var", default="t2m")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--block-chunks", type=int, default=16)
    ap.add_argument("--max-inflight", type=int, default=32)
    ap.add_argument("--timeout", type=float, default=1800)
    args = ap.parse_args(argv)
    cmdline = command_line(sys.argv[0], sys.argv[1:] if argv is None else list(argv))
    args.cli = os.path.abspath(shutil.which(args.cli) or args.cli)
    if args.anchor_python is None:
        cache = os.environ.get("INSITUBATCH_CACHE", os.path.expanduser("~/.cache/insitubatch"))
        args.anchor_python = os.path.join(cache, "venv-anchor", "bin", "python")
        if not os.path.exists(args.anchor_python):
            args.anchor_python = subprocess.run([os.path.join(HERE, "setup_anchor.sh")], check=True,
                                                stdout=subprocess.PIPE, text=True).stdout.strip().splitlines()[-1]
    args.cache_root = args.cache_root or os.path.join(os.path.abspath(args.stores), "..", "cache-bench")
    os.makedirs(os.path.dirname(os.path.abspath(args.results)), exist_ok=True)
    rows = []
    with open(args.results, "w") as jl:
        for name in args.only.split(","):
            url = os.path.abspath(os.path.join(args.stores, f"{name}.zarr"))
            row = {"store": name, "ours": one(args, url, "ours"), "anchor": one(args, url, "anchor")}
            rows.append(row)
            jl.write(json.dumps(row) + "\n")
            jl.flush()
            print(json.dumps(row), file=sys.stderr)
    write_markdown(args.out, markdown(args, cmdline, rows))


if __name__ == "__main__":
    main()
