// Turning batch arrays into pictures: values as floats, a 2-D slice of one sample, viridis.
import { VIRIDIS, LUT_SIZE, lutIndex } from './colormap.js';

/** IEEE half-precision bits → number. */
function half(h) {
  const s = h & 0x8000 ? -1 : 1;
  const e = (h >> 10) & 0x1f;
  const f = h & 0x3ff;
  if (e === 0) return s * 2 ** -14 * (f / 1024);
  if (e === 31) return f ? NaN : s * Infinity;
  return s * 2 ** (e - 15) * (1 + f / 1024);
}

/** A batch array's values as numbers (float16/bfloat16 come as raw bits, int64 as BigInt). */
export function toFloat({ data, dtype }) {
  if (data instanceof Float32Array || data instanceof Float64Array) return data;
  if (dtype === 'float16') return Float32Array.from(data, half);
  if (dtype === 'bfloat16') {
    const bits = new Uint32Array(data.length);
    for (let i = 0; i < data.length; i++) bits[i] = data[i] << 16;
    return new Float32Array(bits.buffer);
  }
  if (data instanceof BigInt64Array || data instanceof BigUint64Array) return Float64Array.from(data, Number);
  return Float64Array.from(data);
}

/**
 * How one sample of inner shape `inner` becomes an image: the last two axes are rows and
 * columns; the axes before them (level, channel, ...) are fixed by `extra` indices.
 */
export function sliceLayout(inner) {
  const n = inner.length;
  const height = n >= 2 ? inner[n - 2] : 1;
  const width = n >= 1 ? inner[n - 1] : 1;
  const extraShape = inner.slice(0, Math.max(0, n - 2));
  return { height, width, extraShape, sampleSize: inner.reduce((a, b) => a * b, 1) };
}

/** Offset of row `row`'s slice at `extra` indices in the flat batch array. */
export function sliceOffset(layout, row, extra) {
  let flat = 0;
  layout.extraShape.forEach((d, i) => {
    flat = flat * d + Math.min(d - 1, Math.max(0, extra[i] ?? 0));
  });
  return row * layout.sampleSize + flat * layout.height * layout.width;
}

/** Finite min and max over the slices of every row. */
export function sliceRange(values, layout, rows, extra) {
  let lo = Infinity;
  let hi = -Infinity;
  const n = layout.height * layout.width;
  for (let r = 0; r < rows; r++) {
    const o = sliceOffset(layout, r, extra);
    for (let i = 0; i < n; i++) {
      const v = values[o + i];
      if (Number.isFinite(v)) {
        if (v < lo) lo = v;
        if (v > hi) hi = v;
      }
    }
  }
  return lo <= hi ? [lo, hi] : [0, 1];
}

/** Paint one slice into `canvas` (one canvas pixel per value; CSS scales it up, pixelated). */
export function drawSlice(canvas, values, layout, row, extra, vmin, vmax) {
  canvas.width = layout.width;
  canvas.height = layout.height;
  const ctx = canvas.getContext('2d');
  const img = ctx.createImageData(layout.width, layout.height);
  const o = sliceOffset(layout, row, extra);
  const px = img.data;
  for (let i = 0; i < layout.width * layout.height; i++) {
    const k = lutIndex(values[o + i], vmin, vmax);
    if (k < 0) continue; // NaN stays transparent
    px[i * 4] = VIRIDIS[k * 3];
    px[i * 4 + 1] = VIRIDIS[k * 3 + 1];
    px[i * 4 + 2] = VIRIDIS[k * 3 + 2];
    px[i * 4 + 3] = 255;
  }
  ctx.putImageData(img, 0, 0);
}

/** The colour bar: the table left to right. */
export function drawColorbar(canvas) {
  canvas.width = LUT_SIZE;
  const ctx = canvas.getContext('2d');
  const img = ctx.createImageData(LUT_SIZE, canvas.height);
  for (let y = 0; y < canvas.height; y++) {
    for (let x = 0; x < LUT_SIZE; x++) {
      const p = (y * LUT_SIZE + x) * 4;
      img.data.set([VIRIDIS[x * 3], VIRIDIS[x * 3 + 1], VIRIDIS[x * 3 + 2], 255], p);
    }
  }
  ctx.putImageData(img, 0, 0);
}
