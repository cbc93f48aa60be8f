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


def test_a_concatenations_metadata_reads_follow_the_read_policy(fixtures):
    """A zarr store whose every metadata read fails once (a flaky link) opens in a list: the
    concatenation's own metadata reads are retried under ``read_policy`` as a single store's
    are; with no retries the open fails, naming the injected error."""
    zs = pytest.importorskip("zarr.storage", reason="zarr-python 3 is not installed (its Store API is tested here)")

    class FailsFirstMetadataRead(zs.WrapperStore):
        def __init__(self, store):
            super().__init__(store)
            self.calls: dict[str, int] = {}

        async def get(self, key, prototype, byte_range=None):
            self.calls[key] = self.calls.get(key, 0) + 1
            if key.endswith((".json", ".zarray", ".zattrs", ".zgroup", ".zmetadata")) and self.calls[key] == 1:
                raise ConnectionResetError(f"injected failure of {key}")
            return await self._store.get(key, prototype, byte_range)

    def flaky():
        return FailsFirstMetadataRead(zs.LocalStore(Path(fixtures) / "cf", read_only=True))

    second = flaky()
    ds = InSituDataset([url(fixtures, "cf"), second], batch_size=5)
    truth = np.concatenate([stored(fixtures, "cf", "t2m")] * 2)
    for b in ds.all:
        np.testing.assert_array_equal(b["t2m"], truth[b.sample_indices])
    assert second.calls.get("t2m/zarr.json", 0) >= 2, second.calls
    with pytest.raises(Exception, match="injected failure"):
        InSituDataset([url(fixtures, "cf"), flaky()], batch_size=5, read_policy={"retries": 0})


def test_a_join_of_concatenations_reads_each_list_end_to_end(fixtures):
    # {"a": [cf, cf], "b": [cf_v2, cf_v2]}: each list concatenated first, then joined by name.
    stores = {"a": [url(fixtures, "cf")] * 2, "b": [url(fixtures, "cf_v2")] * 2}
    ds = InSituDataset(stores, batch_size=5)
    truth = {k: np.concatenate([stored(fixtures, n, "t2m")] * 2) for k, n in (("a", "cf"), ("b", "cf_v2"))}
    seen = 0
    for b in ds.all:
        for k in ("a", "b"):
            np.testing.assert_array_equal(b[f"{k}/t2m"], truth[k][b.sample_indices])
        seen += len(b)
    assert seen == 48


def test_a_mask_computed_over_a_list_reads_along_its_concat_dim(tmp_path):
    # Two stores of x(step, y): concatenated along "step", not the default "time"; the mask's
    # function sees all 16 steps.
    zarr = pytest.importorskip("zarr", minversion="3", reason="zarr-python 3 (Python >= 3.11) writes the stores")

    paths = []
    for k in range(2):
        path = tmp_path / f"part{k}.zarr"
        x = zarr.create_array(str(path), name="x", shape=(8, 3), chunks=(4, 3), dtype="f4", dimension_names=("step", "y"))
        x[:] = np.arange(24, dtype="f4").reshape(8, 3) + 100 * k
        paths.append(str(path))
    ds = InSituDataset(paths, batch_size=4, concat_dim="step", sample_mask=("x", lambda v: v[:, 0] % 2 == 0))
    drawn = sorted(int(t) for b in ds.all for t in b.sample_indices)
    assert drawn == [t for t in range(16) if (3 * (t % 8) + 100 * (t // 8)) % 2 == 0]

