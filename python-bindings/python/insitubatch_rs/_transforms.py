"""Chunk and batch transforms: insitubatch 0.2.0's protocols, ``applies`` scoping, cache identity.

A chunk transform ``(DecodedChunk) -> DecodedChunk`` runs once per chunk on the engine's
thread pool and its output is cached with the chunk; a batch transform ``(Batch) -> Batch``
runs per assembled batch. A transform that reshapes or recasts declares
``output_inner(geom) -> (inner_shape, dtype)``; it receives an :class:`ArrayGeometry` with
insitubatch 0.2.0's members (``inner_shape``, ``dtype``, ...).
"""

from __future__ import annotations

import hashlib
import inspect
import warnings
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from . import _native
from ._types import ArrayGeometry, Batch, DecodedChunk


@runtime_checkable
class ChunkTransform(Protocol):
    """Per-chunk transform applied before shuffle and gather (cached with the chunk)."""

    def __call__(self, chunk: DecodedChunk, /) -> DecodedChunk: ...


@runtime_checkable
class ReshapingChunkTransform(ChunkTransform, Protocol):
    """A chunk transform that changes a chunk's inner shape and/or dtype (regrid, recast).

    ``output_inner`` names only the inner geometry: the sample axis is never reshaped.
    """

    def output_inner(self, geom: ArrayGeometry) -> tuple[tuple[int, ...], Any]:
        """``(inner_shape, dtype)`` of this transform's output for a chunk of ``geom``: every
        axis but the sample axis, physical order, and a numpy dtype or its name."""
        ...


@runtime_checkable
class BatchTransform(Protocol):
    """Per-batch transform applied after gather (never cached)."""

    def __call__(self, batch: Batch, /) -> Batch: ...


class _Scoped:
    """A chunk transform restricted to some zarr array **paths** (see :func:`applies`)."""

    __slots__ = ("arrays", "transform")

    def __init__(self, arrays: list[str], transform: Any) -> None:
        self.arrays = arrays
        self.transform = transform

    def __call__(self, chunk: DecodedChunk) -> DecodedChunk:
        return self.transform(chunk)

    def __repr__(self) -> str:
        return f"applies({self.arrays!r}, {self.transform!r})"


class _ScopedReshaping(_Scoped):
    """A scoped reshaping transform: ``output_inner`` exists only when the transform has one,
    because the engine tells a reshaping transform by the attribute."""

    __slots__ = ()

    def output_inner(self, geom: ArrayGeometry) -> tuple[tuple[int, ...], Any]:
        return self.transform.output_inner(geom)


def applies(arrays: Sequence[str], transform: Any) -> _Scoped:
    """Scope a chunk transform to the named zarr array paths (not labels); every other array
    passes through. Unknown paths raise ``ValueError`` when the dataset is built, and a
    transform with ``validate_scope(arrays)`` (``StandardScaler``) checks the names now.

    Raises:
        TypeError: ``arrays`` is a string (write ``applies(["t2m"], ...)``).
        ValueError: ``arrays`` is empty, or a ``StandardScaler`` has no statistics for one of
            them.
    """
    if isinstance(arrays, str):
        raise TypeError(
            f"applies({arrays!r}, ...): a string would scope to its characters. Write applies([{arrays!r}], ...)"
        )
    scope = [str(a) for a in arrays]
    if not scope:
        raise ValueError(f"applies([], {transform!r}) has an empty scope; name at least one array")
    validate = getattr(transform, "validate_scope", None)
    if validate is not None:
        validate(scope)
    if getattr(transform, "output_inner", None) is not None:
        return _ScopedReshaping(scope, transform)
    return _Scoped(scope, transform)


def transform_name(t: Any) -> str:
    return str(getattr(t, "__name__", type(t).__name__))


class _PythonGeometry:
    """Hands ``output_inner`` our :class:`ArrayGeometry` (the engine passes its own class,
    which lacks insitubatch 0.2.0's derived members), keeping the user's name and cache
    identity."""

    __slots__ = ("__name__", "_ib_wrapped")

    def __init__(self, transform: Any) -> None:
        self._ib_wrapped = transform
        self.__name__ = transform_name(transform)

    def __call__(self, chunk: DecodedChunk) -> Any:
        return self._ib_wrapped(chunk)

    def output_inner(self, geom: Any) -> tuple[tuple[int, ...], Any]:
        if isinstance(geom, _native.ArrayGeometry):
            geom = ArrayGeometry._wrap(geom)
        shape, dtype = self._ib_wrapped.output_inner(geom)
        return tuple(int(s) for s in shape), dtype


def native_chunk_transform(t: Any) -> tuple[list[str] | None, Any]:
    """``(scope, callable)`` as the engine takes a chunk transform."""
    scope = None
    if isinstance(t, _Scoped):
        scope, t = t.arrays, t.transform
    if isinstance(t, _native.StandardScaler):  # runs natively in the engine
        return scope, t
    if not callable(t):
        raise TypeError(f"a chunk transform must be callable (DecodedChunk) -> DecodedChunk, got {t!r}")
    if getattr(t, "output_inner", None) is not None:
        t = _PythonGeometry(t)
    return scope, t


def _cache_token(transform: Any) -> str:
    """What identifies a Python chunk transform to a persisted cache (``cache_dir`` +
    ``persist``): two transforms with the same token must produce the same bytes.

    In order: a ``cache_key`` attribute (declare one and bump it on every re-fit); a SHA-256
    of the cloudpickle of the callable when cloudpickle is installed (catches edited code and
    closure values); else a SHA-256 of its qualified name, source, closure cell values and
    repr, with a warning that large numpy statistics may repr identically after a re-fit.
    """
    transform = getattr(transform, "_ib_wrapped", transform)
    key = getattr(transform, "cache_key", None)
    if key is not None:
        return f"key:{key}"
    try:
        import cloudpickle

        return "pickle:" + hashlib.sha256(cloudpickle.dumps(transform)).hexdigest()
    except Exception:  # not installed, or not picklable: fall back to the source
        pass
    target = getattr(transform, "__call__", transform) if not inspect.isroutine(transform) else transform  # noqa: B004
    parts = [getattr(transform, "__qualname__", type(transform).__qualname__)]
    try:
        parts.append(inspect.getsource(target))
    except (OSError, TypeError):
        parts.append("<no source>")
    for cell in getattr(target, "__closure__", None) or ():
        try:
            parts.append(repr(cell.cell_contents))
        except ValueError:
            parts.append("<empty cell>")
    parts.append(repr(transform))
    warnings.warn(
        f"chunk transform {parts[0]} is fingerprinted for the persisted cache by its source and repr; numpy "
        "summarizes arrays over 1000 elements in repr, so a re-fit with large statistics may reopen the cache "
        "as a hit. Give it a cache_key you bump on every fit, or install cloudpickle",
        stacklevel=3,
    )
    return "src:" + hashlib.sha256("\0".join(parts).encode()).hexdigest()
