"""bench/run.py without running an engine: the reports on fabricated rows and on committed ones,
the engine registry's commands and skip reasons, every suite's options and commands, the rows
files. Stdlib only; seconds. CI runs it in the check phase (scripts/test.sh).

    python3 -m unittest bench/test_run.py      (from the repo root)
"""
import contextlib
import io
import json
import os
import re
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import engines  # noqa: E402
import report  # noqa: E402
import run  # noqa: E402
from suites import SUITES, cloud, local, python  # noqa: E402
from suites.common import rotated  # noqa: E402

CLI, CLI_B, PY, REF = "/opt/ib/insitubatch", "/opt/ib/insitubatch-b", "/opt/py/bench", "/opt/py/ref"
URL = "file:///data/c8.zarr"


def ctx(**kw):
    """A context whose programs need not exist (commands are only built, never run)."""
    c = engines.Context(**{"cli": CLI, "python": PY, "reference_python": REF, "check_imports": False, **kw})
    c.cli = c.cli or CLI  # as if the CLI were there
    return c


def parse(*argv):
    with contextlib.redirect_stderr(io.StringIO()):
        return run.parse(list(argv))


def parse_error(*argv):
    """The message argparse exits with."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), unittest.TestCase().assertRaises(SystemExit):
        run.parse(list(argv))
    return err.getvalue()


def run_row(store, engine, rnd, mbs, ttfb=1.0, rss=1e9, user=2.0, sys_s=0.5, est=None, error=None, **extra):
    """A run row with one epoch per MB/s figure (cold first)."""
    result = None if error else {
        "epochs": [{"epoch": k, "kind": "cold" if k == 0 else "warm", "mb_per_s": v,
                    "ttfb_s": ttfb, "limiting_stage": "decode" if k == 0 else "gather"}
                   for k, v in enumerate(mbs)],
        "peak_rss_bytes": rss, "describe_estimated_peak_bytes": est}
    return {"store": store, "engine": engine, "round": rnd, "result": result, "error": error,
            "wall_s": 3.0, "user_s": user, "sys_s": sys_s, "tree_peak_rss_bytes": 0, **extra}


def decode_row(store, rnd, mbs, **extra):
    return {"store": store, "engine": report.DECODE, "round": rnd,
            "result": {"decode_limit_mb_per_s": mbs, "threads": 2}, **extra}


ROWS = (
    [run_row("c8", "ours", r, [v, 10 * v, 20 * v], ttfb=0.2, rss=5e8, est=1e9)
     for r, v in enumerate([1000, 1200, 800])]
    + [run_row("c8", "reference", r, [v, 5 * v, 5 * v], ttfb=0.8, rss=1e9)
       for r, v in enumerate([500, 400, 600])]
    + [run_row("c8", "rs-python", 0, [], error="exit 1: boom")]
    + [decode_row("c8", r, v) for r, v in enumerate([2000, 2500, 1500])]
)
META = {"command": "python3 bench/run.py --quick", "date": "d", "machine": "m", "config": "c",
        "memory": ["MemTotal 1 GiB"], "notes": ["n"], "results": "bench/rows/x.jsonl"}


def tables(md):
    """Each markdown table of ``md``: its lines."""
    out, cur = [], []
    for ln in md.splitlines() + [""]:
        if ln.startswith("|"):
            cur.append(ln)
        elif cur:
            out.append(cur)
            cur = []
    return out


def cells(line):
    return [c.strip() for c in line.strip().strip("|").split("|")]


class WellFormed:
    def assert_tables(self, md, least=1):
        ts = tables(md)
        self.assertGreaterEqual(len(ts), least, md)
        for t in ts:
            widths = {ln.count("|") for ln in t}
            self.assertEqual(len(widths), 1, "ragged table\n" + "\n".join(t))
        return ts


# ------------------------------------------------------------------ the shared report
class Stats(unittest.TestCase):
    def test_stat_median_and_spread(self):
        st = report.stat([3.0, None, 1.0, 2.0])
        self.assertEqual((st["median"], st["min"], st["max"], st["n"]), (2.0, 1.0, 3.0, 3))
        self.assertAlmostEqual(st["spread"], 3.0)
        self.assertIsNone(report.stat([None]))

    def test_cell_shows_median_spread_or_one_value(self):
        self.assertEqual(report.cell(report.stat([800, 1000, 1200])), "1000 [800–1200 ×1.50]")
        self.assertEqual(report.cell(report.stat([5.0]), "{:.2f}"), "5.00")
        self.assertEqual(report.cell(None), "n/a")

    def test_epoch_labels_follow_position(self):
        self.assertEqual([report.epoch_label(k) for k in range(3)], ["cold", "warm1", "warm2"])
        res = ROWS[0]["result"]
        self.assertEqual(report.epoch_of(res, "warm")["mb_per_s"], 10000)  # "warm" = warm1
        self.assertEqual(report.epoch_of(res, "warm2")["mb_per_s"], 20000)

    def test_group_medians_and_failures(self):
        agg = report.group(ROWS)
        ours = agg["c8"]["ours"]
        self.assertEqual(ours["cold_mbs"]["median"], 1000)
        self.assertAlmostEqual(ours["cold_mbs"]["spread"], 1.5)
        self.assertEqual(ours["warm2_mbs"]["median"], 20000)
        self.assertEqual(ours["cold_stage"], "decode")
        self.assertEqual(agg["c8"]["rs-python"]["ok"], 0)
        self.assertEqual(report.decode_limits(ROWS)["c8"]["stat"]["median"], 2000)
        self.assertEqual(report.warm_labels(agg), ["warm1", "warm2"])

    def test_rotation_interleaves(self):
        items = ["decode_limit", "ours", "rs-python", "reference"]
        firsts = [rotated(items, k)[0] for k in range(4)]
        self.assertEqual(sorted(firsts), sorted(items))
        self.assertEqual(sorted(rotated(items, 5)), sorted(items))
        self.assertEqual(rotated({"a": 1, "b": 2}, 1), ["b", "a"])

    def test_command_line_is_portable(self):
        cache = os.environ.get("INSITUBATCH_CACHE") or os.path.expanduser("~/.cache/insitubatch")
        line = report.command_line(os.path.join(HERE, "run.py"), ["--stores", os.path.join(cache, "s"), "--out",
                                                                  os.path.join(REPO, "docs", "b.md")])
        self.assertEqual(line, "python3 bench/run.py --stores $INSITUBATCH_CACHE/s --out docs/b.md")
        self.assertEqual(report.shown_path(os.path.join(cache, "bench-rows", "x.jsonl")),
                         "$INSITUBATCH_CACHE/bench-rows/x.jsonl")


class LocalReport(unittest.TestCase, WellFormed):
    def setUp(self):
        self.md = local.markdown(META, ROWS)

    def table(self, title):
        part = self.md.split(f"## {title}\n\n", 1)[1].split("\n## ", 1)[0]
        return tables(part)[0]

    def test_tables_are_well_formed(self):
        self.assert_tables(self.md, least=2)

    def test_ratios_against_the_reference_and_the_decode_limit(self):
        ours = next(ln for ln in self.table("Ratios of medians") if "| ours" in ln)
        # cold 1000/500, warm1 10000/2500, warm2 20000/2500, TTFB 0.2/0.8, RSS 0.5/1,
        # ×CLI —, —, % decode limit 1000/2000, est/RSS 1e9/5e8
        self.assertEqual(cells(ours)[2:], ["2.00", "4.00", "8.00", "0.25", "0.50", "—", "—", "50%", "2.00"])
        ref = next(ln for ln in self.table("Ratios of medians") if "insitubatch 0.2.0" in ln)
        self.assertEqual(cells(ref)[2:7], ["—"] * 5)

    def test_cells_show_median_and_spread(self):
        ours = next(ln for ln in self.table("Medians and spread") if "| ours" in ln)
        self.assertIn("1000 [800–1200 ×1.50]", ours)
        failed = next(ln for ln in self.table("Medians and spread") if "rs-python" in ln)
        self.assertIn("0/1", failed)
        self.assertIn("exit 1: boom", failed)
        self.assertIn("- command (from the repo root): `python3 bench/run.py --quick`", self.md)
        self.assertIn("2000 [1500–2500 ×1.67] MB/s", self.md)

    def test_cpu_per_gb_beside_the_decode_alone(self):
        self.assertNotIn("## CPU per decoded GB", self.md)  # no engine reported its CPU

        def with_cpu(row, per_gb):
            for e, v in zip(row["result"]["epochs"], per_gb):
                e.update(decoded_bytes=2e9, cpu_s_per_gb=v, cpu_sys_s=v / 4 * 2)
            return row

        rows = ([with_cpu(run_row("c8", "ours", r, [1000, 2000]), [v, 1.0]) for r, v in enumerate([3.0, 2.0, 4.0])]
                + [run_row("c8", "reference", 0, [500, 600])]
                + [decode_row("c8", r, 2000) for r in range(2)])
        for r, v in zip(rows[-2:], [1.5, 2.5]):
            r["result"]["decode_cpu_s_per_gb"] = v
        md = local.markdown(META, rows)
        self.assert_tables(md, least=3)
        part = md.split("## CPU per decoded GB\n\n", 1)[1].split("\n## ", 1)[0]
        t = tables(part)[0]
        decode = next(ln for ln in t if "decode alone" in ln)
        self.assertEqual(cells(decode)[2], "2.00 [1.50–2.50 ×1.67]")
        ours = next(ln for ln in t if "| ours" in ln)
        # cold 3.00 [2.00–4.00], its system part a quarter; warm1 1.00; × decode 3/2
        self.assertEqual(cells(ours)[2:], ["3.00 [2.00–4.00 ×2.00]", "0.75 [0.50–1.00 ×2.00]",
                                            "1.00 [1.00–1.00 ×1.00]", "0.25 [0.25–0.25 ×1.00]", "1.50"])
        self.assertFalse(any("insitubatch 0.2.0" in ln for ln in t))  # it reported no CPU

    def test_the_python_project_is_the_reference_implementation(self):
        self.assertNotIn("anchor", self.md.lower())
        self.assertIn("insitubatch 0.2.0 (the reference implementation)", self.md)


class CommittedRows(unittest.TestCase):
    """The report reads the rows earlier drivers committed (engine `anchor` = `reference`)."""

    def test_old_names_read_as_todays(self):
        self.assertEqual([engines.canonical(n) for n in ("anchor", "anchor-py", "rust-cli", "ours")],
                         ["reference", "reference-py", "ours", "ours"])

    def test_the_full_cache_run_renders_as_docs_record_it(self):
        meta, rows = report.load_rows(os.path.join(HERE, "rows", "2026-12-01-full-cache.jsonl"))
        self.assertEqual(meta, {})
        self.assertIn("reference", {r["engine"] for r in rows})
        self.assertNotIn("anchor", {r["engine"] for r in rows})
        md = local.markdown({}, rows)
        rendered = tables(md.split("## Medians and spread", 1)[1])[0]
        with open(os.path.join(REPO, "docs", "lab", "benchmarks.md")) as f:
            page = f.read()
        recorded = tables(page.split("## Medians and spread", 1)[1])[0]
        self.assertEqual(rendered, recorded)

    def test_report_command_on_old_rows(self):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            self.assertEqual(run.main(["report", os.path.join(HERE, "rows", "2026-12-05-patches-k1.jsonl"),
                                       "--suite", "patches"]), 0)
        row = next(ln for ln in out.getvalue().splitlines() if ln.startswith("| c8s | rs-patch |"))
        self.assertEqual(cells(row)[2], "252 [240–267 ×1.11]")  # docs/patches.md, K = 1: 252 [240–267]

    def test_report_needs_the_suite_of_rows_without_meta(self):
        err = io.StringIO()
        with contextlib.redirect_stderr(err), self.assertRaises(SystemExit):
            run.main(["report", os.path.join(HERE, "rows", "2026-12-05-patches-k1.jsonl")])
        self.assertIn("give --suite", err.getvalue())


class RowsFiles(unittest.TestCase):
    def test_rows_then_meta_round_trip(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "sub", "r.jsonl")
            rows = report.Rows(path)
            rows.add(dict(run_row("c8", "anchor", 0, [1.0]), stdout="x" * 10, stderr="e" * 3000))
            rows.close({"suite": "local", "command": "c"})
            with open(path) as f:
                first = json.loads(f.readline())
            self.assertNotIn("stdout", first)
            self.assertEqual(len(first["stderr_tail"]), 2000)
            meta, back = report.load_rows(path)
            self.assertEqual(meta["suite"], "local")
            self.assertEqual([r["engine"] for r in back], ["reference"])

    def test_rows_are_written_with_portable_paths(self):
        cache = os.environ.get("INSITUBATCH_CACHE") or os.path.expanduser("~/.cache/insitubatch")
        store = os.path.join(cache, "bench-stores-320", "c8.zarr")
        cli = os.path.join(tempfile.gettempdir(), "tgt", "release", "insitubatch")
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "r.jsonl")
            rows = report.Rows(path)
            rows.add(dict(run_row("c8", "ours", 0, [1.0]), url="file://" + store,
                          cmd=[cli, "bench", "file://" + store, os.path.join(REPO, "bench", "py_engines.py")]))
            rows.close({"suite": "local", "command": f"python3 bench/run.py --cli {cli}"})
            with open(path) as f:
                text = f.read()
            meta, back = report.load_rows(path)
        for machine in (cache, tempfile.gettempdir(), REPO):
            self.assertNotIn(machine + "/", text)
        self.assertEqual(back[0]["url"], "file://$INSITUBATCH_CACHE/bench-stores-320/c8.zarr")
        self.assertEqual(back[0]["cmd"], ["$TMPDIR/tgt/release/insitubatch", "bench", back[0]["url"],
                                          "bench/py_engines.py"])
        self.assertEqual(meta["command"], "python3 bench/run.py --cli $TMPDIR/tgt/release/insitubatch")

    def test_a_broken_line_says_where(self):
        with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
            f.write('{"engine": "ours"}\nnot json\n')
        try:
            with self.assertRaises(SystemExit) as cm:
                report.load_rows(f.name)
            self.assertIn("line 2", str(cm.exception))
        finally:
            os.unlink(f.name)

    def test_rows_go_to_bench_rows_dated_and_never_over_a_run(self):
        _, args = parse("--stores", "/s")
        _, quick = parse("--quick")
        with tempfile.TemporaryDirectory() as d:
            old = run.ROWS_DIR
            run.ROWS_DIR = d
            try:
                first = run.rows_path(args, today="2026-12-06")
                self.assertEqual(first, os.path.join(d, "2026-12-06-local.jsonl"))
                open(first, "w").close()
                self.assertEqual(run.rows_path(args, today="2026-12-06"), os.path.join(d, "2026-12-06-local-2.jsonl"))
                args.label = "full-cache"
                self.assertEqual(run.rows_path(args, today="2026-12-06"),
                                 os.path.join(d, "2026-12-06-local-full-cache.jsonl"))
            finally:
                run.ROWS_DIR = old
        self.assertEqual(run.ROWS_DIR, os.path.join(HERE, "rows"))
        # A smoke never writes into the tree.
        self.assertTrue(run.rows_path(quick, today="d").startswith(run.QUICK_ROWS_DIR + os.sep))
        self.assertFalse(run.QUICK_ROWS_DIR.startswith(REPO + os.sep))
        args.rows = "/tmp/x.jsonl"
        self.assertEqual(run.rows_path(args), "/tmp/x.jsonl")


# ------------------------------------------------------------------ the registry
class Registry(unittest.TestCase):
    def k(self, **kw):
        return engines.Knobs(**{"epochs": 3, **kw})

    def test_the_cli_runs_insitubatch_bench(self):
        cmd = engines.engine("ours").command(ctx(), URL, self.k(budget_bytes=7))
        self.assertEqual(cmd, [CLI, "bench", URL, "--var", "t2m", "--batch-size", "32", "--block-chunks", "16",
                               "--max-inflight", "32", "--epochs", "3", "--cache-budget-bytes", "7", "--json"])

    def test_variants_of_ours(self):
        cmds = engines.commands(ctx(cli_b=CLI_B, first_block_chunks=1), ["ours", "ours-b", "ours-fb"], URL, self.k())
        self.assertEqual(list(cmds), ["ours", "ours-b", "ours-fb1"])
        self.assertEqual(cmds["ours-b"], [CLI_B] + cmds["ours"][1:])
        self.assertEqual(cmds["ours-fb1"][-3:], ["--first-block-chunks", "1", "--json"])

    def test_the_reference_implementation_runs_in_its_venv(self):
        cmd = engines.engine("reference").command(ctx(), URL, self.k())
        self.assertEqual(cmd[:4], [REF, os.path.join(HERE, "reference_bench.py"), "--url", URL])
        self.assertIn("--json", cmd)
        py = engines.engine("reference-py").command(ctx(), URL, self.k(compute_ms=20))
        self.assertEqual(py[:3], [REF, os.path.join(HERE, "py_engines.py"), "reference-py"])
        self.assertIn("--block-chunks", py)
        self.assertEqual(py[-2:], ["--compute-ms", "20"])

    def test_python_engines_take_only_their_knobs(self):
        rs = engines.engine("rs-python").command(ctx(), URL, self.k(budget_bytes=9, hold_batches=True))
        self.assertEqual(rs[:3], [PY, os.path.join(HERE, "py_engines.py"), "rs-python"])
        self.assertIn("--cache-budget-bytes", rs)
        self.assertEqual(rs[-1], "--hold-batches")
        torch = engines.engine("rs-torch").command(ctx(), URL, self.k(budget_bytes=9, max_batches=4))
        self.assertNotIn("--block-chunks", torch)  # py_engines.py refuses knobs for it
        self.assertNotIn("--cache-budget-bytes", torch)
        self.assertEqual(torch[-2:], ["--max-batches", "4"])

    def test_patch_engines_read_the_store_path(self):
        cmd = engines.engine("rs-patch").command(ctx(), URL, self.k(per_sample=1, xb_batches=3))
        self.assertEqual(cmd, [PY, os.path.join(HERE, "patch_engines.py"), "rs-patch", "--store", "/data/c8.zarr",
                               "--url", URL, "--per-sample", "1", "--xb-batches", "3"])

    def test_bounds(self):
        dec = engines.engine("decode_limit")
        self.assertEqual(dec.command(ctx(), "/data/c8.zarr", self.k()),
                         [CLI, "bench", URL, "--var", "t2m", "--decode-limit", "--json"])
        no_cli = engines.Context(cli="/nonexistent/insitubatch", python=PY, reference_python=REF)
        self.assertEqual(dec.command(no_cli, URL, self.k())[:2], [REF, os.path.join(HERE, "decode_limit.py")])
        probe = engines.engine("probe").command(ctx(), "http://h/c8.zarr", self.k())
        self.assertEqual(probe[:3] + probe[-2:], [CLI, "describe", "http://h/c8.zarr", "--probe", "--json"])

    def test_every_engine_builds_a_command(self):
        c = ctx(cli_b=CLI_B, first_block_chunks=2)
        for e in engines.REGISTRY.values():
            cmd = e.command(c, URL, self.k())
            self.assertTrue(cmd and all(isinstance(a, str) for a in cmd), e.name)
            self.assertTrue(e.about, e.name)

    def test_unknown_engine_names_the_known_ones(self):
        with self.assertRaises(ValueError) as cm:
            engines.engine("nope")
        self.assertIn("rs-python", str(cm.exception))


class SkipReasons(unittest.TestCase):
    def test_a_missing_cli_says_how_to_build_it(self):
        c = engines.Context(cli="/nonexistent/insitubatch", python=PY, reference_python=REF)
        why = engines.engine("ours").unavailable(c)
        self.assertIn("/nonexistent/insitubatch not found (--cli", why)
        self.assertIn("cargo build --release -p insitubatch-native --bin insitubatch", why)
        self.assertIn("--cli-b", engines.engine("ours-b").unavailable(ctx()))

    def test_a_missing_python_names_the_option(self):
        c = engines.Context(cli=CLI, python="/nonexistent/python", reference_python="/nonexistent/ref")
        self.assertEqual(engines.engine("rs-python").unavailable(c), "/nonexistent/python not found (--python)")
        self.assertIn("(--reference-python)", engines.engine("reference").unavailable(c))

    def test_a_module_that_does_not_import_is_named(self):
        c = engines.Context(cli=CLI, python=sys.executable, reference_python=sys.executable)
        why = c.python_missing(sys.executable, ("json", "no_such_module_for_bench"), "--python")
        self.assertIn("No module named 'no_such_module_for_bench'", why)
        self.assertIn("--python", why)
        self.assertIsNone(c.python_missing(sys.executable, ("json",), "--python"))

    def test_the_session_notes_every_skip(self):
        _, args = parse("--stores", "/s")
        c = engines.Context(cli="/nonexistent/insitubatch", python="/nonexistent/python",
                            reference_python=sys.executable, check_imports=False)
        s = run.Session(SUITES["local"], args, c, rows=None)
        with contextlib.redirect_stderr(io.StringIO()):
            kept = s.runnable(["decode_limit", "ours", "rs-python", "reference"])
        self.assertEqual(kept, ["decode_limit", "reference"])  # the decode limit falls back to Python
        self.assertEqual([n.split(":")[0] for n in s.notes], ["ours skipped", "rs-python skipped"])


# ------------------------------------------------------------------ the suites
class Suites(unittest.TestCase):
    def test_every_suite_parses_and_builds_its_commands(self):
        for name, suite in SUITES.items():
            argv = [name] + (["--stores", "/data"] if suite.STORES is not None else [])
            got, args = parse(*argv)
            self.assertIs(got, suite)
            self.assertEqual(args.reps, suite.REPS, name)
            cmds = suite.commands(args, ctx(), "/data/c8.zarr", URL)
            for key, cmd in cmds.items():
                self.assertTrue(all(isinstance(a, str) for a in cmd), (name, key))
            self.assertTrue(suite.config(args), name)
            if name != "faults":  # measured in the driver's own process
                self.assertTrue(cmds, name)

    def test_local_is_the_default_and_keeps_its_options(self):
        suite, args = parse("--stores", "/s", "--only", "c1", "--engines", "ours,anchor", "--cli-b", CLI_B,
                            "--first-block-chunks", "1", "--budget-bytes", "5", "--epochs", "2")
        self.assertIs(suite, local)
        self.assertEqual(args.engine_list, ["ours", "reference"])  # the old name still reads
        cmds = local.commands(args, ctx(cli_b=CLI_B, first_block_chunks=1), "c1", URL)
        self.assertEqual(list(cmds), ["decode_limit", "ours", "reference", "ours-b", "ours-fb1"])
        self.assertIn("--cache-budget-bytes", cmds["reference"])
        self.assertEqual(cmds["ours"][cmds["ours"].index("--epochs") + 1], "2")

    def test_quick_is_a_small_local_run_outside_the_tree(self):
        _, args = parse("--quick")
        self.assertEqual((args.only, args.samples, args.reps, args.epochs), ("c8", 48, 3, 2))
        self.assertTrue(args.stores.endswith("bench-stores-48"))

    def test_python_suite_adds_stall_runs(self):
        _, args = parse("python", "--stores", "/s", "--engines", "ours,reference,rs-python,xbatcher-torch-nw2",
                        "--compute-ms", "20", "--max-batches", "3")
        cmds = python.commands(args, ctx(), "c8", URL)
        self.assertEqual(list(cmds), ["ours", "reference", "rs-python", "xbatcher-torch-nw2", "stall:reference-py",
                                      "stall:rs-python", "stall:xbatcher-torch-nw2"])
        self.assertEqual(cmds["stall:reference-py"][0], REF)
        stall = cmds["stall:rs-python"]
        self.assertEqual(stall[stall.index("--epochs") + 1], "1")
        self.assertEqual(stall[-2:], ["--compute-ms", "20"])
        self.assertEqual(cmds["xbatcher-torch-nw2"][-2:], ["--max-batches", "3"])
        self.assertNotIn("--max-batches", cmds["rs-python"])
        _, none = parse("python", "--stores", "/s", "--compute-ms", "0")
        self.assertFalse([k for k in python.commands(none, ctx(), "c8", URL) if k.startswith("stall:")])

    def test_cloud_suite_reads_the_server_and_bounds_the_files(self):
        _, args = parse("cloud", "--stores", "/s", "--settings", "50ms", "--extra", "--coalesce-max-bytes 9")
        cmds = cloud.commands(args, ctx(), "/s/c8.zarr", "http://127.0.0.1:1/c8.zarr")
        self.assertEqual(list(cmds), ["ours", "rs-python", "reference", "decode_limit", "probe"])
        self.assertEqual(cmds["ours"][-3:], ["--coalesce-max-bytes", "9", "--json"])
        self.assertEqual(cmds["decode_limit"][2], "file:///s/c8.zarr")
        self.assertEqual(cmds["probe"][2], "http://127.0.0.1:1/c8.zarr")
        self.assertEqual(cmds["ours"][cmds["ours"].index("--epochs") + 1], "1")

    def test_patches_on_the_cloud_leave_xbatcher_out(self):
        _, args = parse("patches", "--stores", "/s", "--cloud", "50ms")
        self.assertEqual(args.engine_list, ["rs-patch", "rs-patch-gap0", "rs-crop"])
        cmd = SUITES["patches"].commands(args, ctx(), "/s/c8s.zarr", "http://127.0.0.1:1/c8s.zarr")["rs-patch"]
        # The touched tiles are read from the store's files; the engine reads the server.
        self.assertEqual(cmd[cmd.index("--store") + 1], "/s/c8s.zarr")
        self.assertEqual(cmd[cmd.index("--url") + 1], "http://127.0.0.1:1/c8s.zarr")

    def test_ranks_share_the_cores(self):
        _, args = parse("ranks", "--stores", "/s", "--world-sizes", "1,2")
        cmds = SUITES["ranks"].commands(args, ctx(), "c8", URL)
        self.assertEqual(list(cmds), ["ours-w1-r0", "ours-w2-r0", "ours-w2-r1"])
        r1 = cmds["ours-w2-r1"]
        self.assertEqual(r1[r1.index("--rank"):r1.index("--rank") + 4], ["--rank", "1", "--world-size", "2"])

    def test_cache_and_slow_loop_commands(self):
        _, args = parse("cache", "--stores", "/s", "--cache-root", "/c")
        cmds = SUITES["cache"].commands(args, ctx(), "c8", URL)
        self.assertIn("/c/cache-ours", cmds["ours"])
        self.assertIn("--persist", cmds["reference"])
        _, args = parse("slow-loop", "--stores", "/s", "--steps", "0,1.5")
        cmds = SUITES["slow-loop"].commands(args, ctx(), "c8", URL)
        self.assertEqual(cmds["step 1.5"][-3:], ["--compute-ms", "1500", "--hold-batches"])

    def test_bad_options_are_clear_errors(self):
        cases = [
            (["--stores", "/s", "--engines", "ours,nope"], "unknown engine 'nope'"),
            (["--stores", "/s", "--engines", "rs-torch"], "not in the local suite"),
            (["--stores", "/s", "--engines", "rs-python", "--cli-b", CLI_B], "add ours to --engines"),
            (["--stores", "/s", "--page-cache-fill", "4"], "needs --ballast"),
            (["--reps", "2"], "--stores DIR is required"),
            (["--stores", "/s", "--reps", "0"], "--reps must be at least 1"),
            (["cloud", "--stores", "/s", "--settings", "1ms"], "unknown setting '1ms'"),
            (["patches", "--stores", "/s", "--cloud", "1ms"], "unknown --cloud setting"),
            (["ranks", "--stores", "/s", "--world-sizes", "a"], "--world-sizes takes whole numbers"),
            (["slow-loop", "--stores", "/s", "--steps", "-1"], "none below 0"),
            (["objects", "--stores", "/s", "--engines", "rs-obstore"], "keep it in --engines"),
            (["workers", "--stores", "/s", "--epochs", "1"], "at least 2"),
        ]
        for argv, want in cases:
            self.assertIn(want, parse_error(*argv), argv)
        with self.assertRaises(SystemExit) as cm:
            run.split_argv(["lokal"])
        self.assertIn("the suites are local, python, cloud", str(cm.exception))


# ------------------------------------------------------------------ each suite's report
class SuiteReports(unittest.TestCase, WellFormed):
    def test_python(self):
        rows = [run_row("c8", "ours", 0, [100, 200], kind="throughput"),
                run_row("c8", "reference", 0, [50, 100], kind="throughput"),
                dict(run_row("c8", "rs-python", 0, [150, 180], kind="throughput")),
                run_row("c8", "tensorstore", 0, [], error="no module", kind="throughput"),
                run_row("c8", "rs-python", 0, [10], kind="stall"),
                run_row("c8", "reference-py", 0, [10], kind="stall")]
        rows[2]["result"]["epochs"][0]["batches"] = 23
        rows[4]["result"]["epochs"][0]["stall_pct"] = 80.0
        rows[5]["result"]["epochs"][0]["stall_pct"] = 90.0
        md = python.markdown({**META, "options": {"compute_ms": 20}}, rows)
        t = self.assert_tables(md)[0]
        self.assertEqual([cells(ln)[1] for ln in t[2:]], ["ours (CLI)", "insitubatch 0.2.0", "rs-python", "tensorstore"])
        rs = cells(next(ln for ln in t if "| rs-python" in ln))
        self.assertEqual(rs[6:], ["80%", "1.50", "0.90", "3.00", "1.80", "23"])
        ref = cells(next(ln for ln in t if "insitubatch 0.2.0" in ln))
        self.assertEqual(ref[6], "90%")
        self.assertIn("n/a (no module)", next(ln for ln in t if "tensorstore" in ln))
        self.assertIn("c8: cold 1.50×, warm 0.90×", md)

    def test_cloud(self):
        def served(n):
            return {"served": {"requests": n, "cpu_s": 0.5}, "setting": "50ms"}
        rows = [run_row("c8", "ours", 0, [600], **served(41)), run_row("c8", "reference", 0, [300], **served(47)),
                decode_row("c8", 0, 1000, setting="50ms"),
                {"store": "c8", "engine": "probe", "round": 0, "setting": "50ms",
                 "result": {"probe": {"predicted": {"mb_per_s": 540}}}, **served(3)}]
        md = cloud.markdown({**META, "options": {"settings": "50ms"}, "ratios": {"c8": 2.25}}, rows)
        t = self.assert_tables(md)[0]
        line = cells(t[2])
        self.assertEqual(line[:6], ["c8", "900 (900, 1000)", "600", "300", "2.00", "67%"])
        self.assertEqual(line[6], "540 (0.90)")
        self.assertEqual(line[7], "41 / 47")
        self.assertEqual(line[-1], "n/a / n/a")  # no engine reported its CPU
        rows[0]["result"]["epochs"][0].update(cpu_s_per_gb=3.0)
        rows[2]["result"]["decode_cpu_s_per_gb"] = 2.0
        md = cloud.markdown({**META, "options": {"settings": "50ms"}, "ratios": {"c8": 2.25}}, rows)
        self.assertEqual(cells(tables(md)[0][2])[-1], "3.00 (×1.50) / n/a")

    def test_the_rest(self):
        fabricated = {
            "patches": [{"store": "c8s", "engine": e, "round": r, "result": {"rows": 100 * (i + 1), "secs": 1.0,
                                                                            "fetched": 2e6, "touched": 1e6}}
                        for i, e in enumerate(["xbatcher-nw2", "rs-patch"]) for r in range(2)],
            "ranks": [{"store": "c8", "engine": "ours", "round": 0, "slot": w, "world": w,
                       "job": {"mb_per_s": 100.0 * w, "reads": 40, "samples": 320, "dropped": 0}} for w in (1, 2)],
            "cache": [dict(run_row("c8", e, 0, [v]), phase=p, cache_bytes=3e9)
                      for e in ("ours", "reference") for p, v in (("write", 100), ("reopen", 1000))],
            "objects": [run_row("c8", e, r, [v]) for r in range(2) for e, v in (("rs-python", 100), ("rs-obstore", 90))],
            "slow-loop": [dict(run_row("c8", "rs-python", 0, [1], rss=2**30, est=2**31), step_s=1.5)],
            "workers": [{"store": "c8", "engine": "torch-workers", "round": 0, "result": {"configs": [
                {"num_workers": n, "epochs": [{"mb_per_s": 10.0}], "warm_mb_per_s": 20.0} for n in (0, 1, 2)]}}],
            "faults": [{"store": "-", "engine": w, "round": 0, "sys_s_per_gib": 0.3, "error": None}
                       for w in ("4k-touch", "4k-populate", "thp-touch", "thp-populate")],
        }
        want = {"patches": "| c8s | rs-patch | 200 [200–200 ×1.00] | 2.0× | 2 | 1 | 2.00 |",
                "ranks": "| 2 | 200 | 2.00 | 40 | 320 + 0 |",
                "cache": "| c8 | 100 / 1000 | 100 / 1000 | 1.00 |",
                "objects": "| c8 | rs-obstore | obstore LocalStore | 90 | 90–90 | 0.90 |",
                "slow-loop": "| c8 | 1.5 | 0 | None | 1024.0 | 2048.0 | 2.00 |",
                "workers": "| c8 | 2 | 10 | 20 [20–20] |",
                "faults": "| thp-populate | 0.30 | 0.30–0.30 |"}
        for name, rows in fabricated.items():
            md = SUITES[name].markdown({**META, "options": {}}, rows)
            self.assert_tables(md)
            self.assertIn(want[name], md, name)


# ------------------------------------------------------------------ the tree around it
class Mentions(unittest.TestCase):
    def test_every_bench_script_named_in_the_tree_exists(self):
        try:
            files = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                                   capture_output=True, text=True, check=True).stdout.split()
        except (OSError, subprocess.CalledProcessError) as e:
            self.skipTest(f"no git checkout to list files from ({e})")
        missing, gone = set(), "bench/" + "results"
        for rel in files:
            # The rows of past runs record the commands of their day.
            if rel.startswith("bench/rows/") or not rel.endswith((".md", ".py", ".rs", ".sh", ".js", ".mjs", "justfile")):
                continue
            try:
                with open(os.path.join(REPO, rel), encoding="utf-8") as f:
                    text = f.read()
            except (OSError, UnicodeDecodeError):
                continue
            for name in re.findall(r"\bbench/([\w-]+\.(?:py|sh|txt))", text):
                if not os.path.exists(os.path.join(HERE, name)):
                    missing.add(f"{rel}: bench/{name}")
            if gone in text:
                missing.add(f"{rel}: {gone} (rows live in bench/rows)")
        self.assertEqual(sorted(missing), [])


if __name__ == "__main__":
    unittest.main()
