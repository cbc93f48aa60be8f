"""cloud: insitubatch-rs (the CLI and its Python binding) against insitubatch 0.2.0 (the
reference implementation), in one run, through a cloud-like store on loopback
(tests/servers/cloud-store: a time to first byte per request, a rate per connection, one rate
for the interface all connections share, an optional slow tail, and counters of requests and
bytes).

    bench/run.py cloud --stores DIR [--only c8,c8s,shard,shardsmall] [--settings 20ms,100ms,50ms,50ms-tail]
        [--reps 3] [--engines ours,rs-python,reference] [--server PATH] [--extra "CLI FLAGS"] [--out FILE.md]

The stores' folder is served over HTTP as http://127.0.0.1:PORT/<name>.zarr. For each setting
(the server's /_ib/config), --reps rounds; in each round, per store, the decode limit (`CLI
bench file://... --decode-limit`, no network), the CLI's probe (`describe --probe`) and every
engine once, each a fresh process running one cold epoch, in an order rotated by one per round.
Before each run the server's counters are reset; after it they give the requests, the bytes and
the server's CPU seconds of that run. The network bound of a store is the interface rate x its
compression ratio (decoded ÷ stored bytes, from make_stores.py's marker); the bound a run can
reach is the lower of that and the decode limit of the same round.

Settings (name: time to first byte, per-connection rate, interface rate, tail):
  20ms  20 ms, 40 MB/s, 400 MB/s        100ms  100 ms, 40 MB/s, 400 MB/s
  50ms  50 ms, 40 MB/s, 400 MB/s        50ms-tail  the same, 1% of requests 1 s later
"""
import json
import os
import shlex
import subprocess
import sys
import urllib.request

import engines as registry
from measure import warm_files
from report import REPO, cell, fmt, header, med, stat

from .common import knobs, rotated

NAME = "cloud"
STORES = "c8,c8s,shard,shardsmall"
CHOICES = ["ours", "rs-python", "reference"]
ENGINES = CHOICES
ALWAYS = [registry.DECODE, registry.PROBE]
REPS = 3
QUICK = {"settings": "50ms", "reps": 1}
SETTINGS = {
    "20ms": {"ttfb_ms": "20", "conn_rate": "40MB", "rate": "400MB", "tail": "0:0"},
    "100ms": {"ttfb_ms": "100", "conn_rate": "40MB", "rate": "400MB", "tail": "0:0"},
    "50ms": {"ttfb_ms": "50", "conn_rate": "40MB", "rate": "400MB", "tail": "0:0"},
    "50ms-tail": {"ttfb_ms": "50", "conn_rate": "40MB", "rate": "400MB", "tail": "0.01:1000"},
}


def default_server():
    cache = os.environ.get("INSITUBATCH_CACHE", os.path.expanduser("~/.cache/insitubatch"))
    return os.path.join(os.environ.get("CARGO_TARGET_DIR", os.path.join(cache, "target")), "release", "cloud-store")


def add_args(ap):
    ap.add_argument("--settings", default=None, help="comma list of " + ",".join(SETTINGS) + " (default all)")
    ap.add_argument("--server", default=default_server(), help="the cloud-store binary (built when missing)")
    ap.add_argument("--extra", default="", help="more CLI flags for the ours engine (quoted)")


def check(args, error):
    args.settings = args.settings or ",".join(SETTINGS)
    for s in args.settings.split(","):
        if s not in SETTINGS:
            error(f"unknown setting {s!r}; choose from {','.join(SETTINGS)}")


class Server:
    """The cloud-like store over the stores folder, for the whole run (bench/run.py cloud and
    patches --cloud)."""

    def __init__(self, binary, root):
        if not os.path.exists(binary):
            print(f"[cloud] building the cloud-store server for {binary}", file=sys.stderr)
            subprocess.run(["cargo", "build", "--release", "-q", "-p", "insitubatch-tests", "--bin", "cloud-store"],
                           cwd=REPO, check=True)
            if not os.path.exists(binary):
                raise SystemExit(f"the cloud-store server is not at {binary} after building it: give its path "
                                 "with --server (cargo's target folder is $CARGO_TARGET_DIR)")
        self.proc = subprocess.Popen([binary, "--root", root, "--port-file", "-"], stdout=subprocess.PIPE, text=True)
        self.base = f"http://127.0.0.1:{self.proc.stdout.readline().strip()}"

    def call(self, path):
        with urllib.request.urlopen(self.base + path, timeout=30) as r:
            return json.loads(r.read())

    def configure(self, setting):
        return self.call("/_ib/config?" + "&".join(f"{k}={v}" for k, v in setting.items()))

    def counted(self, measure):
        """Run ``measure()`` with the counters reset first; its row gets what the server served."""
        self.call("/_ib/reset")
        cpu0 = self.call("/_ib/stats")["cpu_s"]
        row = measure()
        served = self.call("/_ib/stats")
        row["served"] = {k: served.get(k) for k in ("requests", "gets", "heads", "lists", "bytes", "bytes_sent",
                                                    "slow", "cancelled")}
        row["served"]["cpu_s"] = served["cpu_s"] - cpu0  # the store's CPU during this run
        return row

    def close(self):
        self.proc.terminate()
        self.proc.wait()


def commands(args, ctx, store, url, which=None):
    """The engines over ``url`` (the server's), the decode limit over the store's files."""
    which = which or args.engine_list + ALWAYS
    k = knobs(args, epochs=1)
    cmds = registry.commands(ctx, [e for e in args.engine_list if e in which], url, k)
    if "ours" in cmds and args.extra:
        cmds["ours"] = cmds["ours"][:-1] + shlex.split(args.extra) + ["--json"]
    for bound in ALWAYS:
        if bound in which:
            cmds[bound] = registry.engine(bound).command(ctx, url if bound == registry.PROBE else store, k)
    return cmds


def parse_probe(stdout):
    """`describe --json` prints one pretty document, not a line."""
    try:
        return json.loads(stdout)
    except ValueError:
        return None


def run(session):
    a, rows = session.args, []
    which = session.runnable(a.engine_list + ALWAYS)
    server = Server(a.server, os.path.abspath(os.path.expanduser(a.stores)))
    try:
        for setting in a.settings.split(","):
            server.configure(SETTINGS[setting])
            for name, path in session.stores():
                warm_files(path)
                url = f"{server.base}/{name}.zarr"
                cmds = commands(a, session.ctx, path, url, which)
                for rnd in range(a.reps):
                    for slot, eng in enumerate(rotated(cmds, rnd)):
                        parse = parse_probe if eng == registry.PROBE else None
                        row = server.counted(lambda eng=eng, parse=parse, slot=slot: session.measure(
                            name, eng, rnd, slot, url, cmds[eng], setting=setting,
                            **({"parse": parse} if parse else {})))
                        rows.append(session.keep(row))
    finally:
        server.close()
    session.meta["ratios"] = {s: store_ratio(a.stores, s) for s in a.store_names}
    return rows


def store_ratio(stores, name):
    """Decoded ÷ stored bytes of a store (make_stores.py's marker)."""
    try:
        with open(os.path.join(os.path.expanduser(stores), name + ".zarr.done")) as f:
            return json.load(f).get("ratio")
    except (OSError, ValueError):
        return None


def config(args):
    return (f"{args.reps} rounds, engines rotated each round, one cold epoch per fresh process; batch "
            f"{args.batch_size}, block_chunks {args.block_chunks}, max_inflight {args.max_inflight}"
            + (f"; ours with {args.extra}" if args.extra else "") + ". Cells: median [min–max ×max/min].")


def cold(row):
    eps = ((row.get("result") or {}).get("epochs")) or []
    return eps[0] if eps else {}


def rate(text):
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if text.endswith(unit):
            return float(text[: -len(unit)]) * scale
    return float(text)


def cpu_cell(mine, by, engines):
    """Each engine's cold epoch CPU seconds per decoded GB (user + system, its own process) and
    that ÷ the decode alone's of the same rounds (`bench --decode-limit`, timed after the fetch):
    what reading over the network costs beyond decoding (#48)."""
    dec = med(stat([(r.get("result") or {}).get("decode_cpu_s_per_gb")
                    for r in mine if r["engine"] == registry.DECODE]))
    parts = []
    for e in engines:
        per_gb = med(stat([cold(r).get("cpu_s_per_gb") for r in by[e]]))
        parts.append("n/a" if per_gb is None else
                     f"{per_gb:.2f}" + (f" (×{per_gb / dec:.2f})" if dec else ""))
    return " / ".join(parts)


def markdown(meta, rows):
    """One table per setting: per store, each engine's cold MB/s, requests, first batch, peak
    RSS; ours ÷ insitubatch 0.2.0; the bound and our share of it; the probe's prediction."""
    opts = meta.get("options", {})
    ratios = meta.get("ratios") or {}
    present = {r["engine"] for r in rows}
    engines = [e for e in CHOICES if e in present]
    settings = [s for s in (opts.get("settings") or ",".join(SETTINGS)).split(",") if s in SETTINGS]
    stores = list(dict.fromkeys(r["store"] for r in rows))
    label = {"reference": "0.2.0"}
    out = header(meta, ["# Cloud-like store: insitubatch-rs vs insitubatch 0.2.0 (the reference implementation)",
                        ""])
    out.append("")
    for setting in settings:
        s = SETTINGS[setting]
        out += [f"#### {setting}: first byte {s['ttfb_ms']} ms, {s['conn_rate']}/s per connection, "
                f"{s['rate']}/s in all, tail {s['tail']} (share:ms)", ""]
        names = "/".join(label.get(e, e) for e in engines)
        head = ["store", "bound MB/s (net, decode)"] + [f"{label.get(e, e)} MB/s" for e in engines]
        head += [f"{e} ÷ 0.2.0" for e in engines if e != "reference"] + ["ours % of bound", "probe MB/s (÷ ours)"]
        head += [f"requests ({names})", f"first batch s ({names})", f"peak RSS GB ({names})", "server CPU s (ours)",
                 f"cold CPU-s/GB, × decode alone ({names})"]
        out += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for name in stores:
            mine = [r for r in rows if r.get("setting") == setting and r["store"] == name]
            if not mine:
                continue
            by = {e: [r for r in mine if r["engine"] == e and not r.get("error")] for e in engines}
            dec = stat([(r.get("result") or {}).get("decode_limit_mb_per_s")
                        for r in mine if r["engine"] == registry.DECODE])
            ratio_ = ratios.get(name) or store_ratio(opts.get("stores") or "", name)
            net = rate(s["rate"]) / 1e6 * ratio_ if ratio_ else None
            bound = min(x for x in (net, dec and dec["median"]) if x) if (net or dec) else None
            mbs = {e: stat([cold(r).get("mb_per_s") for r in by[e]]) for e in engines}
            ref = (mbs.get("reference") or {}).get("median")
            line = [name, f"{fmt(bound)} ({fmt(net)}, {fmt(dec and dec['median'])})"]
            line += [cell(mbs[e]) for e in engines]
            line += [fmt(mbs[e]["median"] / ref, "{:.2f}") if mbs[e] and ref else "n/a"
                     for e in engines if e != "reference"]
            ours = (mbs.get("ours") or {}).get("median")
            line.append(fmt(100 * ours / bound if ours and bound else None, "{:.0f}%"))
            pred = stat([(((r.get("result") or {}).get("probe") or {}).get("predicted") or {}).get("mb_per_s")
                         for r in mine if r["engine"] == registry.PROBE])
            line.append(f"{cell(pred)} ({fmt(pred['median'] / ours if pred and ours else None, '{:.2f}')})")
            line.append(" / ".join(cell(stat([(r.get("served") or {}).get("requests") for r in by[e]]))
                                   for e in engines))
            line.append(" / ".join(cell(stat([cold(r).get("ttfb_s") for r in by[e]]), "{:.2f}") for e in engines))
            line.append(" / ".join(cell(stat([(max((r.get("result") or {}).get("peak_rss_bytes") or 0,
                                                   r.get("tree_peak_rss_bytes") or 0) / 1e9) or None
                                              for r in by[e]]), "{:.2f}") for e in engines))
            line.append(cell(stat([(r.get("served") or {}).get("cpu_s") for r in by.get("ours", [])]), "{:.2f}"))
            line.append(cpu_cell(mine, by, engines))
            out.append("| " + " | ".join(line) + " |")
        out.append("")
    if meta.get("results"):
        out += [f"Rows: `{meta['results']}`.", ""]
    return "\n".join(out)
