"""Ctrl-C interrupts a blocked iteration; unclosed datasets release their threads and files."""

from __future__ import annotations

import gc
import http.server
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from functools import partial

import pytest

import insitubatch_rs as ib
from conftest import store, url

LINUX = sys.platform.startswith("linux")


class _SlowHandler(http.server.SimpleHTTPRequestHandler):
    """Serves metadata at once and stalls every chunk request (until the test ends)."""

    release: threading.Event

    def do_GET(self) -> None:  # noqa: N802
        if not self.path.rstrip("/").endswith(("zarr.json", ".zmetadata", ".zarray", ".zgroup", ".zattrs")):
            if self.release.wait(30):
                return  # the test is over: drop the request
        super().do_GET()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def slow_server(fixtures):
    release = threading.Event()
    handler = type("H", (_SlowHandler,), {"release": release})
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), partial(handler, directory=str(fixtures)))
    srv.daemon_threads = True
    srv.handle_error = lambda *a: None  # a client that went away is expected here
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    release.set()
    srv.shutdown()
    srv.server_close()


CHILD = textwrap.dedent(
    """
    import sys, insitubatch_rs as ib
    ds = ib.InSituDataset(sys.argv[1], batch_size=4, max_inflight=2)
    print("ready", flush=True)
    for b in ds.train:
        print("got a batch", flush=True)
    """
)


def test_ctrl_c_interrupts_a_blocked_iteration(slow_server, manifest):
    s = store(manifest, "v3_zstd")
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, f"{slow_server}/{s['path']}"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout.readline().strip() == "ready", child.stderr.read()
        time.sleep(1.0)  # now blocked in next() waiting for a 30 s chunk read
        assert child.poll() is None
        t0 = time.monotonic()
        child.send_signal(signal.SIGINT)
        child.wait(timeout=10)
        elapsed = time.monotonic() - t0
        print(f"exited {elapsed:.2f}s after SIGINT, rc={child.returncode}")
        err = child.stderr.read()
        assert "KeyboardInterrupt" in err, err
        assert "got a batch" not in child.stdout.read()
        assert elapsed < 2.0, f"took {elapsed:.2f}s to honour Ctrl-C"
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def _threads() -> int:
    return len(os.listdir("/proc/self/task"))


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _settle(baseline: tuple[int, int], timeout: float = 10.0) -> tuple[int, int]:
    deadline = time.monotonic() + timeout
    while True:
        gc.collect()
        now = (_threads(), _fds())
        if now[0] <= baseline[0] and now[1] <= baseline[1] or time.monotonic() > deadline:
            return now
        time.sleep(0.05)


@pytest.mark.skipif(not LINUX, reason="/proc/self is Linux-only")
def test_unclosed_datasets_release_threads_and_files(fixtures, manifest):
    u = url(fixtures, store(manifest, "v3_zstd")["path"])

    def cycle(abandon: bool) -> None:
        ds = ib.InSituDataset(u, batch_size=4, threads=2)
        it = iter(ds.train)
        next(it)
        if not abandon:
            for _ in it:
                pass
        # Neither `it` nor `ds` is closed: dropping them must release everything.

    cycle(False)  # warm-up: lazily created process-wide state is not a leak
    baseline = _settle((10**6, 10**6), timeout=0)
    baseline = _settle(baseline)
    peak = 0
    for i in range(6):
        ds = ib.InSituDataset(u, batch_size=4, threads=2)
        peak = max(peak, _threads())
        del ds
        cycle(abandon=i % 2 == 0)
    assert peak > baseline[0], "a live dataset runs its own threads"
    now = _settle(baseline)
    assert now[0] <= baseline[0], f"threads: {baseline[0]} before, {now[0]} after"
    assert now[1] <= baseline[1], f"open files: {baseline[1]} before, {now[1]} after"


def test_close_breaks_a_dataset_transform_cycle(fixtures, manifest):
    import weakref

    u = url(fixtures, store(manifest, "v3_zstd")["path"])

    def make():
        holder = {}

        def scale(chunk):
            holder["ds"]  # the closure refers back to the dataset: a cycle through Rust
            return chunk.replace(chunk.data * 2)

        ds = ib.InSituDataset(u, batch_size=4, threads=2, chunk_transforms=[scale], batch_transforms=[lambda b: b])
        holder["ds"] = ds
        next(iter(ds.train))
        ds.close()  # the engine's references are invisible to gc: close() breaks the cycle
        return weakref.ref(ds)

    ref = make()
    deadline = time.monotonic() + 10
    while ref() is not None and time.monotonic() < deadline:
        # Work still in flight from the abandoned pass ends shortly; a reference it drops
        # off the GIL is released the next time the extension takes the GIL.
        ib.valid_anchor_range([0], 1)
        gc.collect()
        time.sleep(0.02)
    assert ref() is None, "after close() the dataset ↔ transform cycle is collectable"


EXIT_MID_PASS = textwrap.dedent(
    """
    import sys, time, insitubatch_rs as ib
    def slow(c):
        time.sleep(0.01)
        return c.replace(c.data * 2)
    ds = ib.InSituDataset(sys.argv[1], batch_size=4, chunk_transforms=[slow], batch_transforms=[lambda b: b])
    it = iter(ds.train)
    next(it)
    print("exiting", flush=True)
    """
)


def test_exit_with_transforms_in_flight_is_clean(fixtures, manifest):
    """Python exits while engine threads still run Python transforms: no crash at shutdown."""
    u = url(fixtures, store(manifest, "v3_zstd")["path"])
    for _ in range(4):
        r = subprocess.run([sys.executable, "-c", EXIT_MID_PASS, u], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0 and "exiting" in r.stdout, (r.returncode, r.stderr[-2000:])
