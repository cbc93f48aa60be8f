"""patches: random 128 x 128 patches from the ERA5-shaped stores: insitubatch_rs's ``patch=``
against reading whole samples with insitubatch_rs and cropping in numpy, and against xbatcher +
a torch DataLoader cutting patches of the same size (bench/patch_engines.py says what each
engine does). Side by side in one run, each engine in a fresh process, --reps rounds in an
order rotated by one per round; medians with their spread.

    bench/run.py patches --stores DIR [--only c8s,shardsmall] [--reps 3] [--per-sample 4]
        [--xb-batches 12] [--cloud 50ms] [--engines rs-patch,rs-patch-gap0,rs-crop,xbatcher-nw0,xbatcher-nw2]

--cloud SETTING reads the stores through the cloud-like store on loopback (bench/run.py
cloud's server and settings) and adds the requests and bytes the server sent per run; the
xbatcher engines are left out there (they read local paths). Per run: rows (patches) per
second, and for the insitubatch_rs engines the stored bytes fetched beside the stored bytes of
the tiles the epoch's patches touch. Each store's files are read once before its rounds.
"""
import os
import statistics

import engines as registry
from measure import warm_files
from report import cell, header, stat

from . import cloud
from .common import knobs, rotated

NAME = "patches"
STORES = "c8s,shardsmall"
CHOICES = ["rs-patch", "rs-patch-gap0", "rs-crop", "xbatcher-nw0", "xbatcher-nw2"]
ENGINES = CHOICES
ALWAYS = []
REPS = 3
QUICK = {"reps": 1, "xb_batches": 2}


def add_args(ap):
    ap.add_argument("--per-sample", type=int, default=4, help="random patches per sample (K)")
    ap.add_argument("--xb-batches", type=int, default=None, help="the xbatcher engines stop after this many "
                    "batches (default 12)")
    ap.add_argument("--cloud", default=None, help="read through the cloud-like store with this setting ("
                    + ",".join(cloud.SETTINGS) + ")")
    ap.add_argument("--server", default=cloud.default_server(), help="the cloud-store binary (with --cloud)")


def check(args, error):
    if args.xb_batches is None:
        args.xb_batches = 12
    if args.cloud and args.cloud not in cloud.SETTINGS:
        error(f"unknown --cloud setting {args.cloud!r}; choose from {','.join(cloud.SETTINGS)}")
    if args.cloud:  # xbatcher reads local paths: it has no place on the cloud-like store
        args.engine_list = [e for e in args.engine_list if not e.startswith("xbatcher")]


def commands(args, ctx, store, url, which=None):
    which = which or args.engine_list
    k = knobs(args, per_sample=args.per_sample, xb_batches=args.xb_batches, store=store)
    return registry.commands(ctx, [e for e in args.engine_list if e in which], url, k)


def run(session):
    a, rows = session.args, []
    which = session.runnable(a.engine_list)
    server = None
    if a.cloud:
        server = cloud.Server(a.server, os.path.abspath(os.path.expanduser(a.stores)))
        server.configure(cloud.SETTINGS[a.cloud])
    try:
        for name, path in session.stores():
            warm_files(path)
            url = f"{server.base}/{name}.zarr" if server else "file://" + path
            cmds = commands(a, session.ctx, path, url, which)
            for rnd in range(a.reps):
                for slot, eng in enumerate(rotated(cmds, rnd)):
                    def one(eng=eng, slot=slot):
                        return session.measure(name, eng, rnd, slot, url, cmds[eng], cloud=a.cloud)
                    rows.append(session.keep(server.counted(one) if server else one()))
    finally:
        if server:
            server.close()
    return rows


def config(args):
    where = f"through the cloud-like store ({args.cloud})" if args.cloud else "stores in the page cache"
    return (f"{args.reps} rounds, engines rotated each round, each run a fresh process; {args.per_sample} random "
            f"128 x 128 patches per sample, batch 32 rows; xbatcher stopped after {args.xb_batches} batches; {where}")


def result(r):
    """The engine's row: bench/run.py keeps it under ``result``; patches.py's rows were flat."""
    res = r.get("result") if "result" in r else r
    if res and "requests" not in res and r.get("served"):
        res = dict(res, requests=r["served"]["requests"], served_bytes=r["served"]["bytes_sent"])
    return res or None


def markdown(meta, rows):
    L = header(meta, ["# Random 128 x 128 patches: insitubatch_rs vs cropping whole samples vs xbatcher", ""])
    L += ["", "| store | engine | rows/s median [min–max ×max/min] | × xbatcher-nw2 | fetched MB | touched-tile MB | "
          "fetched ÷ touched | requests | resident peak MB |",
          "|---|---|---|---|---|---|---|---|---|"]
    results = {}
    for r in rows:
        res = result(r)
        key = (r["store"], r["engine"])
        results.setdefault(key, [])
        if res and res.get("secs"):
            results[key].append(res)
        else:
            results.setdefault(("failed",) + key, []).append(r.get("error") or "no result")
    stores = list(dict.fromkeys(r["store"] for r in rows))
    engines = list(dict.fromkeys(r["engine"] for r in rows))
    for name in stores:
        base = results.get((name, "xbatcher-nw2"))
        base_rate = statistics.median(r["rows"] / r["secs"] for r in base) if base else None
        for e in engines:
            runs = results.get((name, e))
            if runs:
                L.append(_row(name, e, runs, base_rate))
            elif ("failed", name, e) in results:
                L.append(f"| {name} | {e} | n/a ({results[('failed', name, e)][0][:60].replace('|', '/')}) |"
                         + " |" * 6)
    if meta.get("results"):
        L += ["", f"Rows: `{meta['results']}`."]
    L.append("")
    return "\n".join(L)


def _row(name, e, runs, base_rate):
    """One engine's table row: medians over its runs."""
    def med(key, scale=1.0):
        values = [r[key] for r in runs if r.get(key) is not None]
        return statistics.median(values) / scale if values else None

    rates = stat([r["rows"] / r["secs"] for r in runs])
    rate = rates["median"]
    fetched, touched, requests = med("fetched", 1e6), med("touched", 1e6), med("requests")
    resident = med("resident_peak", 1e6)
    cells = [
        cell(rates),
        f"{rate / base_rate:.1f}×" if base_rate else "–",
        f"{fetched:.0f}" if fetched is not None else "–",
        f"{touched:.0f}" if touched is not None else "–",
        f"{fetched / touched:.2f}" if fetched is not None and touched else "–",
        f"{requests:.0f}" if requests is not None else "–",
        f"{resident:.0f}" if resident is not None else "–",
    ]
    return f"| {name} | {e} | " + " | ".join(cells) + " |"
