// Cross-target parity: the same (seed, epoch) gives bit-identical batches on native and
// wasm. The native digests come from wasm/tests/native_digest.rs (file://, tokio + rayon),
// written to $INSITUBATCH_NATIVE_DIGESTS by scripts/test-wasm.sh; these are wasm in Node
// over HTTP (fetch + spawn_local + one thread). Parameters must match that test.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { open } from '../src/index.js';
import { HTTP, skip, manifest, dataVars, collect, digest } from '../test-support/helpers.js';

const DIGESTS = process.env.INSITUBATCH_NATIVE_DIGESTS;
const SEED = 3, EPOCH = 2, BATCH = 7, BLOCK_CHUNKS = 2;

test('wasm batches are bit-identical to native ones', { skip: skip || (!DIGESTS && 'INSITUBATCH_NATIVE_DIGESTS unset') }, async () => {
  const native = JSON.parse(readFileSync(DIGESTS, 'utf8'));
  let compared = 0;
  for (const store of manifest().stores) {
    const ds = await open(`${HTTP}/${store.path}`, {
      variables: dataVars(store), sampleAxis: store.sample_axis, seed: SEED, batchSize: BATCH, blockChunks: BLOCK_CHUNKS,
    });
    ds.setEpoch(EPOCH);
    for (const split of ['train', 'all']) {
      const key = `${store.name}/${split}`;
      const got = digest(await collect(ds.iter(split)));
      assert.equal(got, native[key], `${key}: wasm differs from native`);
      console.log(`parity ${key} ${got}`);
      compared++;
    }
    ds.close();
  }
  assert.equal(compared, Object.keys(native).length);
});
