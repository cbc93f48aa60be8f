"""Type stubs for the pyo3 extension `insitubatch_rs._native` (a thin shim over the Rust engine)."""

from os import PathLike
from typing import Any, Literal, TypedDict, final, type_check_only

import numpy as np
import numpy.typing as npt
from typing_extensions import Self

__all__ = [
    "InsitubatchIOError",
    "Buffer",
    "ArrayGeometry",
    "SplitManifest",
    "NativeDataset",
    "NativeStream",
    "StandardScaler",
    "StoreReader",
    "open_geometries",
    "split_by_chunk",
    "valid_anchor_range",
    "buffer_address",
    "defaults",
    "verdict",
    "_shutdown",
    "_storage_conformance",
    "_storage_conformance_fixture",
    "chunk_permutation",
    "draw_order_rows",
    "shuffle_quality",
    "fleet_summary_json",
    "chunk_of",
    "samples_in_chunk",
    "inner_shape",
    "inner_chunks",
    "inner_grid",
    "n_inner_chunks",
    "inner_coord",
    "inner_index",
    "physical_chunk_coord",
    "slot_shape",
    "tile_placement",
    "dtype_size",
    "checked_count",
    "parse_split",
]

class InsitubatchIOError(OSError):
    """A store could not be read: missing array, malformed metadata, failed request, corrupt chunk."""

@final
class Buffer:
    """Rust-owned memory seen by numpy through ``__array_interface__`` (no copy)."""

    @property
    def __array_interface__(self) -> dict[str, Any]: ...
    @property
    def address(self) -> int: ...

@final
class ArrayGeometry:
    def __new__(
        cls, path: str, shape: list[int], chunks: list[int], dtype: str, *, sample_axis: int = 0, offset: int = 0
    ) -> Self: ...
    @property
    def path(self) -> str: ...
    @property
    def shape(self) -> tuple[int, ...]: ...
    @property
    def chunks(self) -> tuple[int, ...]: ...
    @property
    def shard(self) -> tuple[int, ...] | None: ...
    @property
    def dtype(self) -> str: ...
    @property
    def sample_axis(self) -> int: ...
    @property
    def offset(self) -> int: ...
    @property
    def n_samples(self) -> int: ...
    @property
    def sample_chunk_size(self) -> int: ...
    @property
    def n_chunks(self) -> int: ...
    @property
    def chunk_bytes(self) -> int: ...
    @property
    def sample_bytes(self) -> int: ...
    def shift(self, k: int) -> ArrayGeometry: ...
    def __eq__(self, value: object, /) -> bool: ...
    def __hash__(self) -> int: ...

@final
class SplitManifest:
    @property
    def n_chunks(self) -> int: ...
    @property
    def sample_chunk_size(self) -> int: ...
    @property
    def n_samples(self) -> int: ...
    @property
    def seed(self) -> int: ...
    @property
    def chunks(self) -> dict[str, list[int]]: ...
    def chunks_of(self, split: str) -> list[int]: ...
    def sample_indices(self, split: str) -> npt.NDArray[np.int64]: ...
    def to_json(self, path: str | PathLike[str] | None = None) -> str: ...
    @staticmethod
    def from_json(path: str | PathLike[str]) -> SplitManifest: ...
    @staticmethod
    def from_json_str(json: str) -> SplitManifest: ...
    def __eq__(self, value: object, /) -> bool: ...

def split_by_chunk(
    geom: ArrayGeometry,
    *,
    fractions: tuple[float, float, float],
    seed: int,
    contiguous: bool,
    sample_range: tuple[int, int] | None = None,
) -> SplitManifest: ...
def valid_anchor_range(offsets: list[int], n_samples: int) -> tuple[int, int]: ...
def open_geometries(
    store: str | Any,
    variables: list[str] | None,
    sample_axis: int,
    storage_options: list[tuple[str, str]],
    concat_dim: str | None = None,
) -> list[ArrayGeometry]: ...
def buffer_address(obj: Buffer) -> int: ...

@type_check_only
class Defaults(TypedDict):
    """The engine's knob defaults (`DatasetOptions` and `SplitOptions`): a dict at runtime."""

    batch_size: int
    block_chunks: int
    max_inflight: int
    seed: int
    shuffle: bool
    prefetch_depth: int
    cache_budget_bytes: int | None
    on_bad_chunk: str
    fractions: tuple[float, float, float]
    split_seed: int
    contiguous: bool
    probe_chunks: int

def defaults() -> Defaults: ...
def verdict(
    *,
    queue_samples: int,
    consumer_s: float,
    consumer_wait_s: float,
    blocked: list[float],
    inflight_peak: int,
    max_inflight: int,
) -> tuple[str, str, bool]: ...
def _shutdown() -> None: ...

# The engine's rules (python-bindings/src/rules.rs): draw orders and tile arithmetic.
def chunk_permutation(chunk_ids: list[int], *, seed: int, epoch: int, split: str) -> npt.NDArray[np.int64]: ...
def draw_order_rows(
    chunk_ids: list[int],
    samples_per_chunk: int,
    n_samples: int,
    *,
    block_chunks: int,
    first_block_chunks: int | None,
    anchor_range: tuple[int, int] | None,
    shuffle: tuple[int, int, str] | None,
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]: ...
def shuffle_quality(anchors: list[int]) -> float: ...
def fleet_summary_json(reports: str) -> str: ...
def chunk_of(geom: ArrayGeometry, sample_index: int) -> int: ...
def samples_in_chunk(geom: ArrayGeometry, chunk_index: int) -> tuple[int, int]: ...
def inner_shape(geom: ArrayGeometry) -> list[int]: ...
def inner_chunks(geom: ArrayGeometry) -> list[int]: ...
def inner_grid(geom: ArrayGeometry) -> list[int]: ...
def n_inner_chunks(geom: ArrayGeometry) -> int: ...
def inner_coord(geom: ArrayGeometry, index: int) -> list[int]: ...
def inner_index(geom: ArrayGeometry, inner_coord: list[int]) -> int: ...
def physical_chunk_coord(geom: ArrayGeometry, chunk_index: int, inner_coord: list[int]) -> list[int]: ...
def slot_shape(geom: ArrayGeometry, chunk_index: int) -> list[int]: ...
def tile_placement(
    geom: ArrayGeometry, chunk_index: int, inner_coord: list[int]
) -> tuple[list[int], list[tuple[int, int]], list[tuple[int, int]], bool]: ...
def dtype_size(name: str) -> int: ...

# Core's rules for the package's own arguments: a count's range, a split's word.
def checked_count(name: str, value: int, minimum: int) -> int: ...
def parse_split(split: str) -> Literal["train", "val", "test", "all"]: ...

@final
class StoreReader:
    """A store opened for raw reads through the engine's storage (the notebook widget's kernel side)."""

    def __new__(cls, store: Any, storage_options: list[tuple[str, str]] = ...) -> Self: ...
    def get(self, key: str, start: int | None = None, end: int | None = None, suffix: int | None = None) -> bytes | None: ...
    def list(self, prefix: str) -> list[str] | None: ...
    @property
    def location(self) -> str: ...

@final
class StandardScaler:
    def __new__(
        cls,
        mean: dict[str, npt.ArrayLike],
        std: dict[str, npt.ArrayLike],
        eps: float = 1e-8,
        cache_key: str | None = None,
    ) -> Self: ...
    @property
    def __name__(self) -> str: ...  # "standard_scaler": how transforms are named in reports
    def validate_scope(self, scope: list[str]) -> None: ...
    @property
    def eps(self) -> float: ...
    @property
    def mean(self) -> dict[str, float | np.ndarray]: ...
    @property
    def std(self) -> dict[str, float | np.ndarray]: ...
    @property
    def cache_key(self) -> str | None: ...
    @property
    def cache_token(self) -> str: ...
    def save(self, path: str | PathLike[str]) -> None: ...
    @staticmethod
    def load(path: str | PathLike[str]) -> StandardScaler: ...

def _storage_conformance(store: Any, can_list: bool = True) -> tuple[list[str], list[tuple[str, str]]]: ...
def _storage_conformance_fixture() -> list[tuple[str, bytes]]: ...

_BatchTuple = tuple[
    dict[str, np.ndarray],
    npt.NDArray[np.int64],
    dict[str, int],
    int,
    int,
    npt.NDArray[np.int64] | None,
    tuple[str, ...],
    tuple[str, int, int] | None,
    dict[str, np.ndarray],
]

@final
class NativeStream:
    def next(self) -> _BatchTuple | None: ...
    def __len__(self) -> int: ...
    def stats_json(self) -> str | None: ...
    def checkpoint_json(self) -> str: ...
    def close(self) -> None: ...

@final
class NativeDataset:
    def __new__(
        cls,
        store: str | Any,
        manifest: SplitManifest | None,
        variables: list[tuple[str, ArrayGeometry]] | None,
        *,
        batch_size: int,
        block_chunks: int,
        max_inflight: int,
        seed: int,
        shuffle: bool,
        prefetch_depth: int,
        cache_budget_bytes: int | None,
        on_bad_chunk: str,
        storage_options: list[tuple[str, str]],
        threads: int | None = None,
        chunk_transforms: list[tuple[list[str] | None, Any]] = ...,
        batch_transforms: list[Any] = ...,
        cache_dir: str | None = None,
        persist: bool = False,
        readonly_cache: bool = False,
        reset_stale_cache: bool = False,
        shared_cache: bool = False,
        rank: int = 0,
        world_size: int = 1,
        node_ranks: int | None = None,
        first_block_chunks: int | None = None,
        read_policy: dict[str, Any] | None = ...,
        patch: list[tuple[str | int, int]] | None = None,
        patch_mode: str | None = None,
        patch_stride: list[tuple[str | int, int]] | None = None,
        patches_per_sample: int | None = None,
        sample_mask: list[bool] | None = None,
        sample_weights: list[float] | None = None,
        model_parallel: tuple[int, str | int] | None = None,
        callbacks: list[Any] = ...,
        metrics_address: str | None = None,
        coords: bool = False,
        sel_time: tuple[str, int, int] | None = None,
        sel_number: tuple[str, float, float] | None = None,
        concat_dim: str | None = None,
    ) -> Self: ...
    def probe(self, split: str, chunks: int) -> tuple[str, str]: ...
    def iter(self, split: str) -> NativeStream: ...
    def resume(self, checkpoint_json: str) -> NativeStream: ...
    def check_resume(self, checkpoint_json: str) -> None: ...
    def fresh_checkpoint_json(self, split: str, epoch: int) -> str: ...

    def set_epoch(self, epoch: int) -> None: ...
    @property
    def epoch(self) -> int: ...
    @property
    def manifest(self) -> SplitManifest: ...
    @property
    def variables(self) -> list[tuple[str, ArrayGeometry]]: ...
    @property
    def block_chunks(self) -> int: ...
    def draw_order(self, split: str, epoch: int) -> npt.NDArray[np.int64]: ...
    def cache_warnings(self) -> list[str]: ...
    def describe_json(self, iterations: int) -> str: ...
    def render_summary(self, iterations: int) -> str: ...
    def quality_curve_json(self, values: list[int]) -> str: ...
    def metrics_address(self) -> str | None: ...
    def last_pass_json(self) -> str | None: ...
    def bad_chunks_json(self) -> str: ...
    def close(self) -> None: ...
    @property
    def closed(self) -> bool: ...
    @property
    def url(self) -> str: ...
