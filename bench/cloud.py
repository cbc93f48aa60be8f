#!/usr/bin/env python3
"""Remote benchmark: insitubatch-rs (the CLI and its Python binding) vs insitubatch 0.2.0,
in one run, through a cloud-like store on loopback (tests/servers/cloud-store: a time to
first byte per request, a rate per connection, one rate for the interface all connections
share, an optional slow tail, and counters of requests and bytes).

    bench/cloud.py --stores DIR [--only c8,c8s,shard,shardsmall] [--settings 20ms,100ms,50ms,50ms-tail]
                   [--reps 3] [--engines ours,rs-python,anchor] [--server PATH] [--cli PATH]
                   [--results bench/rows/DATE-cloud.jsonl] [--out FILE.md]

The store's folder is served over HTTP as http://127.0.0.1:PORT/<name>.zarr. For each
setting (the server's /_ib/config), --reps rounds; in each round, per store, the decode
limit (`CLI bench file://... --decode-limit`, no network) and every engine once, each a
fresh process running one cold epoch, in an order rotated by one per round. Before each
run the server's counters are reset; after it they give the requests, the bytes and the
server's CPU seconds of that run. The network bound of a store is the interface rate x its
compression ratio (decoded ÷ stored bytes, from make_stores.py's marker); the bound a run
can reach is the lower of that and the decode limit of the same round.

Settings (name: time to first byte, per-connection rate, interface rate, tail):
  20ms  20 ms, 40 MB/s, 400 MB/s        100ms  100 ms, 40 MB/s, 400 MB/s
  50ms  50 ms, 40 MB/s, 400 MB/s        50ms-tail  the same, 1% of requests 1 s later
Rows go to --results (JSON lines), the tables to --out (markdown) and stdout.
"""
import argparse
import datetime
import json
import os
import platform
import shlex
import subprocess
import sys
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import run as local  # noqa: E402  (the engines' commands, measuring and the anchor venv)
from report import fmt, stat  # noqa: E402

SETTINGS = {
    "20ms": {"ttfb_ms": "20", "conn_rate": "40MB", "rate": "400MB", "tail": "0:0"},
    "100ms": {"ttfb_ms": "100", "conn_rate": "40MB", "rate": "400MB", "tail": "0:0"},
    "50ms": {"ttfb_ms": "50", "conn_rate": "40MB", "rate": "400MB", "tail": "0:0"},
    "50ms-tail": {"ttfb_ms": "50", "conn_rate": "40MB", "rate": "400MB", "tail": "0.01:1000"},
}
STORES = ["c8", "c8s", "shard", "shardsmall"]
PROBE = "probe"
ENGINES = ["ours", "rs-python", "anchor"]
CACHE = local.CACHE


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--stores", required=True, help="dir holding <name>.zarr (bench/make_stores.py)")
    ap.add_argument("--only", default=",".join(STORES))
    ap.add_argument("--settings", default=",".join(SETTINGS), help="comma list of " + ",".join(SETTINGS))
    ap.add_argument("--engines", default=",".join(ENGINES))
    ap.add_argument("--reps", type=int, default=3)
    tgt = os.environ.get("CARGO_TARGET_DIR", os.path.join(CACHE, "target"))
    ap.add_argument("--cli", default=os.path.join(tgt, "release", "insitubatch"))
    ap.add_argument("--server", default=os.path.join(tgt, "release", "cloud-store"))
    ap.add_argument("--python", default=os.path.join(CACHE, "venv-test", "bin", "python"))
    ap.add_argument("--anchor-python", default=None)
    ap.add_argument("--var", default="t2m")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--block-chunks", type=int, default=16)
    ap.add_argument("--max-inflight", type=int, default=32)
    ap.add_argument("--extra", default="", help="more CLI flags for the ours engine (quoted)")
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--results", default=os.path.join(HERE, "results", "cloud.jsonl"))
    ap.add_argument("--out", default=os.path.join(HERE, "results", "cloud.md"))
    args = ap.parse_args(argv)
    args.epochs, args.budget_bytes, args.first_block_chunks, args.cli_b = 1, None, None, None
    args.engine_list = [e for e in args.engines.split(",") if e]
    for s in args.settings.split(","):
        if s not in SETTINGS:
            ap.error(f"unknown setting {s!r}; choose from {','.join(SETTINGS)}")
    return args


class Server:
    """The cloud-like store over the stores folder, for the whole run."""

    def __init__(self, binary, root):
        if not os.path.exists(binary):
            subprocess.run(["cargo", "build", "--release", "-q", "-p", "insitubatch-tests", "--bin", "cloud-store"],
                           cwd=REPO, check=True)
        self.proc = subprocess.Popen([binary, "--root", root, "--port-file", "-"], stdout=subprocess.PIPE, text=True)
        self.base = f"http://127.0.0.1:{self.proc.stdout.readline().strip()}"

    def call(self, path):
        with urllib.request.urlopen(self.base + path, timeout=30) as r:
            return json.loads(r.read())

    def configure(self, setting):
        return self.call("/_ib/config?" + "&".join(f"{k}={v}" for k, v in setting.items()))

    def close(self):
        self.proc.terminate()
        self.proc.wait()


def store_ratio(stores, name):
    """Decoded ÷ stored bytes of a store (make_stores.py's marker)."""
    try:
        with open(os.path.join(stores, name + ".zarr.done")) as f:
            return json.load(f).get("ratio")
    except (OSError, ValueError):
        return None


def one_run(server, store, engine, rnd, setting, url, cmd, timeout):
    server.call("/_ib/reset")
    cpu0 = server.call("/_ib/stats")["cpu_s"]
    row = local.measure(store, engine, rnd, 0, url, cmd, timeout)
    if engine == PROBE and row.get("rc") == 0:  # describe --json prints one pretty document
        try:
            row["result"], row["error"] = json.loads(row["stdout"]), None
        except ValueError as e:
            row["error"] = f"describe --probe printed no JSON: {e}"
    served = server.call("/_ib/stats")
    row["served"] = {k: served.get(k) for k in ("requests", "gets", "heads", "lists", "bytes", "bytes_sent",
                                                "slow", "cancelled")}
    row["served"]["cpu_s"] = served["cpu_s"] - cpu0  # the store's CPU during this run
    row["setting"] = setting
    return row


def cold(row):
    eps = ((row.get("result") or {}).get("epochs")) or []
    return eps[0] if eps else {}


def run_all(args, server, apy, cli):
    rows = []
    os.makedirs(os.path.dirname(os.path.abspath(args.results)), exist_ok=True)
    with open(args.results, "w") as jl:
        for setting in args.settings.split(","):
            server.configure(SETTINGS[setting])
            for name in args.only.split(","):
                path = os.path.abspath(os.path.join(args.stores, name + ".zarr"))
                if not os.path.isdir(path):
                    print(f"[cloud] {name}: {path} missing, skipped", file=sys.stderr)
                    continue
                local.warm_files(path)
                url = f"{server.base}/{name}.zarr"
                cmds = local.engine_cmds(args, url, cli, apy)
                cmds[local.DECODE] = [cli, "bench", "file://" + path, "--var", args.var, "--decode-limit", "--json"]
                # The probe's prediction of the same epoch (the whole array as train split).
                cmds[PROBE] = [cli, "describe", url, "--var", args.var, "--fractions", "1,0,0", "--batch-size",
                               str(args.batch_size), "--block-chunks", str(args.block_chunks), "--max-inflight",
                               str(args.max_inflight), "--probe", "--json"]
                if args.extra and "ours" in cmds:
                    cmds["ours"] += shlex.split(args.extra)
                for rnd in range(args.reps):
                    for eng in local.rotated(list(cmds), rnd):
                        row = one_run(server, name, eng, rnd, setting, url, cmds[eng], args.timeout)
                        rows.append(row)
                        rec = {k: v for k, v in row.items() if k not in ("stdout", "stderr")}
                        rec["stderr_tail"] = (row.get("stderr") or "")[-2000:]
                        jl.write(json.dumps(rec) + "\n")
                        jl.flush()
                        e, s = cold(row), row["served"]
                        print(f"[cloud] {setting} {name} r{rnd} {eng}: {fmt(e.get('mb_per_s'))} MB/s, ttfb "
                              f"{fmt(e.get('ttfb_s'), '{:.2f}')} s, {s['requests']} requests, server cpu "
                              f"{fmt(s['cpu_s'], '{:.2f}')} s {row.get('error') or ''}", file=sys.stderr, flush=True)
    return rows


def med(rows, f):
    st = stat([f(r) for r in rows])
    return st


def cell(st, spec="{:.0f}"):
    if not st:
        return "n/a"
    if st["n"] == 1:
        return spec.format(st["median"])
    return f"{spec.format(st['median'])} [{spec.format(st['min'])}–{spec.format(st['max'])}]"


def table(args, rows):
    """One markdown table per setting: per store, each engine's cold MB/s, requests, TTFB,
    peak RSS; ours ÷ the anchor; the bound and our share of it."""
    out = []
    engines = [e for e in ("ours", "rs-python", "anchor") if e in args.engine_list]
    for setting in args.settings.split(","):
        s = SETTINGS[setting]
        out += [f"#### {setting}: first byte {s['ttfb_ms']} ms, {s['conn_rate']}/s per connection, "
                f"{s['rate']}/s in all, tail {s['tail']} (share:ms)", ""]
        head = ["store", "bound MB/s (net, decode)"] + [f"{e} MB/s" for e in engines]
        head += [f"{e} ÷ anchor" for e in engines if e != "anchor"] + ["ours % of bound", "probe MB/s (÷ ours)"]
        head += [f"requests ({'/'.join(engines)})", f"first batch s ({'/'.join(engines)})",
                 f"peak RSS GB ({'/'.join(engines)})", "server CPU s (ours)"]
        out += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for name in args.only.split(","):
            mine = [r for r in rows if r["setting"] == setting and r["store"] == name]
            if not mine:
                continue
            by = {e: [r for r in mine if r["engine"] == e and not r.get("error")] for e in engines}
            dec = med([r for r in mine if r["engine"] == local.DECODE],
                      lambda r: (r.get("result") or {}).get("decode_limit_mb_per_s"))
            ratio_ = store_ratio(args.stores, name)
            net = float(local_rate(s["rate"])) / 1e6 * ratio_ if ratio_ else None
            bound = min(x for x in (net, dec and dec["median"]) if x) if (net or dec) else None
            mbs = {e: med(by[e], lambda r: cold(r).get("mb_per_s")) for e in engines}
            anchor = (mbs.get("anchor") or {}).get("median")
            line = [name, f"{fmt(bound)} ({fmt(net)}, {fmt(dec and dec['median'])})"]
            line += [cell(mbs[e]) for e in engines]
            line += [fmt(mbs[e]["median"] / anchor, "{:.2f}") if mbs[e] and anchor else "n/a"
                     for e in engines if e != "anchor"]
            ours = (mbs.get("ours") or {}).get("median")
            line.append(fmt(100 * ours / bound if ours and bound else None, "{:.0f}%"))
            pred = med([r for r in mine if r["engine"] == PROBE],
                       lambda r: (((r.get("result") or {}).get("probe") or {}).get("predicted") or {}).get("mb_per_s"))
            line.append(f"{cell(pred)} ({fmt(pred['median'] / ours if pred and ours else None, '{:.2f}')})")
            line.append(" / ".join(cell(med(by[e], lambda r: r["served"]["requests"])) for e in engines))
            line.append(" / ".join(cell(med(by[e], lambda r: cold(r).get("ttfb_s")), "{:.2f}") for e in engines))
            line.append(" / ".join(cell(med(by[e], lambda r: (max((r.get("result") or {}).get("peak_rss_bytes") or 0,
                                                                   r.get("tree_peak_rss_bytes") or 0) / 1e9) or None),
                                         "{:.2f}") for e in engines))
            line.append(cell(med(by.get("ours", []), lambda r: r["served"]["cpu_s"]), "{:.2f}"))
            out.append("| " + " | ".join(line) + " |")
        out.append("")
    return out


def local_rate(text):
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if text.endswith(unit):
            return float(text[: -len(unit)]) * scale
    return float(text)


def main(argv=None):
    args = parse_args(argv)
    cmdline = local.command_line(sys.argv[0], sys.argv[1:] if argv is None else list(argv))
    apy = local.anchor_python(args.anchor_python) if "anchor" in args.engine_list else None
    cli = os.path.abspath(args.cli)
    if "rs-python" in args.engine_list and local.why_not_rs_python(args.python):
        print(f"[cloud] rs-python skipped: {local.why_not_rs_python(args.python)}", file=sys.stderr)
        args.engine_list.remove("rs-python")
    server = Server(args.server, os.path.abspath(args.stores))
    try:
        rows = run_all(args, server, apy, cli)
    finally:
        server.close()
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    md = [f"Command: `{cmdline}`", "",
          f"Date: {date}; machine: nproc {os.cpu_count()}, {platform.platform()}; {args.reps} rounds, engines "
          f"rotated each round, one cold epoch per fresh process; batch {args.batch_size}, block_chunks "
          f"{args.block_chunks}, max_inflight {args.max_inflight}. Medians [min–max].", ""]
    md += table(args, rows)
    text = "\n".join(md) + "\n"
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        f.write(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
