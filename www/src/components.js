// The rendering pieces the dashboard (main.js and its sections) and the notebook widget (widget.js) share:
// sizes as text, the memory and split tables of a describe report, the memory model as a
// stacked bar, the draw-order plot, a batch as a grid of pictures on one colour scale with
// the value under the cursor, a patched batch's patch map, the notes of a report, a probe
// report, and a progress line for slow reads. Each builds DOM nodes
// from the engine's reports and leaves page layout (ids, sections, controls) to its caller;
// their few style rules are COMPONENTS_CSS (class names prefixed `ib-`, safe in a notebook).
import { VIRIDIS } from './colormap.js';
import { drawSlice, sliceOffset } from './render.js';

/**
 * The rules of the components below that need styling (memory bar, progress line, hover
 * readout, probe report); the dashboard puts them into its page, the widget into its own style element.
 */
export const COMPONENTS_CSS = `
.ib-membar-track { display: flex; height: 28px; border: 1px solid #bbb; border-radius: 4px; overflow: hidden; background: #fff; }
.ib-membar-seg { display: block; height: 100%; min-width: 0; }
.ib-membar-seg + .ib-membar-seg { box-shadow: inset 1px 0 0 #fff; }
.ib-membar-legend { list-style: none; display: flex; flex-wrap: wrap; gap: 4px 16px; padding: 0; margin: 6px 0; font-size: 13px; }
.ib-membar-legend li { display: flex; align-items: center; gap: 6px; }
.ib-swatch { display: inline-block; width: 12px; height: 12px; border: 1px solid #999; }
.ib-membar-avail { display: flex; flex-wrap: wrap; gap: 4px 12px; align-items: center; font-size: 13px; }
.ib-membar-machine { width: min(240px, 100%); height: 14px; }

.ib-progress { display: flex; gap: 8px; align-items: center; margin: 6px 0; font-size: 13px; }
.ib-progress[hidden] { display: none; }
.ib-progress progress { width: min(240px, 40%); }
.ib-probe-groups { display: flex; flex-wrap: wrap; gap: 8px 24px; align-items: flex-start; }
.ib-probe-group h4 { margin: 4px 0; font-size: 13px; }
.ib-probe-group th { font-weight: normal; color: #555; text-align: left; padding-right: 10px; }
.ib-probe-notes { margin: 6px 0 0; padding-left: 18px; font-size: 13px; }
.ib-hover { display: block; min-height: 1.4em; font-variant-numeric: tabular-nums; font-size: 13px; color: #333; margin-bottom: 6px; }

.ib-notes { margin: 0; padding-left: 18px; font-size: 13px; }
.ib-notes li.warn { color: #8a5a00; }
.ib-notes li.ib-note-key { background: #eef7f6; border-left: 3px solid #21918c; padding: 2px 6px; margin: 2px 0; list-style: none; margin-left: -18px; }
.ib-patchmap { display: flex; flex-wrap: wrap; gap: 6px 16px; align-items: flex-start; margin: 6px 0; }
.ib-patchmap svg { width: min(420px, 100%); height: auto; border: 1px solid #bbb; background: #f4f4f4; display: block; }
.ib-patchmap-caption { flex: 1 1 240px; font-size: 13px; color: #333; margin: 0; }
.ib-patch rect, .ib-patch-grid { vector-effect: non-scaling-stroke; }
.ib-patch rect { fill-opacity: 0.2; stroke-width: 1.5; }
.ib-patch-label { font-family: system-ui, sans-serif; font-weight: 600; fill: #000; pointer-events: none; }
.ib-patch.ib-hl rect { fill-opacity: 0.55; stroke-width: 3; }
.ib-patch-grid { fill: none; stroke: #aaa; stroke-width: 1; stroke-dasharray: 3 2; }
.ib-patch-swatch { display: inline-block; width: 10px; height: 10px; margin-right: 4px; vertical-align: baseline; }
figure.ib-hl .pics canvas { outline: 3px solid var(--ib-row-colour, #21918c); outline-offset: -1px; }
`;

/** `1.5 GiB`-style sizes, as the engine's `human_bytes`. */
export function human(b) {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let v = b;
  let u = 0;
  while (v >= 1024 && u < units.length - 1) {
    v /= 1024;
    u += 1;
  }
  return u === 0 ? `${b} B` : `${v.toFixed(1)} ${units[u]}`;
}

/** A `<tr>` of a label and a value; `attrs` become `data-*` attributes (tests read them). */
export function row(label, value, attrs = {}) {
  const tr = document.createElement('tr');
  const th = document.createElement('th');
  th.textContent = label;
  const td = document.createElement('td');
  td.textContent = value;
  for (const [k, v] of Object.entries(attrs)) tr.dataset[k] = v;
  tr.append(th, td);
  return tr;
}

const MEMORY_ROWS = [
  ['residency_bytes', 'residency (pool budget)'],
  ['floor_bytes', '  floor per iteration (two blocks)'],
  ['read_once_bytes', '  read-once residency'],
  ['resident_max_bytes', '  the most the pool can hold (the store, when less)'],
  ['inflight_bytes', 'in flight'],
  ['queue_bytes', 'batch queue'],
  ['scratch_bytes', 'transform scratch'],
  ['recycled_bytes', 'recycled buffers'],
  ['accounted_bytes', 'accounted'],
  ['estimated_peak_bytes', 'estimated peak (+ 64 MiB)'],
];

/** The memory rows of a describe report (`report.memory`). */
export function memoryRows(m) {
  return MEMORY_ROWS.map(([k, label]) =>
    row(label, `${human(m[k])}${k === 'residency_bytes' && m.budget_is_automatic ? ' (automatic)' : ''}`, {
      key: k,
      bytes: String(m[k]),
    }),
  );
}

/** The split rows of a describe report (`report.config`): chunks, samples, batches, blocks. */
export function splitRows(c) {
  const rows = c.split_chunks.map(([name, chunks], i) =>
    row(name, `${chunks} chunks, ${c.drawable_samples[i][1]} samples, ${c.batches_per_epoch[i][1]} batches`, { split: name }),
  );
  rows.push(
    row(
      'blocks',
      `${c.block_chunks} chunks per block${c.block_chunks !== c.block_chunks_requested ? ` (asked ${c.block_chunks_requested}, widened so a block holds a batch)` : ''}${c.first_block_chunks < c.block_chunks ? `, the first of ${c.first_block_chunks}` : ''}, ${c.samples_per_chunk} samples per chunk`,
      { key: 'block_chunks', value: String(c.block_chunks) },
    ),
  );
  return rows;
}

/**
 * Paint a draw order (`Explorer.drawOrder`) into `canvas`: x = draw position, y = source
 * chunk, colour = shuffle block, grey lines between batches. Returns its caption.
 */
export function drawOrderPlot(canvas, o, split) {
  const ctx = canvas.getContext('2d');
  const W = canvas.width;
  const H = canvas.height;
  ctx.fillStyle = '#fff';
  ctx.fillRect(0, 0, W, H);
  const n = o.anchors.length;
  if (n === 0) return `${split} draws nothing`;
  const nBlocks = o.bounds.length - 1;
  const nb = Math.ceil(n / o.batch_size);
  if (nb <= 200) {
    ctx.fillStyle = '#eee';
    for (let b = 1; b < nb; b++) ctx.fillRect(Math.floor(((b * o.batch_size) / n) * W), 0, 1, H);
  }
  const chunkH = H / Math.max(1, o.n_chunks);
  for (let b = 0; b < nBlocks; b++) {
    const k = Math.floor(((b * 0.618034) % 1) * 200) + 28; // distinct neighbouring blocks
    ctx.fillStyle = `rgb(${VIRIDIS[k * 3]},${VIRIDIS[k * 3 + 1]},${VIRIDIS[k * 3 + 2]})`;
    for (let i = o.bounds[b]; i < o.bounds[b + 1]; i++) {
      const x = (i / n) * W;
      const y = H - (o.chunks[i] + 1) * chunkH;
      ctx.fillRect(x, y + chunkH * 0.15, Math.max(1.5, W / n), Math.max(1.5, chunkH * 0.7));
    }
  }
  return (
    `${n} samples of ${split}, epoch ${o.epoch}: x = draw position (grey lines: batches of ${o.batch_size}), ` +
    `y = source chunk (0..${o.n_chunks - 1}), colour = shuffle block (${nBlocks} of ${o.block_chunks_widened} chunks); quality ${o.quality.toFixed(3)}`
  );
}

/**
 * One `<figure>` per sample of batch `b`: the slice at `extra` of each of `labels` (input,
 * then its windowed target when `shift` ≠ 0), painted from `values` (one float array per
 * label) on `[vmin, vmax]`. Each value is `scale` CSS pixels wide when `scale` is given;
 * without it the canvas fills its grid cell (CSS). `onHover` gets `{ label, sample, x, y,
 * value }` for the value under the cursor, and `null` when the cursor leaves.
 */
export function batchFigures(b, { labels, values, layout, extra, vmin, vmax, shift, scale, onHover }) {
  const rows = b.arrays[labels[0]].shape[0];
  const figs = [];
  for (let r = 0; r < rows; r++) {
    const fig = document.createElement('figure');
    fig.className = 'sample';
    fig.dataset.row = String(r);
    const at = patchAt(b, r);
    const pics = document.createElement('div');
    pics.className = 'pics';
    labels.forEach((l, k) => {
      const cv = document.createElement('canvas');
      cv.dataset.row = String(r);
      cv.dataset.sample = String(b.sampleIndices[r]);
      cv.dataset.label = l;
      const sample = k === 0 ? Number(b.sampleIndices[r]) : Number(b.sampleIndices[r]) + shift;
      cv.title = `${k === 0 ? `${l} at sample ${sample}` : `${l}: target, sample ${sample}`}${at ? `, the patch at ${at}` : ''}`;
      drawSlice(cv, values[k], layout, r, extra, vmin, vmax);
      if (scale) {
        cv.style.width = `${layout.width * scale}px`;
        cv.style.height = `${layout.height * scale}px`;
      }
      if (onHover) {
        const base = sliceOffset(layout, r, extra);
        cv.addEventListener('mousemove', (e) => {
          // The picture is the canvas's content box (inside its border).
          const rect = cv.getBoundingClientRect();
          const fx = (e.clientX - rect.left - cv.clientLeft) / Math.max(1, cv.clientWidth);
          const fy = (e.clientY - rect.top - cv.clientTop) / Math.max(1, cv.clientHeight);
          const x = Math.min(layout.width - 1, Math.max(0, Math.floor(fx * layout.width)));
          const y = Math.min(layout.height - 1, Math.max(0, Math.floor(fy * layout.height)));
          onHover({ label: l, sample, x, y, value: values[k][base + y * layout.width + x], patch: at });
        });
        cv.addEventListener('mouseleave', () => onHover(null));
      }
      pics.append(cv);
    });
    const cap = document.createElement('figcaption');
    cap.textContent = shift ? `sample ${b.sampleIndices[r]} → target ${Number(b.sampleIndices[r]) + shift}` : `sample ${b.sampleIndices[r]}`;
    if (at) {
      // The row's colour and number, as its rectangle in the patch map (`patchMap`).
      const sw = el('span', { className: 'ib-patch-swatch' });
      sw.style.background = rowColour(r);
      fig.style.setProperty('--ib-row-colour', rowColour(r));
      cap.prepend(sw, `#${r} `);
      cap.append(`, patch at ${at}`);
    }
    fig.append(pics, cap);
    figs.push(fig);
  }
  return figs;
}

/** The text for a hovered value (`batchFigures`' `onHover`), `units` after the number. */
export function hoverText(h, units) {
  if (!h) return 'hover over a picture to read its values';
  const v = Number.isFinite(h.value) ? Number(h.value.toPrecision(7)) : h.value;
  return `${h.label}, sample ${h.sample}, column ${h.x}, row ${h.y}${h.patch ? ` of the patch at ${h.patch}` : ''}: ${v}${units ? ` ${units}` : ''}`;
}

/** Row `r`'s colour in a patch map and its picture's caption: neighbours differ (the golden ratio, as the draw order's blocks). */
export function rowColour(r) {
  const k = Math.floor(((r * 0.618034) % 1) * 200) + 28;
  return `rgb(${VIRIDIS[k * 3]},${VIRIDIS[k * 3 + 1]},${VIRIDIS[k * 3 + 2]})`;
}

/** Row `r`'s patch origin in words (`lat 45, lon 90`), or `null` for a batch of whole samples. */
export function patchAt(b, r) {
  if (!b.patchOrigins || !b.patchDims) return null;
  const n = b.patchDims.length;
  return b.patchDims.map((d, k) => `${d} ${b.patchOrigins[r * n + k]}`).join(', ');
}

/** The stacked bar's parts, in the order the engine adds them up to `accounted_bytes`. */
export const MEMORY_PARTS = [
  ['resident_max_bytes', 'residency', '#3b528b'],
  ['inflight_bytes', 'in flight', '#21918c'],
  ['queue_bytes', 'batch queue', '#5ec962'],
  ['scratch_bytes', 'transform scratch', '#e0b000'],
  ['recycled_bytes', 'recycled buffers', '#9a9a9a'],
];

const el = (tag, props = {}, ...children) => {
  const e = Object.assign(document.createElement(tag), props);
  e.append(...children);
  return e;
};

/**
 * The memory model (`report.memory`) as a stacked bar: the accounted parts, then the
 * allocator and process overhead up to the estimated peak, each labelled with its size;
 * under it, the peak against the memory the runtime reports. Every segment carries
 * `data-key` and `data-bytes` (tests add them up).
 */
export function memoryBar(m) {
  const peak = Math.max(1, m.estimated_peak_bytes);
  const parts = [
    ...MEMORY_PARTS.map(([key, label, colour]) => ({ key, label, colour, bytes: m[key] })),
    { key: 'overhead_bytes', label: 'allocator + baseline', colour: 'repeating-linear-gradient(45deg,#ddd 0 4px,#f4f4f4 4px 8px)', bytes: m.estimated_peak_bytes - m.accounted_bytes },
  ];
  const budget = () => {
    const which = m.budget_is_automatic ? 'the automatic budget' : 'the budget given';
    // A budget beyond the store: the pool holds at most the store, and that is what is counted.
    return m.resident_max_bytes < m.residency_bytes ? `, all of the store (${which} is ${human(m.residency_bytes)})` : `, ${which}`;
  };
  const describe = (p) => `${p.label} ${human(p.bytes)} (${((100 * p.bytes) / peak).toFixed(1)}%)${p.key === 'resident_max_bytes' ? budget() : ''}`;
  const track = el('div', { className: 'ib-membar-track' });
  const legend = el('ul', { className: 'ib-membar-legend' });
  for (const p of parts) {
    const seg = el('span', { className: 'ib-membar-seg', title: describe(p) });
    Object.assign(seg.dataset, { key: p.key, bytes: String(p.bytes) });
    seg.style.width = `${(100 * p.bytes) / peak}%`;
    seg.style.background = p.colour;
    track.append(seg);
    const sw = el('span', { className: 'ib-swatch' });
    sw.style.background = p.colour;
    legend.append(el('li', {}, sw, el('span', { textContent: describe(p) })));
  }
  const box = el('div', { className: 'ib-membar' });
  box.setAttribute('role', 'group');
  box.setAttribute('aria-label', `estimated peak ${human(m.estimated_peak_bytes)}: ${parts.map(describe).join('; ')}`);
  box.append(track, legend);
  const avail = m.memory_available_bytes;
  if (avail) {
    const share = m.estimated_peak_bytes / avail;
    const meter = el('meter', { className: 'ib-membar-machine', min: 0, max: 1, low: 0.5, high: 0.8, optimum: 0, value: Math.min(1, share) });
    meter.setAttribute('aria-label', 'estimated peak against the memory available');
    box.append(
      el('div', { className: 'ib-membar-avail' }, el('span', { textContent: `estimated peak ${human(m.estimated_peak_bytes)} of ${human(avail)} available (${(100 * share).toFixed(1)}%)` }), meter),
    );
  }
  return box;
}

/** The notes that say what a row is (patches, a `sel` region) and how often a sample is drawn: shown first, marked. */
export const KEY_NOTES = ['patches', 'region', 'sample-draws'];

/**
 * The `<li>`s of a report's notes (`report.notes`): the patches, region and mask/weights notes first
 * and marked (a preview of patched or weighted data is misread without them), then the rest
 * in the engine's order. Each has `data-code` (tests find a note by it).
 */
export function notesList(notes) {
  if (!notes.length) return [el('li', { textContent: 'none' })];
  const key = (n) => KEY_NOTES.includes(n.code);
  return [...notes.filter(key), ...notes.filter((n) => !key(n))].map((n) => {
    const li = el('li', { className: `${n.severity}${key(n) ? ' ib-note-key' : ''}` }, el('strong', { textContent: n.code }), ` (${n.subject}, ${n.severity}): ${n.message}`);
    li.dataset.code = n.code;
    return li;
  });
}

/**
 * The patched axes of array `meta` (`Explorer.arrays()`' entry) for a batch's `patchDims`:
 * each dimension name (or `axis{k}`, the engine's name for an unnamed axis) as its axis index
 * and full length. `null` when the array lacks one of them (it is read whole).
 */
export function patchAxes(meta, dims) {
  const axes = dims.map((d) => {
    let axis = (meta.dimension_names ?? []).indexOf(d);
    const m = /^axis(\d+)$/.exec(d);
    if (axis < 0 && m) axis = Number(m[1]);
    return axis >= 0 && axis < meta.shape.length ? { dim: d, axis, length: meta.shape[axis] } : null;
  });
  return axes.every(Boolean) ? axes : null;
}

/** `patchStride`-style sizes (an object, a `Map` or `[axis, size]` pairs) as a `Map`, keys as strings. */
function sizesByAxis(sizes) {
  if (!sizes) return new Map();
  const pairs = sizes instanceof Map || Array.isArray(sizes) ? [...sizes] : Object.entries(sizes);
  return new Map(pairs.map(([k, v]) => [String(k), Number(v)]));
}

/** Grid origins on one axis: from 0 by `step` while the patch fits (a remainder is never drawn). */
function gridStarts(length, size, step) {
  const out = [];
  for (let p = 0; p + size <= length; p += Math.max(1, step)) out.push(p);
  return out;
}

const SVG = 'http://www.w3.org/2000/svg';
const svg = (tag, attrs = {}) => {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
  return e;
};

/** More grid positions than this are not drawn (a 721 × 1440 field in 8 × 8 patches has 16 000). */
const MAX_GRID_CELLS = 2500;

/**
 * Where the rows of patched batch `b` lie in a sample's field: an SVG of the field (the
 * patched axes' full lengths, from `meta`, the array drawn; `shape` the batch array's shape,
 * rows first) with each row's patch as a rectangle at its origin (`patchOrigins`), in the
 * row's colour and numbered as its picture's caption; in grid mode the grid's positions
 * (`stride`: `patchStride` as given, default the patch size) faintly behind. The last two
 * patched axes in array order are the map's rows and columns, as in the pictures; one patched
 * axis is a strip. `figures` (`batchFigures` of `b`, one per row) are linked both ways:
 * hovering a picture or a rectangle highlights the pair. Rectangles carry `data-row`,
 * `data-sample` and `data-origin` (the origin in `patchDims` order; tests read them).
 * Returns `null` for a batch of whole samples or an array without the patched axes.
 */
export function patchMap(b, { meta, shape, mode = 'grid', stride, figures = [] }) {
  if (!b.patchOrigins || !b.patchDims) return null;
  const axes = patchAxes(meta, b.patchDims);
  if (!axes) return null;
  const nd = axes.length;
  // Batch arrays are [rows, ...the array's axes without the sample axis 0]: axis a is shape[a].
  const size = axes.map((a) => shape[a.axis]);
  const byAxis = [...axes.keys()].sort((i, j) => axes[i].axis - axes[j].axis);
  const xk = byAxis[nd - 1];
  const yk = nd >= 2 ? byAxis[nd - 2] : null;
  const W = axes[xk].length;
  const H = yk === null ? Math.max(1, Math.round(W / 12)) : axes[yk].length;
  const box = (k, o) => (k === null ? [0, H] : [o[k], size[k]]);
  const root = svg('svg', { viewBox: `0 0 ${W} ${H}`, role: 'img', preserveAspectRatio: 'xMidYMid meet' });
  root.setAttribute('aria-label', `patch map: ${b.patchDims.join(' × ')} field with ${shape[0]} patches`);
  Object.assign(root.dataset, { width: String(W), height: String(H), x: axes[xk].dim, y: yk === null ? '' : axes[yk].dim });
  const steps = sizesByAxis(stride);
  const step = (k) => steps.get(axes[k].dim) ?? steps.get(String(axes[k].axis)) ?? size[k];
  const xs = gridStarts(W, size[xk], step(xk));
  const ys = yk === null ? [0] : gridStarts(H, size[yk], step(yk));
  const drawGrid = mode === 'grid' && xs.length * ys.length <= MAX_GRID_CELLS;
  if (drawGrid) {
    for (const y of ys) for (const x of xs) root.append(svg('rect', { class: 'ib-patch-grid', x, y, width: size[xk], height: yk === null ? H : size[yk] }));
  }
  const rows = shape[0];
  const groups = [];
  // Rows of different samples often share an origin (a grid has few): one label per place.
  const labels = new Map();
  for (let r = 0; r < rows; r++) {
    const o = [...b.patchOrigins.subarray(r * nd, (r + 1) * nd)].map(Number);
    const [x, w] = box(xk, o);
    const [y, h] = box(yk, o);
    const g = svg('g', { class: 'ib-patch' });
    Object.assign(g.dataset, { row: String(r), sample: String(b.sampleIndices[r]), origin: o.join(',') });
    const colour = rowColour(r);
    g.append(svg('rect', { x, y, width: w, height: h, fill: colour, stroke: colour }));
    const place = `${x},${y}`;
    if (!labels.has(place)) labels.set(place, { x, y, w, h, rows: [] });
    labels.get(place).rows.push(r);
    const title = svg('title');
    title.textContent = `#${r}: sample ${b.sampleIndices[r]}, patch at ${patchAt(b, r)}`;
    g.append(title);
    root.append(g);
    groups.push(g);
  }
  if (rows <= 64) {
    for (const { x, y, w, h, rows: here } of labels.values()) {
      const text = here.join(' ');
      // In the patch's top-left corner (random patches' centres crowd; their corners less),
      // as large as fits: a third of its height, its width for the digits.
      const fontSize = Math.max(1, Math.min(h * 0.3, (w * 0.85) / (0.6 * text.length)));
      const t = svg('text', { class: 'ib-patch-label', x: x + fontSize * 0.2, y: y + fontSize * 0.1, 'dominant-baseline': 'hanging', 'font-size': fontSize });
      t.textContent = text;
      root.append(t);
    }
  }
  const highlight = (r, on) => {
    groups[r]?.classList.toggle('ib-hl', on);
    figures[r]?.classList.toggle('ib-hl', on);
  };
  groups.forEach((g, r) => {
    g.addEventListener('mouseenter', () => highlight(r, true));
    g.addEventListener('mouseleave', () => highlight(r, false));
  });
  figures.forEach((f, r) => {
    f.addEventListener('mouseenter', () => highlight(r, true));
    f.addEventListener('mouseleave', () => highlight(r, false));
  });
  const ext = (k) => `${axes[k].dim} ${size[k]} of ${axes[k].length}`;
  const others = axes.filter((_, k) => k !== xk && k !== yk).map((a) => a.dim);
  const cap = el(
    'p',
    { className: 'ib-patchmap-caption' },
    `Where each row's patch lies in its sample's field: patches of ${[yk, xk].filter((k) => k !== null).map(ext).join(' × ')} ` +
      `(${mode}${mode === 'grid' ? `, ${xs.length * ys.length} grid positions${drawGrid ? ' dashed' : ', too many to draw'}` : ''}). ` +
      `Rectangles are numbered and coloured as the pictures below; hover either to pair them. Rows of different samples share the map.` +
      (others.length ? ` Also patched: ${others.join(', ')} (each picture's caption gives its origin).` : ''),
  );
  const out = el('div', { className: 'ib-patchmap' }, root, cap);
  out.dataset.rows = String(rows);
  return out;
}

const MB = (bytesPerS) => `${(bytesPerS / 1e6).toFixed(1)} MB/s`;
const ms = (s) => `${(s * 1e3).toFixed(1)} ms`;

/**
 * The rows of a probe report (`Explorer.probe`, core/src/dataset/probe.rs), in three groups:
 * what the reads and decodes measured, the epoch predicted from them, and the suggestion.
 * Every row has `data-key` (the report's field; tests read it) and `data-value` where a
 * number matters.
 */
export function probeRows(r) {
  const p = r.predicted;
  return {
    measured: [
      row('first byte', ms(r.first_byte_s), { key: 'first_byte_s', value: String(r.first_byte_s) }),
      row('one connection', `${human(r.request_bytes)} in ${ms(r.request_s)}: ${MB(r.connection_bytes_per_s)}`, { key: 'connection_bytes_per_s', value: String(r.connection_bytes_per_s) }),
      row(
        'at once',
        `${r.concurrent_requests} requests: ${MB(r.concurrent_bytes_per_s)}, ${r.link_capped ? 'capped (the link or the store)' : 'no cap seen'}`,
        { key: 'link_capped', value: String(r.link_capped) },
      ),
      row('decode', `${MB(r.decode_bytes_per_s_per_thread)} per thread × ${r.decode_threads}`, { key: 'decode_bytes_per_s_per_thread', value: String(r.decode_bytes_per_s_per_thread) }),
      row('compression ratio', `${r.compression_ratio.toFixed(2)} (decoded ÷ stored)`, { key: 'compression_ratio', value: String(r.compression_ratio) }),
      row('the probe read', `${human(r.bytes_read)} in ${r.requests} requests`, { key: 'requests', value: String(r.requests) }),
    ],
    predicted: [
      row(`epoch ${r.epoch} (${r.split})`, `${p.seconds.toFixed(1)} s at ${p.mb_per_s.toFixed(1)} MB/s decoded`, { key: 'seconds', value: String(p.seconds) }),
      row('first batch', `${p.first_batch_s.toFixed(2)} s`, { key: 'first_batch_s', value: String(p.first_batch_s) }),
      row('limiting stage', `${p.limiting_stage} (store ${MB(p.store_bytes_per_s)}, decode ${MB(p.decode_bytes_per_s)}, decoded)`, { key: 'limiting_stage', value: p.limiting_stage }),
      row('requests', `${p.requests} for ${human(p.stored_bytes)} stored, ${human(p.decoded_bytes)} decoded`, { key: 'predicted_requests', value: String(p.requests) }),
    ],
    suggested: [
      row('suggested', `max_inflight ${r.suggested_max_inflight}, block_chunks ${r.suggested_block_chunks}`, { key: 'suggested', value: `${r.suggested_max_inflight},${r.suggested_block_chunks}` }),
    ],
  };
}

/**
 * A probe report as one block: the measured, predicted and suggested tables side by side,
 * then the engine's notes in words.
 */
export function probeView(r) {
  const rows = probeRows(r);
  const group = (title, trs) => el('div', { className: 'ib-probe-group' }, el('h4', { textContent: title }), el('table', {}, el('tbody', {}, ...trs)));
  return el(
    'div',
    { className: 'ib-probe' },
    el('div', { className: 'ib-probe-groups' }, group('measured', rows.measured), group('predicted epoch', rows.predicted), group('suggestion', rows.suggested)),
    el('ul', { className: 'ib-probe-notes' }, ...r.notes.map((n) => el('li', { textContent: n }))),
  );
}

/**
 * A progress line for a slow step: a `<progress>` (indeterminate until `set` gets a total)
 * and its text. `start(text)` shows it, `set(text, value, max)` updates it, `stop()` hides it.
 */
export function progressLine(box) {
  const bar = el('progress');
  const text = el('span', { className: 'ib-progress-text' });
  box.replaceChildren(bar, text);
  box.hidden = true;
  return {
    start(t) {
      bar.removeAttribute('value');
      text.textContent = t;
      box.hidden = false;
      box.dataset.active = 'true';
    },
    set(t, value, max) {
      if (max) {
        bar.max = max;
        bar.value = value;
      }
      text.textContent = t;
    },
    stop() {
      box.hidden = true;
      box.dataset.active = 'false';
    },
  };
}
