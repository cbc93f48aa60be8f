// 3. Preview batches: real shuffled train batches read through the explorer, one image per
// sample (input and target side by side for a windowed view), a colour bar, and a patch map
// for a patched batch; the last 16 batches can be stepped back through.
import { $, showError, state, timedProgress } from './app.js';
import { batchFigures, hoverText, patchMap } from './components.js';
import { currentOptions, whatIf } from './options.js';
import { sliceLayout, sliceRange, toFloat } from './render.js';

const previewProgress = timedProgress($('preview-progress'), 'preview');

export function closePreview() {
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

/** Show the next batch: one stepped back to, else a new one read (or the end of the epoch). */
export async function nextBatch() {
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

/** Step back to the batch shown before (no read: it is kept). */
export function prevBatch() {
  const p = state.preview;
  if (p.pos > 0) {
    p.pos -= 1;
    showBatch();
  }
}

/** Start the next epoch's pass and show its first batch. */
export async function nextEpoch() {
  const p = await previewDataset();
  p.epoch += 1;
  startEpoch();
  await nextBatch();
}

/** `f` as a click handler: a failed read shows under the preview and in the banner. */
export const guarded = (f) => async () => {
  try {
    await f();
  } catch (e) {
    $('preview-pos').textContent = e.message;
    $('preview-pos').dataset.error = e.message;
    showError('reading a preview batch failed', e);
  }
};

/** An index input per extra axis of a sample (level, channel, ...), rebuilt only when the shape changes. */
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

/** The smallest and largest value of the slices shown, over all of `values` (one colour scale). */
function valueRange(values, layout, rows, extra) {
  let [vmin, vmax] = [Infinity, -Infinity];
  for (const v of values) {
    const [lo, hi] = sliceRange(v, layout, rows, extra);
    [vmin, vmax] = [Math.min(vmin, lo), Math.max(vmax, hi)];
  }
  return [vmin, vmax];
}

/** Label the colour bar with the range and `label`'s units; returns the units. */
function showColorbar(label, vmin, vmax) {
  const cb = $('colorbar');
  cb.dataset.vmin = String(vmin);
  cb.dataset.vmax = String(vmax);
  $('cb-min').textContent = vmin.toPrecision(5);
  $('cb-max').textContent = vmax.toPrecision(5);
  const units = state.arrays.find((a) => a.path === label)?.attributes?.units;
  $('cb-units').textContent = units ? String(units) : '';
  return units;
}

/** What the pictures call with the value under the cursor (`null` off them); starts cleared. */
function hoverHandler(units) {
  const hover = $('hover-value');
  const onHover = (h) => {
    hover.textContent = hoverText(h, units);
    if (h) Object.assign(hover.dataset, { label: h.label, sample: String(h.sample), x: String(h.x), y: String(h.y), value: String(h.value) });
  };
  onHover(null);
  return onHover;
}

/** Draw the batch at `pos` for the chosen variable and indices; `state.preview.shown` says what is on screen. */
export function showBatch() {
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
  const [vmin, vmax] = valueRange(values, layout, rows, extra);
  const onHover = hoverHandler(showColorbar(label, vmin, vmax));
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
