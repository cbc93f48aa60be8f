"""Chunk-granular splits: insitubatch 0.2.0's ``SplitManifest`` as a plain, constructible record.

The engine owns the arithmetic (``split_by_chunk``, a split's chunks and samples, the JSON
format, validation); this class is insitubatch 0.2.0's dataclass shape over it, whose methods
ask the engine's manifest of its fields (built unchecked, as the dataclass is: a manifest is
checked when a dataset is built from it). Both libraries write the same JSON keys
(``n_chunks``, ``sample_chunk_size``, ``n_samples``, ``chunks``, ``seed``), so a manifest
written by either reads in the other.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable
from typing import Any, cast

import numpy as np

from . import _native
from ._types import ArrayGeometry, native_geometry, split_name

# The engine's split defaults (SplitOptions::default()): restated nowhere here.
_D = _native.defaults()


@dataclasses.dataclass
class SplitManifest:
    """Which sample-axis chunk indices belong to each split.

    ``chunks`` maps ``"train"``/``"val"``/``"test"`` to sorted chunk ids on the reference grid
    (``sample_chunk_size`` samples per chunk). Constructible by hand; the engine validates it
    (ids in range, counts consistent) when a dataset is built from it.
    """

    n_chunks: int
    sample_chunk_size: int
    n_samples: int
    chunks: dict[str, list[int]]
    seed: int = 0

    def __post_init__(self) -> None:
        self.chunks = {split_name(k): [int(c) for c in v] for k, v in self.chunks.items()}

    def chunks_of(self, split: Any) -> list[int]:
        """The chunk ids of ``split``; ``"all"`` (or ``None``) is the sorted union.

        Raises:
            ValueError: an unknown split, or a chunk key that names none.
        """
        return self._engine_manifest().chunks_of(split_name(split))

    def sample_indices(self, split: Any, geom: ArrayGeometry | None = None) -> np.ndarray:
        """Global sample indices of ``split``'s chunks, in chunk order (int64).

        With ``geom`` (insitubatch 0.2.0's signature) the chunks are expanded on that
        geometry's grid; without it, on the manifest's own reference grid.

        Raises:
            ValueError: an unknown split, or a chunk key that names none.
        """
        grid = None if geom is None else native_geometry(geom)
        return self._engine_manifest().sample_indices(split_name(split), grid)

    def to_json(self, path: str | os.PathLike[str] | None = None) -> str:
        """The manifest as JSON (insitubatch 0.2.0's keys); also written to ``path`` when given.

        Raises:
            OSError: ``path`` cannot be written.
            ValueError: a chunk key that names no split.
        """
        text = self._engine_manifest().to_json()
        if path is not None:
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
        return text

    @classmethod
    def from_json(cls, path: str | os.PathLike[str]) -> SplitManifest:
        """Read a manifest written by either library.

        Raises:
            OSError: ``path`` cannot be read (``FileNotFoundError`` when it does not exist).
            ValueError: the file is not a valid manifest.
        """
        with open(path, encoding="utf-8") as f:
            return cls.from_json_str(f.read())

    @classmethod
    def from_json_str(cls, text: str) -> SplitManifest:
        """Parse and validate a manifest from a JSON string.

        Raises:
            ValueError: malformed JSON, a missing key, or counts and chunk ids that disagree.
        """
        return cls._from_native(_native.SplitManifest.from_json_str(text))

    @classmethod
    def _from_native(cls, m: _native.SplitManifest) -> SplitManifest:
        return cls(m.n_chunks, m.sample_chunk_size, m.n_samples, dict(m.chunks), m.seed)

    def _engine_manifest(self) -> _native.SplitManifest:
        """The engine's manifest of these fields, unchecked (the dataclass is mutable: asked
        each time)."""
        return _native.SplitManifest(self.n_chunks, self.sample_chunk_size, self.n_samples, self.chunks, self.seed)

    def _to_native(self) -> _native.SplitManifest:
        """The engine's manifest, checked (counts consistent, ids in range and once per split).

        Raises:
            ValueError: what the engine refuses.
        """
        m = self._engine_manifest()
        m.check()
        return m


def native_manifest(m: Any) -> _native.SplitManifest | None:
    """The engine's manifest for ``m`` (ours, the extension's, or ``None``)."""
    if m is None or isinstance(m, _native.SplitManifest):
        return m
    if isinstance(m, SplitManifest):
        return m._to_native()
    raise TypeError(f"manifest must be a SplitManifest (from split_by_chunk), got {type(m).__name__}")


def split_by_chunk(
    geom: ArrayGeometry,
    *,
    fractions: tuple[float, float, float] = _D["fractions"],
    seed: int = _D["seed"],
    contiguous: bool = _D["contiguous"],
    sample_range: tuple[int, int] | None = None,
) -> SplitManifest:
    """Partition ``geom``'s sample-axis chunks into train/val/test (chunk-aligned).

    ``fractions`` are of chunks and must sum to 1; split sizes round half to even like
    insitubatch 0.2.0's. ``contiguous=False`` shuffles chunks first (our engine's seeded
    stream, not numpy's, so the chosen chunks differ from insitubatch 0.2.0's for the same
    seed). ``sample_range=(start, stop)`` keeps the chunks overlapping that half-open range.

    Raises:
        TypeError: ``geom`` is not an ``ArrayGeometry``.
        ValueError: ``fractions`` that are not three non-negative numbers summing to 1,
            ``seed < 0``, or a ``sample_range`` outside ``0 <= start < stop <= n_samples``.
    """
    if sample_range is not None and int(sample_range[0]) < 0:
        # The engine's range is unsigned: a negative start is refused here, in its words.
        start, stop = (int(x) for x in sample_range)
        raise ValueError(
            f"sample_range ({start}, {stop}) must satisfy 0 <= start < stop <= n_samples = {geom.n_samples}"
        )
    m = _native.split_by_chunk(
        native_geometry(geom),
        # Three of them: the engine says so otherwise (a wrong count is its error to name).
        fractions=cast("tuple[float, float, float]", tuple(float(f) for f in fractions)),
        seed=int(seed),
        contiguous=bool(contiguous),
        sample_range=None if sample_range is None else (int(sample_range[0]), int(sample_range[1])),
    )
    return SplitManifest._from_native(m)


def valid_anchor_range(offsets: Iterable[int], n_samples: int) -> tuple[int, int]:
    """Half-open ``[lo, hi)`` of anchors whose every ``anchor + offset`` lies in
    ``[0, n_samples)``; an over-wide window gives the empty range ``(lo, lo)``.

    Raises:
        OverflowError: a negative ``n_samples``, or a number past 64 bits.
    """
    return _native.valid_anchor_range([int(o) for o in offsets], int(n_samples))
