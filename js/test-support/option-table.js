// The one table of options every surface walks (tests/options/cases.json, issue #46), in JS's
// spelling: each case's options (the spec's snake_case) renamed by the one rule the engine
// applies the other way (wasm/src/options.rs `snake_keys`): camelCase, at the top and in the
// spec's nested objects the engine names (`optionNames()`: readPolicy, readPolicy.hedge,
// variables.*), and nowhere else (the keys of sel, patch, storageOptions and variables are
// the caller's own). Used by js/test/options.test.js (Node) and js/test/browser.test.js.
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { dirname, join } from 'node:path';

export const REPO = join(dirname(fileURLToPath(import.meta.url)), '../..');
export const TABLE = JSON.parse(readFileSync(join(REPO, 'tests/options/cases.json'), 'utf8'));
export const STORE_DIR = join(REPO, TABLE.store);

/** `backoff_s` → `backoffS`: core's `camel_case`. */
export const camel = (key) => key.replace(/_([a-z0-9])/g, (_, c) => c.toUpperCase());

const plain = (v) => v !== null && typeof v === 'object' && !Array.isArray(v);

/**
 * `options` (the spec's spelling) in JS's: `nested` is the set of the engine's nested
 * objects' paths in JS's spelling (`optionNames()`'s keys but `open`).
 */
export function jsOptions(options, nested, path = '') {
  const out = {};
  for (const [key, value] of Object.entries(options)) {
    const js = camel(key);
    const here = path ? `${path}.${js}` : js;
    if (plain(value) && nested.has(here)) {
      out[js] = jsOptions(value, nested, here);
    } else if (plain(value) && nested.has(`${here}.*`)) {
      out[js] = Object.fromEntries(
        Object.entries(value).map(([label, v]) => [label, plain(v) ? jsOptions(v, nested, `${here}.*`) : v]),
      );
    } else {
      out[js] = value;
    }
  }
  return out;
}

/** The table's cases for `surface` ("node", "browser"): `{ case, options, skip }`, options in JS's spelling over the base. */
export function jsCases(surface, nested, cacheDir) {
  const fieldSkips = TABLE.skip[surface] ?? {};
  return TABLE.cases.map((c) => {
    const field = Object.keys(c.options).find((k) => k in fieldSkips);
    const skip = c.skip?.[surface] ?? (field ? `${field}: ${fieldSkips[field]}` : undefined);
    const withDir = (o) => JSON.parse(JSON.stringify(o).replaceAll('"$CACHE_DIR"', JSON.stringify(cacheDir(c))));
    const options = jsOptions(withDir({ ...TABLE.base, ...c.options }), nested);
    const warm = c.warm ? jsOptions(withDir({ ...TABLE.base, ...c.warm }), nested) : undefined;
    return { case: c, options, warm, skip };
  });
}

/** The engine's nested objects (JS's paths), from its `optionNames()`. */
export function nestedPaths(optionNames) {
  return new Set(Object.keys(optionNames).filter((k) => k !== 'open'));
}
