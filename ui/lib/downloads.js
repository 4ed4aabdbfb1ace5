/* Files the browser saves: text and blobs made here, artifacts fetched with the API key, and
 * CSV fields. */

import { authHeaders, storedKey } from './api.js';
import { el } from './dom.js';

/** A CSV field: quoted when it holds a comma, quote or line break. */
export function csvField(v) {
  const t = v === null || v === undefined ? '' : typeof v === 'object' ? JSON.stringify(v) : String(v);
  return /[",\r\n]/.test(t) ? '"' + t.replace(/"/g, '""') + '"' : t;
}

/** Saves text as a file the browser downloads. */
export function downloadText(name, text, type) {
  downloadBlob(name, new Blob([text], { type }));
}

/** Saves a Blob as a file the browser downloads. */
export function downloadBlob(name, blob) {
  const url = URL.createObjectURL(blob);
  const a = el('a', { href: url, download: name });
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10000);
}

/** Makes link `a` fetch its bytes with the API key when one is stored (a plain link cannot send
 * one), saving them as `name`; without a key the link downloads as it is. */
export function fetchedWithKey(a, name) {
  a.addEventListener('click', async (e) => {
    if (!storedKey()) return;
    e.preventDefault();
    const res = await fetch(a.href, { headers: authHeaders() });
    if (!res.ok) { alert(`Downloading ${name} failed: HTTP ${res.status}`); return; }
    downloadBlob(name, await res.blob());
  });
  return a;
}

/** A download link; with a key, the bytes are fetched with it. */
export function artifactLink(url, name) {
  return fetchedWithKey(el('a', { href: url, download: '' }, name), name.split('/').pop());
}
