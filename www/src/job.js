// Watching a running job: its Prometheus endpoint (`metrics_address=` in Python,
// `--metrics-address` in the CLI) read from the page, one row per rank and split. The
// endpoint lets a page read it only when the job names that page's origin
// (`metrics_cors_origin=`, `--metrics-cors-origin`).

/**
 * The samples of a Prometheus text exposition: `[{ name, labels, value }]`.
 *
 * Hand-written: the format's sample lines are `name{k="v",...} value`, and the packages on
 * npm that parse it pull in an HTTP client and a metrics registry this page has no use for.
 * Comments (`#`), blank lines and samples this page does not read pass by.
 */
export function parseMetrics(text) {
  const out = [];
  for (const line of text.split('\n')) {
    const m = /^([a-zA-Z_:][\w:]*)(?:\{(.*)\})?\s+(\S+)/.exec(line);
    if (!m || line.startsWith('#')) continue;
    const labels = {};
    for (const l of (m[2] ?? '').matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) labels[l[1]] = l[2].replace(/\\(.)/g, '$1');
    out.push({ name: m[1], labels, value: Number(m[3]) });
  }
  return out;
}

/** Per (rank, split): passes, samples, bytes, the last pass's p95 wait, rate and limiting stage. */
export function rankRows(samples) {
  const rows = new Map();
  const rowOf = (l) => {
    const key = `${l.rank}/${l.split}`;
    if (!rows.has(key)) rows.set(key, { rank: Number(l.rank), split: l.split, worldSize: Number(l.world_size) });
    return rows.get(key);
  };
  const counters = {
    insitubatch_passes_total: 'passes',
    insitubatch_samples_total: 'samples',
    insitubatch_bytes_fetched_total: 'bytesFetched',
  };
  for (const s of samples) {
    if (s.labels.rank === undefined) continue;
    const r = rowOf(s.labels);
    if (counters[s.name]) r[counters[s.name]] = s.value;
    else if (s.name === 'insitubatch_batch_wait_seconds' && s.labels.key === '0.95') r.waitP95 = s.value;
    else if (s.name === 'insitubatch_samples_per_second') r.rate = s.value;
    else if (s.name === 'insitubatch_limiting_stage' && s.value === 1) r.stage = s.labels.key;
  }
  return [...rows.values()].sort((a, b) => a.rank - b.rank || a.split.localeCompare(b.split));
}

/** The table of `rankRows`, each row's cells marked with `data-*` for the tests. */
export function jobTable(rows) {
  const t = document.createElement('table');
  t.className = 'ib-table';
  const head = t.createTHead().insertRow();
  for (const h of ['rank', 'split', 'passes', 'samples', 'per s', 'p95 wait', 'limit']) {
    const th = document.createElement('th');
    th.textContent = h;
    head.append(th);
  }
  const body = t.createTBody();
  for (const r of rows) {
    const tr = body.insertRow();
    tr.dataset.rank = String(r.rank);
    tr.dataset.split = r.split;
    const cells = [
      `${r.rank} of ${r.worldSize}`,
      r.split,
      r.passes ?? 0,
      r.samples ?? 0,
      r.rate === undefined ? '–' : r.rate.toFixed(1),
      r.waitP95 === undefined ? '–' : `${(r.waitP95 * 1000).toFixed(1)} ms`,
      r.stage ?? '–',
    ];
    const keys = ['rank', 'split', 'passes', 'samples', 'rate', 'wait', 'stage'];
    cells.forEach((c, i) => {
      const td = tr.insertCell();
      td.textContent = String(c);
      td.dataset.key = keys[i];
    });
  }
  return t;
}
