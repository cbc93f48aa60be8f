"""StandardScaler computes exactly what insitubatch 0.2.0 computes: numpy's
``(x - mean) / (std + eps)`` on the sample-first chunk, stored back in the data's dtype
(insitubatch 0.2.0 writes the result into a slot of the array's dtype). Checked with exact
equality (the bytes), over statistics shapes x statistics dtypes x data dtypes (float16,
bfloat16, float32, float64) x sample axes 0 and 1, on stores written by zarr-python; plus the
refusals and the CLI's ``--scale``/``--scaler``.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

import insitubatch_rs as ib

T, INNER = 64, (3, 5)
EPS = 1e-8

try:
    import ml_dtypes

    BF16 = np.dtype(ml_dtypes.bfloat16)
except ImportError:  # bfloat16 cases skip, saying so
    ml_dtypes = None
    BF16 = None

# Every statistic shape that broadcasts over one sample (3, 5), the sample axis excluded.
SHAPES = [(), (1, 1), (3, 1), (1, 5), (3, 5), (5,), (1, 3, 5), (1, 1, 1)]
STAT_DTYPES = ["python", "float16", "bfloat16", "float32", "float64"]


def np_dtype(name: str) -> np.dtype:
    if name == "bfloat16":
        if BF16 is None:
            pytest.skip("ml_dtypes is not installed: bfloat16 cases need it")
        return BF16
    return np.dtype(name)


def make_stat(rng, shape, dtype: str, center: float, spread: float):
    """A statistic as a user would give it: a Python float, or an array of that dtype."""
    v = center + spread * rng.standard_normal(shape)
    if dtype == "python":
        return float(v.reshape(-1)[0]) if shape == () else None
    return np.asarray(v).astype(np_dtype(dtype))


def write_store(path: Path, dtype: np.dtype, arrays: dict[str, np.ndarray], sample_axis: int) -> str:
    """A v3 store written by zarr-python: one array per name, physical layout with the
    sample axis at ``sample_axis``. bfloat16 is written as its uint16 words and relabelled
    (zarr-python has no bfloat16), as in test_bfloat16.py."""
    zarr = pytest.importorskip("zarr", minversion="3", reason="zarr-python 3 (Python >= 3.11) writes the store")
    g = zarr.open_group(store=str(path), mode="w", zarr_format=3)
    for name, logical in arrays.items():
        phys = np.moveaxis(logical, 0, sample_axis)
        chunks = list(phys.shape)
        chunks[sample_axis] = 12  # six sample chunks, the last short
        # `is not None` first: numpy reads `dtype == None` as a comparison with float64.
        bf16 = BF16 is not None and dtype == BF16
        stored = phys.view(np.uint16) if bf16 else phys
        a = g.create_array(name, shape=phys.shape, chunks=tuple(chunks), dtype=stored.dtype)
        a[:] = stored
        if bf16:
            meta_path = path / name / "zarr.json"
            meta = json.loads(meta_path.read_text())
            meta["data_type"] = "bfloat16"
            meta_path.write_text(json.dumps(meta))
    return path.resolve().as_uri()


def read_all(u: str, sample_axis: int, scaler, **kw) -> dict[str, np.ndarray]:
    """Every sample of every array, in sample order, after the scaler."""
    geoms = ib.open_geometries(u, sample_axis=sample_axis)
    first = next(iter(geoms.values()))
    out: dict[str, list] = {k: [None] * T for k in geoms}
    with ib.InSituDataset(u, ib.split_by_chunk(first), geoms, batch_size=16, chunk_transforms=[scaler], **kw) as ds:
        for b in ds.all:
            for k in geoms:
                for row, t in zip(b[k], b.sample_indices):
                    out[k][int(t)] = row.copy()
    return {k: np.stack(v) for k, v in out.items()}


def same_bits(got: np.ndarray, want: np.ndarray) -> bool:
    return got.dtype == want.dtype and got.shape == want.shape and got.tobytes() == want.tobytes()


def cases(rng):
    """(name, mean, std) over every shape x mean dtype, with std of another shape and dtype."""
    out = []
    for k, (shape, mdt) in enumerate(itertools.product(SHAPES, STAT_DTYPES)):
        sdt = STAT_DTYPES[(k + 2) % len(STAT_DTYPES)]
        sshape = SHAPES[(k + 3) % len(SHAPES)]
        if mdt == "python" and shape != ():
            continue
        if sdt == "python":
            sshape = ()
        if BF16 is None and "bfloat16" in (mdt, sdt):
            continue
        m = make_stat(rng, shape, mdt, 200.0, 3.0)
        spread = np.abs(4 + 2 * rng.standard_normal(sshape)) + 0.5
        s = float(spread) if sdt == "python" else spread.astype(np_dtype(sdt))
        out.append((f"a{k}_{mdt}{list(shape)}_{sdt}{list(sshape)}", m, s))
    return out


@pytest.mark.parametrize("sample_axis", [0, 1])
@pytest.mark.parametrize("data_dtype", ["float16", "bfloat16", "float32", "float64"])
def test_scaler_equals_numpy_bit_for_bit(tmp_path, data_dtype, sample_axis):
    dt = np_dtype(data_dtype)
    rng = np.random.default_rng(7)
    grid = cases(rng)
    x = (200 + 50 * rng.standard_normal((T, *INNER))).astype(dt)
    u = write_store(tmp_path / "s.zarr", dt, {name: x for name, _, _ in grid}, sample_axis)
    sc = ib.StandardScaler({n: m for n, m, _ in grid}, {n: s for n, _, s in grid})
    got = read_all(u, sample_axis, sc)
    bad = []
    for name, m, s in grid:
        with np.errstate(all="ignore"):
            want = ((x - m) / (s + EPS)).astype(dt)  # insitubatch 0.2.0's expression, into the data's dtype
        if not same_bits(got[name], want):
            diff = np.abs(got[name].astype(np.float64) - want.astype(np.float64)).max()
            bad.append(f"{name}: max |diff| {diff}")
    assert not bad, f"{len(bad)} of {len(grid)} cases differ from numpy ({data_dtype}, axis {sample_axis}): {bad}"


def test_the_issue_case_1_nlon_stats_on_float32(tmp_path):
    """(T, 3, 5) float32 with (1, nlon) statistics: once off by up to 15.0, silently."""
    rng = np.random.default_rng(1)
    x = (280 + 10 * rng.standard_normal((T, *INNER))).astype(np.float32)
    m = (280 + rng.standard_normal((1, 5))).astype(np.float32)
    s = (5 + rng.random((1, 5))).astype(np.float32)
    u = write_store(tmp_path / "s.zarr", np.dtype(np.float32), {"t2m": x}, 0)
    got = read_all(u, 0, ib.StandardScaler({"t2m": m}, {"t2m": s}))["t2m"]
    assert same_bits(got, (x - m) / (s + EPS))


def test_float64_data_is_scaled_in_float64(tmp_path):
    """float64 data was refused ("expects float32"); insitubatch 0.2.0 scales it."""
    rng = np.random.default_rng(2)
    x = 280 + 10 * rng.standard_normal((T, *INNER))
    m, s = 280.123456789, np.float64(7.25)
    u = write_store(tmp_path / "s.zarr", np.dtype(np.float64), {"t2m": x}, 0)
    got = read_all(u, 0, ib.StandardScaler({"t2m": m}, {"t2m": s}))["t2m"]
    assert got.dtype == np.float64 and same_bits(got, (x - m) / (s + EPS))


def test_a_shape_that_does_not_broadcast_is_refused_naming_both(tmp_path):
    x = np.zeros((T, *INNER), np.float32)
    u = write_store(tmp_path / "s.zarr", np.dtype(np.float32), {"t2m": x}, 0)
    geoms = ib.open_geometries(u)
    for stat_shape in [(3,), (2, 3, 5), (5, 3)]:
        sc = ib.StandardScaler({"t2m": np.zeros(stat_shape, np.float32)}, {"t2m": 1.0})
        with pytest.raises(ValueError, match=r"does not broadcast") as e:
            ib.InSituDataset(u, ib.split_by_chunk(geoms["t2m"]), geoms, batch_size=2, chunk_transforms=[sc])
        msg = str(e.value)
        assert str(list(stat_shape)) in msg and "[3, 5]" in msg, msg
    # mean and std that no sample could take together: refused at construction.
    with pytest.raises(ValueError, match=r"\[5\].*\[3\]"):
        ib.StandardScaler({"t2m": np.zeros(5)}, {"t2m": np.ones(3)})


def test_statistics_keep_their_dtype_and_kind():
    m32, m64 = np.zeros((1, 5), np.float32), np.zeros((3, 1))
    sc = ib.StandardScaler({"a": m32, "b": m64, "c": 1.5}, {"a": 1.0, "b": np.float32(2.0), "c": 2})
    assert sc.mean["a"].dtype == np.float32 and sc.mean["a"].shape == (1, 5)
    assert sc.mean["b"].dtype == np.float64 and sc.mean["b"].shape == (3, 1)
    assert type(sc.mean["c"]) is float and type(sc.std["a"]) is float and sc.std["c"] == 2.0
    assert sc.std["b"].dtype == np.float32 and sc.std["b"].shape == ()
    assert sc.eps == EPS
    with pytest.raises(TypeError, match="int64"):
        ib.StandardScaler({"a": np.zeros(3, np.int64)}, {"a": 1.0})


# --- the CLI's --scale / --scaler: the same StandardScaler -------------------------------------


def cli_binary() -> Path:
    target = os.environ.get("CARGO_TARGET_DIR")
    exe = Path(target) / "debug" / "insitubatch" if target else None
    if exe is None or not exe.is_file():
        why = f"the insitubatch CLI is not built at {exe} (scripts/test.sh builds it before the Python tests)"
        if os.environ.get("CI", "").strip().lower() not in ("", "0", "false"):
            pytest.fail(f"{why}; CI is set, where this is a failure, not a skip")
        pytest.skip(why)
    return exe


def digest(indices, arrays: dict[str, np.ndarray]) -> str:
    """insitubatch_native::BatchDigest of one batch: indices (u64 LE), then label + bytes."""
    h = hashlib.sha256()
    for t in indices:
        h.update(int(t).to_bytes(8, "little"))
    for label in sorted(arrays):
        h.update(label.encode())
        h.update(np.ascontiguousarray(arrays[label]).tobytes())
    return h.hexdigest()


@pytest.mark.parametrize("how", ["scale", "scaler-json", "scaler-npz"])
def test_cli_scales_as_numpy_does(tmp_path, how):
    exe = cli_binary()
    rng = np.random.default_rng(3)
    x32 = (280 + 10 * rng.standard_normal((T, *INNER))).astype(np.float32)
    x64 = 5 + rng.standard_normal((T, *INNER))
    u = write_store(tmp_path / "s.zarr", np.dtype(np.float32), {"t2m": x32}, 0)
    # A second array of another dtype in the same store.
    import zarr

    zarr.open_group(str(tmp_path / "s.zarr"), mode="a").create_array("u10", shape=x64.shape, chunks=(12, 3, 5),
                                                                     dtype="float64")[:] = x64
    if how == "scale":
        m, s = 280.1, 9.75  # Python floats: weak, each array computes in its own dtype
        stats = {"t2m": (m, s), "u10": (m, s)}
        args = ["--scale", f"{m!r},{s!r}"]
    else:
        stats = {"t2m": ((280 + rng.standard_normal((1, 5))).astype(np.float32), np.float64(9.75)),
                 "u10": (np.full((3, 1), 5.0), (1 + rng.random((3, 5))).astype(np.float32))}
        path = tmp_path / ("s.json" if how == "scaler-json" else "s.npz")
        ib.StandardScaler({k: v[0] for k, v in stats.items()}, {k: v[1] for k, v in stats.items()}).save(path)
        args = ["--scaler", str(path)]
    want = {k: ((x - stats[k][0]) / (stats[k][1] + EPS)).astype(x.dtype) for k, x in (("t2m", x32), ("u10", x64))}
    out = subprocess.run([str(exe), "bench", u, "--json", "--digest", "--epochs", "1", "--no-shuffle",
                          "--batch-size", str(T), *args], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)["epochs"][0]["digest"]
    assert got == digest(range(T), want)
