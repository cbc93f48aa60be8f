#!/usr/bin/env python3
"""Loopback static file server for insitubatch-rs end-to-end tests (stdlib only).

Supports GET/HEAD with single byte ranges (`bytes=a-b`, `bytes=a-`, `bytes=-n`),
206 + Content-Range, 416 when unsatisfiable, CORS headers on every response
(including errors), OPTIONS preflight, optional COOP/COEP/CORP headers, ETag and
Last-Modified.

    http_server.py --root DIR [--port 0] [--coop-coep] [--port-file F] [--count-requests]

`--count-requests` counts the GET and HEAD requests per path (and sends
`Cache-Control: no-store`, so none is answered from a browser's cache); `GET /__requests`
answers them as JSON (`{"GET /store/t2m/c/0/0/0": 2, ...}`, requests for `/__requests` itself not
counted), and `GET /__requests?reset` answers them and starts the counts over (the
browser disk tier's tests count what a reload reads from the network).

`--port-file -` prints the port as the first line of stdout instead (then points stdout
at stderr), so a starter can block on that line rather than poll for a file.
"""
import argparse
import collections
import email.utils
import http.server
import json
import mimetypes
import os
import posixpath
import re
import sys
import threading
import urllib.parse

EXTRA_TYPES = {
    ".js": "text/javascript",
    ".mjs": "text/javascript",
    ".wasm": "application/wasm",
    ".html": "text/html; charset=utf-8",
    ".json": "application/json",
    ".css": "text/css",
}

RANGE_RE = re.compile(r"^bytes=(\d*)-(\d*)$")


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "ib-test-http/1.0"
    root = "."
    coop_coep = False
    # `--count-requests`: "VERB /path" -> requests so far (None: not counting).
    counts = None
    counts_lock = threading.Lock()

    def log_message(self, fmt, *args):  # quiet
        pass

    # -- helpers ---------------------------------------------------------
    def _common_headers(self):
        self.send_header("Access-Control-Allow-Origin", "*")
        self.send_header("Access-Control-Expose-Headers",
                         "Content-Length, Content-Range, ETag, Accept-Ranges, Last-Modified")
        self.send_header("Access-Control-Allow-Headers", "Range")
        self.send_header("Access-Control-Allow-Methods", "GET, HEAD, OPTIONS")
        if self.counts is not None:
            # Counted requests must reach the server: no answer is reused from a cache.
            self.send_header("Cache-Control", "no-store")
        if self.coop_coep:
            self.send_header("Cross-Origin-Opener-Policy", "same-origin")
            self.send_header("Cross-Origin-Embedder-Policy", "require-corp")
            self.send_header("Cross-Origin-Resource-Policy", "cross-origin")

    def _error(self, code, msg, extra=None):
        body = (msg + "\n").encode()
        self.send_response(code)
        self._common_headers()
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _resolve(self):
        path = urllib.parse.urlsplit(self.path).path
        path = urllib.parse.unquote(path)
        path = posixpath.normpath(path)
        parts = [p for p in path.split("/") if p and p not in (".", "..")]
        full = os.path.join(self.root, *parts)
        if os.path.isdir(full):
            idx = os.path.join(full, "index.html")
            return idx if os.path.isfile(idx) else None
        return full if os.path.isfile(full) else None

    @staticmethod
    def _ctype(path):
        ext = os.path.splitext(path)[1].lower()
        if ext in EXTRA_TYPES:
            return EXTRA_TYPES[ext]
        return mimetypes.guess_type(path)[0] or "application/octet-stream"

    # -- verbs -----------------------------------------------------------
    def do_OPTIONS(self):
        self.send_response(204)
        self._common_headers()
        self.send_header("Access-Control-Max-Age", "600")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_HEAD(self):
        if not self._counted():
            self._serve(head=True)

    def do_GET(self):
        if not self._counted():
            self._serve(head=False)

    def _counted(self):
        """Count this request (`--count-requests`); True when it was `/__requests`, answered here."""
        if self.counts is None:
            return False
        split = urllib.parse.urlsplit(self.path)
        with self.counts_lock:
            if split.path != "/__requests":
                self.counts[self.command + " " + urllib.parse.unquote(split.path)] += 1
                return False
            body = json.dumps(dict(self.counts)).encode()
            if split.query == "reset":
                self.counts.clear()
        self.send_response(200)
        self._common_headers()
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)
        return True

    def _serve(self, head):
        path = self._resolve()
        if path is None:
            return self._error(404, "not found")
        try:
            st = os.stat(path)
        except OSError:
            return self._error(404, "not found")
        size = st.st_size
        etag = '"%x-%x"' % (int(st.st_mtime_ns), size)
        start, end = 0, size - 1
        status = 200
        rng = self.headers.get("Range")
        if rng:
            m = RANGE_RE.match(rng.strip())
            if not m or (m.group(1) == "" and m.group(2) == ""):
                # Unparseable / multi-range: serve whole file (RFC allows ignoring).
                m = None
            if m:
                a, b = m.group(1), m.group(2)
                if a == "":  # suffix
                    n = int(b)
                    if n == 0:
                        return self._error(416, "range not satisfiable",
                                           {"Content-Range": "bytes */%d" % size})
                    start, end = max(0, size - n), size - 1
                else:
                    start = int(a)
                    end = int(b) if b else size - 1
                    if start >= size or end < start:
                        return self._error(416, "range not satisfiable",
                                           {"Content-Range": "bytes */%d" % size})
                    end = min(end, size - 1)
                status = 206
        length = end - start + 1 if size else 0
        self.send_response(status)
        self._common_headers()
        self.send_header("Content-Type", self._ctype(path))
        self.send_header("Content-Length", str(length))
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("ETag", etag)
        self.send_header("Last-Modified", email.utils.formatdate(st.st_mtime, usegmt=True))
        if status == 206:
            self.send_header("Content-Range", "bytes %d-%d/%d" % (start, end, size))
        self.end_headers()
        if head or length == 0:
            return
        try:
            with open(path, "rb") as f:
                f.seek(start)
                left = length
                while left > 0:
                    buf = f.read(min(left, 1 << 20))
                    if not buf:
                        break
                    self.wfile.write(buf)
                    left -= len(buf)
        except (BrokenPipeError, ConnectionResetError):
            pass


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def announce(text, port_file):
    """Tell the starter where this server listens: written atomically to `port_file`, or
    for `-` as one line on stdout, after which stdout goes to stderr (the pipe closes)."""
    if port_file == "-":
        print(text, flush=True)
        os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    elif port_file:
        tmp = port_file + ".tmp"
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, port_file)


def main(argv=None, handler=Handler, description=__doc__):
    """Serve `--root` with `handler` (faulty_http.py passes its misbehaving one)."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--root", required=True)
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--coop-coep", action="store_true")
    ap.add_argument("--port-file")
    ap.add_argument("--count-requests", action="store_true")
    args = ap.parse_args(argv)

    handler.root = os.path.abspath(args.root)
    handler.coop_coep = args.coop_coep
    if args.count_requests:
        handler.counts = collections.Counter()
    srv = Server((args.host, args.port), handler)
    port = srv.server_address[1]
    announce(str(port), args.port_file)
    print("serving %s on http://%s:%d" % (handler.root, args.host, port), file=sys.stderr)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        srv.server_close()


if __name__ == "__main__":
    import signal
    signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
    main()
