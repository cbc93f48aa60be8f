#!/usr/bin/env python3
"""Fallback decode ceiling for a local zstd zarr v3 store, used by bench/run.py only when
`insitubatch bench URL --decode-limit --json` is unavailable.

    decode_limit.py --url file:///abs/store.zarr [--var t2m] [--procs N] [--min-seconds 1.5]

Reads every stored chunk of the variable into memory, then N processes (default nproc)
each zstd-decode their share (numcodecs, fresh output buffers) for at least
--min-seconds; prints {"decode_limit_mb_per_s": float, "threads": N, "source": ...}.
Sharded arrays are split into inner chunks through the shard index (index at end).
It is a lower bound for a native decoder (Python call overhead, GIL-free processes).
"""
import argparse
import json
import math
import multiprocessing as mp
import os
import struct
import sys
import time
import urllib.parse


def _chunk_files(root):
    out = []
    cdir = os.path.join(root, "c")
    for dp, _d, fs in os.walk(cdir):
        for f in fs:
            out.append(os.path.join(dp, f))
    return sorted(out)


def load_frames(store_path, var):
    meta = json.load(open(os.path.join(store_path, var, "zarr.json")))
    codecs = meta["codecs"]
    frames = []
    files = _chunk_files(os.path.join(store_path, var))
    if codecs and codecs[0]["name"] == "sharding_indexed":
        cfg = codecs[0]["configuration"]
        shard = meta["chunk_grid"]["configuration"]["chunk_shape"]
        inner = cfg["chunk_shape"]
        n_inner = math.prod(math.ceil(s / i) for s, i in zip(shard, inner))
        at_start = cfg.get("index_location", "end") == "start"
        has_crc = any(c["name"] == "crc32c" for c in cfg.get("index_codecs", []))
        idx_len = n_inner * 16 + (4 if has_crc else 0)
        for f in files:
            b = open(f, "rb").read()
            idx = b[:idx_len] if at_start else b[-idx_len:]
            for k in range(n_inner):
                off, nb = struct.unpack_from("<QQ", idx, 16 * k)
                if off != 2 ** 64 - 1:
                    frames.append(b[off:off + nb])
        inner_codecs = cfg["codecs"]
    else:
        frames = [open(f, "rb").read() for f in files]
        inner_codecs = codecs
    names = [c["name"] for c in inner_codecs]
    if names != ["bytes", "zstd"]:
        raise SystemExit(f"decode_limit.py handles bytes+zstd only, got {names}")
    return frames


def _worker(args):
    frames, min_s = args
    import numcodecs
    z = numcodecs.Zstd()
    n = 0
    t0 = time.perf_counter()
    while True:
        for fr in frames:
            n += len(z.decode(fr))
        dt = time.perf_counter() - t0
        if dt >= min_s:
            return n, dt


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--url", required=True)
    ap.add_argument("--var", default="t2m")
    ap.add_argument("--procs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--min-seconds", type=float, default=1.5)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    u = urllib.parse.urlparse(a.url)
    if u.scheme not in ("file", ""):
        raise SystemExit("decode_limit.py needs a file:// URL")
    frames = load_frames(urllib.parse.unquote(u.path), a.var)
    parts = [frames[i::a.procs] for i in range(a.procs)]
    ctx = mp.get_context("fork")
    with ctx.Pool(a.procs) as pool:
        res = pool.map(_worker, [(p, a.min_seconds) for p in parts if p])
    total = sum(n / dt for n, dt in res)  # per-process rates, run concurrently
    print(json.dumps({"decode_limit_mb_per_s": total / 1e6, "threads": len(res),
                      "source": "py-fallback (numcodecs zstd, processes)"}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
