"""The README's Python example runs as written, on a fixture store.

Each block marked ``<!-- readme-test: NAME -->`` in README.md runs here with ``url`` bound
to the v3_zstd fixture (t2m and u10), so the front page's example stays true. The framework
and device examples live in docs/frameworks.md, run by docs-tests/test_snippets.py, except
its ```python tensorflow block, which runs here in the TensorFlow venv.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"


def block(name: str) -> str:
    if not README.exists():
        pytest.skip("README.md is not next to this checkout's tests")
    found = re.findall(rf"<!-- readme-test: {name} -->\n```python\n(.*?)```", README.read_text(), re.S)
    assert len(found) == 1, f"README.md has {len(found)} blocks marked readme-test: {name}"
    return found[0]


def run(name: str, zstd) -> dict:
    namespace = {"url": zstd[0], "__name__": f"readme_{name}"}
    exec(compile(block(name), f"README.md[{name}]", "exec"), namespace)  # noqa: S102 - our own README
    return namespace


def test_readme_quick_start(zstd):
    pytest.importorskip("torch")
    ns = run("quickstart", zstd)
    assert tuple(ns["t2m"].shape[1:]) == tuple(ns["geoms"]["t2m"].shape[1:])
    assert ns["ds"].last_pass is not None


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
