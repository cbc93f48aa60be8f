// Cross-target parity: the same (seed, epoch) gives bit-identical batches on native and
// wasm. The native digests come from wasm/tests/native_digest.rs (file://, tokio + rayon),
// written to $INSITUBATCH_NATIVE_DIGESTS by scripts/test-wasm.sh; these are wasm in Node
// over HTTP (fetch), over file:// and over a plain path (node:fs, ranged reads), on one
// thread; with patches, their origins too. Parameters must match that test.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { open } from '../src/index.js';
import { FIXTURES, HTTP, skip, manifest, dataVars, collect, digest } from '../test-support/helpers.js';

const DIGESTS = process.env.INSITUBATCH_NATIVE_DIGESTS;
const SEED = 3, EPOCH = 2, BATCH = 7, BLOCK_CHUNKS = 2;
/** The knobs case of native_digest.rs: a labelled window, shuffled splits with their own seed, a sample range, a first block of one chunk. */
const SHIFT = 3, SPLIT_SEED = 5;
const noDigests = skip || (!DIGESTS && 'INSITUBATCH_NATIVE_DIGESTS unset');
/** The patched cases of native_digest.rs (`patched_digests`): store → options of its train pass. */
const PATCH_CASES = {
  v3_zstd: { variables: ['t2m', 'u10'], patch: { lat: 3, lon: 3 }, patchStride: { lon: 2 } },
  v3_ragged: { variables: ['t2m'], patch: [[2, 5], [1, 4]], patchMode: 'random', patchesPerSample: 3 },
};

/** The mask, weights and mesh cases of native_digest.rs (`drawn_digests`): key → options of its train pass. */
const DRAWN_CASES = {
  'draws/v3_zstd/train': {
    sampleMask: Array.from({ length: 80 }, (_, t) => t % 4 !== 1),
    sampleWeights: Float64Array.from({ length: 80 }, (_, t) => 0.5 + (t % 5) * 0.5),
  },
  'mesh/v3_zstd/train': { rank: 1, worldSize: 2, modelParallel: 2, modelParallelAxis: 'lat' },
};

/** A patched pass's fingerprint, as native_digest.rs `patched_digest`: the digest, then each batch's `dims:origins`. */
function patchedDigest(batches) {
  return [digest(batches), ...batches.map((b) => `${b.patchDims.join(',')}:${[...b.patchOrigins].join(',')}`)].join(' ');
}

/** Where each store is read from: the HTTP server, a file:// URL, a plain path. */
const SOURCES = {
  http: (store) => `${HTTP}/${store.path}`,
  file: (store) => pathToFileURL(join(FIXTURES, store.path)).href,
  path: (store) => join(FIXTURES, store.path),
};

for (const [source, urlOf] of Object.entries(SOURCES)) {
  test(`wasm batches are bit-identical to native ones (${source})`, { skip: noDigests }, async () => {
    const native = JSON.parse(readFileSync(DIGESTS, 'utf8'));
    let compared = 0;
    for (const store of manifest().stores) {
      const vars = dataVars(store);
      const ds = await open(urlOf(store), {
        variables: vars, sampleAxis: store.sample_axis, seed: SEED, batchSize: BATCH, blockChunks: BLOCK_CHUNKS,
      });
      ds.setEpoch(EPOCH);
      for (const split of ['train', 'all']) {
        const key = `${store.name}/${split}`;
        const got = digest(await collect(ds.iter(split)));
        assert.equal(got, native[key], `${key} (${source}): wasm differs from native`);
        compared++;
      }
      ds.close();
      const n = store.arrays[vars[0]].shape[store.sample_axis];
      const knobs = await open(urlOf(store), {
        variables: { x: { path: vars[0], sampleAxis: store.sample_axis }, y: { path: vars[0], shift: SHIFT, sampleAxis: store.sample_axis } },
        shuffleSplits: true, splitSeed: SPLIT_SEED, sampleRange: [1, n - 1],
        seed: SEED, batchSize: BATCH, blockChunks: BLOCK_CHUNKS, firstBlockChunks: 1,
      });
      knobs.setEpoch(EPOCH);
      const key = `${store.name}/knobs/train`;
      assert.equal(digest(await collect(knobs.train())), native[key], `${key} (${source}): wasm differs from native`);
      compared++;
      knobs.close();
    }
    for (const [store, options] of Object.entries(PATCH_CASES)) {
      const ds = await open(urlOf({ path: store }), { ...options, seed: SEED, batchSize: BATCH, blockChunks: BLOCK_CHUNKS });
      ds.setEpoch(EPOCH);
      const key = `patch/${store}/train`;
      assert.equal(patchedDigest(await collect(ds.train())), native[key], `${key} (${source}): wasm differs from native`);
      compared++;
      ds.close();
    }
    for (const [key, options] of Object.entries(DRAWN_CASES)) {
      const ds = await open(urlOf({ path: 'v3_zstd' }), {
        variables: ['t2m', 'u10'], ...options, seed: SEED, batchSize: BATCH, blockChunks: BLOCK_CHUNKS,
      });
      ds.setEpoch(EPOCH);
      assert.equal(digest(await collect(ds.train())), native[key], `${key} (${source}): wasm differs from native`);
      compared++;
      ds.close();
    }
    assert.equal(compared, Object.keys(native).length);
    console.log(`parity (${source}): ${compared} passes equal to native`);
  });
}
