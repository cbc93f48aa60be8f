"""The engine's rules behind the free shuffle functions and ``ArrayGeometry``'s arithmetic.

These functions hand their arguments to core (``python-bindings/src/rules.rs``), so comparing
them with a dataset's ``draw_order`` compares core with itself. The orders below are fixed:
they were drawn by the package's former Python reimplementation of the specification
(``core/src/shuffle.rs`` pins the same values), so a change to the stream, the sampling, the
shuffle, the block cutting or the score fails here.
"""

from __future__ import annotations

import numpy as np
import pytest

import insitubatch_rs as ib


def test_chunk_permutation_golden_orders():
    perm = ib.chunk_permutation(range(10), seed=0, epoch=0)
    assert perm.dtype == np.int64 and perm.tolist() == [1, 2, 8, 4, 3, 6, 9, 7, 5, 0]
    val = [7, 6, 5, 3, 8, 2, 9, 4, 1, 0]
    assert ib.chunk_permutation(range(10), seed=7, epoch=1, split="val").tolist() == val
    assert ib.chunk_permutation(range(10), seed=7, epoch=1, split=ib.SplitName.VAL).tolist() == val
    # A function of the set: repeats and order do not matter; seeds take all 64 bits.
    assert ib.chunk_permutation([9, 3, 3, 12, 0], seed=2**63, epoch=5, split="all").tolist() == [0, 12, 3, 9]
    assert ib.chunk_permutation(np.array([[12, 0], [3, 9]]), seed=2**63, epoch=5, split="all").tolist() == [0, 12, 3, 9]
    big = ib.chunk_permutation(range(100_000), seed=1, epoch=1)
    assert big[:8].tolist() == [28170, 18229, 67874, 89445, 29420, 46902, 77613, 21318]
    assert ib.chunk_permutation([], seed=0, epoch=0).tolist() == []


def test_block_shuffled_order_golden_orders():
    o = ib.block_shuffled_order(range(5), 4, 18, block_chunks=2, seed=0, epoch=0)
    assert isinstance(o, ib.DrawOrder) and o.rows.dtype == np.int64 and o.rows.shape == (18, 2)
    assert o.anchors.tolist() == [17, 5, 7, 6, 16, 4, 11, 9, 10, 12, 14, 8, 15, 13, 2, 3, 1, 0]
    assert o.bounds.dtype == np.int64 and o.bounds.tolist() == [0, 6, 14, 18] and o.samples_per_chunk == 4
    np.testing.assert_array_equal(o.rows[:, 0] * 4 + o.rows[:, 1], o.anchors)
    assert ib.shuffle_quality(o) == pytest.approx(0.7941176470588235, rel=1e-12)
    assert ib.shuffle_quality(o.rows, 4) == ib.shuffle_quality(o.anchors) == ib.shuffle_quality(o)

    w = ib.block_shuffled_order(
        range(6), 4, 22, block_chunks=3, seed=3, epoch=2, anchor_range=(2, 21), first_block_chunks=1
    )
    assert w.anchors.tolist() == [4, 5, 7, 6, 2, 20, 18, 19, 16, 3, 17, 15, 13, 12, 10, 11, 14, 8, 9]
    assert w.bounds.tolist() == [0, 4, 11, 19]

    big = ib.block_shuffled_order(range(1000), 7, 6995, block_chunks=13, seed=123, epoch=9, split="test")
    assert int(big.anchors.sum()) == sum(range(6995)) and big.n_blocks == 77
    assert big.anchors[:10].tolist() == [77, 1827, 2272, 2273, 3713, 1830, 2381, 1833, 2383, 6285]
    assert big.anchors[-5:].tolist() == [3039, 2873, 6823, 1440, 1851]
    assert ib.shuffle_quality(big) == pytest.approx(0.9317106483388294, rel=1e-12)


def test_sequential_order_and_quality_golden_values():
    s = ib.sequential_order([4, 1, 1, 3], 4, 18, block_chunks=2, anchor_range=(5, 17))
    assert s.rows.tolist() == [[1, 1], [1, 2], [1, 3], [3, 0], [3, 1], [3, 2], [3, 3], [4, 0]]
    assert s.bounds.tolist() == [0, 7, 8]
    empty = ib.sequential_order([], 4, 18, block_chunks=2)
    assert empty.rows.shape == (0, 2) and empty.bounds.tolist() == [0] and empty.n_blocks == 0
    assert ib.shuffle_quality(np.array([3, 1, 4, 1, 5, 9, 2, 6])) == 1.0
    assert ib.shuffle_quality(np.arange(100)) < 0.05 and ib.shuffle_quality(np.array([5])) == 0.0
    assert ib.shuffle_quality(np.array([-3, 7, -9, 0])) == ib.shuffle_quality(np.array([1, 3, 0, 2]))


KW = {"samples_per_chunk": 4, "n_samples": 18, "block_chunks": 2}


@pytest.mark.parametrize(
    ("bad", "match"),
    [
        ({"seed": -1}, "seed must be >= 0, got -1"),
        ({"epoch": -2}, "epoch must be >= 0, got -2"),
        ({"seed": 2**64}, "seed must be at most"),
        ({"split": "training"}, "unknown split"),
        ({"block_chunks": 0}, "block_chunks must be >= 1, got 0"),
        ({"first_block_chunks": 0}, "first_block_chunks must be >= 1, got 0"),
        ({"samples_per_chunk": 0}, "samples_per_chunk must be >= 1, got 0"),
        ({"n_samples": -1}, "n_samples must be >= 0, got -1"),
        ({"chunk_ids": [2, -1, -5]}, "chunk ids must be >= 0, got -5"),
    ],
)
def test_block_shuffled_order_refuses_bad_values_naming_them(bad, match):
    args = {"chunk_ids": range(5), "seed": 0, "epoch": 0, **KW, **bad}
    with pytest.raises(ValueError, match=match):
        ib.block_shuffled_order(**args)


@pytest.mark.parametrize(
    ("bad", "match"),
    [
        ({"seed": -1}, "seed must be >= 0, got -1"),
        ({"epoch": -1}, "epoch must be >= 0, got -1"),
        ({"split": "nope"}, "unknown split"),
        ({"chunk_ids": [-3]}, "chunk ids must be >= 0, got -3"),
    ],
)
def test_chunk_permutation_refuses_bad_values_naming_them(bad, match):
    args = {"chunk_ids": range(5), "seed": 0, "epoch": 0, **bad}
    with pytest.raises(ValueError, match=match):
        ib.chunk_permutation(**args)


def test_a_negative_seed_is_refused_alike_by_the_functions_and_the_split():
    g = ib.ArrayGeometry("x", (40, 6, 7), (8, 6, 7), np.float32)
    for call in (
        lambda: ib.split_by_chunk(g, contiguous=False, seed=-1),
        lambda: ib.chunk_permutation(range(5), seed=-1, epoch=0),
        lambda: ib.block_shuffled_order(range(5), 8, 40, block_chunks=2, seed=-1, epoch=0),
    ):
        with pytest.raises(ValueError, match="seed must be >= 0, got -1"):
            call()


def test_sequential_order_refuses_bad_values():
    with pytest.raises(ValueError, match="block_chunks must be >= 1"):
        ib.sequential_order(range(3), 4, 12, block_chunks=0)
    with pytest.raises(ValueError, match="chunk ids must be >= 0"):
        ib.sequential_order([-1], 4, 12, block_chunks=1)


def test_geometry_arithmetic_refuses_bad_coordinates():
    g = ib.ArrayGeometry("t2m", (37, 13, 17), (5, 6, 6), np.float32)
    for call in (
        lambda: g.inner_index((1, 2, 3)),
        lambda: g.physical_chunk_coord(0, (1,)),
        lambda: g.tile_placement(0, (0, 0, 0)),
    ):
        with pytest.raises(ValueError, match="has [13] axes, the inner grid 2"):
            call()
    with pytest.raises(ValueError, match="sample_index must be >= 0"):
        g.chunk_of(-1)
    with pytest.raises(ValueError, match="chunk_index must be >= 0"):
        g.samples_in_chunk(-1)
    with pytest.raises(ValueError, match="inner_coord must be >= 0"):
        g.tile_placement(0, (0, -1))
    # Past the end: empty, not an error (and no overflow).
    assert len(g.samples_in_chunk(2**62)) == 0 and g.slot_shape(99) == (0, 13, 17)
    assert g.tile_placement(99, (0, 0)).out_selection[0] == slice(0, 0)
    with pytest.raises(ValueError, match="sample_axis -1 out of range"):
        ib.ArrayGeometry("t2m", (37, 13, 17), (5, 6, 6), np.float32, sample_axis=-1)
