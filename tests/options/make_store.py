#!/usr/bin/env python3
"""Write tests/options/store.zarr, the store every surface's option walk reads
(tests/options/cases.json): small, uncompressed, committed, so the Python, Node, browser
and CLI walks read the same bytes with no fixture phase before them.

    python tests/options/make_store.py   # zarr-python 3 (the test venv's)

- ``t2m`` (24, 6, 8) float32 in chunks of (4, 6, 8), ``u10`` the same shape in (8, 3, 4):
  dimensions ``time``, ``lat``, ``lon``; values ``t * 100 + lat * 10 + lon`` (negated for
  ``u10``), exact in float32.
- ``time``: CF time, 6-hourly from 2000-01-01 (``hours since 2000-01-01``).
- ``lat`` 50 .. 0 by -10 (decreasing), ``lon`` 0 .. 70 by 10.
"""

import shutil
from pathlib import Path

import numpy as np
import zarr

OUT = Path(__file__).resolve().parent / "store.zarr"
T, LAT, LON = 24, 6, 8


def main() -> None:
    shutil.rmtree(OUT, ignore_errors=True)
    root = zarr.open_group(str(OUT), mode="w", zarr_format=3)
    t, y, x = np.meshgrid(np.arange(T), np.arange(LAT), np.arange(LON), indexing="ij")
    values = (t * 100 + y * 10 + x).astype("float32")
    for name, chunks, sign in [("t2m", (4, LAT, LON), 1), ("u10", (8, 3, 4), -1)]:
        a = root.create_array(
            name, shape=values.shape, chunks=chunks, dtype="float32", compressors=None,
            dimension_names=["time", "lat", "lon"], fill_value=0.0,
        )
        a[:] = sign * values
    time = root.create_array("time", shape=(T,), chunks=(T,), dtype="int64", compressors=None,
                             dimension_names=["time"], fill_value=0)
    time[:] = np.arange(T) * 6
    time.attrs.update({"units": "hours since 2000-01-01", "calendar": "standard"})
    for name, vals in [("lat", np.arange(50, -1, -10)), ("lon", np.arange(0, 80, 10))]:
        c = root.create_array(name, shape=vals.shape, chunks=vals.shape, dtype="float64", compressors=None,
                              dimension_names=[name], fill_value=0.0)
        c[:] = vals.astype("float64")
    zarr.consolidate_metadata(str(OUT))


if __name__ == "__main__":
    main()
