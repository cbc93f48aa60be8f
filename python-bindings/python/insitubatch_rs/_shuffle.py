"""The epoch's draw order, as the engine computes it: the anchor's shuffle functions on our spec.

The anchor (insitubatch 0.2.0) draws with numpy's ``default_rng((seed, epoch))``. Our engine
uses a written, cross-target contract instead (``core/src/shuffle.rs``; ARCHITECTURE.md), so
the CLI, wasm and Python all draw the same order for ``(seed, epoch, split)``:

1. A stream keyed by words ``[seed, epoch, split_tag, purpose, index]``: ``h = 0; for w:
   h = splitmix64(h ^ w)``; PCG64 (XSL-RR 128/64, ``rand_pcg::Pcg64::new(state, STREAM)``)
   with ``state = splitmix64(h ^ 1) << 64 | splitmix64(h ^ 2)``.
2. ``below(n)``: Lemire's multiply-shift with rejection over 64-bit draws.
3. Fisher–Yates from the back: ``for i in (1..len).rev(): swap(i, below(i + 1))``.
4. Chunks sorted and deduplicated, minus those with no drawable anchor; permuted with purpose 1
   / index 0 (train only); cut into blocks of ``block_chunks`` (the first of
   ``first_block_chunks`` where that option is set); each block's anchors shuffled with
   purpose 2 / index = block number.

The functions here reproduce that bit for bit, so ``block_shuffled_order(...)`` over a
dataset's train chunks equals ``ds.draw_order("train")`` (the migration tests check it). The
64-bit draws come from numpy's own PCG64, which is the same generator: seeding it with
``step(state + inc)`` lines its stream up with ``rand_pcg``'s.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence

import numpy as np

_MASK64 = (1 << 64) - 1
_MASK128 = (1 << 128) - 1
# rand_pcg's PCG stream constant and the PCG 128-bit LCG multiplier (core/src/shuffle.rs).
_STREAM = 0x0A02_BDBF_7BB3_C0A7_AC28_FA16_A64A_BF96
_MULTIPLIER = 0x2360_ED05_1FC6_5DA4_4385_DF64_9FCC_F645

_PURPOSE_CHUNKS = 1
_PURPOSE_BLOCK = 2
_SPLIT_TAGS = {"train": 1, "val": 2, "test": 3, "all": 4}


def _splitmix64(x: int) -> int:
    z = (x + 0x9E37_79B9_7F4A_7C15) & _MASK64
    z = ((z ^ (z >> 30)) * 0xBF58_476D_1CE4_E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D0_49BB_1331_11EB) & _MASK64
    return z ^ (z >> 31)


def _stream(words: Sequence[int]) -> np.random.PCG64:
    """The engine's random stream for ``words``, as a numpy PCG64 (same generator)."""
    h = 0
    for w in words:
        h = _splitmix64(h ^ (int(w) & _MASK64))
    state = (_splitmix64(h ^ 1) << 64) | _splitmix64(h ^ 2)
    inc = ((_STREAM << 1) | 1) & _MASK128
    # rand_pcg's constructor adds the increment and steps once; numpy steps before each
    # output and rand_pcg after, so numpy starts one step later, at the same point.
    start = (((state + inc) & _MASK128) * _MULTIPLIER + inc) & _MASK128
    bg = np.random.PCG64()
    bg.state = {"bit_generator": "PCG64", "state": {"state": start, "inc": inc}, "has_uint32": 0, "uinteger": 0}
    return bg


def _raws(bg: np.random.PCG64, first: np.ndarray) -> Iterator[int]:
    """The stream's 64-bit words: those already drawn (``first``), then fresh ones."""
    yield from (int(r) for r in first)
    while True:
        yield int(bg.random_raw())


def _fisher_yates_indices(bg: np.random.PCG64, length: int) -> list[int]:
    """The swap partner ``j`` for each ``i`` in ``length-1 .. 1``, by Lemire's ``below(i + 1)``.

    Vectorized over one bulk draw; a rejection (probability ~n / 2**64 per draw) shifts every
    later draw, so from the first one on the exact scalar rule takes over.
    """
    if length < 2:
        return []
    n = np.arange(length, 1, -1, dtype=np.uint64)  # below(i + 1) for i = length-1 .. 1
    raw = bg.random_raw(length - 1)
    if length < (1 << 32):
        a, b = raw >> np.uint64(32), raw & np.uint64(0xFFFF_FFFF)
        an, bn = a * n, b * n  # each < 2**64 because n < 2**32
        lo = (an << np.uint64(32)) + bn  # wraps mod 2**64, as the low word should
        hi = (an + (bn >> np.uint64(32))) >> np.uint64(32)
        suspect = np.flatnonzero(lo < n)  # only these can be rejected
        threshold = (np.uint64(0) - n[suspect]) % n[suspect]
        rejected = suspect[lo[suspect] < threshold]
        if rejected.size == 0:
            return hi.astype(np.int64).tolist()
        k = int(rejected[0])
        js = hi[:k].astype(np.int64).tolist()
    else:  # hand the whole thing to the scalar rule
        k, js = 0, []
    draws = _raws(bg, raw[k:])
    for m in range(k, length - 1):
        bound = length - m
        prod = next(draws) * bound
        if (prod & _MASK64) < bound:
            threshold_s = ((1 << 64) - bound) % bound
            while (prod & _MASK64) < threshold_s:
                prod = next(draws) * bound
        js.append(prod >> 64)
    return js


def _shuffle(items: np.ndarray, words: Sequence[int]) -> np.ndarray:
    """Fisher–Yates from the back over ``items`` (a copy), keyed by ``words``."""
    out = list(items.tolist())
    js = _fisher_yates_indices(_stream(words), len(out))
    for i, j in zip(range(len(out) - 1, 0, -1), js, strict=True):
        out[i], out[j] = out[j], out[i]
    return np.asarray(out, dtype=items.dtype)


def _split_tag(split: str) -> int:
    name = str(getattr(split, "value", split))
    if name not in _SPLIT_TAGS:
        raise ValueError(f"unknown split {name!r}; expected one of {sorted(_SPLIT_TAGS)}")
    return _SPLIT_TAGS[name]


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
        return max(int(len(self.bounds)) - 1, 0)

    def block(self, index: int) -> tuple[int, int]:
        """Half-open row range ``[start, stop)`` of block ``index``."""
        return int(self.bounds[index]), int(self.bounds[index + 1])

    @property
    def anchors(self) -> np.ndarray:
        """The rows as global anchor sample indices (``chunk_id * spc + within``)."""
        if self.samples_per_chunk is None:
            raise ValueError("this DrawOrder has no samples_per_chunk; compute rows[:, 0] * spc + rows[:, 1]")
        return self.rows[:, 0] * self.samples_per_chunk + self.rows[:, 1]

    def keep(self, mask: np.ndarray) -> DrawOrder:
        """Drop the rows ``mask`` excludes, narrowing the blocks that held them.

        A block emptied outright is dropped; every other block keeps its membership.
        """
        kept = np.flatnonzero(np.asarray(mask, dtype=bool))
        bounds = np.searchsorted(kept, self.bounds)  # old offset -> surviving rows before it
        nonempty = np.concatenate([[True], np.diff(bounds) > 0])
        return DrawOrder(self.rows[kept], bounds[nonempty].astype(np.int64), self.samples_per_chunk)


def _chunk_ids(chunk_ids: Sequence[int] | np.ndarray) -> np.ndarray:
    """Sorted, deduplicated chunk ids: the engine's order is a function of the set."""
    ids = np.unique(np.asarray(chunk_ids, dtype=np.int64).reshape(-1))
    if ids.size and ids[0] < 0:
        raise ValueError(f"chunk ids must be >= 0, got {int(ids[0])}")
    return ids


def _chunk_rows(cid: int, spc: int, n_samples: int, lo: int, hi: int) -> np.ndarray:
    """``[cid, within]`` rows of chunk ``cid``'s drawable anchors (``[lo, hi)``)."""
    start = max(cid * spc, lo)
    stop = min((cid + 1) * spc, n_samples, hi)
    anchors = np.arange(start, max(start, stop), dtype=np.int64)
    return np.stack([np.full(anchors.size, cid, dtype=np.int64), anchors - cid * spc], axis=1)


def _build(
    chunk_ids: Sequence[int] | np.ndarray,
    spc: int,
    n_samples: int,
    *,
    block_chunks: int,
    key: tuple[int, int, int] | None,
    anchor_range: tuple[int, int] | None,
    first_block_chunks: int | None = None,
) -> DrawOrder:
    if spc < 1 or n_samples < 0:
        raise ValueError(f"samples_per_chunk must be >= 1 and n_samples >= 0, got {spc} and {n_samples}")
    if block_chunks < 1:
        raise ValueError(f"block_chunks must be >= 1, got {block_chunks}")
    if first_block_chunks is not None and first_block_chunks < 1:
        raise ValueError(f"first_block_chunks must be >= 1 (or None for block_chunks), got {first_block_chunks}")
    lo, hi = (0, n_samples) if anchor_range is None else (int(anchor_range[0]), int(anchor_range[1]))
    per_chunk = {int(c): _chunk_rows(int(c), spc, n_samples, lo, hi) for c in _chunk_ids(chunk_ids)}
    chunks = np.asarray([c for c, r in per_chunk.items() if len(r)], dtype=np.int64)
    if key is not None:
        chunks = _shuffle(chunks, (*key, _PURPOSE_CHUNKS, 0))
    blocks = []
    for b, members in enumerate(_cut(chunks, block_chunks, first_block_chunks)):
        rows = np.concatenate([per_chunk[int(c)] for c in members])
        if key is not None:
            anchors = rows[:, 0] * spc + rows[:, 1]
            anchors = _shuffle(anchors, (*key, _PURPOSE_BLOCK, b))
            rows = np.stack([anchors // spc, anchors % spc], axis=1)
        blocks.append(rows)
    if not blocks:
        return DrawOrder(np.empty((0, 2), dtype=np.int64), np.zeros(1, dtype=np.int64), spc)
    bounds = np.concatenate([[0], np.cumsum([len(b) for b in blocks])]).astype(np.int64)
    return DrawOrder(np.concatenate(blocks), bounds, spc)


def _cut(chunks: np.ndarray, block_chunks: int, first_block_chunks: int | None) -> list[np.ndarray]:
    """``chunks`` in blocks of ``block_chunks``, the first of ``first_block_chunks`` (at most
    ``block_chunks``) when set: ``blocked_order`` in ``core/src/shuffle.rs``."""
    first = block_chunks if first_block_chunks is None else min(int(first_block_chunks), block_chunks)
    head = [chunks[:first]] if len(chunks) else []
    return head + [chunks[s : s + block_chunks] for s in range(first, len(chunks), block_chunks)]


def chunk_permutation(
    chunk_ids: Sequence[int] | np.ndarray, *, seed: int, epoch: int, split: str = "train"
) -> np.ndarray:
    """Deterministically permute chunk ids for one epoch, as the engine's ``split`` pass does.

    Keyed on ``(seed, epoch, split)`` only, never on hardware. The ids are sorted and
    deduplicated first (the anchor permutes them in the order given): the engine's order is
    a function of the set of chunks.
    """
    return _shuffle(_chunk_ids(chunk_ids), (int(seed), int(epoch), _split_tag(split), _PURPOSE_CHUNKS, 0))


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
    ``draw_order``; the anchor instead drops them afterwards with :meth:`DrawOrder.keep`.
    ``first_block_chunks`` (ours; pass ``describe()["config"]["first_block_chunks"]``) makes
    the first block that many chunks, as the dataset option of that name does.
    """
    key = (int(seed), int(epoch), _split_tag(split))
    return _build(
        chunk_ids,
        int(samples_per_chunk),
        int(n_samples),
        block_chunks=block_chunks,
        key=key,
        anchor_range=anchor_range,
        first_block_chunks=first_block_chunks,
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
    """
    return _build(
        chunk_ids,
        int(samples_per_chunk),
        int(n_samples),
        block_chunks=block_chunks,
        key=None,
        anchor_range=anchor_range,
        first_block_chunks=first_block_chunks,
    )


def shuffle_quality(order: np.ndarray | DrawOrder, samples_per_chunk: int | None = None) -> float:
    """How well an order mixes its samples, 0..1 (1 ~ a global shuffle).

    The mean absolute gap in source *rank* between consecutive draws over ``n / 3`` (the
    expected gap of a uniform shuffle), capped at 1 -- the engine's score (``describe()``'s
    ``shuffle_quality``). ``order`` is ``(N, 2)`` rows with ``samples_per_chunk``, a
    :class:`DrawOrder`, or 1-D anchors. Ranks rather than the anchor's raw indices, so a
    split of scattered chunks scores like a contiguous one.
    """
    if isinstance(order, DrawOrder):
        samples_per_chunk = order.samples_per_chunk if samples_per_chunk is None else samples_per_chunk
        order = order.rows
    a = np.asarray(order, dtype=np.int64)
    if a.ndim == 2:
        if samples_per_chunk is None:
            raise ValueError("shuffle_quality of [chunk_id, within] rows needs samples_per_chunk")
        a = a[:, 0] * int(samples_per_chunk) + a[:, 1]
    n = a.size
    if n < 2:
        return 0.0
    rank = np.empty(n, dtype=np.int64)
    rank[np.argsort(a, kind="stable")] = np.arange(n)
    mean = float(np.abs(np.diff(rank)).sum()) / (n - 1)
    return min(mean / (n / 3.0), 1.0)
