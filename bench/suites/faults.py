"""faults: what first-touching fresh anonymous memory costs on this machine, in system
seconds per GiB.

    bench/run.py faults [--gib 1] [--reps 3]

A cold epoch writes every byte of its peak memory once (decoded chunks, batches), so this cost
is paid once per process and scales with peak RSS. Four ways, in a rotated order per round:
4 KiB pages touched one by one, 4 KiB pages populated by one madvise(MADV_POPULATE_WRITE), and
the same two with MADV_HUGEPAGE (what jemalloc's `thp:always` asks for). Each mapping is fresh
and unmapped after use. Measured in this process (no engine). Linux only
(MADV_POPULATE_WRITE needs 5.14).
"""
import mmap
import resource
import sys

from report import header, stat

from .common import rotated

NAME = "faults"
STORES = None
CHOICES = []
ENGINES = []
ALWAYS = []
REPS = 3
QUICK = {"gib": 0.125}
PAGE = 4096
MADV_POPULATE_WRITE = getattr(mmap, "MADV_POPULATE_WRITE", 23)
WAYS = {
    "4k-touch": (None, False),
    "4k-populate": (None, True),
    "thp-touch": (getattr(mmap, "MADV_HUGEPAGE", 14), False),
    "thp-populate": (getattr(mmap, "MADV_HUGEPAGE", 14), True),
}


def add_args(ap):
    ap.add_argument("--gib", type=float, default=None, help="GiB per mapping (default 1)")


def check(args, error):
    args.gib = args.gib or 1.0
    if args.gib <= 0:
        error("--gib must be above 0")


def commands(args, ctx, store, url, which=None):
    return {}  # measured in this process


def sys_seconds():
    return resource.getrusage(resource.RUSAGE_SELF).ru_stime


def first_touch(nbytes, advice, populate):
    """System seconds to fault in a fresh anonymous mapping of `nbytes`."""
    m = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    try:
        if advice is not None:
            m.madvise(advice)
        s0 = sys_seconds()
        if populate:
            m.madvise(MADV_POPULATE_WRITE)
        else:
            for off in range(0, nbytes, PAGE):
                m[off] = 1
        return sys_seconds() - s0
    finally:
        m.close()


def run(session):
    a, rows = session.args, []
    nbytes = max(2 << 20, int(a.gib * 2**30) // (2 << 20) * (2 << 20))
    for rnd in range(a.reps):
        for slot, way in enumerate(rotated(WAYS, rnd)):
            try:
                row = {"sys_s_per_gib": first_touch(nbytes, *WAYS[way]) / (nbytes / 2**30), "error": None}
            except OSError as e:  # an older kernel refuses the advice
                row = {"sys_s_per_gib": None, "error": f"{way}: {e}"}
            row.update(suite=NAME, store="-", engine=way, round=rnd, slot=slot, bytes=nbytes)
            rows.append(session.keep(row))
    print(f"[faults] {a.reps} rounds of {nbytes / 2**30:.2f} GiB", file=sys.stderr)
    return rows


def config(args):
    return f"{args.reps} rounds of {args.gib:g} GiB per way, the ways in a rotated order per round"


def markdown(meta, rows):
    L = header(meta, ["# System seconds per GiB first touched", ""])
    L += ["", "| way | median s/GiB | min–max |", "|---|--:|--:|"]
    for way in WAYS:
        st = stat([r["sys_s_per_gib"] for r in rows if r["engine"] == way])
        err = next((r["error"] for r in rows if r["engine"] == way and r.get("error")), None)
        L.append(f"| {way} | {st['median']:.2f} | {st['min']:.2f}–{st['max']:.2f} |" if st
                 else f"| {way} | n/a ({err or 'not run'}) | |")
    if meta.get("results"):
        L += ["", f"Rows: `{meta['results']}`."]
    L.append("")
    return "\n".join(L)
