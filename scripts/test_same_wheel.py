"""scripts/same_wheel.py on wheels written here (stdlib, a second): run by scripts/test.sh's
check phase."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import unittest
import zipfile
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent / "same_wheel.py"


def wheel(path: Path, serial: str, module: bytes) -> Path:
    sbom = {"bomFormat": "CycloneDX", "serialNumber": serial, "metadata": {"timestamp": serial}, "components": []}
    with zipfile.ZipFile(path, "w") as z:
        for name, data in [
            ("pkg/_native.abi3.so", module),
            ("pkg-0.1.dist-info/sboms/pkg.cyclonedx.json", json.dumps(sbom).encode()),
            ("pkg-0.1.dist-info/RECORD", f"pkg/_native.abi3.so,sha256=x,1\npkg-0.1.dist-info/sboms/pkg.cyclonedx.json,sha256={serial},2\n".encode()),
        ]:
            z.writestr(zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0)), data)
    return path


def same(a: Path, b: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), str(a), str(b)], capture_output=True, text=True, check=False)


class SameWheel(unittest.TestCase):
    def test_only_maturins_stamps_may_differ(self):
        with tempfile.TemporaryDirectory() as d:
            first = wheel(Path(d, "a.whl"), "urn:uuid:1", b"\x7fELF code")
            self.assertEqual(same(first, wheel(Path(d, "b.whl"), "urn:uuid:2", b"\x7fELF code")).returncode, 0)
            run = same(first, wheel(Path(d, "c.whl"), "urn:uuid:2", b"\x7fELF c0de"))
            self.assertEqual(run.returncode, 1)
            self.assertIn("pkg/_native.abi3.so: content", run.stderr)


if __name__ == "__main__":
    unittest.main()
