"""scripts/licenses.py's expression rule and report, on SBOMs written here (stdlib, a second):
run by scripts/test.sh's check phase."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from licenses import expression_allowed, licenses_of  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
ALLOW = {"MIT", "Apache-2.0", "Apache-2.0 WITH LLVM-exception", "BSD-3-Clause", "Unicode-3.0"}


class ExpressionRule(unittest.TestCase):
    def test_or_needs_one_and_needs_all(self):
        self.assertTrue(expression_allowed("MIT OR GPL-3.0-only", ALLOW))
        self.assertFalse(expression_allowed("MIT AND GPL-3.0-only", ALLOW))
        self.assertTrue(expression_allowed("(MIT OR Apache-2.0) AND Unicode-3.0", ALLOW))
        self.assertTrue(expression_allowed("Apache-2.0 WITH LLVM-exception OR GPL-2.0-only", ALLOW))
        self.assertFalse(expression_allowed("GPL-2.0-only WITH Classpath-exception-2.0", ALLOW))
        self.assertTrue(expression_allowed("Apache-2.0+", ALLOW))

    def test_free_text_and_broken_expressions_are_refused(self):
        for text in ["Some custom license, see LICENSE", "MIT OR", "(MIT", "MIT Apache-2.0", ""]:
            self.assertFalse(expression_allowed(text, ALLOW), text)

    def test_cyclonedx_license_shapes(self):
        c = {"licenses": [{"expression": "MIT OR Apache-2.0"}, {"license": {"id": "BSD-3-Clause"}},
                          {"license": {"name": "BSD License"}},
                          {"license": {"name": "License :: OSI Approved :: MIT License"}},
                          {"license": {"name": "License :: Other/Proprietary License"}}]}
        self.assertEqual(
            licenses_of(c),
            ["MIT OR Apache-2.0", "BSD-3-Clause", "BSD-3-Clause", "MIT", "License :: Other/Proprietary License"],
        )


class Report(unittest.TestCase):
    def test_a_refused_license_fails_and_every_component_is_reported(self):
        sbom = {
            "metadata": {"component": {"name": "insitubatch-rs", "version": "0.1.0",
                                       "licenses": [{"license": {"id": "MIT"}}]}},
            "components": [
                {"name": "numpy", "version": "2.1.0", "licenses": [{"expression": "BSD-3-Clause"}]},
                {"name": "copyleft", "version": "1.0", "licenses": [{"license": {"id": "GPL-3.0-only"}}]},
                {"name": "silent", "version": "2.0"},
            ],
        }
        with tempfile.TemporaryDirectory() as d:
            path = Path(d, "wheel.cdx.json")
            path.write_text(json.dumps(sbom))
            report = Path(d, "LICENSES.md")
            run = subprocess.run(
                [sys.executable, str(ROOT / "scripts/licenses.py"), "--allow", str(ROOT / "deny.toml"),
                 "--report", str(report), str(path)],
                capture_output=True, text=True, check=False,
            )
            self.assertEqual(run.returncode, 1, run.stderr)
            self.assertIn("copyleft 1.0: GPL-3.0-only", run.stderr)
            self.assertIn("silent 2.0: (none declared)", run.stderr)
            self.assertNotIn("numpy", run.stderr)
            text = report.read_text()
            for row in ["| insitubatch-rs | 0.1.0 | MIT |", "| numpy | 2.1.0 | BSD-3-Clause |"]:
                self.assertIn(row, text)


if __name__ == "__main__":
    unittest.main()
