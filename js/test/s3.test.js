// Signed S3 from wasm in Node: object_store's AmazonS3 (SigV4 via ring, fetch via reqwest)
// against the moto S3 server on loopback (tests/servers/s3_server.py, bucket = the
// fixtures). Batches must equal the native digests read from file://.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { open } from '../src/index.js';
import { skip, manifest, dataVars, collect, digest } from '../test-support/helpers.js';

const ENDPOINT = process.env.INSITUBATCH_S3_ENDPOINT;
const BUCKET = process.env.INSITUBATCH_S3_BUCKET;
const DIGESTS = process.env.INSITUBATCH_NATIVE_DIGESTS;
const s3skip = skip || (!ENDPOINT || !BUCKET ? 'INSITUBATCH_S3_ENDPOINT / INSITUBATCH_S3_BUCKET unset: run scripts/test-wasm.sh' : false);
// The parity parameters of wasm/tests/native_digest.rs.
const SEED = 3, EPOCH = 2, BATCH = 7, BLOCK_CHUNKS = 2;

const storageOptions = (over = {}) => ({
  aws_endpoint: ENDPOINT,
  aws_access_key_id: process.env.AWS_ACCESS_KEY_ID ?? 'testing',
  aws_secret_access_key: process.env.AWS_SECRET_ACCESS_KEY ?? 'testing',
  aws_region: 'us-east-1',
  aws_allow_http: 'true',
  ...over,
});

test('signed S3 from wasm: batches equal native', { skip: s3skip || (!DIGESTS && 'INSITUBATCH_NATIVE_DIGESTS unset') }, async () => {
  const native = JSON.parse(readFileSync(DIGESTS, 'utf8'));
  let compared = 0;
  for (const name of ['v3_zstd', 'v3_sharded', 'v2_blosc', 'v3_gzip']) {
    const store = manifest().stores.find((s) => s.name === name);
    const ds = await open(`s3://${BUCKET}/${store.path}`, {
      variables: dataVars(store), sampleAxis: store.sample_axis, seed: SEED, batchSize: BATCH, blockChunks: BLOCK_CHUNKS,
      storageOptions: storageOptions(),
    });
    ds.setEpoch(EPOCH);
    for (const split of ['train', 'all']) {
      assert.equal(digest(await collect(ds.iter(split))), native[`${name}/${split}`], `${name}/${split}: S3 differs from native`);
      compared++;
    }
    assert.ok(ds.lastPass().storage_reads > 0);
    ds.close();
  }
  console.log(`signed S3 (moto at ${ENDPOINT}): ${compared} digests equal to native`);
});

test('S3 can list: arrays are discovered without consolidated metadata', { skip: s3skip }, async () => {
  const store = manifest().stores.find((s) => s.name === 'v3_gzip');
  const ds = await open(`s3://${BUCKET}/${store.path}`, { storageOptions: storageOptions() });
  assert.deepEqual(ds.labels, dataVars(store));
  ds.close();
});

// moto does not check signatures unless IAM auth is switched on, so a wrong secret is not an
// error here; the SigV4 code path itself runs on every request above.
test('S3 errors: unknown option, missing store, no bucket, options on http', { skip: s3skip }, async () => {
  const url = `s3://${BUCKET}/v3_zstd`;
  await assert.rejects(open(url, { variables: ['t2m'], storageOptions: storageOptions({ aws_endpoitn: 'x' }) }), /unknown storage option "aws_endpoitn".*s3:\/\//);
  await assert.rejects(open(`s3://${BUCKET}/no_such_store`, { variables: ['t2m'], storageOptions: storageOptions() }), (e) => {
    assert.ok(e instanceof Error);
    assert.match(e.message, /no_such_store/);
    return true;
  });
  await assert.rejects(open('s3:///v3_zstd', { storageOptions: storageOptions() }), /no bucket/);
  await assert.rejects(open('http://127.0.0.1:9/x', { storageOptions: storageOptions() }), /s3:\/\/ URLs only/);
});
