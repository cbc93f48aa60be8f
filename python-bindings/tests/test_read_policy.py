"""``read_policy={...}``: parsed in Rust over core's defaults; every mistake is a ValueError
that names the key and what it takes (docs/errors.md)."""

from __future__ import annotations

import pytest

from insitubatch_rs import InSituDataset


def open_with(url: str, policy: dict) -> InSituDataset:
    return InSituDataset(url, batch_size=4, read_policy=policy)


def test_a_full_policy_is_taken(zstd):
    policy = {"retries": 2, "backoff_s": 0.5, "request_timeout_s": 30, "coalesce_gap_bytes": 0,
              "coalesce_max_bytes": 1 << 20, "read_ahead_bytes": 0,
              "hedge": {"quantile": 0.9, "multiple": 3.0, "max_share": 0.1, "min_samples": 4}}
    with open_with(zstd[0], policy) as ds:
        assert sum(b.sample_indices.size for b in ds.all) == zstd[1]["t2m"].shape[0]


@pytest.mark.parametrize(
    ("policy", "says"),
    [
        ({"retry": 3}, 'unknown read_policy key "retry"'),
        ({"retries": -1}, "read_policy[\"retries\"] must be a whole number >= 0, got -1"),
        ({"retries": "3"}, "read_policy[\"retries\"] must be a whole number >= 0, got '3'"),
        ({"coalesce_max_bytes": 1.5}, "read_policy[\"coalesce_max_bytes\"] must be a whole number >= 0"),
        ({"backoff_s": -1.0}, "read_policy[\"backoff_s\"] must be seconds >= 0, got -1"),
        ({"request_timeout_s": "soon"}, "read_policy[\"request_timeout_s\"] must be seconds >= 0, got 'soon'"),
        ({"request_timeout_s": 0}, "request_timeout must be above 0 s"),
        ({"hedge": "yes"}, "must be True, False or a dict"),
        ({"hedge": {"quantiles": 0.9}}, 'unknown read_policy["hedge"] key "quantiles"'),
        ({"hedge": {"quantile": "high"}}, "read_policy[\"hedge.quantile\"] must be a number in (0, 1]"),
        ({"hedge": {"quantile": 1.5}}, "hedging needs a quantile in (0, 1]"),
    ],
)
def test_a_wrong_policy_is_refused_naming_the_key(zstd, policy, says):
    with pytest.raises(ValueError) as e:
        open_with(zstd[0], policy)
    assert says in str(e.value), str(e.value)
