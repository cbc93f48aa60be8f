// Crop a Zarr v3 store with consolidated metadata (the CLI's demo store) to its first `n`
// samples on axis 0, by editing metadata and copying the chunk files that hold them. The
// result is a valid, much smaller store with the same values, so a cold test run stays
// fast. Edge chunks are stored full size, as Zarr stores them anyway.
//   node test-support/crop-store.mjs SRC.zarr DST.zarr N
import fs from 'node:fs';
import path from 'node:path';

export function cropStore(src, dst, n) {
  const root = JSON.parse(fs.readFileSync(path.join(src, 'zarr.json'), 'utf8'));
  const meta = root.consolidated_metadata?.metadata;
  if (!meta) throw new Error(`no consolidated metadata in ${path.join(src, 'zarr.json')}; this crops the CLI demo store`);
  const lengths = new Set(Object.values(meta).filter((m) => m.node_type === 'array' && m.shape.length).map((m) => m.shape[0]));
  const full = Math.max(...lengths);
  if (!(n > 0 && n <= full)) throw new Error(`N must be in 1..${full}, got ${n}`);
  fs.rmSync(dst, { recursive: true, force: true });
  for (const [p, m] of Object.entries(meta)) {
    if (m.node_type !== 'array') continue;
    const cropped = m.shape.length > 0 && m.shape[0] === full;
    if (m.chunk_key_encoding?.name !== 'default' || m.chunk_grid?.name !== 'regular') {
      throw new Error(`${p}: only the default key encoding on a regular grid is supported`);
    }
    const out = cropped ? { ...m, shape: [n, ...m.shape.slice(1)] } : m;
    meta[p] = out;
    fs.mkdirSync(path.join(dst, p), { recursive: true });
    fs.writeFileSync(path.join(dst, p, 'zarr.json'), JSON.stringify(out, null, 2));
    const keep = cropped ? Math.ceil(n / m.chunk_grid.configuration.chunk_shape[0]) : Infinity;
    const cdir = path.join(src, p, 'c');
    if (!fs.existsSync(cdir)) continue;
    for (const first of fs.readdirSync(cdir)) {
      if (Number(first) < keep) fs.cpSync(path.join(cdir, first), path.join(dst, p, 'c', first), { recursive: true });
    }
  }
  fs.writeFileSync(path.join(dst, 'zarr.json'), JSON.stringify(root, null, 2));
  return dst;
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const [src, dst, n] = process.argv.slice(2);
  if (!src || !dst || !n) {
    console.error('usage: node crop-store.mjs SRC.zarr DST.zarr N');
    process.exit(2);
  }
  cropStore(src, dst, Number(n));
  console.log(`cropped ${src} to ${n} samples: ${dst}`);
}
