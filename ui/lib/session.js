/* Who is signed in: asks the server (/whoami) at start, shows the sign-in page when a key is
 * needed or refused (a server run with --auth), shows the user in the top bar, and says what the
 * user may change. */

import { API, authHeaders, forgetKey, setUnauthorizedHandler, storedKey, storeKey } from './api.js';
import { el } from './dom.js';

let signingIn = false;

/** Who is calling, from /whoami: {auth, admin, user, default_role}. */
let ME = { auth: false };

/** What the router does: leave the view shown (its cleanup), and show the view of the address. */
let router = { leave: () => {}, show: () => {} };

/** Whether the sign-in page is shown (the router then leaves the page alone). */
export function isSigningIn() { return signingIn; }

/** Whether the signed-in user may change something with this role (`your_role` of a project or model). */
export function mayWrite(role) {
  if (!ME.auth || ME.admin) return true;
  const r = role || ME.default_role;
  return r === 'write' || r === 'admin';
}

/** Whether the signed-in user administers something with this role (deleting for good needs it). */
export function mayAdmin(role) {
  if (!ME.auth || ME.admin) return true;
  return (role || ME.default_role) === 'admin';
}

/** Shows who is signed in (with a sign-out button) in the top bar; nothing without --auth. */
function renderWho(me) {
  const who = document.getElementById('who');
  if (!who) return;
  who.replaceChildren();
  if (!me || !me.auth) return;
  who.append(
    el('span', { 'data-testid': 'signed-in-as' }, 'Signed in as ', el('strong', {}, me.user), me.admin ? ' (admin)' : ''),
    el('button', { type: 'button', 'data-testid': 'sign-out', onclick: signOut }, 'Sign out'),
  );
}

/** Forgets the key and shows the sign-in page. */
function signOut() {
  ME = { auth: true };
  forgetKey();
  renderWho(null);
  showSignIn('Signed out.');
}

/** The sign-in page: one API key, checked against the server, then kept in this browser. */
function showSignIn(message) {
  signingIn = true;
  router.leave();
  renderWho(null);
  const input = el('input', { type: 'password', id: 'api-key', 'data-testid': 'api-key', autocomplete: 'off', placeholder: 'tl_…', size: 60 });
  const status = el('p', { class: message ? 'muted' : 'hidden', 'data-testid': 'sign-in-message' }, message || '');
  const form = el('form', { class: 'sign-in', 'data-testid': 'sign-in' },
    el('h1', {}, 'Sign in'),
    el('p', {}, 'This server needs an API key. Make one with ', el('code', {}, 'trainlog keys create USER'),
      ' (or ask an admin); it is kept in this browser until you sign out.'),
    el('label', { for: 'api-key' }, 'API key '), input, ' ',
    el('button', { type: 'submit', 'data-testid': 'sign-in-button' }, 'Sign in'),
    status);
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    const key = input.value.trim();
    if (!key) return;
    const res = await fetch(API + '/whoami', { headers: { Accept: 'application/json', Authorization: 'Bearer ' + key } })
      .catch(() => null);
    if (!res || !res.ok) {
      status.className = 'error';
      status.textContent = res ? 'That key was refused: unknown, revoked, or for another server.' : 'Cannot reach the trainlog server.';
      return;
    }
    storeKey(key);
    signingIn = false;
    ME = await res.json();
    renderWho(ME);
    router.show();
  });
  document.getElementById('app').replaceChildren(form);
  input.focus();
}

/** Asks the sign-in page again when the key is refused. */
function keyRefused() {
  if (!signingIn) showSignIn(storedKey() ? 'Your API key was refused; sign in again.' : '');
}

/**
 * Asks who is calling: a server without --auth answers at once (and the view of the address is
 * shown); one with it needs a key. `leave` and `show` are the router's: leave the view shown,
 * and show the view of the address.
 */
export async function startSession(leave, show) {
  router = { leave, show };
  // The key was revoked, or the server started checking keys: ask for one.
  setUnauthorizedHandler(keyRefused);
  let res = null;
  try {
    res = await fetch(API + '/whoami', { headers: { Accept: 'application/json', ...authHeaders() } });
  } catch (e) { /* the views report an unreachable server */ }
  if (res && res.status === 401) {
    keyRefused();
    return;
  }
  if (res && res.ok) { ME = await res.json(); renderWho(ME); }
  show();
}
