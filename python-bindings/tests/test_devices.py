"""Device placement: torch on the CPU (zero-copy) and on CUDA (page-locked staging, events),
the pin budget's checks, and JAX placement (``device=`` and the default ``jax.devices()[0]``).

CUDA tests run where ``torch.cuda.is_available()``; elsewhere they skip, saying so.
"""

from __future__ import annotations

import threading
import warnings

import numpy as np
import pytest

import insitubatch_rs as ib
from insitubatch_rs import _frameworks
from conftest import url


def dataset(fixtures, batch_size=8):
    return ib.InSituDataset(url(fixtures, "v3_zstd"), batch_size=batch_size)


def need_cuda(torch):
    if not torch.cuda.is_available():
        pytest.skip(
            "no CUDA device (torch.cuda.is_available() is False): the page-locked staging path "
            "(non_blocking copies, CUDA events) runs only on a GPU machine"
        )


@pytest.fixture
def fresh_pool():
    """The staging pool is process-wide: each test that sets a budget starts from none."""
    _frameworks._pool = None
    yield
    _frameworks._pool = None


# -- torch on the CPU ----------------------------------------------------------------------


@pytest.mark.parametrize("device", ["cpu", "cpu:0", "torch.device"])
def test_to_torch_cpu_device_is_zero_copy(fixtures, zstd, device):
    torch = pytest.importorskip("torch")
    if device == "torch.device":
        device = torch.device("cpu")
    _, srcs = zstd
    ds = dataset(fixtures)
    b = next(iter(ds.train))
    t = ib.to_torch(b, device=device)
    for label, x in t.items():
        assert x.device == torch.device("cpu")
        assert x.data_ptr() == b[label].ctypes.data, f"{label}: device='cpu' shares the engine buffer"
        assert np.shares_memory(x.numpy(), b[label])
        np.testing.assert_array_equal(x.numpy(), srcs[label][b.sample_indices])


def test_as_torch_cpu_device_values_and_no_pinning(fixtures, zstd, fresh_pool):
    torch = pytest.importorskip("torch")
    from torch.utils.data import DataLoader

    _, srcs = zstd
    ds = dataset(fixtures)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a budget for a CPU device is checked and has nothing to cap
        loader = DataLoader(ib.as_torch(ds.train, device="cpu", pin_budget_bytes=1 << 20), batch_size=None)
        order = ds.draw_order("train")
        n = 0
        for tb in loader:
            for label, x in tb.items():
                assert x.device.type == "cpu"
                np.testing.assert_array_equal(x.numpy(), srcs[label][order[n : n + len(x)]])
            n += len(tb["t2m"])
    assert n == len(order)
    assert _frameworks._pool is None, "no page-locked memory for a CPU device"


# -- the pin budget --------------------------------------------------------------------------

BAD_BUDGETS = [
    (True, TypeError, "got a bool"),
    (1.5, TypeError, "got float 1.5"),
    ("1GiB", TypeError, "got str '1GiB'"),
    (0, ValueError, "a positive byte count, got 0"),
    (-4096, ValueError, "a positive byte count, got -4096"),
]


@pytest.mark.parametrize("bad, exc, words", BAD_BUDGETS)
def test_pin_budget_is_checked(fixtures, bad, exc, words):
    pytest.importorskip("torch")
    ds = dataset(fixtures)
    with pytest.raises(exc, match=f"budget_bytes must be .*{words}"):
        ib.pin_host_buffers(ds.train, budget_bytes=bad)
    for device in (None, "cpu", "cuda"):  # checked before the device is looked at
        with pytest.raises(exc, match=f"pin_budget_bytes must be .*{words}"):
            ib.as_torch(ds.train, device=device, pin_budget_bytes=bad)


def test_pin_host_buffers_signature_and_view(fixtures):
    pytest.importorskip("torch")
    ds = dataset(fixtures)
    with pytest.raises(TypeError):
        ib.pin_host_buffers(ds.train, 1 << 20)  # keyword-only, as in insitubatch 0.2.0
    with pytest.raises(TypeError, match="takes a split view such as ds.train, got Batch"):
        ib.pin_host_buffers(next(iter(ds.train)), budget_bytes=1 << 20)
    assert ib.frameworks.pin_host_buffers is ib.pin_host_buffers, "insitubatch 0.2.0's insitubatch.frameworks path"


def test_cuda_requests_without_cuda_raise(fixtures):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("CUDA is available here: the no-CUDA errors cannot be shown")
    ds = dataset(fixtures)
    b = next(iter(ds.train))
    no_cuda = r"needs CUDA, and torch.cuda.is_available\(\) is False here; use device='cpu'"
    with pytest.raises(RuntimeError, match=r"pin_host_buffers " + no_cuda):
        ib.pin_host_buffers(ds.train, budget_bytes=1 << 20)
    with pytest.raises(RuntimeError, match=r"to_torch\(device='cuda'\) " + no_cuda):
        ib.to_torch(b, device="cuda")
    with pytest.raises(RuntimeError, match=no_cuda):
        ib.as_torch(ds.train, device="cuda:0")


class Copy:
    """A copy's completion as the pool sees it (``query``/``synchronize``, the two calls it
    makes on a ``torch.cuda.Event``), landed explicitly by the test: the pool's bookkeeping
    is plain Python, so it is tested here without a GPU; the CUDA tests below run it on real
    events."""

    def __init__(self) -> None:
        self._landed = threading.Event()
        self.waited = 0

    def land(self) -> None:
        self._landed.set()

    def query(self) -> bool:
        return self._landed.is_set()

    def synchronize(self) -> None:
        self.waited += 1
        self._landed.set()  # the DMA finishes while the pool waits


def test_staging_pool_lends_until_landed_and_stays_in_budget():
    torch = pytest.importorskip("torch")
    made = []

    def alloc(n):
        made.append(n)
        return torch.empty(n, dtype=torch.uint8)

    pool = _frameworks._StagingPool(250, alloc)
    a = pool.acquire(100)
    c1 = Copy()
    pool.hold(c1, [(100, a)], None)
    b = pool.acquire(100)
    assert b is not a, "a buffer whose copy has not landed is never lent again"
    c2 = Copy()
    pool.hold(c2, [(100, b)], None)
    # 300 > 250: the pool waits for the oldest copy rather than allocating past the budget
    c = pool.acquire(100)
    assert c is a and c1.waited == 1 and c2.waited == 0
    assert made == [100, 100] and pool.allocated == 200
    c3 = Copy()
    pool.hold(c3, [(100, c)], None)
    c2.land()
    c3.land()
    e = pool.acquire(100)
    assert any(e is x for x in (b, c)) and made == [100, 100], "landed buffers are reused"
    done = Copy()
    done.land()
    pool.hold(done, [(100, e)], None)
    # another size: idle 100-byte buffers are dropped to make room, never exceeding the budget
    d = pool.acquire(200)
    assert d is not None and made == [100, 100, 200] and pool.allocated == 200


def test_staging_pool_past_budget_lends_nothing_and_warns_once():
    torch = pytest.importorskip("torch")
    pool = _frameworks._StagingPool(64, lambda n: torch.empty(n, dtype=torch.uint8))
    with pytest.warns(RuntimeWarning, match=r"page-locked staging budget spent .* budget 0.0 MiB"):
        assert pool.acquire(100) is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert pool.acquire(100) is None, "one warning per budget"
    pool.set_budget(100)
    assert pool.acquire(100) is not None and pool.allocated == 100


# -- torch on CUDA (a GPU machine) -----------------------------------------------------------


def test_to_torch_cuda_values_and_recycled_staging(fixtures, zstd, fresh_pool):
    torch = pytest.importorskip("torch")
    need_cuda(torch)
    _, srcs = zstd
    ds = dataset(fixtures)
    ib.pin_host_buffers(ds.train, budget_bytes=1 << 20)
    allocated = []
    for b in ds.train:
        t = ib.to_torch(b, device="cuda")
        for label, x in t.items():
            assert x.device.type == "cuda"
            np.testing.assert_array_equal(x.cpu().numpy(), srcs[label][b.sample_indices])
        allocated.append(_frameworks._pool.allocated)
    # Reading x.cpu() waits for the stream, so each batch's copies have landed before the
    # next batch asks: one staging buffer per array, reused for every batch.
    assert set(allocated) == {2 * 8 * 6 * 7 * 4}


def test_to_torch_cuda_holds_staging_until_the_copy_lands(fixtures, zstd, fresh_pool):
    torch = pytest.importorskip("torch")
    need_cuda(torch)
    _, srcs = zstd
    ds = dataset(fixtures)
    ib.pin_host_buffers(ds.train, budget_bytes=1 << 20)
    it = iter(ds.train)
    b = next(it)
    # Keep the stream busy so the copies queue behind a kernel: the values read below then
    # come from buffers that were in flight. Nothing asserted depends on how long it runs
    # (a hold is kept until the next call whether or not its copy has landed).
    torch.cuda._sleep(1 << 30)
    t = ib.to_torch(b, device="cuda")
    pool = _frameworks._pool
    (_, lent, _), *_ = pool._in_flight
    lent_ids = {id(buf) for _, buf in lent}
    assert not lent_ids & {id(buf) for bufs in pool._free.values() for buf in bufs}, "lent while in flight"
    for label, x in t.items():  # reading waits on the stream: the values are the batch's
        np.testing.assert_array_equal(x.cpu().numpy(), srcs[label][b.sample_indices])
    torch.cuda.synchronize()
    pool._retire(wait=False)
    assert lent_ids <= {id(buf) for bufs in pool._free.values() for buf in bufs}, "back once landed"


def test_cuda_budget_spent_degrades_with_one_warning(fixtures, zstd, fresh_pool):
    torch = pytest.importorskip("torch")
    need_cuda(torch)
    _, srcs = zstd
    ds = dataset(fixtures)
    ib.pin_host_buffers(ds.train, budget_bytes=100)  # less than one 8x6x7 float32 array
    with pytest.warns(RuntimeWarning, match="page-locked staging budget spent"):
        for b in ds.train:
            t = ib.to_torch(b, device="cuda")
            for label, x in t.items():
                np.testing.assert_array_equal(x.cpu().numpy(), srcs[label][b.sample_indices])
    assert _frameworks._pool.allocated == 0


def test_as_torch_cuda_trains(fixtures, zstd, fresh_pool):
    torch = pytest.importorskip("torch")
    need_cuda(torch)
    from torch.utils.data import DataLoader

    _, srcs = zstd
    ds = dataset(fixtures)
    model = torch.nn.Linear(42, 42).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    order, n = ds.draw_order("train"), 0
    for tb in DataLoader(ib.as_torch(ds.train, device="cuda", pin_budget_bytes=1 << 20), batch_size=None):
        x, y = tb["t2m"].flatten(1), tb["u10"].flatten(1)
        assert x.is_cuda
        np.testing.assert_array_equal(x.cpu().numpy(), srcs["t2m"][order[n : n + len(x)]].reshape(len(x), -1))
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        n += len(x)
    assert n == len(order) and _frameworks._pool.budget == 1 << 20


# -- JAX ---------------------------------------------------------------------------------------


def test_to_jax_places_on_the_device_asked_and_by_default(fixtures, zstd):
    jax = pytest.importorskip("jax")
    _, srcs = zstd
    ds = dataset(fixtures)
    b = next(iter(ds.train))
    cpu = jax.devices("cpu")[0]
    on_cpu = ib.to_jax(b, device=cpu)
    default = ib.to_jax(b)
    for label in b:
        want = srcs[label][b.sample_indices]
        assert on_cpu[label].devices() == {cpu}
        assert on_cpu[label].unsafe_buffer_pointer() == b[label].ctypes.data, "zero-copy on the CPU"
        np.testing.assert_array_equal(np.asarray(on_cpu[label]), want)
        assert default[label].devices() == {jax.devices()[0]}, "default: jax.devices()[0]"
        np.testing.assert_array_equal(np.asarray(default[label]), want)
