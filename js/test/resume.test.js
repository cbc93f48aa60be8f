// Exact mid-epoch resume in JS (core's `Checkpoint`, core/src/ranks.rs): a pass stopped after
// a few batches and resumed by a fresh dataset yields exactly the rest of the uninterrupted
// pass, in order (every sample once), on the main thread and through openInWorker; a
// checkpoint of another seed is refused; one taken with 2 ranks resumed by 1 covers exactly
// the samples the 2 had not consumed. Over the node:fs store (the worker over HTTP), in Node.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { open, openInWorker } from '../src/index.js';
import { FIXTURES, HTTP, skip, collect } from '../test-support/helpers.js';

const OPTS = { variables: ['t2m'], batchSize: 7, blockChunks: 1, seed: 11, fractions: [1, 0, 0] };
const EPOCH = 2;
const TAKEN = 3;

const path = () => join(FIXTURES, 'v3_zstd');
const indices = (batches) => batches.flatMap((b) => [...b.sampleIndices]);

/** The first `n` batches of `pass` (which stays open). */
async function take(pass, n) {
  const out = [];
  for (let i = 0; i < n; i++) out.push(await pass.next());
  assert.ok(out.every((b) => b !== undefined), `the pass has more than ${n} batches`);
  return out;
}

/** The sample indices of one uninterrupted pass over the train view at EPOCH. */
async function uninterrupted(opts = OPTS) {
  const ds = await open(path(), opts);
  ds.setEpoch(EPOCH);
  const all = indices(await collect(ds.train()));
  ds.close();
  return all;
}

test('main thread: take 3 batches, checkpoint, resume in a fresh dataset = one uninterrupted pass', { skip }, async () => {
  const whole = await uninterrupted();
  const first = await open(path(), OPTS);
  first.setEpoch(EPOCH);
  const fresh = first.checkpoint();
  assert.deepEqual(fresh, { version: 1, seed: 11, epoch: EPOCH, split: 'train', batch_size: 7, world_size: 1, position: 0, batches: 0, history: [] });
  const pass = first.train();
  const head = await take(pass, TAKEN);
  const checkpoint = pass.checkpoint();
  assert.equal(checkpoint.batches, TAKEN);
  assert.equal(checkpoint.position, TAKEN * 7);
  assert.deepEqual(first.checkpoint(), checkpoint, "the dataset's checkpoint is its latest pass's");
  pass.close();
  assert.deepEqual(pass.checkpoint(), checkpoint, 'a closed pass keeps its checkpoint');
  first.close();

  // A plain object: saved as JSON, read back in another dataset (as another process would).
  const saved = JSON.parse(JSON.stringify(checkpoint));
  const second = await open(path(), OPTS);
  assert.equal(second.epoch, 0);
  const resumed = second.resume(saved);
  assert.equal(second.epoch, EPOCH, "resume sets the checkpoint's epoch");
  const tail = await collect(resumed);
  assert.equal(tail[0].index, TAKEN, 'batch indices continue the interrupted pass');
  assert.equal(resumed.length, tail.length);
  const got = [...indices(head), ...indices(tail)];
  assert.deepEqual(got, whole, 'the interrupted and resumed passes together are the uninterrupted one, in order');
  assert.equal(new Set(got).size, got.length, 'every sample once');
  assert.equal(second.lastPass().resumed_at, TAKEN * 7);
  const end = resumed.checkpoint();
  assert.equal(end.position, whole.length, 'after the last batch: the whole share consumed');
  assert.equal(end.batches, TAKEN + tail.length);
  assert.deepEqual(second.checkpoint(), end);
  // The JSON text resumes too (a file written by the CLI's --checkpoint or Python's state_dict()).
  const again = await collect(second.resume(JSON.stringify(saved)));
  assert.deepEqual(indices(again), indices(tail));
  // Resuming the end of a pass yields nothing; a new epoch's checkpoint starts fresh.
  assert.equal((await collect(second.resume(end))).length, 0);
  second.setEpoch(EPOCH + 1);
  assert.equal(second.checkpoint().position, 0);
  second.close();
});

test('a checkpoint of another seed, batch size or format is refused, saying why', { skip }, async () => {
  const ds = await open(path(), OPTS);
  ds.setEpoch(EPOCH);
  const pass = ds.train();
  await take(pass, 1);
  const checkpoint = pass.checkpoint();
  pass.close();
  ds.close();
  const other = await open(path(), { ...OPTS, seed: 12 });
  assert.throws(() => other.resume(checkpoint), /the checkpoint was taken with seed 11 but this pass has seed 12/);
  other.close();
  const wider = await open(path(), { ...OPTS, batchSize: 8 });
  assert.throws(() => wider.resume(checkpoint), /batch_size 7 but this pass has batch_size 8/);
  assert.throws(() => wider.resume({ epoch: 1 }), /malformed checkpoint JSON/);
  assert.throws(() => wider.resume({ ...checkpoint, version: 99 }), /checkpoint version 99/);
  assert.throws(() => wider.resume(42), /a checkpoint is the object checkpoint\(\) returned/);
  wider.close();
});

test('openInWorker: take 3 batches, checkpoint, resume in a fresh worker = one uninterrupted pass', { skip }, async () => {
  const whole = await uninterrupted();
  const url = `${HTTP}/v3_zstd`;
  const first = await openInWorker(url, OPTS);
  await first.setEpoch(EPOCH);
  const pass = first.train();
  const head = await take(pass, TAKEN);
  const checkpoint = await pass.checkpoint();
  assert.equal(checkpoint.position, TAKEN * 7);
  assert.deepEqual(await first.checkpoint(), checkpoint);
  // The same point of the same pass on the main thread: the same checkpoint.
  const main = await open(path(), OPTS);
  main.setEpoch(EPOCH);
  const mainPass = main.train();
  await take(mainPass, TAKEN);
  assert.deepEqual(mainPass.checkpoint(), checkpoint, 'one format on every target');
  mainPass.close();
  main.close();
  await pass.close();
  await first.close();
  assert.deepEqual(await pass.checkpoint(), checkpoint, 'kept on the page after the worker is gone');

  const second = await openInWorker(url, OPTS);
  const resumed = second.resume(JSON.parse(JSON.stringify(checkpoint)));
  const tail = await collect(resumed);
  assert.equal(second.epoch, EPOCH, "resume sets the checkpoint's epoch");
  assert.equal(tail[0].index, TAKEN);
  assert.deepEqual([...indices(head), ...indices(tail)], whole);
  const end = await resumed.checkpoint();
  assert.equal(end.position, whole.length, 'the last reply carries the final checkpoint');
  assert.deepEqual(await second.checkpoint(), end);
  await second.close();

  const other = await openInWorker(url, { ...OPTS, seed: 12 });
  await assert.rejects(other.resume(checkpoint).next(), /the checkpoint was taken with seed 11 but this pass has seed 12/);
  await other.close();
});

test('elastic: a checkpoint of 2 ranks resumed by 1 covers exactly the samples not yet consumed', { skip }, async () => {
  const TWO = 2;
  const shares = [];
  const consumed = [];
  const checkpoints = [];
  for (let rank = 0; rank < TWO; rank++) {
    const opts = { ...OPTS, rank, worldSize: TWO };
    shares.push(await uninterrupted(opts));
    const ds = await open(path(), opts);
    ds.setEpoch(EPOCH);
    const pass = ds.train();
    consumed.push(indices(await take(pass, 2)));
    checkpoints.push(pass.checkpoint());
    pass.close();
    ds.close();
  }
  assert.deepEqual(checkpoints[0], checkpoints[1], 'ranks stepping in lockstep take the same checkpoint');
  const one = await open(path(), OPTS); // rank 0 of 1
  const resumed = one.resume(checkpoints[0]);
  const rest = indices(await collect(resumed));
  assert.deepEqual(resumed.checkpoint().history, [{ world_size: TWO, position: 14 }]);
  one.close();
  const sorted = (a) => [...a].sort((x, y) => (x < y ? -1 : x > y ? 1 : 0));
  const before = [...consumed[0], ...consumed[1]];
  assert.equal(new Set([...before, ...rest]).size, before.length + rest.length, 'no sample twice');
  assert.deepEqual(sorted([...before, ...rest]), sorted([...shares[0], ...shares[1]]), "the two ranks' epoch, exactly");
});
