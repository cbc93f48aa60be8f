// 2. Describe and tune: every move of a control asks the explorer (no store access) for the
// describe report, the shuffle quality against memory across block sizes and the draw order
// of the epoch, and draws them.
import uPlot from 'uplot';
import { $, MiB, chartSize, clearError, followWidth, showError, state } from './app.js';
import { drawOrderPlot, human, memoryBar, memoryRows, notesList, splitRows } from './components.js';
import { currentOptions, whatIf } from './options.js';
import { markProbe } from './probe.js';

let pending = false;
/** Describe once per frame, however many input events a drag or typing sends. */
export function scheduleUpdate() {
  if (pending) return;
  pending = true;
  requestAnimationFrame(() => {
    pending = false;
    update();
  });
}

/** A counter the tests wait on: the report on screen is for the controls as they are now. */
function bumpDescribeGen() {
  document.body.dataset.describeGen = String(Number(document.body.dataset.describeGen ?? 0) + 1);
}

/** Describe the controls as they are now, or show why the engine refused them. */
export function update() {
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
    bumpDescribeGen();
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
  bumpDescribeGen();
}

function showReport(r) {
  const m = r.memory;
  $('memory').querySelector('tbody').replaceChildren(...memoryRows(m));
  $('memory-bar').replaceChildren(memoryBar(m));
  $('mem-peak-big').textContent = `estimated peak ${human(m.estimated_peak_bytes)}`;
  const c = r.config;
  $('splits').querySelector('tbody').replaceChildren(...splitRows(c));
  // None under two train anchors: no order to score.
  $('quality').textContent = c.shuffle_quality === null ? 'n/a' : c.shuffle_quality.toFixed(3);
  $('quality').dataset.value = String(c.shuffle_quality);
  $('var-report').querySelector('tbody').replaceChildren(...r.variables.map(variableRow));
  $('notes').replaceChildren(...notesList(r.notes));
}

/** A variable's row of the report: its slot, stored chunks, ragged multiplier and gather run. */
function variableRow(v) {
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
}

let qualityPlot;
followWidth($('quality-chart'), 260, () => qualityPlot);

/** Quality and peak memory at the block size asked for and at every power of two up to the train split's chunks. */
function showQualityCurve(opts, w) {
  const trainChunks = state.report.config.split_chunks.find(([n]) => n === 'train')?.[1] ?? 1;
  const values = new Set([opts.blockChunks ?? 16]);
  for (let v = 1; v <= Math.max(1, trainChunks); v *= 2) values.add(v);
  values.add(Math.max(1, trainChunks));
  const xs = [...values].sort((a, b) => a - b);
  state.curve = state.explorer.qualityCurve(opts, xs, w);
  const data = [xs, state.curve.map((p) => p.quality), state.curve.map((p) => p.estimated_peak_bytes / MiB)];
  if (qualityPlot) {
    qualityPlot.setData(data);
    return;
  }
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
}

function showOrder(opts, w) {
  const split = $('order-split').value;
  const o = state.explorer.drawOrder(opts, split, { epoch: w.epoch, shift: w.shift });
  state.order = o;
  $('order-caption').textContent = drawOrderPlot($('order'), o, split);
}
