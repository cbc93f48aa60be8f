// The dashboard: open a store, describe and tune a configuration live (no reads), probe the
// store for a predicted epoch, preview real shuffled batches as images, and stream an epoch
// in a worker with a live chart. The
// controls sit in a side panel (index.html), the views beside them; a slow read shows a
// progress line, and any error (the engine's, a dead worker's, an unhandled rejection) the
// banner at the top.
import { openExplorer, openInWorker } from 'insitubatch';
import uPlot from 'uplot';
import 'uplot/dist/uPlot.min.css';
// The package's worker runs unbundled (it picks the threaded or one-thread build at run time,
// and a bundler cannot follow that choice): vite.config.js serves js/src and js/pkg at
// /insitubatch-js/ and copies them into the build, and `openInWorker` is told where.
const workerUrl = new URL('/insitubatch-js/src/worker.js', location.href);
import { drawColorbar, sliceLayout, sliceRange, toFloat } from './render.js';
import { jobTable, parseMetrics, rankRows } from './job.js';
import { COMPONENTS_CSS, batchFigures, drawOrderPlot, hoverText, human, memoryBar, memoryRows, notesList, patchMap, probeView, progressLine, row, splitRows } from './components.js';

const $ = (id) => document.getElementById(id);
const MiB = 1024 * 1024;

export { human };

/** Everything the page knows; `window.__ib` so tests can read what is shown. */
const state = {
  url: null,
  explorer: null,
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
  /** A watched job: its endpoint, the rows of its last scrape, scrapes so far, the last error. */
  job: { url: null, rows: [], scrapes: 0, error: null, timer: null },
};
window.__ib = state;

// ---------- errors and progress ----------

/** Append `x` to `log`, keeping its last 100 entries. */
function keepLast(log, x) {
  log.push(x);
  if (log.length > 100) log.splice(0, log.length - 100);
}

/**
 * Show `e` in the banner at the top, `context` first (what the page was doing). Every
 * failure the page does not handle itself ends here, and the console gets it too.
 */
function showError(context, e) {
  const msg = `${context}: ${e?.message ?? String(e)}`;
  keepLast(state.errors, msg);
  $('banner-text').textContent = msg;
  $('banner').dataset.error = msg;
  $('banner').hidden = false;
  console.error(msg);
}

function clearError() {
  $('banner').hidden = true;
  delete $('banner').dataset.error;
}

/**
 * A progress line that shows how long a slow step has run (the engine reports no chunk
 * counts while it reads a batch), refreshed twice a second; the timer only changes text.
 */
function timedProgress(box, kind) {
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

// ---------- 1. open ----------

/**
 * An `http(s)://` URL for what the user typed. `s3://bucket/key` and `gs://bucket/key` are
 * read anonymously over HTTPS (public buckets); an endpoint option gives path-style URLs
 * (MinIO, R2, moto, ...). Credentials never go into a page.
 */
export function storeUrl(text, { endpoint, region } = {}) {
  const t = text.trim();
  const m = /^(s3|gs):\/\/([^/]+)\/?(.*)$/.exec(t);
  if (!m) {
    if (/^https?:\/\//.test(t)) return t.replace(/\/+$/, '');
    return new URL(t, location.href).href.replace(/\/+$/, '');
  }
  const [, scheme, bucket, key] = m;
  const path = key.replace(/\/+$/, '');
  if (endpoint) return `${endpoint.replace(/\/+$/, '')}/${bucket}/${path}`;
  if (scheme === 'gs') return `https://storage.googleapis.com/${bucket}/${path}`;
  return `https://${bucket}.s3.${region || 'us-east-1'}.amazonaws.com/${path}`;
}

async function openStore(text) {
  const status = $('status');
  let url;
  try {
    url = storeUrl(text, { endpoint: $('s3-endpoint').value.trim(), region: $('s3-region').value.trim() });
  } catch (e) {
    status.textContent = `not a URL: ${e.message}`;
    return;
  }
  status.textContent = `opening ${url} …`;
  status.className = '';
  const vars = $('open-vars').value.split(',').map((s) => s.trim()).filter(Boolean);
  try {
    state.explorer?.close();
    closePreview();
    state.explorer = await openExplorer(url, vars.length ? { variables: vars } : {});
    state.url = url;
    state.arrays = state.explorer.arrays();
  } catch (e) {
    state.explorer = null;
    status.textContent = e.message;
    status.className = 'error';
    showError('opening the store failed', e);
    return;
  }
  clearError();
  resetProbe();
  status.textContent = `opened ${url}`;
  status.dataset.url = url;
  showArrays();
  buildVariableChoices();
  for (const id of ['store-section', 'controls-section', 'tune-section', 'preview-section', 'live-section']) $(id).hidden = false;
  update();
}

function showArrays() {
  const body = $('arrays').querySelector('tbody');
  body.replaceChildren(
    ...state.arrays.map((a) => {
      const tr = document.createElement('tr');
      tr.dataset.path = a.path;
      tr.dataset.role = a.coordinate ? 'coordinate' : 'data';
      const cells = [
        a.path,
        a.coordinate ? 'coordinate (skipped)' : 'data',
        `[${a.shape.join(', ')}]`,
        `[${a.chunks.join(', ')}]`,
        a.shard ? `[${a.shard.join(', ')}]` : '–',
        a.dtype,
        a.codecs.join(', '),
        (a.dimension_names ?? []).map((d) => d ?? '?').join(', '),
      ];
      for (const c of cells) {
        const td = document.createElement('td');
        td.textContent = c;
        tr.append(td);
      }
      return tr;
    }),
  );
  $('arrays').hidden = false;
}

function buildVariableChoices() {
  const box = $('vars');
  const data = state.arrays.filter((a) => !a.coordinate);
  box.replaceChildren(
    ...data.map((a) => {
      const l = document.createElement('label');
      l.className = 'check';
      const i = document.createElement('input');
      i.type = 'checkbox';
      i.name = 'var';
      i.value = a.path;
      i.checked = true;
      l.append(i, ` ${a.path}`);
      return l;
    }),
  );
  const sel = $('preview-var');
  sel.replaceChildren(...data.map((a) => new Option(a.path, a.path)));
}

// ---------- 2. describe and tune ----------

function num(id) {
  const v = $(id).value.trim();
  return v === '' ? undefined : Number(v);
}

/**
 * `lat=45,lon=90` (the CLI's `--patch` spelling) as `[axis, size]` pairs, in the order
 * typed (the order of `patchOrigins`' columns): a name, or digits for an axis index. Empty
 * text is `undefined`; anything else not AXIS=SIZE is an error naming `what`. The engine
 * checks the rest (an axis no variable has, a size beyond the axis).
 */
export function parseAxisSizes(text, what) {
  const t = text.trim();
  if (t === '') return undefined;
  return t.split(',').map((part) => {
    const m = /^\s*([^=\s]+)\s*=\s*(\d+)\s*$/.exec(part);
    if (!m) throw new Error(`${what}: ${JSON.stringify(part.trim())} is not AXIS=SIZE; write sizes as lat=45,lon=90 (a dimension name or an axis index)`);
    return [/^\d+$/.test(m[1]) ? Number(m[1]) : m[1], Number(m[2])];
  });
}

/**
 * The patch options of the controls (`patch`, `patchMode`, and the stride of a grid or the
 * patches per sample of a random draw); none without a patch size, as the engine asks.
 */
function patchOptions() {
  const patch = parseAxisSizes($('patch').value, 'patch size');
  const random = $('patchMode').value === 'random';
  // Each mode's own knob only: the other is disabled, and the engine refuses it.
  $('patchStride').disabled = random;
  $('patchesPerSample').disabled = !random;
  if (!patch) return {};
  return random
    ? { patch, patchMode: 'random', patchesPerSample: num('patchesPerSample') }
    : { patch, patchMode: 'grid', patchStride: parseAxisSizes($('patchStride').value, 'patch stride') };
}

/** The configuration the controls describe, in `open()`'s option names (an Error for unparsable patch text). */
export function currentOptions() {
  const variables = [...document.querySelectorAll('input[name=var]:checked')].map((i) => i.value);
  const budget = num('budgetMiB');
  return {
    ...patchOptions(),
    variables,
    batchSize: num('batchSize'),
    blockChunks: num('blockChunks'),
    firstBlockChunks: num('firstBlockChunks'),
    maxInflight: num('maxInflight'),
    prefetchDepth: num('prefetchDepth'),
    fractions: [num('fracTrain') ?? 0, num('fracVal') ?? 0, num('fracTest') ?? 0],
    seed: num('seed'),
    shuffle: $('shuffle').checked,
    cacheBudgetBytes: budget === undefined ? undefined : Math.round(budget * MiB),
  };
}

function whatIf() {
  return { epoch: num('epoch') ?? 0, iterations: num('iterations') ?? 1, threads: num('threads') ?? 1, shift: num('shift') ?? 0 };
}

let pending = false;
function scheduleUpdate() {
  if (pending) return;
  pending = true;
  requestAnimationFrame(() => {
    pending = false;
    update();
  });
}

function update() {
  if (!state.explorer) return;
  const w = whatIf();
  const err = $('config-error');
  let opts;
  try {
    opts = currentOptions();
    state.report = state.explorer.describe(opts, w);
    $('describe-text').textContent = state.explorer.describeText(opts, w);
    state.error = null;
    err.textContent = '';
    // A refusal the banner showed is answered once the controls describe a dataset again.
    if ($('banner').dataset.error === state.configError) clearError();
    state.configError = null;
  } catch (e) {
    state.error = e.message;
    err.textContent = e.message;
    // The banner too: a refused patch (an axis no variable has, a size beyond the axis) is
    // the engine's error, and the preview and live run would meet it next.
    showError('the configuration was refused', e);
    state.configError = $('banner').dataset.error;
    document.body.dataset.describeGen = String(Number(document.body.dataset.describeGen ?? 0) + 1);
    return;
  }
  showReport(state.report);
  try {
    showQualityCurve(opts, w);
    showOrder(opts, w);
  } catch (e) {
    err.textContent = e.message;
  }
  markProbe();
  // A counter the tests wait on: the report on screen is for the controls as they are now.
  document.body.dataset.describeGen = String(Number(document.body.dataset.describeGen ?? 0) + 1);
}

function showReport(r) {
  const m = r.memory;
  $('memory').querySelector('tbody').replaceChildren(...memoryRows(m));
  $('memory-bar').replaceChildren(memoryBar(m));
  $('mem-peak-big').textContent = `estimated peak ${human(m.estimated_peak_bytes)}`;
  const c = r.config;
  $('splits').querySelector('tbody').replaceChildren(...splitRows(c));
  $('quality').textContent = c.shuffle_quality.toFixed(3);
  $('quality').dataset.value = String(c.shuffle_quality);
  $('var-report').querySelector('tbody').replaceChildren(
    ...r.variables.map((v) => {
      const tr = document.createElement('tr');
      tr.dataset.label = v.label;
      for (const t of [
        v.label,
        human(v.slot_bytes),
        `${v.stored_chunks_per_chunk} × ${human(v.stored_chunk_bytes)}`,
        `${v.ragged_multiplier.toFixed(3)}×`,
        human(v.gather_run_bytes),
      ]) {
        const td = document.createElement('td');
        td.textContent = t;
        tr.append(td);
      }
      return tr;
    }),
  );
  $('notes').replaceChildren(...notesList(r.notes));
}

/** A chart's size: its box's width, `height` tall (uPlot draws at a fixed size). */
function chartSize(box, height) {
  return { width: Math.max(240, Math.floor(box.clientWidth || 480)), height };
}

// Charts follow their boxes' widths (the side panel folds away on narrow screens).
const resizer = new ResizeObserver(() => {
  if (qualityPlot) qualityPlot.setSize(chartSize($('quality-chart'), 260));
  if (livePlot) livePlot.setSize(chartSize($('live-chart'), 260));
});
resizer.observe($('quality-chart'));
resizer.observe($('live-chart'));

let qualityPlot;
function showQualityCurve(opts, w) {
  const trainChunks = state.report.config.split_chunks.find(([n]) => n === 'train')?.[1] ?? 1;
  const values = new Set([opts.blockChunks ?? 16]);
  for (let v = 1; v <= Math.max(1, trainChunks); v *= 2) values.add(v);
  values.add(Math.max(1, trainChunks));
  const xs = [...values].sort((a, b) => a - b);
  state.curve = state.explorer.qualityCurve(opts, xs, w);
  const data = [xs, state.curve.map((p) => p.quality), state.curve.map((p) => p.estimated_peak_bytes / MiB)];
  if (!qualityPlot) {
    qualityPlot = new uPlot(
      {
        ...chartSize($('quality-chart'), 260),
        legend: { live: false },
        scales: { x: { distr: 3, time: false }, q: { range: [0, 1] }, mb: {} },
        series: [
          { label: 'block chunks' },
          { label: 'shuffle quality', scale: 'q', stroke: '#21918c', width: 2, points: { size: 6 } },
          { label: 'est. peak MiB', scale: 'mb', stroke: '#440154', dash: [4, 3], points: { size: 5 } },
        ],
        axes: [{ label: 'block chunks' }, { scale: 'q', label: 'quality' }, { scale: 'mb', side: 1, label: 'MiB', grid: { show: false } }],
      },
      data,
      $('quality-chart'),
    );
  } else {
    qualityPlot.setData(data);
  }
}

function showOrder(opts, w) {
  const split = $('order-split').value;
  const o = state.explorer.drawOrder(opts, split, { epoch: w.epoch, shift: w.shift });
  state.order = o;
  $('order-caption').textContent = drawOrderPlot($('order'), o, split);
}

// ---------- probe ----------

const probeProgress = timedProgress($('probe-progress'), 'probe');

/** What a probe depends on: the store, the options and the what-if's epoch, shift and threads. */
function probeKey() {
  const w = whatIf();
  let opts;
  try {
    opts = currentOptions();
  } catch (e) {
    opts = e.message; // unparsable controls: no probe is for them
  }
  return JSON.stringify([state.url, opts, w.epoch, w.shift, w.threads]);
}

function resetProbe() {
  Object.assign(state.probe, { report: null, error: null, key: null, stale: false });
  $('probe-report').replaceChildren();
  $('probe-state').textContent = '';
  delete $('probe-state').dataset.state;
  $('probe-apply').disabled = true;
  $('probe-apply').textContent = 'Apply the suggestion';
}

/**
 * Say when the probe on screen measured another configuration than the controls now show
 * (a prediction is only for what was probed), so its numbers are not read as this one's.
 */
function markProbe() {
  const P = state.probe;
  if (!P.report) return;
  P.stale = P.key !== probeKey();
  $('probe-report').dataset.stale = String(P.stale);
  $('probe-state').textContent = P.stale ? 'the configuration changed since this probe: probe again for its prediction' : 'for the configuration above';
}

/**
 * Probe the store for the controls as they are: the explorer reads a few chunks on this page
 * (one thread; the decode rate is scaled to the decode threads asked about), then the page
 * shows what was measured, the predicted epoch and the suggestion, ready to apply.
 */
async function runProbe() {
  const P = state.probe;
  const w = whatIf();
  const chunks = num('probe-chunks');
  const st = $('probe-state');
  $('probe').disabled = true;
  $('probe-apply').disabled = true;
  st.dataset.state = 'running';
  st.textContent = '';
  probeProgress.start(`probing the store (train, epoch ${w.epoch}${chunks ? `, ${chunks} chunks at once` : ''})`);
  const key = probeKey();
  try {
    const r = await state.explorer.probe(currentOptions(), { epoch: w.epoch, shift: w.shift, threads: w.threads, chunks });
    Object.assign(P, { report: r, error: null, key });
    $('probe-report').replaceChildren(probeView(r));
    $('probe-apply').textContent = `Apply the suggestion (max in-flight ${r.suggested_max_inflight}, block chunks ${r.suggested_block_chunks})`;
    $('probe-apply').disabled = false;
    st.dataset.state = 'done';
    markProbe();
  } catch (e) {
    Object.assign(P, { report: null, error: e.message, key });
    $('probe-report').replaceChildren();
    st.textContent = e.message;
    st.dataset.state = 'error';
    showError('probing the store failed', e);
  } finally {
    probeProgress.stop();
    $('probe').disabled = false;
  }
}

/** Set the controls to the probe's suggestion; the report follows as for any edit. */
function applyProbe() {
  const r = state.probe.report;
  if (!r) return;
  $('maxInflight').value = String(r.suggested_max_inflight);
  $('blockChunks').value = String(r.suggested_block_chunks);
  $('controls').dispatchEvent(new Event('input', { bubbles: true }));
}

// ---------- 3. preview ----------

function closePreview() {
  const p = state.preview;
  p.pass?.close();
  Object.assign(p, { key: null, pass: null, history: [], pos: -1, ended: false, opts: null, shift: 0 });
}

/** The preview reads through the explorer: no second metadata round trip, and windows work. */
async function previewDataset() {
  const opts = currentOptions();
  const shift = whatIf().shift;
  const key = JSON.stringify([state.url, opts, shift]);
  const p = state.preview;
  if (p.pass && p.key === key) return p;
  closePreview();
  Object.assign(p, { key, opts, shift, epoch: whatIf().epoch });
  startEpoch();
  return p;
}

function startEpoch() {
  const p = state.preview;
  p.pass?.close();
  p.pass = state.explorer.iter(p.opts, 'train', { epoch: p.epoch, shift: p.shift });
  p.history = [];
  p.pos = -1;
  p.ended = false;
}

const previewProgress = timedProgress($('preview-progress'), 'preview');

async function nextBatch() {
  const p = await previewDataset();
  if (p.pos < p.history.length - 1) {
    p.pos += 1;
  } else {
    const n = (p.history.at(-1)?.index ?? -1) + 2;
    previewProgress.start(`reading batch ${n} of ${p.pass.length ?? '?'} (epoch ${p.epoch})`);
    let b;
    try {
      b = await p.pass.next();
    } finally {
      previewProgress.stop();
    }
    if (b === undefined) {
      p.ended = true;
      $('preview-pos').textContent = `end of epoch ${p.epoch} (${p.history.length} batches): press “next epoch”`;
      $('preview-pos').dataset.ended = 'true';
      return;
    }
    p.history.push(b);
    if (p.history.length > 16) p.history.shift();
    p.pos = p.history.length - 1;
  }
  showBatch();
}

function showIndexControls(inner) {
  const layout = sliceLayout(inner);
  const box = $('preview-indices');
  const want = layout.extraShape.map((d, i) => `${i}:${d}`).join(',');
  if (box.dataset.shape !== want) {
    box.dataset.shape = want;
    box.replaceChildren(
      ...layout.extraShape.map((d, i) => {
        const l = document.createElement('label');
        const s = document.createElement('input');
        s.type = 'number';
        s.min = '0';
        s.max = String(d - 1);
        s.value = '0';
        s.dataset.axis = String(i);
        s.addEventListener('input', showBatch);
        l.append(`index ${i + 1} (0..${d - 1}) `, s);
        return l;
      }),
    );
  }
  return layout;
}

/** The label of `label`'s target in a view shifted by `shift` (as wasm/src/explore.rs names it). */
function targetLabel(label, shift) {
  return `${label}@${shift > 0 ? '+' : ''}${shift}`;
}

function showBatch() {
  const p = state.preview;
  const b = p.history[p.pos];
  if (!b) return;
  const label = $('preview-var').value || Object.keys(b.arrays)[0];
  const arr = b.arrays[label];
  if (!arr) return;
  // A windowed view shows input and target side by side, on one colour scale.
  const labels = p.shift ? [label, targetLabel(label, p.shift)] : [label];
  const inner = arr.shape.slice(1);
  const layout = showIndexControls(inner);
  const extra = [...$('preview-indices').querySelectorAll('input')].map((i) => Number(i.value) || 0);
  const values = labels.map((l) => toFloat(b.arrays[l]));
  const rows = arr.shape[0];
  let [vmin, vmax] = [Infinity, -Infinity];
  for (const v of values) {
    const [lo, hi] = sliceRange(v, layout, rows, extra);
    [vmin, vmax] = [Math.min(vmin, lo), Math.max(vmax, hi)];
  }
  const cb = $('colorbar');
  cb.dataset.vmin = String(vmin);
  cb.dataset.vmax = String(vmax);
  $('cb-min').textContent = vmin.toPrecision(5);
  $('cb-max').textContent = vmax.toPrecision(5);
  const units = state.arrays.find((a) => a.path === label)?.attributes?.units;
  $('cb-units').textContent = units ? String(units) : '';
  const hover = $('hover-value');
  const onHover = (h) => {
    hover.textContent = hoverText(h, units);
    if (h) Object.assign(hover.dataset, { label: h.label, sample: String(h.sample), x: String(h.x), y: String(h.y), value: String(h.value) });
  };
  onHover(null);
  const figs = batchFigures(b, { labels, values, layout, extra, vmin, vmax, shift: p.shift, onHover });
  showPatchMap(b, label, arr.shape, p.opts, figs);
  const box = $('batch');
  box.replaceChildren(...figs);
  box.dataset.label = label;
  box.dataset.batch = String(b.index);
  box.dataset.epoch = String(b.epoch);
  p.shown = {
    label, labels, batch: b.index, epoch: b.epoch, sampleIndices: [...b.sampleIndices].map(Number), vmin, vmax, extra, shift: p.shift,
    patchDims: b.patchDims ?? null,
    patchOrigins: b.patchOrigins ? [...b.patchOrigins].map(Number) : null,
  };
  $('preview-pos').textContent = `epoch ${b.epoch}, batch ${b.index + 1} of ${p.pass?.length ?? '?'} (${rows} samples, ${labels.join(' | ')} [${inner.join(', ')}])`;
  $('preview-pos').dataset.ended = 'false';
}

/**
 * A patched batch's patch map above its pictures (`patchMap`: each row's patch in the field,
 * paired with its picture on hover); hidden for whole samples. A variable without the
 * patched axes is read whole, its rows repeated per patch: the map says so instead.
 */
function showPatchMap(b, label, shape, opts, figs) {
  const box = $('patch-map');
  const meta = state.arrays.find((a) => a.path === label);
  const map = meta && patchMap(b, { meta, shape, mode: opts.patchMode, stride: opts.patchStride, figures: figs });
  const whole = b.patchOrigins && !map ? [Object.assign(document.createElement('p'), { className: 'muted small', textContent: `${label} has no ${b.patchDims.join(', ')} axes: each row is its whole sample, repeated for each patch` })] : [];
  box.replaceChildren(...(map ? [map] : whole));
  box.hidden = !map && !whole.length;
}

// ---------- 4. live run ----------

let livePlot;
const liveProgress = timedProgress($('live-progress'), 'live');
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function liveChart() {
  const data = [[], [], [], []];
  if (!livePlot) {
    livePlot = new uPlot(
      {
        ...chartSize($('live-chart'), 260),
        legend: { live: false },
        scales: { x: { time: false }, mbs: {}, q: { range: (u, lo, hi) => [0, Math.max(1, hi)] } },
        series: [
          { label: 's' },
          { label: 'MB/s', scale: 'mbs', stroke: '#21918c', width: 2 },
          { label: 'batches waiting (queue depth)', scale: 'q', stroke: '#440154', width: 1.5, paths: uPlot.paths.stepped({ align: 1 }) },
          { label: 'asks that found a batch ready (0..1)', scale: 'q', stroke: '#e0b000', width: 1.5 },
        ],
        axes: [{ label: 'seconds' }, { scale: 'mbs', label: 'MB/s' }, { scale: 'q', side: 1, grid: { show: false } }],
      },
      data,
      $('live-chart'),
    );
  } else {
    livePlot.setData(data);
  }
  return data;
}

/**
 * One epoch in a worker (`openInWorker`: the threaded build where the page is isolated and
 * it is available, else one thread), batches moved to the page as a training loop would
 * get them; a tick every 100 ms with MB/s, the queue depth and samples, and the stage that
 * limits so far; the pass report at the end.
 */
async function runLive() {
  const L = state.live;
  Object.assign(L, { ticks: [], done: null, error: null, stop: false });
  $('run').disabled = true;
  $('stop').disabled = false;
  const st = $('live-state');
  st.textContent = 'starting the worker …';
  st.dataset.state = 'running';
  $('pass-report').replaceChildren();
  for (const id of ['live-mbps', 'live-queue', 'live-stage', 'live-batches']) $(id).textContent = '–';
  liveProgress.start('starting the worker');
  const data = liveChart();
  const stepMs = num('step-ms') ?? 0;
  const split = $('live-split').value;
  let ds;
  try {
    // The what-if's window too: the worker reads the same view the preview shows.
    ds = await openInWorker(state.url, { ...currentOptions(), shift: whatIf().shift || undefined }, { threads: 'auto', workerUrl });
    L.ds = ds;
    await ds.setEpoch(whatIf().epoch);
    const pass = ds.iter(split);
    const total = await pass.size();
    liveProgress.set(`0 of ${total} batches`, 0, total);
    L.build = { build: ds.build, threads: ds.threads };
    L.labels = ds.labels;
    st.textContent = `streaming ${total} batches of ${split} (${ds.build} build, ${ds.threads} decode thread${ds.threads === 1 ? '' : 's'})${whatIf().shift ? `; windowed: ${ds.labels.length} labels, targets ${whatIf().shift} samples on` : ''}`;
    const t0 = performance.now();
    let last = { t: t0, bytes: 0, asks: 0, empty: 0 };
    let bytes = 0;
    let batches = 0;
    const tick = async (now) => {
      const s = await pass.stats();
      if (!s) return;
      const d = s.depths;
      const asks = d.queue_samples - last.asks;
      const m = {
        t: (now - t0) / 1000,
        mbps: (bytes - last.bytes) / 1e6 / Math.max((now - last.t) / 1000, 1e-6),
        // The engine samples its queue whenever the loop asks for a batch: how often one
        // was already waiting; and how many batches wait right now.
        readyShare: asks > 0 ? 1 - (d.queue_empty - last.empty) / asks : null,
        queueNow: d.queue_now,
        queueCap: d.queue_capacity,
        stage: s.limiting_stage,
        batches,
        total,
      };
      last = { t: now, bytes, asks: d.queue_samples, empty: d.queue_empty };
      L.ticks.push(m);
      data[0].push(m.t);
      data[1].push(m.mbps);
      data[2].push(m.queueNow);
      data[3].push(m.readyShare);
      livePlot.setData(data);
      $('live-stage').textContent = m.stage;
      $('live-mbps').textContent = `${m.mbps.toFixed(1)} MB/s`;
      $('live-queue').textContent = `${m.queueNow} of ${m.queueCap}`;
      $('live-batches').textContent = `${batches} of ${total}`;
      liveProgress.set(`${batches} of ${total} batches`, batches, total);
      st.textContent = `${batches} of ${total} batches (${ds.build} build, ${ds.threads} thread${ds.threads === 1 ? '' : 's'})`;
    };
    for (;;) {
      const b = await pass.next();
      if (b === undefined) break;
      for (const a of Object.values(b.arrays)) bytes += a.data.byteLength;
      batches += 1;
      const now = performance.now();
      if (now - last.t >= 100 || batches === total) await tick(now);
      if (L.stop) {
        await pass.close();
        break;
      }
      if (stepMs > 0) await sleep(stepMs);
    }
    const stats = await ds.lastPass();
    L.done = { stats, batches, bytes, wall: (performance.now() - t0) / 1000, stopped: L.stop };
    $('live-stage').textContent = stats.limiting_stage;
    $('live-mbps').textContent = `${(stats.batch_bytes / 1e6 / Math.max(stats.wall_s, 1e-9)).toFixed(1)} MB/s`;
    $('live-batches').textContent = `${batches} of ${total}`;
    st.textContent = `${L.stop ? 'stopped' : 'done'}: ${batches} batches (${ds.build} build, ${ds.threads} thread${ds.threads === 1 ? '' : 's'})`;
    st.dataset.state = 'done';
    showPassReport(stats, L.done);
  } catch (e) {
    L.error = e.message;
    st.textContent = e.message;
    st.dataset.state = 'error';
    showError('the live run failed', e);
  } finally {
    liveProgress.stop();
    // A dead worker cannot answer a close: its failure is already on screen.
    await ds?.close().catch(() => {});
    L.ds = null;
    $('run').disabled = false;
    $('stop').disabled = true;
  }
}

function showPassReport(s, m) {
  const t = document.createElement('table');
  t.id = 'pass-table';
  const body = document.createElement('tbody');
  const rows = [
    ['limiting stage', s.limiting_stage, 'limiting_stage'],
    ['advice', s.advice, 'advice'],
    ['batches / samples', `${s.batches} / ${s.samples}`, 'batches'],
    ['delivered', `${human(s.batch_bytes)} in ${s.wall_s.toFixed(3)} s = ${(s.batch_bytes / 1e6 / Math.max(s.wall_s, 1e-9)).toFixed(1)} MB/s`, 'mbps'],
    ['time to first batch', `${s.ttfb_s.toFixed(3)} s`, 'ttfb'],
    ['storage reads / decoded', `${s.storage_reads} / ${human(s.decoded_bytes)}`, 'reads'],
    ['cache hits / misses / re-reads', `${s.cache_hits} / ${s.cache_misses} / ${s.reread_chunks}`, 'cache'],
    ['consumer waited on', s.blocked_s.map(([k, v]) => `${k} ${v.toFixed(3)} s`).join(', ') || 'nothing', 'blocked'],
    ['stage totals (task-seconds)', Object.entries(s.times).map(([k, v]) => `${k} ${v.toFixed(3)}`).join(', '), 'times'],
    ['depths', `queue peak ${s.depths.queue_peak}/${s.depths.queue_capacity}, in flight peak ${s.depths.inflight_peak}/${s.depths.max_inflight}, resident peak ${human(s.depths.resident_peak_bytes)} of ${human(s.depths.budget_bytes)}`, 'depths'],
  ];
  body.append(...rows.map(([k, v, key]) => row(k, v, { key })));
  t.append(body);
  const pre = document.createElement('details');
  pre.innerHTML = '<summary>pass report (JSON)</summary>';
  const code = document.createElement('pre');
  code.textContent = JSON.stringify(s, null, 2);
  pre.append(code);
  $('pass-report').replaceChildren(t, pre);
  $('pass-report').dataset.batches = String(m.batches);
}

// ---------- wiring ----------

document.head.append(Object.assign(document.createElement('style'), { textContent: COMPONENTS_CSS }));
$('build').textContent = `page ${crossOriginIsolated ? 'is' : 'is not'} cross-origin isolated; describe and preview: one-thread wasm on this page; live run: a worker (threaded build when isolated and available)`;
document.body.dataset.isolated = String(crossOriginIsolated);
$('banner-close').addEventListener('click', clearError);
window.addEventListener('error', (e) => showError('the page failed', e.error ?? e.message));
window.addEventListener('unhandledrejection', (e) => showError('a task failed', e.reason));
drawColorbar($('colorbar'));
$('open-form').addEventListener('submit', (e) => {
  e.preventDefault();
  openStore($('url').value);
});
const DEMO = '/store';
$('open-demo').addEventListener('click', () => {
  $('url').value = new URL(DEMO, location.href).href;
  openStore($('url').value);
});
$('controls').addEventListener('input', scheduleUpdate);
$('controls').addEventListener('submit', (e) => e.preventDefault());
$('order-split').addEventListener('change', scheduleUpdate);
const guard = (f) => async () => {
  try {
    await f();
  } catch (e) {
    $('preview-pos').textContent = e.message;
    $('preview-pos').dataset.error = e.message;
    showError('reading a preview batch failed', e);
  }
};
$('next-batch').addEventListener('click', guard(nextBatch));
$('prev-batch').addEventListener('click', () => {
  const p = state.preview;
  if (p.pos > 0) {
    p.pos -= 1;
    showBatch();
  }
});
$('next-epoch').addEventListener('click', guard(async () => {
  const p = await previewDataset();
  p.epoch += 1;
  startEpoch();
  await nextBatch();
}));
$('preview-var').addEventListener('change', showBatch);
$('run').addEventListener('click', runLive);
$('probe').addEventListener('click', runProbe);
$('probe-apply').addEventListener('click', applyProbe);
$('stop').addEventListener('click', () => {
  state.live.stop = true;
});

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

// ---------- 5. a running job ----------

/** How often a watched job's endpoint is read (its series change when a pass ends). */
const JOB_POLL_MS = 2000;

/** Read the watched endpoint once and show its ranks. */
async function scrapeJob() {
  const J = state.job;
  try {
    const r = await fetch(J.url, { cache: 'no-store' });
    if (!r.ok) throw new Error(`HTTP ${r.status} from ${J.url}`);
    J.rows = rankRows(parseMetrics(await r.text()));
    J.scrapes += 1;
    J.error = null;
    $('job-table').replaceChildren(jobTable(J.rows));
    const rows = `${J.rows.length} rank and split row${J.rows.length === 1 ? '' : 's'}`;
    $('job-state').textContent = J.rows.length
      ? `${rows} (per s, p95 wait and limit: each row's last pass), read ${new Date().toLocaleTimeString()}`
      : 'the job has not finished a pass yet';
    $('job-state').dataset.state = 'ok';
    $('job-state').dataset.scrapes = String(J.scrapes);
  } catch (e) {
    J.error = e.message;
    $('job-state').textContent = `cannot read ${J.url}: ${e.message}`;
    $('job-state').dataset.state = 'error';
  }
}

function stopWatching() {
  clearInterval(state.job.timer);
  state.job.timer = null;
  $('unwatch').disabled = true;
}

$('job-form').addEventListener('submit', (ev) => {
  ev.preventDefault();
  stopWatching();
  const url = $('job-url').value.trim();
  if (!url) return;
  Object.assign(state.job, { url, rows: [], scrapes: 0, error: null });
  $('unwatch').disabled = false;
  scrapeJob();
  state.job.timer = setInterval(scrapeJob, JOB_POLL_MS);
});
$('unwatch').addEventListener('click', stopWatching);
