// The dashboard's dev and preview servers. Both send COOP/COEP, so the page is
// cross-origin isolated (SharedArrayBuffer, the threaded wasm build where it exists), and
// both serve a Zarr store same-origin under /store/ (IB_STORE_DIR, a .zarr directory; the
// demo store by default, see scripts/www.sh): no CORS setup, and COEP is satisfied.
import { defineConfig } from 'vite';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import sirv from 'sirv';

const ISOLATION = {
  'Cross-Origin-Opener-Policy': 'same-origin',
  'Cross-Origin-Embedder-Policy': 'require-corp',
};

/**
 * Answer `Range: bytes=0-0` (one byte: the probe's time to first byte) with that byte, as RFC
 * 9110 says; sirv reads an end of 0 as absent and sends the whole file. True when answered
 * here; anything else (another range, a missing file, a path outside `dir`) is left to sirv.
 */
function firstByte(dir, req, res) {
  if (req.headers.range?.trim() !== 'bytes=0-0') return false;
  const root = path.resolve(dir);
  const file = path.resolve(root, `.${decodeURIComponent(new URL(req.url, 'http://store').pathname)}`);
  if (!file.startsWith(root + path.sep)) return false;
  let size;
  const byte = Buffer.alloc(1);
  try {
    size = fs.statSync(file).size;
    if (size === 0) return false;
    const fd = fs.openSync(file, 'r');
    try {
      fs.readSync(fd, byte, 0, 1, 0);
    } finally {
      fs.closeSync(fd);
    }
  } catch {
    return false;
  }
  res.writeHead(206, { 'Content-Range': `bytes 0-0/${size}`, 'Content-Length': '1', 'Accept-Ranges': 'bytes' });
  res.end(byte);
  return true;
}

/**
 * Serve IB_STORE_DIR at /store/ with Range support (sirv); a missing key is a real 404.
 * With IB_COUNT_STORE_REQUESTS set (the tests of the previews' cache), the store's requests
 * are counted per path, and `GET /__store-requests` answers the counts as JSON
 * (`{ "/t2m/c/0/0/0": 1 }`; `?reset` starts them over).
 */
function storePlugin() {
  const dir = process.env.IB_STORE_DIR;
  const counts = process.env.IB_COUNT_STORE_REQUESTS ? new Map() : null;
  const mount = (server) => {
    if (!dir) return;
    // dotfiles: Zarr v2 keeps its metadata in .zarray/.zattrs/.zmetadata.
    const serve = sirv(dir, { dev: true, dotfiles: true });
    if (counts) {
      server.middlewares.use('/__store-requests', (req, res) => {
        const body = JSON.stringify(Object.fromEntries(counts));
        if (new URL(req.url, 'http://x').search === '?reset') counts.clear();
        res.setHeader('Content-Type', 'application/json');
        res.setHeader('Cache-Control', 'no-store');
        res.end(body);
      });
    }
    server.middlewares.use('/store', (req, res) => {
      for (const [k, v] of Object.entries(ISOLATION)) res.setHeader(k, v);
      if (counts) {
        const key = decodeURIComponent(new URL(req.url, 'http://store').pathname);
        counts.set(key, (counts.get(key) ?? 0) + 1);
      }
      if (firstByte(dir, req, res)) return;
      // Without this, the dev server's SPA fallback would answer a missing chunk with
      // index.html and a 200, which the engine would try to decode.
      serve(req, res, () => {
        res.statusCode = 404;
        res.end('no such key');
      });
    });
  };
  return { name: 'insitubatch-store', configureServer: mount, configurePreviewServer: mount };
}

/**
 * The js package's worker (openInWorker) loads its wasm build at run time, threaded or not,
 * so it is served as plain modules: js/src and js/pkg at /insitubatch-js/ (dev and preview),
 * and copied into the build for static hosting.
 */
function packagePlugin() {
  const js = fileURLToPath(new URL('../js', import.meta.url));
  let outDir;
  const mount = (server) => {
    const serve = sirv(js, { dev: true });
    server.middlewares.use('/insitubatch-js', (req, res, next) => {
      for (const [k, v] of Object.entries(ISOLATION)) res.setHeader(k, v);
      serve(req, res, next);
    });
  };
  return {
    name: 'insitubatch-js',
    configResolved: (c) => {
      outDir = path.resolve(c.root, c.build.outDir);
    },
    configureServer: mount,
    configurePreviewServer: mount,
    closeBundle() {
      for (const d of ['src', 'pkg']) {
        fs.cpSync(path.join(js, d), path.join(outDir, 'insitubatch-js', d), { recursive: true });
      }
    },
  };
}

export default defineConfig({
  // No SPA fallback: a missing path is a 404, so a wrong store URL says so.
  appType: 'mpa',
  server: { headers: ISOLATION, fs: { allow: ['..'] } },
  preview: { headers: ISOLATION },
  worker: { format: 'es' },
  build: { target: 'es2022', chunkSizeWarningLimit: 4096 },
  plugins: [storePlugin(), packagePlugin()],
});
