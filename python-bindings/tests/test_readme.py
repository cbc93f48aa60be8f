"""The README's Python framework examples run as written, on a fixture store.

Each block marked ``<!-- readme-test: NAME -->`` in README.md runs here with ``url`` bound
to the v3_zstd fixture (t2m and u10), so the documented device placement stays true.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"


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


def test_readme_torch_and_jax_devices(zstd):
    pytest.importorskip("torch")
    pytest.importorskip("jax")
    ns = run("devices", zstd)
    ns["ds"].close()


def test_readme_tensorflow(tf, zstd):
    ns = run("tensorflow", zstd)
    assert set(ns["tensors"]) == {"t2m", "u10"}
    ns["ds"].close()
