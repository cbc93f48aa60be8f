"""The docs' TensorFlow example runs in the TensorFlow venv (one framework per environment).

docs/frameworks.md's ```python tensorflow block runs here with ``url`` bound to the v3_zstd
fixture (t2m and u10); the book's other blocks run in docs-tests/test_snippets.py, which also
runs README.md's first Python block as written, on the demo store.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_docs_tensorflow_block(tf, zstd):
    page = ROOT / "docs" / "frameworks.md"
    if not page.exists():
        pytest.skip("docs/ is not next to this checkout's tests")
    found = re.findall(r"```python tensorflow\n(.*?)```", page.read_text(), re.S)
    assert len(found) == 1, f"docs/frameworks.md has {len(found)} ```python tensorflow blocks"
    namespace = {"url": zstd[0], "__name__": "docs_frameworks_tensorflow"}
    exec(compile(found[0], "docs/frameworks.md[tensorflow]", "exec"), namespace)  # noqa: S102 - our own docs
    assert set(namespace["tensors"]) == {"t2m", "u10"}
    namespace["ds"].close()
