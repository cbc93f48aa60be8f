"""The data types of insitubatch 0.2.0's API (``insitubatch.types``), over the engine's geometry.

``ArrayGeometry`` is a Python class holding the engine's own geometry (``_native``), so
geometries read from a store keep what only the store knows (a sharded array's shard shape)
when they are passed back to the engine. Every member insitubatch 0.2.0 derives from ``(shape,
chunks, sample_axis, offset, dtype)`` is the engine's own arithmetic (``core/src/geometry.rs``
and the tile placement of ``core/src/assemble.rs``, through ``python-bindings/src/rules.rs``),
sample-first; this module only converts arguments and results.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from . import _native


class SplitName(str, enum.Enum):
    """The three splits of a manifest (insitubatch 0.2.0's ``StrEnum``; equal to its string)."""

    TRAIN = "train"
    VAL = "val"
    TEST = "test"

    def __str__(self) -> str:
        return self.value


def split_name(split: Any) -> str:
    """``"train"`` for ``SplitName.TRAIN`` or ``"train"``; ``None`` means ``"all"``."""
    return "all" if split is None else str(getattr(split, "value", split))


def _bfloat16() -> Any:
    try:
        import ml_dtypes  # type: ignore[import-not-found]
    except ImportError:
        return None
    return np.dtype(ml_dtypes.bfloat16)


def dtype_name(dtype: Any) -> str:
    """The engine's (zarr v3) name of a numpy dtype, type or string: ``float32``, ``bfloat16``."""
    if isinstance(dtype, str) and dtype == "bfloat16":
        return dtype
    try:
        dt = np.dtype(dtype)
    except TypeError as e:
        raise ValueError(f"unsupported dtype {dtype!r}: pass a numpy dtype, type or name such as 'float32'") from e
    return dt.name  # byte order is the store's business, not the geometry's


def np_dtype(name: str) -> Any:
    """The numpy dtype for an engine dtype name. bfloat16 is ``ml_dtypes.bfloat16`` when
    ml_dtypes is importable; without it there is no numpy dtype and the name is returned."""
    if name == "bfloat16":
        bf16 = _bfloat16()
        return name if bf16 is None else bf16
    return np.dtype(name)


class ChunkProjection(NamedTuple):
    """Where one stored tile lands in its assembled chunk (the fields of zarr's
    ``ChunkProjection``, without importing zarr). Both selections are sample-first."""

    chunk_coords: tuple[int, ...]
    chunk_selection: tuple[slice, ...]
    out_selection: tuple[slice, ...]
    is_complete_chunk: bool


class ArrayGeometry:
    """The geometry of one zarr array, or a windowed view of it (``offset``).

    ``shape`` and ``chunks`` are in physical (zarr) axis order; ``sample_axis`` names the
    axis that is split, shuffled and batched. ``chunks`` is the fetch unit: the stored
    chunk, or the inner chunk of a sharded array (``shard`` then gives the shard;
    insitubatch 0.2.0 calls the shard the chunk and cannot read inside it). ``dtype`` may be a
    numpy dtype, type or name. Frozen and hashable; ``shift(k)`` gives the view ``k`` samples
    later.

    Raises:
        ValueError: ``sample_axis`` out of range, an unsupported ``dtype``, or a ``shape`` and
            ``chunks`` the engine refuses (different ranks, a zero chunk extent).
        dataclasses.FrozenInstanceError: on assigning or deleting an attribute.
    """

    __slots__ = ("_g",)
    _g: _native.ArrayGeometry

    def __init__(
        self,
        path: str,
        shape: Sequence[int],
        chunks: Sequence[int],
        dtype: Any,
        offset: int = 0,
        sample_axis: int = 0,
    ) -> None:
        shape, chunks = [int(s) for s in shape], [int(c) for c in chunks]
        if int(sample_axis) < 0:  # the engine's axis is unsigned; it checks the upper bound
            raise ValueError(
                f"sample_axis {sample_axis} out of range for {len(shape)}-D array {path!r} with shape {tuple(shape)}"
            )
        g = _native.ArrayGeometry(
            str(path), shape, chunks, dtype_name(dtype), sample_axis=int(sample_axis), offset=int(offset)
        )
        object.__setattr__(self, "_g", g)

    @classmethod
    def _wrap(cls, g: _native.ArrayGeometry) -> ArrayGeometry:
        obj = cls.__new__(cls)
        object.__setattr__(obj, "_g", g)
        return obj

    def __setattr__(self, name: str, value: object) -> None:
        raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}: ArrayGeometry is frozen")

    def __delattr__(self, name: str) -> None:
        raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}: ArrayGeometry is frozen")

    def __reduce__(self) -> tuple[Any, ...]:
        return (ArrayGeometry, (self.path, self.shape, self.chunks, self._g.dtype, self.offset, self.sample_axis))

    # -- the fields -------------------------------------------------------------------
    @property
    def path(self) -> str:
        """The array's path in the store."""
        return self._g.path

    @property
    def shape(self) -> tuple[int, ...]:
        """The array's shape, physical (zarr) axis order."""
        return tuple(self._g.shape)

    @property
    def chunks(self) -> tuple[int, ...]:
        """The fetch unit's shape (the stored chunk, or a sharded array's inner chunk),
        physical order."""
        return tuple(self._g.chunks)

    @property
    def dtype(self) -> Any:
        """A numpy dtype (``ml_dtypes.bfloat16`` for bfloat16; its name without ml_dtypes)."""
        return np_dtype(self._g.dtype)

    @property
    def offset(self) -> int:
        """How many samples after its anchor this view reads (``shift(k)`` adds ``k``)."""
        return self._g.offset

    @property
    def sample_axis(self) -> int:
        """The axis that is split, shuffled and batched."""
        return self._g.sample_axis

    @property
    def shard(self) -> tuple[int, ...] | None:
        """The shard shape of a sharded array (ours), else ``None``."""
        s = self._g.shard
        return None if s is None else tuple(s)

    # -- derived ----------------------------------------------------------------------
    @property
    def n_samples(self) -> int:
        """The sample axis's length."""
        return self._g.n_samples

    @property
    def sample_chunk_size(self) -> int:
        """Samples per chunk along the sample axis."""
        return self._g.sample_chunk_size

    @property
    def n_chunks(self) -> int:
        """Chunks along the sample axis (the last may be short)."""
        return self._g.n_chunks

    @property
    def inner_shape(self) -> tuple[int, ...]:
        """One sample's shape: every axis but the sample axis, physical order."""
        return tuple(_native.inner_shape(self._g))

    @property
    def inner_chunks(self) -> tuple[int, ...]:
        """The fetch unit's extent on the inner axes, physical order."""
        return tuple(_native.inner_chunks(self._g))

    @property
    def chunk_bytes(self) -> int:
        """Bytes of one sample-axis chunk's stored tiles, edge padding included (insitubatch
        0.2.0's residency charge; our pool holds the clipped chunk, see ``describe()``'s
        ``slot_bytes``)."""
        return self._g.chunk_bytes

    @property
    def sample_bytes(self) -> int:
        """Bytes of one sample (ours)."""
        return self._g.sample_bytes

    def shift(self, k: int) -> ArrayGeometry:
        """The view of the same array read ``k`` samples later (shifts compose)."""
        return ArrayGeometry._wrap(self._g.shift(int(k)))

    def chunk_of(self, sample_index: int) -> int:
        """The sample-axis chunk holding ``sample_index``.

        Raises:
            ValueError: ``sample_index < 0``.
        """
        return _native.chunk_of(self._g, int(sample_index))

    def samples_in_chunk(self, chunk_index: int) -> range:
        """Global sample indices of ``chunk_index`` (a short final chunk is short).

        Raises:
            ValueError: ``chunk_index < 0``.
        """
        return range(*_native.samples_in_chunk(self._g, int(chunk_index)))

    def inner_grid(self) -> tuple[range, ...]:
        """Per inner axis, the range of tile indices."""
        return tuple(range(n) for n in _native.inner_grid(self._g))

    def inner_coords(self) -> Iterator[tuple[int, ...]]:
        """Every inner tile coordinate, row-major."""
        return (tuple(_native.inner_coord(self._g, i)) for i in range(self.n_inner_chunks()))

    def n_inner_chunks(self, chunk_index: int = 0) -> int:
        """Tiles per sample-axis chunk (the same for every chunk)."""
        return _native.n_inner_chunks(self._g)

    def inner_index(self, inner_coord: Sequence[int]) -> int:
        """Row-major position of ``inner_coord`` in :meth:`inner_coords`.

        Raises:
            ValueError: ``inner_coord`` has another number of axes than the inner grid.
        """
        return _native.inner_index(self._g, [int(i) for i in inner_coord])

    def physical_chunk_coord(self, chunk_index: int, inner_coord: Sequence[int]) -> tuple[int, ...]:
        """The full physical tile coordinate: ``chunk_index`` reinserted at the sample axis.

        Raises:
            ValueError: ``inner_coord`` has another number of axes than the inner grid, or a
                negative index.
        """
        return tuple(_native.physical_chunk_coord(self._g, int(chunk_index), [int(i) for i in inner_coord]))

    def slot_shape(self, chunk_index: int) -> tuple[int, ...]:
        """Shape of an assembled chunk: ``(rows in chunk, *inner_shape)``.

        Raises:
            ValueError: ``chunk_index < 0``.
        """
        return tuple(_native.slot_shape(self._g, int(chunk_index)))

    def tile_shape(self) -> tuple[int, ...]:
        """One stored tile's shape, sample-first, padding included."""
        return (self.sample_chunk_size, *self.inner_chunks)

    def tile_placement(self, chunk_index: int, inner_coord: Sequence[int]) -> ChunkProjection:
        """Where tile ``inner_coord`` of chunk ``chunk_index`` lands in the assembled chunk:
        ``out_selection`` into the chunk, ``chunk_selection`` into the (padded) tile.

        Raises:
            ValueError: ``inner_coord`` has another number of axes than the inner grid, or a
                negative index.
        """
        coords, tile, out, complete = _native.tile_placement(self._g, int(chunk_index), [int(i) for i in inner_coord])
        return ChunkProjection(
            tuple(coords), tuple(slice(a, b) for a, b in tile), tuple(slice(a, b) for a, b in out), complete
        )

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ArrayGeometry) and self._g == other._g

    def __hash__(self) -> int:
        return hash(self._g)

    def __repr__(self) -> str:
        shard = "" if self.shard is None else f", shard={self.shard}"
        return (
            f"ArrayGeometry(path={self.path!r}, shape={self.shape}, chunks={self.chunks}, "
            f"dtype={self._g.dtype!r}, offset={self.offset}, sample_axis={self.sample_axis}{shard})"
        )


def native_geometry(g: Any) -> _native.ArrayGeometry:
    """The engine's geometry behind ``g`` (ours, or the extension's own class)."""
    if isinstance(g, ArrayGeometry):
        return g._g
    if isinstance(g, _native.ArrayGeometry):
        return g
    raise TypeError(f"expected an ArrayGeometry, got {type(g).__name__}")


@dataclasses.dataclass(frozen=True)
class ChunkRead:
    """Which chunk a transform is looking at: the zarr array path and the chunk index along
    the sample axis. Frozen and hashable."""

    array: str
    chunk_index: int


@dataclasses.dataclass(frozen=True)
class StoredChunkRead:
    """One stored tile: ``(chunk_index, *inner_coord)`` of array ``array``. ``ds.bad_chunks``
    lists these; ``error`` (ours) says why the tile was filled."""

    array: str
    chunk_index: int
    inner_coord: tuple[int, ...]
    error: str = dataclasses.field(default="", compare=False)

    @property
    def coords(self) -> tuple[int, ...]:
        """``(chunk_index, *inner_coord)``."""
        return (self.chunk_index, *self.inner_coord)


@dataclasses.dataclass
class DecodedChunk:
    """What a chunk transform receives (insitubatch 0.2.0's ``DecodedChunk(read, data, sample_offset)``).

    ``data`` is the logical chunk ``(rows, *inner)``: sample axis first, contiguous, with no
    edge padding; a short final chunk arrives short. ``sample_offset`` is the global index of
    its first row. Return the chunk with new data (``dataclasses.replace(chunk, data=...)``,
    ``chunk.replace(data)``, or assigning ``chunk.data``), or just the new array.
    """

    read: ChunkRead
    data: np.ndarray
    sample_offset: int

    @property
    def array(self) -> str:
        """The zarr array path (``read.array``)."""
        return self.read.array

    @property
    def chunk_index(self) -> int:
        """The chunk index along the sample axis (``read.chunk_index``)."""
        return self.read.chunk_index

    def replace(self, data: np.ndarray) -> DecodedChunk:
        """The same chunk with other data."""
        return DecodedChunk(self.read, data, self.sample_offset)


def _empty_indices() -> np.ndarray:
    return np.empty(0, dtype=np.int64)


@dataclasses.dataclass(eq=False, repr=False, slots=True)
class Batch(Mapping[str, np.ndarray]):
    """A model-ready batch: label → ``(rows, *inner)`` numpy array, rows aligned.

    The arrays are zero-copy views of engine buffers; dropping them returns the memory
    to the engine for reuse. numpy has no bfloat16: a bfloat16 array comes as
    ``ml_dtypes.bfloat16`` when ml_dtypes is importable (JAX brings it;
    ``pip install ml_dtypes`` otherwise), else as its raw ``uint16`` words.

    A dataclass like insitubatch 0.2.0's ``Batch(arrays, sample_indices, offsets)``, so a
    batch transform may return ``dataclasses.replace(batch, arrays={...})``. Also a read-only
    mapping (``batch["t2m"]``, a ``KeyError`` for a label it lacks), but ``len(batch)`` is the
    row count, as in insitubatch 0.2.0.
    """

    arrays: dict[str, np.ndarray]
    sample_indices: np.ndarray = dataclasses.field(default_factory=_empty_indices)
    offsets: dict[str, int] = dataclasses.field(default_factory=dict)
    index: int = 0
    epoch: int = 0
    #: With ``patch=...``: each row's patch start on each patched axis, ``(rows, len(patch_dims))``
    #: int64; ``None`` for whole samples.
    patch_origins: np.ndarray | None = None
    #: The patched axes in ``patch_origins``' column order (dimension names, or ``axis{k}``).
    patch_dims: tuple[str, ...] = ()
    #: With ``model_parallel=k``: this rank's part of every row, ``(axis, start, stop)`` in the
    #: row's box (the field, or its patch); ``None`` for whole rows.
    model_part: tuple[str, int, int] | None = None
    #: With ``coords=True`` (or ``sel``): the sample axis's coordinate value of each row,
    #: ``{"time": datetime64[ns] array}``, and with patches each patched axis's coordinate
    #: values that each row's patch covers, ``{"lat": (rows, patch extent)}``; empty otherwise.
    coords: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)

    def __getitem__(self, label: str) -> np.ndarray:
        return self.arrays[label]

    def __iter__(self) -> Iterator[str]:
        return iter(self.arrays)

    def __len__(self) -> int:
        """Rows in the batch (only an epoch's last batch is short)."""
        return int(self.sample_indices.shape[0])

    @property
    def labels(self) -> list[str]:
        """The batch's labels, in order."""
        return list(self.arrays)

    def read_indices(self, label: str) -> np.ndarray:
        """Where each row of ``label`` was read on the sample axis: anchor + offset.

        Raises:
            KeyError: the batch has no ``label``.
        """
        if label not in self.arrays:
            raise KeyError(label)
        return self.sample_indices + np.int64(self.offsets.get(label, 0))

    def stack(self, labels: Sequence[str], axis: int = 1) -> np.ndarray:
        """Stack ``labels`` along a new ``axis`` (default 1: ``(rows, len(labels), *inner)``), a copy.

        Raises:
            ValueError: no labels, a label the batch lacks, or arrays whose shapes or dtypes
                differ.
        """
        if not labels:
            raise ValueError("stack needs at least one label")
        arrays = []
        for label in labels:
            if label not in self.arrays:
                raise ValueError(f"batch has no label {label!r}")
            arrays.append(self.arrays[label])
        first = arrays[0]
        if any(a.shape != first.shape or a.dtype != first.dtype for a in arrays):
            raise ValueError(f"cannot stack {list(labels)!r}: shapes or dtypes differ")
        return np.stack(arrays, axis=axis)

    def __repr__(self) -> str:
        shapes = ", ".join(f"{k}: {v.dtype}{list(v.shape)}" for k, v in self.arrays.items())
        return f"Batch(epoch={self.epoch}, index={self.index}, rows={len(self)}, {{{shapes}}})"
