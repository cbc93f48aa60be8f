// A local Zarr store in Node, as the storage object `openWithStorage` takes
// (wasm/src/js_storage.rs): node:fs/promises with ranged reads (FileHandle.read at an
// offset), so a chunk or a shard index costs its own bytes, never the whole file.
// Node only: the browser entry never imports this file.

import { open as openFile, readdir, stat } from 'node:fs/promises';
import { join, resolve, sep } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

/** Errors worth a retry under the read policy (descriptor limits, busy or interrupted I/O). */
const TRANSIENT = new Set(['EMFILE', 'ENFILE', 'EAGAIN', 'EBUSY', 'EINTR', 'ETIMEDOUT']);
/** Errors that mean "no object at this key" (a missing key is not an error: `null`). */
const MISSING = new Set(['ENOENT', 'ENOTDIR', 'EISDIR']);

/** `e` with `transient: true` when retrying may help; the engine appends the key. */
function classify(e) {
  if (e && TRANSIENT.has(e.code)) e.transient = true;
  return e;
}

/** The local path of `url`: a `file://` URL, or a plain (absolute or relative) path. */
export function localPath(url) {
  const s = String(url);
  return resolve(/^file:/i.test(s) ? fileURLToPath(s) : s);
}

/** The `file://` URL of a local path or `file://` URL (absolute, percent-encoded). */
export function fileUrl(url) {
  return pathToFileURL(localPath(url)).href;
}

/** Whether `url` names a local store: `file://…`, or no `scheme://` at all (a plain path). */
export function isLocal(url) {
  const s = String(url);
  return /^file:/i.test(s) || !/^[a-z][a-z0-9+.-]*:\/\//i.test(s);
}

/** The file of `key` under `root`; a key that climbs out of the store is refused. */
function fileOf(root, key) {
  const parts = key.split('/').filter((p) => p !== '' && p !== '.');
  if (parts.includes('..')) {
    throw new Error(`the key ${JSON.stringify(key)} leaves the store (".." is not a key segment)`);
  }
  return join(root, ...parts);
}

/** `length` bytes of `fh` from `position`, read in as many calls as the OS needs. */
async function readAt(fh, position, length) {
  const out = new Uint8Array(length);
  let got = 0;
  while (got < length) {
    const { bytesRead } = await fh.read(out, got, length - got, position + got);
    if (bytesRead === 0) {
      throw new Error(`the file ended after ${got} of ${length} bytes at offset ${position}; it changed while being read`);
    }
    got += bytesRead;
  }
  return out;
}

/** `[start, end)` of an object of `size` bytes for `range`; past the end is an error, not a short read. */
function span(range, size) {
  if (range === undefined) return [0, size];
  if (range.suffix !== undefined) return [Math.max(0, size - range.suffix), size];
  const { start, end } = range;
  if (end > size) {
    throw new Error(`byte range ${start}..${end} reaches past the end of the object (${size} bytes); the object may be truncated, or the shard index that gave the range is corrupt`);
  }
  return [start, end];
}

/** Every file under `dir`, as keys relative to `root` joined with "/". */
async function walk(root, dir, out) {
  let entries;
  try {
    entries = await readdir(dir, { withFileTypes: true });
  } catch (e) {
    if (MISSING.has(e.code)) return out;
    throw classify(e);
  }
  for (const d of entries) {
    const p = join(dir, d.name);
    if (d.isDirectory()) await walk(root, p, out);
    else if (d.isFile()) out.push(p.slice(root.length + 1).split(sep).join('/'));
  }
  return out;
}

/**
 * The storage object for the store at `url` (`file://…` or a path). Rejects when no
 * directory is there, naming the path, as the native backend does.
 */
export async function nodeFileStorage(url) {
  const root = localPath(url);
  const location = pathToFileURL(root).href;
  const st = await stat(root).catch(() => undefined);
  if (!st?.isDirectory()) {
    throw new Error(`no Zarr store exists at this path: ${url}`);
  }
  return {
    location,
    async get(key, range) {
      let fh;
      try {
        fh = await openFile(fileOf(root, key), 'r');
      } catch (e) {
        if (MISSING.has(e.code)) return null;
        throw classify(e);
      }
      try {
        const s = await fh.stat();
        if (!s.isFile()) return null;
        const [start, end] = span(range, s.size);
        return await readAt(fh, start, end - start);
      } catch (e) {
        throw classify(e);
      } finally {
        await fh.close();
      }
    },
    async list(prefix) {
      const keys = await walk(root, fileOf(root, prefix), []);
      return keys;
    },
  };
}
