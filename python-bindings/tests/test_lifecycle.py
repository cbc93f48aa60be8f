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
from functools import partial
from pathlib import Path

import pytest

import insitubatch_rs as ib
from conftest import HANG_GUARD_S, store, url, wait_until

LINUX = sys.platform.startswith("linux")


class _SlowHandler(http.server.SimpleHTTPRequestHandler):
    """Serves metadata at once and holds every chunk request until the test ends."""

    asked: threading.Event
    release: threading.Event

    def do_GET(self) -> None:  # noqa: N802
        if not self.path.rstrip("/").endswith(("zarr.json", ".zmetadata", ".zarray", ".zgroup", ".zattrs")):
            self.asked.set()
            self.release.wait()
            return  # the test is over: drop the request
        super().do_GET()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def slow_server(fixtures):
    """(url, asked): `asked` is set once a chunk request arrives; none is ever answered."""
    asked, release = threading.Event(), threading.Event()
    handler = type("H", (_SlowHandler,), {"asked": asked, "release": release})
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), partial(handler, directory=str(fixtures)))
    srv.daemon_threads = True
    srv.handle_error = lambda *a: None  # a client that went away is expected here
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}", asked
    release.set()
    srv.shutdown()
    srv.server_close()


def _main_thread_state(pid: int) -> str:
    # /proc/PID/task/PID/stat: "tid (comm) STATE ..."; comm may contain spaces and parentheses.
    with open(f"/proc/{pid}/task/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


# The child first installs the handler an interactive Python starts with. Python installs it
# only when SIGINT is at its default on start-up, and a runner started as a background job of a
# non-interactive shell passes SIGINT down ignored (a shell cannot undo an ignore it inherited):
# the child would then never see Ctrl-C, whatever the engine does. A stress run launched so failed
# here on every Python.
CHILD = textwrap.dedent(
    """
    import signal
    signal.signal(signal.SIGINT, signal.default_int_handler)
    import sys, insitubatch_rs as ib
    ds = ib.InSituDataset(sys.argv[1], batch_size=4, max_inflight=2)
    it = iter(ds.train)
    print("ready", flush=True)
    for b in it:
        print("got a batch", flush=True)
    """
)


@pytest.mark.skipif(not LINUX, reason="sees the child blocked through /proc, which is Linux-only")
def test_ctrl_c_interrupts_a_blocked_iteration(slow_server, manifest):
    server, asked = slow_server
    s = store(manifest, "v3_zstd")
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, f"{server}/{s['path']}"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout.readline().strip() == "ready", child.stderr.read()
        assert asked.wait(HANG_GUARD_S), "the child never asked for a chunk"
        # After "ready" the child's main thread only calls next(), and the one place it can
        # sleep is there, with the GIL released, waiting for a batch that cannot come (no
        # chunk request is ever answered). Sleeping ('S') therefore means blocked in next().
        wait_until(lambda: child.poll() is not None or _main_thread_state(child.pid) == "S", "next() never blocked")
        assert child.poll() is None, child.stderr.read()
        child.send_signal(signal.SIGINT)
        try:
            child.wait(timeout=HANG_GUARD_S)
        except subprocess.TimeoutExpired:
            pytest.fail("Ctrl-C did not end a next() blocked on a read that never completes")
        err = child.stderr.read()
        assert "KeyboardInterrupt" in err, err
        assert "got a batch" not in child.stdout.read()
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def _threads() -> int:
    return len(os.listdir("/proc/self/task"))


def _new_engine_threads(before: set[str]) -> list[str]:
    """Threads started since `before` (task ids) that an engine named (`insitubatch-decode-N`,
    `insitubatch-io`). By id, not by count: threads of engines dropped by earlier tests may
    still be winding down meanwhile (seen on free-threaded 3.14t)."""
    names = []
    for task in set(os.listdir("/proc/self/task")) - before:
        try:
            name = Path(f"/proc/self/task/{task}/comm").read_text().strip()
        except OSError:  # the thread ended meanwhile
            continue
        if name.startswith("insitubatch-"):
            names.append(name)
    return names


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _counts() -> tuple[int, int]:
    gc.collect()
    return _threads(), _fds()


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
    baseline = _counts()
    tasks = set(os.listdir("/proc/self/task"))
    started = []
    for i in range(6):
        ds = ib.InSituDataset(u, batch_size=4, threads=2)
        started += _new_engine_threads(tasks)
        del ds
        cycle(abandon=i % 2 == 0)
    assert started, "a live dataset runs its own threads"
    wait_until(
        lambda: all(now <= was for now, was in zip(_counts(), baseline)),
        f"threads and open files did not fall back to {baseline} (now {_counts()})",
    )


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

    def collected() -> bool:
        # Work still in flight from the abandoned pass ends on the engine's threads; a
        # reference it drops off the GIL is released the next time the extension takes it.
        ib.valid_anchor_range([0], 1)
        gc.collect()
        return ref() is None

    wait_until(collected, "after close() the dataset <-> transform cycle was not collected")


EXIT_MID_PASS = textwrap.dedent(
    """
    import atexit, sys, threading, insitubatch_rs as ib
    in_call, exiting = threading.Event(), threading.Event()
    def held(c):
        in_call.set()
        exiting.wait()  # every call stays under way until the interpreter starts to exit
        return c.replace(c.data * 2)
    # atexit runs last-registered first: this releases the held calls just before the
    # insitubatch_rs handler registered at import, so they are still running when it starts.
    atexit.register(exiting.set)
    ds = ib.InSituDataset(sys.argv[1], batch_size=4, chunk_transforms=[held], batch_transforms=[lambda b: b])
    it = iter(ds.train)
    in_call.wait()  # a Python transform is running on an engine thread
    print("exiting", flush=True)
    """
)


def test_exit_with_transforms_in_flight_is_clean(fixtures, manifest):
    """Python exits while engine threads still run Python transforms: no crash at shutdown."""
    u = url(fixtures, store(manifest, "v3_zstd")["path"])
    for _ in range(4):
        r = subprocess.run(
            [sys.executable, "-c", EXIT_MID_PASS, u], capture_output=True, text=True, timeout=HANG_GUARD_S
        )
        assert r.returncode == 0 and "exiting" in r.stdout, (r.returncode, r.stderr[-2000:])
