#!/usr/bin/env python3
"""The benchmark driver of insitubatch-rs: every benchmark is a suite of this one script, over
the engines of one registry (bench/engines.py), measured, rotated, written and reported the
same way.

    bench/run.py [SUITE] [options]     run a suite (local when none is named)
    bench/run.py --quick               2-minute smoke of the local suite (rows under the cache)
    bench/run.py engines               the engines, and which of them can run here (or why not)
    bench/run.py report ROWS.jsonl     a rows file's report again (committed rows included)
    bench/run.py SUITE --help          a suite's options

Suites (bench/suites/):
  local      the CLI, insitubatch_rs from Python and insitubatch 0.2.0 (the reference
             implementation) on page-cached local stores: medians of rotated rounds, the
             decode limit, memory states
  python     insitubatch_rs from Python against Python peers (xbatcher, zarr-python,
             tensorstore), the CLI and insitubatch 0.2.0; stall runs with a compute step
  cloud      the same engines through the cloud-like store on loopback (settings: time to first
             byte, rates, slow tail), counting the requests it served
  patches    random 128 x 128 patches: patch= against cropping whole samples and xbatcher
  ranks      N CLI processes, one rank each, against one process
  cache      the disk tier: a warm epoch from a persisted cache in a fresh process
  objects    store objects (obstore, zarr-python) against the URL
  references kerchunk references of NetCDF4 files through the cloud-like store, against a Zarr
             copy with the same chunks and codecs, xbatcher and the Python store-object path
  slow-loop  peak RSS of a loop slower than the loader against describe()'s estimate
  workers    torch DataLoader workers each reading a share, against one process
  faults     the system time of first-touching fresh memory on this machine

Every run is a fresh process; in each round every engine runs once, in an order rotated by one
per round, so drift on a shared machine spreads over all of them. Rows (JSON lines, the run's
meta last) go to bench/rows/DATE-SUITE[-LABEL].jsonl, the committed place (--rows elsewhere;
--quick: $INSITUBATCH_CACHE/bench-rows/); the markdown report beside them (--out elsewhere).
"""
import argparse
import datetime
import os
import platform
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import engines as registry  # noqa: E402
from measure import last_json, meminfo, run_measured  # noqa: E402
from report import Rows, command_line, fmt, gb, load_rows, run_metrics, shown_path, write_markdown  # noqa: E402
from suites import SUITES  # noqa: E402

CACHE = os.environ.get("INSITUBATCH_CACHE", os.path.expanduser("~/.cache/insitubatch"))
ROWS_DIR = os.path.join(HERE, "rows")
QUICK_ROWS_DIR = os.path.join(CACHE, "bench-rows")
QUICK = {"stores": os.path.join(CACHE, "bench-stores-48"), "samples": 48, "only": "c8"}
GIB = 2 ** 30
LOW_MEM_BYTES = 2 * GIB  # warn when a run starts with less memory available than this


def default_cli():
    tgt = os.environ.get("CARGO_TARGET_DIR", os.path.join(CACHE, "target"))
    return shutil.which("insitubatch") or os.path.join(tgt, "release", "insitubatch")


def default_python():
    """The bench venv (release wheel + peers, bench/README.md) when there is one, else the
    test venv."""
    bench = os.path.join(CACHE, "venv-bench", "bin", "python")
    return bench if os.path.exists(bench) else os.path.join(CACHE, "venv-test", "bin", "python")


def default_reference_python():
    return os.path.join(CACHE, "venv-reference", "bin", "python")


def parser(suite):
    ap = argparse.ArgumentParser(prog=f"bench/run.py {suite.NAME}", description=suite.__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=f"suites: {', '.join(SUITES)} (bench/run.py SUITE --help); also "
                                 "bench/run.py engines (the registry, and what can run here) and bench/run.py "
                                 "report ROWS.jsonl (a rows file's report again); bench/README.md")
    if suite.STORES is not None:
        ap.add_argument("--stores", help="dir holding <name>.zarr stores (bench/make_stores.py); "
                        "required unless --quick")
        ap.add_argument("--only", default=None, help=f"comma list of stores (default {suite.STORES})")
        ap.add_argument("--samples", type=int, default=None,
                        help="make missing stores with this many samples first (bench/make_stores.py)")
    ap.add_argument("--quick", action="store_true",
                    help="a smoke: a 48-sample c8 store under the cache (made if missing), the suite's "
                    "quick settings, rows under $INSITUBATCH_CACHE/bench-rows (never in the tree)")
    if suite.CHOICES:
        ap.add_argument("--engines", default=",".join(suite.ENGINES),
                        help=f"comma list of {','.join(suite.CHOICES)} (default {','.join(suite.ENGINES)})")
    ap.add_argument("--reps", type=int, default=None, help=f"rounds (default {suite.REPS})")
    ap.add_argument("--rows", default=None, help="the rows file (default bench/rows/DATE-SUITE[-LABEL].jsonl)")
    ap.add_argument("--label", default=None, help="a word for the default rows file's name (e.g. full-cache)")
    ap.add_argument("--out", default=None, help="the markdown report (default: beside the rows, .md)")
    ap.add_argument("--cli", default=default_cli(), help="the insitubatch CLI (default: on PATH, else "
                    "$CARGO_TARGET_DIR or $INSITUBATCH_CACHE/target, release/insitubatch)")
    ap.add_argument("--python", default=default_python(), help="the Python of the insitubatch_rs and peer "
                    "engines (default $INSITUBATCH_CACHE/venv-bench, else venv-test)")
    ap.add_argument("--reference-python", default=None, help="the Python of insitubatch 0.2.0 (default: "
                    "the venv bench/setup_reference.sh makes, made when missing)")
    ap.add_argument("--var", default="t2m")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--block-chunks", type=int, default=16)
    ap.add_argument("--max-inflight", type=int, default=32)
    ap.add_argument("--timeout", type=float, default=1800, help="seconds per run")
    suite.add_args(ap)
    return ap


def split_argv(argv):
    """(suite module, the rest): the first word names the suite; none means local."""
    if argv and argv[0] in SUITES:
        return SUITES[argv[0]], argv[1:]
    if argv and not argv[0].startswith("-"):
        raise SystemExit(f"bench/run.py: no suite {argv[0]!r}; the suites are {', '.join(SUITES)} "
                         "(or engines, report)")
    return SUITES["local"], list(argv)


def parse(argv):
    """(suite, args) with every default applied and the options checked; runs nothing."""
    suite, rest = split_argv(argv)
    ap = parser(suite)
    args = ap.parse_args(rest)
    args.suite = suite.NAME
    if args.quick:
        for k, v in {**(QUICK if suite.STORES is not None else {}), **suite.QUICK}.items():
            if getattr(args, k, None) is None:
                setattr(args, k, v)
    if args.reps is None:
        args.reps = suite.REPS
    if args.reps < 1:
        ap.error("--reps must be at least 1")
    if suite.STORES is not None:
        if not args.stores:
            ap.error("--stores DIR is required (or --quick)")
        args.only = args.only or suite.STORES
        args.store_names = [s for s in args.only.split(",") if s]
    args.engine_list = []
    if suite.CHOICES:
        try:
            args.engine_list = [registry.engine(e).name for e in args.engines.split(",") if e]
        except ValueError as e:
            ap.error(str(e))
        bad = [e for e in args.engine_list if e not in suite.CHOICES]
        if bad:
            ap.error(f"engine(s) {', '.join(bad)} are not in the {suite.NAME} suite; choose from "
                     f"{','.join(suite.CHOICES)}")
    suite.check(args, ap.error)
    return suite, args


def context(args, check_imports=True):
    return registry.Context(cli=args.cli, cli_b=getattr(args, "cli_b", None),
                            first_block_chunks=getattr(args, "first_block_chunks", None),
                            python=args.python,
                            reference_python=args.reference_python or default_reference_python(),
                            check_imports=check_imports)


def rows_path(args, today=None):
    """The rows file: --rows, else a dated name in bench/rows (--quick: in the cache) that no
    earlier run of the day holds."""
    if args.rows:
        return args.rows
    today = today or datetime.date.today().isoformat()
    folder = QUICK_ROWS_DIR if args.quick else ROWS_DIR
    stem = "-".join([today, args.suite] + ([args.label] if args.label else []) + (["quick"] if args.quick else []))
    path, n = os.path.join(folder, stem + ".jsonl"), 2
    while os.path.exists(path) and not args.quick:
        path, n = os.path.join(folder, f"{stem}-{n}.jsonl"), n + 1
    return path


class Session:
    """One run of a suite: its options, the engines' context, the rows file and the notes
    the report carries (skipped engines and stores, shortfalls)."""

    def __init__(self, suite, args, ctx, rows):
        self.suite, self.args, self.ctx, self.rows = suite, args, ctx, rows
        self.notes, self.meta = [], {}

    def note(self, text):
        if text not in self.notes:
            self.notes.append(text)
            print(f"[{self.suite.NAME}] {text}", file=sys.stderr, flush=True)

    def runnable(self, names):
        """The engines named that can run here; the others are noted with the reason."""
        out = []
        for name in names:
            why = registry.engine(name).unavailable(self.ctx)
            if why:
                self.note(f"{name} skipped: {why}")
            else:
                out.append(name)
        return out

    def stores(self):
        """(name, absolute path) of each store asked for; a missing one is noted and skipped."""
        for name in self.args.store_names:
            path = os.path.abspath(os.path.join(os.path.expanduser(self.args.stores), name + ".zarr"))
            if not os.path.isdir(path):
                self.note(f"store {name} missing at {path}, skipped (--samples N makes it)")
                continue
            yield name, path

    def measure(self, store, engine, rnd, slot, url, cmd, parse=last_json, **extra):
        """One run in a fresh subprocess: its row (written at once), with the memory state at
        its start. ``parse(stdout)`` is the engine's result (default: its last JSON line)."""
        mem = meminfo()
        if mem.get("available", 0) < LOW_MEM_BYTES:
            print(f"[{self.suite.NAME}] warning: {mem['available'] / GIB:.1f} GiB available before "
                  f"{store} {engine} round {rnd}", file=sys.stderr)
        r = run_measured(cmd, self.args.timeout)
        res = parse(r["stdout"])
        if res is not None and engine == registry.DECODE:
            res.setdefault("source", "insitubatch-rs CLI" if "--decode-limit" in cmd else "bench/decode_limit.py")
        if isinstance(res, dict) and "skipped" in res:
            r["error"], res = res["skipped"], None
        if res is None and not r["error"]:
            r["error"] = "no JSON on stdout"
        row = dict(r, suite=self.suite.NAME, store=store, engine=engine, round=rnd, slot=slot, url=url,
                   cmd=cmd, result=res, mem_at_start=mem, **extra)
        return row

    def keep(self, row):
        """Write the row and say what it measured."""
        self.rows.add(row)
        say(self.suite.NAME, row)
        return row


def say(suite, row):
    res = row.get("result") or {}
    if row["engine"] == registry.DECODE:
        txt = f"decode limit {fmt(res.get('decode_limit_mb_per_s'))} MB/s"
    elif res.get("epochs"):
        m = run_metrics(row) or {}
        eps = " ".join(f"{k[:-4]} {fmt(v)}" for k, v in m.items() if k.endswith("_mbs"))
        txt = (f"MB/s {eps}, ttfb {fmt(m.get('ttfb'), '{:.2f}')} s, rss "
               f"{fmt(gb(m.get('rss')), '{:.2f}')} GB")
    elif res.get("secs"):
        txt = f"{res['rows'] / res['secs']:.0f} rows/s"
    else:
        txt = ""
    extra = " ".join(f"{k} {row[k]}" for k in ("setting", "kind", "world") if row.get(k) is not None)
    print(f"[{suite}] {row['store']} round {row['round']} {row['engine']} {extra}: {txt} "
          f"({row.get('wall_s', 0):.1f} s) {row.get('error') or ''}", file=sys.stderr, flush=True)


def reference_venv(args, names):
    """Make the reference venv (bench/setup_reference.sh) when an engine or the store maker needs
    it and none was given."""
    if args.reference_python or os.path.exists(default_reference_python()):
        return
    needs = [n for n in names if registry.engine(n).runner in ("reference", "reference-py")]
    if needs or getattr(args, "samples", None):
        print(f"[run] making the reference venv for {', '.join(needs) or 'bench/make_stores.py'} "
              "(bench/setup_reference.sh)", file=sys.stderr)
        subprocess.run([os.path.join(HERE, "setup_reference.sh")], check=True, stdout=subprocess.DEVNULL)


def make_stores(args, ctx):
    if getattr(args, "samples", None):
        os.makedirs(os.path.expanduser(args.stores), exist_ok=True)
        subprocess.run([ctx.reference_python, os.path.join(HERE, "make_stores.py"),
                        os.path.expanduser(args.stores), "--samples", str(args.samples), "--only",
                        ",".join(args.store_names)], check=True)


def machine():
    return (f"{platform.node()}, nproc {os.cpu_count()}, RAM {meminfo()['total'] / GIB:.1f} GiB, "
            f"{platform.platform()}")


def options(args):
    """The run's options as the report and a re-render read them (JSON values only)."""
    return {k: v for k, v in vars(args).items() if isinstance(v, (str, int, float, bool, list, type(None)))}


def run_suite(suite, args, cmdline):
    ctx = context(args)
    reference_venv(args, args.engine_list + list(suite.ALWAYS))
    make_stores(args, ctx)
    path = rows_path(args)
    rows = Rows(path)
    session = Session(suite, args, ctx, rows)
    kept = suite.run(session)
    meta = {"suite": suite.NAME, "command": cmdline,
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "machine": machine(), "config": suite.config(args), "notes": session.notes,
            "results": shown_path(path), "options": options(args), **session.meta}
    rows.close(meta)
    out = args.out or os.path.splitext(path)[0] + ".md"
    # A report in the book links the plots in docs/img, relative to its own folder (docs/lab/ too).
    docs = os.path.join(REPO, "docs")
    if os.path.abspath(out).startswith(docs + os.sep):
        meta["plot"] = os.path.relpath(os.path.join(docs, "img"), os.path.dirname(os.path.abspath(out))) + "/"
    write_markdown(out, suite.markdown(meta, kept))
    print(f"[run] rows: {path}; report: {out}", file=sys.stderr)
    return 0


def cmd_engines(argv):
    ap = argparse.ArgumentParser(prog="bench/run.py engines", description="The engine registry "
                                 "(bench/engines.py): each engine, what runs it, and whether it can run here.")
    ap.add_argument("--cli", default=default_cli())
    ap.add_argument("--python", default=default_python())
    ap.add_argument("--reference-python", default=None)
    args = ap.parse_args(argv)
    ctx = registry.Context(cli=args.cli, python=args.python,
                           reference_python=args.reference_python or default_reference_python())
    in_suites = {name: [s for s, m in SUITES.items()
                        if name in m.CHOICES + m.ALWAYS + getattr(m, "VARIANTS", [])] for name in registry.REGISTRY}
    for e in registry.REGISTRY.values():
        why = e.unavailable(ctx)
        print(f"{e.name:20s} {e.runner:12s} {'ok' if not why else 'skipped: ' + why}")
        print(f"{'':20s} {e.about}; suites: {', '.join(in_suites[e.name]) or '-'}")
    return 0


def cmd_report(argv):
    ap = argparse.ArgumentParser(prog="bench/run.py report", description="Write a rows file's report again, "
                                 "with today's code (rows of earlier drivers included; their engine names are "
                                 "read as today's).")
    ap.add_argument("rows")
    ap.add_argument("--suite", choices=list(SUITES), help="the suite that wrote the rows (default: the "
                    "rows' meta line; rows written before it need this)")
    ap.add_argument("--out", default=None, help="default: stdout only")
    ap.add_argument("--stores", default=None, help="the stores' folder, for what rows without a meta line "
                    "lack (the cloud suite's compression ratios, from the stores' markers)")
    args = ap.parse_args(argv)
    meta, rows = load_rows(args.rows)
    name = args.suite or meta.get("suite") or (rows[0].get("suite") if rows else None)
    if name not in SUITES:
        ap.error(f"{args.rows} does not say which suite wrote it (no meta line): give --suite")
    suite = SUITES[name]
    if not meta.get("options"):
        _, defaults = parse([name] + (["--stores", args.stores or "."] if suite.STORES is not None else []))
        meta = {**meta, "options": options(defaults)}
    md = suite.markdown(meta, rows)
    if args.out:
        write_markdown(args.out, md)
    else:
        print(md)
    return 0


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] == "engines":
        return cmd_engines(argv[1:])
    if argv and argv[0] == "report":
        return cmd_report(argv[1:])
    suite, args = parse(argv)
    return run_suite(suite, args, command_line(os.path.join(HERE, "run.py"), argv))


if __name__ == "__main__":
    sys.exit(main())
