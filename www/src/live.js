// 4. Live run: one epoch in a worker (`openInWorker`: the threaded build where the page is
// isolated and it is available, else one thread), batches moved to the page as a training
// loop would get them, a live chart and tiles while it runs, and the pass report at the end.
import { openInWorker } from 'insitubatch';
import uPlot from 'uplot';
import { $, chartSize, followWidth, showError, state, timedProgress } from './app.js';
import { human, row } from './components.js';
import { currentOptions, num, whatIf } from './options.js';

// The package's worker runs unbundled (it picks the threaded or one-thread build at run time,
// and a bundler cannot follow that choice): vite.config.js serves js/src and js/pkg at
// /insitubatch-js/ and copies them into the build, and `openInWorker` is told where.
const workerUrl = new URL('/insitubatch-js/src/worker.js', location.href);

let livePlot;
followWidth($('live-chart'), 260, () => livePlot);
const liveProgress = timedProgress($('live-progress'), 'live');
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** `ds`'s build and thread count, as the status line says them. */
const buildText = (ds, threads = 'thread') => `${ds.build} build, ${ds.threads} ${threads}${ds.threads === 1 ? '' : 's'}`;

/** The live chart, emptied (made on the first run); returns its series, which the ticks extend. */
function liveChart() {
  const data = [[], [], [], []];
  if (livePlot) {
    livePlot.setData(data);
    return data;
  }
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
  return data;
}

/** Ask the running pass to stop after the batch it is on. */
export function stopLive() {
  state.live.stop = true;
}

/**
 * One epoch in a worker, batches moved to the page as a training loop would get them; a
 * tick every 100 ms with MB/s, the queue depth and samples, and the stage that limits so
 * far; the pass report at the end.
 */
export async function runLive() {
  const L = state.live;
  Object.assign(L, { ticks: [], done: null, error: null, stop: false });
  const st = $('live-state');
  const data = startLiveView(st);
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
    st.textContent = `streaming ${total} batches of ${split} (${buildText(ds, 'decode thread')})${whatIf().shift ? `; windowed: ${ds.labels.length} labels, targets ${whatIf().shift} samples on` : ''}`;
    const { batches, bytes, t0 } = await stream(ds, pass, total, data, stepMs);
    const stats = await ds.lastPass();
    L.done = { stats, batches, bytes, wall: (performance.now() - t0) / 1000, stopped: L.stop };
    showLiveDone(ds, stats, total);
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

/** Clear the last run's tiles and report and say the worker is starting; returns the emptied chart's series. */
function startLiveView(st) {
  $('run').disabled = true;
  $('stop').disabled = false;
  st.textContent = 'starting the worker …';
  st.dataset.state = 'running';
  $('pass-report').replaceChildren();
  for (const id of ['live-mbps', 'live-queue', 'live-stage', 'live-batches']) $(id).textContent = '–';
  liveProgress.start('starting the worker');
  return liveChart();
}

/**
 * Take the pass's batches until it ends or Stop is pressed, `stepMs` apart (a training step's
 * time), ticking the view as it goes. Returns the batches and bytes taken and the start time.
 */
async function stream(ds, pass, total, data, stepMs) {
  const t0 = performance.now();
  const taken = { bytes: 0, batches: 0 };
  const tick = ticker(ds, pass, total, data, t0, taken);
  for (;;) {
    const b = await pass.next();
    if (b === undefined) break;
    for (const a of Object.values(b.arrays)) taken.bytes += a.data.byteLength;
    taken.batches += 1;
    await tick(performance.now());
    if (state.live.stop) {
      await pass.close();
      break;
    }
    if (stepMs > 0) await sleep(stepMs);
  }
  return { ...taken, t0 };
}

/**
 * The live view's tick, called after every batch: due 100 ms after the last one and at the
 * last batch, it reads the pass's stats and shows the rates since the last tick.
 */
function ticker(ds, pass, total, data, t0, taken) {
  let last = { t: t0, bytes: 0, asks: 0, empty: 0 };
  return async (now) => {
    if (now - last.t < 100 && taken.batches !== total) return;
    const s = await pass.stats();
    if (!s) return;
    const d = s.depths;
    const asks = d.queue_samples - last.asks;
    const m = {
      t: (now - t0) / 1000,
      mbps: (taken.bytes - last.bytes) / 1e6 / Math.max((now - last.t) / 1000, 1e-6),
      // The engine samples its queue whenever the loop asks for a batch: how often one
      // was already waiting; and how many batches wait right now.
      readyShare: asks > 0 ? 1 - (d.queue_empty - last.empty) / asks : null,
      queueNow: d.queue_now,
      queueCap: d.queue_capacity,
      stage: s.limiting_stage,
      batches: taken.batches,
      total,
    };
    last = { t: now, bytes: taken.bytes, asks: d.queue_samples, empty: d.queue_empty };
    showTick(ds, m, data);
  };
}

function showTick(ds, m, data) {
  state.live.ticks.push(m);
  data[0].push(m.t);
  data[1].push(m.mbps);
  data[2].push(m.queueNow);
  data[3].push(m.readyShare);
  livePlot.setData(data);
  $('live-stage').textContent = m.stage;
  $('live-mbps').textContent = `${m.mbps.toFixed(1)} MB/s`;
  $('live-queue').textContent = `${m.queueNow} of ${m.queueCap}`;
  $('live-batches').textContent = `${m.batches} of ${m.total}`;
  liveProgress.set(`${m.batches} of ${m.total} batches`, m.batches, m.total);
  $('live-state').textContent = `${m.batches} of ${m.total} batches (${buildText(ds)})`;
}

/** The tiles and status as the pass report has them, and the report itself. */
function showLiveDone(ds, stats, total) {
  const L = state.live;
  const { batches } = L.done;
  $('live-stage').textContent = stats.limiting_stage;
  $('live-mbps').textContent = `${(stats.batch_bytes / 1e6 / Math.max(stats.wall_s, 1e-9)).toFixed(1)} MB/s`;
  $('live-batches').textContent = `${batches} of ${total}`;
  const st = $('live-state');
  st.textContent = `${L.stop ? 'stopped' : 'done'}: ${batches} batches (${buildText(ds)})`;
  st.dataset.state = 'done';
  showPassReport(stats, L.done);
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
    ['time to first batch', s.ttfb_s === null ? 'no batch yet' : `${s.ttfb_s.toFixed(3)} s`, 'ttfb'],
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
