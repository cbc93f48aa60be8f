// The notebook widget's front end (anywidget; the Python side is
// python-bindings/python/insitubatch_rs/widgets.py). The wasm engine runs in the notebook's
// browser tab with the dashboard's knobs and shows the describe report and its notes, the draw
// order and real shuffled batches with a colour bar (a patched batch with its patch map),
// drawn by the dashboard's own components; a button probes the store for a predicted epoch.
//
// Where the store is read: a public http(s) store is fetched by the browser; any other
// (local path, private bucket, a store object) through the kernel, by a storage object
// whose get/list calls are custom widget messages answered with binary buffers. Either way
// the preview's decoded chunks are kept in the tab's private file system (cache.js), so a
// re-rendered widget (a reload) previews them again without reading the store.
//
// Bundled with esbuild into the Python package (scripts/test-widget.sh); the engine's .wasm
// comes from the kernel as the `_wasm` bytes trait, so the bundle needs no URL of its own.
import { initialize, openExplorer } from 'insitubatch';
import { cacheText, openCached } from './cache.js';
import { drawColorbar, sliceLayout, sliceRange, toFloat } from './render.js';
import { COMPONENTS_CSS, batchFigures, drawOrderPlot, hoverText, human, memoryBar, memoryRows, notesList, patchMap, probeView, progressLine, row, splitRows } from './components.js';

const CSS = `
.ib-widget { font: 13px system-ui, sans-serif; color: #222; }
.ib-widget h4 { margin: 10px 0 4px; }
.ib-widget .ib-cols { display: flex; flex-wrap: wrap; gap: 16px; align-items: flex-start; }
.ib-widget table { border-collapse: collapse; }
.ib-widget th { text-align: left; font-weight: normal; color: #555; padding-right: 10px; white-space: pre; }
.ib-widget pre { max-height: 260px; overflow: auto; background: #f7f7f7; padding: 6px; margin: 0; font-size: 11px; }
.ib-widget .ib-grid { display: flex; flex-wrap: wrap; gap: 6px; }
.ib-widget figure { margin: 0; }
.ib-widget figcaption { font-size: 11px; color: #555; }
.ib-widget .pics { display: flex; gap: 2px; }
.ib-widget canvas.ib-sample, .ib-widget .pics canvas { image-rendering: pixelated; }
.ib-widget .ib-error { color: #b00020; white-space: pre-wrap; }
.ib-widget .ib-cb { display: flex; align-items: center; gap: 6px; }
${COMPONENTS_CSS}`;

/**
 * A storage object (`{ get, list, location }`, as `openExplorer` takes) whose reads are
 * answered by the kernel: each call is a `{ type: 'read', id, ... }` message, each answer a
 * `read-reply` with the bytes as its one buffer.
 */
function kernelStorage(model, location) {
  let next = 0;
  const waiting = new Map();
  model.on('msg:custom', (msg, buffers) => {
    if (msg?.type !== 'read-reply') return;
    const w = waiting.get(msg.id);
    if (!w) return;
    waiting.delete(msg.id);
    if (msg.error !== undefined) {
      const e = new Error(msg.error);
      e.transient = Boolean(msg.transient);
      w.reject(e);
    } else if (msg.op === 'list') {
      w.resolve(msg.keys ?? null);
    } else if (msg.missing) {
      w.resolve(null);
    } else {
      const b = buffers[0];
      w.resolve(b instanceof ArrayBuffer ? new Uint8Array(b) : new Uint8Array(b.buffer, b.byteOffset, b.byteLength));
    }
  });
  const ask = (req) =>
    new Promise((resolve, reject) => {
      const id = next++;
      waiting.set(id, { resolve, reject });
      model.send({ type: 'read', id, ...req });
    });
  return {
    location,
    get: (key, range) => ask({ op: 'get', key, range: range ?? null }),
    list: (prefix) => ask({ op: 'list', prefix }),
  };
}

/** The engine's bytes from the `_wasm` trait (a DataView or ArrayBuffer). */
function wasmBytes(model) {
  const w = model.get('_wasm');
  return w instanceof ArrayBuffer ? new Uint8Array(w) : new Uint8Array(w.buffer, w.byteOffset, w.byteLength);
}

function el(tag, props = {}, ...children) {
  const e = Object.assign(document.createElement(tag), props);
  e.append(...children);
  return e;
}

/** The table with a `<tbody>` of `rows`. */
function table(rows) {
  return el('table', {}, el('tbody', {}, ...rows));
}

/**
 * Show one batch of `pass` in `box`: each sample's slice, input | target when windowed; a
 * patched batch's rows are its patches, with the patch map (`meta`: the drawn array's entry
 * of `arrays()`; `options`: the widget's, for the patch mode and stride) above them.
 */
function showBatch(root, box, b, { label, shift, units, meta, options }) {
  const labels = shift ? [label, `${label}@${shift > 0 ? '+' : ''}${shift}`] : [label];
  const arr = b.arrays[label];
  if (!arr) throw new Error(`the batch has no array ${JSON.stringify(label)}; it has ${Object.keys(b.arrays).join(', ')}`);
  const layout = sliceLayout(arr.shape.slice(1));
  const extra = layout.extraShape.map(() => 0);
  const values = labels.map((l) => toFloat(b.arrays[l]));
  let [vmin, vmax] = [Infinity, -Infinity];
  for (const v of values) {
    const [lo, hi] = sliceRange(v, layout, arr.shape[0], extra);
    [vmin, vmax] = [Math.min(vmin, lo), Math.max(vmax, hi)];
  }
  const cb = el('canvas', { height: 12, className: 'ib-colorbar' });
  drawColorbar(cb);
  cb.style.width = '256px';
  cb.style.height = '12px';
  const scale = Math.max(1, Math.floor(160 / layout.width));
  const hover = el('output', { className: 'ib-hover', textContent: hoverText(null) });
  const onHover = (h) => {
    hover.textContent = hoverText(h, units);
  };
  const figs = batchFigures(b, { labels, values, layout, extra, vmin, vmax, shift, scale, onHover });
  const grid = el('div', { className: 'ib-grid' }, ...figs);
  const map = meta ? patchMap(b, { meta, shape: arr.shape, mode: options.patchMode, stride: options.patchStride, figures: figs }) : null;
  box.replaceChildren(
    el('div', { className: 'ib-cb' }, el('span', { textContent: vmin.toPrecision(5) }), cb, el('span', { textContent: `${vmax.toPrecision(5)} ${units ?? ''}` })),
    el('div', { textContent: `epoch ${b.epoch}, batch ${b.index + 1}: ${labels.join(' | ')}, ${arr.shape[0]} samples [${arr.shape.slice(1).join(', ')}]` }),
    hover,
    ...(map ? [map] : []),
    grid,
  );
  Object.assign(box.dataset, { label, batch: String(b.index), epoch: String(b.epoch), vmin: String(vmin), vmax: String(vmax) });
  // The signal tests (and anyone scripting the widget) wait on: a batch is on screen.
  root.dataset.drawn = String(Number(root.dataset.drawn ?? 0) + 1);
  root.dataset.state = 'drawn';
}

/**
 * The live run: one epoch of `split` on this tab's engine (one thread; reads through the
 * kernel when the store is), a progress line per batch, then the pass report's verdict.
 * `root.dataset.run` is `running`, then `done` (or `error`) for anyone waiting on it.
 */
async function liveRun(root, box, explorer, options, split, w) {
  root.dataset.run = 'running';
  // Timed against the store, as a run would read it: not through the preview's cache.
  const pass = explorer.iter(options, split, { ...w, cache: false });
  const line = el('div', { textContent: `0 of ${pass.length} batches` });
  box.replaceChildren(line);
  const t0 = performance.now();
  let [batches, bytes] = [0, 0];
  let stats;
  try {
    for (;;) {
      const b = await pass.next();
      if (b === undefined) break;
      batches += 1;
      for (const a of Object.values(b.arrays)) bytes += a.data.byteLength;
      const s = (performance.now() - t0) / 1000;
      line.textContent = `${batches} of ${pass.length} batches, ${human(bytes)} in ${s.toFixed(2)} s (${(bytes / 1e6 / Math.max(s, 1e-9)).toFixed(1)} MB/s)`;
      // The pass closes itself after its last batch: its report is read before that.
      if (batches === pass.length) stats = pass.stats();
    }
  } finally {
    pass.close();
  }
  const s = (performance.now() - t0) / 1000;
  box.append(
    table([
      row('batches', String(batches), { key: 'batches', value: String(batches) }),
      row('delivered', `${human(bytes)} in ${s.toFixed(2)} s = ${(bytes / 1e6 / Math.max(s, 1e-9)).toFixed(1)} MB/s`, { key: 'mbps' }),
      ...(stats ? [row('limiting stage', stats.limiting_stage, { key: 'limiting_stage' }), row('advice', stats.advice ?? '', { key: 'advice' })] : []),
    ]),
  );
  root.dataset.run = 'done';
}

/**
 * The probe: a few real reads and decodes of the train split for the widget's options, timed
 * in this tab (through the kernel when the store is read there, so the kernel's round trips
 * count, as they would in a live run here), then what it measured, the predicted epoch and
 * the suggestion in the knobs' Python spelling. `root.dataset.probe` is `running`, then
 * `done` or `error` (the message in the box and in `root.dataset.probeError`).
 */
async function probe(root, box, line, explorer, options, w) {
  root.dataset.probe = 'running';
  line.start('probing the store: the first chunk alone, then the next ones at once …');
  try {
    const r = await explorer.probe(options, { epoch: w.epoch ?? 0, shift: w.shift ?? 0, threads: w.threads ?? 1 });
    const apply = `to apply: Preview(..., max_inflight=${r.suggested_max_inflight}, block_chunks=${r.suggested_block_chunks})`;
    box.replaceChildren(probeView(r), el('div', { className: 'ib-probe-apply', textContent: apply }));
    root.dataset.probe = 'done';
  } catch (e) {
    const msg = `probing the store failed: ${e?.message ?? String(e)}`;
    box.replaceChildren(el('div', { className: 'ib-error', textContent: msg }));
    root.dataset.probeError = msg;
    root.dataset.probe = 'error';
  } finally {
    line.stop();
  }
}

async function render({ model, el: host }) {
  const root = el('div', { className: 'ib-widget' });
  root.dataset.state = 'loading';
  const status = el('div', { textContent: 'loading the engine …' });
  const describeBox = el('div');
  const orderCanvas = el('canvas', { width: 640, height: 160 });
  const orderCaption = el('div', { className: 'ib-caption' });
  const batchBox = el('div', { className: 'ib-batch' });
  const progressBox = el('div', { className: 'ib-progress' });
  const progress = progressLine(progressBox);
  const next = el('button', { textContent: 'next batch', disabled: true, className: 'ib-next' });
  const run = el('button', { textContent: 'run the epoch', disabled: true, className: 'ib-run' });
  const runBox = el('div', { className: 'ib-live' });
  const probeButton = el('button', { textContent: 'probe the store', disabled: true, className: 'ib-probe-run' });
  const probeBox = el('div', { className: 'ib-probe-box' });
  const probeProgressBox = el('div', { className: 'ib-progress' });
  const probeLine = progressLine(probeProgressBox);
  root.append(
    el('style', { textContent: CSS }),
    status,
    el('h4', { textContent: 'describe' }),
    describeBox,
    el('h4', { textContent: 'probe ' }, probeButton),
    probeProgressBox,
    probeBox,
    el('h4', { textContent: 'draw order' }),
    orderCanvas,
    orderCaption,
    el('h4', { textContent: 'batch preview ' }, next),
    progressBox,
    batchBox,
    el('h4', { textContent: 'live run ' }, run),
    runBox,
  );
  host.append(root);
  const fail = (e) => {
    status.textContent = e?.message ?? String(e);
    status.className = 'ib-error';
    root.dataset.state = 'error';
    root.dataset.error = status.textContent;
  };
  let pass;
  let explorer;
  try {
    await initialize(wasmBytes(model));
    const location = model.get('location');
    const source = model.get('via_kernel') ? kernelStorage(model, location) : model.get('url');
    root.dataset.source = model.get('via_kernel') ? 'kernel' : 'browser';
    status.textContent = `opening ${location} (${model.get('via_kernel') ? 'read through the kernel' : 'fetched by the browser'}) …`;
    const options = model.get('options');
    const w = model.get('what_if');
    let cache;
    ({ explorer, cache } = await openCached(openExplorer, source, { variables: options.variables, url: location }, { app: 'widget', location }));
    root.dataset.cache = cache.error ? '' : cache.dir;
    const cacheNote = cacheText(cache);
    const arrays = explorer.arrays();
    const report = explorer.describe(options, w);
    describeBox.replaceChildren(
      memoryBar(report.memory),
      el('div', { className: 'ib-cols' }, table(memoryRows(report.memory)), table(splitRows(report.config))),
      el('ul', { className: 'ib-notes' }, ...notesList(report.notes)),
      el('details', {}, el('summary', { textContent: 'describe report (text)' }), el('pre', { textContent: explorer.describeText(options, w) })),
    );
    const split = model.get('split');
    orderCaption.textContent = drawOrderPlot(orderCanvas, explorer.drawOrder(options, split, w), split);
    const label = model.get('variable') || report.variables[0]?.label;
    const units = arrays.find((a) => a.path === label)?.attributes?.units;
    pass = explorer.iter(options, split, w);
    const step = async () => {
      next.disabled = true;
      progress.start(`reading batch ${Number(batchBox.dataset.batch ?? -1) + 2} of ${pass.length} …`);
      let b;
      try {
        b = await pass.next();
      } finally {
        progress.stop();
      }
      if (b === undefined) {
        status.textContent = `end of the epoch (${pass.length ?? ''} batches)`;
        root.dataset.state = 'ended';
        return;
      }
      showBatch(root, batchBox, b, { label, shift: w.shift, units, meta: arrays.find((a) => a.path === label), options });
      status.textContent = `${location}: ${arrays.length} arrays; ${label}, batch ${b.index + 1} of ${pass.length}; ${cacheNote}`;
      next.disabled = false;
    };
    next.onclick = () => step().catch(fail);
    run.onclick = () => {
      run.disabled = true;
      liveRun(root, runBox, explorer, options, split, w)
        .catch((e) => {
          root.dataset.run = 'error';
          fail(e);
        })
        .finally(() => {
          run.disabled = false;
        });
    };
    probeButton.onclick = () => {
      probeButton.disabled = true;
      probe(root, probeBox, probeLine, explorer, options, w).finally(() => {
        probeButton.disabled = false;
      });
    };
    await step();
    run.disabled = false;
    probeButton.disabled = false;
  } catch (e) {
    fail(e);
  }
  // The view goes (a re-run cell, a closed notebook): its pass and its explorer, which holds
  // the store's cache directory, are let go.
  return () => {
    pass?.close();
    explorer?.close();
  };
}

export default { render };
