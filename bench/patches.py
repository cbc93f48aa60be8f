"""Random 128 x 128 patches from the ERA5-shaped stores: insitubatch_rs's ``patch=`` against
reading whole samples with insitubatch_rs and cropping in numpy, and against xbatcher + a torch
DataLoader cutting patches of the same size. Side by side in one run, each engine in a fresh
subprocess, ``--reps`` rounds in an order rotated by one per round; medians with their spread.

    python bench/patches.py --stores ~/.cache/insitubatch/bench-stores-320 --only c8s,shardsmall \\
        [--reps 3] [--per-sample 4] [--xb-batches 12] [--cloud 50ms] [--out bench/results/patches.md]

``--cloud SETTING`` reads the stores through bench/cloud.py's cloud-like store on loopback (a
time to first byte per request, a rate per connection, a shared interface rate; its settings)
and adds the requests and bytes the server sent per run; the xbatcher engines are left out
there (they read local paths).

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

Per run: rows (patches) per second, and for the insitubatch_rs engines the stored bytes fetched
(``last_pass.bytes_fetched``) beside the stored bytes of the tiles the epoch's patches touch
(computed here from the batch origins and the store's files: chunk files, or shard indexes).
The store should sit in the page cache (each store's files are read once before the rounds).
"""
import argparse
import json
import os
import statistics
import struct
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
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


def warm(store):
    for dirpath, _, files in os.walk(store):
        for name in files:
            with open(os.path.join(dirpath, name), "rb") as f:
                while f.read(1 << 24):
                    pass


def spread(values):
    med = statistics.median(values)
    return med, min(values), max(values)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--stores")
    ap.add_argument("--only", default="c8s,shardsmall")
    ap.add_argument("--engines", default=",".join(ENGINES))
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--per-sample", type=int, default=4)
    ap.add_argument("--xb-batches", type=int, default=12)
    ap.add_argument("--out", default=os.path.join(HERE, "results", "patches.md"))
    ap.add_argument("--rows", default=os.path.join(HERE, "results", "patches.jsonl"))
    ap.add_argument("--cloud", help="read through the cloud-like store with this bench/cloud.py setting")
    ap.add_argument("--server", help="the cloud-store binary (default: bench/cloud.py's)")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    ap.add_argument("--store", help=argparse.SUPPRESS)
    ap.add_argument("--url", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.one:
        print(json.dumps(ENGINES[a.one](a.store, a.url or a.store, a.per_sample, a.xb_batches)))
        return
    if not a.stores:
        ap.error("--stores DIR is required")
    engines = a.engines.split(",")
    server = _cloud_server(a) if a.cloud else None
    if server:
        engines = [e for e in engines if not e.startswith("xbatcher")]
    results = {}
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.rows, "w") as rows_out:
        for name in a.only.split(","):
            store = os.path.join(os.path.expanduser(a.stores), f"{name}.zarr")
            warm(store)
            url = f"{server.base}/{name}.zarr" if server else store
            for rep in range(a.reps):
                order = engines[rep % len(engines):] + engines[:rep % len(engines)]
                for e in order:
                    cmd = [sys.executable, __file__, "--one", e, "--store", store, "--url", url,
                           "--per-sample", str(a.per_sample), "--xb-batches", str(a.xb_batches)]
                    if server:
                        server.call("/_ib/reset")
                    row = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
                    if server:
                        served = server.call("/_ib/stats")
                        row.update(requests=served["requests"], served_bytes=served["bytes_sent"])
                    row.update(store=name, engine=e, rep=rep, cloud=a.cloud)
                    rows_out.write(json.dumps(row) + "\n")
                    results.setdefault((name, e), []).append(row)
                    print(f"{name} {e} rep {rep}: {row['rows'] / row['secs']:.0f} rows/s", file=sys.stderr)
    if server:
        server.close()
    write_report(a, engines, results)


def _cloud_server(a):
    """bench/cloud.py's server over the stores folder, configured with ``a.cloud``."""
    import cloud

    tgt = os.environ.get("CARGO_TARGET_DIR", os.path.join(cloud.CACHE, "target"))
    server = cloud.Server(a.server or os.path.join(tgt, "release", "cloud-store"), os.path.expanduser(a.stores))
    server.configure(cloud.SETTINGS[a.cloud])
    return server


def write_report(a, engines, results):
    where = f"through the cloud-like store ({a.cloud})" if a.cloud else "stores in the page cache"
    cloud = f" --cloud {a.cloud}" if a.cloud else ""
    lines = [
        "# Random 128 x 128 patches: insitubatch_rs vs cropping whole samples vs xbatcher",
        "",
        f"Command: `python bench/patches.py --stores {a.stores.replace(os.path.expanduser('~'), '~')} --only {a.only} "
        f"--engines {','.join(engines)} --reps {a.reps} --per-sample {a.per_sample} --xb-batches {a.xb_batches}{cloud}`",
        f"Date: {time.strftime('%Y-%m-%d')}; machine: {os.cpu_count()} cores; {where}.",
        "",
        "| store | engine | rows/s median [min–max] | × xbatcher-nw2 | fetched MB | touched-tile MB | fetched ÷ touched "
        "| requests | resident peak MB |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name in a.only.split(","):
        base = results.get((name, "xbatcher-nw2"))
        base_rate = statistics.median(r["rows"] / r["secs"] for r in base) if base else None
        for e in engines:
            runs = results.get((name, e))
            if runs:
                lines.append(_row(name, e, runs, base_rate))
    with open(a.out, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


def _row(name, e, runs, base_rate):
    """One engine's table row: medians over its runs."""
    def med(key, scale=1.0):
        values = [r[key] for r in runs if r.get(key) is not None]
        return statistics.median(values) / scale if values else None

    rate, lo, hi = spread([r["rows"] / r["secs"] for r in runs])
    fetched, touched, requests = med("fetched", 1e6), med("touched", 1e6), med("requests")
    resident = med("resident_peak", 1e6)
    cells = [
        f"{rate:.0f} [{lo:.0f}–{hi:.0f}]",
        f"{rate / base_rate:.1f}×" if base_rate else "–",
        f"{fetched:.0f}" if fetched is not None else "–",
        f"{touched:.0f}" if touched is not None else "–",
        f"{fetched / touched:.2f}" if fetched is not None and touched else "–",
        f"{requests:.0f}" if requests is not None else "–",
        f"{resident:.0f}" if resident is not None else "–",
    ]
    return f"| {name} | {e} | " + " | ".join(cells) + " |"


if __name__ == "__main__":
    main()
