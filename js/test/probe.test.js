// The probe's failures from JS (`Dataset.probe`, `Explorer.probe`): errors reject with the
// engine's message, a bad chunk count is refused before any read. What it measures, counted
// by the store itself, is in cloud.test.js.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { createServer } from 'node:http';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { open, openExplorer, nodeFileStorage } from '../src/index.js';
import { FIXTURES, UNDER_CI } from '../test-support/helpers.js';

const skip = FIXTURES ? false : 'INSITUBATCH_FIXTURES unset: run scripts/test-wasm.sh';
if (skip && UNDER_CI) throw new Error(`probe.test.js: ${skip}; CI is set, where this is a failure, not a skip`);

/** The fixture store `name` as a storage object whose chunk reads fail, saying which key. */
async function failingChunks(name) {
  const inner = await nodeFileStorage(pathToFileURL(join(FIXTURES, name)));
  return {
    location: inner.location,
    list: (prefix) => inner.list(prefix),
    get: (key, range) => (key.startsWith('t2m/c/') ? Promise.reject(new Error(`access denied: ${key}`)) : inner.get(key, range)),
  };
}

test('a bad chunk count is refused, and an unknown variable named', { skip }, async () => {
  const url = pathToFileURL(join(FIXTURES, 'v3_zstd')).href;
  const ds = await open(url, { variables: ['t2m'] });
  await assert.rejects(ds.probe(0), /chunks must be at least 1/);
  await assert.rejects(ds.probe(1.5), /chunks must be a non-negative integer, got 1.5/);
  ds.close();
  const ex = await openExplorer(await nodeFileStorage(url));
  await assert.rejects(ex.probe({ variables: ['t2m'] }, { chunks: 0 }), /chunks must be at least 1/);
  await assert.rejects(ex.probe({ variables: ['nope'] }), /"nope"/);
  ex.close();
});

test('a probe whose reads fail rejects with the engine message, the key last', { skip }, async () => {
  const ds = await open(await failingChunks('v3_zstd'), { variables: ['t2m'], readPolicy: { retries: 0 } });
  await assert.rejects(ds.probe(2), (e) => (/access denied: t2m\/c\/[0-9/]+/.test(e.message) && /t2m\/c\/[0-9/]+$/.test(e.message)) || assert.fail(e.message));
  ds.close();
  const ex = await openExplorer(await failingChunks('v3_zstd'));
  await assert.rejects(ex.probe({ variables: ['t2m'], readPolicy: { retries: 0 } }), /access denied: t2m\/c\//);
  ex.close();
});

/**
 * The fixtures over loopback HTTP as sirv serves them: ranges honoured, except that
 * `bytes=0-0` (an end of 0 read as absent) gets all of the object, still as a 206.
 */
async function sirvLike() {
  const server = createServer(async (req, res) => {
    try {
      const body = await readFile(join(FIXTURES, decodeURIComponent(new URL(req.url, 'http://x').pathname)));
      const m = /^bytes=(\d+)-(\d*)$/.exec(req.headers.range ?? '');
      if (!m) return res.writeHead(200).end(body);
      const start = Number(m[1]);
      const end = Number(m[2]) || body.length - 1;
      res.writeHead(206, { 'Content-Range': `bytes ${start}-${end}/${body.length}` }).end(body.subarray(start, end + 1));
    } catch {
      res.writeHead(404).end();
    }
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  return { url: `http://127.0.0.1:${server.address().port}`, close: () => server.close() };
}

test('a server that answers one byte with the whole object is named as such, not as a short object', { skip }, async () => {
  const server = await sirvLike();
  try {
    const ds = await open(`${server.url}/v3_zstd`, { variables: ['t2m'], readPolicy: { retries: 0 } });
    await assert.rejects(ds.probe(1), (e) => /answered the range bytes=0-0 with (at least )?\d+ bytes, more than the 1 asked for: it does not serve byte ranges correctly/.test(e.message) || assert.fail(e.message));
    ds.close();
  } finally {
    server.close();
  }
});
