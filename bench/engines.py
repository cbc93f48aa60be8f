"""The engines bench/run.py measures, as plugins: one registry, name → what runs it.

Every engine is a command run in a fresh process that prints one JSON row on stdout (the
schema of `insitubatch bench URL --json`; the patch engines print bench/patch_engines.py's
row). An engine says what it needs (a CLI, a Python with some modules) and builds its argv
for a store URL and the run's knobs; the suites (bench/suites/) pick engines by name and
share the measuring, rotation, rows and reports.

Runners:
- ``cli``: the insitubatch-rs CLI (``--cli``), `insitubatch bench URL ... --json`.
- ``py``: bench/py_engines.py ENGINE under the bench Python (``--python``: insitubatch_rs and
  the peers).
- ``reference``: bench/reference_bench.py under the reference implementation's venv
  (``--reference-python``: insitubatch 0.2.0, bench/setup_reference.sh).
- ``reference-py``: bench/py_engines.py ENGINE under that venv.
- ``patch``: bench/patch_engines.py ENGINE under the bench Python.
- ``workers``: bench/dataloader_workers.py under the bench Python.

``decode_limit`` and ``probe`` are bounds, not loaders: the decode ceiling (`insitubatch bench
URL --decode-limit`, else bench/decode_limit.py under the reference venv) and the CLI's
`describe --probe` prediction of a cold epoch.
"""
from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass, field

HERE = os.path.dirname(os.path.abspath(__file__))
DECODE = "decode_limit"
PROBE = "probe"

# Names earlier drivers wrote in rows, read as today's (committed rows keep them).
OLD_NAMES = {"anchor": "reference", "anchor-py": "reference-py",
             "anchor-zarrstore": "reference-zarrstore", "rust-cli": "ours"}


def canonical(name):
    """Today's name of an engine that older rows may spell otherwise."""
    return OLD_NAMES.get(name, name)


@dataclass
class Knobs:
    """What one run of an engine is asked to do (the suites fill it from their options)."""
    var: str = "t2m"
    batch_size: int = 32
    block_chunks: int = 16
    max_inflight: int = 32
    epochs: int = 2
    budget_bytes: int | None = None
    compute_ms: float = 0.0
    max_batches: int = 0
    hold_batches: bool = False
    per_sample: int = 4  # patch engines: random patches per sample
    xb_batches: int = 12  # patch engines: xbatcher stops after this many batches
    store: str | None = None  # patch engines: the store's folder when the URL is a server's
    extra: list = field(default_factory=list)  # more arguments, appended as given


@dataclass(frozen=True)
class Engine:
    name: str
    runner: str  # cli, py, reference, reference-py, patch, bound
    about: str
    needs: tuple = ()  # Python modules the runner imports
    knobbed: bool = False  # takes block_chunks, max_inflight and the residency budget

    def command(self, ctx, url, k):
        """The argv of one run over the store at ``url`` (a file:// or http:// URL)."""
        if self.runner == "cli":
            return _cli_bench(ctx.cli_for(self.name) or ctx.cli_given, url, k)
        if self.runner == "reference":
            return ([ctx.reference_python, os.path.join(HERE, "reference_bench.py"), "--url", url,
                     "--var", k.var] + _common(k) + _budget(k) + ["--json"] + k.extra)
        if self.runner in ("py", "reference-py"):
            python = ctx.python if self.runner == "py" else ctx.reference_python
            cmd = [python, os.path.join(HERE, "py_engines.py"), self.name, "--url", url, "--var", k.var,
                   "--batch-size", str(k.batch_size), "--epochs", str(k.epochs)]
            if self.knobbed:
                cmd += ["--block-chunks", str(k.block_chunks), "--max-inflight", str(k.max_inflight)] + _budget(k)
            if k.compute_ms:
                cmd += ["--compute-ms", f"{k.compute_ms:g}"]
            if k.max_batches:
                cmd += ["--max-batches", str(k.max_batches)]
            if k.hold_batches:
                cmd.append("--hold-batches")
            return cmd + k.extra
        if self.runner == "patch":
            return [ctx.python, os.path.join(HERE, "patch_engines.py"), self.name, "--store", k.store or _path_of(url),
                    "--url", url, "--per-sample", str(k.per_sample), "--xb-batches", str(k.xb_batches)] + k.extra
        if self.runner == "workers":
            return [ctx.python, os.path.join(HERE, "dataloader_workers.py"), url, str(k.epochs)] + k.extra
        if self.name == DECODE:
            if ctx.cli:
                return [ctx.cli, "bench", _local(url), "--var", k.var, "--decode-limit", "--json"]
            return [ctx.reference_python, os.path.join(HERE, "decode_limit.py"), "--url", _local(url), "--var", k.var]
        if self.name == PROBE:
            return [ctx.cli, "describe", url, "--var", k.var, "--fractions", "1,0,0", "--batch-size",
                    str(k.batch_size), "--block-chunks", str(k.block_chunks), "--max-inflight",
                    str(k.max_inflight), "--probe", "--json"]
        raise ValueError(f"engine {self.name}: no runner {self.runner!r}")

    def unavailable(self, ctx):
        """None when this engine can run here, else the reason (said in the report)."""
        if self.runner == "cli" or self.name == PROBE:
            return ctx.cli_missing(self.name)
        if self.name == DECODE:
            return None if ctx.cli else ctx.python_missing(ctx.reference_python, ("numcodecs",), "--reference-python")
        if self.runner in ("reference", "reference-py"):
            return ctx.python_missing(ctx.reference_python, self.needs, "--reference-python")
        return ctx.python_missing(ctx.python, self.needs, "--python")


def _common(k):
    return ["--batch-size", str(k.batch_size), "--block-chunks", str(k.block_chunks),
            "--max-inflight", str(k.max_inflight), "--epochs", str(k.epochs)]


def _budget(k):
    return ["--cache-budget-bytes", str(k.budget_bytes)] if k.budget_bytes else []


def _cli_bench(cli, url, k):
    return [cli, "bench", url, "--var", k.var] + _common(k) + _budget(k) + k.extra + ["--json"]


def _path_of(url):
    return url[len("file://"):] if url.startswith("file://") else url


def _local(url):
    """The decode limit reads the store's files, even when the engines read it over HTTP."""
    return url if "://" in url else "file://" + url


RS = ("insitubatch_rs", "numpy")
TORCH = ("torch",)
XB = ("xarray", "xbatcher", "torch")
REGISTRY = {e.name: e for e in [
    Engine("ours", "cli", "the insitubatch-rs CLI: `insitubatch bench URL ... --json`"),
    Engine("ours-b", "cli", "a second CLI build (--cli-b) in the same rounds: an A/B of two builds"),
    Engine("ours-fb", "cli", "the CLI with --first-block-chunks N (--first-block-chunks; rows say ours-fbN)"),
    Engine("reference", "reference",
           "insitubatch 0.2.0, the reference implementation (bench/reference_bench.py, the CLI's JSON)",
           ("insitubatch",)),
    Engine("rs-python", "py", "insitubatch_rs from Python: InSituDataset over the URL, iterate ds.train",
           RS, knobbed=True),
    Engine("rs-torch", "py", "insitubatch_rs through as_torch + DataLoader(batch_size=None, num_workers=0)",
           RS + TORCH),
    Engine("rs-obstore", "py", "rs-python over an obstore LocalStore (read in Rust)", RS + ("obstore",)),
    Engine("rs-zarrstore", "py", "rs-python over a zarr-python LocalStore (read through zarr's async API)",
           RS + ("zarr",)),
    Engine("reference-py", "reference-py",
           "insitubatch 0.2.0 in-process (py_engines.py: honours --compute-ms for stall runs)", ("insitubatch",),
           knobbed=True),
    Engine("reference-zarrstore", "reference-py", "insitubatch 0.2.0 over a zarr-python LocalStore",
           ("insitubatch", "zarr")),
    Engine("zarr-loop", "py", "zarr-python: a chunk (or shard) slab at a time in shuffled order", ("zarr", "numpy")),
    Engine("tensorstore", "py", "tensorstore zarr3 driver, chunk slabs in shuffled order, 4 reads in flight",
           ("tensorstore", "numpy")),
    Engine("rs-fsspec-refs", "py", "rs-python over a zarr FsspecStore of fsspec's ReferenceFileSystem for a "
           "kerchunk set (reference+URL): the Python store-object path", RS + ("zarr", "fsspec", "aiohttp")),
    Engine("xbatcher-torch-nw0", "py", "xbatcher BatchGenerator as a map-style Dataset, DataLoader, 0 workers", XB),
    Engine("xbatcher-torch-nw2", "py", "the same with 2 workers", XB),
    Engine("rs-patch", "patch", "insitubatch_rs patch= random 128 x 128 patches", RS),
    Engine("rs-patch-gap0", "patch", "rs-patch with read_policy coalesce_gap_bytes=0", RS),
    Engine("rs-crop", "patch", "insitubatch_rs whole samples, random crops cut in numpy", RS),
    Engine("xbatcher-nw0", "patch", "xbatcher's grid of 128 x 128 patches + DataLoader, 0 workers", XB),
    Engine("xbatcher-nw2", "patch", "the same with 2 workers", XB),
    Engine("torch-workers", "workers", "insitubatch_rs under torch DataLoader workers, each a rank of the "
           "workers (bench/dataloader_workers.py: 0, 1 and 2 workers; one JSON line each)", RS + TORCH),
    Engine(DECODE, "bound", "the decode limit: all stored chunks zstd-decoded on all cores "
           "(`insitubatch bench --decode-limit`, else bench/decode_limit.py)"),
    Engine(PROBE, "bound", "the CLI's `describe --probe` prediction of a cold epoch"),
]}


class Context:
    """Where the engines' programs are, and what imports where (asked once per Python)."""

    def __init__(self, cli=None, cli_b=None, first_block_chunks=None, python=None, reference_python=None,
                 check_imports=True):
        self.cli_given = cli
        self.cli = os.path.abspath(cli) if cli and os.path.exists(cli) else None
        self.cli_b = os.path.abspath(cli_b) if cli_b else None
        self.first_block_chunks = first_block_chunks
        self.python = python
        self.reference_python = reference_python
        self.check_imports = check_imports
        self._imports = {}

    def cli_for(self, name):
        if name == "ours-b":
            return self.cli_b
        return self.cli

    def cli_missing(self, name):
        if name == "ours-b":
            if not self.cli_b:
                return "no --cli-b given"
            if not os.path.exists(self.cli_b):
                return f"--cli-b {self.cli_b} not found"
        if name == "ours-fb" and not self.first_block_chunks:
            return "no --first-block-chunks given"
        if not self.cli:
            return (f"CLI {self.cli_given} not found (--cli; build it: cargo build --release -p "
                    "insitubatch-native --bin insitubatch)")
        return None

    def python_missing(self, python, modules, option):
        if not python or not os.path.exists(python):
            return f"{python} not found ({option})"
        if not self.check_imports or not modules:
            return None
        key = (python, tuple(modules))
        if key not in self._imports:
            code = "; ".join(f"import {m}" for m in modules)
            r = subprocess.run([python, "-c", code], capture_output=True, text=True)
            tail = (r.stderr.strip().splitlines() or ["?"])[-1]
            self._imports[key] = None if r.returncode == 0 else (
                f"{tail} under {python} ({option}; it needs {', '.join(modules)})")
        return self._imports[key]


def engine(name):
    """The registry's engine called ``name`` (old spellings accepted), or a ValueError saying
    which names there are."""
    e = REGISTRY.get(canonical(name))
    if e is None:
        raise ValueError(f"unknown engine {name!r}; the engines are {', '.join(REGISTRY)} (bench/run.py engines)")
    return e


def commands(ctx, names, url, k):
    """{row name: argv} for the engines named, in order. ``ours-fb`` becomes ``ours-fbN``;
    ``ours-b`` and ``ours-fb`` are ``ours``' command with another CLI or one more option."""
    out = {}
    for name in names:
        e = engine(name)
        if e.name == "ours-fb":
            out[f"ours-fb{ctx.first_block_chunks}"] = e.command(ctx, url, _with_extra(
                k, ["--first-block-chunks", str(ctx.first_block_chunks)]))
        else:
            out[e.name] = e.command(ctx, url, k)
    return out


def _with_extra(k, more):
    return Knobs(**{**k.__dict__, "extra": list(k.extra) + more})
