"""The measured figures of the user pages, each computed from one committed rows file.

A figure is read from the report the benchmark driver writes for its rows (`bench/run.py
report ROWS --suite SUITE`, the same code, so a page can say no more than the run measured):
a cell of one of its tables, or a span over several cells. docs-tests/facts.py checks every
`<!--fig:NAME-->TEXT<!--/fig-->` of a user page against `FIGURES[NAME]` and every block
rendered from rows against `TABLES[NAME]`; `python3 docs-tests/facts.py --write` rewrites the
blocks. A new figure on a user page gets a function here, named for what it says.

    FIGURES: name -> (rows file or files, () -> the figure's text)
    TABLES:  name -> (rows file, () -> a markdown table)

A page that cites a figure names its rows file (each of them, for a figure over several).
"""
from __future__ import annotations

import contextlib
import functools
import io
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
import run as bench_run  # noqa: E402  bench/run.py: the driver, its suites and report code

LOCAL = "bench/rows/2026-12-01-full-cache.jsonl"  # c1, c8, c40, page cache full: the main run
FIVE = "bench/rows/2026-12-01-five-stores.jsonl"  # every store, tiled ones too
CLOUD = "bench/rows/2026-12-03-cloud.jsonl"  # the cloud-like store, four settings
PATCHES_K1 = "bench/rows/2026-12-05-patches-k1.jsonl"
PATCHES_K4 = "bench/rows/2026-12-05-patches-k4.jsonl"
SUITE = {LOCAL: "local", FIVE: "local", CLOUD: "cloud", PATCHES_K1: "patches", PATCHES_K4: "patches"}
# js/bench/bench.mjs --json: native, Node and Chromium in one run each, medians of interleaved rounds
NODE = ("bench/rows/2026-12-07-node-files.json",)
NODE_HTTP = ("bench/rows/2026-12-07-node-http-client.json",)
CHROMIUM = ("bench/rows/2026-12-02-chromium-c8.json", "bench/rows/2026-12-02-chromium-c8-late.json",
            "bench/rows/2026-12-02-chromium-shard.json", "bench/rows/2026-12-05-node-chromium-cpu.json")


@functools.cache
def report(rows: str) -> str:
    """The driver's report of a committed rows file, as `bench/run.py report` prints it."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        bench_run.main(["report", str(ROOT / rows), "--suite", SUITE[rows], "--stores", "."])
    return out.getvalue()


def tables(rows: str) -> list[tuple[str, list[dict[str, str]]]]:
    """Each table of the report: (the heading above it, its rows as {column: cell})."""
    out, heading, lines = [], "", report(rows).splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("#"):
            heading = line.lstrip("# ").strip()
        if line.startswith("| ") and i + 1 < len(lines) and lines[i + 1].startswith("|-"):
            head = [c.strip() for c in line.strip("|").split("|")]
            body, i = [], i + 2
            while i < len(lines) and lines[i].startswith("|"):
                body.append(dict(zip(head, (c.strip() for c in lines[i].strip("|").split("|")))))
                i += 1
            out.append((heading, body))
            continue
        i += 1
    return out


def cell(rows: str, column: str, store: str, engine: str, heading: str = "") -> str:
    """The cell of `column` in the row of `store` and `engine` (the engine's label in the report)
    of the first table whose heading starts with `heading` and has that column."""
    for head, body in tables(rows):
        if not head.startswith(heading) or not body or column not in body[0]:
            continue
        for r in body:
            if r.get("store") == store and r.get("engine", engine) == engine:
                return r[column]
    raise KeyError(f"{rows}: no cell {column!r} for {store} {engine} under {heading!r}")


def js_ratios(files: tuple[str, ...], *keys: str) -> list[float]:
    """The median of each ratio `keys` of js/bench/bench.mjs's rows files (`ratios.KEY.median`)."""
    return [json.loads((ROOT / f).read_text())["ratios"][k]["median"] for f in files for k in keys]


def number(text: str) -> float:
    """The leading number of a cell ("1.90", "252 [240–267 ×1.11]", "2.9×", "70%")."""
    m = re.match(r"\s*(-?\d+(?:\.\d+)?)", text)
    if not m:
        raise ValueError(f"no number in {text!r}")
    return float(m.group(1))


def span(values: list[float], spec: str, unit: str = "") -> str:
    """`lo–hi` of the values, each as `spec`; one value when they round alike."""
    lo, hi = spec.format(min(values)), spec.format(max(values))
    return f"{lo}{unit}" if lo == hi else f"{lo}–{hi}{unit}"


OURS = ("ours (CLI)", "rs-python")  # the CLI and insitubatch_rs from Python, as the local report names them


def local_cells(rows: str, column: str, stores: tuple[str, ...], engines: tuple[str, ...] = OURS) -> list[float]:
    return [number(cell(rows, column, s, e, "Ratios of medians")) for s in stores for e in engines]


def local_medians(rows: str, column: str, store: str, engines: tuple[str, ...] = OURS) -> list[float]:
    """The medians of `column` in the report's "Medians and spread" table."""
    return [number(cell(rows, column, store, e, "Medians and spread")) for e in engines]


def cloud_ratios() -> list[float]:
    """ours ÷ 0.2.0 and rs-python ÷ 0.2.0, every store, every setting."""
    out = []
    for head, body in tables(CLOUD):
        if head[:1].isdigit():
            out += [number(r[c]) for r in body for c in ("ours ÷ 0.2.0", "rs-python ÷ 0.2.0")]
    return out


def cloud_c8_50ms() -> str:
    """README's one-line table: a cold c8 epoch over the cloud-like store at 50 ms."""
    at = "50ms:"

    def first(col: str, k: int) -> str:
        return cell(CLOUD, col, "c8", "", at).split(" / ")[k].split(" [")[0]

    mbs = [cell(CLOUD, f"{e} MB/s", "c8", "", at).split(" [")[0] for e in ("ours", "rs-python", "0.2.0")]
    return ("| one cold epoch, c8 store, 50 ms to the first byte | CLI | Python | insitubatch 0.2.0 | ratio "
            "(CLI) | first batch (CLI vs 0.2.0) |\n|---|--:|--:|--:|--:|--:|\n"
            f"| MB/s decoded (median of 3 runs) | {mbs[0]} | {mbs[1]} | {mbs[2]} | "
            f"{cell(CLOUD, 'ours ÷ 0.2.0', 'c8', '', at)}× | {first('first batch s (ours/rs-python/0.2.0)', 0)} s vs "
            f"{first('first batch s (ours/rs-python/0.2.0)', 2)} s |\n")


def cloud_summary() -> str:
    """Every setting and store of the cloud run: the cold epoch's MB/s, the ratio, requests and
    the first batch (medians; the report has the spreads)."""
    out = ["| setting | store | CLI MB/s | Python MB/s | 0.2.0 MB/s | CLI ÷ 0.2.0 | requests CLI / 0.2.0 "
           "| first batch s CLI / 0.2.0 |", "|---|---|--:|--:|--:|--:|--:|--:|"]
    for head, body in tables(CLOUD):
        if not head[:1].isdigit():
            continue
        setting = head.split(":")[0]
        for r in body:
            def med(col: str, k: int | None = None) -> str:
                c = r[col] if k is None else r[col].split(" / ")[k]
                return c.split(" [")[0]
            req, first = "requests (ours/rs-python/0.2.0)", "first batch s (ours/rs-python/0.2.0)"
            out.append(f"| {setting} | {r['store']} | {med('ours MB/s')} | {med('rs-python MB/s')} | "
                       f"{med('0.2.0 MB/s')} | {r['ours ÷ 0.2.0']} | {med(req, 0)} / {med(req, 2)} | "
                       f"{med(first, 0)} / {med(first, 2)} |")
    return "\n".join(out) + "\n"


def local_summary() -> str:
    """The user summary's table: cold epochs and first batches against insitubatch 0.2.0."""
    out = ["| store (samples per chunk) | engine | cold epoch ×0.2.0 | first batch ×0.2.0 | peak RSS ×0.2.0 "
           "| % of the decode limit |", "|---|---|--:|--:|--:|--:|"]
    for s, what in (("c1", "c1 (1)"), ("c8", "c8 (8)"), ("c40", "c40 (40)")):
        for e in OURS:
            c = [cell(LOCAL, col, s, e, "Ratios of medians")
                 for col in ("×0.2.0 cold", "×0.2.0 TTFB", "×0.2.0 RSS", "% decode limit")]
            out.append(f"| {what} | {'the CLI' if e == 'ours (CLI)' else 'Python'} | {' | '.join(c)} |")
    return "\n".join(out) + "\n"


FIGURES = {
    # local disk, page cache full (the main run)
    "cold-x-whole-c1-c8": (LOCAL, lambda: span(local_cells(LOCAL, "×0.2.0 cold", ("c1", "c8")), "{:.1f}", "×")),
    "cold-x-c40": (LOCAL, lambda: span(local_cells(LOCAL, "×0.2.0 cold", ("c40",)), "{:.1f}", "×")),
    "ttfb-x-c1-c8": (LOCAL, lambda: span(local_cells(LOCAL, "×0.2.0 TTFB", ("c1", "c8")), "{:.2f}", "×")),
    "rss-x-c1-c8": (LOCAL, lambda: span(local_cells(LOCAL, "×0.2.0 RSS", ("c1", "c8")), "{:.1f}", "×")),
    "rss-x-c40": (LOCAL, lambda: span(local_cells(LOCAL, "×0.2.0 RSS", ("c40",)), "{:.2f}", "×")),
    "decode-limit-pct": (LOCAL, lambda: span(local_cells(LOCAL, "% decode limit", ("c1", "c8", "c40")), "{:.0f}",
                                             "%")),
    "est-over-rss": (LOCAL, lambda: span(local_cells(LOCAL, "est/RSS", ("c1", "c8", "c40")), "{:.1f}", "×")),
    "ttfb-s-c1": (LOCAL, lambda: span(local_medians(LOCAL, "TTFB s", "c1"), "{:.2f}", " s")),
    "ttfb-s-c8": (LOCAL, lambda: span(local_medians(LOCAL, "TTFB s", "c8"), "{:.2f}", " s")),
    "ttfb-s-c40": (LOCAL, lambda: span(local_medians(LOCAL, "TTFB s", "c40"), "{:.2f}", " s")),
    # c40's floor (two blocks) holds its 8 chunks, so its warm epochs come from the pool
    "c40-warm-x-cold": (LOCAL, lambda: span([w / c for w, c in zip(local_medians(LOCAL, "warm1 MB/s", "c40"),
                                                                      local_medians(LOCAL, "cold MB/s", "c40"))],
                                              "{:.0f}", "×")),
    # every store in one run: the tiled ones
    "cold-x-tiled-c8s": (FIVE, lambda: span(local_cells(FIVE, "×0.2.0 cold", ("c8s",)), "{:.1f}", "×")),
    # the cloud-like store
    "cloud-x": (CLOUD, lambda: span(cloud_ratios(), "{:.1f}", "×")),
    "cloud-ttfb-x-max": (CLOUD, lambda: "{:.2f}×".format(max(
        number(cell(CLOUD, "first batch s (ours/rs-python/0.2.0)", r["store"], "", h).split(" / ")[k])
        / number(cell(CLOUD, "first batch s (ours/rs-python/0.2.0)", r["store"], "", h).split(" / ")[2])
        for h, body in tables(CLOUD) if h[:1].isdigit() for r in body for k in (0, 1)))),
    # Node and Chromium (js/bench/bench.mjs)
    "node-one-thread-x-native": (NODE, lambda: span(js_ratios(NODE, "node_vs_native_one_thread",
                                                             "node_views_vs_native_one_thread"), "{:.2f}", "×")),
    "node-two-threads-x-native": (NODE, lambda: span(js_ratios(NODE, "node_2_vs_native_one_thread",
                                                              "node_2_views_vs_native_one_thread"), "{:.2f}", "×")),
    "node-files-one-thread-x-native": (NODE, lambda: span(js_ratios(NODE, "node_file_views_vs_native_file_one_thread"),
                                                          "{:.2f}", "×")),
    "node-files-two-threads-x-native": (NODE, lambda: span(js_ratios(
        NODE, "node_2_file_views_vs_native_file_one_thread"), "{:.2f}", "×")),
    "node-cpu-x-native": (NODE, lambda: span([json.loads((ROOT / f).read_text())["cpu_ratios"][k]["vs_native"]
                                              for f in NODE for k in ("node-views", "node")], "{:.1f}", "×")),
    "node-http-x-fetch-cpu": (NODE_HTTP, lambda: span([json.loads((ROOT / f).read_text())["node_http_vs_fetch"]["median"]
                                                       for f in NODE_HTTP], "{:.2f}", "×")),
    "chromium-threads-x-one": (CHROMIUM, lambda: span(js_ratios(CHROMIUM, "chromium_threads_2_vs_one"), "{:.2f}",
                                                      "×")),
    "chromium-threads-views-x-one": (CHROMIUM, lambda: span(js_ratios(CHROMIUM, "chromium_threads_2_views_vs_one"),
                                                            "{:.2f}", "×")),
    # random 128 x 128 patches against xbatcher
    "patch-x-xbatcher-k1": (PATCHES_K1, lambda: span([number(cell(PATCHES_K1, "× xbatcher-nw2", s, "rs-patch"))
                                                       for s in ("c8s", "shardsmall")], "{:.1f}", "×")),
    "patch-x-xbatcher-k4": (PATCHES_K4, lambda: span([number(cell(PATCHES_K4, "× xbatcher-nw2", s, "rs-patch"))
                                                       for s in ("c8s", "shardsmall")], "{:.0f}", "×")),
}

TABLES = {
    "cloud-c8-50ms": (CLOUD, cloud_c8_50ms),
    "cloud-summary": (CLOUD, cloud_summary),
    "local-summary": (LOCAL, local_summary),
}


def self_check() -> list[str]:
    """Every figure and table computes from its rows (a renamed column or engine fails here)."""
    out = []
    for name, (rows, compute) in {**FIGURES, **TABLES}.items():
        if missing := [f for f in ((rows,) if isinstance(rows, str) else rows) if not (ROOT / f).is_file()]:
            out.append(f"docs-tests/figures.py: {name} reads {', '.join(missing)}, which is not committed")
            continue
        try:
            compute()
        except (KeyError, ValueError, IndexError) as e:
            out.append(f"docs-tests/figures.py: {name} does not compute from {rows}: {e}")
    return out
