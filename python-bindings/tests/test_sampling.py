"""Sample masks and weights (``sample_mask=``, ``sample_weights=``) over a store written by
zarr-python: masked samples never drawn, draw frequencies that follow the weights (a fixed
seed, so a deterministic check, not a timing), exact resume, disjoint ranks, read-once."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import stored, url

from insitubatch_rs import InSituDataset

N = 80  # samples of v3_zstd


def _open(fixtures, **kw) -> InSituDataset:
    return InSituDataset(url(fixtures, "v3_zstd"), batch_size=kw.pop("batch_size", 8), seed=5, **kw)


def _drawn(view) -> list[int]:
    return [int(t) for b in view for t in b.sample_indices]


def test_masked_samples_are_never_drawn(fixtures):
    mask = np.arange(N) % 4 != 1
    ds = _open(fixtures, sample_mask=mask)
    truth = stored(fixtures, "v3_zstd", "t2m")
    for epoch in range(3):
        ds.set_epoch(epoch)
        for b in ds.all:
            for i, t in enumerate(b.sample_indices):
                np.testing.assert_array_equal(b["t2m"][i], truth[t])
        assert sorted(_drawn(ds.all)) == [t for t in range(N) if mask[t]]
    note = next(n for n in ds.describe()["notes"] if n["code"] == "sample-draws")
    assert "75.0%" in note["message"]


def test_a_mask_computed_at_open_from_a_cheap_variable(fixtures):
    u10 = stored(fixtures, "v3_zstd", "u10")
    want = u10.mean(axis=(1, 2)) > np.median(u10.mean(axis=(1, 2)))
    seen = []

    def windy(values):
        seen.append(values.shape)
        np.testing.assert_array_equal(values, u10)  # the variable whole, sample axis first
        return values.mean(axis=(1, 2)) > np.median(values.mean(axis=(1, 2)))

    ds = _open(fixtures, sample_mask=("u10", windy))
    assert seen == [u10.shape]
    assert sorted(_drawn(ds.all)) == [t for t in range(N) if want[t]]
    with pytest.raises(ValueError, match="one bool per sample"):
        _open(fixtures, sample_mask=("u10", lambda v: v.mean(axis=(1, 2))))
    with pytest.raises(KeyError, match="nope"):
        _open(fixtures, sample_mask=("nope", lambda v: v > 0))


def test_draw_frequencies_follow_the_weights(fixtures):
    w = np.where(np.arange(N) < 40, 3.0, 0.5)
    plain = _open(fixtures)
    _drawn(plain.all)
    once = plain.last_pass.storage_reads  # every chunk of every variable once
    ds = _open(fixtures, sample_weights=w)
    counts = np.zeros(N)
    epochs = 30
    for epoch in range(epochs):
        ds.set_epoch(epoch)
        drawn = _drawn(ds.all)
        assert len(ds.all) == -(-len(drawn) // 8)
        np.add.at(counts, drawn, 1)
        stats = ds.last_pass
        # Read-once, whatever the weights: every chunk of both variables used once at most.
        assert stats.cache_hits + stats.cache_misses <= 20
        if epoch == 0:
            assert stats.storage_reads == once
    assert (counts[:40] == 3 * epochs).all()
    # 1200 fair coin flips over the half-weighted samples: within 4 standard deviations.
    assert abs(counts[40:].sum() - 600) < 4 * np.sqrt(300)
    again = _open(fixtures, sample_weights=w)
    again.set_epoch(7)
    ds.set_epoch(7)
    assert _drawn(again.train) == _drawn(ds.train)


def test_a_weighted_pass_resumes_exactly_and_ranks_are_disjoint(fixtures):
    w = np.linspace(0.2, 2.2, N)
    ds = _open(fixtures, sample_weights=w)
    whole = _drawn(ds.train)
    it = iter(ds.train)
    head = [int(t) for _ in range(2) for t in next(it).sample_indices]
    state = ds.state_dict()
    fresh = _open(fixtures, sample_weights=w)
    fresh.load_state_dict(state)
    assert head + _drawn(fresh.train) == whole
    with pytest.raises(ValueError, match="sample_mask and sample_weights"):
        other = _open(fixtures, sample_weights=np.minimum(w * 1.2, 3.0))
        other.load_state_dict(state)
        next(iter(other.train))
    ranks = [set(_drawn(_open(fixtures, sample_weights=w, rank=r, world_size=2).train)) for r in (0, 1)]
    assert not ranks[0] & ranks[1]


def test_bad_masks_and_weights_are_clear_errors(fixtures):
    with pytest.raises(ValueError, match="sample_mask has 3 entries"):
        _open(fixtures, sample_mask=[True, False, True])
    with pytest.raises(TypeError, match="booleans"):
        _open(fixtures, sample_mask=np.ones(N))
    with pytest.raises(ValueError, match=r"sample_weights\[2\] is -1"):
        _open(fixtures, sample_weights=np.r_[1.0, 1.0, -1.0, np.ones(N - 3)])
    with pytest.raises(ValueError, match="no sample to draw"):
        _open(fixtures, sample_mask=np.zeros(N, dtype=bool))
    with pytest.raises(ValueError, match="one-dimensional"):
        _open(fixtures, sample_weights=np.ones((N, 2)))
