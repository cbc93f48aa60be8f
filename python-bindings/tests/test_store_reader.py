"""``_native.StoreReader``: the notebook widget's kernel side reads keys and byte ranges with
the engine's own storage (a local store here; the widget's JupyterLab test reads through it
end to end, scripts/test-widget.sh)."""

from __future__ import annotations

from pathlib import Path

import pytest

from insitubatch_rs import InsitubatchIOError, _native


@pytest.fixture
def local(fixtures: Path) -> tuple[_native.StoreReader, Path]:
    root = fixtures / "v3_zstd"
    return _native.StoreReader(str(root)), root


def test_whole_range_and_suffix_reads_equal_the_files(local: tuple[_native.StoreReader, Path]) -> None:
    reader, root = local
    meta = (root / "zarr.json").read_bytes()
    assert reader.get("zarr.json") == meta
    assert reader.get("zarr.json", start=3, end=20) == meta[3:20]
    assert reader.get("zarr.json", start=5, end=5) == b""
    assert reader.get("zarr.json", suffix=7) == meta[-7:]
    chunk = next(p for p in root.rglob("*") if p.is_file() and "/c/" in p.as_posix())
    key = chunk.relative_to(root).as_posix()
    assert reader.get(key) == chunk.read_bytes()


def test_missing_key_is_none_and_list_gives_every_key(local: tuple[_native.StoreReader, Path]) -> None:
    reader, root = local
    assert reader.get("no/such/key") is None
    want = sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())
    assert sorted(reader.list("")) == want
    assert str(root.name) in reader.location


def test_bad_ranges_and_missing_stores_are_refused(local: tuple[_native.StoreReader, Path], tmp_path: Path) -> None:
    reader, _ = local
    with pytest.raises(ValueError, match="start and end .* or suffix alone; got start=5, end=None"):
        reader.get("zarr.json", start=5)
    with pytest.raises(ValueError, match="start and end"):
        reader.get("zarr.json", start=9, end=3)
    with pytest.raises(InsitubatchIOError, match="missing.zarr"):
        _native.StoreReader(str(tmp_path / "missing.zarr"))
