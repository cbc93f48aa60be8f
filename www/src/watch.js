// 5. A running job: its Prometheus endpoint read every couple of seconds and shown as one
// row per rank and split (job.js parses and lays out what it answers). The endpoint lets no
// page read it unless the job names that page's origin (`metrics_cors_origin`, native/src/
// metrics.rs), so the section says which origin to name, and a refused read says it again.
import { $, state } from './app.js';
import { jobTable, parseMetrics, rankRows } from './job.js';

/** How often a watched job's endpoint is read (its series change when a pass ends). */
const JOB_POLL_MS = 2000;

/** Read the watched endpoint once and show its ranks. */
async function scrapeJob() {
  const J = state.job;
  // A read still in flight when the watch changed answers for the job watched before.
  const watch = J.watch;
  try {
    const r = await fetch(J.url, { cache: 'no-store' });
    if (!r.ok) throw new Error(`HTTP ${r.status} from ${J.url}`);
    const text = await r.text();
    if (watch !== J.watch) return;
    J.rows = rankRows(parseMetrics(text));
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
    if (watch !== J.watch) return;
    // A read the browser refused for CORS is a TypeError without details (nor may a page
    // tell it from a job that is not running).
    J.error = e instanceof TypeError
      ? `cannot read the job's metrics: the job is not running there, or did not let this page read it (start it with metrics_cors_origin="${location.origin}", CLI: --metrics-cors-origin ${location.origin}): ${J.url}`
      : `cannot read ${J.url}: ${e.message}`;
    $('job-state').textContent = J.error;
    $('job-state').dataset.state = 'error';
  }
}

/** Name this page's origin where the section says what a job must let read it. */
export function showOrigin() {
  for (const el of document.querySelectorAll('.job-origin')) el.textContent = location.origin;
}

export function stopWatching() {
  clearInterval(state.job.timer);
  state.job.timer = null;
  state.job.watch += 1;
  $('unwatch').disabled = true;
}

/** Watch `url` in place of the job watched so far (none for empty text): read it now, then every JOB_POLL_MS. */
export function watchJob(url) {
  stopWatching();
  // Until its first read answers, the section shows no state: not the last job's.
  delete $('job-state').dataset.state;
  $('job-state').textContent = url ? `reading ${url}` : '';
  $('job-table').replaceChildren();
  if (!url) return;
  Object.assign(state.job, { url, rows: [], scrapes: 0, error: null });
  $('unwatch').disabled = false;
  scrapeJob();
  state.job.timer = setInterval(scrapeJob, JOB_POLL_MS);
}
