// Viridis (perceptually uniform, colour-blind safe) from d3-scale-chromatic, sampled into a
// 256-entry table so rendering a slice is one lookup per pixel. The tests import this module
// to compute the colour a value must get, so page and test share one definition.
import { interpolateViridis } from 'd3-scale-chromatic';
import { rgb } from 'd3-color';

export const LUT_SIZE = 256;

/** `LUT_SIZE` × [r, g, b] bytes of viridis. */
export const VIRIDIS = (() => {
  const t = new Uint8Array(LUT_SIZE * 3);
  for (let i = 0; i < LUT_SIZE; i++) {
    // d3's viridis is a ramp of 256 colours picked by floor(t * 256): sampling at bin
    // centres takes each colour exactly once (i / 255 would repeat some through rounding).
    const c = rgb(interpolateViridis((i + 0.5) / LUT_SIZE));
    t.set([c.r, c.g, c.b], i * 3);
  }
  return t;
})();

/** The table index of `v` on `[vmin, vmax]` (clamped); -1 for NaN/±inf (drawn transparent). */
export function lutIndex(v, vmin, vmax) {
  if (!Number.isFinite(v)) return -1;
  const span = vmax - vmin;
  const t = span > 0 ? (v - vmin) / span : 0.5;
  return Math.min(LUT_SIZE - 1, Math.max(0, Math.round(t * (LUT_SIZE - 1))));
}

/** [r, g, b, a] of `v`. */
export function colorOf(v, vmin, vmax) {
  const i = lutIndex(v, vmin, vmax);
  if (i < 0) return [0, 0, 0, 0];
  return [VIRIDIS[i * 3], VIRIDIS[i * 3 + 1], VIRIDIS[i * 3 + 2], 255];
}
