"""Environment report for bug reports: one paste instead of a dozen questions.

Versions come from installed distribution metadata, never from importing the package:
importing torch and JAX into one process can crash it, which is the last thing a bug
report helper should do.
"""

from __future__ import annotations

import os
import platform
import sys
import sysconfig
from importlib.metadata import PackageNotFoundError, version
from typing import TextIO

# Label -> distribution name, core first, then the optional ones (absent ones are reported:
# "torch: not installed" answers many adapter reports by itself).
_CORE = (("numpy", "numpy"),)
_OPTIONAL = (
    ("torch", "torch"),
    ("jax", "jax"),
    ("tensorflow", "tensorflow"),
    ("ml_dtypes", "ml_dtypes"),
    ("cloudpickle", "cloudpickle"),
    ("zarr", "zarr"),
    ("obstore", "obstore"),
    ("insitubatch", "insitubatch"),
)
_NOT_INSTALLED = "not installed"


def _dist_version(dist: str) -> str:
    try:
        return version(dist)
    except PackageNotFoundError:
        return _NOT_INSTALLED


def _gil_state() -> str:
    """The free-threading build flag and whether the GIL is live now (they differ when an
    extension re-enables it on import)."""
    if not sysconfig.get_config_var("Py_GIL_DISABLED"):
        return "GIL build (not free-threaded)"
    is_enabled = getattr(sys, "_is_gil_enabled", None)
    if is_enabled is None:
        return "free-threaded build, live GIL state unknown"
    return f"free-threaded build, GIL currently {'ON' if is_enabled() else 'OFF'}"


def debug_info() -> dict[str, str]:
    """The environment report as an ordered ``label -> value`` mapping."""
    info = {
        "insitubatch_rs": _dist_version("insitubatch-rs"),
        "engine": "Rust (insitubatch-core), pyo3 extension",
        "python": f"{platform.python_version()} ({platform.python_implementation()})",
        "free-threading": _gil_state(),
        "platform": platform.platform(),
        "cpu count": str(os.cpu_count()),
    }
    info.update({label: _dist_version(dist) for label, dist in _CORE})
    info.update({label: _dist_version(dist) for label, dist in _OPTIONAL})
    return info


def print_debug_info(file: TextIO | None = None) -> None:
    """Print the environment report; paste it into a bug or performance report."""
    info = debug_info()
    width = max(len(label) for label in info)
    out = sys.stdout if file is None else file
    print("insitubatch_rs debug info", file=out)
    for label, value in info.items():
        print(f"  {label:<{width}} : {value}", file=out)
