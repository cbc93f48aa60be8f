// The browser entry (src/web.js over the `--target web` build), exercised in Node by
// handing it the .wasm bytes; the page-level test is wasm/tests/browser.rs in Chromium.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { initialize, open } from '../src/web.js';
import { HTTP, skip, collect } from '../test-support/helpers.js';

test('browser entry: initialize(bytes), open, one epoch', { skip }, async () => {
  await initialize(readFileSync(new URL('../pkg/web/insitubatch_wasm_bg.wasm', import.meta.url)));
  const ds = await open(`${HTTP}/v2_blosc`, { variables: ['t2m'], batchSize: 10, seed: 1 });
  const batches = await collect(ds.train());
  assert.ok(batches.length > 0);
  assert.deepEqual(batches[0].arrays.t2m.shape, [10, 6, 6]);
  assert.equal(ds.lastPass().batches, batches.length);
});

test('browser entry: s3:// is refused with a message (the browser packages leave S3 out)', { skip }, async () => {
  await initialize(readFileSync(new URL('../pkg/web/insitubatch_wasm_bg.wasm', import.meta.url)));
  await assert.rejects(open('s3://fixtures/v3_zstd', { variables: ['t2m'] }), /no S3 support.*s3:\/\/fixtures\/v3_zstd/s);
});
