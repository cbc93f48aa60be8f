// 1. Open a store: the URL the user typed (https://, a public s3:// or gs:// bucket, the demo
// store), its arrays listed, and a checkbox per data variable for the controls.
import { openExplorer } from 'insitubatch';
import { $, clearError, showError, state } from './app.js';
import { cacheText, openCached } from './cache.js';
import { closePreview } from './preview.js';
import { resetProbe } from './probe.js';
import { update } from './tune.js';

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

/**
 * Open `text`'s store in place of the one open (its preview and probe are for the old one),
 * then show its arrays and the sections that need a store, and describe the controls.
 */
export async function openStore(text) {
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
    state.explorer = null;
    closePreview();
    const options = vars.length ? { variables: vars } : {};
    // Previews go through this browser's disk tier (cache.js) unless the box is unticked.
    const opened = $('cache').checked
      ? await openCached(openExplorer, url, options, { app: 'dashboard', location: url })
      : { explorer: await openExplorer(url, options), cache: null };
    state.explorer = opened.explorer;
    state.cache = opened.cache;
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
  status.textContent = `opened ${url}; ${cacheText(state.cache)}`;
  status.dataset.url = url;
  status.dataset.cache = state.cache && !state.cache.error ? state.cache.dir : '';
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

/** A checkbox per data variable (all checked) and the preview's variable menu; coordinates are skipped. */
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
