#!/usr/bin/env python3
"""Write the ERA5-shaped benchmark stores (zarr v3, t2m float32 (N, 721, 1440),
bytes + zstd level 1, ratio ≈ 2.2) with zarr-python 3.

    make_stores.py OUTDIR [--samples 720] [--only c1,c8]

Stores (OUTDIR/<name>.zarr):
  c1    chunks (1, 721, 1440)
  c8    chunks (8, 721, 1440)
  c40   chunks (40, 721, 1440)
  c8s   chunks (8, 361, 720)            ragged 2x2 tiles
  shard shards (40, 722, 1440) of inner chunks (8, 361, 720)
  shardsmall  shards (40, 728, 1440) of 320 small inner chunks (8, 91, 180), ~230 KB
        stored each: a forecast archive's layout, where reading inner chunk by inner chunk
        costs a request each (bench/run.py cloud)
Every store holds the same values (sample t is seeded by t). Written in 40-sample
slabs (~166 MB), so memory stays well under 4 GB. A store whose marker
OUTDIR/<name>.zarr.done matches (samples, script hash) is skipped.
The full sweep at N=720 takes ~7 GB of disk: check `df` first.
`--netcdf FILES,STEPS,TxYxX` writes the virtual-Zarr benchmark's NetCDF4 files, their kerchunk
references and a Zarr copy with the same chunks and codecs instead (write_netcdf; the test venv).
Run it with the reference venv (insitubatch 0.2.0 and zarr 3.4.2; bench/setup_reference.sh), as
bench/run.py --samples N does.
"""
import argparse
import hashlib
import json
import os
import shutil
import sys
import time
import warnings

import numpy as np

warnings.filterwarnings("ignore")

H, W = 721, 1440
SLAB = 40
SIGMA = 0.7  # noise (K) before 1/64 quantization; tuned for zstd-1 ratio ≈ 2.2-2.3
STORES = {
    "c1": dict(chunks=(1, H, W)),
    "c8": dict(chunks=(8, H, W)),
    "c40": dict(chunks=(40, H, W)),
    "c8s": dict(chunks=(8, 361, 720)),
    "shard": dict(chunks=(8, 361, 720), shards=(40, 722, 1440)),
    "shardsmall": dict(chunks=(8, 91, 180), shards=(40, 728, 1440)),
}
SCRIPT_HASH = hashlib.sha256(open(__file__, "rb").read()).hexdigest()[:16]

_lat = np.linspace(90, -90, H, dtype=np.float32)[:, None]
_lon = np.linspace(0, 360, W, endpoint=False, dtype=np.float32)[None, :]
_rlat, _rlon = np.deg2rad(_lat), np.deg2rad(_lon)
_clat = np.cos(_rlat).astype(np.float32)
_base = (273.15 + 30 * _clat - 15).astype(np.float32)


def sample(t):
    """One (721, 1440) float32 field: smooth climate + travelling waves + noise, GRIB-like
    quantization to 1/64 K. Deterministic in t."""
    rng = np.random.default_rng(1000003 + t)
    ph = np.float32(2 * np.pi * t / 24.0)
    f = _base + 8 * np.sin(_rlon * 3 + ph) * _clat
    f = f + 4 * np.sin(_rlat * 6 + _rlon * 5 - np.float32(0.3 * t))
    f = f + 5 * np.sin(_rlon + ph)
    f = f + rng.standard_normal((H, W), dtype=np.float32) * np.float32(SIGMA)
    return (np.round(f * 64) / 64).astype(np.float32)


def dir_bytes(path):
    n = 0
    for dp, _d, fs in os.walk(path):
        for f in fs:
            n += os.path.getsize(os.path.join(dp, f))
    return n


def write_store(outdir, name, n):
    import zarr
    from zarr.codecs import ZstdCodec

    spec = STORES[name]
    path = os.path.join(outdir, name + ".zarr")
    marker = path + ".done"
    want = {"samples": n, "script": SCRIPT_HASH}
    if os.path.exists(marker) and os.path.isdir(path):
        try:
            have = json.load(open(marker))
            if have.get("samples") == n and have.get("script") == SCRIPT_HASH:
                print(f"{name}: complete, skipping ({have.get('ratio', 0):.2f}x)", file=sys.stderr)
                return have
        except (OSError, ValueError):
            pass
    if os.path.exists(marker):
        os.remove(marker)
    shutil.rmtree(path, ignore_errors=True)
    t0 = time.perf_counter()
    g = zarr.open_group(store=path, mode="w", zarr_format=3)
    kw = dict(name="t2m", shape=(n, H, W), dtype="float32", chunks=spec["chunks"],
              compressors=[ZstdCodec(level=1)], fill_value=float("nan"),
              dimension_names=["time", "latitude", "longitude"],
              attributes={"units": "K", "long_name": "2 metre temperature (synthetic)"})
    if "shards" in spec:
        kw["shards"] = spec["shards"]
    arr = g.create_array(**kw)
    for s0 in range(0, n, SLAB):
        s1 = min(n, s0 + SLAB)
        slab = np.empty((s1 - s0, H, W), dtype=np.float32)
        for t in range(s0, s1):
            slab[t - s0] = sample(t)
        arr[s0:s1] = slab
        del slab
    zarr.consolidate_metadata(path)
    stored = dir_bytes(path)
    decoded = n * H * W * 4
    info = dict(want, name=name, stored_bytes=stored, decoded_bytes=decoded,
                ratio=decoded / max(stored, 1), seconds=time.perf_counter() - t0,
                chunks=list(spec["chunks"]), shards=list(spec.get("shards", [])) or None,
                zarr_python=zarr.__version__)
    with open(marker, "w") as f:
        json.dump(info, f)
    print(f"{name}: {n} samples, {stored / 1e6:.0f} MB stored, ratio {info['ratio']:.2f}x, "
          f"{info['seconds']:.1f}s", file=sys.stderr)
    return info


def netcdf_name(chunks):
    """The folder of the NetCDF4 benchmark data with chunks ``(t, y, x)``: era5_nc_2x721x1440."""
    return "era5_nc_" + "x".join(str(c) for c in chunks)


def write_netcdf(outdir, files, steps, chunks):
    """The virtual-Zarr benchmark (bench/run.py references): ``files`` NetCDF4 files of
    ``steps`` samples each (t2m float32 (steps, 721, 1440) in ``chunks``, zlib level 4 + shuffle,
    as netCDF-C writes ERA5-like archives) in OUTDIR/NAME/ (`netcdf_name`), kerchunk's
    references over them combined along time (NAME/refs.json, file URLs relative to it, so the
    folder can be served), and the same data as a Zarr v2 store with the same chunks and codecs
    (OUTDIR/NAME_copy.zarr): each chunk's bytes copied from its range of its file, so only the
    layout differs (one object per chunk against ranges of a few files). Needs netCDF4 and
    kerchunk (the test venv, tools/python/fixtures.in). Skipped when the marker OUTDIR/NAME.done
    matches."""
    import netCDF4
    from kerchunk.combine import MultiZarrToZarr
    from kerchunk.hdf import SingleHdf5ToZarr

    name = netcdf_name(chunks)
    folder, copy = os.path.join(outdir, name), os.path.join(outdir, name + "_copy.zarr")
    marker = os.path.join(outdir, name + ".done")
    want = {"files": files, "steps": steps, "chunks": list(chunks), "script": SCRIPT_HASH}
    try:
        have = json.load(open(marker))
        if all(have.get(k) == v for k, v in want.items()):
            print(f"{name}: complete, skipping ({have['ratio']:.2f}x)", file=sys.stderr)
            return have
    except (OSError, ValueError):
        pass
    t0 = time.perf_counter()
    shutil.rmtree(folder, ignore_errors=True)
    shutil.rmtree(copy, ignore_errors=True)
    os.makedirs(folder)
    singles = []
    for i in range(files):
        path = os.path.join(folder, f"era5_{i}.nc")
        with netCDF4.Dataset(path, "w") as ds:
            ds.createDimension("time", steps)
            ds.createDimension("latitude", H)
            ds.createDimension("longitude", W)
            t = ds.createVariable("time", "f8", ("time",))
            t.units, t.calendar = "hours since 2000-01-01 00:00", "standard"
            t[:] = np.arange(i * steps, (i + 1) * steps, dtype="f8")
            v = ds.createVariable("t2m", "f4", ("time", "latitude", "longitude"), zlib=True, complevel=4,
                                  shuffle=True, chunksizes=tuple(chunks))
            for k in range(steps):
                v[k] = sample(i * steps + k)
        singles.append(SingleHdf5ToZarr(path, inline_threshold=0).translate())
    refs = MultiZarrToZarr(singles, concat_dims=["time"]).translate()
    for ref in refs["refs"].values():
        if isinstance(ref, list):
            ref[0] = os.path.basename(ref[0])
    with open(os.path.join(folder, "refs.json"), "w") as f:
        json.dump(refs, f)
    stored = 0
    for key, ref in refs["refs"].items():
        dest = os.path.join(copy, key)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        with open(dest, "wb") as out:
            if isinstance(ref, list):
                with open(os.path.join(folder, ref[0]), "rb") as f:
                    f.seek(ref[1])
                    data = f.read(ref[2])
                if key.startswith("t2m/") and "/." not in key:
                    stored += len(data)
            else:
                data = ref.encode() if isinstance(ref, str) and not ref.startswith("base64:") else ref
                if isinstance(data, str):
                    import base64
                    data = base64.b64decode(data[len("base64:"):])
            out.write(data)
    decoded = files * steps * H * W * 4
    info = dict(want, stored_bytes=stored, decoded_bytes=decoded, ratio=decoded / max(stored, 1),
                seconds=time.perf_counter() - t0)
    with open(marker, "w") as f:
        json.dump(info, f)
    print(f"{name}: {files} files x {steps} samples, {stored / 1e6:.0f} MB stored, ratio {info['ratio']:.2f}x, "
          f"{info['seconds']:.1f}s", file=sys.stderr)
    return info


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("outdir")
    ap.add_argument("--samples", type=int, default=720)
    ap.add_argument("--only", default=None, help="comma list of " + ",".join(STORES))
    ap.add_argument("--netcdf", default=None, metavar="FILES,STEPS,TxYxX",
                    help="instead: the NetCDF4 files, their references and the Zarr copy (write_netcdf)")
    args = ap.parse_args(argv)
    if args.netcdf:
        files, steps, chunks = args.netcdf.split(",")
        os.makedirs(args.outdir, exist_ok=True)
        write_netcdf(args.outdir, int(files), int(steps), tuple(int(c) for c in chunks.split("x")))
        return 0
    names = args.only.split(",") if args.only else list(STORES)
    bad = [x for x in names if x not in STORES]
    if bad:
        ap.error(f"unknown store(s) {bad}; known: {list(STORES)}")
    os.makedirs(args.outdir, exist_ok=True)
    need = sum(args.samples * H * W * 4 / 2.2 for _ in names)
    free = shutil.disk_usage(args.outdir).free
    if need > free * 0.9:
        print(f"need ~{need / 1e9:.1f} GB, only {free / 1e9:.1f} GB free", file=sys.stderr)
        return 2
    for nm in names:
        write_store(args.outdir, nm, args.samples)
    return 0


if __name__ == "__main__":
    sys.exit(main())
