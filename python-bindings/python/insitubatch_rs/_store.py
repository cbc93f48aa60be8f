"""Opening stores: ``open_geometries``, and the anchor's error types for what a store lacks.

The anchor raises ``KeyError`` for an array name the store does not have and ``TypeError``
for a name that is a group. The engine reports both as its own errors (an
``InsitubatchIOError`` "no zarr array at path ...", a ``ValueError`` "... is a group, not an
array"); :func:`anchor_errors` re-raises them as classes that are both: code written for
the anchor catches them, and so does code written for the engine's classes.
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


# The engine's messages for the two cases (core/src/zarr.rs `open_array`).
_NOT_FOUND = "no zarr array at path"
_GROUP = "is a group, not an array"


@contextlib.contextmanager
def anchor_errors() -> Iterator[None]:
    """Re-raise the engine's not-found and is-a-group errors as the anchor's types."""
    try:
        yield
    except InsitubatchIOError as e:
        if _NOT_FOUND in str(e) and not isinstance(e, ArrayNotFoundError):
            raise ArrayNotFoundError(str(e)) from None
        raise
    except ValueError as e:
        if _GROUP in str(e) and not isinstance(e, NotAnArrayError):
            raise NotAnArrayError(str(e)) from None
        raise


def storage_options(opts: Mapping[str, Any] | None) -> list[tuple[str, str]]:
    return [(str(k), str(v)) for k, v in (opts or {}).items()]


def store_url(store: Any) -> str:
    """The URL the engine opens. Store objects (obstore, zarr) are not taken yet."""
    if isinstance(store, os.PathLike):
        from pathlib import Path

        return Path(os.fspath(store)).resolve().as_uri()
    if not isinstance(store, str):
        raise TypeError(
            f"store must be a URL string (file://, s3://, gs://, az://, http(s)://) or a local path, got "
            f"{type(store).__name__}: store objects are not accepted yet"
        )
    return store


def check_local(url: str) -> None:
    """A missing local store is an I/O error, not an empty store (as the Rust CLI does)."""
    from urllib.parse import urlparse
    from urllib.request import url2pathname

    parsed = urlparse(url)
    if parsed.scheme == "file" and not os.path.exists(url2pathname(parsed.path)):
        raise InsitubatchIOError(f"no Zarr store exists at this path: {url}")


def open_geometries(
    store: Any,
    variables: Sequence[str] | None = None,
    *,
    sample_axis: int = 0,
    **storage_opts: Any,
) -> dict[str, ArrayGeometry]:
    """Read each array's geometry from the store's metadata (no chunk reads).

    ``store`` is a URL (or a local path). ``variables=None`` discovers every data array,
    skipping CF coordinates (0-D arrays, 1-D arrays named after their own dimension); a
    name the store lacks raises ``KeyError``, a group ``TypeError``. ``sample_axis`` applies
    to every array. ``storage_opts`` are object_store settings (``aws_region="..."``).
    """
    url = store_url(store)
    check_local(url)
    if isinstance(variables, str):
        variables = [variables]
    if int(sample_axis) < 0:
        raise ValueError(f"sample_axis must be >= 0, got {sample_axis}")
    with anchor_errors():
        geoms = _native.open_geometries(
            url,
            None if variables is None else [str(v) for v in variables],
            int(sample_axis),
            storage_options(storage_opts),
        )
    return {g.path: ArrayGeometry._wrap(g) for g in geoms}
