// A page bundled by Vite from the installed package (its browser entry, src/web.js, and the
// wasm it loads through `new URL(..., import.meta.url)`): one train epoch of the store at
// ?store=URL, hashed as use-package.mjs hashes it. The result goes on the page as JSON.
import { open } from 'insitubatch';

const OPTIONS = { variables: ['t2m', 'u10'], batchSize: 8, blockChunks: 2, seed: 3, fractions: [0.5, 0.25, 0.25] };
const out = document.getElementById('result');

async function trainEpoch(url) {
  const ds = await open(url, OPTIONS);
  const parts = [];
  const seen = new Set();
  let batches = 0;
  for await (const b of ds.train()) {
    batches++;
    parts.push(new Uint8Array(b.sampleIndices.buffer, b.sampleIndices.byteOffset, b.sampleIndices.byteLength));
    for (const label of Object.keys(b.arrays).sort()) {
      const { data } = b.arrays[label];
      parts.push(new TextEncoder().encode(label), new Uint8Array(data.buffer, data.byteOffset, data.byteLength));
    }
    for (const t of b.sampleIndices) seen.add(t);
  }
  const all = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  parts.reduce((at, p) => (all.set(p, at), at + p.length), 0);
  const digest = [...new Uint8Array(await crypto.subtle.digest('SHA-256', all))]
    .map((x) => x.toString(16).padStart(2, '0'))
    .join('');
  ds.close();
  return { batches, samples: seen.size, digest };
}

const store = new URLSearchParams(location.search).get('store');
trainEpoch(store).then(
  (r) => {
    out.textContent = JSON.stringify(r);
    out.dataset.state = 'ok';
  },
  (e) => {
    out.textContent = `${e?.stack ?? e}`;
    out.dataset.state = 'error';
  },
);
