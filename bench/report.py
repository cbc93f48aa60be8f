"""What every suite of bench/run.py reports with: rows in and out (JSON lines, one committed
place), medians with their spread over the rounds, ratios, the header lines, the command as a
reader reruns it. Pure functions of the rows (bench/test_run.py feeds them fabricated ones);
each suite's tables are in bench/suites/.

A run row: {suite, store, engine, round, result, error, wall_s, user_s, sys_s,
tree_peak_rss_bytes, mem_at_start, ...}; ``result`` is the engine's JSON (`insitubatch bench
--json`, bench/reference_bench.py, bench/py_engines.py), whose ``epochs`` list is in order: the
first is the cold epoch, the next ones "warm1", "warm2", ... A decode-limit row has engine
``decode_limit`` and a result with ``decode_limit_mb_per_s``. The last line of a rows file is
``{"meta": {...}}``: the suite, the command, date, machine, config and options of the run
(rows written before the one driver have none).
"""
import json
import os
import re
import shlex
import statistics
import tempfile

from engines import DECODE, canonical

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def portable(text):
    """``text`` with this machine's cache folder, repository, temp folder and home written as
    ``$INSITUBATCH_CACHE/``, relative, ``$TMPDIR/`` and ``$HOME/`` (docs pages and committed
    rows never carry a machine's absolute paths; docs-tests/facts.py checks them)."""
    cache = os.environ.get("INSITUBATCH_CACHE") or os.path.expanduser("~/.cache/insitubatch")
    home = os.path.expanduser("~")
    prefixes = [(os.path.abspath(cache) + "/", "$INSITUBATCH_CACHE/"), (REPO + "/", ""),
                (os.path.abspath(tempfile.gettempdir()) + "/", "$TMPDIR/"), (home + "/", "$HOME/")]
    # The longest first: one folder may hold another (CI's checkout is $INSITUBATCH_CACHE/ci-src).
    for prefix, name in sorted(prefixes, key=lambda p: -len(p[0])):
        text = text.replace(prefix, name)
    return text


def portable_tree(value):
    """A row (any JSON value) with every string ``portable``: the URLs, commands and paths a
    run records, as another machine reads them."""
    if isinstance(value, str):
        return portable(value)
    if isinstance(value, list):
        return [portable_tree(v) for v in value]
    if isinstance(value, dict):
        return {k: portable_tree(v) for k, v in value.items()}
    return value


def command_line(script, args):
    """``python3 SCRIPT ARGS`` as a reader reruns it on another machine: the script relative
    to the repository, every argument ``portable``."""
    def arg(a):
        a = portable(a)
        # Unquoted where it is safe, so $INSITUBATCH_CACHE and $HOME still expand.
        return a if re.fullmatch(r"[\w@%+=:,./$-]+", a) else shlex.quote(a)

    script = os.path.relpath(os.path.abspath(script), REPO)
    return " ".join(["python3", script] + [arg(a) for a in args])


# ------------------------------------------------------------ small formatting helpers
def fmt(v, spec="{:.0f}", na="n/a"):
    return na if v is None else spec.format(v)


def gb(b):
    return None if not b else b / 1e9


def per_gb(seconds, decoded_bytes):
    """Seconds per 1e9 decoded bytes, or None."""
    return None if seconds is None or not decoded_bytes else seconds / (decoded_bytes / 1e9)


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
        # The epoch's own CPU per decoded GB (user + system, every thread of the engine's
        # process), where the engine reports it (cpu_s_per_gb; rows before 2026-12-07 do not).
        m[f"{lab}_cpu_gb"] = e.get("cpu_s_per_gb")
        m[f"{lab}_sys_gb"] = per_gb(e.get("cpu_sys_s"), e.get("decoded_bytes"))
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
    """{store: {"stat": stat of MB/s over rounds, "cpu_gb": stat of the decode alone's CPU
    seconds per decoded GB (the CLI's decode_cpu_s_per_gb; None from bench/decode_limit.py),
    "threads": .., "source": ..}}."""
    out = {}
    for r in rows:
        if r.get("engine") != DECODE:
            continue
        d = out.setdefault(r["store"], {"values": [], "cpu_gb": [], "threads": None, "source": None})
        res = r.get("result") or {}
        d["values"].append(res.get("decode_limit_mb_per_s"))
        d["cpu_gb"].append(res.get("decode_cpu_s_per_gb"))
        d["threads"] = d["threads"] or res.get("threads")
        d["source"] = d["source"] or res.get("source")
    return {s: {"stat": stat(d["values"]), "cpu_gb": stat(d["cpu_gb"]), "threads": d["threads"],
                "source": d["source"]}
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


def ordered(engines, order):
    """The engines in ``order`` first (each once), then the others as they came."""
    order = list(dict.fromkeys(order))
    return [e for e in order if e in engines] + [e for e in engines if e not in order]


def write_markdown(path, md):
    """Write the report (creating its folder) and echo it."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        f.write(md)
    print(md)


def shown_path(path):
    """A path as a report shows it: inside the repo relative to its root, any other one
    ``portable``."""
    p = os.path.abspath(os.path.expanduser(path))
    return os.path.relpath(p, REPO) if p.startswith(REPO + os.sep) else portable(p)


def header(meta, intro=()):
    """The lines every report starts with: what ran, when, where, how; then its notes."""
    L = list(intro)
    L += [f"- command (from the repo root): `{meta.get('command', 'n/a')}`",
          f"- date: {meta.get('date', 'n/a')}",
          f"- machine: {meta.get('machine', 'n/a')}"]
    if meta.get("config"):
        L.append(f"- config: {meta['config']}")
    L += [f"- memory: {line}" for line in meta.get("memory", [])]
    L += [f"- note: {line}" for line in meta.get("notes", [])]
    return L


# ------------------------------------------------------------ rows in and out
class Rows:
    """The run's rows file: one JSON line per run as it finishes (so a run cut short keeps
    what it measured), the meta line last, every string ``portable`` (rows are committed).
    Stdout and stderr stay out; the stderr's tail goes in."""

    def __init__(self, path):
        self.path = path
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        self._f = open(path, "w")

    def add(self, row):
        rec = {k: v for k, v in row.items() if k not in ("stdout", "stderr")}
        if "stderr" in row:
            rec["stderr_tail"] = (row.get("stderr") or "")[-2000:]
        self._f.write(json.dumps(portable_tree(rec)) + "\n")
        self._f.flush()

    def close(self, meta):
        self._f.write(json.dumps({"meta": portable_tree(meta)}) + "\n")
        self._f.close()


def load_rows(path):
    """(meta, rows) of a rows file; meta is {} for rows an earlier driver wrote, and engine
    names are today's (``anchor`` rows read as ``reference``, ``rust-cli`` as ``ours``)."""
    meta, rows = {}, []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                r = json.loads(line)
            except ValueError as e:
                raise SystemExit(f"line {n} of {path} is not JSON ({e}); rows files hold one JSON object a line")
            if "meta" in r and len(r) == 1:
                meta = r["meta"]
                continue
            if "engine" in r:
                r["engine"] = canonical(r["engine"])
            rows.append(r)
    return meta, rows
