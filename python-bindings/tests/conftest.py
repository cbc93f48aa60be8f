"""Fixtures: the zarr-python stores written by tests/fixtures/make_fixtures.py."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np
import pytest


def fixtures_dir() -> Path:
    d = os.environ.get("INSITUBATCH_FIXTURES")
    if not d or not (Path(d) / "manifest.json").exists():
        why = "INSITUBATCH_FIXTURES is not set or has no manifest.json: run scripts/test-python.sh"
        # CI (`CI` set, as in .ci/run) provides every prerequisite: there a skip is a failure.
        if os.environ.get("CI", "").strip().lower() not in ("", "0", "false"):
            pytest.fail(f"{why}; CI is set, where this is a failure, not a skip")
        pytest.skip(why)
    return Path(d)


@pytest.fixture(scope="session")
def fixtures() -> Path:
    return fixtures_dir()


@pytest.fixture(scope="session")
def manifest(fixtures: Path) -> dict:
    return json.loads((fixtures / "manifest.json").read_text())


# A hang guard, not a measurement: a wait ends on its condition, and only a condition that
# never comes (a hang or a leak) runs into this and fails. Nothing here asserts a duration.
HANG_GUARD_S = 60.0


def wait_until(done, what) -> None:
    """Wait for a condition the engine reaches asynchronously by design (tokio's
    shutdown_background, its blocking pool finishing a read whose pass was dropped, rayon's
    pool teardown and pyo3's deferred decrefs all finish on other threads, and neither the
    kernel nor the bindings give an event to wait on), re-checking it until it holds.
    ``what`` is the failure message, or a function that writes it when the guard runs out."""
    deadline = time.monotonic() + HANG_GUARD_S
    while not done():
        if time.monotonic() > deadline:
            msg = what() if callable(what) else what
            pytest.fail(f"{msg} (still not so after the {HANG_GUARD_S:.0f} s hang guard)")
        time.sleep(0.02)


def store(manifest: dict, name: str) -> dict:
    return next(s for s in manifest["stores"] if s["name"] == name)


def url(fixtures: Path, rel: str) -> str:
    return (fixtures / rel).resolve().as_uri()


def source(fixtures: Path, array: dict, sample_axis: int) -> np.ndarray:
    """The array's values, sample axis first (inner axes in physical order)."""
    raw = np.fromfile(fixtures / array["values_file"], dtype=np.dtype(array["dtype"]).newbyteorder("<"))
    return np.moveaxis(raw.reshape(array["shape"]), sample_axis, 0)


def stored(fixtures: Path, name: str, label: str) -> np.ndarray:
    """Array ``label`` of store ``name`` in its stored axis order, from the values file the
    fixture writer saved beside it: no zarr-python needed (the free-threaded venv has none)."""
    manifest = json.loads((fixtures / "manifest.json").read_text())
    array = store(manifest, name)["arrays"][label]
    return source(fixtures, array, 0)


@pytest.fixture
def zstd(fixtures: Path, manifest: dict) -> tuple[str, dict[str, np.ndarray]]:
    """The v3 zstd store: its URL and each array's source values."""
    s = store(manifest, "v3_zstd")
    return url(fixtures, s["path"]), {k: source(fixtures, a, 0) for k, a in s["arrays"].items()}


@pytest.fixture(scope="session")
def tf():
    """TensorFlow, which lives in its own venv (tools/python/tf.in): scripts/test-python.sh runs
    the TF tests there with ``IB_EXPECT_TF=1``, where a missing TensorFlow is a failure."""
    try:
        import tensorflow
    except ImportError as e:
        why = (
            f"TensorFlow is not installed in this venv ({e}): scripts/test-python.sh runs the TF tests "
            "in their own venv (just test-python fw=tf)"
        )
        if os.environ.get("IB_EXPECT_TF", "") == "1":
            pytest.fail(f"{why}; IB_EXPECT_TF=1 says this venv should have it")
        pytest.skip(why)
    return tensorflow
