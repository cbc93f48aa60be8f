// A tiny hand-written model in plain JS: a two-layer perceptron (dense → ReLU → dense →
// softmax) over Float32Array, with weights drawn from a seeded generator so every run (and
// the test's independent reference) builds the same model. Small enough to read in full;
// the point of the example is the data path, not the model.

/** mulberry32: a 32-bit seeded generator (uniform in [0, 1)). */
export function rng(seed) {
  let s = seed >>> 0;
  return () => {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/**
 * Weights for `inputs → hidden → outputs`, uniform in ±1/sqrt(fan-in), after the input
 * standardization a deployed model ships with: `x' = (x - center) * scale`.
 */
export function makeModel({ inputs, hidden = 16, outputs = 3, seed = 1, center = 0, scale = 1 }) {
  const r = rng(seed);
  const init = (n, fanIn) => Float32Array.from({ length: n }, () => (2 * r() - 1) / Math.sqrt(fanIn));
  return {
    inputs, hidden, outputs, center, scale,
    w1: init(inputs * hidden, inputs), // row-major [inputs][hidden]
    b1: init(hidden, inputs),
    w2: init(hidden * outputs, hidden), // [hidden][outputs]
    b2: init(outputs, hidden),
  };
}

/** Class probabilities for `rows` samples of `x` (row-major [rows][inputs]) → [rows][outputs]. */
export function forward(m, x, rows) {
  if (x.length !== rows * m.inputs) throw new Error(`expected ${rows}×${m.inputs} inputs, got ${x.length} values`);
  const out = new Float32Array(rows * m.outputs);
  const h = new Float32Array(m.hidden);
  const z = new Float32Array(m.outputs);
  for (let r = 0; r < rows; r++) {
    const xo = r * m.inputs;
    h.set(m.b1);
    for (let i = 0; i < m.inputs; i++) {
      const xi = (x[xo + i] - m.center) * m.scale;
      const wo = i * m.hidden;
      for (let j = 0; j < m.hidden; j++) h[j] += xi * m.w1[wo + j];
    }
    for (let j = 0; j < m.hidden; j++) if (h[j] < 0) h[j] = 0;
    z.set(m.b2);
    for (let j = 0; j < m.hidden; j++) {
      const wo = j * m.outputs;
      for (let k = 0; k < m.outputs; k++) z[k] += h[j] * m.w2[wo + k];
    }
    let max = -Infinity;
    for (let k = 0; k < m.outputs; k++) max = Math.max(max, z[k]);
    let sum = 0;
    for (let k = 0; k < m.outputs; k++) sum += (out[r * m.outputs + k] = Math.exp(z[k] - max));
    for (let k = 0; k < m.outputs; k++) out[r * m.outputs + k] /= sum;
  }
  return out;
}
