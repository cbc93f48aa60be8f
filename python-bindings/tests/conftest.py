"""Fixtures: the zarr-python stores written by tests/fixtures/make_fixtures.py."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest


def fixtures_dir() -> Path:
    d = os.environ.get("INSITUBATCH_FIXTURES")
    if not d or not (Path(d) / "manifest.json").exists():
        pytest.skip("INSITUBATCH_FIXTURES is not set: run scripts/test-python.sh")
    return Path(d)


@pytest.fixture(scope="session")
def fixtures() -> Path:
    return fixtures_dir()


@pytest.fixture(scope="session")
def manifest(fixtures: Path) -> dict:
    return json.loads((fixtures / "manifest.json").read_text())


def store(manifest: dict, name: str) -> dict:
    return next(s for s in manifest["stores"] if s["name"] == name)


def url(fixtures: Path, rel: str) -> str:
    return (fixtures / rel).resolve().as_uri()


def source(fixtures: Path, array: dict, sample_axis: int) -> np.ndarray:
    """The array's values, sample axis first (inner axes in physical order)."""
    raw = np.fromfile(fixtures / array["values_file"], dtype=np.dtype(array["dtype"]).newbyteorder("<"))
    return np.moveaxis(raw.reshape(array["shape"]), sample_axis, 0)


@pytest.fixture
def zstd(fixtures: Path, manifest: dict) -> tuple[str, dict[str, np.ndarray]]:
    """The v3 zstd store: its URL and each array's source values."""
    s = store(manifest, "v3_zstd")
    return url(fixtures, s["path"]), {k: source(fixtures, a, 0) for k, a in s["arrays"].items()}
