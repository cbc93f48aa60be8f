// An ERA5-sized Zarr v3 store for the dashboard's tests: one float32 variable `t2m` on the
// 0.25° grid (721 × 1440) with `time` steps chunked `chunk` at a time (8 → 33 MB chunks,
// gzip level 1), consolidated metadata. The values follow `era5Value` (exact in float32),
// so a test checks pixels and hover readouts without a decoder of its own. Written once
// into $INSITUBATCH_CACHE/www-era5-<key>.zarr, keyed by its parameters and this file's
// hash (older versions' stores are removed); a `.complete` marker makes an interrupted write
// start again.
//   node test-support/era5-store.mjs [TIME] [CHUNK]    # prints the store's path
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import zlib from 'node:zlib';
import { fileURLToPath } from 'node:url';

export const LAT = 721;
export const LON = 1440;

/**
 * The value at time `t`, latitude row `y`, longitude column `x`: a gradient north to south
 * plus one east to west that moves 60 columns a step; multiples of 1/16 below 512, so exact
 * in float32.
 */
export function era5Value(t, y, x) {
  return 220 + y / 8 + ((x + 60 * t) % LON) / 16;
}

function arrayMeta(time, chunk) {
  return {
    zarr_format: 3,
    node_type: 'array',
    shape: [time, LAT, LON],
    data_type: 'float32',
    chunk_grid: { name: 'regular', configuration: { chunk_shape: [chunk, LAT, LON] } },
    chunk_key_encoding: { name: 'default', configuration: { separator: '/' } },
    fill_value: 'NaN',
    codecs: [
      { name: 'bytes', configuration: { endian: 'little' } },
      { name: 'gzip', configuration: { level: 1 } },
    ],
    attributes: { long_name: '2 metre temperature (synthetic)', units: 'K' },
    dimension_names: ['time', 'latitude', 'longitude'],
  };
}

/** Write the store (when not already complete) and return its path. */
export function era5Store({ time = 24, chunk = 8, cache = process.env.INSITUBATCH_CACHE ?? path.join(os.homedir(), '.cache', 'insitubatch') } = {}) {
  if (!(Number.isInteger(time) && time > 0 && Number.isInteger(chunk) && chunk > 0)) {
    throw new Error(`TIME and CHUNK must be positive integers, got ${time} and ${chunk}`);
  }
  const self = fs.readFileSync(fileURLToPath(import.meta.url));
  const key = crypto.createHash('sha256').update(self).update(`${time}/${chunk}`).digest('hex').slice(0, 12);
  const dir = path.join(cache, `www-era5-t${time}-c${chunk}-${key}.zarr`);
  if (fs.existsSync(path.join(dir, '.complete'))) return dir;
  // Stores written by an older version of this file are not read again: remove them.
  const prefix = `www-era5-t${time}-c${chunk}-`;
  for (const old of fs.existsSync(cache) ? fs.readdirSync(cache) : []) {
    if (old.startsWith(prefix)) fs.rmSync(path.join(cache, old), { recursive: true, force: true });
  }
  const meta = arrayMeta(time, chunk);
  fs.mkdirSync(path.join(dir, 't2m', 'c'), { recursive: true });
  fs.writeFileSync(path.join(dir, 't2m', 'zarr.json'), JSON.stringify(meta, null, 2));
  const root = {
    zarr_format: 3,
    node_type: 'group',
    attributes: { title: 'insitubatch ERA5-sized test store (synthetic)' },
    consolidated_metadata: { kind: 'inline', must_understand: false, metadata: { t2m: meta } },
  };
  fs.writeFileSync(path.join(dir, 'zarr.json'), JSON.stringify(root, null, 2));
  const plane = LAT * LON;
  for (let c = 0; c * chunk < time; c++) {
    // Edge chunks are stored full size, as Zarr stores them; their tail is never read.
    const v = new Float32Array(chunk * plane);
    for (let k = 0; k < chunk; k++) {
      const t = c * chunk + k;
      for (let y = 0; y < LAT; y++) for (let x = 0; x < LON; x++) v[k * plane + y * LON + x] = era5Value(t, y, x);
    }
    const out = zlib.gzipSync(Buffer.from(v.buffer), { level: 1 });
    fs.mkdirSync(path.join(dir, 't2m', 'c', String(c), '0'), { recursive: true });
    fs.writeFileSync(path.join(dir, 't2m', 'c', String(c), '0', '0'), out);
  }
  fs.writeFileSync(path.join(dir, '.complete'), '');
  return dir;
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const [time, chunk] = process.argv.slice(2).map(Number);
  console.log(era5Store({ time: time || undefined, chunk: chunk || undefined }));
}
