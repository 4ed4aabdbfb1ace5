/* State in the address: a view's settings in the hash's query (`#/p/NAME?filter=…`), so a reload
 * or a shared link shows the same view, and the last address of each project's runs table. */

/** A part of an address or API path, encoded. */
export const enc = encodeURIComponent;

/** The query part of the current hash route (`#/p/NAME?filter=…`). */
export function hashQuery() {
  const i = location.hash.indexOf('?');
  return new URLSearchParams(i < 0 ? '' : location.hash.slice(i + 1));
}

/** Puts a view's state in the hash's query, in place (no new history entry, no re-render), so a
 * reload or a copied link shows the same view. Empty values are left out. */
export function setHashQuery(entries) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(entries)) if (v !== '' && v !== null && v !== undefined && v !== false) q.set(k, String(v));
  const path = location.hash.split('?')[0] || '#/';
  const text = q.toString();
  history.replaceState(history.state, '', text ? `${path}?${text}` : path);
}

/** The last address of each project's runs table, so links back to it keep its filter and sort. */
export const tableAddress = new Map();

/** The address of a project's runs table, as last shown. */
export function tableHref(project) { return tableAddress.get(project) || '#/p/' + enc(project); }

/** Goes to an address; the router shows its view again even when it is the current one. */
export function showAddress(address) {
  if (location.hash === address) window.dispatchEvent(new HashChangeEvent('hashchange'));
  else location.hash = address;
}
