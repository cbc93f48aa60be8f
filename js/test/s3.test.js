// Signed S3 from wasm in Node: object_store's AmazonS3 (SigV4 via ring, fetch via reqwest)
// against the moto S3 servers on loopback (tests/servers/s3_server.py: bucket = the fixtures;
// and one that checks signatures, bucket `signed`, v3_zstd only). Batches must equal the
// native digests read from file://. The browser's side: js/test/browser.test.js.
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

// The first server does not check signatures (the one below does), so a wrong secret is no
// error there.
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

const AUTH = process.env.INSITUBATCH_S3_AUTH_ENDPOINT;
const KEY_ID = process.env.INSITUBATCH_S3_AUTH_KEY_ID;
const SECRET = process.env.INSITUBATCH_S3_AUTH_SECRET;
const authSkip = skip || (!AUTH ? 'INSITUBATCH_S3_AUTH_ENDPOINT unset: run scripts/test-wasm.sh' : false);
const SIGNED = 's3://signed/v3_zstd';
const where = (over = {}) => ({ aws_endpoint: AUTH, aws_region: 'us-east-1', aws_allow_http: 'true', ...over });
/** Whether `message` ends with `url` or an object's URL under it (a metadata read's). */
const endsWithUrl = (message, url) => new RegExp(`${url.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&')}(/\\S*)?$`).test(message);

/** Digests of train and all at the parity epoch of v3_zstd opened with `options`. */
async function signedDigests(options) {
  const store = manifest().stores.find((s) => s.name === 'v3_zstd');
  const ds = await open(SIGNED, { variables: dataVars(store), sampleAxis: store.sample_axis, seed: SEED, batchSize: BATCH, blockChunks: BLOCK_CHUNKS, ...options });
  ds.setEpoch(EPOCH);
  const out = {};
  for (const split of ['train', 'all']) out[split] = digest(await collect(ds.iter(split)));
  ds.close();
  return out;
}

test('signed S3 (moto checking signatures): the right keys read native batches, a wrong secret is refused naming the URL last', { skip: authSkip }, async () => {
  const got = await signedDigests({ storageOptions: where({ aws_access_key_id: KEY_ID, aws_secret_access_key: SECRET }) });
  if (DIGESTS) {
    const native = JSON.parse(readFileSync(DIGESTS, 'utf8'));
    for (const split of ['train', 'all']) assert.equal(got[split], native[`v3_zstd/${split}`], `${split}: signed S3 differs from native`);
  }
  const wrong = `${SECRET}-wrong`;
  await assert.rejects(open(SIGNED, { variables: ['t2m'], storageOptions: where({ aws_access_key_id: KEY_ID, aws_secret_access_key: wrong }) }), (e) => {
    assert.ok(e instanceof Error);
    assert.match(e.message, /SignatureDoesNotMatch|403/);
    assert.match(e.message, /check the access key id and secret/);
    assert.ok(endsWithUrl(e.message, SIGNED), e.message);
    assert.ok(!e.message.includes(SECRET), 'no secret in the error');
    return true;
  });
});

test('the credentials callback: called when a request needs credentials, again once its answer expires within the margin, never otherwise', { skip: authSkip }, async () => {
  const answers = [];
  const credentials = async () => {
    // Expiry is explicit, never waited for: the first answer expires in 30 s, inside the
    // one-minute refresh margin, so the next request asks again; the second (a Date) is good
    // for an hour, so no request of this test asks a third time.
    const expiration = answers.length === 0 ? Date.now() + 30_000 : new Date(Date.now() + 3_600_000);
    answers.push(expiration);
    return { accessKeyId: KEY_ID, secretAccessKey: SECRET, expiration };
  };
  const got = await signedDigests({ storageOptions: where(), credentials });
  assert.deepEqual(got, await signedDigests({ storageOptions: where({ aws_access_key_id: KEY_ID, aws_secret_access_key: SECRET }) }));
  assert.equal(answers.length, 2, 'called once, then once more');
  // Already expired (a date in the past, as an ISO string) on every call: every request asks.
  let calls = 0;
  const expired = () => {
    calls++;
    return { accessKeyId: KEY_ID, secretAccessKey: SECRET, expiration: new Date(0).toISOString() };
  };
  const ds = await open(SIGNED, { variables: ['t2m'], storageOptions: where(), credentials: expired });
  const atOpen = calls;
  assert.ok(atOpen >= 1);
  await collect(ds.iter('all'));
  assert.ok(calls > atOpen, 'the chunk reads asked again');
  ds.close();
  // A callback with the wrong secret: refused as keys are.
  await assert.rejects(open(SIGNED, { variables: ['t2m'], storageOptions: where(), credentials: () => ({ accessKeyId: KEY_ID, secretAccessKey: 'nope' }) }), /check the access key id and secret.*s3:\/\/signed\/v3_zstd\/\S*$/s);
});

test('the credentials callback: its errors, and what it cannot be combined with', { skip: authSkip }, async () => {
  const o = (credentials, over = {}) => ({ variables: ['t2m'], storageOptions: where(over), readPolicy: { retries: 0 }, credentials });
  const refused = async (options, re, url = SIGNED) =>
    assert.rejects(open(url, options), (e) => {
      assert.ok(e instanceof Error);
      assert.match(e.message, re);
      assert.ok(endsWithUrl(e.message, url), e.message);
      return true;
    });
  await refused(o(() => Promise.reject(new Error('token service down'))), /the credentials callback's promise was rejected: token service down/);
  await refused(o(() => { throw new Error('no session'); }), /the credentials callback threw: no session/);
  await refused(o(() => ({ accessKeyId: KEY_ID })), /the credentials callback returned no secretAccessKey; return \{ accessKeyId, secretAccessKey/);
  await refused(o(() => ({ accessKeyId: KEY_ID, secretAccessKey: SECRET, expiration: 'soon' })), /expiration is not a date/);
  await refused(o(() => ({}), { aws_secret_access_key: 'x' }), /either in storageOptions \(\["aws_secret_access_key"\]\) or by the credentials callback, not both/);
  await refused(o(() => ({})), /storageOptions \["aws_allow_http", "aws_endpoint", "aws_region"\]: they apply to s3:\/\/ URLs only/, 'http://127.0.0.1:9/x');
  await refused({ variables: ['t2m'], credentials: () => ({}) }, /credentials: they apply to s3:\/\/ URLs only/, 'http://127.0.0.1:9/x');
  await assert.rejects(open(SIGNED, { credentials: 'key' }), /credentials must be a function/);
});

test('the credentials callback with a session token (moto not checking signatures)', { skip: s3skip }, async () => {
  let calls = 0;
  const store = manifest().stores.find((s) => s.name === 'v3_gzip');
  const ds = await open(`s3://${BUCKET}/${store.path}`, {
    storageOptions: { aws_endpoint: ENDPOINT, aws_region: 'us-east-1', aws_allow_http: 'true' },
    credentials: async () => (calls++, { accessKeyId: 'testing', secretAccessKey: 'testing', sessionToken: 'session' }),
  });
  assert.deepEqual(ds.labels, dataVars(store));
  assert.equal(calls, 1, 'no expiration: asked once');
  ds.close();
});
