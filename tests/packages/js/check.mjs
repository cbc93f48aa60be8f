// The Node and browser checks of the installed npm package (scripts/test-packages.sh runs
// this after `npm install <tarball>` and `vite build` in APP_DIR, a clean folder outside the
// repo). Serves the fixtures on loopback (tests/servers/http_server.py), runs the user's
// Node script (use-package.mjs) in APP_DIR, then serves the Vite build (APP_DIR/dist) and
// loads it in headless Chromium (Debian's, driven by APP_DIR's playwright-core): the page's
// train epoch over HTTP must equal the one Node checked row by row against the source.
//
//   IB_PY=python3 node check.mjs APP_DIR FIXTURES_DIR
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { join, resolve } from 'node:path';

const [app, fixtures] = process.argv.slice(2).map((p) => resolve(p));
assert.ok(app && fixtures, 'usage: node check.mjs APP_DIR FIXTURES_DIR');
// The app's own playwright-core (js/test-support/browser.js reads this when it loads).
process.env.IB_PLAYWRIGHT_CORE = join(app, 'node_modules/playwright-core');
const { serveDir, launch } = await import('../../../js/test-support/browser.js');

const servers = [];
let chrome;
try {
  const fixtureServer = await serveDir(fixtures);
  servers.push(fixtureServer);
  const storeUrl = `${fixtureServer.url}/v3_zstd`;

  const node = spawnSync(process.execPath, ['use-package.mjs', fixtures, storeUrl], { cwd: app, encoding: 'utf8' });
  assert.equal(node.status, 0, `the Node user script failed:\n${node.stdout}${node.stderr}`);
  const lines = node.stdout.trim().split('\n');
  for (const l of lines.slice(0, -1)) console.log(l);
  const expected = JSON.parse(lines.at(-1));

  const site = await serveDir(join(app, 'dist'));
  servers.push(site);
  chrome = await launch();
  const page = await chrome.page(`${site.url}/?store=${encodeURIComponent(storeUrl)}`);
  // main.js sets data-state when the epoch is done or has failed: wait on that, not a clock.
  const result = page.locator('#result[data-state]');
  await result.waitFor({ state: 'attached', timeout: 120_000 }); // the bound only turns a hang into an error
  const state = await result.getAttribute('data-state');
  const text = await result.textContent();
  assert.equal(state, 'ok', `the page failed: ${text}\n${chrome.logs.join('\n')}`);
  assert.deepEqual(JSON.parse(text), expected, 'the page (Vite build, web entry) differs from Node');
  console.log(`chromium: the Vite build read ${expected.batches} train batches over HTTP, equal to Node's (sha256 ${expected.digest.slice(0, 12)}…)`);
} finally {
  await chrome?.browser.close();
  for (const s of servers) s.stop();
}
