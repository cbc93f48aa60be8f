"""workers: is splitting a rank's share among torch DataLoader workers worth it?
(docs/distributed.md)

    bench/run.py workers --stores DIR [--only c8] [--epochs 4] [--reps 1]

bench/dataloader_workers.py (under --python, with torch) measures decoded MB/s of the train
view over the same store and seed: `num_workers=0` (`DataLoader(as_torch(ds.train))`, the
engine's own threads decoding in this process) and `num_workers=1, 2` (each worker opens its
own dataset as rank `worker_id` of N, batches travelling to the main process through torch's
worker queues). Every dataset's budget is its residency floor, so each epoch decodes again.
"""
import json

import engines as registry
from report import header, stat

from .common import knobs

NAME = "workers"
STORES = "c8"
CHOICES = []
ENGINES = []
ALWAYS = ["torch-workers"]
REPS = 1
QUICK = {"epochs": 2}


def add_args(ap):
    ap.add_argument("--epochs", type=int, default=None, help="epochs per configuration (default 4)")


def check(args, error):
    args.epochs = args.epochs or 4
    if args.epochs < 2:
        error("--epochs must be at least 2 (the warm figure is over the epochs after the first)")


def commands(args, ctx, store, url, which=None):
    return {"torch-workers": registry.engine("torch-workers").command(ctx, url, knobs(args, epochs=args.epochs))}


def parse(stdout):
    """Every JSON line: one per configuration, then the torch version."""
    lines = [json.loads(ln) for ln in (stdout or "").splitlines() if ln.strip().startswith("{")]
    configs = [ln for ln in lines if "num_workers" in ln]
    return {"configs": configs, "torch": next((ln for ln in lines if "torch" in ln), {})} if configs else None


def run(session):
    a, rows = session.args, []
    if not session.runnable(ALWAYS):
        return rows
    for name, path in session.stores():
        url = "file://" + path
        cmd = commands(a, session.ctx, path, url)["torch-workers"]
        for rnd in range(a.reps):
            rows.append(session.keep(session.measure(name, "torch-workers", rnd, 0, url, cmd, parse=parse)))
    return rows


def config(args):
    return f"{args.epochs} epochs per configuration, {args.reps} round(s), budget at the residency floor"


def markdown(meta, rows):
    L = header(meta, ["# DataLoader workers, each a rank, against one process", ""])
    L += ["", "| store | num_workers | cold MB/s | warm MB/s (mean of the later epochs; median [min–max] over rounds) |",
          "|---|--:|--:|--:|"]
    for store in dict.fromkeys(r["store"] for r in rows):
        by = {}
        for r in rows:
            if r["store"] == store and r.get("result"):
                for c in r["result"]["configs"]:
                    by.setdefault(c["num_workers"], []).append(c)
        for n, cs in sorted(by.items()):
            cold = stat([c["epochs"][0]["mb_per_s"] for c in cs])
            warm = stat([c["warm_mb_per_s"] for c in cs])
            L.append(f"| {store} | {n} | {cold['median']:.0f} | {warm['median']:.0f} [{warm['min']:.0f}–{warm['max']:.0f}] |")
        for r in rows:
            if r["store"] == store and not r.get("result"):
                L.append(f"| {store} | n/a ({(r.get('error') or '?')[:60]}) | | |")
    if meta.get("results"):
        L += ["", f"Rows: `{meta['results']}`."]
    L.append("")
    return "\n".join(L)
