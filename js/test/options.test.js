// The spec walk in Node (issue #46): every case of tests/options/cases.json, the one table of
// options every surface walks (the CLI, Python, the browser, here), as open()'s options (the
// spec's keys in camelCase, by the one rule: test-support/option-table.js) over the committed
// store tests/options/store.zarr, read with node:fs. An accepted case's train epoch has the
// table's digest (the CLI's and Python's: the same batches), a refused one rejects with the
// engine's `kind`, its `option` in camelCase and the message naming it so. Needs the Node
// build (js/pkg/node) only: no fixtures or servers.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { open } from '../src/index.js';
import { collect, digest } from '../test-support/helpers.js';
import { STORE_DIR, TABLE, jsCases, nestedPaths } from '../test-support/option-table.js';

const names = createRequire(import.meta.url)('../pkg/node/insitubatch_wasm.js').optionNames();
const CASES = jsCases('node', nestedPaths(names), () => 'unused');

/** The train epoch's digest of a case (after its warm pass): resolves, or rejects with the engine's error. */
async function trainDigest({ case: c, options, warm }) {
  const store = c.stores > 1 ? Array(c.stores).fill(STORE_DIR) : STORE_DIR;
  if (warm) await collect((await open(store, warm)).train());
  const ds = await open(store, options);
  try {
    return digest(await collect(ds.train()));
  } finally {
    ds.close();
  }
}

for (const walk of CASES) {
  test(`options walk (Node): ${walk.case.name}`, { skip: walk.skip && `not in Node: ${walk.skip}` }, async () => {
    const { expect } = walk.case;
    if (expect === 'batches') {
      assert.equal(await trainDigest(walk), walk.case.digest, 'other batches than the CLI\'s and Python\'s');
    } else if (expect === 'opens') {
      (await open(STORE_DIR, walk.options)).close();
    } else {
      await assert.rejects(trainDigest(walk), (e) => {
        assert.equal(e.kind, expect.kind, e.message);
        const option = expect.option?.split('.').map((p) => p.replace(/_([a-z0-9])/g, (_, x) => x.toUpperCase())).join('.');
        assert.equal(e.option, option, e.message);
        if (option) assert.ok(e.message.includes(option.split('.')[0]), `the message names ${option}: ${e.message}`);
        return true;
      });
    }
  });
}

test('every spec field is walked in Node or skipped saying why', () => {
  const skips = TABLE.skip.node;
  const walked = new Set(CASES.filter((c) => !c.skip).flatMap((c) => Object.keys(c.case.options)));
  const spec = names.open.filter((n) => !['shift', 'batchViews', 'credentials'].includes(n));
  const camel = (k) => k.replace(/_([a-z0-9])/g, (_, c) => c.toUpperCase());
  const missing = spec.filter((n) => ![...walked].map(camel).includes(n) && !Object.keys(skips).map(camel).includes(n));
  assert.deepEqual(missing, [], 'spec fields no case walks in Node');
});
