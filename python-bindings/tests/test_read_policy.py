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
    ("policy", "option", "says"),
    [
        ({"retry": 3}, "read_policy.retry", 'unknown key of read_policy "read_policy.retry"; the known ones are'),
        ({"retries": -1}, "read_policy.retries", "read_policy.retries: "),
        ({"retries": "3"}, "read_policy.retries", "read_policy.retries: "),
        ({"coalesce_max_bytes": 1.5}, "read_policy.coalesce_max_bytes", "read_policy.coalesce_max_bytes: "),
        ({"backoff_s": -1.0}, "read_policy.backoff_s", "read_policy.backoff_s must be a finite number of seconds >= 0, got -1"),
        ({"request_timeout_s": "soon"}, "read_policy.request_timeout_s", "read_policy.request_timeout_s: "),
        ({"request_timeout_s": 0}, "read_policy.request_timeout_s", "read_policy.request_timeout_s must be above 0"),
        ({"backoff_ms": 5}, "read_policy.backoff_ms", "read_policy.backoff_ms is now read_policy.backoff_s, in seconds"),
        ({"hedge": "yes"}, "read_policy.hedge", "true, false or an object of quantile"),
        ({"hedge": {"quantiles": 0.9}}, "read_policy.hedge.quantiles", 'unknown key of read_policy.hedge "read_policy.hedge.quantiles"'),
        ({"hedge": {"quantile": "high"}}, "read_policy.hedge.quantile", "read_policy.hedge.quantile: "),
        ({"hedge": {"quantile": 1.5}}, "read_policy.hedge.quantile", "read_policy.hedge.quantile must be in (0, 1], got 1.5"),
    ],
)
def test_a_wrong_policy_is_refused_naming_the_key(zstd, policy, option, says):
    with pytest.raises(ValueError) as e:
        open_with(zstd[0], policy)
    assert says in str(e.value), str(e.value)
    assert (e.value.kind, e.value.option) == ("invalid_option", option)
