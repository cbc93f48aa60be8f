// 5. A running job: its Prometheus endpoint read every couple of seconds and shown as one
// row per rank and split (job.js parses and lays out what it answers).
import { $, state } from './app.js';
import { jobTable, parseMetrics, rankRows } from './job.js';

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

export function stopWatching() {
  clearInterval(state.job.timer);
  state.job.timer = null;
  $('unwatch').disabled = true;
}

/** Watch `url` in place of the job watched so far (none for empty text): read it now, then every JOB_POLL_MS. */
export function watchJob(url) {
  stopWatching();
  if (!url) return;
  Object.assign(state.job, { url, rows: [], scrapes: 0, error: null });
  $('unwatch').disabled = false;
  scrapeJob();
  state.job.timer = setInterval(scrapeJob, JOB_POLL_MS);
}
