"""Measuring one benchmark run and the machine's memory state (bench/run.py's helpers).

- ``run_measured(cmd)``: run a command in a fresh subprocess; its wall time, its user and
  system CPU seconds (``RUSAGE_CHILDREN`` deltas: runs are sequential, so the delta is this
  child and the descendants it waited for), and the peak of its process tree's summed VmRSS
  polled from /proc every 50 ms.
- ``meminfo()``: MemTotal/MemFree/MemAvailable/Cached from /proc/meminfo, in bytes.
- ``fill_page_cache(dirs, target)``: read files under the ballast until Cached ≥ target, to
  benchmark with a page cache that holds most of RAM (a training machine's normal state).
- ``warm_files(path)``: read every file under a store once, so its cold epochs read from
  the page cache and not from disk.
"""
import json
import os
import resource
import subprocess
import threading
import time

READ_BLOCK = 1 << 20
MEM_KEYS = {"MemTotal": "total", "MemFree": "free", "MemAvailable": "available", "Cached": "cached"}


# ------------------------------------------------------------ process-tree RSS
def _children(pid):
    out = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{tid}/children") as f:
                    out += [int(x) for x in f.read().split()]
            except OSError:
                pass
    except OSError:
        pass
    return out


def _rss(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def tree_rss(root):
    seen, stack, total = set(), [root], 0
    while stack:
        p = stack.pop()
        if p in seen:
            continue
        seen.add(p)
        total += _rss(p)
        stack += _children(p)
    return total


def run_measured(cmd, timeout, env=None):
    """Run cmd, polling its process tree RSS every 50 ms. Returns a dict with rc, error,
    stdout, stderr, tree_peak_rss_bytes, wall_s, user_s and sys_s."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    try:
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                             text=True)
    except OSError as e:
        return {"rc": None, "error": f"cannot start: {e}", "stdout": "", "stderr": "",
                "tree_peak_rss_bytes": 0, "wall_s": 0.0, "user_s": None, "sys_s": None}
    peak = [0]
    done = threading.Event()

    def poll():
        while not done.is_set():
            peak[0] = max(peak[0], tree_rss(p.pid))
            done.wait(0.05)

    th = threading.Thread(target=poll, daemon=True)
    th.start()
    try:
        out, err = p.communicate(timeout=timeout)
        rc, error = p.returncode, None
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        rc, error = None, f"timeout after {timeout}s"
    wall = time.perf_counter() - t0
    done.set()
    th.join()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if rc not in (0, None) and error is None:
        tail = (err or "").strip().splitlines()[-1:]
        error = f"exit {rc}: {tail[0]}" if tail else f"exit {rc}"
    return {"rc": rc, "error": error, "stdout": out, "stderr": err,
            "tree_peak_rss_bytes": peak[0], "wall_s": wall,
            "user_s": after.ru_utime - before.ru_utime, "sys_s": after.ru_stime - before.ru_stime}


def last_json(text):
    for line in reversed((text or "").strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                continue
    return None


# ------------------------------------------------------------ memory state
def meminfo():
    """{total, free, available, cached} in bytes, from /proc/meminfo."""
    out = {}
    with open("/proc/meminfo") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in MEM_KEYS:
                out[MEM_KEYS[key]] = int(rest.split()[0]) * 1024
    return out


def _files_under(path):
    if os.path.isfile(path):
        yield path
        return
    for root, dirs, files in os.walk(path):
        dirs.sort()
        for name in sorted(files):
            full = os.path.join(root, name)
            if os.path.isfile(full) and not os.path.islink(full):
                yield full


def _read_file(path):
    n = 0
    try:
        with open(path, "rb", buffering=0) as f:
            while True:
                b = f.read(READ_BLOCK)
                if not b:
                    break
                n += len(b)
    except OSError:
        pass
    return n


def warm_files(path):
    """Read every file under `path` once (into the page cache); returns the bytes read."""
    return sum(_read_file(f) for f in _files_under(path))


def fill_page_cache(dirs, target_bytes, check_every=256 << 20):
    """Read files under `dirs` until the kernel's Cached is at least `target_bytes`.
    Returns (cached_bytes_after, bytes_read). Stops early when the ballast runs out (the
    caller reports the shortfall)."""
    read = since = 0
    if meminfo()["cached"] >= target_bytes:
        return meminfo()["cached"], 0
    for d in dirs:
        for f in _files_under(d):
            n = _read_file(f)
            read += n
            since += n
            if since >= check_every:
                since = 0
                if meminfo()["cached"] >= target_bytes:
                    return meminfo()["cached"], read
    return meminfo()["cached"], read
