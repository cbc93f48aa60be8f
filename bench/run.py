#!/usr/bin/env python3
"""Side-by-side benchmark: insitubatch-rs CLI vs the Python anchor (insitubatch 0.2.0).

    bench/run.py --stores DIR [--samples N] [--only c1,c8] [--out docs/benchmarks.md]
                 [--cli PATH] [--anchor-python PY]

For each store DIR/<name>.zarr: the decode limit once (`CLI bench URL --decode-limit
--json`, falling back to bench/decode_limit.py), then each engine in a fresh subprocess
(our CLI: `CLI bench URL --batch-size .. --block-chunks .. --max-inflight .. --epochs ..
--json`; the anchor: bench/anchor_bench.py in the anchor venv). Peak RSS is the max of
the process tree's summed VmRSS (polled from /proc every 50 ms) and the engine's own
report. When the CLI is missing or fails, its row says n/a and the anchor still runs.
--samples N first makes missing stores with bench/make_stores.py (N samples).
Writes a markdown table to --out and raw rows to bench/results/latest.jsonl.
"""
import argparse
import datetime
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
ALL_STORES = ["c1", "c8", "c8s", "c40", "shard"]


# ------------------------------------------------------------ process-tree RSS
def _children(pid):
    out = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{tid}/children") as f:
                    out += [int(x) for x in f.read().split()]
            except OSError:
                pass
    except OSError:
        pass
    return out


def _rss(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def tree_rss(root):
    seen, stack, total = set(), [root], 0
    while stack:
        p = stack.pop()
        if p in seen:
            continue
        seen.add(p)
        total += _rss(p)
        stack += _children(p)
    return total


def run_measured(cmd, timeout, env=None):
    """Run cmd, polling its process tree RSS every 50 ms. Returns dict."""
    t0 = time.perf_counter()
    try:
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                             text=True)
    except OSError as e:
        return {"rc": None, "error": f"cannot start: {e}", "stdout": "", "stderr": "",
                "tree_peak_rss_bytes": 0, "wall_s": 0.0}
    peak = [0]
    done = threading.Event()

    def poll():
        while not done.is_set():
            peak[0] = max(peak[0], tree_rss(p.pid))
            done.wait(0.05)

    th = threading.Thread(target=poll, daemon=True)
    th.start()
    try:
        out, err = p.communicate(timeout=timeout)
        rc, error = p.returncode, None
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        rc, error = None, f"timeout after {timeout}s"
    done.set()
    th.join()
    if rc not in (0, None) and error is None:
        error = f"exit {rc}: " + (err or "").strip().splitlines()[-1:][0] if (err or "").strip() \
            else f"exit {rc}"
    return {"rc": rc, "error": error, "stdout": out, "stderr": err,
            "tree_peak_rss_bytes": peak[0], "wall_s": time.perf_counter() - t0}


def last_json(text):
    for line in reversed((text or "").strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                continue
    return None


# ------------------------------------------------------------ formatting
def fmt(v, spec="{:.0f}", na="n/a"):
    return na if v is None else spec.format(v)


def gb(b):
    return None if not b else b / 1e9


def ratio(a, b):
    return None if a is None or b in (None, 0) else a / b


def epoch_of(res, kind):
    if not res:
        return None
    for e in res.get("epochs", []):
        if e.get("kind") == kind:
            return e
    return None


def summarize(row):
    res = row.get("result")
    cold, warm = epoch_of(res, "cold"), epoch_of(res, "warm")
    own = (res or {}).get("peak_rss_bytes") or 0
    rss = max(own, row.get("tree_peak_rss_bytes") or 0) if res else None
    return {
        "cold_mbs": cold and cold["mb_per_s"], "warm_mbs": warm and warm["mb_per_s"],
        "sps": cold and cold["samples_per_s"], "ttfb": cold and cold["ttfb_s"],
        "rss": rss, "stage": cold and cold.get("limiting_stage"),
        "warm_stage": warm and warm.get("limiting_stage"),
        "est": (res or {}).get("describe_estimated_peak_bytes"),
    }


def markdown(args, cmdline, rows, decode):
    mem = 0
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                mem = int(line.split()[1]) * 1024
    L = ["# Benchmarks: insitubatch-rs vs insitubatch 0.2.0 (Python anchor)", "",
         f"- command: `{cmdline}`",
         f"- date: {datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}",
         f"- machine: {platform.node()}, nproc {os.cpu_count()}, RAM {mem / 2**30:.1f} GiB, "
         f"{platform.platform()}",
         f"- config: batch {args.batch_size}, block_chunks {args.block_chunks}, max_inflight "
         f"{args.max_inflight}, epochs {args.epochs} (1 cold + warm), var `{args.var}`, local file:// "
         "stores (page-cached after generation)",
         "- MB = 1e6 decoded bytes; samples/s, TTFB and limiting stage are of the cold epoch; peak "
         "RSS = max(process-tree VmRSS polled every 50 ms, engine's own VmHWM); ratios are ours ÷ "
         "anchor (TTFB and RSS: lower is better); est/RSS = describe() estimate ÷ measured peak.",
         "",
         "| store | engine | cold MB/s | warm MB/s | samples/s | TTFB s | peak RSS GB | limiting stage "
         "(cold/warm) | ×anchor cold | ×anchor warm | ×anchor TTFB | ×anchor RSS | % decode limit "
         "| est/RSS |",
         "|---|---|--:|--:|--:|--:|--:|---|--:|--:|--:|--:|--:|--:|"]
    by_store = {}
    for r in rows:
        by_store.setdefault(r["store"], {})[r["engine"]] = r
    for store, engines in by_store.items():
        anc = summarize(engines["anchor"]) if "anchor" in engines else None
        dl = (decode.get(store) or {}).get("decode_limit_mb_per_s")
        for name in ("ours", "anchor"):
            if name not in engines:
                continue
            r = engines[name]
            s = summarize(r)
            ok = r.get("result") is not None
            if not ok:
                L.append(f"| {store} | {name} | n/a | n/a | n/a | n/a | n/a | "
                         f"n/a ({(r.get('error') or 'failed')[:60]}) | n/a | n/a | n/a | n/a | "
                         "n/a | n/a |")
                continue
            mine = name == "ours" and anc and anc["cold_mbs"] is not None
            L.append("| " + " | ".join([
                store, name, fmt(s["cold_mbs"]), fmt(s["warm_mbs"]), fmt(s["sps"], "{:.1f}"),
                fmt(s["ttfb"], "{:.2f}"), fmt(gb(s["rss"]), "{:.2f}"),
                f"{s['stage'] or '?'} / {s['warm_stage'] or '?'}",
                fmt(ratio(s["cold_mbs"], anc["cold_mbs"]) if mine else None, "{:.2f}", "—"),
                fmt(ratio(s["warm_mbs"], anc["warm_mbs"]) if mine else None, "{:.2f}", "—"),
                fmt(ratio(s["ttfb"], anc["ttfb"]) if mine else None, "{:.2f}", "—"),
                fmt(ratio(s["rss"], anc["rss"]) if mine else None, "{:.2f}", "—"),
                fmt(100 * ratio(s["cold_mbs"], dl) if dl and s["cold_mbs"] else None, "{:.0f}%"),
                fmt(ratio(s["est"], s["rss"]) if s["est"] else None, "{:.2f}"),
            ]) + " |")
    L += ["", "Decode limit per store (MB/s of decoded output, all cores):", ""]
    for store, d in decode.items():
        if d:
            L.append(f"- {store}: {d['decode_limit_mb_per_s']:.0f} MB/s, {d.get('threads')} "
                     f"threads ({d.get('source', 'insitubatch-rs CLI')})")
        else:
            L.append(f"- {store}: n/a")
    L += ["", "![Decoded MB/s, insitubatch-rs vs insitubatch 0.2.0, cold and warm, with the decode limit]"
          "(img/benchmarks.png)", "(`bench/plot.py` redraws it from the raw rows.)", "",
          "Raw rows: `bench/results/latest.jsonl`.", ""]
    return "\n".join(L)


def write_markdown(path, md):
    """Write the report (creating its folder) and echo it."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        f.write(md)
    print(md)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--stores", required=True, help="dir holding <name>.zarr stores")
    ap.add_argument("--samples", type=int, default=None,
                    help="make missing stores with this many samples first")
    ap.add_argument("--only", default=None, help="comma list, default " + ",".join(ALL_STORES))
    ap.add_argument("--out", default=os.path.join(REPO, "docs", "benchmarks.md"))
    ap.add_argument("--results", default=os.path.join(HERE, "results", "latest.jsonl"))
    ap.add_argument("--cli", default="insitubatch")
    ap.add_argument("--anchor-python", default=None,
                    help="default: the venv made by bench/setup_anchor.sh")
    ap.add_argument("--var", default="t2m")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--block-chunks", type=int, default=16)
    ap.add_argument("--max-inflight", type=int, default=32)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=1800)
    ap.add_argument("--skip-anchor", action="store_true")
    args = ap.parse_args(argv)
    cmdline = " ".join(shlex.quote(a) for a in [os.path.relpath(sys.argv[0], REPO)] + sys.argv[1:])

    names = args.only.split(",") if args.only else ALL_STORES
    apy = args.anchor_python
    if apy is None:
        cache = os.environ.get("INSITUBATCH_CACHE", os.path.expanduser("~/.cache/insitubatch"))
        apy = os.path.join(cache, "venv-anchor", "bin", "python")
        if not os.path.exists(apy):
            apy = subprocess.run([os.path.join(HERE, "setup_anchor.sh")], check=True,
                                 stdout=subprocess.PIPE, text=True).stdout.strip().splitlines()[-1]
    if args.samples:
        subprocess.run([apy, os.path.join(HERE, "make_stores.py"), args.stores,
                        "--samples", str(args.samples), "--only", ",".join(names)], check=True)
    cli = shutil.which(args.cli) or (args.cli if os.path.exists(args.cli) else None)
    if cli:
        cli = os.path.abspath(cli)

    rows, decode = [], {}
    os.makedirs(os.path.dirname(os.path.abspath(args.results)), exist_ok=True)
    jl = open(args.results, "w")

    def emit(row):
        rec = {k: v for k, v in row.items() if k not in ("stdout", "stderr")}
        rec["stderr_tail"] = (row.get("stderr") or "")[-2000:]
        jl.write(json.dumps(rec) + "\n")
        jl.flush()

    common = ["--batch-size", str(args.batch_size), "--block-chunks", str(args.block_chunks),
              "--max-inflight", str(args.max_inflight), "--epochs", str(args.epochs)]
    for name in names:
        path = os.path.abspath(os.path.join(args.stores, name + ".zarr"))
        if not os.path.isdir(path):
            print(f"[run] {name}: {path} missing, skipped (use --samples N to make it)",
                  file=sys.stderr)
            continue
        url = "file://" + path
        # decode limit
        d = None
        if cli:
            r = run_measured([cli, "bench", url, "--decode-limit", "--json"], args.timeout)
            d = last_json(r["stdout"])
            if d:
                d.setdefault("source", "insitubatch-rs CLI")
        if d is None:
            r = run_measured([apy, os.path.join(HERE, "decode_limit.py"), "--url", url,
                              "--var", args.var], args.timeout)
            d = last_json(r["stdout"])
        decode[name] = d
        emit({"store": name, "engine": "decode_limit", "url": url, "result": d,
              "rc": r["rc"], "error": r["error"], "stderr": r["stderr"]})
        print(f"[run] {name}: decode limit {d and round(d['decode_limit_mb_per_s'])} MB/s",
              file=sys.stderr)
        engines = [("ours", [cli, "bench", url] + common + ["--json"] if cli else None)]
        if not args.skip_anchor:
            engines.append(("anchor", [apy, os.path.join(HERE, "anchor_bench.py"), "--url", url,
                                       "--var", args.var] + common + ["--json"]))
        for eng, cmd in engines:
            if cmd is None:
                row = {"store": name, "engine": eng, "url": url, "cmd": None, "result": None,
                       "rc": None, "error": f"CLI {args.cli!r} not found",
                       "tree_peak_rss_bytes": 0, "wall_s": 0.0}
            else:
                r = run_measured(cmd, args.timeout)
                res = last_json(r["stdout"])
                if res is None and not r["error"]:
                    r["error"] = "no JSON on stdout"
                row = dict(r, store=name, engine=eng, url=url, cmd=cmd, result=res)
            rows.append(row)
            emit(row)
            s = summarize(row)
            print(f"[run] {name} {eng}: cold {fmt(s['cold_mbs'])} MB/s, warm "
                  f"{fmt(s['warm_mbs'])} MB/s, ttfb {fmt(s['ttfb'], '{:.2f}')} s, rss "
                  f"{fmt(gb(s['rss']), '{:.2f}')} GB {row.get('error') or ''}", file=sys.stderr)
    jl.close()
    md = markdown(args, cmdline, rows, decode)
    write_markdown(args.out, md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
