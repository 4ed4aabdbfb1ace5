/* The JSON API client (under /api/v1) and the API key it sends: a server run with --auth wants
 * one, which the sign-in page (session.js) keeps in this browser's localStorage. */

export const API = '/api/v1';

/** A refused call: the HTTP status and the server's error code, message and field (if it names one). */
class ApiError extends Error {
  constructor(status, code, message, field) {
    super(message);
    this.status = status; this.code = code; this.field = field;
  }
}

const KEY_STORAGE = 'trainlog.apiKey';

/** The API key kept in this browser, or ''. */
export function storedKey() {
  try { return localStorage.getItem(KEY_STORAGE) || ''; } catch (e) { return ''; }
}

/** Keeps an API key in this browser (for this page only when storage is disabled). */
export function storeKey(key) {
  try { localStorage.setItem(KEY_STORAGE, key); } catch (e) { /* storage disabled: this page only */ }
}

/** Forgets the API key kept in this browser. */
export function forgetKey() {
  try { localStorage.removeItem(KEY_STORAGE); } catch (e) { /* storage disabled */ }
}

/** What a call refused for want of a valid key (401) does: set by the sign-in (session.js). */
let onUnauthorized = () => {};
export function setUnauthorizedHandler(handler) { onUnauthorized = handler; }

/** The header that sends the kept key, if any. */
export function authHeaders() {
  const key = storedKey();
  return key ? { Authorization: 'Bearer ' + key } : {};
}

/** Calls the JSON API; `body` (an object) makes it a POST unless `method` says otherwise. */
export async function api(path, opts = {}) {
  let res;
  const init = { method: opts.method || (opts.body !== undefined ? 'POST' : 'GET'), headers: { Accept: 'application/json', ...authHeaders() } };
  if (opts.body !== undefined) { init.body = JSON.stringify(opts.body); init.headers['Content-Type'] = 'application/json'; }
  try {
    res = await fetch(API + path, init);
  } catch (e) {
    throw new ApiError(0, 'network', 'Cannot reach the trainlog server (' + e.message + ').');
  }
  let body = null;
  try { body = await res.json(); } catch (e) { /* non-JSON body */ }
  if (!res.ok) {
    const err = body && body.error;
    const msg = err && err.message ? err.message : `HTTP ${res.status} ${res.statusText}`;
    // The key was revoked, or the server started checking keys: ask for one.
    if (res.status === 401) onUnauthorized();
    throw new ApiError(res.status, err && err.code, msg, err && err.field);
  }
  if (body === null && res.status === 204) return {};
  if (body === null) throw new ApiError(res.status, 'bad_response', 'The server sent a response that is not JSON.');
  return body;
}

/** fn over items with at most `limit` calls in flight; the results in order, as Promise.allSettled gives them. */
export async function settleLimited(items, limit, fn) {
  const out = new Array(items.length);
  let next = 0;
  const worker = async () => {
    while (next < items.length) {
      const i = next++;
      try { out[i] = { status: 'fulfilled', value: await fn(items[i]) }; } catch (e) { out[i] = { status: 'rejected', reason: e }; }
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
  return out;
}
