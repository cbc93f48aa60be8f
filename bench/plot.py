#!/usr/bin/env python3
"""Draw the benchmark plots linked from docs/ out of the rows bench/run.py keeps in bench/rows.

    plot.py [--rows bench/rows/DATE-local.jsonl] [--python-rows bench/rows/DATE-python.jsonl]
            [--out-dir docs/img]

Writes docs/img/benchmarks.png from a `local` suite's rows (ours, rs-python and insitubatch
0.2.0, the reference implementation: medians over the rounds with min–max bars, cold and warm
epochs, with each store's decode limit) and docs/img/benchmarks-python.png from a `python`
suite's rows (decoded MB/s of every engine, cold and warm, per store, with the stall % of the
stall run). Rows of the earlier drivers read the same (their engine names are read as
today's). It only reads the rows: it never runs a benchmark. Needs matplotlib
(bench/requirements-plot.txt).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from report import decode_limits, group, load_rows, warm_labels  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
MAX_PNG_BYTES = 200_000

# Engines in table order, with the colour that marks who they are (ours: blues).
PY_ENGINES = {
    "ours": ("Rust CLI", "#08306b"),
    "rs-python": ("insitubatch_rs (numpy)", "#2171b5"),
    "rs-torch": ("insitubatch_rs + as_torch", "#6baed6"),
    "reference": ("insitubatch 0.2.0", "#e6550d"),
    "tensorstore": ("tensorstore", "#31a354"),
    "zarr-loop": ("zarr-python chunk loop", "#756bb1"),
    "xbatcher-torch-nw0": ("xbatcher + DataLoader, 0 workers", "#969696"),
    "xbatcher-torch-nw2": ("xbatcher + DataLoader, 2 workers", "#636363"),
}
STALL_ENGINE = {"reference": "reference-py"}  # insitubatch 0.2.0's stall run is in-process


def read_rows(path: Path) -> list[dict]:
    try:
        return load_rows(path)[1]
    except OSError as e:
        raise SystemExit(f"plot.py: cannot read rows at {path} ({e}); give a rows file of bench/rows")


def epoch_mb_s(row: dict, kind: str) -> float | None:
    """MB/s of the row's first epoch of `kind` (cold/warm), or None for a failed run."""
    if row.get("rc") not in (0, None) or not row.get("result"):
        return None
    for e in row["result"].get("epochs", []):
        if e.get("kind") == kind:
            return float(e["mb_per_s"])
    return None


def latest(rows: list[dict], kind: str | None = None) -> dict[tuple[str, str], dict]:
    """(store, engine) → its last row (a later run of the same pair replaces an earlier one)."""
    out = {}
    for r in rows:
        if kind is None or r.get("kind", "throughput") == kind:
            out[(r["store"], r["engine"])] = r
    return out


def stores_in(rows: dict[tuple[str, str], dict]) -> list[str]:
    seen: list[str] = []
    for store, _ in rows:
        if store not in seen:
            seen.append(store)
    return seen


def save(fig, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90, metadata={"Software": None})
    plt.close(fig)
    size = path.stat().st_size
    if size > MAX_PNG_BYTES:
        raise SystemExit(f"plot.py: {path} is {size} bytes, over the {MAX_PNG_BYTES} limit; lower the dpi")
    print(f"wrote {path} ({size // 1000} KB)")


def plot_python(rows: list[dict], out: Path) -> None:
    thr, stall = latest(rows, "throughput"), latest(rows, "stall")
    stores = stores_in(thr)
    if not stores:
        raise SystemExit("plot.py: no throughput rows in the Python benchmark results")
    fig, axes = plt.subplots(1, len(stores), figsize=(4.2 * len(stores) + 2.2, 4.6), sharey=True, squeeze=False)
    engines = [e for e in PY_ENGINES if any((s, e) in thr for s in stores)]
    h = 0.38
    for ax, store in zip(axes[0], stores):
        for i, eng in enumerate(engines):
            row = thr.get((store, eng))
            if row is None:
                continue
            label, colour = PY_ENGINES[eng]
            cold, warm = epoch_mb_s(row, "cold"), epoch_mb_s(row, "warm")
            y = len(engines) - 1 - i
            if cold is not None:
                ax.barh(y + h / 2, cold, h, color=colour)
            if warm is not None:
                ax.barh(y - h / 2, warm, h, color=colour, alpha=0.45, hatch="//", edgecolor="white")
            st = stall.get((store, STALL_ENGINE.get(eng, eng)))
            pct = None if st is None else next(
                (e.get("stall_pct") for e in st["result"].get("epochs", []) if e.get("kind") == "cold"), None
            ) if st.get("result") else None
            top = max(v for v in (cold, warm, 0.0) if v is not None)
            if pct is not None:
                ax.text(top + 12, y, f"stall {pct:.0f}%", va="center", fontsize=7, color="#444444")
        ax.set_title(f"store {store}", fontsize=10)
        ax.set_xlabel("decoded MB/s (solid: cold epoch, hatched: warm)", fontsize=8)
        ax.grid(axis="x", alpha=0.3)
        ax.set_xlim(0, ax.get_xlim()[1] * 1.18)
        ax.tick_params(labelsize=8)
    axes[0][0].set_yticks(range(len(engines)), [PY_ENGINES[e][0] for e in reversed(engines)])
    fig.suptitle("Python loaders on the ERA5-shaped stores (batch 32, shuffled; 2 cores)", fontsize=11)
    fig.tight_layout()
    save(fig, out)


ENGINE_COLOURS = {"ours": ("insitubatch-rs CLI", "#2171b5"), "rs-python": ("insitubatch_rs (Python)", "#6baed6"),
                  "reference": ("insitubatch 0.2.0", "#e6550d")}


def plot_engine(rows: list[dict], out: Path) -> None:
    """bench/run.py's rows: per store and engine the median MB/s of each epoch kind over the
    rounds, with min–max bars, and the median decode limit on the cold panel."""
    agg, dec = group(rows), decode_limits(rows)
    stores = [s for s, engines in agg.items() if any(e in engines for e in ENGINE_COLOURS)]
    if not stores:
        raise SystemExit("plot.py: no ours/rs-python/reference rows in the local suite's rows")
    kinds = ["cold"] + warm_labels(agg)[:2]
    engines = [e for e in ENGINE_COLOURS if any(e in agg[s] for s in stores)]
    fig, axes = plt.subplots(1, len(kinds), figsize=(4.6 * len(kinds) + 1, 4.2), squeeze=False)
    w = 0.8 / len(engines)
    xs = range(len(stores))
    for ax, kind in zip(axes[0], kinds):
        for i, eng in enumerate(engines):
            label, colour = ENGINE_COLOURS[eng]
            sts = [(agg[s].get(eng) or {}).get(f"{kind}_mbs") for s in stores]
            pos = [x - 0.4 + w * (i + 0.5) for x in xs]
            meds = [st["median"] if st else 0 for st in sts]
            err = [[st["median"] - st["min"] if st else 0 for st in sts],
                   [st["max"] - st["median"] if st else 0 for st in sts]]
            ax.bar(pos, meds, w, color=colour, label=label, yerr=err, capsize=2,
                   error_kw={"elinewidth": 0.8, "ecolor": "#333333"})
        if kind == "cold":
            for x, s in zip(xs, stores):
                st = (dec.get(s) or {}).get("stat")
                if st:
                    ax.hlines(st["median"], x - 0.45, x + 0.45, colors="black", linestyles="--", lw=1)
            ax.plot([], [], "k--", lw=1, label="decode limit (zstd, all cores)")
        else:
            ax.set_yscale("log")
        ax.set_xticks(list(xs), stores)
        ax.set_ylabel("decoded MB/s" + (" (log)" if kind != "cold" else ""), fontsize=9)
        ax.set_title(f"{kind} epoch (median, min–max bars)", fontsize=10)
        ax.grid(axis="y", alpha=0.3)
        lo, hi = ax.get_ylim()
        ax.set_ylim(lo, hi * 4 if kind != "cold" else hi * 1.3)  # room for the legend
        ax.legend(fontsize=7, loc="upper center", ncol=2, frameon=False)
    fig.suptitle("insitubatch-rs vs insitubatch 0.2.0 (batch 32, block_chunks 16, max_inflight 32)", fontsize=11)
    fig.tight_layout()
    save(fig, out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=Path, help="a local suite's rows → benchmarks.png")
    p.add_argument("--python-rows", type=Path, help="a python suite's rows → benchmarks-python.png")
    p.add_argument("--out-dir", type=Path, default=ROOT / "docs/img")
    a = p.parse_args(argv)
    plots = [(a.rows, plot_engine, "benchmarks.png"), (a.python_rows, plot_python, "benchmarks-python.png")]
    found = [(path, plot, name) for path, plot, name in plots if path is not None]
    if not found:
        p.error("give --rows (a local suite's rows) and/or --python-rows (a python suite's), e.g. "
                "--rows bench/rows/2026-12-01-full-cache.jsonl")
    for path, plot, name in found:
        plot(read_rows(path), a.out_dir / name)
        print(f"plot.py: {a.out_dir / name} from {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
