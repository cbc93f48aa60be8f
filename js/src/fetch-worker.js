// The threaded build's fetch worker (started by src/web-threads.js): it takes the engine's
// chunk reads off the engine's thread. It shares the engine's `WebAssembly.Memory` (shared
// memory, so the threaded build only) and writes each response body straight into the
// buffer the engine allocated for it (wasm/src/storage.rs `off_thread`), so the engine's
// thread neither drains the body nor copies it.
//
// Messages in: { memory } once, first; { id, url, range, ptr, len } a read (`range`, the
// Range header, undefined for a whole object) of `len` bytes into memory at `ptr` (`len` 0:
// the length is not known, no buffer); { abort: id } (the engine dropped that read). Out,
// one per read: { id, status, statusText, written } (the body is in place); { id, status,
// statusText, body } (an ArrayBuffer, transferred: no buffer, or the server sent the whole
// object, status 200, which may not fit at `ptr`); { id, status, statusText, overflow: true,
// received } (a 206 longer than its range, `received` the bytes seen when it stopped; nothing
// past `len` was written); { id, status, statusText } (not 2xx, body not read); { id, error }
// (a network error, or aborted). Every read gets exactly one reply, and
// none is written to memory after it: the engine frees the buffer on the reply.

let memory;
const reads = new Map(); // id -> AbortController

async function read({ id, url, range, ptr, len }) {
  const ctl = new AbortController();
  reads.set(id, ctl);
  try {
    const resp = await fetch(url, { headers: range === undefined ? {} : { Range: range }, signal: ctl.signal });
    const head = { id, status: resp.status, statusText: resp.statusText };
    if (resp.status < 200 || resp.status >= 300) {
      await resp.body?.cancel();
      return self.postMessage(head);
    }
    if (resp.status !== 206 || len === 0) {
      const body = await resp.arrayBuffer();
      return self.postMessage({ ...head, body }, [body]);
    }
    const reader = resp.body.getReader();
    let written = 0;
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      if (written + value.length > len) {
        await reader.cancel();
        return self.postMessage({ ...head, overflow: true, received: written + value.length });
      }
      // `memory.buffer` each time: the memory may have grown (a new, longer view of it).
      new Uint8Array(memory.buffer, ptr + written, value.length).set(value);
      written += value.length;
    }
    self.postMessage({ ...head, written });
  } catch (e) {
    self.postMessage({ id, error: ctl.signal.aborted ? 'aborted' : String(e?.message ?? e) });
  } finally {
    reads.delete(id);
  }
}

self.addEventListener('message', ({ data: m }) => {
  // Tests only (src/web-threads.js `__debugFailFetchWorker`): fail as a broken worker would.
  if (m.debugFail) throw new Error('the fetch worker failed on purpose (__debugFailFetchWorker)');
  if (m.memory) memory = m.memory;
  else if (m.abort !== undefined) reads.get(m.abort)?.abort();
  else read(m);
});
