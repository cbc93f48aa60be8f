// Committed rows carry no machine's paths (docs-tests/facts.py): the cache folder as
// $INSITUBATCH_CACHE, the repository's files relative, as bench/report.py `portable` writes
// them. Shared by js/bench/bench.mjs and js/bench/http-client.mjs.
import { homedir } from 'node:os';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const cache = resolve(process.env.INSITUBATCH_CACHE ?? `${homedir()}/.cache/insitubatch`);
const repo = resolve(dirname(fileURLToPath(import.meta.url)), '../..');

/** `text` with this machine's cache and checkout paths (and file:// URLs of the latter) made portable. */
export function portable(text) {
  return text.replaceAll(`${cache}/`, '$INSITUBATCH_CACHE/').replaceAll(`file://${repo}/`, '').replaceAll(`${repo}/`, '');
}
