#!/usr/bin/env python3
"""Python-side loaders over one Zarr store, timed under the JSON row schema of
bench/reference_bench.py (and of `insitubatch bench URL --json`); bench/run.py runs them as
engines (bench/engines.py).

    py_engines.py ENGINE --url file:///abs/store.zarr [--var t2m] [--batch-size 32]
                  [--epochs 2] [--compute-ms 0] [--max-batches 0] [--seed 0]
                  [--block-chunks 16] [--max-inflight 32] [--cache-budget-bytes B] [--hold-batches]

Engines (each also importable: ``ENGINES[name](url, var, batch_size, epochs, compute_ms,
max_batches) -> dict``):

- ``rs-python``: insitubatch_rs.InSituDataset(block_chunks=16, max_inflight=32), iterate
  ``ds.train`` (numpy batches, zero-copy views of engine buffers).
- ``rs-torch``: the same through ``as_torch`` + ``DataLoader(batch_size=None, num_workers=0)``.
- ``rs-obstore`` / ``rs-zarrstore``: ``rs-python`` over a store object instead of the URL:
  an obstore ``LocalStore`` (read in Rust) or a zarr-python ``LocalStore`` (read through
  zarr's async API; python-bindings/src/pystore.rs).
- ``reference-py``: insitubatch 0.2.0, the reference implementation, with the same settings
  (run it with the reference venv's python); the in-process twin of bench/reference_bench.py
  that also honours --compute-ms.
- ``reference-zarrstore``: ``reference-py`` over a zarr-python ``LocalStore`` (insitubatch
  0.2.0's ``obstore_store`` is a zarr ``ObjectStore``, so this is the like-for-like of
  ``rs-zarrstore``).
- ``xbatcher-torch-nw0`` / ``xbatcher-torch-nw2``: xarray.open_zarr(chunks=None) +
  xbatcher.BatchGenerator(input_dims={time: 1, lat: all, lon: all}) as a map-style torch
  Dataset of samples, DataLoader(batch_size, shuffle=True, num_workers=N,
  persistent_workers=N>0). Each sample reads (decodes) its whole chunk again.
- ``rs-fsspec-refs``: ``rs-python`` over a zarr ``FsspecStore`` of fsspec's
  ``ReferenceFileSystem`` for the kerchunk set at ``--url`` (``reference+URL``): the Python
  store-object path (bench/run.py references). ``xbatcher-torch-nw0`` takes ``reference+URL``
  too, and reads through the same filesystem.
- ``zarr-loop``: zarr-python: each chunk (or shard) of the sample axis in a shuffled order,
  ``arr[c*spc:(c+1)*spc]``, then cut into batches in order (no shuffle within).
- ``tensorstore``: tensorstore zarr3 driver, chunk-aligned slabs in a shuffled order,
  ``--ts-inflight`` (default 4) reads in flight, cut into batches like zarr-loop.

One cold epoch, then warm epochs (same objects; for the peers "warm" only means the page
cache and the open handles are warm). ``--max-batches N`` stops each epoch after N batches
(MB/s is over those). ``--block-chunks``, ``--max-inflight`` and ``--cache-budget-bytes``
(``rs-python`` and ``reference-py`` only) set those knobs (default 16, 32, the automatic budget).
``--compute-ms M`` sleeps M ms after each batch (a GPU step that frees
the CPU) and reports ``stall_pct`` = time spent waiting for the loader ÷ epoch wall time.
``--hold-batches`` keeps each batch alive until the next one has arrived, as
``for b in loader: step(b)`` does (by default a batch is dropped before the step and the next
fetch); with a step slower than the loader the pass then fills its whole batch queue, the
peak that ``describe()``'s estimate must cover (bench/run.py slow-loop).
"""
import argparse
import json
import os
import random
import sys
import time
from collections import deque

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from reference_bench import cpu_fields, cpu_times, vm_hwm_bytes  # noqa: E402  (stdlib-only at import time)


def _path_of(url):
    from urllib.parse import urlparse
    from urllib.request import url2pathname

    p = urlparse(url)
    return url2pathname(p.path) if p.scheme in ("file", "") else url


def _array_meta(url, var):
    """shape, read unit on axis 0 (the shard when sharded, else the chunk), dim names, itemsize,
    straight from zarr.json (no zarr import: safe before DataLoader workers fork); for a
    kerchunk set (``reference+URL``), from its ``.zarray``."""
    if url.startswith("reference+"):
        import fsspec

        with fsspec.open(url[len("reference+"):], "rt") as f:
            refs = json.load(f)
        refs = refs.get("refs", refs)
        meta, attrs = json.loads(refs[f"{var}/.zarray"]), json.loads(refs.get(f"{var}/.zattrs", "{}"))
        dims = attrs.get("_ARRAY_DIMENSIONS") or [f"dim_{i}" for i in range(len(meta["shape"]))]
        return meta["shape"], meta["chunks"][0], dims, int(meta["dtype"][-1])
    with open(os.path.join(_path_of(url), var, "zarr.json")) as f:
        m = json.load(f)
    unit = m["chunk_grid"]["configuration"]["chunk_shape"][0]
    dims = m.get("dimension_names") or [f"dim_{i}" for i in range(len(m["shape"]))]
    itemsize = {"float32": 4, "float64": 8, "int16": 2, "int32": 4, "uint8": 1}.get(m["data_type"], 4)
    return m["shape"], unit, dims, itemsize


def _nbytes(x):
    if hasattr(x, "nbytes"):
        return int(x.nbytes)
    return int(x.numel() * x.element_size())  # torch.Tensor


def time_epochs(make_iter, epochs, compute_ms, max_batches, count, set_epoch=None, after=None, hold=False):
    """Drive ``make_iter(epoch)`` for each epoch; ``count(batch) -> (samples, bytes)``. With
    ``hold``, a batch stays alive until the next one has arrived (a training loop's lifetime)."""
    out = []
    step = compute_ms / 1000.0
    for e in range(epochs):
        if set_epoch is not None:
            set_epoch(e)
        samples = nbytes = nb = 0
        ttfb = None
        wait = 0.0
        cpu0 = cpu_times()
        t0 = time.perf_counter()
        it = iter(make_iter(e))  # a DataLoader may block here (worker start / drain)
        wait = time.perf_counter() - t0
        held = None
        while True:
            tw = time.perf_counter()
            try:
                batch = next(it)
            except StopIteration:
                wait += time.perf_counter() - tw
                break
            now = time.perf_counter()
            wait += now - tw
            if ttfb is None:
                ttfb = now - t0
            s, b = count(batch)
            samples += s
            nbytes += b
            nb += 1
            held = batch if hold else None
            del batch
            if step > 0:
                time.sleep(step)
            if max_batches and nb >= max_batches:
                break
        secs = time.perf_counter() - t0
        cpu = cpu_fields(cpu0, cpu_times(), nbytes)
        del held
        close = getattr(it, "close", None)
        if max_batches and close is not None:
            try:
                close()
            except Exception:  # noqa: BLE001 - a pass cut short may refuse to close cleanly
                pass
        row = {
            "epoch": e,
            "kind": "cold" if e == 0 else "warm",
            "seconds": secs,
            "samples": samples,
            "batches": nb,
            "decoded_bytes": nbytes,
            "mb_per_s": nbytes / 1e6 / secs if secs > 0 else 0.0,
            "samples_per_s": samples / secs if secs > 0 else 0.0,
            "ttfb_s": ttfb if ttfb is not None else secs,
            "limiting_stage": "",
            **cpu,
        }
        if compute_ms > 0:
            row["stall_pct"] = 100.0 * wait / secs if secs > 0 else 0.0
            row["compute_ms"] = compute_ms
        if after is not None:
            after(row)
        out.append(row)
    return out


def _row(url, var, engine, version, batch_size, epochs, compute_ms, max_batches, ep, extra=None,
         est=0):
    cfg = {"engine": engine, "engine_version": version, "batch_size": batch_size,
           "epochs": epochs, "compute_ms": compute_ms, "max_batches": max_batches,
           "shuffle": True, "python": sys.version.split()[0]}
    cfg.update(extra or {})
    return {"url": url, "variables": [var], "config": cfg, "epochs": ep,
            "peak_rss_bytes": vm_hwm_bytes(), "describe_estimated_peak_bytes": est}


# ------------------------------------------------------------------ our engine
def _rs_dataset(url, var, batch_size, seed=0, store=None, knobs=None):
    import insitubatch_rs as ibr

    store = url if store is None else store
    geoms = ibr.open_geometries(store, [var])
    manifest = ibr.split_by_chunk(next(iter(geoms.values())), fractions=(1.0, 0.0, 0.0))
    ds = ibr.InSituDataset(store, manifest, geoms, batch_size=batch_size, seed=seed,
                           shuffle=True, **_knobs(knobs))
    return ibr, ds


def _knobs(knobs):
    """block_chunks / max_inflight (16 / 32 unless given) and cache_budget_bytes (only when
    given: None leaves the engine's automatic budget)."""
    k = {"block_chunks": 16, "max_inflight": 32}
    k.update({n: v for n, v in (knobs or {}).items() if v is not None})
    return k


def _store_object(kind, url):
    """A store object over the local store at ``url``: an obstore or a zarr-python LocalStore."""
    path = _path_of(url)
    if kind == "obstore":
        import obstore.store

        return obstore.store.LocalStore(path)
    import zarr.storage

    return zarr.storage.LocalStore(path, read_only=True)


def _rs_version():
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("insitubatch-rs")
    except PackageNotFoundError:
        return "?"


def _stage_of(ds):
    def after(row):
        lp = ds.last_pass
        if lp is not None:
            row["limiting_stage"] = str(lp.limiting_stage)
    return after


def run_rs_python(url, var, batch_size, epochs, compute_ms, max_batches, seed=0, store=None,
                  engine="rs-python", knobs=None, hold=False):
    ibr, ds = _rs_dataset(url, var, batch_size, seed, store, knobs)

    def count(b):
        return len(b), sum(int(a.nbytes) for a in b.values())

    ep = time_epochs(lambda e: ds.train, epochs, compute_ms, max_batches, count,
                     set_epoch=ds.set_epoch, after=_stage_of(ds), hold=hold)
    try:
        est = int(ds.describe()["memory"]["estimated_peak_bytes"])
    except Exception:  # noqa: BLE001
        est = 0
    ds.close()
    return _row(url, var, engine, _rs_version(), batch_size, epochs,
                compute_ms, max_batches, ep, _knobs(knobs), est)


def run_rs_obstore(url, var, batch_size, epochs, compute_ms, max_batches, seed=0):
    return run_rs_python(url, var, batch_size, epochs, compute_ms, max_batches, seed,
                         store=_store_object("obstore", url), engine="rs-obstore")


def run_rs_zarrstore(url, var, batch_size, epochs, compute_ms, max_batches, seed=0):
    return run_rs_python(url, var, batch_size, epochs, compute_ms, max_batches, seed,
                         store=_store_object("zarr", url), engine="rs-zarrstore")


def _reference_fs(url, asynchronous=True):
    """fsspec's ReferenceFileSystem over the kerchunk set at ``url`` (``reference+`` in front
    or not), its files read over HTTP (aiohttp) or from disk as their URLs say (asynchronous,
    as zarr's FsspecStore needs)."""
    import fsspec

    set_url = url[len("reference+"):] if url.startswith("reference+") else url
    folder = set_url.rsplit("/", 1)[0]
    protocol = set_url.split("://", 1)[0] if "://" in set_url else "file"
    # fsspec reads a relative file URL against the working directory; the benchmark's sets name
    # their files relative to the set, as the engine reads them: rebase them here.
    with fsspec.open(set_url, "rt") as f:
        refs = json.load(f)
    for ref in refs.get("refs", refs).values():
        if isinstance(ref, list) and ref and "://" not in ref[0] and not ref[0].startswith("/"):
            ref[0] = f"{folder}/{ref[0]}"
    return fsspec.filesystem("reference", fo=refs, remote_protocol=protocol, asynchronous=asynchronous,
                             remote_options={"asynchronous": asynchronous})


def run_rs_fsspec_refs(url, var, batch_size, epochs, compute_ms, max_batches, seed=0):
    """rs-python over a zarr FsspecStore of fsspec's ReferenceFileSystem: our Python store-object
    path (every read through zarr's async API and fsspec), against rs-python's native reading
    of the same set (``reference+URL``)."""
    import zarr.storage

    store = zarr.storage.FsspecStore(_reference_fs(url), read_only=True, path="")
    return run_rs_python(url, var, batch_size, epochs, compute_ms, max_batches, seed,
                         store=store, engine="rs-fsspec-refs")


def run_rs_torch(url, var, batch_size, epochs, compute_ms, max_batches, seed=0):
    import torch
    from torch.utils.data import DataLoader

    ibr, ds = _rs_dataset(url, var, batch_size, seed)
    dl = DataLoader(ibr.as_torch(ds.train), batch_size=None, num_workers=0)

    def count(b):
        ts = list(b.values())
        return int(ts[0].shape[0]), sum(_nbytes(t) for t in ts)

    ep = time_epochs(lambda e: dl, epochs, compute_ms, max_batches, count,
                     set_epoch=ds.set_epoch, after=_stage_of(ds))
    ds.close()
    return _row(url, var, "rs-torch", _rs_version(), batch_size, epochs,
                compute_ms, max_batches, ep,
                {"block_chunks": 16, "max_inflight": 32, "torch": torch.__version__})


def run_reference_py(url, var, batch_size, epochs, compute_ms, max_batches, seed=0, store=None,
                     engine="reference-py", knobs=None):
    import insitubatch as ib

    store = ib.obstore_store(url) if store is None else store
    geoms = ib.open_geometries(store, [var])
    manifest = ib.split_by_chunk(next(iter(geoms.values())), fractions=(1.0, 0.0, 0.0))
    ds = ib.InSituDataset(store, manifest, geoms, batch_size=batch_size, seed=seed, shuffle=True,
                          **_knobs(knobs))

    def count(b):
        return len(b), sum(int(a.nbytes) for a in b.arrays.values())

    ep = time_epochs(lambda e: ds.train, epochs, compute_ms, max_batches, count,
                     set_epoch=ds.set_epoch)
    ds.close()
    return _row(url, var, engine, getattr(ib, "__version__", "?"), batch_size, epochs,
                compute_ms, max_batches, ep, _knobs(knobs))


def run_reference_zarrstore(url, var, batch_size, epochs, compute_ms, max_batches, seed=0):
    return run_reference_py(url, var, batch_size, epochs, compute_ms, max_batches, seed,
                            store=_store_object("zarr", url), engine="reference-zarrstore")


# ------------------------------------------------------------------ xbatcher + torch
class _XbSamples:
    """Map-style torch Dataset: sample i = BatchGenerator[i] (input_dims time: 1). Opens the
    store lazily once per process, so DataLoader workers never inherit zarr's event loop."""

    def __init__(self, url, var, n):
        self.url, self.var, self.n = url, var, n
        self._pid, self._bgen = None, None

    def _gen(self):
        if self._pid != os.getpid():
            import xarray as xr
            import xbatcher

            if self.url.startswith("reference+"):  # xbatcher over fsspec's reference filesystem
                import zarr.storage

                store = zarr.storage.FsspecStore(_reference_fs(self.url), read_only=True, path="")
                ds = xr.open_dataset(store, engine="zarr", chunks=None,
                                     backend_kwargs={"consolidated": False, "zarr_format": 2})
            else:
                ds = xr.open_zarr(_path_of(self.url), chunks=None, consolidated=False)
            da = ds[self.var]
            dims = dict(zip(da.dims, [1] + list(da.shape[1:])))
            self._bgen = xbatcher.BatchGenerator(da, input_dims=dims)
            self._pid = os.getpid()
        return self._bgen

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        import torch

        x = self._gen()[int(i)]
        return torch.from_numpy(x.values[0])


def _run_xbatcher(nw, url, var, batch_size, epochs, compute_ms, max_batches, seed=0):
    import torch
    import xbatcher
    from torch.utils.data import DataLoader

    shape, _, _, _ = _array_meta(url, var)
    data = _XbSamples(url, var, shape[0])
    g = torch.Generator()
    g.manual_seed(seed)
    dl = DataLoader(data, batch_size=batch_size, shuffle=True, num_workers=nw, generator=g,
                    persistent_workers=nw > 0)

    def count(b):
        return int(b.shape[0]), _nbytes(b)

    ep = time_epochs(lambda e: iter(dl), epochs, compute_ms, max_batches, count)
    del dl
    return _row(url, var, f"xbatcher-torch-nw{nw}", xbatcher.__version__, batch_size, epochs,
                compute_ms, max_batches, ep, {"num_workers": nw, "torch": torch.__version__,
                                              "xarray_chunks": None})


def run_xbatcher_nw0(*a, **k):
    return _run_xbatcher(0, *a, **k)


def run_xbatcher_nw2(*a, **k):
    return _run_xbatcher(2, *a, **k)


# ------------------------------------------------------------------ plain slab readers
def _slab_batches(slabs, batch_size):
    """Cut a stream of (rows, ...) slabs into batch_size batches, in order (no shuffle within);
    a slab at least a batch long is sliced without copying."""
    import numpy as np

    pend, have = [], 0
    for s in slabs:
        pend.append(s)
        have += s.shape[0]
        while have >= batch_size:
            if len(pend) == 1:
                b, rest = pend[0][:batch_size], pend[0][batch_size:]
            else:
                cat = np.concatenate(pend, axis=0)
                b, rest = cat[:batch_size], cat[batch_size:]
            yield b
            pend = [rest] if rest.shape[0] else []
            have = rest.shape[0]
    if have:
        yield pend[0] if len(pend) == 1 else np.concatenate(pend, axis=0)


def _order(n_units, seed, epoch):
    order = list(range(n_units))
    random.Random(seed * 1_000_003 + epoch).shuffle(order)
    return order


def run_zarr_loop(url, var, batch_size, epochs, compute_ms, max_batches, seed=0):
    import zarr

    arr = zarr.open_array(_path_of(url), path=var, mode="r")
    spc = (getattr(arr, "shards", None) or arr.chunks)[0]
    n = arr.shape[0]
    units = -(-n // spc)

    def it(e):
        slabs = (arr[c * spc:min(n, (c + 1) * spc)] for c in _order(units, seed, e))
        return _slab_batches(slabs, batch_size)

    def count(b):
        return int(b.shape[0]), int(b.nbytes)

    ep = time_epochs(it, epochs, compute_ms, max_batches, count)
    return _row(url, var, "zarr-loop", zarr.__version__, batch_size, epochs, compute_ms,
                max_batches, ep, {"read_unit_samples": spc})


def run_tensorstore(url, var, batch_size, epochs, compute_ms, max_batches, seed=0, inflight=4):
    import tensorstore as ts

    arr = ts.open({"driver": "zarr3",
                   "kvstore": {"driver": "file", "path": os.path.join(_path_of(url), var)}},
                  read=True).result()
    layout = arr.chunk_layout
    spc = (layout.write_chunk.shape or layout.read_chunk.shape)[0]
    n = arr.shape[0]
    units = -(-n // spc)

    def slabs(e):
        q = deque()
        order = iter(_order(units, seed, e))
        for c in order:
            q.append(arr[c * spc:min(n, (c + 1) * spc)].read())
            if len(q) >= inflight:
                break
        while q:
            fut = q.popleft()
            nxt = next(order, None)
            if nxt is not None:
                q.append(arr[nxt * spc:min(n, (nxt + 1) * spc)].read())
            yield fut.result()

    def count(b):
        return int(b.shape[0]), int(b.nbytes)

    ep = time_epochs(lambda e: _slab_batches(slabs(e), batch_size), epochs, compute_ms,
                     max_batches, count)
    from importlib.metadata import version

    return _row(url, var, "tensorstore", version("tensorstore"), batch_size, epochs, compute_ms,
                max_batches, ep, {"read_unit_samples": spc, "inflight": inflight})


ENGINES = {
    "rs-python": run_rs_python,
    "rs-torch": run_rs_torch,
    "rs-obstore": run_rs_obstore,
    "rs-zarrstore": run_rs_zarrstore,
    "reference-py": run_reference_py,
    "reference-zarrstore": run_reference_zarrstore,
    "xbatcher-torch-nw0": run_xbatcher_nw0,
    "xbatcher-torch-nw2": run_xbatcher_nw2,
    "rs-fsspec-refs": run_rs_fsspec_refs,
    "zarr-loop": run_zarr_loop,
    "tensorstore": run_tensorstore,
}


# Engines that take --block-chunks, --max-inflight and --cache-budget-bytes.
KNOBBED = {"rs-python", "reference-py"}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("engine", choices=sorted(ENGINES))
    ap.add_argument("--url", required=True)
    ap.add_argument("--var", default="t2m")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--compute-ms", type=float, default=0.0)
    ap.add_argument("--max-batches", type=int, default=0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--block-chunks", type=int, default=None, help=f"{', '.join(sorted(KNOBBED))} only (default 16)")
    ap.add_argument("--max-inflight", type=int, default=None, help="as --block-chunks (default 32)")
    ap.add_argument("--cache-budget-bytes", type=int, default=None,
                    help="as --block-chunks (default: the engine's automatic budget)")
    ap.add_argument("--hold-batches", action="store_true",
                    help="rs-python only: keep each batch alive until the next has arrived")
    args = ap.parse_args(argv)
    knobs = {"block_chunks": args.block_chunks, "max_inflight": args.max_inflight,
             "cache_budget_bytes": args.cache_budget_bytes}
    extra = {}
    if any(v is not None for v in knobs.values()):
        if args.engine not in KNOBBED:
            ap.error(f"--block-chunks/--max-inflight/--cache-budget-bytes apply to "
                     f"{', '.join(sorted(KNOBBED))} only, not {args.engine}")
        extra["knobs"] = knobs
    if args.hold_batches:
        if args.engine != "rs-python":
            ap.error(f"--hold-batches applies to rs-python only, not {args.engine}")
        extra["hold"] = True
    try:
        out = ENGINES[args.engine](args.url, args.var, args.batch_size, args.epochs,
                                   args.compute_ms, args.max_batches, seed=args.seed, **extra)
    except ImportError as e:
        out = {"url": args.url, "skipped": f"{args.engine}: {e}"}
        sys.stdout.write(json.dumps(out) + "\n")
        return 3
    sys.stdout.write(json.dumps(out) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
