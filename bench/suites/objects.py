"""objects: store objects against the URL: the same local store read by insitubatch_rs through
its URL (`rs-python`), an obstore LocalStore (`rs-obstore`) and a zarr-python LocalStore
(`rs-zarrstore`), and by insitubatch 0.2.0 (the reference implementation) through its obstore
store (`reference-py`) and the zarr LocalStore (`reference-zarrstore`).

    bench/run.py objects --stores DIR [--only c8,c1] [--reps 5] [--epochs 1]

Each engine runs in a fresh process (bench/py_engines.py), --reps times, in a rotated order
each round. The table gives the median cold MB/s and its spread (min-max), the median over
rounds of each run's cold MB/s divided by the URL run's of the same round (paired, so drift
between rounds cancels), the run's user CPU seconds (all epochs, open included) against the
URL's, and its system CPU seconds. User time is the steadiest measure of the work a loader
does on a shared machine. Warm epochs are served from the engine's pool (they read nothing),
so the default is one cold epoch.
"""
import statistics

import engines as registry
from report import epoch_of, header

from .common import knobs, rotated

NAME = "objects"
STORES = "c8,c1"
CHOICES = ["rs-python", "rs-obstore", "rs-zarrstore", "reference-py", "reference-zarrstore"]
ENGINES = CHOICES
ALWAYS = []
REPS = 5
QUICK = {"reps": 1}
KINDS = {"rs-python": "URL string", "rs-obstore": "obstore LocalStore", "rs-zarrstore": "zarr LocalStore",
         "reference-py": "obstore_store (zarr ObjectStore)", "reference-zarrstore": "zarr LocalStore"}


def add_args(ap):
    ap.add_argument("--epochs", type=int, default=1)


def check(args, error):
    if "rs-python" not in args.engine_list:
        error("the objects suite compares every engine with rs-python (the URL): keep it in --engines")


def commands(args, ctx, store, url, which=None):
    k = knobs(args, epochs=args.epochs)
    return registry.commands(ctx, [e for e in args.engine_list if which is None or e in which], url, k)


def run(session):
    a, rows = session.args, []
    which = session.runnable(a.engine_list)
    if "rs-python" not in which:
        session.note("rs-python cannot run, so there is nothing to compare the store objects with")
        return rows
    for name, path in session.stores():
        url = "file://" + path
        cmds = commands(a, session.ctx, path, url, which)
        for rnd in range(a.reps):
            for slot, eng in enumerate(rotated(cmds, rnd)):
                rows.append(session.keep(session.measure(name, eng, rnd, slot, url, cmds[eng])))
    return rows


def config(args):
    return (f"{args.reps} runs per engine in rotated order; each run: 1 cold + {args.epochs - 1} warm epoch(s), "
            f"batch {args.batch_size}, block_chunks {args.block_chunks}, max_inflight {args.max_inflight}, whole "
            "array as train, shuffle on")


def cold_mbs(row):
    e = epoch_of(row.get("result"), "cold")
    return e and e.get("mb_per_s")


def markdown(meta, rows):
    L = header(meta, ["# Store objects against the URL", ""])
    L += ["", "| store | engine | store object | cold MB/s (median) | cold min–max | ÷ URL cold (paired median) "
          "| user CPU s (median) | ÷ URL user CPU | system CPU s (median) |",
          "|---|---|---|--:|--:|--:|--:|--:|--:|"]
    for store in dict.fromkeys(r["store"] for r in rows):
        mine = [r for r in rows if r["store"] == store and cold_mbs(r)]
        url_by_round = {r["round"]: cold_mbs(r) for r in mine if r["engine"] == "rs-python"}
        base_user = [r["user_s"] for r in mine if r["engine"] == "rs-python" and r.get("user_s") is not None]
        base_user = statistics.median(base_user) if base_user else None
        for eng in dict.fromkeys(r["engine"] for r in rows if r["store"] == store):
            runs = [r for r in mine if r["engine"] == eng]
            if not runs:
                why = next((r.get("error") for r in rows if r["store"] == store and r["engine"] == eng), "failed")
                L.append(f"| {store} | {eng} | {KINDS.get(eng, '?')} | n/a ({(why or 'failed')[:60]}) | | | | | |")
                continue
            colds = [cold_mbs(r) for r in runs]
            paired = [cold_mbs(r) / url_by_round[r["round"]] for r in runs if url_by_round.get(r["round"])]
            user = statistics.median(r["user_s"] for r in runs)
            L.append(f"| {store} | {eng} | {KINDS.get(eng, '?')} | {statistics.median(colds):.0f} "
                     f"| {min(colds):.0f}–{max(colds):.0f} | "
                     + (f"{statistics.median(paired):.2f}" if paired else "n/a")
                     + f" | {user:.2f} | " + (f"{user / base_user:.3f}" if base_user else "n/a")
                     + f" | {statistics.median(r['sys_s'] for r in runs):.2f} |")
    if meta.get("results"):
        L += ["", f"Rows: `{meta['results']}`."]
    L.append("")
    return "\n".join(L)
