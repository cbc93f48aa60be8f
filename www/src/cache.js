// The browser's disk tier (`cacheDir`, wasm/src/opfs/) for the dashboard's and the notebook
// widget's previews: decoded chunks kept in this origin's private file system, one directory
// per store, so a reload previews what was read before without the network. The what-ifs and
// the probe never use it, and the dashboard's live run (a worker) reads the store: they say
// what a run would do against the store.

/** `insitubatch-APP/HASH`: the cache directory of the store at `location` (16 hex of SHA-256). */
export async function cacheDirFor(app, location) {
  const h = new Uint8Array(await crypto.subtle.digest('SHA-256', new TextEncoder().encode(String(location))));
  return `insitubatch-${app}/${[...h.subarray(0, 8)].map((x) => x.toString(16).padStart(2, '0')).join('')}`;
}

/**
 * `openExplorer(source, options)` with its passes cached in this browser: resolves to
 * `{ explorer, cache: { dir, error } }`. A stale cache (the store changed) is reset. A cache
 * that cannot be had (no private file system here, another tab holds it) is said in
 * `cache.error` and the explorer opens without one; any other failure is the open's own.
 */
export async function openCached(openExplorer, source, options, { app, location }) {
  let dir = null;
  try {
    dir = await cacheDirFor(app, location);
    const explorer = await openExplorer(source, { ...options, cacheDir: dir, persist: true, resetStaleCache: true });
    return { explorer, cache: { dir, error: null } };
  } catch (e) {
    const message = e?.message ?? String(e);
    // The engine's cache errors name the directory last; crypto.subtle is missing outside
    // secure contexts (as is the private file system).
    if (dir !== null && !message.endsWith(`opfs:${dir}`)) throw e;
    return { explorer: await openExplorer(source, options), cache: { dir, error: message } };
  }
}

/** What the status line says of the cache (`cache` as `openCached` gives it; null: off). */
export function cacheText(cache) {
  if (!cache) return 'previews read from the store (cache off)';
  if (cache.error) return `previews read from the store: no cache here (${cache.error})`;
  return `previews cached in this browser (opfs:${cache.dir})`;
}
