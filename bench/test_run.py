"""bench/report.py and bench/run.py's pure parts on fabricated rows (no engine runs).

    python3 -m unittest bench/test_run.py      (from the repo root; stdlib only)
"""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import report  # noqa: E402
import run  # noqa: E402


def run_row(store, engine, rnd, mbs, ttfb=1.0, rss=1e9, user=2.0, sys_s=0.5, est=None, error=None):
    """A run row with one epoch per MB/s figure (cold first)."""
    result = None if error else {
        "epochs": [{"epoch": k, "kind": "cold" if k == 0 else "warm", "mb_per_s": v,
                    "ttfb_s": ttfb, "limiting_stage": "decode" if k == 0 else "gather"}
                   for k, v in enumerate(mbs)],
        "peak_rss_bytes": rss, "describe_estimated_peak_bytes": est}
    return {"store": store, "engine": engine, "round": rnd, "result": result, "error": error,
            "wall_s": 3.0, "user_s": user, "sys_s": sys_s, "tree_peak_rss_bytes": 0}


def decode_row(store, rnd, mbs):
    return {"store": store, "engine": report.DECODE, "round": rnd,
            "result": {"decode_limit_mb_per_s": mbs, "threads": 2}}


ROWS = (
    [run_row("c8", "ours", r, [v, 10 * v, 20 * v], ttfb=0.2, rss=5e8, est=1e9)
     for r, v in enumerate([1000, 1200, 800])]
    + [run_row("c8", "anchor", r, [v, 5 * v, 5 * v], ttfb=0.8, rss=1e9)
       for r, v in enumerate([500, 400, 600])]
    + [run_row("c8", "rs-python", 0, [], error="exit 1: boom")]
    + [decode_row("c8", r, v) for r, v in enumerate([2000, 2500, 1500])]
)


class Stats(unittest.TestCase):
    def test_stat_median_and_spread(self):
        st = report.stat([3.0, None, 1.0, 2.0])
        self.assertEqual((st["median"], st["min"], st["max"], st["n"]), (2.0, 1.0, 3.0, 3))
        self.assertAlmostEqual(st["spread"], 3.0)
        self.assertIsNone(report.stat([None]))

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
        items = ["decode_limit", "ours", "rs-python", "anchor"]
        firsts = [run.rotated(items, k)[0] for k in range(4)]
        self.assertEqual(sorted(firsts), sorted(items))
        self.assertEqual(sorted(run.rotated(items, 5)), sorted(items))


class Markdown(unittest.TestCase):
    def setUp(self):
        meta = {"command": "python3 bench/run.py --quick", "date": "d", "machine": "m",
                "config": "c", "memory": ["MemTotal 1 GiB"], "notes": ["n"],
                "results": "bench/results/quick.jsonl"}
        self.md = report.markdown(meta, ROWS)

    def table(self, title):
        lines = self.md.split(f"## {title}\n\n", 1)[1].split("\n## ", 1)[0].splitlines()
        return [ln for ln in lines if ln.startswith("|")]

    def test_tables_are_well_formed(self):
        for title in ("Medians and spread", "Ratios of medians"):
            t = self.table(title)
            widths = {ln.count("|") for ln in t}
            self.assertEqual(len(widths), 1, f"{title}: ragged rows\n" + "\n".join(t))

    def test_ratios_against_anchor_and_decode_limit(self):
        ours = next(ln for ln in self.table("Ratios of medians") if "| ours" in ln)
        cells = [c.strip() for c in ours.strip("|").split("|")]
        # cold 1000/500, warm1 10000/2500, warm2 20000/2500, TTFB 0.2/0.8, RSS 0.5/1,
        # ×CLI —, —, % decode limit 1000/2000, est/RSS 1e9/5e8
        self.assertEqual(cells[2:], ["2.00", "4.00", "8.00", "0.25", "0.50", "—", "—", "50%", "2.00"])

    def test_cells_show_median_and_spread(self):
        ours = next(ln for ln in self.table("Medians and spread") if "| ours" in ln)
        self.assertIn("1000 [800–1200 ×1.50]", ours)
        failed = next(ln for ln in self.table("Medians and spread") if "rs-python" in ln)
        self.assertIn("0/1", failed)
        self.assertIn("exit 1: boom", failed)
        self.assertIn("- command (from the repo root): `python3 bench/run.py --quick`", self.md)
        self.assertIn("2000 [1500–2500 ×1.67] MB/s", self.md)


if __name__ == "__main__":
    unittest.main()
