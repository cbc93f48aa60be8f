"""Opening stores: ``open_geometries``, insitubatch 0.2.0's store constructors and helpers, and
its error types for what a store lacks.

The engine takes a URL, an obstore store (read in Rust), a kerchunk reference set
(``reference_store``, read in Rust) or any zarr-python v3 ``Store`` (read through its async API
on zarr's I/O event loop: python-bindings/src/pystore.rs).
The constructors import their optional package when called, and name the extra that brings it.

insitubatch 0.2.0 raises ``KeyError`` for an array name the store does not have and ``TypeError``
for a name that is a group. The engine reports both as its own errors, of kinds
``array_not_found`` (an ``InsitubatchIOError``) and ``not_an_array`` (a ``ValueError``): their
``kind``; :func:`reference_errors` re-raises them as classes that are both: code written for
insitubatch 0.2.0 catches them, and so does code written for the engine's classes.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from . import _native
from ._native import InsitubatchIOError
from ._types import ArrayGeometry


class ArrayNotFoundError(InsitubatchIOError, KeyError):
    """The store has no array at that path (an ``InsitubatchIOError`` and a ``KeyError``)."""

    __str__ = OSError.__str__  # the message, not KeyError's quoted repr


class NotAnArrayError(TypeError, ValueError):
    """The path names a group, not an array (a ``TypeError`` and a ``ValueError``)."""


@contextlib.contextmanager
def reference_errors() -> Iterator[None]:
    """Re-raise the engine's not-found and is-a-group errors (by their ``kind``) as insitubatch
    0.2.0's types, keeping the engine's ``kind`` and ``option``."""
    try:
        yield
    except (InsitubatchIOError, ValueError) as e:
        cls = {"array_not_found": ArrayNotFoundError, "not_an_array": NotAnArrayError}.get(getattr(e, "kind", ""))
        if cls is None or isinstance(e, cls):
            raise
        again = cls(*e.args)
        again.kind, again.option = e.kind, getattr(e, "option", None)  # type: ignore[attr-defined]
        raise again from None


def storage_options(opts: Mapping[str, Any] | None) -> list[tuple[str, str]]:
    return [(str(k), str(v)) for k, v in (opts or {}).items()]


_option_pairs = storage_options  # for functions whose ``**storage_options`` hides the name


def _kind(obj: Any) -> tuple[str, str]:
    """``(top-level module, class name)`` of ``obj``'s class, read without importing anything."""
    cls = type(obj)
    return cls.__module__.split(".", 1)[0], cls.__name__


def engine_store(store: Any) -> Any:
    """What the engine opens: a URL string, an obstore store or a zarr-python store.

    A path becomes a ``file://`` URL. A zarr ``ObjectStore`` over an obstore store is
    unwrapped, so the engine reads the obstore store itself (in Rust, without the GIL). An
    obstore ``MemoryStore`` is the exception both ways: its contents cannot be shared with
    the engine's copy of obstore, so it is read through zarr (as ``zarr.storage.ObjectStore``).
    Anything else is handed over as it is, and the extension says what it cannot take. A
    mapping ``{name: store}`` (stores joined, each store's arrays as ``name/path``) becomes a
    dict of each store converted, a list of stores (concatenated along the sample axis) a
    list.
    """
    if isinstance(store, Mapping):
        return {name: engine_store(one) for name, one in store.items()}
    if isinstance(store, (list, tuple)):
        return [engine_store(one) for one in store]
    if isinstance(store, os.PathLike):
        from pathlib import Path

        return Path(os.fspath(store)).resolve().as_uri()
    if isinstance(store, str):
        return store
    module, name = _kind(store)
    if module == "zarr" and name == "ObjectStore" and _kind(store.store) != ("obstore", "MemoryStore"):
        return store.store
    if (module, name) == ("obstore", "MemoryStore"):
        zarr_storage = _require("zarr.storage", "obstore", "an obstore MemoryStore")
        return zarr_storage.ObjectStore(store, read_only=True)
    return store


def _require(module: str, extra: str, what: str) -> Any:
    """Import an optional dependency, or say which extra brings it."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise ImportError(f"{what} needs {module.split('.')[0]}: pip install 'insitubatch-rs[{extra}]' ({e})") from e


# -- insitubatch 0.2.0's store constructors and helpers ----------------------------------


def obstore_store(url: str, *, read_only: bool = True, **kw: Any) -> Any:
    """An obstore-backed zarr ``Store`` for ``url`` (``file://``, ``s3://``, ``gs://``,
    ``az://``, ``http(s)://``, ``memory://``), as insitubatch 0.2.0 returns.

    Extra keywords go to ``obstore.store.from_url`` (``region``, ``endpoint``,
    ``skip_signature``, ``client_options``, ``credential_provider``, ...). The engine reads
    the obstore store inside it in Rust, at the URL path's speed. Requires
    ``insitubatch-rs[obstore]``.

    Raises:
        ImportError: obstore or zarr is not installed.
    """
    from_url = _require("obstore.store", "obstore", "obstore_store").from_url
    zarr_storage = _require("zarr.storage", "obstore", "obstore_store")
    return zarr_storage.ObjectStore(from_url(url, **kw), read_only=read_only)


def fsspec_store(url: str, *, read_only: bool = True, **storage_options: Any) -> Any:
    """A zarr ``FsspecStore`` for ``url`` (any fsspec backend: GCS requester-pays or
    Rapid buckets through gcsfs, s3fs, ...); ``storage_options`` go to
    ``FsspecStore.from_url``. A ``file://`` store gets ``auto_mkdir``.

    The engine reads it through zarr's async API (more CPU per read than obstore: every read
    crosses into Python; ``python3 bench/run.py objects`` measures both). Requires
    ``insitubatch-rs[fsspec]`` and the backend's package.

    Raises:
        ImportError: fsspec, zarr or the URL's fsspec backend (``s3fs``, ``gcsfs``, ...) is
            not installed.
    """
    from urllib.parse import urlparse

    _require("fsspec", "fsspec", "fsspec_store")
    zarr_storage = _require("zarr.storage", "fsspec", "fsspec_store")
    if urlparse(url).scheme in ("", "file"):
        storage_options.setdefault("auto_mkdir", True)
    return zarr_storage.FsspecStore.from_url(url, storage_options=storage_options or None, read_only=read_only)


def reference_store(url: str | os.PathLike[str], **storage_options: Any) -> Any:
    """A kerchunk reference set (JSON, as kerchunk or VirtualiZarr write them over NetCDF4/HDF5,
    GRIB2 or TIFF files) as a store, read by the engine in Rust.

    ``url`` is the set's URL or local path (``s3://``, ``gs://``, ``az://``, ``http(s)://``,
    ``file://``); its chunks are byte ranges of the files it names, which the engine reads
    through the same stores as a URL, coalescing the ranges of one file into few requests.
    ``storage_options`` are object_store settings (``aws_region="..."``,
    ``skip_signature="true"``) for every store that is not local: the set's own and its files'.
    A file URL without a scheme is a local path, relative ones relative to the set's folder.
    The handle goes wherever a store goes: ``InSituDataset``, ``open_geometries``, joins
    (``{name: store}``) and concatenations (lists). As a URL string the same set is
    ``"reference+" + url``.

    Raises:
        InsitubatchIOError: the set cannot be read or is malformed (its message names what and
            where), or a file URL no store can take.
    """
    return _native.ReferenceStore(os.fspath(url), _option_pairs(storage_options))


def icechunk_store(
    url: str, *, branch: str = "main", anonymous: bool = False, region: str | None = None, **kw: Any
) -> Any:
    """The read-only session store of the Icechunk repository at ``url`` (``s3://``,
    ``s3a://``, ``gs://``, ``gcs://`` or ``file://``) on ``branch``.

    Public buckets need ``anonymous=True``; otherwise credentials come from the environment.
    Extra keywords go to Icechunk's storage constructor. Requires ``insitubatch-rs[icechunk]``.
    A local repository's chunks are read by the engine itself at the session's snapshot (the
    URL string ``"icechunk+PATH#snapshot=ID"`` does the same, and reads a repository over any
    store URL natively too); other repositories go through icechunk's store.

    Raises:
        ValueError: a URL of another scheme (an Arraylake repository: ``arraylake_store``).
        ImportError: icechunk is not installed.
    """
    from urllib.parse import urlparse
    from urllib.request import url2pathname

    parsed = urlparse(url)
    if parsed.scheme not in ("s3", "s3a", "gs", "gcs", "file", ""):
        raise ValueError(
            f"icechunk_store takes s3://, gs:// or file:// URLs (not {parsed.scheme}://); for a repository "
            f"hosted by Arraylake use arraylake_store('org/repo'), which is addressed by catalog name: {url}"
        )
    icechunk = _require("icechunk", "icechunk", "icechunk_store")
    bucket, prefix = parsed.netloc, parsed.path.strip("/")
    if parsed.scheme in ("s3", "s3a"):
        storage = icechunk.s3_storage(bucket=bucket, prefix=prefix, region=region, anonymous=anonymous, **kw)
    elif parsed.scheme in ("gs", "gcs"):
        if anonymous:
            kw.setdefault("anonymous", True)
        storage = icechunk.gcs_storage(bucket=bucket, prefix=prefix, **kw)
    else:
        storage = icechunk.local_filesystem_storage(url2pathname(parsed.path) or url, **kw)
    session = icechunk.Repository.open(storage).readonly_session(branch)
    store = session.store
    if parsed.scheme in ("file", "") and not kw:
        # The engine reads this repository itself (core/src/refs/icechunk.rs), at this
        # session's snapshot: its chunks go through the engine's read path, not through Python.
        # The object stays icechunk's store, for every other use.
        path = url2pathname(parsed.path) if parsed.scheme else url
        store._insitubatch_native = (f"icechunk+{os.path.abspath(path)}#snapshot={session.snapshot_id}", [])
    return store


def arraylake_store(repo: str, *, branch: str = "main") -> Any:
    """The read-only Icechunk session store of the Arraylake repo ``repo`` (``"org/name"``)
    on ``branch``. Auth comes from ``arraylake auth login`` or ``ARRAYLAKE_TOKEN``. Requires
    ``insitubatch-rs[arraylake]``.

    Raises:
        ImportError: arraylake is not installed.
    """
    arraylake = _require("arraylake", "arraylake", "arraylake_store")
    return arraylake.Client().get_repo(repo).readonly_session(branch).store


def close_store(store: Any) -> None:
    """Close the aiohttp session of an fsspec store (gcsfs, s3fs, fsspec's HTTP) on the event
    loop it lives on, so it neither leaks nor is closed on the wrong loop at garbage collection.

    Best effort, and never raises: a no-op for stores without one (URLs, obstore stores), for
    a session already closed and for a loop no longer running. The backend recreates the
    session if the store is reused, but call this only when done with the store.
    ``InSituDataset.close()`` calls it.
    """
    import asyncio

    if isinstance(store, Mapping):  # stores joined by name
        for one in store.values():
            close_store(one)
        return
    if isinstance(store, (list, tuple)):  # stores concatenated
        for one in store:
            close_store(one)
        return
    fs = getattr(store, "fs", None)
    if fs is None:
        return
    session = getattr(fs, "_session", None)
    loop = getattr(session, "_loop", None)
    if session is None or loop is None or getattr(session, "closed", True) or not loop.is_running():
        return
    with contextlib.suppress(Exception):  # teardown: never raise from a close
        try:
            running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is not None and running is loop:  # on the session's own loop: it cannot wait for itself
            running.create_task(session.close())
        else:
            asyncio.run_coroutine_threadsafe(session.close(), loop).result(timeout=5)
        fs._session = None


def ensure_local_dir(url: str) -> str:
    """Create the directory of a ``file://`` URL or a local path (obstore's LocalStore will
    not); a no-op for other schemes. Returns ``url`` unchanged, for chaining.

    Raises:
        OSError: the directory cannot be created.
    """
    from urllib.parse import urlparse
    from urllib.request import url2pathname

    parsed = urlparse(url)
    if parsed.scheme in ("", "file"):
        os.makedirs(url2pathname(parsed.path), exist_ok=True)
    return url


def open_geometries(
    store: Any,
    variables: Sequence[str] | None = None,
    *,
    sample_axis: int = 0,
    concat_dim: str | None = None,
    **storage_opts: Any,
) -> dict[str, ArrayGeometry]:
    """Read each array's geometry from the store's metadata (no chunk reads).

    ``store`` is a URL (or a local path), an obstore store or a zarr-python v3 ``Store``, a
    dict ``{name: store}`` of them joined (each store's arrays as ``name/path``), or a list
    of them concatenated along ``concat_dim`` (default ``"time"``; also a list inside a
    join); see ``InSituDataset``. ``variables=None`` discovers every data array, skipping CF
    coordinates (0-D arrays, 1-D arrays named after their own dimension). ``sample_axis``
    applies to every array.
    ``storage_opts`` are object_store settings for a URL (``aws_region="..."``); a store
    object has its own.

    Raises:
        ArrayNotFoundError: a name in ``variables`` the store does not have (also a
            ``KeyError``).
        NotAnArrayError: a name in ``variables`` that is a group (also a ``TypeError``).
        ValueError: ``sample_axis`` is negative or past an array's last axis; an unparsable
            URL.
        TypeError: ``store`` is neither a URL, a path, an obstore store nor a zarr-python
            ``Store``.
        InsitubatchIOError: the store cannot be opened or read: nothing at the path, an
            unsupported URL scheme, ``storage_opts`` for a local store, a failed request,
            malformed metadata.
    """
    if isinstance(variables, str):
        variables = [variables]
    axis = _native.checked_count("sample_axis", int(sample_axis), 0)  # the engine's axis is unsigned
    with reference_errors():
        geoms = _native.open_geometries(
            engine_store(store),
            None if variables is None else [str(v) for v in variables],
            axis,
            storage_options(storage_opts),
            None if concat_dim is None else str(concat_dim),
        )
    return {g.path: ArrayGeometry._wrap(g) for g in geoms}
