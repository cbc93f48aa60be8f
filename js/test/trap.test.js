// A trap is an error, never a hang or a dead process (issue 16): a panic, an out-of-memory
// abort or a bare `unreachable` in the wasm engine, forced deterministically by the
// doc-hidden `__debugTrap` (wasm/src/trap.rs; inside the n-th pass `next()`, where it runs
// in the engine's own task as a real trap does), rejects the pending `next()` with an
// EngineTrapError, poisons the instance, and the next open() runs on a fresh one with the
// right batches. The same through openInWorker (the worker is terminated, every pending
// request rejects). And close() gives a dataset's memory back: 20 open/iterate/close cycles
// over 32 MiB chunks leave wasm memory where the first left it, and the allocator's count of
// bytes in use (wasm/src/trap.rs `heapBytes`) where it was.
// The stores are made up here (test-support/synthetic-store.js): no server needed.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { open, openInWorker, EngineTrapError, __debugTrap, memoryBytes, heapBytes, engineGeneration } from '../src/index.js';
import { syntheticStore } from '../test-support/synthetic-store.js';

const SMALL = syntheticStore({ samples: 40, rows: 4, cols: 8, chunkSamples: 5 });
const OPTS = { ...SMALL.options, batchSize: 4, blockChunks: 2, seed: 1 };

/** Every batch of `pass`, checked, and the samples they hold. */
async function drain(pass, store = SMALL) {
  const seen = [];
  for await (const b of pass) {
    assert.equal(store.check(b), undefined);
    seen.push(...Array.from(b.sampleIndices, Number));
  }
  return seen.sort((a, b) => a - b);
}

const ALL = Array.from({ length: 40 }, (_, i) => i);

for (const kind of ['panic', 'oom', 'unreachable']) {
  test(`a forced ${kind} trap mid-pass rejects next() with an EngineTrapError; the next open() runs on a fresh instance`, async () => {
    const ds = await open(SMALL.storage, OPTS);
    assert.deepEqual(await drain(ds.all()), ALL, 'the instance works before the trap');
    const generation = engineGeneration();
    await __debugTrap(kind, 2);
    const pass = ds.all();
    const first = await pass.next();
    assert.equal(SMALL.check(first), undefined, 'the first next() is served');
    await assert.rejects(pass.next(), (e) => {
      assert.ok(e instanceof EngineTrapError, `${e}`);
      assert.equal(e.name, 'EngineTrapError');
      assert.match(e.message, /wasm engine trapped/);
      assert.match(e.message, /open the store again/);
      assert.ok(e.cause instanceof WebAssembly.RuntimeError, 'the original trap is the cause');
      if (kind === 'panic') assert.match(e.message, /a panic: .*forced by __debugTrap/);
      else assert.match(e.message, /an abort without a panic message: most likely an allocation failed \(its memory had grown to [\d.]+ GiB of at most 4.00 GiB\)/);
      return true;
    });
    // The poisoned instance is never called again: its objects say so, close() is a no-op.
    assert.throws(() => ds.describe(), EngineTrapError);
    assert.throws(() => ds.iter('all'), EngineTrapError);
    assert.equal(await pass.next(), undefined, 'the failed pass is over');
    pass.close();
    ds.close();
    const again = await open(SMALL.storage, OPTS);
    assert.equal(engineGeneration(), generation + 1, 'a fresh instance');
    assert.deepEqual(await drain(again.all()), ALL, 'the fresh instance yields every sample, right');
    assert.equal((await drain(again.train())).length, 30);
    again.close();
  });
}

test('a trap in a synchronous call into the engine throws the EngineTrapError', async () => {
  const ds = await open(SMALL.storage, OPTS);
  await assert.rejects(__debugTrap('panic'), EngineTrapError);
  assert.throws(() => ds.labels, EngineTrapError);
  await assert.rejects(__debugTrap('bogus'), /unknown trap kind "bogus"/, 'a bad kind is an ordinary error (on a fresh instance)');
  const again = await open(SMALL.storage, OPTS);
  assert.deepEqual(await drain(again.all()), ALL);
  again.close();
});

test('a forced trap in a worker rejects its pass, the worker is terminated, and a new one works', async () => {
  const dir = await mkdtemp(join(tmpdir(), 'ib-trap-'));
  try {
    await SMALL.writeTo(dir);
    const url = pathToFileURL(dir).href;
    const wds = await openInWorker(url, OPTS);
    assert.deepEqual(await drain(wds.all()), ALL);
    await wds.__debugTrap('panic', 2);
    const pass = wds.all();
    const first = await pass.next();
    assert.equal(SMALL.check(first), undefined, 'the first next() is served');
    await assert.rejects(pass.next(), (e) => {
      assert.ok(e instanceof EngineTrapError, `${e}`);
      assert.match(e.message, /wasm engine trapped \(a panic: .*forced by __debugTrap/);
      return true;
    });
    await assert.rejects(wds.lastPass(), EngineTrapError, 'the worker is gone');
    await wds.close();
    const fresh = await openInWorker(url, OPTS);
    assert.deepEqual(await drain(fresh.all()), ALL);
    await fresh.close();
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});

test('a worker that dies rejects every pending request', async () => {
  const dir = await mkdtemp(join(tmpdir(), 'ib-trap-'));
  try {
    await SMALL.writeTo(dir);
    const wds = await openInWorker(pathToFileURL(dir).href, OPTS);
    // An out-of-memory abort in the worker's engine, with requests queued behind it (the
    // worker answers in order, so they are all pending when it traps).
    const settled = await Promise.allSettled([wds.__debugTrap('oom'), wds.badChunks(), wds.describeText(), wds.all().next()]);
    for (const s of settled) {
      assert.equal(s.status, 'rejected');
      assert.ok(s.reason instanceof EngineTrapError, `${s.reason}`);
    }
    assert.match(settled[0].reason.message, /most likely an allocation failed/);
    await wds.close();
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});

// 6 chunks of 8 × 1024 × 1024 float32 (32 MiB each, 192 MiB in all).
const BIG = syntheticStore({ samples: 48, rows: 1024, cols: 1024, chunkSamples: 8 });

/** One open/iterate/close cycle over BIG: a whole train pass, then an early break. */
async function cycle(seed) {
  const ds = await open(BIG.storage, { ...BIG.options, batchSize: 8, blockChunks: 2, seed });
  const seen = await drain(ds.train(), BIG);
  assert.equal(seen.length, 40);
  // An early break leaves reads in flight and a pass open until close(): no memory kept.
  for await (const b of ds.all()) {
    assert.equal(BIG.check(b), undefined);
    break;
  }
  ds.close();
  return { memory: await memoryBytes(), heap: await heapBytes() };
}

test('close() gives all of a dataset\'s memory back: 20 open/iterate/close cycles, wasm memory flat after the first', async () => {
  const figures = [];
  for (let i = 0; i < 20; i++) figures.push(await cycle(7));
  const memory = figures.map((f) => f.memory);
  const heap = figures.map((f) => f.heap);
  assert.ok(memory[0] > 128 * 2 ** 20, `the store is big enough to matter (${memory[0]} bytes of wasm memory)`);
  assert.deepEqual(memory, memory.map(() => memory[0]), `wasm memory after each cycle (bytes): ${memory.join(', ')}`);
  assert.deepEqual(heap, heap.map(() => heap[0]), `bytes in use after each cycle: ${heap.join(', ')}`);
  assert.ok(heap[0] < 2 ** 20, `a closed dataset leaves nothing allocated (${heap[0]} bytes in use)`);
});

test('close() with a new shuffle each cycle: every byte comes back; the allocator\'s reuse is bounded', async () => {
  // Different draw orders allocate in different orders: the allocator (dlmalloc) then cannot
  // always reuse freed space as it was, and memory grows a little before it settles.
  const figures = [];
  for (let i = 0; i < 10; i++) figures.push(await cycle(100 + i));
  const heap = figures.map((f) => f.heap);
  assert.deepEqual(heap, heap.map(() => heap[0]), `bytes in use after each cycle: ${heap.join(', ')}`);
  const memory = figures.map((f) => f.memory);
  assert.ok(Math.max(...memory) <= 1.5 * memory[0], `wasm memory after each cycle (bytes): ${memory.join(', ')}`);
});
