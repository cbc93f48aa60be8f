"""Random 128 x 128 patches from the ERA5-shaped stores, one engine per process (bench/run.py
patches runs these as engines; bench/engines.py). Prints one JSON row: rows (patches) served,
seconds, and for the insitubatch_rs engines the stored bytes fetched (``last_pass.bytes_fetched``)
beside the stored bytes of the tiles the epoch's patches touch (computed here from the batch
origins and the store's files: chunk files, or shard indexes).

    patch_engines.py ENGINE --store PATH --url URL [--per-sample 4] [--xb-batches 12]

Engines (one epoch each, batch 32 rows of (128, 128)):
- ``rs-patch``: ``InSituDataset(url, patch={latitude: 128, longitude: 128}, patch_mode="random",
  patches_per_sample=K)``, every sample of the store (``ds.all``). Reads only the tiles the
  patches touch.
- ``rs-patch-gap0``: the same with ``read_policy={"coalesce_gap_bytes": 0}``: a sharded store's
  untouched inner chunks between touched ones are never read (the default reads gaps under
  1 MiB to save a request, the right trade on a cloud store, not on a local one).
- ``rs-crop``: ``InSituDataset(url, batch_size=32 // K)`` whole samples, K random 128 x 128 crops
  of each cut in numpy: what a user does without ``patch=``.
- ``xbatcher-nw0`` / ``xbatcher-nw2``: ``xr.open_zarr(chunks=None)`` + ``BatchGenerator(input_dims=
  {time: 1, latitude: 128, longitude: 128})`` (its grid of patches; xbatcher has no random mode) as a
  map-style Dataset, ``DataLoader(batch_size=32, shuffle=True, num_workers=N)``; stopped after
  ``--xb-batches`` batches (rows/s over those). Each patch reads the stored chunks it touches.
  They read the store's path (not the URL).
"""
import argparse
import json
import os
import struct
import time

PATCH = 128
VAR = "t2m"


def _meta(store):
    with open(os.path.join(store, VAR, "zarr.json")) as f:
        m = json.load(f)
    outer = m["chunk_grid"]["configuration"]["chunk_shape"]
    codecs = m["codecs"]
    inner = None
    if codecs and codecs[0]["name"] == "sharding_indexed":
        inner = codecs[0]["configuration"]["chunk_shape"]
    return m["shape"], outer, inner


def _tile_bytes(store):
    """Stored bytes of each tile, keyed (time chunk, y, x) on the tile grid (inner chunks of a
    shard, or chunk files)."""
    shape, outer, inner = _meta(store)
    sizes = {}
    if inner is None:
        root = os.path.join(store, VAR, "c")
        for dirpath, _, files in os.walk(root):
            for name in files:
                rel = os.path.relpath(os.path.join(dirpath, name), root).split(os.sep)
                sizes[tuple(int(p) for p in rel)] = os.path.getsize(os.path.join(dirpath, name))
        return sizes, outer
    per = [o // i for o, i in zip(outer, inner)]
    n = per[0] * per[1] * per[2]
    root = os.path.join(store, VAR, "c")
    for dirpath, _, files in os.walk(root):
        for name in files:
            rel = [int(p) for p in os.path.relpath(os.path.join(dirpath, name), root).split(os.sep)]
            with open(os.path.join(dirpath, name), "rb") as f:
                f.seek(-(n * 16 + 4), os.SEEK_END)  # index at the end: (offset, nbytes) u64 pairs + crc32c
                index = f.read(n * 16)
            for k in range(n):
                off, nb = struct.unpack_from("<QQ", index, 16 * k)
                if off == 2**64 - 1:
                    continue
                a, rest = divmod(k, per[1] * per[2])
                b, c = divmod(rest, per[2])
                sizes[(rel[0] * per[0] + a, rel[1] * per[1] + b, rel[2] * per[2] + c)] = nb
    return sizes, inner


def _touched_bytes(store, rows):
    """Stored bytes of the tiles that (sample, y, x) patch origins touch, each tile once."""
    sizes, tile = _tile_bytes(store)
    touched = set()
    for t, y, x in rows:
        for ty in range(y // tile[1], (y + PATCH - 1) // tile[1] + 1):
            for tx in range(x // tile[2], (x + PATCH - 1) // tile[2] + 1):
                touched.add((t // tile[0], ty, tx))
    return sum(sizes.get(k, 0) for k in touched), len(touched)


def run_rs_patch(store, url, k, xb_batches, read_policy=None):
    from insitubatch_rs import InSituDataset

    ds = InSituDataset(url, batch_size=32, patch={"latitude": PATCH, "longitude": PATCH},
                       patch_mode="random", patches_per_sample=k, seed=1, read_policy=read_policy)
    t0 = time.perf_counter()
    rows = []
    for b in ds.all:
        for t, o in zip(b.sample_indices, b.patch_origins):
            rows.append((int(t), int(o[0]), int(o[1])))
    secs = time.perf_counter() - t0
    lp = ds.last_pass
    touched, tiles = _touched_bytes(store, rows)
    return dict(rows=len(rows), secs=secs, fetched=lp.bytes_fetched, touched=touched, tiles_touched=tiles,
                tiles_read=lp.tiles_read, resident_peak=lp.depths.resident_peak_bytes)


def run_rs_crop(store, url, k, xb_batches):
    import numpy as np

    from insitubatch_rs import InSituDataset

    ds = InSituDataset(url, batch_size=max(1, 32 // k), seed=1)
    rng = np.random.default_rng(1)
    t0 = time.perf_counter()
    n = 0
    for b in ds.all:
        x = b[VAR]
        h, w = x.shape[1:]
        crops = [x[i, y:y + PATCH, c:c + PATCH]
                 for i in range(len(b)) for y, c in zip(rng.integers(0, h - PATCH + 1, k),
                                                        rng.integers(0, w - PATCH + 1, k))]
        n += len(np.stack(crops))
    secs = time.perf_counter() - t0
    return dict(rows=n, secs=secs, fetched=ds.last_pass.bytes_fetched,
                resident_peak=ds.last_pass.depths.resident_peak_bytes)


class _XbPatches:
    """Map-style torch Dataset over xbatcher's patches; opens the store once per process."""

    def __init__(self, store):
        self.store, self._pid, self._gen = store, None, None
        self.n = len(self.gen())

    def gen(self):
        if self._pid != os.getpid():
            import xarray as xr
            import xbatcher

            da = xr.open_zarr(self.store, chunks=None, consolidated=False)[VAR]
            self._gen = xbatcher.BatchGenerator(da, input_dims={"time": 1, "latitude": PATCH, "longitude": PATCH})
            self._pid = os.getpid()
        return self._gen

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        import torch

        return torch.from_numpy(self.gen()[int(i)].values.reshape(PATCH, PATCH))


def _run_xb(nw, store, url, k, xb_batches):
    import torch
    from torch.utils.data import DataLoader

    data = _XbPatches(store)
    g = torch.Generator()
    g.manual_seed(1)
    dl = DataLoader(data, batch_size=32, shuffle=True, num_workers=nw, generator=g)
    t0 = time.perf_counter()
    n = 0
    for j, b in enumerate(dl):
        n += b.shape[0]
        if j + 1 >= xb_batches:
            break
    return dict(rows=n, secs=time.perf_counter() - t0, fetched=None)


ENGINES = {
    "rs-patch": run_rs_patch,
    "rs-patch-gap0": lambda *a: run_rs_patch(*a, read_policy={"coalesce_gap_bytes": 0}),
    "rs-crop": run_rs_crop,
    "xbatcher-nw0": lambda *a: _run_xb(0, *a),
    "xbatcher-nw2": lambda *a: _run_xb(2, *a),
}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("engine", choices=sorted(ENGINES))
    ap.add_argument("--store", required=True, help="the store's folder (the touched tiles are read from it)")
    ap.add_argument("--url", help="what the engine opens (default: --store)")
    ap.add_argument("--per-sample", type=int, default=4)
    ap.add_argument("--xb-batches", type=int, default=12)
    a = ap.parse_args(argv)
    row = ENGINES[a.engine](a.store, a.url or a.store, a.per_sample, a.xb_batches)
    print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
