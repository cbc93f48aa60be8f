"""python: insitubatch_rs from Python (numpy / torch) and peer Python loaders (xbatcher + torch
DataLoader, plain zarr-python, tensorstore) next to the CLI and insitubatch 0.2.0 (the
reference implementation), on the same local stores, in one run.

    bench/run.py python --stores DIR [--only c8,c1] [--compute-ms 20] [--max-batches 10]
        [--epochs 2] [--reps 1] [--engines ours,reference,rs-python,...] [--out FILE.md]

Run the Python engines with the bench venv (--python: insitubatch_rs release wheel +
bench/requirements-peers.txt); insitubatch 0.2.0 runs under --reference-python. Per store and
round:
- throughput runs, --epochs (1 cold + warm), no compute step: every engine; the xbatcher
  engines stop each epoch after --max-batches batches (their MB/s is over those);
- with --compute-ms M > 0, stall runs: one cold epoch per Python engine (and `reference-py`,
  insitubatch 0.2.0 in-process, for `reference`) sleeping M ms after each batch; stall % =
  time waiting for the loader ÷ epoch wall time. The CLI has no compute step: its stall is n/a.
Peak RSS (throughput run) = max(process-tree VmRSS polled every 50 ms, the engine's VmHWM).
"""
import engines as registry
from report import cell, epoch_of, fmt, header, ordered, stat

from .common import knobs, rotated

NAME = "python"
STORES = "c8,c1"
CHOICES = ["ours", "reference", "rs-python", "rs-torch", "zarr-loop", "tensorstore", "xbatcher-torch-nw0",
           "xbatcher-torch-nw2"]
ENGINES = CHOICES
ALWAYS = []
VARIANTS = ["reference-py"]  # the stall run of reference
REPS = 1
QUICK = {"max_batches": 2}
CAPPED = {"xbatcher-torch-nw0", "xbatcher-torch-nw2"}
LABEL = {"ours": "ours (CLI)", "reference": "insitubatch 0.2.0"}
STALL = "stall:"  # key prefix of a stall run's command


def add_args(ap):
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--compute-ms", type=float, default=20.0,
                    help="the stall runs' sleep per batch (a GPU step); 0: no stall runs")
    ap.add_argument("--max-batches", type=int, default=None,
                    help="the xbatcher engines stop each epoch here (default 10)")


def check(args, error):
    if args.max_batches is None:
        args.max_batches = 10
    if args.epochs < 1:
        error("--epochs must be at least 1")


def stall_engine(name):
    """The engine of a stall run (in-process, honouring --compute-ms), or None (the CLI)."""
    if name == "reference":
        return "reference-py"
    return name if registry.engine(name).runner == "py" else None


def stall_engines(args):
    return [stall_engine(n) for n in args.engine_list if stall_engine(n)] if args.compute_ms > 0 else []


def commands(args, ctx, store, url, which=None):
    """{engine: argv} of the throughput runs and {stall:engine: argv} of the stall runs, of the
    engines in ``which`` (default: all asked for)."""
    which = set(args.engine_list + stall_engines(args) if which is None else which)
    out = {}
    for name in args.engine_list:
        cap = args.max_batches if name in CAPPED else 0
        if name in which:
            out.update(registry.commands(ctx, [name], url, knobs(args, epochs=args.epochs, max_batches=cap)))
    for name in args.engine_list:
        st = stall_engine(name) if args.compute_ms > 0 else None
        if st in which:
            cap = args.max_batches if name in CAPPED else 0
            k = knobs(args, epochs=1, compute_ms=args.compute_ms, max_batches=cap)
            out[STALL + st] = registry.engine(st).command(ctx, url, k)
    return out


def run(session):
    a, rows = session.args, []
    which = session.runnable(a.engine_list + [e for e in stall_engines(a) if e not in a.engine_list])
    for name, path in session.stores():
        url = "file://" + path
        cmds = commands(a, session.ctx, name, url, which)
        thr = [k for k in cmds if not k.startswith(STALL)]
        stl = [k for k in cmds if k.startswith(STALL)]
        for rnd in range(a.reps):
            for slot, key in enumerate(rotated(thr, rnd) + rotated(stl, rnd)):
                kind = "stall" if key.startswith(STALL) else "throughput"
                eng = key[len(STALL):] if kind == "stall" else key
                rows.append(session.keep(session.measure(name, eng, rnd, slot, url, cmds[key], kind=kind)))
    return rows


def config(args):
    return (f"{args.reps} round(s), engines in a rotated order each round, each run a fresh process; batch "
            f"{args.batch_size}, shuffle on, epochs {args.epochs} (1 cold + warm), var `{args.var}`, whole "
            f"array as train split, local file:// stores (page-cached); ours, rs-python and insitubatch 0.2.0: "
            f"block_chunks {args.block_chunks}, max_inflight {args.max_inflight}; xbatcher engines stop each "
            f"epoch after {args.max_batches} batches (MB/s over those); every other engine reads the full epoch")


def summary(row):
    res = row.get("result") if row else None
    if not res or "epochs" not in res:
        return None
    cold, warm = epoch_of(res, "cold"), epoch_of(res, "warm")
    own = res.get("peak_rss_bytes") or 0
    return {"cold": cold and cold["mb_per_s"], "warm": warm and warm["mb_per_s"],
            "ttfb": cold and cold["ttfb_s"], "rss": max(own, row.get("tree_peak_rss_bytes") or 0) / 1e9,
            "batches": cold and cold.get("batches"), "stage": cold and cold.get("limiting_stage")}


def group(rows):
    """{store: {engine: {"thr": [summaries], "failed": [why], "stall": [stall %]}}}, first-seen order."""
    out = {}
    for r in rows:
        kind = r.get("kind", "throughput")
        eng = r["engine"]
        if kind == "stall" and eng == "reference-py":
            eng = "reference"
        g = out.setdefault(r["store"], {}).setdefault(eng, {"thr": [], "failed": [], "stall": []})
        if kind == "stall":
            cold = epoch_of(r.get("result"), "cold")
            g["stall"].append(cold.get("stall_pct") if cold else None)
            continue
        s = summary(r)
        if s:
            g["thr"].append(s)
        else:
            g["failed"].append((r.get("result") or {}).get("skipped") or r.get("error") or "failed")
    return out


def markdown(meta, rows):
    opts = meta.get("options", {})
    by_store = group(rows)
    L = header(meta, ["# Benchmarks from Python: insitubatch_rs vs Python peers, the Rust CLI and "
                      "insitubatch 0.2.0 (the reference implementation)", ""])
    L += ["- MB = 1e6 decoded bytes; cells are `median [min–max]` over the rounds (one run: the value); TTFB "
          "is of the cold epoch; peak RSS = max(process-tree VmRSS polled every 50 ms, engine's VmHWM) of the "
          "throughput run; stall % = share of a cold epoch's wall time spent waiting for the next batch with a "
          f"{opts.get('compute_ms', 20):g} ms sleep per batch (a GPU step), measured in a separate run "
          "(insitubatch 0.2.0's via `reference-py`); ×CLI / ×0.2.0 = this row's median MB/s ÷ theirs (same "
          "epoch kind).",
          "- noise: on 2 cores single runs of one engine differ by up to ~20%, so compare rows within one "
          "store, not across runs.",
          "",
          "| store | engine | cold MB/s | warm MB/s | TTFB s | peak RSS GB | stall % | ×CLI cold | "
          "×CLI warm | ×0.2.0 cold | ×0.2.0 warm | batches/epoch |",
          "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|"]

    def st(g, key):
        return stat([s[key] for s in g["thr"]]) if g else None

    def m(g, key):
        s = st(g, key)
        return s and s["median"]

    for store, engines in by_store.items():
        cli, ref = engines.get("ours"), engines.get("reference")
        for name in ordered(engines, ["ours", "reference"] + CHOICES):
            g = engines[name]
            label = LABEL.get(name, name)
            if not g["thr"]:
                if not g["failed"]:
                    continue  # a stall run alone
                L.append(f"| {store} | {label} | n/a ({g['failed'][0][:60].replace('|', '/')}) |" + "  |" * 9)
                continue

            def rr(base, k, skip, _g=g):
                if base is None or skip or not m(base, k):
                    return "—"
                return fmt(m(_g, k) / m(base, k), "{:.2f}", "n/a")

            batches = m(g, "batches")
            L.append("| " + " | ".join([
                store, label, cell(st(g, "cold")), cell(st(g, "warm")), cell(st(g, "ttfb"), "{:.2f}"),
                cell(st(g, "rss"), "{:.2f}"), cell(stat(g["stall"]), "{:.0f}%") if stat(g["stall"]) else "n/a",
                rr(cli, "cold", name == "ours"), rr(cli, "warm", name == "ours"),
                rr(ref, "cold", name == "reference"), rr(ref, "warm", name == "reference"),
                fmt(batches) if batches else "all",
            ]) + " |")
    parts = []
    for store, engines in by_store.items():
        p, c = engines.get("rs-python"), engines.get("ours")
        if p and c and m(c, "cold") and m(c, "warm") and m(p, "cold") and m(p, "warm"):
            parts.append(f"{store}: cold {m(p, 'cold') / m(c, 'cold'):.2f}×, warm {m(p, 'warm') / m(c, 'warm'):.2f}×")
    L += ["", "Python binding (`rs-python`) ÷ Rust CLI: " + ("; ".join(parts) or "n/a")
          + " (target: within 5%, i.e. ≥ 0.95×).", ""]
    if meta.get("plot"):
        L += [f"![Decoded MB/s per Python loader and store, cold and warm, with stall %]({meta['plot']}benchmarks-python.png)",
              f"(`bench/plot.py --python-rows {meta.get('results')}` redraws it from the rows.)", ""]
    if meta.get("results"):
        L += [f"Rows: `{meta['results']}`.", ""]
    return "\n".join(L)
