#!/usr/bin/env python3
"""Python-side benchmark: insitubatch_rs from Python (numpy / torch) and peer Python loaders
(xbatcher + torch DataLoader, plain zarr-python, tensorstore) next to our Rust CLI and the
anchor (insitubatch 0.2.0), on the same stores, in one run.

    <bench venv>/bin/python bench/run_python.py --stores DIR [--only c8,c1] [--compute-ms 20]
        [--max-batches 10] [--epochs 2] [--cli PATH] [--anchor-python PY]
        [--out docs/benchmarks-python.md]

Run it with the bench venv's python (insitubatch_rs release wheel + bench/requirements-peers.txt);
the Python engines (bench/py_engines.py) run in fresh subprocesses of that python, the anchor
with --anchor-python. Per store:
- throughput runs, --epochs (1 cold + warm), no compute step: the CLI (`bench URL ... --fractions
  1,0,0 --json`), the anchor (bench/anchor_bench.py), and each py_engines engine; the xbatcher
  engines stop each epoch after --max-batches batches (their MB/s is over those);
- with --compute-ms M > 0, stall runs: one cold epoch per Python engine (plus `anchor-py`, the
  anchor under the anchor venv) sleeping M ms after each batch; stall % = time waiting for
  the loader ÷ epoch wall time. The CLI has no compute step, so its stall is n/a.
Peak RSS (throughput run) = max(process-tree VmRSS polled every 50 ms, the engine's VmHWM),
with bench/run.py's helpers. Raw rows go to bench/results/python-latest.jsonl.
"""
import argparse
import datetime
import json
import os
import platform
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from run import command_line, epoch_of, fmt, gb, last_json, ratio, run_measured, write_markdown  # noqa: E402

PY_ENGINES = ["rs-python", "rs-torch", "zarr-loop", "tensorstore", "xbatcher-torch-nw0",
              "xbatcher-torch-nw2"]
CAPPED = {"xbatcher-torch-nw0", "xbatcher-torch-nw2"}


def summary(row):
    res = row.get("result") if row else None
    if not res or "epochs" not in res:
        return None
    cold, warm = epoch_of(res, "cold"), epoch_of(res, "warm")
    own = res.get("peak_rss_bytes") or 0
    return {"cold": cold and cold["mb_per_s"], "warm": warm and warm["mb_per_s"],
            "ttfb": cold and cold["ttfb_s"], "rss": max(own, row.get("tree_peak_rss_bytes") or 0),
            "batches": cold and cold.get("batches"), "samples": cold and cold.get("samples"),
            "stage": cold and cold.get("limiting_stage")}


def markdown(args, cmdline, rows, stalls):
    mem = 0
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                mem = int(line.split()[1]) * 1024
    L = ["# Benchmarks from Python: insitubatch_rs vs Python peers, the Rust CLI and insitubatch 0.2.0", "",
         "(insitubatch 0.2.0, the Python project insitubatch-rs rebuilds, is called \"the anchor\" in the tables.)",
         "",
         f"- command: `{cmdline}`",
         f"- date: {datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}",
         f"- machine: {platform.node()}, nproc {os.cpu_count()}, RAM {mem / 2**30:.1f} GiB, "
         f"{platform.platform()}, bench python {sys.version.split()[0]}",
         f"- config: batch {args.batch_size}, shuffle on, epochs {args.epochs} (1 cold + warm), var "
         f"`{args.var}`, whole array as train split, local file:// stores (page-cached); ours and "
         "the anchor: block_chunks 16, max_inflight 32; xbatcher engines stop each epoch after "
         f"{args.max_batches} batches (MB/s over those); every other engine reads the full epoch",
         "- MB = 1e6 decoded bytes; TTFB is of the cold epoch; peak RSS = max(process-tree VmRSS "
         "polled every 50 ms, engine's VmHWM) of the throughput run; stall % = share of a cold "
         f"epoch's wall time spent waiting for the next batch with a {args.compute_ms:g} ms sleep "
         "per batch (a GPU step), measured in a separate run (the anchor's via `anchor-py`); "
         "×CLI / ×anchor = this row's MB/s ÷ theirs (same epoch kind).",
         "- noise: 2 cores, one run each; single runs of one engine differ by up to ~20% here, so "
         "compare rows within one store, not across runs.",
         "",
         "| store | engine | cold MB/s | warm MB/s | TTFB s | peak RSS GB | stall % | ×CLI cold | "
         "×CLI warm | ×anchor cold | ×anchor warm | batches/epoch |",
         "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|"]
    by_store = {}
    for r in rows:
        by_store.setdefault(r["store"], {})[r["engine"]] = r
    for store, engines in by_store.items():
        cli = summary(engines.get("rust-cli"))
        anc = summary(engines.get("anchor"))
        for name, r in engines.items():
            s = summary(r)
            st = stalls.get((store, "anchor-py" if name == "anchor" else name))
            if s is None:
                why = (r.get("result") or {}).get("skipped") or r.get("error") or "failed"
                L.append(f"| {store} | {name} | n/a ({why[:60]}) |  |  |  |  |  |  |  |  |  |")
                continue

            def rr(base, k, skip, _s=s):
                if base is None or skip:
                    return "—"
                return fmt(ratio(_s[k], base[k]), "{:.2f}", "n/a")

            L.append("| " + " | ".join([
                store, name, fmt(s["cold"]), fmt(s["warm"]), fmt(s["ttfb"], "{:.2f}"),
                fmt(gb(s["rss"]), "{:.2f}"), fmt(st, "{:.0f}%"),
                rr(cli, "cold", name == "rust-cli"), rr(cli, "warm", name == "rust-cli"),
                rr(anc, "cold", name == "anchor"), rr(anc, "warm", name == "anchor"),
                str(s["batches"] or "all"),
            ]) + " |")
    rs = [(st, summary(e.get("rs-python")), summary(e.get("rust-cli")))
          for st, e in by_store.items()]
    parts = []
    for st, p, c in rs:
        if p and c and c["cold"] and c["warm"]:
            parts.append(f"{st}: cold {p['cold'] / c['cold']:.2f}×, warm {p['warm'] / c['warm']:.2f}×")
    L += ["", "Python binding (`rs-python`) ÷ Rust CLI: " + ("; ".join(parts) or "n/a") +
          " (target: within 5%, i.e. ≥ 0.95×).", "",
          "![Decoded MB/s per Python loader and store, cold and warm, with stall %](img/benchmarks-python.png)",
          "(`bench/plot.py` redraws it from the raw rows.)", "",
          f"Raw rows: `{os.path.relpath(os.path.abspath(args.results), REPO)}`.", ""]
    return "\n".join(L)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--stores", required=True)
    ap.add_argument("--only", default="c8,c1")
    ap.add_argument("--engines", default=",".join(PY_ENGINES))
    ap.add_argument("--out", default=os.path.join(REPO, "docs", "benchmarks-python.md"))
    ap.add_argument("--results", default=os.path.join(HERE, "results", "python-latest.jsonl"))
    cache = os.environ.get("INSITUBATCH_CACHE", os.path.expanduser("~/.cache/insitubatch"))
    tgt = os.environ.get("CARGO_TARGET_DIR", os.path.join(cache, "target"))
    ap.add_argument("--cli", default=os.path.join(tgt, "release", "insitubatch"))
    ap.add_argument("--anchor-python", default=os.path.join(cache, "venv-anchor", "bin", "python"))
    ap.add_argument("--python", default=sys.executable, help="python for bench/py_engines.py")
    ap.add_argument("--var", default="t2m")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--compute-ms", type=float, default=20.0)
    ap.add_argument("--max-batches", type=int, default=10)
    ap.add_argument("--timeout", type=float, default=900)
    args = ap.parse_args(argv)
    cmdline = command_line(sys.argv[0], sys.argv[1:] if argv is None else list(argv))
    engines = [e for e in args.engines.split(",") if e]
    eng_py = os.path.join(HERE, "py_engines.py")

    os.makedirs(os.path.dirname(os.path.abspath(args.results)), exist_ok=True)
    jl = open(args.results, "w")
    rows, stalls = [], {}

    def measure(store, engine, cmd, kind="throughput"):
        r = run_measured(cmd, args.timeout)
        res = last_json(r["stdout"])
        if res is None and not r["error"]:
            r["error"] = "no JSON on stdout"
        row = dict(r, store=store, engine=engine, cmd=cmd, result=res, kind=kind)
        rec = {k: v for k, v in row.items() if k not in ("stdout", "stderr")}
        rec["stderr_tail"] = (r.get("stderr") or "")[-2000:]
        jl.write(json.dumps(rec) + "\n")
        jl.flush()
        s = summary(row)
        print(f"[run_python] {store} {engine} ({kind}): "
              + (f"cold {fmt(s['cold'])} warm {fmt(s['warm'])} MB/s ttfb {fmt(s['ttfb'], '{:.2f}')} "
                 f"rss {fmt(gb(s['rss']), '{:.2f}')} GB" if s else f"FAILED {row['error']}")
              + f" ({r['wall_s']:.0f} s)", file=sys.stderr, flush=True)
        return row

    for name in args.only.split(","):
        path = os.path.abspath(os.path.join(args.stores, name + ".zarr"))
        if not os.path.isdir(path):
            print(f"[run_python] {name}: {path} missing, skipped", file=sys.stderr)
            continue
        url = "file://" + path
        common = ["--batch-size", str(args.batch_size), "--epochs", str(args.epochs)]
        if os.path.exists(args.cli):
            rows.append(measure(name, "rust-cli", [
                args.cli, "bench", url, "--var", args.var, "--block-chunks", "16",
                "--max-inflight", "32", "--fractions", "1,0,0", "--json"] + common))
        if os.path.exists(args.anchor_python):
            rows.append(measure(name, "anchor", [
                args.anchor_python, os.path.join(HERE, "anchor_bench.py"), "--url", url,
                "--var", args.var, "--block-chunks", "16", "--max-inflight", "32", "--json"]
                + common))
        for eng in engines:
            cap = args.max_batches if eng in CAPPED else 0
            rows.append(measure(name, eng, [args.python, eng_py, eng, "--url", url, "--var",
                                            args.var, "--max-batches", str(cap)] + common))
        if args.compute_ms > 0:
            stall_runs = [(e, args.python) for e in engines]
            if os.path.exists(args.anchor_python):
                stall_runs.append(("anchor-py", args.anchor_python))
            for eng, py in stall_runs:
                cap = args.max_batches if eng in CAPPED else 0
                row = measure(name, eng, [py, eng_py, eng, "--url", url, "--var", args.var,
                                          "--batch-size", str(args.batch_size), "--epochs", "1",
                                          "--compute-ms", str(args.compute_ms),
                                          "--max-batches", str(cap)], kind="stall")
                cold = epoch_of(row.get("result"), "cold")
                stalls[(name, eng)] = cold.get("stall_pct") if cold else None
    jl.close()
    md = markdown(args, cmdline, rows, stalls)
    write_markdown(args.out, md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
