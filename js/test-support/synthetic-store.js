// A Zarr v3 store made up on the spot, for tests that need a store of a given size and
// nothing else: one float32 array `x` of shape [samples, rows, cols], uncompressed (`bytes`
// codec), chunked `chunkSamples` samples at a time, where every element of sample t is t (so
// a batch checks itself). As a storage object (`open()`'s `{ get(key, range) }`), or written
// to a directory (for `openInWorker`, which takes URLs: a file:// URL in Node). Loads in
// browsers too (test-support/browser-cases.js); only `writeTo` needs Node.

export function syntheticStore({ samples, rows, cols, chunkSamples }) {
  const array = {
    zarr_format: 3,
    node_type: 'array',
    shape: [samples, rows, cols],
    data_type: 'float32',
    chunk_grid: { name: 'regular', configuration: { chunk_shape: [chunkSamples, rows, cols] } },
    chunk_key_encoding: { name: 'default', configuration: { separator: '/' } },
    fill_value: 0,
    codecs: [{ name: 'bytes', configuration: { endian: 'little' } }],
    attributes: {},
    dimension_names: ['time', 'lat', 'lon'],
  };
  const json = (v) => new TextEncoder().encode(JSON.stringify(v));
  const objects = new Map([
    ['zarr.json', json({ zarr_format: 3, node_type: 'group', attributes: {} })],
    ['x/zarr.json', json(array)],
  ]);
  const nChunks = Math.ceil(samples / chunkSamples);
  const chunkBytes = (k) => {
    const n = Math.min(chunkSamples, samples - k * chunkSamples);
    const a = new Float32Array(chunkSamples * rows * cols); // edge chunks are full size in Zarr
    for (let j = 0; j < n; j++) a.fill(k * chunkSamples + j, j * rows * cols, (j + 1) * rows * cols);
    return new Uint8Array(a.buffer);
  };
  const chunks = new Map();
  const get = (key) => {
    if (objects.has(key)) return objects.get(key);
    const m = /^x\/c\/(\d+)\/0\/0$/.exec(key);
    if (!m || +m[1] >= nChunks) return null;
    if (!chunks.has(key)) chunks.set(key, chunkBytes(+m[1]));
    return chunks.get(key);
  };
  return {
    options: { variables: ['x'] },
    /** The storage object. */
    storage: {
      location: `synthetic://${samples}x${rows}x${cols}/${chunkSamples}`,
      async get(key, range) {
        const b = get(key);
        if (!b || !range) return b;
        const start = 'suffix' in range ? b.length - range.suffix : range.start;
        return b.subarray(start, 'suffix' in range ? b.length : range.end);
      },
    },
    /** Write the store under `dir` (created). */
    async writeTo(dir) {
      const { mkdir, writeFile } = await import('node:fs/promises');
      const { join } = await import('node:path');
      await mkdir(join(dir, 'x'), { recursive: true });
      await writeFile(join(dir, 'zarr.json'), objects.get('zarr.json'));
      await writeFile(join(dir, 'x', 'zarr.json'), objects.get('x/zarr.json'));
      for (let k = 0; k < nChunks; k++) {
        await mkdir(join(dir, 'x', 'c', String(k), '0'), { recursive: true });
        await writeFile(join(dir, 'x', 'c', String(k), '0', '0'), chunkBytes(k));
      }
    },
    /** Why `batch` is wrong (each row holds its sample index everywhere), or undefined. */
    check(batch) {
      const { data, shape } = batch.arrays.x;
      const per = rows * cols;
      if (shape[0] !== batch.sampleIndices.length) return `${shape[0]} rows for ${batch.sampleIndices.length} samples`;
      for (let j = 0; j < shape[0]; j++) {
        const t = Number(batch.sampleIndices[j]);
        for (const e of [0, per >> 1, per - 1]) {
          if (data[j * per + e] !== t) return `sample ${t}, element ${e}: ${data[j * per + e]}`;
        }
      }
      return undefined;
    },
  };
}
