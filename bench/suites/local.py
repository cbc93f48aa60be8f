"""local: insitubatch-rs (the CLI and its Python binding) against insitubatch 0.2.0, the
reference implementation, on local page-cached stores, in one run, as medians of rotated
rounds.

    bench/run.py [local] --stores DIR [--only c1,c8] [--reps 3] [--epochs 3]
        [--engines ours,rs-python,reference] [--budget-bytes B] [--page-cache-fill GIB --ballast DIR]
        [--cli-b PATH] [--first-block-chunks N] [--samples N] [--out FILE.md]
    bench/run.py --quick        # 2-minute smoke: 48-sample c8 store, 3 rounds, 2 epochs

For each store DIR/<name>.zarr: its files are read once (into the page cache), then --reps
rounds; in each round the decode limit and every engine run once, each in a fresh process, in
an order rotated by one per round. Each run is --epochs epochs of one process: cold, warm1,
warm2, ...; --budget-bytes gives every engine the same residency budget (so the warm epochs
are served from the pool). --cli-b adds `ours-b` (a second CLI build, for an A/B of two builds:
the ×CLI column is B ÷ --cli); --first-block-chunks N adds `ours-fbN`.

Per run: each epoch's MB/s and TTFB, wall time, user and system CPU seconds of the child,
peak RSS = max(process-tree VmRSS polled every 50 ms, the engine's VmHWM), and MemFree /
MemAvailable / Cached at its start; each epoch's own CPU per decoded GB (user + system),
beside the decode alone's from the decode-limit run of the same round. --page-cache-fill GIB
reads files under --ballast before each round until the kernel's Cached is at least GIB (the
page cache holding most of RAM, a training machine's normal state). The report has per store and engine the median of each
metric with its spread, and the ratios of medians.
"""
import sys

import engines as registry
from measure import fill_page_cache, meminfo, warm_files
from report import (cell, decode_limits, fmt, group, med, ordered, ratio, shown_path, stat, warm_labels,
                    header)

from .common import knobs, rotated

NAME = "local"
STORES = "c1,c8,c8s,c40,shard"
CHOICES = ["ours", "rs-python", "reference"]
ENGINES = CHOICES
ALWAYS = [registry.DECODE]
VARIANTS = ["ours-b", "ours-fb"]  # ours with --cli-b, with --first-block-chunks
REPS = 3
QUICK = {"reps": 3, "epochs": 2}
GIB = 2 ** 30
ORDER = ["ours", "ours-b", "rs-python", "reference"]
LABEL = {"ours": "ours (CLI)", "ours-b": "ours, build B (CLI)", "rs-python": "rs-python",
         "reference": "insitubatch 0.2.0"}


def add_args(ap):
    ap.add_argument("--epochs", type=int, default=None, help="epochs per run: cold, warm1, ... (default 3)")
    ap.add_argument("--budget-bytes", type=int, default=None,
                    help="residency budget for every engine (default: each one's automatic budget)")
    ap.add_argument("--page-cache-fill", type=float, default=None, metavar="GIB",
                    help="before each round, read --ballast files until Cached ≥ GIB")
    ap.add_argument("--ballast", action="append", default=[], metavar="DIR",
                    help="files to read for --page-cache-fill (repeatable)")
    ap.add_argument("--cli-b", default=None, metavar="PATH",
                    help="a second CLI build, run as engine ours-b in the same rounds (an A/B of two builds: "
                    "the report's ×CLI column is B ÷ --cli)")
    ap.add_argument("--first-block-chunks", type=int, default=None, metavar="N",
                    help="also run the CLI with --first-block-chunks N (engine ours-fbN), in the same rounds")


def check(args, error):
    if args.epochs is None:
        args.epochs = 3
    if args.epochs < 1:
        error("--epochs must be at least 1")
    if args.page_cache_fill is not None and not args.ballast:
        error("--page-cache-fill needs --ballast DIR (files to read into the page cache)")
    if (args.cli_b or args.first_block_chunks) and "ours" not in args.engine_list:
        error("--cli-b and --first-block-chunks run beside the ours engine (its command with another CLI "
              "or one more option); add ours to --engines or drop them")


def names(args):
    """The engines of a round: the decode limit, the engines asked for, and ours' variants."""
    out = [registry.DECODE] + list(args.engine_list)
    if args.cli_b:
        out.append("ours-b")
    if args.first_block_chunks:
        out.append("ours-fb")
    return out


def commands(args, ctx, store, url, which=None):
    k = knobs(args, epochs=args.epochs, budget_bytes=args.budget_bytes)
    return registry.commands(ctx, which or names(args), url, k)


def fill(session):
    """--page-cache-fill before a round; notes it when the ballast ran out."""
    a = session.args
    if a.page_cache_fill is None:
        return
    target = int(a.page_cache_fill * GIB)
    cached, read = fill_page_cache(a.ballast, target)
    print(f"[local] page cache: Cached {cached / GIB:.1f} GiB after reading {read / GIB:.1f} GiB of ballast",
          file=sys.stderr)
    if cached < target:
        session.note(f"the ballast ran out: Cached reached {cached / GIB:.1f} GiB, not {a.page_cache_fill:g}")


def run(session):
    a, rows, warmed = session.args, [], []
    which = session.runnable(names(a))
    for name, path in session.stores():
        url = "file://" + path
        nbytes = warm_files(path)
        warmed.append(f"{name} {nbytes / 1e6:.0f} MB")
        print(f"[local] {name}: read {nbytes / 1e6:.0f} MB of store files into the page cache", file=sys.stderr)
        cmds = commands(a, session.ctx, name, url, which)
        for rnd in range(a.reps):
            fill(session)
            if a.page_cache_fill is not None:
                warm_files(path)  # the fill may have pushed the store's pages out
            for slot, eng in enumerate(rotated(cmds, rnd)):
                rows.append(session.keep(session.measure(name, eng, rnd, slot, url, cmds[eng])))
    session.meta["memory"] = memory_lines(a, rows, ", ".join(warmed) or "none")
    return rows


def memory_lines(args, rows, warmed):
    mem = meminfo()
    fill_txt = ("no page-cache fill" if args.page_cache_fill is None else
                f"before each round, files under {', '.join(args.ballast)} read until Cached ≥ "
                f"{args.page_cache_fill:g} GiB, then the store's files read again")
    starts = [r["mem_at_start"] for r in rows if r.get("mem_at_start")]

    def gib(key):
        st = stat([m.get(key) for m in starts])
        return "n/a" if st is None else f"{st['median'] / GIB:.1f} GiB [{st['min'] / GIB:.1f}–{st['max'] / GIB:.1f}]"

    return [f"MemTotal {mem['total'] / GIB:.1f} GiB; {fill_txt}; each store's files read once "
            f"into the page cache before its first round ({warmed})",
            f"at the start of the runs (median [min–max]): MemFree {gib('free')}, MemAvailable "
            f"{gib('available')}, Cached {gib('cached')}"]


def config(args):
    engs = [registry.DECODE] + args.engine_list + (["ours-b"] if args.cli_b else []) + (
        [f"ours-fb{args.first_block_chunks}"] if args.first_block_chunks else [])
    budget = ("automatic (each engine its own)" if not args.budget_bytes
              else f"{args.budget_bytes} bytes (all engines)")
    return (f"{args.reps} rounds per store, engines in a rotated order each round ({', '.join(engs)}), each "
            f"run a fresh process{f'; ours-b is {shown_path(args.cli_b)}' if args.cli_b else ''}; batch "
            f"{args.batch_size}, block_chunks {args.block_chunks}, max_inflight {args.max_inflight}, epochs "
            f"{args.epochs} (cold + {args.epochs - 1} warm), residency budget {budget}, var `{args.var}`, "
            f"shuffle on, whole array as train split, local file:// stores under {shown_path(args.stores)}")


def cpu_table(agg, dec, kinds):
    """CPU seconds per decoded GB, each epoch's own (user + system, every thread of the
    engine's process), beside the decode alone of the same bytes in the same rounds (the CLI's
    `bench --decode-limit`, timed after every chunk is fetched): what the engine spends beyond
    the work no loader can avoid (#48). Empty when no engine reported it."""
    if not any(g.get(f"{k}_cpu_gb") for engines in agg.values() for g in engines.values() for k in kinds):
        return []
    L = ["", "## CPU per decoded GB", "",
         "CPU-s/GB: the epoch's own user + system CPU seconds (every thread of the engine's process, "
         "not a DataLoader's workers) per 1e9 decoded bytes; sys: the system part; × decode: cold "
         "CPU-s/GB ÷ the decode alone's (medians of the same rounds).", "",
         "| store | engine | " + " | ".join(f"{k} CPU-s/GB | {k} sys" for k in kinds) + " | × decode (cold) |",
         "|---|---|" + "--:|--:|" * len(kinds) + "--:|"]
    for store, engines in agg.items():
        dl = (dec.get(store) or {}).get("cpu_gb")
        L.append(f"| {store} | decode alone | {cell(dl, '{:.2f}')} |" + " |" * (2 * len(kinds) - 1) + " 1.00 |"
                 if dl else f"| {store} | decode alone | n/a |" + " |" * (2 * len(kinds)))
        for eng in ordered(engines, ORDER):
            g = engines[eng]
            if not g["ok"] or not g.get("cold_cpu_gb"):
                continue
            L.append("| " + " | ".join(
                [store, LABEL.get(eng, eng)]
                + [c for k in kinds for c in (cell(g.get(f"{k}_cpu_gb"), "{:.2f}"), cell(g.get(f"{k}_sys_gb"), "{:.2f}"))]
                + [fmt(ratio(med(g.get("cold_cpu_gb")), med(dl)), "{:.2f}", "—")]) + " |")
    return L


def markdown(meta, rows):
    """meta: command, date, machine, config, memory (lines), notes (lines), results (path),
    plot (bool). Returns the report's text."""
    agg, dec = group(rows), decode_limits(rows)
    kinds = ["cold"] + warm_labels(agg)
    L = header(meta, ["# Benchmarks: insitubatch-rs (CLI and Python) vs insitubatch 0.2.0 (the reference "
                      "implementation)", ""])
    L += ["- cells are `median [min–max ×max/min]` over the rounds; MB = 1e6 decoded bytes; "
          "cold = epoch 0, warm1/warm2 = epochs 1/2 of the same process (served from its pool); "
          "TTFB and limiting stage are of the cold epoch; peak RSS = max(process-tree VmRSS polled "
          "every 50 ms, engine's VmHWM); user/sys = CPU seconds of the whole run (open included).",
          "",
          "## Medians and spread", "",
          "| store | engine | runs | " + " | ".join(f"{k} MB/s" for k in kinds)
          + " | TTFB s | peak RSS GB | user CPU s | sys CPU s | wall s | limiting stage (cold / warm1) |",
          "|---|---|--:|" + "--:|" * len(kinds) + "--:|--:|--:|--:|--:|---|"]
    for store, engines in agg.items():
        for eng in ordered(engines, ORDER):
            g = engines[eng]
            runs = f"{g['ok']}/{g['runs']}"
            if not g["ok"]:
                why = (g["failed"][0] or "failed")[:70].replace("|", "/")
                L.append(f"| {store} | {LABEL.get(eng, eng)} | {runs} | n/a ({why}) |" + " |" * (len(kinds) + 5))
                continue
            L.append("| " + " | ".join(
                [store, LABEL.get(eng, eng), runs]
                + [cell(g.get(f"{k}_mbs")) for k in kinds]
                + [cell(g.get("ttfb"), "{:.2f}"), cell(g.get("rss"), "{:.2f}", 1e-9),
                   cell(g.get("user_s"), "{:.2f}"), cell(g.get("sys_s"), "{:.2f}"),
                   cell(g.get("wall_s"), "{:.1f}"),
                   f"{g.get('cold_stage') or '?'} / {g.get('warm1_stage') or '?'}"]) + " |")
    L += ["", "## Ratios of medians", "",
          "×0.2.0: this engine's median ÷ insitubatch 0.2.0's (TTFB and RSS: lower is better); ×CLI: "
          "÷ our CLI's; % decode limit: cold median ÷ the median decode limit of the same run; "
          "est/RSS: the `describe()` estimate ÷ the measured peak (median).", "",
          "| store | engine | " + " | ".join(f"×0.2.0 {k}" for k in kinds)
          + " | ×0.2.0 TTFB | ×0.2.0 RSS | ×CLI cold | ×CLI warm1 | % decode limit | est/RSS |",
          "|---|---|" + "--:|" * len(kinds) + "--:|--:|--:|--:|--:|--:|"]
    for store, engines in agg.items():
        ref, cli = engines.get("reference"), engines.get("ours")
        dl = med((dec.get(store) or {}).get("stat"))
        for eng in ordered(engines, ORDER):
            g = engines[eng]
            if not g["ok"]:
                continue

            def vs(base, key, _g=g, _eng=eng, skip=None):
                if base is None or _eng == skip or not base["ok"]:
                    return "—"
                return fmt(ratio(med(_g.get(key)), med(base.get(key))), "{:.2f}")

            est = med(g.get("est")) if eng != "reference" else None
            L.append("| " + " | ".join(
                [store, LABEL.get(eng, eng)]
                + [vs(ref, f"{k}_mbs", skip="reference") for k in kinds]
                + [vs(ref, "ttfb", skip="reference"), vs(ref, "rss", skip="reference"),
                   vs(cli, "cold_mbs", skip="ours"), vs(cli, "warm1_mbs", skip="ours"),
                   fmt(100 * ratio(med(g.get("cold_mbs")), dl) if dl else None, "{:.0f}%"),
                   fmt(ratio(est, med(g.get("rss"))) if est else None, "{:.2f}", "—")]) + " |")
    L += cpu_table(agg, dec, kinds)
    L += ["", "## Decode limit (MB/s of decoded output, all cores; measured in every round)", ""]
    for store, d in dec.items():
        src = d["source"] or "insitubatch-rs CLI"
        L.append(f"- {store}: {cell(d['stat'])} MB/s, {d['threads']} threads ({src})"
                 if d["stat"] else f"- {store}: n/a")
    if meta.get("plot"):
        L += ["", "![Decoded MB/s per engine: medians with min–max bars, cold and warm epochs, "
              f"with the decode limit]({meta['plot']}benchmarks.png)",
              f"(`bench/plot.py --rows {meta.get('results')}` redraws it from the rows.)"]
    if meta.get("results"):
        L += ["", f"Rows: `{meta['results']}`."]
    L.append("")
    return "\n".join(L)
