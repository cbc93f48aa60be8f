"""Stores concatenated along the sample axis (``InSituDataset([store, ...])``) over stores
written by zarr-python (v3 and v2): values equal to ``numpy.concatenate`` of the stores (truth
from the values files the fixture writer saved), the CF time coordinate concatenated too,
static arrays from the first store, and stores that cannot be concatenated refused naming
the array and the store."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import stored, url

from insitubatch_rs import InSituDataset

# cf / cf_v2: t2m (24, 5, 6) in chunks of 6; time = arange(24) * 6 h from 2020-01-01.
TIMES = np.datetime64("2020-01-01T00:00", "ns") + np.arange(24) * np.timedelta64(6, "h")


@pytest.mark.parametrize("name", ["cf", "cf_v2"])
def test_a_list_of_stores_reads_end_to_end_with_its_coordinate(fixtures, name):
    # A path and a URL mixed; the same store twice is two decades of one field, say.
    stores = [Path(fixtures) / name, url(fixtures, name)]
    ds = InSituDataset(stores, batch_size=5, coords=True)
    truth = np.concatenate([stored(fixtures, name, "t2m")] * 2)
    times = np.concatenate([TIMES, TIMES])
    seen = []
    for b in ds.all:
        np.testing.assert_array_equal(b["t2m"], truth[b.sample_indices])
        np.testing.assert_array_equal(b.coords["time"], times[b.sample_indices])
        seen += b.sample_indices.tolist()
    assert sorted(seen) == list(range(48))
    assert ds.geometries["t2m"].shape == (48, 5, 6)
    assert "concat(" in repr(ds.all)


def test_stores_that_cannot_be_concatenated_are_refused_naming_array_and_store(fixtures):
    with pytest.raises(ValueError, match=r'array "t2m" differs between concatenated stores.*cf_v2'):
        InSituDataset([url(fixtures, "cf"), url(fixtures, "cf_v2")], batch_size=5)
    with pytest.raises(ValueError, match="no array has a dimension named 'valid_time'|\"valid_time\""):
        InSituDataset([url(fixtures, "cf")] * 2, batch_size=5, concat_dim="valid_time")
    with pytest.raises(ValueError, match="concat_dim"):
        InSituDataset(url(fixtures, "cf"), batch_size=5, concat_dim="time")
