"""references: an epoch over kerchunk references of NetCDF4 files through the cloud-like store
on loopback, side by side with the same data rewritten as Zarr with the same chunks and codecs,
xbatcher over fsspec's reference filesystem, and our own Python store-object path (fsspec's
ReferenceFileSystem through a zarr FsspecStore); MB/s, requests and CPU, in one run.

    bench/run.py references [--dir DIR] [--files 4] [--steps 24] [--chunks 2x721x1440,2x91x180]
        [--setting 50ms] [--reps 3] [--engines ours,rs-python,rs-fsspec-refs,xbatcher-torch-nw0] [--server PATH]

The data (bench/make_stores.py --netcdf, under the bench Python, which has netCDF4 and
kerchunk), for each chunking of `--chunks`: FILES NetCDF4 files of STEPS ERA5-shaped t2m samples
(float32 721 x 1440, zlib level 4 + shuffle, as netCDF-C writes them), kerchunk's references over
them combined along time (`refs.json`, file URLs relative to it), and a Zarr v2 copy whose every
chunk is the same bytes (one object per chunk). Whole fields per chunk (2x721x1440, ~2.3 MB
stored) leave the link and the decode to dominate; tiles (2x91x180, ~37 KB stored) make every
read's own cost count, as a forecast archive's small chunks do. The folder is served by the
cloud-like store (bench/suites/cloud.py's settings). Engines and what they read, each a fresh process, one cold
epoch, in rotated order each round, the server's counters reset before each run:

  ours            the CLI over `reference+URL/era5_nc/refs.json` (store `refs`) and over the
                  Zarr copy (store `zarr`)
  rs-python       insitubatch_rs over `reference+URL` (the native reading, from Python)
  rs-fsspec-refs  insitubatch_rs over a zarr FsspecStore of fsspec's ReferenceFileSystem: every
                  read through zarr's async API and fsspec's HTTP
  xbatcher-torch-nw0  xbatcher's BatchGenerator over xarray over the same reference filesystem
"""
import os

import engines as registry
from report import cell, fmt, header, stat

from .cloud import SETTINGS, Server, default_server
from .common import knobs, rotated

NAME = "references"
STORES = None
CHOICES = ["ours", "rs-python", "rs-fsspec-refs", "xbatcher-torch-nw0"]
ENGINES = CHOICES
ALWAYS = []
REPS = 3
QUICK = {"reps": 1, "files": 2, "steps": 8, "chunks": "2x721x1440"}
CACHE = os.environ.get("INSITUBATCH_CACHE", os.path.expanduser("~/.cache/insitubatch"))
# What each engine reads: the references, and (ours only) the Zarr copy too.
LAYOUTS = {"ours": ("refs", "zarr")}


def add_args(ap):
    ap.add_argument("--dir", default=os.path.join(CACHE, "bench-references"),
                    help="where the NetCDF4 files, their references and the Zarr copy are (made when missing)")
    ap.add_argument("--files", type=int, default=None, help="NetCDF4 files (default 4)")
    ap.add_argument("--steps", type=int, default=None, help="samples per file (default 24)")
    ap.add_argument("--chunks", default=None, help="comma list of chunk shapes TxYxX (default 2x721x1440,2x91x180)")
    ap.add_argument("--setting", default="50ms", help="the cloud-like store's setting: " + ",".join(SETTINGS))
    ap.add_argument("--server", default=default_server(), help="the cloud-store binary (built when missing)")


def check(args, error):
    args.files, args.steps = args.files or 4, args.steps or 24
    args.chunks = args.chunks or "2x721x1440,2x91x180"
    for c in args.chunks.split(","):
        if len(c.split("x")) != 3 or not all(x.isdigit() for x in c.split("x")):
            error(f"a chunk shape is TxYxX, got {c!r}")
    if args.setting not in SETTINGS:
        error(f"unknown setting {args.setting!r}; choose from {','.join(SETTINGS)}")


def urls(base, chunks):
    """The URL of each layout of the data in ``chunks`` (TxYxX) on a server at ``base``."""
    name = f"era5_nc_{chunks}"
    return {"refs": f"reference+{base}/{name}/refs.json", "zarr": f"{base}/{name}_copy.zarr"}


def commands(args, ctx, store, url, which=None):
    """{(engine, layout, chunks): argv} over the server at ``url``'s base (``store`` is unused:
    the suite makes its own data)."""
    base = url.rstrip("/")
    k = knobs(args, epochs=1)
    out = {}
    for chunks in args.chunks.split(","):
        for eng in args.engine_list:
            if which is not None and eng not in which:
                continue
            for layout in LAYOUTS.get(eng, ("refs",)):
                out[(eng, layout, chunks)] = registry.engine(eng).command(ctx, urls(base, chunks)[layout], k)
    return out


def make_data(args, ctx):
    import subprocess

    for chunks in args.chunks.split(","):
        subprocess.run([ctx.python, os.path.join(os.path.dirname(os.path.dirname(__file__)), "make_stores.py"),
                        args.dir, "--netcdf", f"{args.files},{args.steps},{chunks}"], check=True)


def run(session):
    a, rows = session.args, []
    which = session.runnable(a.engine_list)
    make_data(a, session.ctx)
    server = Server(a.server, os.path.abspath(os.path.expanduser(a.dir)))
    try:
        server.configure(SETTINGS[a.setting])
        cmds = commands(a, session.ctx, a.dir, server.base, which)
        for rnd in range(a.reps):
            for slot, (eng, layout, chunks) in enumerate(rotated(cmds, rnd)):
                cmd, url = cmds[(eng, layout, chunks)], urls(server.base, chunks)[layout]
                row = server.counted(lambda eng=eng, slot=slot, cmd=cmd, url=url, store=f"{layout} {chunks}":
                                     session.measure(store, eng, rnd, slot, url, cmd, setting=a.setting))
                rows.append(session.keep(row))
    finally:
        server.close()
    import json

    session.meta["data"] = {}
    for chunks in a.chunks.split(","):
        try:
            with open(os.path.join(os.path.expanduser(a.dir), f"era5_nc_{chunks}.done")) as f:
                session.meta["data"][chunks] = json.load(f)
        except (OSError, ValueError):
            pass
    return rows


def config(args):
    s = SETTINGS[args.setting]
    return (f"{args.files} NetCDF4 files x {args.steps} samples of t2m float32 721 x 1440 in chunks {args.chunks}, "
            f"zlib 4 + shuffle; the cloud-like store at {args.setting} (first byte {s['ttfb_ms']} ms, {s['conn_rate']}/s per "
            f"connection, {s['rate']}/s in all); {args.reps} rounds, engines rotated, one cold epoch per fresh "
            f"process; batch {args.batch_size}, block_chunks {args.block_chunks}, max_inflight {args.max_inflight}. "
            "Cells: median [min–max ×max/min].")


def _cold(row):
    eps = ((row.get("result") or {}).get("epochs")) or []
    return eps[0] if eps else {}


def markdown(meta, rows):
    """One table: per engine and layout, the cold epoch's MB/s, requests, bytes served, CPU
    seconds; the ratios the issue asks for: ours over references ÷ ours over the Zarr copy, and
    the native Python path ÷ the Python store-object path."""
    out = header(meta, ["# Virtual Zarr: kerchunk references of NetCDF4 files against a Zarr copy", ""])
    for chunks, data in (meta.get("data") or {}).items():
        out += ["", f"Data {chunks}: {data.get('files')} files x {data.get('steps')} samples, "
                f"{fmt(data.get('stored_bytes', 0) / 1e6, '{:.0f}')} MB stored, ratio {fmt(data.get('ratio'), '{:.2f}')}x."]
    out += ["", "| engine | reads | cold MB/s | requests | MB served | user CPU s | system CPU s |",
            "|---|---|--:|--:|--:|--:|--:|"]
    groups = {}
    for r in rows:
        groups.setdefault((r["engine"], r["store"]), []).append(r)
    for (eng, layout), rs in groups.items():
        ok = [r for r in rs if _cold(r).get("mb_per_s")]
        if not ok:
            why = next((r.get("error") for r in rs if r.get("error")), "failed")
            out.append(f"| {eng} | {layout} | n/a ({(why or 'failed')[:60]}) | | | | |")
            continue
        served = [r.get("served") or {} for r in ok]
        out.append(f"| {eng} | {layout} | {cell(stat([_cold(r)['mb_per_s'] for r in ok]))} "
                   f"| {cell(stat([s.get('requests') or 0 for s in served]), '{:.0f}')} "
                   f"| {cell(stat([(s.get('bytes') or 0) / 1e6 for s in served]), '{:.0f}')} "
                   f"| {cell(stat([r.get('user_s') or 0 for r in ok]), '{:.2f}')} "
                   f"| {cell(stat([r.get('sys_s') or 0 for r in ok]), '{:.2f}')} |")
    out += ["", "Paired by round (each ratio of two runs of the same round, then the median):", ""]
    for chunks in dict.fromkeys(r["store"].split(" ")[-1] for r in rows):
        for label, (a, b) in {"ours over references ÷ ours over the Zarr copy": (("ours", "refs"), ("ours", "zarr")),
                              "rs-python (native) ÷ rs-fsspec-refs (store object)": (("rs-python", "refs"),
                                                                                      ("rs-fsspec-refs", "refs")),
                              "ours over references ÷ xbatcher": (("ours", "refs"),
                                                                   ("xbatcher-torch-nw0", "refs"))}.items():
            ratios = paired(rows, (a[0], f"{a[1]} {chunks}"), (b[0], f"{b[1]} {chunks}"))
            out.append(f"- {chunks}, {label}: " + (cell(stat(ratios), "{:.2f}") + "x" if ratios else "n/a"))
    if meta.get("results"):
        out += ["", f"Rows: `{meta['results']}`."]
    out.append("")
    return "\n".join(out)


def paired(rows, a, b):
    """Per round, run ``a``'s cold MB/s ÷ run ``b``'s."""
    by = {}
    for r in rows:
        mbs = _cold(r).get("mb_per_s")
        if mbs:
            by[(r["engine"], r["store"], r["round"])] = mbs
    rounds = {r["round"] for r in rows}
    return [by[(*a, k)] / by[(*b, k)] for k in sorted(rounds) if (*a, k) in by and (*b, k) in by]
