"""Run from a clean venv outside the repo: the installed package, on a fixture store.

Usage: python use_wheel.py STORE_DIR
Checks the user's first loop: open, describe, one epoch of every split, each sample once.
"""

import sys

import numpy as np

import insitubatch_rs as ib

store = sys.argv[1]
assert "site-packages" in ib.__file__, f"imported from the source tree, not the install: {ib.__file__}"
geoms = ib.open_geometries(store)
manifest = ib.split_by_chunk(geoms["t2m"], fractions=(0.5, 0.25, 0.25))
with ib.InSituDataset(store, manifest, batch_size=8, block_chunks=2) as ds:
    report = ds.describe()
    assert report["memory"]["estimated_peak_bytes"] > 0
    seen = []
    for batch in ds.train:
        assert isinstance(batch["t2m"], np.ndarray) and batch["t2m"].dtype == np.float32
        seen.append(batch["t2m"].shape[0])
    drawable = report["config"]["drawable_samples"]["train"]
    assert sum(seen) == drawable, (sum(seen), drawable)
    print(f"ok: {ib.__name__} from {ib.__file__}: {len(seen)} batches, {sum(seen)} train samples")
