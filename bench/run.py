#!/usr/bin/env python3
"""Side-by-side benchmark: insitubatch-rs (the CLI and its Python binding) vs the Python
anchor (insitubatch 0.2.0), in one run, as medians of interleaved repetitions.

    bench/run.py --stores DIR [--only c1,c8] [--reps 3] [--epochs 3] [--engines ours,rs-python,anchor]
                 [--budget-bytes B] [--page-cache-fill GIB --ballast DIR] [--samples N]
                 [--cli PATH] [--python PY] [--anchor-python PY] [--out docs/benchmarks.md]
    bench/run.py --quick        # 2-minute smoke: 48-sample c8 store, 3 rounds, 2 epochs

For each store DIR/<name>.zarr: its files are read once (into the page cache), then --reps
rounds; in each round the decode limit (`CLI bench URL --decode-limit --json`, falling back
to bench/decode_limit.py) and every engine run once, each in a fresh subprocess, in an order
rotated by one per round so drift on a shared machine spreads over all of them. Engines:
`ours` (`CLI bench URL ... --json`), `rs-python` (bench/py_engines.py rs-python under
--python, skipped with the reason when insitubatch_rs does not import there), `anchor`
(bench/anchor_bench.py under the anchor venv). Each run is --epochs epochs of one process:
cold, warm1, warm2, ...; --budget-bytes gives every engine the same residency budget (so
the warm epochs are served from the pool).

Per run: each epoch's MB/s and TTFB, wall time, user and system CPU seconds of the child,
peak RSS = max(process-tree VmRSS polled every 50 ms, the engine's VmHWM), and MemFree /
MemAvailable / Cached at its start. --page-cache-fill GIB reads files under --ballast before
each round until the kernel's Cached is at least GIB (the page cache holding most of RAM, a
training machine's normal state). The markdown (--out) has per store and engine the median
of each metric with its spread and the ratios of medians (bench/report.py); raw rows go to
bench/results/latest.jsonl (--quick: bench/results/quick.md and quick.jsonl).
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
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
# Re-exported: bench/run_python.py and bench/cache_bench.py import these from here.
from measure import fill_page_cache, last_json, meminfo, run_measured, warm_files  # noqa: E402,F401
from report import (DECODE, command_line, epoch_of, fmt, gb, markdown, ratio, run_metrics, stat,  # noqa: E402,F401
                    write_markdown)

ALL_STORES = ["c1", "c8", "c8s", "c40", "shard"]
ALL_ENGINES = ["ours", "rs-python", "anchor"]
CACHE = os.environ.get("INSITUBATCH_CACHE", os.path.expanduser("~/.cache/insitubatch"))
GIB = 2 ** 30
LOW_MEM_BYTES = 2 * GIB  # warn when a run starts with less memory available than this
QUICK = {"stores": os.path.join(CACHE, "bench-stores-48"), "samples": 48, "only": "c8",
         "reps": 3, "epochs": 2, "out": os.path.join(HERE, "results", "quick.md"),
         "results": os.path.join(HERE, "results", "quick.jsonl")}
DEFAULTS = {"reps": 3, "epochs": 3, "out": os.path.join(REPO, "docs", "benchmarks.md"),
            "results": os.path.join(HERE, "results", "latest.jsonl")}


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--stores", help="dir holding <name>.zarr stores (required unless --quick)")
    ap.add_argument("--quick", action="store_true",
                    help="2-minute smoke: " + ", ".join(f"{k} {v}" for k, v in QUICK.items()))
    ap.add_argument("--samples", type=int, default=None,
                    help="make missing stores with this many samples first (bench/make_stores.py)")
    ap.add_argument("--only", default=None, help="comma list, default " + ",".join(ALL_STORES))
    ap.add_argument("--engines", default=",".join(ALL_ENGINES), help="comma list of "
                    + ",".join(ALL_ENGINES))
    ap.add_argument("--reps", type=int, default=None, help="rounds per store (default 3)")
    ap.add_argument("--epochs", type=int, default=None,
                    help="epochs per run: cold, warm1, warm2, ... (default 3)")
    ap.add_argument("--budget-bytes", type=int, default=None,
                    help="residency budget for every engine (default: each one's automatic budget)")
    ap.add_argument("--page-cache-fill", type=float, default=None, metavar="GIB",
                    help="before each round, read --ballast files until Cached ≥ GIB")
    ap.add_argument("--ballast", action="append", default=[], metavar="DIR",
                    help="files to read for --page-cache-fill (repeatable)")
    ap.add_argument("--out", default=None, help="markdown report (default docs/benchmarks.md)")
    ap.add_argument("--results", default=None, help="raw rows (default bench/results/latest.jsonl)")
    tgt = os.environ.get("CARGO_TARGET_DIR", os.path.join(CACHE, "target"))
    ap.add_argument("--cli", default=shutil.which("insitubatch")
                    or os.path.join(tgt, "release", "insitubatch"))
    ap.add_argument("--cli-b", default=None, metavar="PATH",
                    help="a second CLI build, run as engine ours-b in the same rounds (an A/B of "
                    "two builds: the report's ×CLI column is B ÷ --cli)")
    ap.add_argument("--python", default=os.path.join(CACHE, "venv-test", "bin", "python"),
                    help="python with insitubatch_rs for the rs-python engine")
    ap.add_argument("--anchor-python", default=None,
                    help="default: the venv made by bench/setup_anchor.sh")
    ap.add_argument("--var", default="t2m")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--block-chunks", type=int, default=16)
    ap.add_argument("--max-inflight", type=int, default=32)
    ap.add_argument("--first-block-chunks", type=int, default=None, metavar="N",
                    help="also run the CLI with --first-block-chunks N (engine ours-fbN), in the same rounds")
    ap.add_argument("--timeout", type=float, default=1800)
    args = ap.parse_args(argv)
    base = QUICK if args.quick else DEFAULTS
    for k in ("reps", "epochs", "out", "results") + (("stores", "samples", "only") if args.quick else ()):
        if getattr(args, k) is None:
            setattr(args, k, base[k])
    if not args.stores:
        ap.error("--stores DIR is required (or --quick)")
    if args.reps < 1 or args.epochs < 1:
        ap.error("--reps and --epochs must be at least 1")
    if args.page_cache_fill is not None and not args.ballast:
        ap.error("--page-cache-fill needs --ballast DIR (files to read into the page cache)")
    bad = set(args.engines.split(",")) - set(ALL_ENGINES)
    if bad:
        ap.error(f"unknown engine(s) {', '.join(sorted(bad))}; choose from {','.join(ALL_ENGINES)}")
    if args.cli_b and "ours" not in args.engines.split(","):
        ap.error("--cli-b runs beside the ours engine (its command with another CLI); add ours to --engines or drop --cli-b")
    return args


def anchor_python(given):
    if given:
        return given
    apy = os.path.join(CACHE, "venv-anchor", "bin", "python")
    if os.path.exists(apy):
        return apy
    return subprocess.run([os.path.join(HERE, "setup_anchor.sh")], check=True,
                          stdout=subprocess.PIPE, text=True).stdout.strip().splitlines()[-1]


def why_not_rs_python(python):
    """None when insitubatch_rs imports under `python`, else the reason."""
    if not os.path.exists(python):
        return f"{python} not found (--python)"
    r = subprocess.run([python, "-c", "import insitubatch_rs"], capture_output=True, text=True)
    if r.returncode:
        tail = (r.stderr.strip().splitlines() or ["?"])[-1]
        return f"insitubatch_rs does not import under {python}: {tail}"
    return None


def engine_cmds(args, url, cli, apy):
    """{engine: argv} for one store: the decode limit and every engine that can run."""
    common = ["--batch-size", str(args.batch_size), "--block-chunks", str(args.block_chunks),
              "--max-inflight", str(args.max_inflight), "--epochs", str(args.epochs)]
    budget = ["--cache-budget-bytes", str(args.budget_bytes)] if args.budget_bytes else []
    cmds = {DECODE: [cli, "bench", url, "--decode-limit", "--json"] if cli else
            [apy, os.path.join(HERE, "decode_limit.py"), "--url", url, "--var", args.var]}
    if "ours" in args.engine_list:
        cmds["ours"] = [cli, "bench", url, "--var", args.var] + common + budget + ["--json"]
        if args.first_block_chunks:
            cmds[f"ours-fb{args.first_block_chunks}"] = cmds["ours"] + [
                "--first-block-chunks", str(args.first_block_chunks)]
        if args.cli_b:
            cmds["ours-b"] = [os.path.abspath(args.cli_b)] + cmds["ours"][1:]
    if "rs-python" in args.engine_list:
        cmds["rs-python"] = [args.python, os.path.join(HERE, "py_engines.py"), "rs-python", "--url",
                             url, "--var", args.var] + common + budget
    if "anchor" in args.engine_list:
        cmds["anchor"] = [apy, os.path.join(HERE, "anchor_bench.py"), "--url", url, "--var",
                          args.var] + common + budget + ["--json"]
    return cmds


def shown_path(path):
    """A path inside the repo relative to its root, any other one absolute."""
    p = os.path.abspath(path)
    return os.path.relpath(p, REPO) if p.startswith(REPO + os.sep) else p


def rotated(items, k):
    k %= max(1, len(items))
    return items[k:] + items[:k]


def measure(store, engine, rnd, slot, url, cmd, timeout):
    """One run in a fresh subprocess: its row, with the memory state at its start."""
    mem = meminfo()
    if mem.get("available", 0) < LOW_MEM_BYTES:
        print(f"[run] warning: {mem['available'] / GIB:.1f} GiB available before {store} {engine} "
              f"round {rnd}", file=sys.stderr)
    r = run_measured(cmd, timeout)
    res = last_json(r["stdout"])
    if res is not None and engine == DECODE:
        res.setdefault("source", "insitubatch-rs CLI" if "--decode-limit" in cmd
                       else "bench/decode_limit.py")
    if res is not None and "skipped" in res:
        r["error"], res = res["skipped"], None
    if res is None and not r["error"]:
        r["error"] = "no JSON on stdout"
    return dict(r, store=store, engine=engine, round=rnd, slot=slot, url=url, cmd=cmd,
                result=res, mem_at_start=mem)


def say(row):
    if row["engine"] == DECODE:
        d = row["result"] or {}
        txt = f"decode limit {fmt(d.get('decode_limit_mb_per_s'))} MB/s"
    else:
        m = run_metrics(row) or {}
        eps = " ".join(f"{k[:-4]} {fmt(v)}" for k, v in m.items() if k.endswith("_mbs"))
        txt = (f"MB/s {eps}, ttfb {fmt(m.get('ttfb'), '{:.2f}')} s, rss "
               f"{fmt(gb(m.get('rss')), '{:.2f}')} GB, user {fmt(m.get('user_s'), '{:.1f}')} s "
               f"sys {fmt(m.get('sys_s'), '{:.1f}')} s") if m else ""
    print(f"[run] {row['store']} round {row['round']} {row['engine']}: {txt} "
          f"({row['wall_s']:.1f} s) {row.get('error') or ''}", file=sys.stderr, flush=True)


def fill(args):
    """--page-cache-fill before a round; returns a note when the ballast ran out."""
    if args.page_cache_fill is None:
        return None
    target = int(args.page_cache_fill * GIB)
    cached, read = fill_page_cache(args.ballast, target)
    print(f"[run] page cache: Cached {cached / GIB:.1f} GiB after reading {read / GIB:.1f} GiB "
          "of ballast", file=sys.stderr)
    if cached < target:
        return (f"the ballast ran out: Cached reached {cached / GIB:.1f} GiB, not "
                f"{args.page_cache_fill:g}")
    return None


def memory_lines(args, rows, warmed):
    mem = meminfo()
    fill_txt = ("no page-cache fill" if args.page_cache_fill is None else
                f"before each round, files under {', '.join(args.ballast)} read until Cached ≥ "
                f"{args.page_cache_fill:g} GiB, then the store's files read again")
    starts = [r["mem_at_start"] for r in rows if r.get("mem_at_start")]

    def gib(key):
        st = stat([m.get(key) for m in starts])
        return "n/a" if st is None else (f"{st['median'] / GIB:.1f} GiB "
                                         f"[{st['min'] / GIB:.1f}–{st['max'] / GIB:.1f}]")

    return [f"MemTotal {mem['total'] / GIB:.1f} GiB; {fill_txt}; each store's files read once "
            f"into the page cache before its first round ({warmed})",
            f"at the start of the runs (median [min–max]): MemFree {gib('free')}, MemAvailable "
            f"{gib('available')}, Cached {gib('cached')}"]


def main(argv=None):
    args = parse_args(argv)
    cmdline = command_line(sys.argv[0], sys.argv[1:] if argv is None else list(argv))
    names = args.only.split(",") if args.only else ALL_STORES
    args.engine_list = [e for e in args.engines.split(",") if e]
    apy = anchor_python(args.anchor_python)
    if args.samples:
        os.makedirs(args.stores, exist_ok=True)
        subprocess.run([apy, os.path.join(HERE, "make_stores.py"), args.stores,
                        "--samples", str(args.samples), "--only", ",".join(names)], check=True)
    cli = os.path.abspath(args.cli) if args.cli and os.path.exists(args.cli) else None
    notes = []
    if not cli and "ours" in args.engine_list:
        notes.append(f"CLI {args.cli} not found: `ours` skipped, decode limit from "
                     "bench/decode_limit.py")
        args.engine_list.remove("ours")
    if "rs-python" in args.engine_list:
        why = why_not_rs_python(args.python)
        if why:
            notes.append(f"rs-python skipped: {why}")
            args.engine_list.remove("rs-python")
    if args.cli_b and not os.path.exists(args.cli_b):
        notes.append(f"--cli-b {args.cli_b} not found: `ours-b` skipped")
        args.cli_b = None
    for n in notes:
        print(f"[run] {n}", file=sys.stderr)

    rows, warmed = [], []
    os.makedirs(os.path.dirname(os.path.abspath(args.results)), exist_ok=True)
    with open(args.results, "w") as jl:
        for name in names:
            path = os.path.abspath(os.path.join(args.stores, name + ".zarr"))
            if not os.path.isdir(path):
                print(f"[run] {name}: {path} missing, skipped (use --samples N to make it)",
                      file=sys.stderr)
                notes.append(f"store {name} missing at {path}")
                continue
            url = "file://" + path
            nbytes = warm_files(path)
            warmed.append(f"{name} {nbytes / 1e6:.0f} MB")
            print(f"[run] {name}: read {nbytes / 1e6:.0f} MB of store files into the page cache",
                  file=sys.stderr)
            cmds = engine_cmds(args, url, cli, apy)
            order = list(cmds)
            for rnd in range(args.reps):
                short = fill(args)
                if short and short not in notes:
                    notes.append(short)
                if args.page_cache_fill is not None:
                    warm_files(path)  # the fill may have pushed the store's pages out
                for slot, eng in enumerate(rotated(order, rnd)):
                    row = measure(name, eng, rnd, slot, url, cmds[eng], args.timeout)
                    rows.append(row)
                    rec = {k: v for k, v in row.items() if k not in ("stdout", "stderr")}
                    rec["stderr_tail"] = (row.get("stderr") or "")[-2000:]
                    jl.write(json.dumps(rec) + "\n")
                    jl.flush()
                    say(row)

    meta = {
        "command": cmdline,
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{platform.node()}, nproc {os.cpu_count()}, RAM "
                   f"{meminfo()['total'] / GIB:.1f} GiB, {platform.platform()}",
        "config": f"{args.reps} rounds per store, engines in a rotated order each round "
                  f"({', '.join([DECODE] + args.engine_list + (['ours-b'] if args.cli_b else []))}), each "
                  f"run a fresh process{f'; ours-b is {shown_path(args.cli_b)}' if args.cli_b else ''}; batch "
                  f"{args.batch_size}, block_chunks {args.block_chunks}, max_inflight "
                  f"{args.max_inflight}, epochs {args.epochs} (cold + {args.epochs - 1} warm), "
                  f"residency budget "
                  f"{'automatic (each engine its own)' if not args.budget_bytes else f'{args.budget_bytes} bytes (all engines)'}"
                  f", var `{args.var}`, shuffle on, whole array as train split, local file:// "
                  f"stores under {args.stores}",
        "memory": memory_lines(args, rows, ", ".join(warmed) or "none"),
        "notes": notes,
        "results": shown_path(args.results),
        "plot": os.path.abspath(args.out).startswith(os.path.join(REPO, "docs") + os.sep),
    }
    write_markdown(args.out, markdown(meta, rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
