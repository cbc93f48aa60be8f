// openInWorker's worker (src/worker-web.js) with the browser disk tier's test hook set
// (wasm/src/opfs/dir.rs `stop_after`): each chunk write stops after its first `stopAfter` bytes
// (this module's query) and never finishes, and the file's name is posted on the
// `insitubatch-opfs-test` BroadcastChannel, so js/test/opfs.test.js can terminate the worker
// mid-write, as a closed tab's worker is.
import '../src/worker-web.js';

const channel = new BroadcastChannel('insitubatch-opfs-test');
self.__insitubatchTierStopAfter = Number(new URL(import.meta.url).searchParams.get('stopAfter'));
self.__insitubatchTierStopped = (name) => channel.postMessage(name);
