// The pure parts of rendering, in Node: which values a slice shows (extra indices such as
// level or channel), dtype conversion, and the colour table.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { sliceLayout, sliceOffset, sliceRange, toFloat } from '../src/render.js';
import { LUT_SIZE, VIRIDIS, colorOf, lutIndex } from '../src/colormap.js';

describe('render', () => {
  it('slices a (level, channel, y, x) sample at any extra index, row-major', () => {
    const inner = [3, 2, 4, 5];
    const rows = 2;
    const n = rows * inner.reduce((a, b) => a * b);
    const values = Float32Array.from({ length: n }, (_, i) => i);
    const L = sliceLayout(inner);
    assert.deepEqual([L.height, L.width, L.extraShape, L.sampleSize], [4, 5, [3, 2], 120]);
    for (let r = 0; r < rows; r++) {
      for (let lv = 0; lv < 3; lv++) {
        for (let c = 0; c < 2; c++) {
          const o = sliceOffset(L, r, [lv, c]);
          // Element (r, lv, c, y, x) of a C-order array is r*120 + lv*40 + c*20 + y*5 + x.
          assert.equal(values[o + 2 * 5 + 3], r * 120 + lv * 40 + c * 20 + 13);
        }
      }
    }
    // Out-of-range indices are clamped, not read past the sample.
    assert.equal(sliceOffset(L, 0, [9, -4]), 2 * 40);
    assert.deepEqual(sliceRange(values, L, rows, [1, 1]), [60, 120 + 79]);
    // 1-D and 0-D samples become a strip and a single pixel.
    assert.deepEqual([sliceLayout([7]).height, sliceLayout([7]).width], [1, 7]);
    assert.deepEqual([sliceLayout([]).height, sliceLayout([]).width], [1, 1]);
  });

  it('reads float16, bfloat16, int64 and integer batches as numbers', () => {
    // float16: 1.0 = 0x3c00, -2.5 = 0xc100, 65504 = 0x7bff, NaN = 0x7e00.
    assert.deepEqual([...toFloat({ data: Uint16Array.from([0x3c00, 0xc100, 0x7bff]), dtype: 'float16' })], [1, -2.5, 65504]);
    assert.ok(Number.isNaN(toFloat({ data: Uint16Array.from([0x7e00]), dtype: 'float16' })[0]));
    // bfloat16 is the top half of a float32: 1.0 = 0x3f80, -3.0 = 0xc040.
    assert.deepEqual([...toFloat({ data: Uint16Array.from([0x3f80, 0xc040]), dtype: 'bfloat16' })], [1, -3]);
    assert.deepEqual([...toFloat({ data: BigInt64Array.from([-5n, 7n]), dtype: 'int64' })], [-5, 7]);
    assert.deepEqual([...toFloat({ data: Int16Array.from([-3, 4]), dtype: 'int16' })], [-3, 4]);
  });

  it('maps values onto viridis ends to ends, NaN transparent', () => {
    assert.equal(VIRIDIS.length, LUT_SIZE * 3);
    assert.deepEqual(colorOf(0, 0, 10), [68, 1, 84, 255]); // viridis' first colour
    assert.deepEqual(colorOf(10, 0, 10), [253, 231, 37, 255]); // and its last
    assert.equal(lutIndex(-99, 0, 10), 0);
    assert.equal(lutIndex(99, 0, 10), LUT_SIZE - 1);
    assert.equal(lutIndex(NaN, 0, 10), -1);
    assert.deepEqual(colorOf(Infinity, 0, 10), [0, 0, 0, 0]);
    assert.equal(lutIndex(3, 3, 3), Math.round(0.5 * (LUT_SIZE - 1)), 'a flat slice is mid-scale');
  });
});
