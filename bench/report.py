"""From bench/run.py's raw rows to the markdown report: per store and engine the median of
each metric over the rounds with its spread, ratios of medians against the anchor and the
CLI, and the share of the decode limit measured in the same run. Pure functions of the
rows (bench/test_run.py feeds them fabricated ones).

A run row: {store, engine, round, result, error, wall_s, user_s, sys_s,
tree_peak_rss_bytes, mem_at_start}; ``result`` is the engine's JSON (`insitubatch bench
--json`, bench/anchor_bench.py, bench/py_engines.py), whose ``epochs`` list is in order: the
first is the cold epoch, the next ones "warm1", "warm2", ... A decode-limit row has engine
``decode_limit`` and a result with ``decode_limit_mb_per_s``.
"""
import os
import re
import shlex
import statistics

ENGINE_ORDER = ["ours", "ours-b", "rs-python", "anchor"]
ENGINE_LABEL = {"ours": "ours (CLI)", "ours-b": "ours, build B (CLI)", "rs-python": "rs-python",
                "anchor": "anchor"}
DECODE = "decode_limit"

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def command_line(script, args):
    """``python3 SCRIPT ARGS`` as a reader reruns it on another machine: the script relative
    to the repository, and in every argument this machine's cache folder, repository and home
    written as ``$INSITUBATCH_CACHE/``, relative and ``$HOME/`` (docs pages never print a
    machine's absolute paths; docs-tests checks them)."""
    cache = os.environ.get("INSITUBATCH_CACHE") or os.path.expanduser("~/.cache/insitubatch")
    home = os.path.expanduser("~")
    swaps = [(os.path.abspath(cache) + "/", "$INSITUBATCH_CACHE/"), (REPO + "/", ""), (home + "/", "$HOME/")]

    def portable(arg):
        for prefix, name in swaps:
            arg = arg.replace(prefix, name)
        # Unquoted where it is safe, so $INSITUBATCH_CACHE and $HOME still expand.
        return arg if re.fullmatch(r"[\w@%+=:,./$-]+", arg) else shlex.quote(arg)

    script = os.path.relpath(os.path.abspath(script), REPO)
    return " ".join(["python3", script] + [portable(a) for a in args])


# ------------------------------------------------------------ small formatting helpers
def fmt(v, spec="{:.0f}", na="n/a"):
    return na if v is None else spec.format(v)


def gb(b):
    return None if not b else b / 1e9


def ratio(a, b):
    return None if a is None or b in (None, 0) else a / b


def epoch_label(k):
    """The k-th epoch of a run (0-based): "cold", then "warm1", "warm2", ..."""
    return "cold" if k == 0 else f"warm{k}"


def epoch_of(res, kind):
    """The epoch row of `kind` ("cold", "warm" = the first warm one, or "warmK")."""
    eps = (res or {}).get("epochs") or []
    if kind == "warm":
        kind = "warm1"
    for k, e in enumerate(eps):
        if epoch_label(k) == kind:
            return e
    return None


# ------------------------------------------------------------ per run, per group
def run_metrics(row):
    """The metrics of one run row, or None for a failed one."""
    res = row.get("result")
    if not res or not res.get("epochs"):
        return None
    m = {}
    for k, e in enumerate(res["epochs"]):
        lab = epoch_label(k)
        m[f"{lab}_mbs"] = e.get("mb_per_s")
        m[f"{lab}_stage"] = e.get("limiting_stage") or None
    cold = res["epochs"][0]
    m["ttfb"] = cold.get("ttfb_s")
    own = res.get("peak_rss_bytes") or 0
    m["rss"] = max(own, row.get("tree_peak_rss_bytes") or 0) or None
    m["est"] = res.get("describe_estimated_peak_bytes") or None
    for k in ("user_s", "sys_s", "wall_s"):
        m[k] = row.get(k)
    return m


def stat(values):
    """{median, min, max, spread (max/min), n} over the values that are not None."""
    vs = [v for v in values if v is not None]
    if not vs:
        return None
    lo, hi = min(vs), max(vs)
    return {"median": statistics.median(vs), "min": lo, "max": hi,
            "spread": hi / lo if lo > 0 else None, "n": len(vs)}


def med(st):
    return None if st is None else st["median"]


def most_common(values):
    vs = [v for v in values if v]
    return max(set(vs), key=vs.count) if vs else None


def group(rows):
    """{store: {engine: {"runs": n, "failed": [errors], metric: stat, ..., "stage_cold": str}}},
    stores and engines in first-seen order."""
    out = {}
    for r in rows:
        if r.get("engine") == DECODE:
            continue
        out.setdefault(r["store"], {}).setdefault(r["engine"], []).append(r)
    agg = {}
    for store, engines in out.items():
        agg[store] = {}
        for eng, rs in engines.items():
            ms = [run_metrics(r) for r in rs]
            ok = [m for m in ms if m]
            g = {"runs": len(rs), "ok": len(ok),
                 "failed": [r.get("error") or "no result" for r, m in zip(rs, ms) if not m]}
            keys = sorted({k for m in ok for k in m})
            for k in keys:
                if k.endswith("_stage"):
                    g[k] = most_common([m.get(k) for m in ok])
                else:
                    g[k] = stat([m.get(k) for m in ok])
            agg[store][eng] = g
    return agg


def decode_limits(rows):
    """{store: {"stat": stat of MB/s over rounds, "threads": .., "source": ..}}."""
    out = {}
    for r in rows:
        if r.get("engine") != DECODE:
            continue
        d = out.setdefault(r["store"], {"values": [], "threads": None, "source": None})
        res = r.get("result") or {}
        d["values"].append(res.get("decode_limit_mb_per_s"))
        d["threads"] = d["threads"] or res.get("threads")
        d["source"] = d["source"] or res.get("source")
    return {s: {"stat": stat(d["values"]), "threads": d["threads"], "source": d["source"]}
            for s, d in out.items()}


def warm_labels(agg):
    """warm1, warm2, ... present in any group, in order."""
    n = 0
    for engines in agg.values():
        for g in engines.values():
            for k in g:
                if k.startswith("warm") and k.endswith("_mbs"):
                    n = max(n, int(k[4:-4]))
    return [f"warm{i}" for i in range(1, n + 1)]


def cell(st, spec="{:.0f}", scale=1.0):
    """`median [min–max ×max/min]`; just the value for a single run; n/a for none."""
    if st is None:
        return "n/a"
    f = lambda v: spec.format(v * scale)  # noqa: E731
    if st["n"] == 1:
        return f(st["median"])
    sp = "" if st["spread"] is None else f" ×{st['spread']:.2f}"
    return f"{f(st['median'])} [{f(st['min'])}–{f(st['max'])}{sp}]"


def ordered(engines):
    return [e for e in ENGINE_ORDER if e in engines] + [e for e in engines if e not in ENGINE_ORDER]


# ------------------------------------------------------------ the report
def markdown(meta, rows):
    """meta: command, date, machine, config, memory (lines), notes (lines), results (path),
    plot (bool). Returns the report's text."""
    agg, dec = group(rows), decode_limits(rows)
    warms = warm_labels(agg)
    kinds = ["cold"] + warms
    L = ["# Benchmarks: insitubatch-rs (CLI and Python) vs insitubatch 0.2.0 (Python anchor)", "",
         f"- command (from the repo root): `{meta['command']}`",
         f"- date: {meta['date']}",
         f"- machine: {meta['machine']}",
         f"- config: {meta['config']}"]
    L += [f"- memory: {line}" for line in meta.get("memory", [])]
    L += [f"- note: {line}" for line in meta.get("notes", [])]
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
        for eng in ordered(engines):
            g = engines[eng]
            runs = f"{g['ok']}/{g['runs']}"
            if not g["ok"]:
                why = (g["failed"][0] or "failed")[:70].replace("|", "/")
                L.append(f"| {store} | {ENGINE_LABEL.get(eng, eng)} | {runs} | n/a ({why}) |"
                         + " |" * (len(kinds) + 5))
                continue
            L.append("| " + " | ".join(
                [store, ENGINE_LABEL.get(eng, eng), runs]
                + [cell(g.get(f"{k}_mbs")) for k in kinds]
                + [cell(g.get("ttfb"), "{:.2f}"), cell(g.get("rss"), "{:.2f}", 1e-9),
                   cell(g.get("user_s"), "{:.2f}"), cell(g.get("sys_s"), "{:.2f}"),
                   cell(g.get("wall_s"), "{:.1f}"),
                   f"{g.get('cold_stage') or '?'} / {g.get('warm1_stage') or '?'}"]) + " |")
    L += ["", "## Ratios of medians", "",
          "×anchor: this engine's median ÷ the anchor's (TTFB and RSS: lower is better); ×CLI: "
          "÷ our CLI's; % decode limit: cold median ÷ the median decode limit of the same run; "
          "est/RSS: the `describe()` estimate ÷ the measured peak (median).", "",
          "| store | engine | " + " | ".join(f"×anchor {k}" for k in kinds)
          + " | ×anchor TTFB | ×anchor RSS | ×CLI cold | ×CLI warm1 | % decode limit | est/RSS |",
          "|---|---|" + "--:|" * len(kinds) + "--:|--:|--:|--:|--:|--:|"]
    for store, engines in agg.items():
        anc, cli = engines.get("anchor"), engines.get("ours")
        dl = med((dec.get(store) or {}).get("stat"))
        for eng in ordered(engines):
            g = engines[eng]
            if not g["ok"]:
                continue

            def vs(base, key, _g=g, _eng=eng, skip=None):
                if base is None or _eng == skip or not base["ok"]:
                    return "—"
                return fmt(ratio(med(_g.get(key)), med(base.get(key))), "{:.2f}")

            est = med(g.get("est")) if eng != "anchor" else None
            L.append("| " + " | ".join(
                [store, ENGINE_LABEL.get(eng, eng)]
                + [vs(anc, f"{k}_mbs", skip="anchor") for k in kinds]
                + [vs(anc, "ttfb", skip="anchor"), vs(anc, "rss", skip="anchor"),
                   vs(cli, "cold_mbs", skip="ours"), vs(cli, "warm1_mbs", skip="ours"),
                   fmt(100 * ratio(med(g.get("cold_mbs")), dl) if dl else None, "{:.0f}%"),
                   fmt(ratio(est, med(g.get("rss"))) if est else None, "{:.2f}", "—")]) + " |")
    L += ["", "## Decode limit (MB/s of decoded output, all cores; measured in every round)", ""]
    for store, d in dec.items():
        src = d["source"] or "insitubatch-rs CLI"
        L.append(f"- {store}: {cell(d['stat'])} MB/s, {d['threads']} threads ({src})"
                 if d["stat"] else f"- {store}: n/a")
    if meta.get("plot"):
        L += ["", "![Decoded MB/s per engine: medians with min–max bars, cold and warm epochs, "
              "with the decode limit](img/benchmarks.png)",
              "(`bench/plot.py` redraws it from the raw rows.)"]
    if meta.get("results"):
        L += ["", f"Raw rows: `{meta['results']}`."]
    L.append("")
    return "\n".join(L)


def write_markdown(path, md):
    """Write the report (creating its folder) and echo it."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        f.write(md)
    print(md)
