"""insitubatch_rs: train in place on n-dimensional Zarr tensors (the Rust engine, from Python).

A drop-in for the Python *insitubatch* 0.2.0: code written for it runs after
``import insitubatch_rs as insitubatch``. ``open_geometries`` → ``split_by_chunk`` →
``InSituDataset`` with ``.train/.val/.test/.all`` views yielding numpy ``Batch`` objects
(zero-copy views of engine buffers); ``describe()`` before a pass, ``last_pass`` after one.
Framework adapters (``as_torch``, ``to_torch``, ``to_jax``, ``to_jax_global``, ``to_tf``,
``as_tf_dataset``, ``pin_host_buffers``; also under ``insitubatch_rs.frameworks``) import their framework
lazily. docs/migration.md lists every name of insitubatch 0.2.0 and its
status here.
"""

from __future__ import annotations

import atexit
from importlib.metadata import PackageNotFoundError, version

from . import _native
from ._dataset import BatchIterator, InSituDataset, SchedulerConfig, View
from ._debug import debug_info, print_debug_info
from . import frameworks  # noqa: F401 - insitubatch 0.2.0's insitubatch.frameworks path
from ._frameworks import as_tf_dataset, as_torch, pin_host_buffers, to_jax, to_jax_global, to_tf, to_torch
from ._native import InsitubatchIOError, StandardScaler
from ._runtime import Depths, PassStats, StageTimes, bottleneck, fleet_summary
from ._shuffle import DrawOrder, block_shuffled_order, chunk_permutation, sequential_order, shuffle_quality
from ._split import SplitManifest, split_by_chunk, valid_anchor_range
from ._store import (
    ArrayNotFoundError,
    NotAnArrayError,
    arraylake_store,
    close_store,
    ensure_local_dir,
    fsspec_store,
    icechunk_store,
    obstore_store,
    open_geometries,
    reference_store,
)
from ._summary import DatasetReport
from ._transforms import _cache_token  # noqa: F401 - the engine calls insitubatch_rs._cache_token
from ._transforms import BatchTransform, ChunkTransform, ReshapingChunkTransform, applies
from ._types import ArrayGeometry, Batch, ChunkRead, DecodedChunk, SplitName, StoredChunkRead

# Engine threads may be mid-transform when Python exits: stop them from re-entering the
# interpreter during finalization (see python-bindings/src/transforms.rs).
atexit.register(_native._shutdown)

try:
    __version__ = version("insitubatch-rs")
except PackageNotFoundError:  # an uninstalled source tree
    __version__ = "0.0.0+unknown"

__all__ = [
    # insitubatch 0.2.0's names (its __all__, less what docs/migration.md lists as absent)
    "ArrayGeometry",
    "Batch",
    "BatchTransform",
    "ChunkRead",
    "ChunkTransform",
    "DatasetReport",
    "DecodedChunk",
    "Depths",
    "DrawOrder",
    "InSituDataset",
    "PassStats",
    "SchedulerConfig",
    "SplitManifest",
    "SplitName",
    "StageTimes",
    "StandardScaler",
    "StoredChunkRead",
    "applies",
    "arraylake_store",
    "as_tf_dataset",
    "as_torch",
    "block_shuffled_order",
    "bottleneck",
    "chunk_permutation",
    "close_store",
    "debug_info",
    "ensure_local_dir",
    "fsspec_store",
    "icechunk_store",
    "obstore_store",
    "open_geometries",
    "print_debug_info",
    "sequential_order",
    "shuffle_quality",
    "split_by_chunk",
    "to_jax",
    "to_tf",
    "to_torch",
    "valid_anchor_range",
    # ours
    "ArrayNotFoundError",
    "BatchIterator",
    "InsitubatchIOError",
    "NotAnArrayError",
    "ReshapingChunkTransform",
    "fleet_summary",
    "pin_host_buffers",
    "reference_store",
    "to_jax_global",
    "View",
]
