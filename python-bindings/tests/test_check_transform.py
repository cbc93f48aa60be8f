"""insitubatch-check-transform: target loading, the structural checks and exit codes on a
real fixture store. The GIL probe's measurement is timing, so only its classification is
asserted here; the CLI runs below pass --no-gil-probe."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import store, url
from insitubatch_rs._check_transform import UsageError, gil_verdict, load_target, main

TRANSFORMS = textwrap.dedent(
    """
    import dataclasses
    import numpy as np
    import insitubatch_rs as insitubatch

    def kelvin_to_celsius(chunk):
        chunk.data = chunk.data - np.float32(273.15)
        return chunk

    class Coarsen:
        def __init__(self, factor=2):
            self.factor = factor
        def output_inner(self, geom):
            *lead, h, w = geom.inner_shape
            return (*lead, h // self.factor, w // self.factor), geom.dtype
        def __call__(self, chunk):
            f = self.factor
            *lead, h, w = chunk.data.shape
            d = chunk.data[..., : h // f * f, : w // f * f].reshape(*lead, h // f, f, w // f, f).mean(axis=(-3, -1))
            return dataclasses.replace(chunk, data=d.astype(chunk.data.dtype))

    class LiesAboutItsShape(Coarsen):
        def output_inner(self, geom):
            return geom.inner_shape, geom.dtype

    def undeclared_recast(chunk):
        return chunk.data.astype(np.float64)

    def drops_rows(chunk):
        return chunk.data[1:]

    def makes_nan(chunk):
        out = chunk.data.copy()
        out[0] = np.nan
        return out

    def boom(chunk):
        raise RuntimeError("no")

    class NeedsArgs:
        def __init__(self, scale):
            self.scale = scale
        def __call__(self, chunk):
            return chunk

    scoped_elsewhere = insitubatch.applies(["u10"], kelvin_to_celsius)
    scoped_here = insitubatch.applies(["t2m"], kelvin_to_celsius)
    not_callable = 3
    """
)


@pytest.fixture
def tfile(tmp_path) -> Path:
    p = tmp_path / "my_transforms.py"
    p.write_text(TRANSFORMS)
    return p


@pytest.fixture
def zstd_url(fixtures, manifest) -> str:
    return url(fixtures, store(manifest, "v3_zstd")["path"])


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_load_target_file_module_class_and_errors(tfile, monkeypatch):
    assert callable(load_target(f"{tfile}:kelvin_to_celsius"))
    assert type(load_target(f"{tfile}:Coarsen")).__name__ == "Coarsen", "a class is instantiated"
    monkeypatch.syspath_prepend(str(tfile.parent))
    assert callable(load_target("my_transforms:kelvin_to_celsius"))
    for bad, words in [
        (f"{tfile}:NeedsArgs", "needs arguments"),
        (f"{tfile}:nope", "no attribute 'nope'"),
        (f"{tfile}:not_callable", "not callable"),
        ("no_such_module_here:f", "cannot import module"),
        (f"{tfile.parent}/missing.py:f", "no such file"),
        ("kelvin_to_celsius", "module:attr"),
    ]:
        with pytest.raises(UsageError, match=words):
            load_target(bad)


def test_shape_preserving_transform_passes(capsys, tfile, zstd_url):
    code, out, _ = run(capsys, zstd_url, "--var", "t2m", "--transform", f"{tfile}:kelvin_to_celsius", "--no-gil-probe")
    assert code == 0, out
    assert "80 samples, 8/chunk, 10 chunks" in out and "(8, 6, 7) float32  ->  (8, 6, 7) float32" in out
    assert "cacheable as-is" in out and out.rstrip().endswith("PASS: chunk_transform checks all passed.")


def test_reshaping_transform_with_a_true_declaration_passes(capsys, tfile, zstd_url):
    code, out, _ = run(capsys, zstd_url, "--var", "t2m", "--transform", f"{tfile}:Coarsen", "--no-gil-probe")
    assert code == 0, out
    assert "(8, 6, 7) float32  ->  (8, 3, 3) float32" in out and "declares (3, 3) float32" in out


@pytest.mark.parametrize(
    "target, words",
    [
        ("LiesAboutItsShape", "output_inner declares (6, 7) float32 but the output is (3, 3) float32"),
        ("undeclared_recast", "declares no output_inner"),
        ("drops_rows", "the sample axis changed (8 -> 7 rows)"),
        ("boom", "the transform raised RuntimeError: no"),
        ("scoped_elsewhere", "scoped to ['u10'], so it never runs on 't2m'"),
    ],
)
def test_failing_checks_exit_1(capsys, tfile, zstd_url, target, words):
    code, out, _ = run(capsys, zstd_url, "--var", "t2m", "--transform", f"{tfile}:{target}", "--no-gil-probe")
    assert code == 1, out
    assert words in out and "FAIL" in out and "PASS" not in out


def test_scoped_to_the_var_passes_and_nan_warns(capsys, tfile, zstd_url):
    code, out, _ = run(capsys, zstd_url, "--var", "t2m", "--transform", f"{tfile}:scoped_here", "--no-gil-probe")
    assert code == 0, out
    code, out, _ = run(capsys, zstd_url, "--var", "t2m", "--chunk", "9", "--transform", f"{tfile}:makes_nan",
                       "--no-gil-probe")  # fmt: skip
    assert code == 0 and "warning: 42 NaN/Inf values in the output (the input had 0)" in out, out


def test_bad_arguments_exit_2(capsys, tfile, zstd_url, fixtures):
    for argv in (
        [zstd_url, "--var", "nope", "--transform", f"{tfile}:kelvin_to_celsius"],
        [zstd_url, "--var", "t2m", "--chunk", "10", "--transform", f"{tfile}:kelvin_to_celsius"],
        [zstd_url, "--var", "t2m", "--transform", f"{tfile}:NeedsArgs"],
        [zstd_url, "--var", "t2m", "--transform", f"{tfile}:kelvin_to_celsius", "--repeats", "0"],
        [(fixtures / "no_such_store").as_uri(), "--var", "t2m", "--transform", f"{tfile}:kelvin_to_celsius"],
    ):
        code, _, err = run(capsys, *argv)
        assert code == 2 and err.startswith("error: "), (argv, err)
    with pytest.raises(SystemExit) as e:
        main([zstd_url, "--transform", f"{tfile}:kelvin_to_celsius"])  # --var is required
    assert e.value.code == 2


def test_gil_verdict_classification():
    assert gil_verdict(3.5, 4, 8, False) == (True, "speedup 3.50x (>= 2.40) -> releases the GIL (vectorized)")
    releases, words = gil_verdict(1.1, 4, 8, False)
    assert releases is False and "holds the GIL" in words and "(< 2.40)" in words
    assert gil_verdict(1.3, 4, 2, False)[0] is True, "the bar is 0.6 x the usable cores"
    assert gil_verdict(0.0, 4, 1, False)[0] is None and gil_verdict(0.0, 4, 8, True)[0] is None


def test_the_console_script_is_installed(tfile, zstd_url):
    script = Path(sys.executable).parent / "insitubatch-check-transform"
    if not script.exists():
        pytest.skip(f"no console script next to {sys.executable} (package not installed from a wheel here)")
    r = subprocess.run(
        [str(script), zstd_url, "--var", "u10", "--transform", f"{tfile}:Coarsen", "--no-gil-probe"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0 and "(8, 6, 7) float32  ->  (8, 3, 3) float32" in r.stdout, r.stdout + r.stderr
