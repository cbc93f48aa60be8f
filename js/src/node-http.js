// Node's reads of http(s):// stores (the hook src/index.js and src/node-threads.js set on each
// instance): node:http and node:https with keep-alive agents instead of the runtime's fetch.
// Node's fetch (undici) passes every body through WHATWG streams and then copies it together,
// which cost an epoch CPU per byte beside the decode (measured in docs/lab/cpu.md "Node",
// #48). The hook's contract is the threaded build's fetch worker's (wasm/src/storage.rs
// `hooked`, src/fetch-worker.js): a ranged read of known length is written straight into the
// engine's buffer at `ptr` in wasm memory, a body whose length the response gives
// (Content-Length) into one the engine allocates when asked (`alloc(n)`, on this thread),
// anything else comes back as bytes; exactly one settlement per read, and nothing written
// after it.
import http from 'node:http';
import https from 'node:https';

/** fetch's redirect limit (WHATWG Fetch: 20). */
const MAX_REDIRECTS = 20;
const REDIRECT = new Set([301, 302, 303, 307, 308]);
/** One keep-alive pool per scheme, as fetch keeps its connections. */
const AGENTS = { 'http:': new http.Agent({ keepAlive: true }), 'https:': new https.Agent({ keepAlive: true }) };

/**
 * The read hook (`setFetchHook`'s) of the instance whose `WebAssembly.Memory` is `memory`:
 * `(url, range, ptr, len, signal, alloc)` resolves to `{ status, statusText, written }` (at
 * `ptr`), `{ status, statusText, written, sized: true }` (at what `alloc` gave),
 * `{ status, statusText, body }`, `{ status, statusText, overflow: true, received }` or
 * `{ status, statusText }` (not 2xx), and rejects on a network error or an abort.
 */
export function nodeHttpHook(memory) {
  return (url, range, ptr, len, signal, alloc) => read(new URL(url), { range, ptr, len, signal, memory, alloc }, 0);
}

function read(url, want, redirects) {
  const client = url.protocol === 'https:' ? https : http;
  return new Promise((resolve, reject) => {
    const headers = want.range === undefined ? {} : { Range: want.range };
    const req = client.get(url, { agent: AGENTS[url.protocol], headers, signal: want.signal }, (res) => {
      const head = { status: res.statusCode, statusText: res.statusMessage ?? '' };
      if (REDIRECT.has(res.statusCode) && res.headers.location) {
        res.resume();
        if (redirects >= MAX_REDIRECTS) return reject(new Error(`more than ${MAX_REDIRECTS} redirects from ${url.href}`));
        return resolve(read(new URL(res.headers.location, url), want, redirects + 1));
      }
      if (head.status < 200 || head.status >= 300) {
        res.resume();
        return resolve(head);
      }
      body(res, head, want).then(resolve, reject);
    });
    req.on('error', reject);
  });
}

/**
 * Where `res`'s body goes in wasm memory: `{ ptr, len }` at the engine's buffer for a 206 of
 * known length, `{ ptr, len, sized: true }` in one `alloc` gives for a body of declared
 * length; undefined to collect it as bytes. Throws when wasm memory has no room for it.
 */
function target(res, head, { ptr, len, alloc }) {
  if (head.status === 206 && len > 0) return { ptr, len };
  const declared = res.headers['content-length'];
  if (typeof alloc !== 'function' || !/^\d+$/.test(declared ?? '')) return undefined;
  const n = Number(declared);
  const at = alloc(n);
  if (!at) throw new Error(`a response body of ${n} bytes does not fit in wasm memory`);
  return { ptr: at, len: n, sized: true };
}

/** The body of `res`, written where `target` says, or as bytes. */
function body(res, head, want) {
  const { signal, memory } = want;
  return new Promise((resolve, reject) => {
    let into;
    try {
      into = target(res, head, want);
    } catch (e) {
      res.destroy();
      return reject(e);
    }
    const inPlace = into !== undefined;
    const { ptr, len } = into ?? {};
    const parts = [];
    let written = 0;
    let settled = false;
    const settle = (f, v) => {
      if (!settled) (settled = true), f(v);
    };
    res.on('data', (chunk) => {
      if (settled || signal?.aborted) return;
      if (!inPlace) return parts.push(chunk);
      if (written + chunk.length > len) {
        res.destroy();
        return settle(resolve, { ...head, overflow: true, received: written + chunk.length });
      }
      // `memory.buffer` each time: the memory may have grown since (its old buffer detached).
      new Uint8Array(memory.buffer, ptr + written, chunk.length).set(chunk);
      written += chunk.length;
    });
    const done = () => (inPlace ? { ...head, written, ...(into.sized && { sized: true }) } : { ...head, body: Buffer.concat(parts) });
    res.on('end', () => settle(resolve, done()));
    res.on('error', (e) => settle(reject, e));
    res.on('close', () => settle(reject, new Error(`the connection closed before the body of ${res.req?.path ?? 'a read'} ended`)));
  });
}
