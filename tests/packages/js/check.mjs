// The Node and browser checks of the installed npm package (scripts/test-packages.sh runs
// this after `npm install <tarball>` and the Vite and webpack builds in APP_DIR, a clean
// folder outside the repo). Serves the fixtures on loopback (tests/servers/http_server.py),
// runs the user's Node script (use-package.mjs) in APP_DIR, then serves each build (Vite's
// APP_DIR/dist, webpack's APP_DIR/dist-webpack) and loads it in headless Chromium (Debian's,
// driven by APP_DIR's playwright-core), as a plain page and as a cross-origin-isolated one
// (where the threaded build could run; a bundle must fall back to one thread, not hang):
// every epoch the page reads over HTTP (web/main.js: on the page, after each of two traps on
// a fresh instance, through openInWorker with no workerUrl, after a trap in a fresh worker, and in a
// worker the page started on `insitubatch/worker`) must equal Node's of the same
// (seed, epoch), which Node checked row by row against the source.
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

const BUILDS = [
  ['Vite', 'dist'],
  ['webpack', 'dist-webpack'],
];

/** What web/main.js must report, from Node's epochs (`{ 0: pass, 1: pass }`). */
function wanted(node) {
  const inWorker = (epoch) => ({ build: 'web', ...node[epoch] });
  return {
    page: node[0],
    pageTrap: [0, 1].map(() => ({ batches: 1, rejected: 'EngineTrapError', fresh: true, after: node[1] })),
    worker: inWorker(0),
    workerTrap: { batches: 1, rejected: 'EngineTrapError', later: 'EngineTrapError', after: inWorker(1) },
    ownWorker: inWorker(1),
  };
}

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
  const epochs = JSON.parse(lines.at(-1));
  const expected = wanted(epochs);

  chrome = await launch();
  for (const [bundler, dir] of BUILDS) {
    for (const coopCoep of [false, true]) {
      const site = await serveDir(join(app, dir), { coopCoep });
      servers.push(site);
      const kind = `the ${bundler} build${coopCoep ? ', cross-origin isolated' : ''}`;
      const logsBefore = chrome.logs.length;
      const page = await chrome.page(`${site.url}/?store=${encodeURIComponent(storeUrl)}`);
      // main.js sets data-state when it is done or has failed: wait on that, not a clock.
      const result = page.locator('#result[data-state]');
      await result.waitFor({ state: 'attached', timeout: 180_000 }); // the bound only turns a hang into an error
      const state = await result.getAttribute('data-state');
      const text = await result.textContent();
      const logs = chrome.logs.slice(logsBefore).join('\n');
      assert.equal(state, 'ok', `${kind}: the page failed: ${text}\n${logs}`);
      assert.equal(await page.evaluate(() => globalThis.crossOriginIsolated), coopCoep, `${kind}: isolation as served`);
      assert.deepEqual(JSON.parse(text), expected, `${kind}: the page differs from Node\n${logs}`);
      await page.close();
    }
    console.log(
      `chromium: the ${bundler} build read epochs 0 and 1 over HTTP on the page (also after two traps, each on a fresh instance) and through openInWorker ` +
        `(no workerUrl; after a trap in a fresh worker; in a worker on insitubatch/worker), plain and cross-origin isolated, each equal to Node's ` +
        `(sha256 ${epochs[0].digest.slice(0, 12)}…, ${epochs[1].digest.slice(0, 12)}…)`,
    );
  }
} finally {
  await chrome?.browser.close();
  for (const s of servers) s.stop();
}
