"""Store objects: obstore stores (read in Rust) and zarr-python v3 stores (read through zarr's
async API on the engine's own event loop) give the batches of the store's URL, byte for byte.

The HTTP and S3 stores are the loopback servers scripts/test.sh starts
(tests/servers/start_all.sh: ``INSITUBATCH_HTTP_URL``, ``INSITUBATCH_S3_ENDPOINT``); without
them those tests skip and say so. Every S3 store is given its loopback endpoint and explicit
credentials.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest

import insitubatch_rs as ib
from conftest import source, store, url
from insitubatch_rs import _native
from insitubatch_rs._store import engine_store

STORES = ["v3_zstd", "v3_sharded"]  # two arrays with multi-tile chunks; ranged + suffix reads in shards


def need(module: str) -> Any:
    return pytest.importorskip(module, reason=f"{module} is not installed (tools/python/test.in)")


def http_url() -> str:
    u = os.environ.get("INSITUBATCH_HTTP_URL")
    if not u:
        pytest.skip("INSITUBATCH_HTTP_URL is not set: the loopback HTTP server runs under scripts/test.sh")
    return u


def s3_config() -> dict[str, str]:
    endpoint = os.environ.get("INSITUBATCH_S3_ENDPOINT")
    if not endpoint:
        pytest.skip("INSITUBATCH_S3_ENDPOINT is not set: the loopback S3 (moto) server runs under scripts/test.sh")
    return {
        "endpoint": endpoint,
        "access_key_id": "testing",
        "secret_access_key": "testing",
        "region": "us-east-1",
    }


def s3_bucket() -> str:
    return os.environ.get("INSITUBATCH_S3_BUCKET", "fixtures")


def files(root: Path) -> dict[str, bytes]:
    """Every object of a store directory, by key."""
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def run(store_: Any, variables: list[str] | None = None, **kw: Any) -> tuple[dict, list]:
    """Geometries, then every batch of two train epochs and one pass over all, as bytes."""
    geoms = ib.open_geometries(store_, variables)
    m = ib.split_by_chunk(next(iter(geoms.values())))
    out = []
    with ib.InSituDataset(store_, m, geoms, batch_size=5, block_chunks=2, **kw) as ds:
        for split, epoch in (("train", 0), ("train", 1), ("all", 0)):
            ds.set_epoch(epoch)
            for b in ds.view(split):
                arrays = {k: (v.dtype.str, v.shape, v.tobytes()) for k, v in b.items()}
                out.append((split, epoch, b.sample_indices.tobytes(), arrays))
    return {k: repr(g) for k, g in geoms.items()}, out


_BASELINES: dict[str, tuple[dict, list]] = {}


def baseline(fixtures: Path, name: str) -> tuple[dict, list]:
    """The URL string's batches (computed once per store)."""
    if name not in _BASELINES:
        _BASELINES[name] = run(url(fixtures, name))
    return _BASELINES[name]


def assert_same_as_url(fixtures: Path, manifest: dict, name: str, store_: Any, **kw: Any) -> None:
    geoms, batches = run(store_, **kw)
    want_geoms, want = baseline(fixtures, name)
    assert geoms == want_geoms
    assert len(batches) == len(want) and batches, "the same number of batches, and some"
    for got, exp in zip(batches, want):
        assert got == exp, f"batch {got[:2]} differs from the URL path's"
    # And the URL path itself is the source (so equal means right).
    s = store(manifest, name)
    src = source(fixtures, s["arrays"]["t2m"], 0)
    first = batches[0]
    idx = np.frombuffer(first[2], dtype=np.int64)
    dtype, shape, raw = first[3]["t2m"]
    np.testing.assert_array_equal(np.frombuffer(raw, dtype=dtype).reshape(shape), src[idx])


# -- obstore stores: rebuilt in Rust, read with no GIL ---------------------------------------


@pytest.mark.parametrize("name", STORES)
def test_obstore_local_store(fixtures, manifest, name):
    obs = need("obstore.store")
    st = obs.LocalStore(str(fixtures / name))
    assert engine_store(st) is st, "handed to the engine as it is"
    assert_same_as_url(fixtures, manifest, name, st)


def inflight_bytes(store_: Any) -> int:
    """What describe() counts for reads in flight: where a store's read window starts."""
    geoms = ib.open_geometries(store_, ["t2m"])
    m = ib.split_by_chunk(geoms["t2m"])
    with ib.InSituDataset(store_, m, geoms, batch_size=5, block_chunks=2, threads=2, max_inflight=8) as ds:
        return ds.describe()["memory"]["inflight_bytes"]


def test_an_obstore_local_store_is_read_as_local_files_and_an_http_store_as_remote(fixtures):
    """Where reads come from sets where the read window starts, which describe() counts:
    obstore's LocalStore as the same path string, its HTTPStore as a remote store."""
    obs = need("obstore.store")
    path = inflight_bytes(url(fixtures, "v3_sharded"))
    assert inflight_bytes(obs.LocalStore(str(fixtures / "v3_sharded"))) == path
    http = obs.HTTPStore.from_url(f"{http_url()}/v3_sharded", client_options={"allow_http": True})
    assert inflight_bytes(http) > path, "a remote store's reads all start at once"


@pytest.mark.parametrize("name", STORES)
def test_obstore_store_helper_is_read_in_rust(fixtures, manifest, name):
    need("obstore")
    need("zarr")
    st = ib.obstore_store(url(fixtures, name))
    assert type(st).__name__ == "ObjectStore", "insitubatch 0.2.0's return type: a zarr Store"
    assert type(engine_store(st)).__module__.startswith("obstore"), "the obstore store inside is what is read"
    assert_same_as_url(fixtures, manifest, name, st)


@pytest.mark.parametrize("name", STORES)
def test_obstore_memory_store(fixtures, manifest, name):
    obstore = need("obstore")
    need("zarr")
    st = obstore.store.MemoryStore()
    for key, data in files(fixtures / name).items():
        obstore.put(st, key, data)
    assert type(engine_store(st)).__name__ == "ObjectStore", "read through zarr: its contents cannot be shared"
    assert_same_as_url(fixtures, manifest, name, st)


@pytest.mark.parametrize("name", STORES)
def test_obstore_http_store(fixtures, manifest, name):
    obs = need("obstore.store")
    st = obs.HTTPStore.from_url(f"{http_url()}/{name}", client_options={"allow_http": True})
    assert_same_as_url(fixtures, manifest, name, st)


@pytest.mark.parametrize("name", STORES)
def test_obstore_s3_store(fixtures, manifest, name):
    obs = need("obstore.store")
    st = obs.S3Store(s3_bucket(), prefix=name, config=s3_config(), client_options={"allow_http": True})
    assert_same_as_url(fixtures, manifest, name, st)


def test_obstore_memory_store_straight_to_the_extension_says_what_to_do():
    obs = need("obstore.store")
    with pytest.raises(TypeError, match=r"wrap it as zarr.storage.ObjectStore"):
        _native.open_geometries(obs.MemoryStore(), None, 0, [])


# -- zarr-python stores: read through their async API ----------------------------------------


@pytest.mark.parametrize("name", STORES)
def test_zarr_local_store(fixtures, manifest, name):
    zs = need("zarr.storage")
    assert_same_as_url(fixtures, manifest, name, zs.LocalStore(fixtures / name, read_only=True))


def test_a_zarr_local_store_is_read_as_local_files(fixtures):
    """zarr's LocalStore (and a subclass, as a test's counting store is) reads from this
    machine: its read window starts where the path's does, and it is never hedged (a hedge
    reads a key twice; under load a torchrun test once saw a chunk read twice so)."""
    zs = need("zarr.storage")

    class Counting(zs.LocalStore):
        pass

    path = inflight_bytes(url(fixtures, "v3_sharded"))
    assert inflight_bytes(Counting(fixtures / "v3_sharded", read_only=True)) == path


def test_a_zarr_fsspec_http_store_is_read_as_remote(fixtures):
    need("fsspec")
    need("aiohttp")
    path = inflight_bytes(url(fixtures, "v3_sharded"))
    assert inflight_bytes(ib.fsspec_store(f"{http_url()}/v3_sharded")) > path, "a remote store's reads all start at once"


def zarr_memory_store(contents: dict[str, bytes]) -> Any:
    zs = need("zarr.storage")
    from zarr.core.buffer import cpu

    return zs.MemoryStore({k: cpu.Buffer.from_bytes(v) for k, v in contents.items()})


@pytest.mark.parametrize("name", STORES)
def test_zarr_memory_store(fixtures, manifest, name):
    assert_same_as_url(fixtures, manifest, name, zarr_memory_store(files(fixtures / name)))


def conformance_store(kind: str, root: Path) -> Any:
    """A zarr-python store of ``kind`` holding core's storage conformance fixture at its root."""
    fixture = dict(_native._storage_conformance_fixture())
    if kind == "memory":
        return zarr_memory_store(fixture)
    for key, data in fixture.items():
        (root / key).parent.mkdir(parents=True, exist_ok=True)
        (root / key).write_bytes(data)
    if kind == "local":
        return need("zarr.storage").LocalStore(root, read_only=True)
    need("fsspec")
    return ib.fsspec_store(root.resolve().as_uri())


@pytest.mark.parametrize("kind", ["memory", "local", "fsspec-local"])
def test_zarr_store_adapter_passes_the_storage_conformance_suite(tmp_path, kind):
    """core/src/conformance.rs, the suite every Storage runs, on the zarr-Store adapter
    (python-bindings/src/pystore.rs) over zarr's own stores. Every failing case is named."""
    need("zarr")
    passed, failed = _native._storage_conformance(conformance_store(kind, tmp_path))
    assert not failed, f"{len(failed)} of {len(passed) + len(failed)} cases failed:\n" + "\n".join(
        f"  {case}: {msg}" for case, msg in failed
    )
    assert len(passed) > 20, passed


@pytest.mark.parametrize("name", STORES)
def test_fsspec_local_store(fixtures, manifest, name):
    need("fsspec")
    need("zarr")
    st = ib.fsspec_store(url(fixtures, name))
    assert type(st).__name__ == "FsspecStore"
    assert_same_as_url(fixtures, manifest, name, st)


def test_fsspec_http_store_and_close_store(fixtures, manifest):
    need("fsspec")
    need("aiohttp")
    need("zarr")
    st = ib.fsspec_store(f"{http_url()}/v3_zstd")
    assert_same_as_url(fixtures, manifest, "v3_zstd", st)  # closes the dataset: close_store runs
    assert st.fs._session is None, "InSituDataset.close() closed the session our reads opened"
    # Reused after close: the session is recreated, on the same loop (zarr's), and
    # close_store closes it there.
    geoms = ib.open_geometries(st)
    session = st.fs._session
    assert set(geoms) == {"t2m", "u10"} and session is not None and not session.closed
    ib.close_store(st)
    assert session.closed and st.fs._session is None


def test_reads_run_on_zarrs_loop_so_zarr_and_the_engine_can_share_a_store(fixtures, manifest):
    """A store's async client binds to the loop that first uses it; zarr's synchronous API
    and the engine use the same one."""
    need("fsspec")
    need("aiohttp")
    zarr = need("zarr")
    from zarr.core.sync import _get_loop

    st = ib.fsspec_store(f"{http_url()}/v3_zstd")
    zarr.open_group(st, mode="r")["t2m"][:2]  # zarr first: the session is made on its loop
    assert st.fs._session._loop is _get_loop()
    assert_same_as_url(fixtures, manifest, "v3_zstd", st)
    assert zarr.open_group(st, mode="r")["t2m"][:2].shape[0] == 2, "and zarr after the engine"


def test_close_store_closes_a_live_session_on_its_own_loop():
    need("aiohttp")
    import asyncio
    import threading

    import aiohttp

    loop = asyncio.new_event_loop()
    t = threading.Thread(target=loop.run_forever, daemon=True)
    t.start()

    async def make() -> aiohttp.ClientSession:
        return aiohttp.ClientSession()

    session = asyncio.run_coroutine_threadsafe(make(), loop).result()

    class Fs:
        _session = session

    class Store:
        fs = Fs()

    st = Store()
    ib.close_store(st)
    assert session.closed and st.fs._session is None
    ib.close_store(st)  # idempotent
    for nothing in ("file:///x.zarr", object()):
        ib.close_store(nothing)  # no session: a no-op
    loop.call_soon_threadsafe(loop.stop)
    t.join()
    loop.close()


def without_consolidated(contents: dict[str, bytes]) -> dict[str, bytes]:
    root = json.loads(contents["zarr.json"])
    root.pop("consolidated_metadata", None)
    return {**contents, "zarr.json": json.dumps(root).encode()}


def test_discovery_by_listing(fixtures, manifest, tmp_path):
    """No consolidated metadata: the arrays are found by listing the store object."""
    contents = without_consolidated(files(fixtures / "v3_zstd"))
    assert_same_as_url(fixtures, manifest, "v3_zstd", zarr_memory_store(contents))
    obs = need("obstore.store")
    for key, data in contents.items():
        (tmp_path / key).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / key).write_bytes(data)
    assert_same_as_url(fixtures, manifest, "v3_zstd", obs.LocalStore(str(tmp_path)))


def test_icechunk_store_local_round_trip(fixtures, manifest, tmp_path):
    icechunk = need("icechunk")
    zarr = need("zarr")
    repo = icechunk.Repository.create(icechunk.local_filesystem_storage(str(tmp_path / "repo")))
    session = repo.writable_session("main")
    src = zarr.open_group(str(fixtures / "v3_zstd"), mode="r")
    dst = zarr.group(store=session.store)
    for name, arr in src.arrays():
        out = dst.create_array(name, shape=arr.shape, chunks=arr.chunks, dtype=arr.dtype, fill_value=arr.fill_value)
        out[...] = arr[...]
    session.commit("copy of v3_zstd")
    assert_same_as_url(fixtures, manifest, "v3_zstd", ib.icechunk_store((tmp_path / "repo").as_uri()))


# -- faults and misuse ----------------------------------------------------------------------


def flaky_store(fixtures: Path, exc: type[BaseException]) -> Any:
    """A zarr store whose first read of each chunk raises ``exc`` (fault injection)."""
    zs = need("zarr.storage")

    class Flaky(zs.WrapperStore):
        calls: ClassVar[dict[str, int]] = {}
        loops: ClassVar[set] = set()

        async def get(self, key, prototype, byte_range=None):
            self.loops.add(asyncio.get_running_loop())
            self.calls[key] = self.calls.get(key, 0) + 1
            if "/c/" in key and self.calls[key] == 1:
                raise exc(f"injected failure of {key}")
            return await self._store.get(key, prototype, byte_range)

    return Flaky(zs.LocalStore(fixtures / "v3_zstd", read_only=True))


def test_a_connection_error_is_retried(fixtures, manifest):
    st = flaky_store(fixtures, ConnectionResetError)
    assert_same_as_url(fixtures, manifest, "v3_zstd", st)
    chunk_calls = [n for k, n in st.calls.items() if "/c/" in k]
    assert chunk_calls and all(n >= 2 for n in chunk_calls), "each failed chunk read was retried"
    from zarr.core.sync import _get_loop

    assert st.loops == {_get_loop()}, "every read ran on zarr's I/O loop"


def test_a_permanent_error_is_raised_not_retried(fixtures):
    st = flaky_store(fixtures, PermissionError)
    geoms = ib.open_geometries(st)
    ds = ib.InSituDataset(st, ib.split_by_chunk(geoms["t2m"]), geoms, batch_size=5, block_chunks=2)
    with pytest.raises(ib.InsitubatchIOError, match="PermissionError: injected failure of"):
        list(ds.train)
    assert max(n for k, n in st.calls.items() if "/c/" in k) == 1, "not retried"
    ds.close()


def test_a_missing_array_in_a_store_object_is_the_reference_key_error(fixtures):
    zs = need("zarr.storage")
    with pytest.raises(KeyError, match="no zarr array at path"):
        ib.open_geometries(zs.LocalStore(fixtures / "v3_zstd", read_only=True), ["nope"])


def test_storage_options_with_a_store_object_are_refused(fixtures):
    zs = need("zarr.storage")
    st = zs.LocalStore(fixtures / "v3_zstd", read_only=True)
    with pytest.raises(ValueError, match=r"storage_options \[\"aws_region\"\] apply only to a store opened by URL"):
        ib.open_geometries(st, aws_region="us-east-1")
    with pytest.raises(ValueError, match="configure the store object itself"):
        ib.InSituDataset(st, storage_options={"aws_region": "us-east-1"})


def test_what_is_not_a_store_is_a_type_error():
    with pytest.raises(TypeError, match="store must be a URL string, an obstore store or a zarr-python v3 Store"):
        ib.open_geometries(42)


def test_a_missing_local_store_is_the_engines_io_error(tmp_path):
    missing = (tmp_path / "absent.zarr").as_uri()
    for open_ in (ib.open_geometries, ib.InSituDataset):
        with pytest.raises(ib.InsitubatchIOError, match="no Zarr store exists at this path: " + missing):
            open_(missing)


def test_a_path_object_is_a_local_url(fixtures, manifest):
    assert_same_as_url(fixtures, manifest, "v3_zstd", fixtures / "v3_zstd")


# -- insitubatch 0.2.0's helpers -------------------------------------------------------------


@pytest.mark.parametrize(
    ("helper", "args", "module", "extra"),
    [
        ("obstore_store", ("memory://",), "obstore.store", "obstore"),
        ("fsspec_store", ("memory://x",), "fsspec", "fsspec"),
        ("icechunk_store", ("s3://bucket/repo",), "icechunk", "icechunk"),
        ("arraylake_store", ("org/repo",), "arraylake", "arraylake"),
    ],
)
def test_a_missing_optional_package_names_its_extra(monkeypatch, helper, args, module, extra):
    monkeypatch.setitem(sys.modules, module, None)  # import fails as if not installed
    with pytest.raises(ImportError, match=rf"pip install 'insitubatch-rs\[{extra}\]'"):
        getattr(ib, helper)(*args)


def test_icechunk_store_points_other_schemes_at_arraylake_store():
    with pytest.raises(ValueError, match=r"arraylake_store\('org/repo'\)"):
        ib.icechunk_store("https://example.org/repo")


def test_ensure_local_dir(tmp_path):
    u = (tmp_path / "a" / "b.zarr").as_uri()
    assert ib.ensure_local_dir(u) == u
    assert (tmp_path / "a" / "b.zarr").is_dir()
    assert ib.ensure_local_dir("s3://bucket/x.zarr") == "s3://bucket/x.zarr"  # nothing to create
