// Page-side halves of js/test/opfs.test.js (the browser's disk tier, wasm/src/opfs/), imported
// into test-support/page/ on the js/ origin. Each returns plain JSON for the Node side.
import { open, openInWorker } from '../src/web.js';
import { digest } from './browser-cases.js';

/** Every batch of `pass`. */
async function collect(pass) {
  const out = [];
  for await (const b of pass) out.push(b);
  return out;
}

/** What a pass read: its digest, batches, the disk tier's report line and notes, its stats' revived chunks. */
async function summary(ds, batches) {
  const report = await ds.describe();
  const stats = await ds.lastPass();
  return {
    digest: await digest(batches),
    batches: batches.length,
    diskTier: report.config.disk_tier ?? null,
    notes: report.notes.map((n) => n.message),
    revived: stats?.revived_chunks ?? null,
  };
}

/**
 * One pass of `split` at `epoch` over `url` with `options`, in a worker (`openInWorker`,
 * `how` as it takes) or, with `page`, on this page (`open()`); the dataset is closed after,
 * which lets its cache go. Errors come back as `{ error }`.
 */
export async function pass({ url, options, split = 'all', epoch = 0, page = false, how = {} }) {
  let ds;
  try {
    ds = page ? await open(url, options) : await openInWorker(url, options, { threads: 'auto', ...how });
    await ds.setEpoch(epoch);
    const batches = await collect(ds.iter(split));
    return { ...(await summary(ds, batches)), build: page ? 'page' : ds.build };
  } catch (e) {
    return { error: e.message };
  } finally {
    await ds?.close();
  }
}

/** The error (or `null`) of opening `url` with `options` in a worker (`page`: on this page). */
async function openError(url, options, page) {
  try {
    const ds = page ? await open(url, options) : await openInWorker(url, options, { threads: false });
    await ds.close();
    return null;
  } catch (e) {
    return e.message;
  }
}

/**
 * One writer excludes every other opener: with a writer open in a worker, a second writer and
 * a reader (each in a worker of its own) are refused, and so is a second writer on this page
 * while this page holds one; once the writer closes, two readers share the directory and
 * exclude a writer; once they close, a writer opens again.
 */
export async function exclusion({ url, options }) {
  const writer = { ...options, persist: true };
  const reader = { ...options, readonlyCache: true };
  const out = {};
  const first = await openInWorker(url, writer, { threads: false });
  out.secondWriter = await openError(url, writer);
  out.readerBesideWriter = await openError(url, reader);
  await first.close();
  const here = await open(url, writer);
  out.sameInstance = await openError(url, writer, true);
  here.close();
  const r1 = await openInWorker(url, reader, { threads: false });
  const r2 = await openInWorker(url, reader, { threads: false });
  out.twoReaders = true;
  out.writerBesideReaders = await openError(url, writer);
  await r1.close();
  await r2.close();
  out.writerAfter = await openError(url, writer);
  return out;
}

/** The cache directory `dir` (names separated by `/`) under this origin's private file system. */
async function cacheDir(dir) {
  let d = await navigator.storage.getDirectory();
  for (const name of dir.split('/').filter(Boolean)) d = await d.getDirectoryHandle(name);
  return d;
}

/** Every file of the cache directory `dir`, `{ name: size }`. */
export async function listing({ dir }) {
  const out = {};
  for await (const [name, h] of (await cacheDir(dir)).entries()) {
    if (h.kind === 'file') out[name] = (await h.getFile()).size;
  }
  return out;
}

/**
 * Damage chunk files of `dir` as writes cut short, a swapped file or a planted one would, each
 * written whole with the browser's own API: `truncated` (its first half), `flipped` (one data
 * byte changed, the size kept), `uncommitted` (the commit record zeroed), `swapped` (another
 * chunk's whole, valid file under its name), `planted` (its header and commit record kept,
 * other data between them). Returns the names, by kind.
 */
export async function damage({ dir, names }) {
  const d = await cacheDir(dir);
  const kinds = ['truncated', 'flipped', 'uncommitted', 'swapped', 'planted'];
  const read = async (name) => new Uint8Array(await (await (await d.getFileHandle(name)).getFile()).arrayBuffer());
  const out = {};
  for (const [i, name] of names.slice(0, kinds.length).entries()) {
    const h = await d.getFileHandle(name);
    const bytes = await read(name);
    let next;
    if (kinds[i] === 'truncated') next = bytes.slice(0, bytes.length >> 1);
    if (kinds[i] === 'flipped') {
      next = bytes.slice();
      next[200] ^= 0x01;
    }
    if (kinds[i] === 'uncommitted') {
      next = bytes.slice();
      next.fill(0, next.length - 16);
    }
    // The first file after the damaged ones: left as it is.
    if (kinds[i] === 'swapped') next = await read(names[kinds.length]);
    if (kinds[i] === 'planted') {
      next = bytes.slice();
      next.fill(0x42, 128, next.length - 16);
    }
    const w = await h.createWritable();
    await w.write(next);
    await w.close();
    out[kinds[i]] = name;
  }
  return out;
}

/**
 * A tab killed mid-write: a worker whose writes stop after `stopAfter` bytes
 * (test-support/opfs-stop-worker.js, the tier's test hook) starts a pass; once a chunk
 * write has stopped, the worker is terminated, as a closed tab's are. Returns the file
 * whose write was cut.
 */
export async function killMidWrite({ url, options, stopAfter }) {
  const channel = new BroadcastChannel('insitubatch-opfs-test');
  const stopped = new Promise((resolve) => (channel.onmessage = (e) => resolve(e.data)));
  const worker = new Worker(new URL(`./opfs-stop-worker.js?stopAfter=${stopAfter}`, import.meta.url), { type: 'module' });
  const ds = await openInWorker(url, options, { worker, threads: false });
  const p = ds.iter('all');
  p.next().catch(() => {}); // never answered: the worker dies first
  const name = await stopped;
  worker.terminate();
  channel.close();
  return { name };
}

/** Clear this origin's private file system (a test's start). */
export async function clearOpfs() {
  const root = await navigator.storage.getDirectory();
  for await (const name of root.keys()) await root.removeEntry(name, { recursive: true });
  return true;
}
