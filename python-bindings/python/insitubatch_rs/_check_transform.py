"""``insitubatch-check-transform``: try a chunk transform on one chunk of a real store.

Before a run that takes hours, check the two things that otherwise fail late or silently:
that a reshaping transform declares the ``output_inner`` it actually produces (the cache
sizes slots from the declaration), and that the transform releases the GIL (a per-element
Python loop serializes the engine's thread pool). The chunk is read by the engine, exactly
as a training pass reads it: the logical chunk, sample axis first, no edge padding.

Exit status: 0 all checks passed, 1 a check failed, 2 bad arguments or the target would
not load.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import inspect
import os
import sys
import sysconfig
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ._dataset import InSituDataset
from ._split import SplitManifest
from ._store import open_geometries
from ._transforms import _Scoped
from ._types import ArrayGeometry, ChunkRead, DecodedChunk


class UsageError(Exception):
    """Bad arguments, or a target that does not load (exit status 2)."""


def load_target(spec: str) -> Any:
    """The transform named by ``module:attr`` or ``path/to/file.py:attr``; a class is
    instantiated with no arguments."""
    where, sep, attr = spec.rpartition(":")
    if not sep or not where or not attr:
        raise UsageError(f"--transform must be module:attr or path/to/file.py:attr, got {spec!r}")
    if where.endswith(".py") or os.sep in where:
        path = Path(where)
        if not path.is_file():
            raise UsageError(f"no such file {where!r} (from --transform {spec!r})")
        mod_spec = importlib.util.spec_from_file_location(f"_insitubatch_check_{path.stem}", path)
        if mod_spec is None or mod_spec.loader is None:
            raise UsageError(f"cannot import {where!r} as a Python module")
        module = importlib.util.module_from_spec(mod_spec)
        sys.modules[mod_spec.name] = module
        try:
            mod_spec.loader.exec_module(module)
        except Exception as e:
            raise UsageError(f"importing {where!r} failed: {type(e).__name__}: {e}") from e
    else:
        try:
            module = importlib.import_module(where)
        except Exception as e:
            raise UsageError(f"cannot import module {where!r}: {type(e).__name__}: {e}") from e
    try:
        target = getattr(module, attr)
    except AttributeError:
        raise UsageError(f"{where!r} has no attribute {attr!r}") from None
    if inspect.isclass(target):
        try:
            target = target()
        except TypeError as e:
            raise UsageError(
                f"{attr} is a class whose constructor needs arguments ({e}); point --transform at a configured "
                f"instance instead (e.g. a module-level `{attr.lower()} = {attr}(...)`)"
            ) from e
    if not callable(target):
        raise UsageError(f"{spec!r} is not callable (a chunk transform is (DecodedChunk) -> DecodedChunk)")
    return target


def read_chunk(url: str, var: str, chunk: int, storage_options: dict[str, Any]) -> tuple[ArrayGeometry, np.ndarray]:
    """One chunk of ``var`` as a pass delivers it to chunk transforms: ``(rows, *inner)``."""
    try:
        geom = open_geometries(url, [var], **storage_options)[var]
    except (KeyError, TypeError) as e:  # no such array, or a group
        raise UsageError(f"--var {var!r}: {e}") from None
    if not 0 <= chunk < geom.n_chunks:
        raise UsageError(f"--chunk {chunk} is out of range: {var} has {geom.n_chunks} chunks")
    rows = len(geom.samples_in_chunk(chunk))
    manifest = SplitManifest(geom.n_chunks, geom.sample_chunk_size, geom.n_samples, {"train": [chunk]})
    ds = InSituDataset(
        url, manifest, {var: geom}, batch_size=rows, block_chunks=1, shuffle=False, storage_options=storage_options
    )
    with ds:
        data = np.concatenate([b.arrays[var] for b in ds.train])
    return geom, np.ascontiguousarray(data)


def _call(transform: Any, geom: ArrayGeometry, chunk: int, data: np.ndarray) -> np.ndarray:
    read = ChunkRead(geom.path, chunk)
    out = transform(DecodedChunk(read, data, chunk * geom.sample_chunk_size))
    out = out.data if isinstance(out, DecodedChunk) else out
    if not isinstance(out, np.ndarray):
        raise TypeError(f"the transform returned {type(out).__name__}, not a DecodedChunk or numpy array")
    return out


def gil_verdict(speedup: float, threads: int, cpus: int, free_threaded: bool) -> tuple[bool | None, str]:
    """Classify a thread-scaling measurement: ``(releases, words)``; ``None`` when the probe
    cannot tell (a free-threaded build, or one core)."""
    if free_threaded:
        return None, "N/A: free-threaded build (no GIL to hold)"
    usable = min(threads, cpus)
    if usable < 2:
        return None, "N/A: one core, so threads cannot scale either way"
    need = 0.6 * usable
    if speedup >= need:
        return True, f"speedup {speedup:.2f}x (>= {need:.2f}) -> releases the GIL (vectorized)"
    return False, (
        f"speedup {speedup:.2f}x (< {need:.2f}) -> holds the GIL: the engine's thread pool will run it one chunk "
        "at a time. Use vectorized numpy (no per-element Python loop)"
    )


def _rate(transform: Any, geom: ArrayGeometry, chunk: int, data: np.ndarray, threads: int, seconds: float) -> float:
    """Calls per second with ``threads`` threads each calling the transform on its own copy."""
    counts = [0] * threads
    stop = time.perf_counter() + seconds
    copies = [data.copy() for _ in range(threads)]

    def work(i: int) -> None:
        while time.perf_counter() < stop:
            _call(transform, geom, chunk, copies[i])
            counts[i] += 1

    t0 = time.perf_counter()
    pool = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    return sum(counts) / (time.perf_counter() - t0)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="insitubatch-check-transform",
        description="Check a chunk transform against one chunk of a real Zarr store before training.",
    )
    p.add_argument("url", help="the store: file://, s3://, gs://, az://, http(s):// or a local path")
    p.add_argument("--var", required=True, help="the array (zarr path) to read")
    p.add_argument("--transform", required=True, help="module:attr or path/to/file.py:attr (a class is instantiated)")
    p.add_argument("--chunk", type=int, default=0, help="which sample-axis chunk to read (default 0)")
    p.add_argument("--threads", type=int, default=0, help="GIL probe threads (0 = min(4, cpus))")
    p.add_argument("--repeats", type=int, default=3, help="GIL probe repeats; the best counts")
    p.add_argument("--min-seconds", type=float, default=0.3, help="GIL probe time per measurement")
    p.add_argument("--no-gil-probe", action="store_true", help="structural checks only")
    p.add_argument("--skip-signature", action="store_true", help="anonymous access (public buckets)")
    p.add_argument("--request-payer", action="store_true", help="S3 requester-pays buckets")
    return p


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB"


def _check_output(transform: Any, data: np.ndarray, out: np.ndarray, geom: ArrayGeometry) -> list[str]:
    """The structural checks on one output; prints what it sees, returns the failures."""
    failures = []
    same = out.shape == data.shape and out.dtype == data.dtype
    kind = "shape- and dtype-preserving" if same else "reshaping/recasting"
    print(f"transform output:\n  {data.shape} {data.dtype}  ->  {out.shape} {out.dtype}   {kind}")
    if out.shape[:1] != data.shape[:1]:
        failures.append(f"the sample axis changed ({data.shape[0]} -> {out.shape[0]} rows); a transform must keep it")
    if out.dtype.kind in "fc" and (bad := int(out.size - np.count_nonzero(np.isfinite(out)))):
        had = int(data.size - np.count_nonzero(np.isfinite(data))) if data.dtype.kind in "fc" else 0
        print(f"  warning: {bad} NaN/Inf values in the output (the input had {had})")
    declare = getattr(transform, "output_inner", None)
    if declare is None:
        if same:
            print("cacheability: shape/dtype-preserving, no output_inner needed -> cacheable as-is.")
            return failures
        return failures + [
            "the output changes the chunk's inner shape or dtype but the transform declares no output_inner(geom) "
            "-> (inner_shape, dtype); the cache sizes its slots from that declaration"
        ]
    try:
        shape, dtype = declare(geom)
        declared = (tuple(int(s) for s in shape), np.dtype(dtype))
    except Exception as e:  # the user's code
        return failures + [f"output_inner(geom) raised {type(e).__name__}: {e}"]
    if declared != (tuple(out.shape[1:]), out.dtype):
        return failures + [
            f"output_inner declares {declared[0]} {declared[1]} but the output is {out.shape[1:]} {out.dtype}"
        ]
    print(f"cacheability: output_inner declares {declared[0]} {declared[1]}, matching the output -> cacheable.")
    return failures


def _gil_probe(transform: Any, geom: ArrayGeometry, chunk: int, data: np.ndarray, args: argparse.Namespace) -> bool:
    """Thread-scaling probe; False when the transform holds the GIL."""
    cpus = os.cpu_count() or 1
    threads = args.threads or min(4, cpus)
    gil_on = getattr(sys, "_is_gil_enabled", lambda: True)()
    free = bool(sysconfig.get_config_var("Py_GIL_DISABLED")) and not gil_on
    print(f"GIL-release probe (thread-scaling, {threads} threads):")
    best = 0.0
    if not free and min(threads, cpus) >= 2:
        for _ in range(args.repeats):
            one = _rate(transform, geom, chunk, data, 1, args.min_seconds)
            many = _rate(transform, geom, chunk, data, threads, args.min_seconds)
            best = max(best, many / one if one else 0.0)
    releases, words = gil_verdict(best, threads, cpus, free)
    print(f"  {words}")
    return releases is not False


def run(args: argparse.Namespace) -> int:
    """The checks; returns the exit status. Raises UsageError for status 2."""
    if args.threads < 0 or args.repeats < 1 or args.min_seconds <= 0:
        raise UsageError("--threads must be >= 0, --repeats >= 1 and --min-seconds > 0")
    transform = load_target(args.transform)
    opts = {
        k: "true" for k, on in (("skip_signature", args.skip_signature), ("request_payer", args.request_payer)) if on
    }
    geom, data = read_chunk(args.url, args.var, args.chunk, opts)
    print(f"  sample axis : {geom.n_samples} samples, {geom.sample_chunk_size}/chunk, {geom.n_chunks} chunks")
    print(f"  chunk {args.chunk:<5}: {data.shape[0]} samples -> source shape {data.shape} = {_mb(data.nbytes)} decoded")
    if isinstance(transform, _Scoped) and geom.path not in transform.arrays:
        print(f"FAIL: the transform is scoped to {transform.arrays}, so it never runs on {geom.path!r}")
        return 1
    try:
        out = _call(transform, geom, args.chunk, data.copy())
    except Exception as e:  # the user's code: report it as a failed check
        print(f"FAIL: the transform raised {type(e).__name__}: {e}")
        return 1
    failures = _check_output(transform, data, out, geom)
    if not args.no_gil_probe and not failures and not _gil_probe(transform, geom, args.chunk, data, args):
        failures.append("the transform holds the GIL")
    for f in failures:
        print(f"FAIL: {f}")
    if failures:
        return 1
    print("PASS: chunk_transform checks all passed.")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return run(args)
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # the store could not be read
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
