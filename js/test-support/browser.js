// Headless Chromium for the Node tests: playwright-core (pinned, installed by
// scripts/test-wasm.sh into $INSITUBATCH_CACHE/npm, path in $IB_PLAYWRIGHT_CORE) drives
// Debian's /usr/bin/chromium; pages are served from js/ by tests/servers/http_server.py
// (optionally with COOP/COEP, i.e. cross-origin isolated), on loopback.
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';

const JS_ROOT = fileURLToPath(new URL('..', import.meta.url));
const REPO = join(JS_ROOT, '..');
export const PLAYWRIGHT = process.env.IB_PLAYWRIGHT_CORE;
export const CHROMIUM = process.env.IB_CHROMIUM ?? '/usr/bin/chromium';
export const browserSkip = !PLAYWRIGHT
  ? 'IB_PLAYWRIGHT_CORE unset: run scripts/test-wasm.sh (it installs playwright-core)'
  : !existsSync(CHROMIUM) ? `no Chromium at ${CHROMIUM}` : false;

/** Serve js/ on loopback; `coopCoep` adds the cross-origin-isolation headers to every response. */
export function serveJs({ coopCoep = false } = {}) {
  return serveDir(JS_ROOT, { coopCoep });
}

/**
 * Serve `root` on loopback with tests/servers/http_server.py (ranges, CORS on every response).
 * `countRequests`: the server counts its requests per path, and `requests({ reset })` returns
 * them (`{ "GET /path": n }`), starting the counts over when `reset`.
 */
export async function serveDir(root, { coopCoep = false, countRequests = false } = {}) {
  // `--port-file -`: the server prints its port as the first stdout line once it listens,
  // so this waits on that line (or the server's exit), never on a clock.
  const args = [join(REPO, 'tests/servers/http_server.py'), '--root', root, '--port', '0', '--port-file', '-'];
  if (coopCoep) args.push('--coop-coep');
  if (countRequests) args.push('--count-requests');
  const proc = spawn(process.env.IB_PY ?? 'python3', args, { stdio: ['ignore', 'pipe', 'pipe'] });
  let stderr = '';
  proc.stderr.on('data', (d) => (stderr += d));
  const port = await new Promise((resolve, reject) => {
    let out = '';
    proc.stdout.on('data', (d) => {
      out += d;
      if (out.includes('\n')) resolve(out.split('\n')[0].trim());
    });
    proc.on('error', reject);
    proc.on('exit', (code, signal) => reject(new Error(`the js/ server exited (${code ?? signal}) before it listened: ${stderr}`)));
  });
  const url = `http://127.0.0.1:${port}`;
  return {
    url,
    async requests({ reset = false } = {}) {
      const r = await fetch(`${url}/__requests${reset ? '?reset' : ''}`);
      if (!r.ok) throw new Error(`${url}/__requests: ${r.status} (start the server with countRequests)`);
      return r.json();
    },
    stop() {
      proc.kill();
    },
  };
}

/** A headless Chromium page at `url`, its console echoed on failure. */
export async function launch() {
  const { chromium } = createRequire(join(PLAYWRIGHT, 'package.json'))('playwright-core');
  const browser = await chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: ['--no-sandbox', '--disable-dev-shm-usage', '--disable-background-networking'],
  });
  const logs = [];
  async function page(url) {
    const p = await browser.newPage();
    p.on('console', (m) => logs.push(`[${m.type()}] ${m.text()}`));
    p.on('pageerror', (e) => logs.push(`[pageerror] ${e.message}`));
    await p.goto(url);
    return p;
  }
  return { browser, page, logs };
}
