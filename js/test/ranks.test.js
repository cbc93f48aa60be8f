// Ranks in JS (`rank`/`worldSize`): each rank of a job reads and yields its own share of an
// epoch (core/src/ranks.rs, the same rule on every target). The shares are disjoint, have
// equal batch counts, and together with the reported remainder cover the split. Over the
// node:fs store, in Node.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { open } from '../src/index.js';
import { FIXTURES, skip, collect } from '../test-support/helpers.js';

const OPTS = { variables: ['t2m'], batchSize: 7, blockChunks: 1, seed: 11, fractions: [1, 0, 0] };

test('two and three ranks share an epoch: disjoint, equal, complete but for the remainder', { skip }, async () => {
  const path = join(FIXTURES, 'v3_zstd');
  const whole = await open(path, OPTS);
  const total = whole.describe().config.drawable_samples.find(([s]) => s === 'train')[1];
  whole.close();
  for (const worldSize of [2, 3]) {
    const seen = new Set();
    const counts = [];
    let dropped;
    for (let rank = 0; rank < worldSize; rank++) {
      const ds = await open(path, { ...OPTS, rank, worldSize });
      ds.setEpoch(2);
      const batches = await collect(ds.train());
      counts.push(batches.length);
      for (const b of batches) {
        for (const i of b.sampleIndices) {
          assert.ok(!seen.has(i), `sample ${i} drawn by two of ${worldSize} ranks`);
          seen.add(i);
        }
      }
      const stats = ds.lastPass();
      assert.equal(stats.rank, rank);
      assert.equal(stats.world_size, worldSize);
      dropped = stats.dropped_samples;
      ds.close();
    }
    assert.ok(counts.every((n) => n === counts[0]), `equal batch counts: ${counts}`);
    assert.equal(seen.size + dropped, total, `every sample drawn once or counted as dropped (${worldSize} ranks)`);
  }
});

test('a rank outside the world is refused with both numbers', { skip }, async () => {
  await assert.rejects(open(join(FIXTURES, 'v3_zstd'), { ...OPTS, rank: 2, worldSize: 2 }), /rank=2 world_size=2/);
});
