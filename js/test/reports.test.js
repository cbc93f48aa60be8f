// The figures the engine derives for every binding reach JS as its own values: the shares of
// a pass's queue, its producer-side seconds and time to first batch, the budget in force, each
// variable's chunks, first-chunk bytes and geometry after chunk transforms, a bad tile's inner
// coordinate, and no shuffle quality where there is no order to score. JS computes none of
// them (python-bindings shows the same fields; tests there check them against the engine too).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { open, nodeFileStorage } from '../src/index.js';
import { FIXTURES, skip, collect } from '../test-support/helpers.js';

const OPTS = { variables: ['t2m', 'u10'], batchSize: 8, blockChunks: 2, seed: 3 };

/** v3_zstd (t2m and u10 of 80 × 6 × 7; u10 in tiles of 8 × 3 × 4), with one u10 tile unreadable. */
async function oneBadTile() {
  const inner = await nodeFileStorage(join(FIXTURES, 'v3_zstd'));
  return {
    location: 'test://v3_zstd',
    get: (key, range) => (key === 'u10/c/1/1/0' ? Promise.reject(new Error('bad tile')) : inner.get(key, range)),
    list: (prefix) => inner.list(prefix),
  };
}

test('describe() derives each variable\'s geometry after transforms, the budget in force and chunks by label', { skip }, async () => {
  const ds = await open(await oneBadTile(), OPTS);
  const r = ds.describe(2);
  const [t2m, u10] = r.variables;
  assert.deepEqual([t2m.logical_chunk_bytes, u10.logical_chunk_bytes], [8 * 6 * 7 * 4, 8 * 6 * 7 * 4]);
  for (const v of r.variables) {
    assert.deepEqual([v.output_shape, v.output_chunks], [v.shape, v.chunks], `${v.label}: no transform, the stored geometry`);
  }
  assert.deepEqual(r.config.variable_chunks, [['t2m', 10], ['u10', 10]]);
  assert.equal(r.config.cache_budget_bytes, null);
  assert.equal(r.config.budget_bytes, r.memory.automatic_budget_bytes, 'one iteration\'s budget, though two were asked');
  assert.ok(r.memory.residency_bytes > r.config.budget_bytes, JSON.stringify(r.memory));
  assert.ok(r.config.shuffle_quality > 0, `${r.config.shuffle_quality}`);
  ds.close();
  // No train chunks: no order to score.
  const none = await open(await oneBadTile(), { ...OPTS, fractions: [0, 0.5, 0.5] });
  assert.equal(none.describe().config.shuffle_quality, null);
  none.close();
});

test('a pass reports its queue shares, producer seconds and time to first batch; a bad tile its inner coordinate', { skip }, async () => {
  const ds = await open(await oneBadTile(), { ...OPTS, onBadChunk: 'nan' });
  const early = ds.train();
  early.close();
  assert.equal(ds.lastPass().batches, 0);
  assert.equal(ds.lastPass().ttfb_s, null, 'no batch, no time to the first one');
  await collect(ds.all());
  const s = ds.lastPass();
  assert.ok(s.ttfb_s > 0 && s.ttfb_s <= s.wall_s, `${s.ttfb_s} of ${s.wall_s}`);
  const d = s.depths;
  assert.ok(d.queue_samples > 0, JSON.stringify(d));
  assert.equal(d.starved_frac, d.queue_empty / d.queue_samples);
  assert.equal(d.fed_frac, d.queue_full_enough / d.queue_samples);
  const t = s.times;
  assert.equal(t.producer_s, t.fetch_wait_s + t.admission_parked_s + t.decode_s + t.assemble_s + t.gather_s + t.batch_transform_s);
  assert.ok(t.producer_s > 0, JSON.stringify(t));
  const bad = ds.badChunks();
  assert.equal(bad.length, 1, JSON.stringify(bad));
  assert.deepEqual([bad[0].array, bad[0].chunk_index, bad[0].tile, bad[0].inner_coord], ['u10', 1, [1, 1, 0], [1, 0]]);
  ds.close();
});
