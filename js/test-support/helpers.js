// Shared helpers: the zarr-python fixtures ($INSITUBATCH_FIXTURES, written by
// tests/fixtures/make_fixtures.py) served by tests/servers/http_server.py ($INSITUBATCH_HTTP_URL)
// and by the misbehaving tests/servers/faulty_http.py ($INSITUBATCH_FAULTY_HTTP_URL).
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { createHash } from 'node:crypto';

export const FIXTURES = process.env.INSITUBATCH_FIXTURES;
export const HTTP = process.env.INSITUBATCH_HTTP_URL;
export const skip = !FIXTURES || !HTTP ? 'INSITUBATCH_FIXTURES / INSITUBATCH_HTTP_URL unset: run scripts/test-wasm.sh' : false;
/** CI (`CI` set, as in .ci/run) provides every prerequisite: there a skip is a failure. */
export const UNDER_CI = !!process.env.CI && !['', '0', 'false'].includes(process.env.CI.trim().toLowerCase());
if (skip && UNDER_CI) throw new Error(`${skip}; CI is set, where this is a failure, not a skip`);
/** tests/servers/faulty_http.py, started by start_all.sh with the plain HTTP server. */
export const FAULTY_HTTP = process.env.INSITUBATCH_FAULTY_HTTP_URL;
export const faultySkip = skip || (!FAULTY_HTTP ? 'INSITUBATCH_FAULTY_HTTP_URL unset: run scripts/test-wasm.sh' : false);
if (faultySkip && UNDER_CI) throw new Error(`${faultySkip}; CI is set, where this is a failure, not a skip`);

export function manifest() {
  return JSON.parse(readFileSync(join(FIXTURES, 'manifest.json'), 'utf8'));
}

export function itemsize(dtype) {
  if (['bool', 'int8', 'uint8'].includes(dtype)) return 1;
  if (['int16', 'uint16', 'float16'].includes(dtype)) return 2;
  if (['int32', 'uint32', 'float32'].includes(dtype)) return 4;
  return 8;
}

export function dataVars(store) {
  return Object.entries(store.arrays).filter(([, a]) => !a.is_coordinate).map(([p]) => p).sort();
}

/** Source rows (sample-first, inner axes in C order) as Buffers, one per sample; the values
 * file is relative to `dir` (the fixtures, or the virtual fixtures' folder). */
export function sourceRows(a, sampleAxis, dir = FIXTURES) {
  const raw = readFileSync(join(dir, a.values_file));
  const item = itemsize(a.dtype);
  const shape = a.shape;
  const strides = new Array(shape.length);
  let s = 1;
  for (let k = shape.length - 1; k >= 0; k--) {
    strides[k] = s;
    s *= shape[k];
  }
  const inner = shape.map((_, k) => k).filter((k) => k !== sampleAxis);
  const nInner = inner.reduce((p, k) => p * shape[k], 1);
  const rows = [];
  for (let t = 0; t < shape[sampleAxis]; t++) {
    const row = Buffer.alloc(nInner * item);
    const idx = new Array(inner.length).fill(0);
    for (let e = 0; e < nInner; e++) {
      let flat = t * strides[sampleAxis];
      for (let j = 0; j < inner.length; j++) flat += idx[j] * strides[inner[j]];
      raw.copy(row, e * item, flat * item, (flat + 1) * item);
      for (let j = inner.length - 1; j >= 0; j--) {
        if (++idx[j] < shape[inner[j]]) break;
        idx[j] = 0;
      }
    }
    rows.push(row);
  }
  return rows;
}

export function bytesOf(view) {
  return Buffer.from(view.buffer, view.byteOffset, view.byteLength);
}

/** Every batch of a pass. */
export async function collect(pass) {
  const out = [];
  for await (const b of pass) out.push(b);
  return out;
}

/** SHA-256 of a pass: sample indices (LE u64), then each label and its bytes, in label
 * order; the same as `digest()` in tests/src/lib.rs and wasm/tests/native_digest.rs. */
export function digest(batches) {
  const h = createHash('sha256');
  for (const b of batches) {
    h.update(bytesOf(b.sampleIndices));
    for (const label of Object.keys(b.arrays).sort()) {
      h.update(Buffer.from(label, 'utf8'));
      h.update(bytesOf(b.arrays[label].data));
    }
  }
  return h.digest('hex');
}
