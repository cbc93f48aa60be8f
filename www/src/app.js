// What every section of the dashboard shares: the state object (the tests read it as
// `window.__ib`), `$`, the error banner and the progress lines of slow steps.
import { progressLine } from './components.js';

export const $ = (id) => document.getElementById(id);
export const MiB = 1024 * 1024;

/** Everything the page knows; `window.__ib` so tests can read what is shown. */
export const state = {
  url: null,
  explorer: null,
  /** The previews' disk tier (cache.js `openCached`): `{ dir, error }`, or null when off. */
  cache: null,
  arrays: [],
  report: null,
  order: null,
  curve: null,
  error: null,
  preview: { key: null, opts: null, shift: 0, pass: null, history: [], pos: -1, epoch: 0, ended: false, shown: null },
  live: { ds: null, ticks: [], done: null, error: null, stop: false, build: null },
  /** The last probe: its report (or error), and the configuration it measured (`probeKey()`). */
  probe: { report: null, error: null, key: null, stale: false },
  /** The banner's text when it shows a refused configuration (cleared once the controls are accepted again). */
  configError: null,
  /** The errors the banner showed, oldest first (the last 100: the page stays open for long). */
  errors: [],
  /** The progress texts shown when a slow step started (`preview` or `live`), oldest first (the last 100). */
  progress: [],
  /** A watched job: its endpoint, the rows of its last scrape, scrapes so far, the last error;
   * `watch` counts the watches begun, so a read begun for an earlier one is dropped. */
  job: { url: null, rows: [], scrapes: 0, error: null, timer: null, watch: 0 },
};
window.__ib = state;

/** Append `x` to `log`, keeping its last 100 entries. */
function keepLast(log, x) {
  log.push(x);
  if (log.length > 100) log.splice(0, log.length - 100);
}

/**
 * Show `e` in the banner at the top, `context` first (what the page was doing). Every
 * failure the page does not handle itself ends here, and the console gets it too.
 */
export function showError(context, e) {
  const msg = `${context}: ${e?.message ?? String(e)}`;
  keepLast(state.errors, msg);
  $('banner-text').textContent = msg;
  $('banner').dataset.error = msg;
  $('banner').hidden = false;
  console.error(msg);
}

export function clearError() {
  $('banner').hidden = true;
  delete $('banner').dataset.error;
}

/**
 * A progress line that shows how long a slow step has run (the engine reports no chunk
 * counts while it reads a batch), refreshed twice a second; the timer only changes text.
 */
export function timedProgress(box, kind) {
  const line = progressLine(box);
  let timer = null;
  let t0 = 0;
  let text = '';
  const refresh = () => line.set(`${text} … ${((performance.now() - t0) / 1000).toFixed(1)} s`);
  return {
    start(t) {
      text = t;
      t0 = performance.now();
      keepLast(state.progress, { kind, text: t });
      line.start(`${t} …`);
      clearInterval(timer);
      timer = setInterval(refresh, 500);
    },
    set(t, value, max) {
      text = t;
      line.set(t, value, max);
    },
    stop() {
      clearInterval(timer);
      timer = null;
      line.stop();
    },
  };
}

/** A chart's size: its box's width, `height` tall (uPlot draws at a fixed size). */
export function chartSize(box, height) {
  return { width: Math.max(240, Math.floor(box.clientWidth || 480)), height };
}

/**
 * Keep the chart `plot()` returns (none yet is fine) as wide as `box`: charts follow their
 * boxes' widths, and the side panel folds away on narrow screens.
 */
export function followWidth(box, height, plot) {
  new ResizeObserver(() => plot()?.setSize(chartSize(box, height))).observe(box);
}
