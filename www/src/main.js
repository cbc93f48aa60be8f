// The dashboard: open a store, describe and tune a configuration live (no reads), probe the
// store for a predicted epoch, preview real shuffled batches as images, stream an epoch in a
// worker with a live chart, and watch a running job. The controls sit in a side panel
// (index.html), the views beside them; a slow read shows a progress line, and any error (the
// engine's, a dead worker's, an unhandled rejection) the banner at the top.
//
// This module is the wiring: each section is its own module (open.js, tune.js, probe.js,
// preview.js, live.js, watch.js; what they share is app.js), and here their handlers are
// attached and `?store=` / `?demo` are read.
import 'uplot/dist/uPlot.min.css';
import { $, clearError, showError } from './app.js';
import { COMPONENTS_CSS } from './components.js';
import { runLive, stopLive } from './live.js';
import { openStore } from './open.js';
import { guarded, nextBatch, nextEpoch, prevBatch, showBatch } from './preview.js';
import { applyProbe, runProbe } from './probe.js';
import { drawColorbar } from './render.js';
import { scheduleUpdate } from './tune.js';
import { showOrigin, stopWatching, watchJob } from './watch.js';

// What this module exported before the sections moved out, for anything that imports them.
export { human } from './components.js';
export { storeUrl } from './open.js';
export { currentOptions, axisSizesText } from './options.js';

document.head.append(Object.assign(document.createElement('style'), { textContent: COMPONENTS_CSS }));
$('build').textContent = `page ${crossOriginIsolated ? 'is' : 'is not'} cross-origin isolated; describe and preview: one-thread wasm on this page; live run: a worker (threaded build when isolated and available)`;
document.body.dataset.isolated = String(crossOriginIsolated);
$('banner-close').addEventListener('click', clearError);
window.addEventListener('error', (e) => showError('the page failed', e.error ?? e.message));
window.addEventListener('unhandledrejection', (e) => showError('a task failed', e.reason));
drawColorbar($('colorbar'));

// 1. open
$('open-form').addEventListener('submit', (e) => {
  e.preventDefault();
  openStore($('url').value);
});
const DEMO = '/store';
$('open-demo').addEventListener('click', () => {
  $('url').value = new URL(DEMO, location.href).href;
  openStore($('url').value);
});

// 2. describe and tune, the probe
$('controls').addEventListener('input', scheduleUpdate);
$('controls').addEventListener('submit', (e) => e.preventDefault());
$('order-split').addEventListener('change', scheduleUpdate);
$('probe').addEventListener('click', runProbe);
$('probe-apply').addEventListener('click', applyProbe);

// 3. preview
$('next-batch').addEventListener('click', guarded(nextBatch));
$('prev-batch').addEventListener('click', prevBatch);
$('next-epoch').addEventListener('click', guarded(nextEpoch));
$('preview-var').addEventListener('change', showBatch);

// 4. live run
$('run').addEventListener('click', runLive);
$('stop').addEventListener('click', stopLive);

// 5. a running job
$('job-form').addEventListener('submit', (ev) => {
  ev.preventDefault();
  watchJob($('job-url').value.trim());
});
$('unwatch').addEventListener('click', stopWatching);
showOrigin();

// `?store=URL` opens a store at load; `?demo` the served demo store.
const params = new URLSearchParams(location.search);
if (params.has('store')) {
  $('url').value = params.get('store');
  openStore(params.get('store'));
} else if (params.has('demo')) {
  $('open-demo').click();
} else {
  $('url').value = new URL(DEMO, location.href).href;
}
