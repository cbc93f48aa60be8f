"""The epoch's draw order, as the engine computes it: insitubatch 0.2.0's shuffle functions on
our spec.

The reference implementation draws with numpy's ``default_rng((seed, epoch))``. Our engine
uses a written, cross-target contract instead (``core/src/shuffle.rs``; ARCHITECTURE.md), so
the CLI, wasm and Python all draw the same order for ``(seed, epoch, split)``.

Every function here hands its arguments to that code (``_native``, ``python-bindings/src/
rules.rs``): the chunk permutation, the blocks and their shuffles, the shuffle quality, and
the checks of the arguments (a bad value is core's ``ValueError``, naming it), so
``block_shuffled_order(...)`` over a dataset's train chunks equals ``ds.draw_order("train")``
by construction. What stays here is insitubatch 0.2.0's :class:`DrawOrder` container: its rows,
blocks and :meth:`DrawOrder.keep`, which the engine has no form of.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from . import _native


@dataclasses.dataclass(eq=False)
class DrawOrder:
    """One epoch's ``[chunk_id, within]`` draw rows, and the shuffle blocks holding them.

    ``rows`` has shape ``(N, 2)``; ``bounds`` holds ``n_blocks + 1`` row offsets, so block
    ``i`` is ``rows[bounds[i]:bounds[i + 1]]``. Blocks are contiguous, gapless and cover
    every row. ``samples_per_chunk`` (ours) lets :attr:`anchors` turn rows into global
    sample indices.
    """

    rows: np.ndarray
    bounds: np.ndarray
    samples_per_chunk: int | None = None

    def __len__(self) -> int:
        return int(len(self.rows))

    @property
    def n_blocks(self) -> int:
        """The number of shuffle blocks."""
        return max(int(len(self.bounds)) - 1, 0)

    def block(self, index: int) -> tuple[int, int]:
        """Half-open row range ``[start, stop)`` of block ``index``.

        Raises:
            IndexError: ``index`` is not below ``n_blocks`` (numpy's indexing: a negative
                ``index`` counts from the end).
        """
        return int(self.bounds[index]), int(self.bounds[index + 1])

    @property
    def anchors(self) -> np.ndarray:
        """The rows as global anchor sample indices (``chunk_id * spc + within``).

        Raises:
            ValueError: the order has no ``samples_per_chunk``.
        """
        if self.samples_per_chunk is None:
            raise ValueError("this DrawOrder has no samples_per_chunk; compute rows[:, 0] * spc + rows[:, 1]")
        return self.rows[:, 0] * self.samples_per_chunk + self.rows[:, 1]

    def keep(self, mask: np.ndarray) -> DrawOrder:
        """Drop the rows ``mask`` excludes, narrowing the blocks that held them.

        ``mask`` holds one boolean per row. A block emptied outright is dropped; every other
        block keeps its membership.

        Raises:
            IndexError: ``mask`` does not hold one boolean per row (numpy's error for a
                boolean index of the wrong length).
        """
        flags = np.asarray(mask, dtype=bool).reshape(-1)
        if len(flags) != len(self.rows):
            raise IndexError(
                f"keep() needs one boolean per row: the mask holds {len(flags)} but the order has {len(self.rows)} rows"
            )
        kept = np.flatnonzero(flags)
        bounds = np.searchsorted(kept, self.bounds)  # old offset -> surviving rows before it
        nonempty = np.concatenate([[True], np.diff(bounds) > 0])
        return DrawOrder(self.rows[kept], bounds[nonempty].astype(np.int64), self.samples_per_chunk)


def _chunk_ids(chunk_ids: Sequence[int] | np.ndarray) -> list[int]:
    """The ids as int64s, flattened (the engine sorts, deduplicates and checks them)."""
    return np.asarray(chunk_ids, dtype=np.int64).reshape(-1).tolist()


def _split(split: str) -> str:
    """A split's word (``SplitName.TRAIN`` or ``"train"``); the engine parses it."""
    return str(getattr(split, "value", split))


def _order(
    chunk_ids: Sequence[int] | np.ndarray,
    samples_per_chunk: int,
    n_samples: int,
    *,
    block_chunks: int,
    anchor_range: tuple[int, int] | None,
    first_block_chunks: int | None,
    shuffle: tuple[int, int, str] | None,
) -> DrawOrder:
    spc = int(samples_per_chunk)
    rows, bounds = _native.draw_order_rows(
        _chunk_ids(chunk_ids),
        spc,
        int(n_samples),
        block_chunks=int(block_chunks),
        first_block_chunks=None if first_block_chunks is None else int(first_block_chunks),
        anchor_range=None if anchor_range is None else (int(anchor_range[0]), int(anchor_range[1])),
        shuffle=shuffle,
    )
    return DrawOrder(rows, bounds, spc)


def chunk_permutation(
    chunk_ids: Sequence[int] | np.ndarray, *, seed: int, epoch: int, split: str = "train"
) -> np.ndarray:
    """Deterministically permute chunk ids for one epoch, as the engine's ``split`` pass does.

    Keyed on ``(seed, epoch, split)`` only, never on hardware. The ids are sorted and
    deduplicated first (insitubatch 0.2.0 permutes them in the order given): the engine's
    order is a function of the set of chunks.

    Raises:
        ValueError: a negative chunk id, ``seed < 0``, ``epoch < 0``, or an unknown split.
    """
    return _native.chunk_permutation(_chunk_ids(chunk_ids), seed=int(seed), epoch=int(epoch), split=_split(split))


def block_shuffled_order(
    chunk_ids: Sequence[int] | np.ndarray,
    samples_per_chunk: int,
    n_samples: int,
    *,
    block_chunks: int,
    seed: int,
    epoch: int,
    split: str = "train",
    anchor_range: tuple[int, int] | None = None,
    first_block_chunks: int | None = None,
) -> DrawOrder:
    """The shuffled ``[chunk_id, within]`` draw order of one epoch.

    Chunks are permuted per epoch; within each block of ``block_chunks`` chunks every
    sample is shuffled together. ``n_samples`` sizes a short final chunk. ``anchor_range``
    (ours: ``valid_anchor_range(offsets, n_samples)`` of a windowed dataset) drops edge
    anchors *before* permuting, as the engine does, so the result equals the dataset's
    ``draw_order``; insitubatch 0.2.0 instead drops them afterwards with
    :meth:`DrawOrder.keep`. ``first_block_chunks`` (ours; pass
    ``describe()["config"]["first_block_chunks"]``) makes the first block that many chunks,
    as the dataset option of that name does.

    Raises:
        ValueError: ``samples_per_chunk < 1``, ``n_samples < 0``, ``block_chunks < 1``,
            ``first_block_chunks < 1``, a negative chunk id, ``seed < 0``, ``epoch < 0``, or an
            unknown split.
    """
    return _order(
        chunk_ids,
        samples_per_chunk,
        n_samples,
        block_chunks=block_chunks,
        anchor_range=anchor_range,
        first_block_chunks=first_block_chunks,
        shuffle=(int(seed), int(epoch), _split(split)),
    )


def sequential_order(
    chunk_ids: Sequence[int] | np.ndarray,
    samples_per_chunk: int,
    n_samples: int,
    *,
    block_chunks: int,
    anchor_range: tuple[int, int] | None = None,
    first_block_chunks: int | None = None,
) -> DrawOrder:
    """In-order ``[chunk_id, within]`` draws (chunks ascending), grouped into blocks (the
    first of ``first_block_chunks`` when set, as in :func:`block_shuffled_order`).

    No chunks is an empty order of the same shape, not an error.

    Raises:
        ValueError: ``samples_per_chunk < 1``, ``n_samples < 0``, ``block_chunks < 1``,
            ``first_block_chunks < 1``, or a negative chunk id.
    """
    return _order(
        chunk_ids,
        samples_per_chunk,
        n_samples,
        block_chunks=block_chunks,
        anchor_range=anchor_range,
        first_block_chunks=first_block_chunks,
        shuffle=None,
    )


def shuffle_quality(order: np.ndarray | DrawOrder, samples_per_chunk: int | None = None) -> float:
    """How well an order mixes its samples, 0..1 (1 ~ a global shuffle).

    The mean absolute gap in source *rank* between consecutive draws over ``n / 3`` (the
    expected gap of a uniform shuffle), capped at 1 -- the engine's score (``describe()``'s
    ``shuffle_quality``). ``order`` is ``(N, 2)`` rows with ``samples_per_chunk``, a
    :class:`DrawOrder`, or 1-D anchors. Ranks rather than the raw indices insitubatch 0.2.0
    scores, so a split of scattered chunks scores like a contiguous one.

    Raises:
        ValueError: ``(N, 2)`` rows without ``samples_per_chunk``.
    """
    if isinstance(order, DrawOrder):
        samples_per_chunk = order.samples_per_chunk if samples_per_chunk is None else samples_per_chunk
        order = order.rows
    a = np.asarray(order, dtype=np.int64)
    if a.ndim == 2:
        if samples_per_chunk is None:
            raise ValueError("shuffle_quality of [chunk_id, within] rows needs samples_per_chunk")
        a = a[:, 0] * int(samples_per_chunk) + a[:, 1]
    return _native.shuffle_quality(a.reshape(-1).tolist())
