#!/usr/bin/env node
// Edge inference from the command line:
//   node js/examples/edge-inference/run.mjs URL VARIABLE [--hidden 16] [--outputs 3] [--seed 1] [--center 0] [--scale 1]
import { parseArgs } from 'node:util';
import { infer } from './infer.js';

{
  const { values, positionals } = parseArgs({
    allowPositionals: true,
    options: {
      hidden: { type: 'string', default: '16' },
      outputs: { type: 'string', default: '3' },
      seed: { type: 'string', default: '1' },
      center: { type: 'string', default: '0' },
      scale: { type: 'string', default: '1' },
    },
  });
  const [url, variable] = positionals;
  if (!url || !variable) {
    console.error('usage: node js/examples/edge-inference/run.mjs URL VARIABLE [--hidden 16] [--outputs 3] [--seed 1] [--center 0] [--scale 1]');
    process.exit(2);
  }
  const r = await infer({ url, variable, model: Object.fromEntries(Object.entries(values).map(([k, v]) => [k, +v])) });
  const counts = new Array(+values.outputs).fill(0);
  for (const p of r.predictions.values()) counts[p.indexOf(Math.max(...p))]++;
  console.log(`${r.samples} samples in ${r.seconds.toFixed(2)} s; predicted class counts ${JSON.stringify(counts)}`);
}
