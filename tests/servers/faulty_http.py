#!/usr/bin/env python3
"""A loopback HTTP server that misbehaves on request, for the fault-injection tests.

It serves the same files as http_server.py, under a path that says how to misbehave:

    /<session>/<fault>-<n>[-chunks]/<key...>

For each full path, the first `n` GETs misbehave as `fault` says and later ones are served
correctly (`n` = `all`: every GET misbehaves); with `-chunks`, metadata documents are always
served correctly, so a store opens and its chunk reads meet the fault. `session` is any word the test picks, so two
tests never share a counter. The faults:

    503        503 Service Unavailable (transient)
    429        429 Too Many Requests with `Retry-After: 0` (transient)
    reset      the connection closed with no response (transient)
    cut        the headers and half the body, then the connection closed (transient)
    stall      no response until the client gives up and closes (a read timeout)
    full200    200 with the whole object when a range was asked for
    badrange   206 with a Content-Range that is not the range asked for, and those bytes
    403        403 Forbidden (permanent)

Counting is per path and exact, so a test knows how many failures each read meets and
needs no clock: a stall ends when the client closes the connection, never after a sleep.

    faulty_http.py --root DIR [--port 0] [--port-file F]
"""
import io
import os
import re
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import http_server  # noqa: E402

FAULT_RE = re.compile(
    r"^/([A-Za-z0-9_.-]+)/(503|429|reset|cut|stall|full200|badrange|403)-(\d+|all)(-chunks)?(/.*)$"
)
METADATA = ("zarr.json", ".zarray", ".zattrs", ".zgroup", ".zmetadata")


class FaultyHandler(http_server.Handler):
    counts = {}
    lock = threading.Lock()

    def _fault(self):
        """The fault to play for this request, or None; rewrites self.path to the key."""
        m = FAULT_RE.match(self.path.split("?", 1)[0])
        if not m:
            return None
        _, fault, n, chunks_only, rest = m.groups()
        self.path = rest
        if chunks_only and rest.rsplit("/", 1)[-1] in METADATA:
            return None
        with self.lock:
            seen = self.counts.get(m.group(0), 0)
            self.counts[m.group(0)] = seen + 1
        return fault if (n == "all" or seen < int(n)) else None

    def do_GET(self):
        fault = self._fault()
        if fault is None:
            return self._serve(head=False)
        getattr(self, "_play_" + fault)()

    def do_HEAD(self):
        self._fault()
        self._serve(head=True)

    def _play_503(self):
        self._error(503, "injected 503")

    def _play_403(self):
        self._error(403, "injected 403")

    def _play_429(self):
        self._error(429, "injected 429", {"Retry-After": "0"})

    def _play_reset(self):
        self.close_connection = True
        self.connection.shutdown(2)

    def _play_cut(self):
        # The right headers (status, length, range) and half the body, then a closed socket.
        real, buf = self.wfile, io.BytesIO()
        self.wfile = buf
        try:
            self._serve(head=False)
        finally:
            self.wfile = real
        head, _, body = buf.getvalue().partition(b"\r\n\r\n")
        self.wfile.write(head + b"\r\n\r\n" + body[: len(body) // 2])
        self.wfile.flush()
        self.close_connection = True
        self.connection.shutdown(2)

    def _play_stall(self):
        # Read until the client closes: a stall that lasts exactly as long as its patience.
        self.close_connection = True
        try:
            while self.connection.recv(1 << 16):
                pass
        except OSError:
            pass

    def _play_full200(self):
        del self.headers["Range"]
        self._serve(head=False)

    def _play_badrange(self):
        path = self._resolve()
        if path is None:
            return self._error(404, "not found")
        body = open(path, "rb").read()
        start = 1 if len(body) > 1 else 0
        chunk = body[start:]
        self.send_response(206)
        self._common_headers()
        self.send_header("Content-Length", str(len(chunk)))
        self.send_header("Content-Range", "bytes %d-%d/%d" % (start, len(body) - 1, len(body)))
        self.end_headers()
        self.wfile.write(chunk)


if __name__ == "__main__":
    http_server.main(handler=FaultyHandler, description=__doc__)
