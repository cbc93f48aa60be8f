// The probe: the explorer reads a few chunks of the store for the controls as they are, and
// the page shows what was measured, the predicted epoch and a suggestion one click applies.
import { $, showError, state, timedProgress } from './app.js';
import { probeView } from './components.js';
import { currentOptions, num, whatIf } from './options.js';

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

/** Forget the probe on screen (a new store was opened: it measured the old one). */
export function resetProbe() {
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
export function markProbe() {
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
export async function runProbe() {
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
export function applyProbe() {
  const r = state.probe.report;
  if (!r) return;
  $('maxInflight').value = String(r.suggested_max_inflight);
  $('blockChunks').value = String(r.suggested_block_chunks);
  $('controls').dispatchEvent(new Event('input', { bubbles: true }));
}
