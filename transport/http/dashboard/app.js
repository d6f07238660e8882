// The developer dashboard (issue 18): a client of the service's public HTTP API only.
//
// Rules this file keeps (README "Developer dashboard"):
// - Credentials (the API key, the admin token) live in sessionStorage only and go out as
//   `Authorization: Bearer`; never in a URL, a cookie, localStorage or a log line.
// - Text from the API or the user reaches the page through textContent and createElement
//   only: no HTML is ever parsed from data (no innerHTML anywhere in this file).
// - Secrets shown once (a new API key, a webhook signing secret) are removed from the page
//   when dismissed.
'use strict';

const RESELLER = '/api/v2/reseller';
const KEY_STORE = 'esim.dashboard.api_key';
const ADMIN_STORE = 'esim.dashboard.admin_token';

const $ = (id) => document.getElementById(id);

/** An element with attributes and children (strings become text nodes, never HTML). */
function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (name === 'text') node.textContent = String(value);
    else node.setAttribute(name, value === true ? '' : String(value));
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function clear(node) {
  while (node.firstChild) node.removeChild(node.firstChild);
  return node;
}

/** What each data-bound message describes: its key and the value it was said about. */
const bound = new Map();
/** The value each key (`wallet`, `esim`, `account:ID`, `clock`, `inventory`) last showed. */
const shownValues = new Map();

/**
 * Shows a message. With `about` (a data key), the message describes that data as it is
 * now and is cleared as soon as the page shows it changed (see `changed`), so a success
 * message never stands beside figures it no longer matches.
 */
function say(id, text, isError, about) {
  const node = $(id);
  node.textContent = text || '';
  node.classList.toggle('bad', Boolean(isError));
  if (about && text) bound.set(id, { key: about, value: shownValues.get(about) });
  else bound.delete(id);
}

/** The page now shows `value` for `key`: messages said about another value are cleared. */
function changed(key, value) {
  shownValues.set(key, value);
  for (const [id, message] of bound) {
    if (message.key === key && message.value !== value) {
      say(id, '');
    }
  }
}

/** An identifier (ICCID, account, group or event id): monospace, never wrapped. */
function idText(value, tag) {
  if (value === null || value === undefined || value === '') return '—';
  return el(tag || 'span', { class: 'id', title: String(value), text: String(value) });
}

/** A service time as people read it (`2026-01-01 00:17:00 UTC`), never wrapped; the exact RFC 3339 text is its tooltip. */
function when(value) {
  if (value === null || value === undefined || value === '') return '—';
  const text = String(value).replace('T', ' ').replace(/\.000Z$|Z$/, '') + ' UTC';
  return el('time', { datetime: String(value), title: String(value), text });
}

/** A duration in words: `59 s`, `16 min 59 s`, `2 h 5 min`. */
function duration(seconds) {
  if (seconds <= 0) return 'due now';
  const h = Math.floor(seconds / 3600);
  const m = Math.floor((seconds % 3600) / 60);
  const sec = seconds % 60;
  if (h) return `${h} h${m ? ` ${m} min` : ''}`;
  if (m) return `${m} min${sec ? ` ${sec} s` : ''}`;
  return `${sec} s`;
}

/** The API's enum values in words; the code itself is the tooltip. */
const WORDS = {
  status: { pending: 'Pending (not installed yet)', active: 'Active', suspended: 'Suspended (data off)', terminated: 'Terminated' },
  euicc: { RELEASED: 'Released (not downloaded)', DOWNLOADED: 'Downloaded', INSTALLED: 'Installed', ENABLED: 'Enabled on the device' },
  pending: { defund_pending: 'Return on its way', move_pending: 'Moving into a group' },
  group: { active: 'Active', defund_pending: 'Return on its way' },
  timer: {
    usage_report: 'Usage report',
    esim_return: 'Return settles',
    group_return: 'Group return settles',
    card_charge: 'Card charge settles',
    webhook_retry: 'Webhook retry',
    group_low_event: 'group.balance_low goes out',
  },
};

/** A speed code in words: NO_LIMIT is full speed, SPEED_1500_KBPS is 1.5 Mbit/s. */
function speedWords(code) {
  if (code === 'NO_LIMIT') return 'No limit (full speed)';
  const match = /^SPEED_(\d+)_KBPS$/.exec(code || '');
  if (!match) return show(code);
  const kbps = Number(match[1]);
  return kbps >= 1000 ? `${kbps / 1000} Mbit/s` : `${kbps} kbit/s`;
}

/** An enum value in words with its code as the tooltip (`—` when absent). */
function word(kind, code) {
  if (code === null || code === undefined || code === '') return '—';
  const text = kind === 'speed' ? speedWords(code) : (WORDS[kind] && WORDS[kind][code]) || String(code);
  return el('span', { class: 'word', title: `API value: ${code}`, text });
}

function money(value) {
  if (value === null || value === undefined) return '—';
  return Number(value).toFixed(2);
}

function show(value) {
  if (value === null || value === undefined || value === '') return '—';
  return String(value);
}

/** An API error: the spec's error body (`error`, `code`, `message`). */
class ApiError extends Error {
  constructor(status, body) {
    const message = body && body.message ? body.message : `HTTP ${status}`;
    super(message);
    this.status = status;
    this.code = body && body.code ? body.code : '';
  }
}

/** One call to the public API; `who` is 'reseller' (API key) or 'admin' (admin token). */
async function call(who, method, path, body) {
  const token = sessionStorage.getItem(who === 'reseller' ? KEY_STORE : ADMIN_STORE) || '';
  const headers = { Authorization: `Bearer ${token}`, Accept: 'application/json' };
  const init = { method, headers, credentials: 'omit', cache: 'no-store', referrerPolicy: 'no-referrer' };
  if (body !== undefined) {
    headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  const url = who === 'reseller' ? RESELLER + path : path;
  const response = await fetch(url, init);
  const type = response.headers.get('content-type') || '';
  const data = type.includes('json') ? await response.json().catch(() => null) : await response.text();
  if (!response.ok) {
    if (response.status === 401 && who === 'reseller' && sessionStorage.getItem(KEY_STORE)) {
      // The key was revoked elsewhere: back to the sign-in form, saying why.
      resellerSignOut(new ApiError(response.status, data).message);
    }
    throw new ApiError(response.status, data);
  }
  return data;
}

/** The error text to show: the `message` of the spec's error body, with its code. */
function errorText(error) {
  if (error instanceof ApiError) return error.code ? `${error.message} (${error.code})` : error.message;
  return `Request failed: ${error.message}`;
}

/**
 * A guarded action: shows "what will happen" with Confirm and Cancel buttons in `box`;
 * Confirm runs `action`, whose answer (or the spec's error text) goes to `msgId`.
 */
function confirmStep(box, question, label, msgId, action, about) {
  const node = $(box);
  clear(node);
  const yes = el('button', { type: 'button', class: 'danger', text: `Confirm: ${label}` });
  const no = el('button', { type: 'button', text: 'Cancel' });
  node.append(el('p', { text: question }), yes, no);
  node.hidden = false;
  yes.focus();
  no.addEventListener('click', () => { node.hidden = true; clear(node); });
  yes.addEventListener('click', async () => {
    node.hidden = true;
    clear(node);
    try {
      say(msgId, await action(), false, about);
    } catch (error) {
      say(msgId, errorText(error), true);
    }
  });
}

/** A box showing a secret once; Dismiss removes the secret from the page. */
function showOnce(boxId, title, secret, note) {
  const box = $(boxId);
  clear(box);
  const dismiss = el('button', { type: 'button', text: 'I have stored it: dismiss' });
  dismiss.addEventListener('click', () => { clear(box); box.hidden = true; });
  box.append(
    el('p', { class: 'once-title', text: title }),
    el('code', { class: 'secret', tabindex: '0', text: secret }),
    note ? el('p', { class: 'hint', text: note }) : null,
    dismiss,
  );
  box.hidden = false;
  dismiss.focus();
}

function table(id) {
  return clear(document.querySelector(`#${id} tbody`));
}

/** A table row; each cell carries its column name for the stacked narrow layout. */
function row(tableId, cells) {
  const heads = [...document.querySelectorAll(`#${tableId} thead th`)].map((th) => th.textContent);
  const tr = el('tr');
  cells.forEach((cell, index) => tr.append(el('td', { 'data-label': heads[index] || '' }, cell)));
  return tr;
}

function emptyRow(tableId, text) {
  const columns = document.querySelectorAll(`#${tableId} thead th`).length;
  return el('tr', {}, el('td', { colspan: columns, class: 'empty', text }));
}

function figures(id, pairs) {
  const dl = clear($(id));
  for (const [name, value] of pairs) dl.append(el('div', {}, el('dt', { text: name }), el('dd', {}, value)));
}

function query(params) {
  const search = new URLSearchParams();
  for (const [name, value] of Object.entries(params)) if (value !== '' && value !== null && value !== undefined) search.set(name, value);
  const text = search.toString();
  return text ? `?${text}` : '';
}

// ---------------------------------------------------------------- views (tabs)

/** Shows one section (pane) of a view and marks its button; remembered for the tab. */
function showSection(view, name) {
  const tabs = [...document.querySelectorAll(`.section-tab[data-view="${view}"]`)];
  if (!tabs.some((tab) => tab.dataset.section === name)) name = tabs[0].dataset.section;
  for (const tab of tabs) {
    const on = tab.dataset.section === name;
    tab.setAttribute('aria-current', on ? 'true' : 'false');
    $(`pane-${tab.dataset.section}`).hidden = !on;
  }
  sessionStorage.setItem(`esim.dashboard.section.${view}`, name);
  if (name === 'report') fitReport();
  if (name === 'inventory' && sessionStorage.getItem(ADMIN_STORE)) loadInventory();
}

function showView(name) {
  for (const tab of document.querySelectorAll('.tab')) {
    const on = tab.dataset.view === name;
    tab.setAttribute('aria-current', on ? 'page' : 'false');
  }
  for (const view of document.querySelectorAll('.view')) view.hidden = view.id !== `view-${name}`;
  const adminForm = $('admin-signin');
  const needsAdmin = name !== 'reseller';
  const adminIn = Boolean(sessionStorage.getItem(ADMIN_STORE));
  adminForm.hidden = !needsAdmin || adminIn;
  if (needsAdmin) $(`view-${name}`).before(adminForm);
  $('operator-app').hidden = !adminIn;
  $('sandbox-app').hidden = !adminIn;
  sessionStorage.setItem('esim.dashboard.view', name);
  if (name === 'operator' && adminIn) loadOperator();
  if (name === 'sandbox' && adminIn) { loadClock(); loadPending(); }
}

// ---------------------------------------------------------------- reseller

const state = { esimOffset: 0, esimTotal: 0, iccid: null, groupId: null, webhookId: null, webhookUrl: '', accountsOffset: 0, accountsTotal: 0, accountId: null };

async function resellerSignIn(event) {
  event.preventDefault();
  const input = $('reseller-key');
  const key = input.value.trim();
  say('reseller-signin-error', '');
  sessionStorage.setItem(KEY_STORE, key);
  try {
    await call('reseller', 'GET', '/account');
  } catch (error) {
    sessionStorage.removeItem(KEY_STORE);
    say('reseller-signin-error', errorText(error), true);
    return;
  }
  input.value = '';
  resellerShown();
}

function resellerSignOut(reason) {
  sessionStorage.removeItem(KEY_STORE);
  for (const id of ['key-once', 'webhook-secret']) { clear($(id)); $(id).hidden = true; }
  $('reseller-app').hidden = true;
  $('reseller-signin').hidden = false;
  say('reseller-signin-error', typeof reason === 'string' ? reason : '', typeof reason === 'string');
}

function resellerShown() {
  const signedIn = Boolean(sessionStorage.getItem(KEY_STORE));
  $('reseller-signin').hidden = signedIn;
  $('reseller-app').hidden = !signedIn;
  if (signedIn) resellerRefresh();
}

async function resellerRefresh() {
  await Promise.all([loadWallet(), loadEsims(), loadGroups(), loadWebhooks(), loadEvents(), loadKeys(), loadRefill()]);
  if (state.iccid) await loadEsim(state.iccid);
}

async function loadWallet() {
  try {
    const [wallet, account] = await Promise.all([call('reseller', 'GET', '/wallet/balance'), call('reseller', 'GET', '/account')]);
    $('reseller-who').textContent = `${account.company_name || account.id} (${account.id})`;
    figures('wallet', [
      ['Balance (USD)', el('strong', { id: 'wallet-balance', text: money(wallet.balance_usd) })],
      ['Lifetime top-ups (USD)', money(wallet.lifetime_topup_usd)],
      ['Lifetime usage (USD): fees and funds', el('span', { class: 'word', title: 'Every provisioning fee and every fund, including credit still in wallets or returned later; the finance report\'s "spent" counts only what left for good (see What the figures mean)', text: money(wallet.lifetime_usage_usd) })],
      ['eSIMs (active / total)', `${account.esim_count.active} / ${account.esim_count.total}`],
      ['Account status', show(account.account_status)],
      ['Data suspended', wallet.data_suspended ? 'yes' : 'no'],
    ]);
    changed('wallet', money(wallet.balance_usd));
  } catch (error) {
    figures('wallet', [['Error', errorText(error)]]);
  }
}

async function provision(event) {
  event.preventDefault();
  const body = {};
  const label = $('provision-label').value;
  const reference = $('provision-ref').value;
  const group = $('provision-group').value;
  if (label) body.label = label;
  if (reference) body.end_user_reference = reference;
  if (group) body.group_id = group;
  say('provision-msg', 'Provisioning…');
  try {
    const made = await call('reseller', 'POST', '/esim/provision', body);
    state.iccid = made.iccid;
    if (group) state.groupId = group;
    await Promise.all([loadWallet(), loadEsims(), loadEsim(made.iccid), group ? loadGroups() : null]);
    say('provision-msg', `Provisioned ${made.iccid} for ${money(made.cost)} USD; balance ${money(made.balance_remaining)} USD.`, false, 'wallet');
  } catch (error) {
    say('provision-msg', errorText(error), true);
  }
}

async function loadEsims() {
  const limit = Number($('esims-limit').value);
  const status = $('esims-status').value;
  try {
    const page = await call('reseller', 'GET', `/esim/list${query({ status, limit, offset: state.esimOffset })}`);
    state.esimTotal = page.total;
    const body = table('esims-table');
    for (const esim of page.esims) {
      const open = el('button', { type: 'button', class: 'link id', title: esim.iccid, text: esim.iccid, 'aria-label': `Open eSIM ${esim.iccid}` });
      open.addEventListener('click', () => { state.iccid = esim.iccid; loadEsim(esim.iccid, true); });
      body.append(row('esims-table', [open, show(esim.label), show(esim.end_user_reference), word('status', esim.status), money(esim.wallet_balance_usd), when(esim.created_at)]));
    }
    if (!page.esims.length) body.append(emptyRow('esims-table', 'No eSIMs on this page.'));
    const first = page.total ? page.offset + 1 : 0;
    $('esims-range').textContent = `${first}–${page.offset + page.esims.length} of ${page.total}`;
    $('esims-prev').disabled = page.offset === 0;
    $('esims-next').disabled = page.offset + page.esims.length >= page.total;
  } catch (error) {
    table('esims-table').append(emptyRow('esims-table', errorText(error)));
  }
}

async function loadEsim(iccid, focus) {
  const card = $('esim-detail-card');
  try {
    const esim = await call('reseller', 'GET', `/esim/${encodeURIComponent(iccid)}`);
    card.hidden = false;
    $('esim-detail-iccid').textContent = esim.iccid;
    $('esim-detail-iccid').className = 'id';
    // The QR image and install link: GET /esim/{iccid}/qr-code (decision 130).
    const shown = await call('reseller', 'GET', `/esim/${encodeURIComponent(iccid)}/qr-code`).catch(() => null);
    const qr = clear($('esim-qr'));
    if (shown && typeof shown.qr_code === 'string' && shown.qr_code.startsWith('data:image/png;base64,')) {
      qr.append(el('img', { src: shown.qr_code, alt: `QR code of eSIM ${esim.iccid}`, width: 164, height: 164 }));
    } else {
      qr.append(el('p', { class: 'hint', text: 'The QR image could not be loaded; the LPA string is what it encodes.' }));
    }
    const install = shown && typeof shown.direct_install_url === 'string' && shown.direct_install_url.startsWith('https://')
      ? el('a', { href: shown.direct_install_url, rel: 'noreferrer noopener', target: '_blank', text: 'Install link' })
      : '—';
    const status = word('status', esim.status);
    status.id = 'esim-status';
    figures('esim-detail', [
      ['Status', status],
      ['Label', show(esim.label)],
      ['Reference', show(esim.end_user_reference)],
      ['Wallet (USD)', el('span', { id: 'esim-wallet', text: money(esim.wallet_balance_usd) })],
      ['Data charged, reported (USD)', el('span', { class: 'word', title: 'Data is taken from the wallet when used; the upstream network reports it after the 15-minute pause that follows a fund, at the next sync cycle. This figure counts reported data only (the Sandbox view lists reports still pending).', text: money(esim.total_data_charged_usd) })],
      ['Data enabled', esim.data_enabled ? 'yes' : 'no'],
      ['Throttle', word('speed', esim.throttle)],
      ['eUICC state', word('euicc', esim.euicc_state)],
      ['Pending', word('pending', esim.pending)],
      ['Group', idText(esim.group_id)],
      ['LPA', el('code', { class: 'wrap', text: esim.lpa_string })],
      ['Install', install],
      ['Created', when(esim.created_at)],
      ['Activated', when(esim.activated_at)],
      ['Terminated', when(esim.terminated_at)],
    ]);
    // What a message about this eSIM described: cleared once any of it changes.
    changed('esim', [esim.iccid, esim.status, esim.wallet_balance_usd, esim.total_data_charged_usd, esim.pending, esim.throttle, esim.data_enabled, esim.group_id].join('|'));
    if (focus) {
      showSection('reseller', 'esims');
      $('h-esim').scrollIntoView({ block: 'start' });
    }
  } catch (error) {
    card.hidden = false;
    say('esim-msg', errorText(error), true);
  }
}

function esimAction(label, question, method, path, body, describe) {
  const iccid = state.iccid;
  confirmStep('esim-confirm', question.replace('{iccid}', iccid), label, 'esim-msg', async () => {
    const answer = await call('reseller', method, `/esim/${encodeURIComponent(iccid)}${path}`, body);
    await Promise.all([loadWallet(), loadEsims(), loadEsim(iccid)]);
    return describe(answer);
  }, 'esim');
}

function fund(event) {
  event.preventDefault();
  const amount = Number($('fund-amount').value);
  esimAction('fund', `Fund eSIM {iccid} with ${money(amount)} USD from the reseller balance?`, 'POST', '/fund', { amount },
    (a) => `Funded ${money(a.funded_usd)} USD: eSIM wallet ${money(a.wallet_balance_usd)} USD (the part below a retail cent of $0.009 is conversion dust), balance ${money(a.account_balance_remaining)} USD.`);
}

function throttle(event) {
  event.preventDefault();
  const speed = $('throttle-speed').value;
  esimAction('throttle', `Throttle eSIM {iccid} to ${speedWords(speed)}?`, 'POST', '/throttle', { speed }, (a) => `Throttle now ${speedWords(a.throttle)} (${a.throttle}).`);
}

// ---------------------------------------------------------------- groups

async function loadGroups() {
  try {
    const list = await call('reseller', 'GET', '/groups');
    const body = table('groups-table');
    const select = $('provision-group');
    const chosen = select.value;
    clear(select).append(el('option', { value: '', text: 'Standalone' }));
    for (const group of list.groups) {
      select.append(el('option', { value: group.id, text: group.name }));
      const open = el('button', { type: 'button', text: 'Members', 'aria-label': `Open group ${group.name}` });
      open.addEventListener('click', () => { state.groupId = group.id; loadGroup(); });
      body.append(row('groups-table', [group.name, money(group.balance_usd), show(group.esim_count), word('group', group.status), open]));
    }
    select.value = chosen;
    if (!list.groups.length) body.append(emptyRow('groups-table', 'No groups yet.'));
    if (state.groupId) await loadGroup();
  } catch (error) {
    say('groups-msg', errorText(error), true);
  }
}

async function loadGroup() {
  const id = state.groupId;
  try {
    const [group, members] = await Promise.all([
      call('reseller', 'GET', `/groups/${encodeURIComponent(id)}`),
      call('reseller', 'GET', `/groups/${encodeURIComponent(id)}/esims?limit=100`),
    ]);
    $('group-detail').hidden = false;
    $('group-detail-title').textContent = `Group ${group.name}: ${money(group.balance_usd)} USD, ${members.total} members`;
    const body = table('group-members');
    for (const esim of members.esims) {
      const remove = el('button', { type: 'button', text: 'Remove', 'aria-label': `Remove ${esim.iccid} from the group` });
      remove.addEventListener('click', () => confirmStep('group-confirm', `Remove eSIM ${esim.iccid} from group ${group.name}? It leaves with a $0 balance.`, 'remove', 'groups-msg', async () => {
        await call('reseller', 'DELETE', `/groups/${encodeURIComponent(id)}/esims/${encodeURIComponent(esim.iccid)}`);
        await loadGroups();
        return `Removed ${esim.iccid}.`;
      }));
      body.append(row('group-members', [idText(esim.iccid), show(esim.label), word('status', esim.status), remove]));
    }
    if (!members.esims.length) body.append(emptyRow('group-members', 'No members.'));
  } catch (error) {
    say('groups-msg', errorText(error), true);
  }
}

async function createGroup(event) {
  event.preventDefault();
  try {
    const group = await call('reseller', 'POST', '/groups', { name: $('group-name').value });
    $('group-name').value = '';
    state.groupId = group.id;
    say('groups-msg', `Created group ${group.name}.`);
    await loadGroups();
  } catch (error) {
    say('groups-msg', errorText(error), true);
  }
}

function fundGroup(event) {
  event.preventDefault();
  const amount = Number($('group-fund-amount').value);
  const id = state.groupId;
  confirmStep('group-confirm', `Fund the group with ${money(amount)} USD from the reseller balance?`, 'fund group', 'groups-msg', async () => {
    await call('reseller', 'POST', `/groups/${encodeURIComponent(id)}/fund`, { amount });
    await Promise.all([loadGroups(), loadWallet()]);
    return `Funded the group with ${money(amount)} USD.`;
  });
}

function defundGroup() {
  const id = state.groupId;
  confirmStep('group-confirm', 'Return the group balance to the reseller balance? Data pauses on every member until it is funded again.', 'defund group', 'groups-msg', async () => {
    await call('reseller', 'POST', `/groups/${encodeURIComponent(id)}/defund`);
    await loadGroups();
    return 'Group defund requested: the credit arrives in about 15 minutes.';
  });
}

async function addToGroup(event) {
  event.preventDefault();
  const iccid = $('group-add-iccid').value.trim();
  try {
    const answer = await call('reseller', 'POST', `/groups/${encodeURIComponent(state.groupId)}/esims`, { iccid });
    $('group-add-iccid').value = '';
    say('groups-msg', answer.status === 'move_pending' ? `Move of ${iccid} pending (about ${answer.settles_in_minutes} minutes).` : `Added ${iccid}.`);
    await loadGroups();
  } catch (error) {
    say('groups-msg', errorText(error), true);
  }
}

// ---------------------------------------------------------------- webhooks

async function loadWebhooks() {
  try {
    const list = await call('reseller', 'GET', '/webhooks');
    const types = $('events-type');
    if (types.options.length === 1) for (const name of list.available_events) types.append(el('option', { text: name }));
    const body = table('webhooks-table');
    for (const hook of list.webhooks) {
      const test = el('button', { type: 'button', text: 'Test', 'aria-label': `Send a test event to ${hook.url}` });
      test.addEventListener('click', () => testWebhook(hook));
      const log = el('button', { type: 'button', text: 'Delivery log', 'aria-label': `Delivery log of ${hook.url}` });
      log.addEventListener('click', () => { state.webhookId = hook.id; state.webhookUrl = hook.url; loadDeliveries(); });
      const rotate = el('button', { type: 'button', text: 'Rotate secret', 'aria-label': `Rotate the signing secret of ${hook.url}` });
      rotate.addEventListener('click', () => confirmStep('webhook-confirm', `Rotate the signing secret of ${hook.url}? The old one keeps signing for 24 hours.`, 'rotate secret', 'webhooks-msg', async () => {
        const rotated = await call('reseller', 'POST', `/webhooks/${encodeURIComponent(hook.id)}/rotate-secret`);
        showOnce('webhook-secret', `New signing secret of ${hook.url} (shown once):`, rotated.signing_secret, rotated.note);
        return 'Secret rotated.';
      }));
      const actions = el('div', { class: 'cell-actions' }, test, log, rotate);
      body.append(row('webhooks-table', [el('span', { class: 'wrap', text: hook.url }), hook.events.join(', '), hook.active ? 'yes' : 'no', show(hook.failure_count), actions]));
    }
    if (!list.webhooks.length) body.append(emptyRow('webhooks-table', 'No webhooks yet.'));
  } catch (error) {
    say('webhooks-msg', errorText(error), true);
  }
}

async function createWebhook(event) {
  event.preventDefault();
  const events = $('webhook-events').value.split(',').map((s) => s.trim()).filter(Boolean);
  try {
    const hook = await call('reseller', 'POST', '/webhooks', { url: $('webhook-url').value.trim(), events });
    $('webhook-url').value = '';
    showOnce('webhook-secret', `Signing secret of ${hook.url} (shown once):`, hook.signing_secret, hook.note);
    say('webhooks-msg', `Created webhook ${hook.id}.`);
    state.webhookId = hook.id;
    state.webhookUrl = hook.url;
    await loadWebhooks();
  } catch (error) {
    say('webhooks-msg', errorText(error), true);
  }
}

async function testWebhook(hook) {
  say('webhooks-msg', `Testing ${hook.url}…`);
  try {
    const result = await call('reseller', 'POST', `/webhooks/${encodeURIComponent(hook.id)}/test`);
    say('webhooks-msg', `Test to ${hook.url}: ${result.success ? 'delivered' : 'failed'} (HTTP ${result.status})${result.error ? `, ${result.error}` : ''}.`, !result.success);
    if (state.webhookId === hook.id) await loadDeliveries();
  } catch (error) {
    say('webhooks-msg', errorText(error), true);
  }
}

async function loadDeliveries() {
  const id = state.webhookId;
  const url = state.webhookUrl;
  if (!id) return;
  try {
    const page = await call('reseller', 'GET', `/webhooks/${encodeURIComponent(id)}/deliveries?limit=100`);
    $('deliveries').hidden = false;
    $('deliveries-title').textContent = `Delivery log of ${url} (${page.total} attempt${page.total === 1 ? '' : 's'})`;
    const body = table('deliveries-table');
    for (const attempt of page.attempts) {
      const result = attempt.success ? `delivered (HTTP ${attempt.status})` : `failed (${attempt.status !== null ? `HTTP ${attempt.status}` : show(attempt.error)})`;
      let resend = '—';
      if (attempt.event_type !== 'test') {
        resend = el('button', { type: 'button', text: 'Resend', 'aria-label': `Resend event ${attempt.event_id}` });
        resend.addEventListener('click', () => resendEvent(attempt.event_id));
      }
      const tr = row('deliveries-table', [when(attempt.attempted_at), el('span', {}, `${attempt.event_type} `, idText(attempt.event_id)), `${attempt.attempt}${attempt.manual ? ' (manual)' : ''}`, result, when(attempt.next_retry_at), resend]);
      tr.classList.add(attempt.success ? 'ok' : 'failed');
      body.append(tr);
    }
    if (!page.attempts.length) body.append(emptyRow('deliveries-table', 'No finished attempts yet.'));
  } catch (error) {
    say('webhooks-msg', errorText(error), true);
  }
}

async function resendEvent(eventId) {
  try {
    const sent = await call('reseller', 'POST', `/events/${encodeURIComponent(eventId)}/resend`, { webhook_id: state.webhookId });
    say('webhooks-msg', `Resent ${sent.event_type} ${sent.event_id} (delivery ${sent.delivery_id}).`);
    // The attempt is logged once the receiver answers.
    for (let i = 0; i < 20; i += 1) {
      await new Promise((resolve) => setTimeout(resolve, 250));
      const page = await call('reseller', 'GET', `/webhooks/${encodeURIComponent(state.webhookId)}/deliveries?limit=1`);
      if (page.attempts.length && page.attempts[0].delivery_id === sent.delivery_id) break;
    }
    await Promise.all([loadDeliveries(), loadWebhooks(), loadEvents()]);
  } catch (error) {
    say('webhooks-msg', errorText(error), true);
  }
}

// ---------------------------------------------------------------- events

async function loadEvents(event) {
  if (event) event.preventDefault();
  const params = {
    type: $('events-type').value,
    iccid: $('events-iccid').value.trim(),
    group_id: $('events-group').value.trim(),
    created_after: $('events-after').value.trim(),
    limit: 50,
  };
  try {
    const page = await call('reseller', 'GET', `/events${query(params)}`);
    const body = table('events-table');
    for (const item of page.events) {
      const open = el('button', { type: 'button', text: 'Envelope', 'aria-label': `Show the envelope of ${item.id}` });
      open.addEventListener('click', async () => {
        try {
          const envelope = await call('reseller', 'GET', `/events/${encodeURIComponent(item.id)}`);
          const pre = $('event-envelope');
          pre.textContent = JSON.stringify(envelope, null, 2);
          pre.hidden = false;
          pre.focus();
        } catch (error) {
          say('events-msg', errorText(error), true);
        }
      });
      body.append(row('events-table', [item.event, when(item.created_at), idText(item.id), open]));
    }
    if (!page.events.length) body.append(emptyRow('events-table', 'No events match.'));
    $('events-range').textContent = `Newest ${page.events.length} of ${page.total}.`;
    say('events-msg', '');
  } catch (error) {
    say('events-msg', errorText(error), true);
  }
}

// ---------------------------------------------------------------- API keys and auto-refill

async function loadKeys() {
  try {
    const list = await call('reseller', 'GET', '/keys');
    const body = table('keys-table');
    for (const key of list.keys) {
      // Keys made before the key list existed have no prefix or creation time: named by id.
      const name = key.prefix ? `${key.prefix}…` : key.id;
      const revoke = el('button', { type: 'button', class: 'danger', text: 'Revoke', 'aria-label': `Revoke key ${name}` });
      revoke.addEventListener('click', () => confirmStep('key-confirm', `Revoke the key ${name}? It answers 401 from then on${key.current ? '; it is the key this page uses, so you will be signed out' : ''}.`, 'revoke', 'keys-msg', async () => {
        await call('reseller', 'DELETE', `/keys/${encodeURIComponent(key.id)}`);
        if (key.current) {
          resellerSignOut('You revoked the key this page used: signed out.');
          return '';
        }
        await loadKeys();
        return `Revoked ${name}.`;
      }));
      body.append(row('keys-table', [el('code', { class: 'id', text: name }), when(key.created_at), key.current ? 'yes' : 'no', revoke]));
    }
  } catch (error) {
    table('keys-table').append(emptyRow('keys-table', errorText(error)));
  }
}

async function createKey() {
  try {
    const made = await call('reseller', 'POST', '/keys');
    showOnce('key-once', `New API key ${made.id} (shown once; store it now):`, made.api_key, 'It works at once; revoke it below when it is no longer needed.');
    say('keys-msg', `Created ${made.prefix ? `${made.prefix}…` : made.id}.`);
    await loadKeys();
  } catch (error) {
    say('keys-msg', errorText(error), true);
  }
}

async function loadRefill() {
  try {
    const refill = await call('reseller', 'GET', '/auto-refill');
    figures('refill-state', [
      ['Enabled', refill.enabled ? 'yes' : 'no'],
      ['Amount (USD)', money(refill.amount_usd)],
      ['Card', show(refill.card)],
      ['Charges in the last 24 h', `${refill.charges_last_24h} of at most ${refill.max_charges_per_24h}`],
      ['Charge in flight (USD)', money(refill.charge_in_flight_usd)],
      ['Last error', refill.last_error ? `${refill.last_error.message} (${refill.last_error.code}, ${refill.last_error.at})` : 'none'],
    ]);
    $('refill-enabled').checked = Boolean(refill.enabled);
    if (refill.amount_usd !== null && refill.amount_usd !== undefined) $('refill-amount').value = refill.amount_usd;
  } catch (error) {
    figures('refill-state', [['Error', errorText(error)]]);
  }
}

async function saveRefill(event) {
  event.preventDefault();
  const body = { enabled: $('refill-enabled').checked };
  const amount = $('refill-amount').value;
  if (amount !== '') body.amount_usd = Number(amount);
  try {
    await call('reseller', 'PUT', '/auto-refill', body);
    say('refill-msg', 'Auto-refill saved.');
    await loadRefill();
  } catch (error) {
    say('refill-msg', errorText(error), true);
  }
}

// ---------------------------------------------------------------- operator

async function adminSignIn(event) {
  event.preventDefault();
  const input = $('admin-token');
  sessionStorage.setItem(ADMIN_STORE, input.value.trim());
  say('admin-signin-error', '');
  try {
    await call('admin', 'GET', '/sandbox/v1/clock');
  } catch (error) {
    sessionStorage.removeItem(ADMIN_STORE);
    say('admin-signin-error', errorText(error), true);
    return;
  }
  input.value = '';
  showView(sessionStorage.getItem('esim.dashboard.view') || 'operator');
}

function adminSignOut() {
  sessionStorage.removeItem(ADMIN_STORE);
  clear($('account-key-once'));
  $('account-key-once').hidden = true;
  showView(sessionStorage.getItem('esim.dashboard.view') || 'operator');
}

function loadOperator() {
  loadAccounts();
  loadInventory();
}

async function loadAccounts() {
  try {
    const page = await call('admin', 'GET', `/admin/v1/accounts${query({ limit: 25, offset: state.accountsOffset })}`);
    state.accountsTotal = page.total;
    const body = table('accounts-table');
    for (const account of page.accounts) {
      const manage = el('button', { type: 'button', text: 'Manage', 'aria-label': `Manage ${account.account_id}` });
      manage.addEventListener('click', () => {
        state.accountId = account.account_id;
        $('account-manage').hidden = false;
        $('account-manage-title').textContent = `${account.company_name || account.account_id} (${account.account_id})`;
        $('freeze-frozen').checked = Boolean(account.frozen);
        $('topup-amount').focus();
      });
      body.append(row('accounts-table', [idText(account.account_id), show(account.company_name), show(account.contact_email), money(account.balance_usd), show(account.esims), show(account.groups), account.frozen ? 'yes' : 'no', manage]));
      changed(`account:${account.account_id}`, money(account.balance_usd));
    }
    if (!page.accounts.length) body.append(emptyRow('accounts-table', 'No accounts.'));
    $('accounts-range').textContent = `${page.total ? page.offset + 1 : 0}–${page.offset + page.accounts.length} of ${page.total}`;
    $('accounts-prev').disabled = page.offset === 0;
    $('accounts-next').disabled = page.offset + page.accounts.length >= page.total;
  } catch (error) {
    say('accounts-msg', errorText(error), true);
  }
}

async function createAccount(event) {
  event.preventDefault();
  const body = { contact_email: $('account-email').value.trim() };
  const company = $('account-company').value.trim();
  if (company) body.company_name = company;
  try {
    const made = await call('admin', 'POST', '/admin/v1/accounts', body);
    showOnce('account-key-once', `API key of ${made.account_id} (shown once):`, made.api_key, 'Give it to the reseller; it is not shown again.');
    say('accounts-msg', `Created ${made.account_id}.`);
    $('account-email').value = '';
    $('account-company').value = '';
    await loadAccounts();
  } catch (error) {
    say('accounts-msg', errorText(error), true);
  }
}

async function accountChange(event, describe, method, path, body) {
  event.preventDefault();
  if (!state.accountId) return;
  try {
    const answer = await call('admin', method, `/admin/v1/accounts/${encodeURIComponent(state.accountId)}${path}`, body());
    await loadAccounts();
    say('accounts-msg', describe(answer), false, `account:${state.accountId}`);
  } catch (error) {
    say('accounts-msg', errorText(error), true);
  }
}

/** The stock now: `inventory.available` of GET /admin/v1/state (decision 321). */
async function loadInventory() {
  try {
    const digest = await call('admin', 'GET', '/admin/v1/state');
    const available = digest.inventory ? digest.inventory.available : null;
    state.stock = typeof available === 'number' ? available : null;
    $('inventory-stock').textContent = state.stock === null ? 'unknown' : state.stock.toLocaleString('en-US');
    changed('inventory', state.stock);
  } catch (error) {
    say('inventory-msg', errorText(error), true);
  }
}

/** Sets the stock; lowering it (one click could cut it a hundredfold) asks first. */
function setInventory(event) {
  event.preventDefault();
  const input = $('inventory-available');
  const wanted = Number(input.value);
  if (input.value.trim() === '' || !Number.isInteger(wanted) || wanted < 0) {
    say('inventory-msg', 'Type the new stock: a whole number of eSIM profiles, 0 or more.', true);
    return;
  }
  const apply = async () => {
    await call('admin', 'PUT', '/admin/v1/inventory', { available: wanted });
    input.value = '';
    await loadInventory();
    return `Inventory set to ${wanted.toLocaleString('en-US')} profiles.`;
  };
  if (state.stock !== null && state.stock !== undefined && wanted < state.stock) {
    const cut = wanted === 0 ? 'to 0: provisioning stops (NO_ESIMS_AVAILABLE)' : `to ${wanted.toLocaleString('en-US')}`;
    confirmStep('inventory-confirm', `Lower the stock from ${state.stock.toLocaleString('en-US')} ${cut}? The stock is replaced, not added to.`, 'lower the stock', 'inventory-msg', apply, 'inventory');
    return;
  }
  apply().then((text) => say('inventory-msg', text, false, 'inventory'), (error) => say('inventory-msg', errorText(error), true));
}

async function openReport(event) {
  event.preventDefault();
  const format = $('report-format').value;
  const frame = $('report-frame');
  const text = $('report-text');
  try {
    const report = await call('admin', 'GET', `/admin/v1/reports/conservation${query({ format, account_id: $('report-account').value.trim() })}`);
    if (format === 'html') {
      // The service's own report page, in a sandboxed frame: no script runs in it
      // (decision 133). Same origin (decision 322) only so this page can read its height.
      frame.hidden = false;
      frame.srcdoc = report;
      text.hidden = true;
    } else {
      text.textContent = typeof report === 'string' ? report : JSON.stringify(report, null, 2);
      text.hidden = false;
      frame.hidden = true;
    }
    say('report-msg', `Report (${format}) opened.`);
  } catch (error) {
    say('report-msg', errorText(error), true);
  }
}

/** The report frame as tall as its document, so nothing is cut off and it never scrolls inside. */
function fitReport() {
  const frame = $('report-frame');
  const doc = frame.contentDocument;
  if (frame.hidden || !doc || !doc.documentElement) return;
  const height = doc.documentElement.scrollHeight;
  if (height > 0) frame.style.height = `${height + 2}px`;
}

async function loadState() {
  try {
    const digest = await call('admin', 'GET', '/admin/v1/state');
    figures('state', [['Service time', when(digest.now)], ['State digest', el('code', { class: 'wrap', text: digest.state_digest })], ['Writes', show(digest.writes)]]);
    say('state-msg', '');
  } catch (error) {
    say('state-msg', errorText(error), true);
  }
}

// ---------------------------------------------------------------- sandbox

async function loadClock() {
  try {
    const clock = await call('admin', 'GET', '/sandbox/v1/clock');
    showClock(clock.now);
    $('clock-mode').textContent = clock.mode ? `(${clock.mode} clock)` : '';
    return clock.now;
  } catch (error) {
    say('clock-msg', errorText(error), true);
    return null;
  }
}

function showClock(now) {
  const node = clear($('clock-now'));
  node.append(when(now));
  node.dataset.now = now;
  changed('clock', now);
}

/** What a pending timer concerns, in words. */
function concerns(timer) {
  if (timer.kind === 'webhook_retry') return el('span', {}, `${timer.event} to `, idText(timer.webhook_id), ` (attempt ${timer.attempt})`);
  if (timer.iccid) return el('span', {}, 'eSIM ', idText(timer.iccid));
  if (timer.group_id) return el('span', {}, 'group ', idText(timer.group_id));
  return el('span', {}, 'account ', idText(timer.account_id));
}

/** The pending timers (GET /sandbox/v1/pending, decision 320); answers the list. */
async function loadPending() {
  try {
    const pending = await call('admin', 'GET', '/sandbox/v1/pending?limit=100');
    const body = table('pending-table');
    for (const timer of pending.timers) {
      body.append(row('pending-table', [word('timer', timer.kind), concerns(timer), when(timer.due_at), duration(timer.due_in_seconds), timer.amount_usd === undefined ? '—' : money(timer.amount_usd)]));
    }
    if (!pending.timers.length) body.append(emptyRow('pending-table', 'Nothing pending: nothing changes by itself until someone acts.'));
    const next = pending.timers[0];
    $('pending-summary').textContent = next
      ? `${pending.total} pending; the next, ${WORDS.timer[next.kind] || next.kind}, falls due ${duration(next.due_in_seconds) === 'due now' ? 'now' : `in ${duration(next.due_in_seconds)}`}.`
      : '';
    const button = $('advance-next');
    button.disabled = !next || next.due_in_seconds <= 0;
    button.dataset.seconds = next ? String(next.due_in_seconds) : '';
    say('pending-msg', '');
    return pending;
  } catch (error) {
    say('pending-msg', errorText(error), true);
    return null;
  }
}

/** A sentence for "What happened": what is still to come after an advance, and when. */
function stillPending(pending) {
  if (!pending) return '';
  if (!pending.timers.length) return 'Nothing is pending now.';
  const first = pending.timers[0];
  const subject = first.iccid ? ` of eSIM ${first.iccid}` : first.group_id ? ` of group ${first.group_id}` : '';
  const reason = first.kind === 'usage_report' ? ' (usage is reported after the 15-minute pause that follows a fund, at the next sync cycle)' : '';
  return `Still pending: ${pending.total}. The next is the ${(WORDS.timer[first.kind] || first.kind).toLowerCase()}${subject}, due at ${when(first.due_at).textContent}, in ${duration(first.due_in_seconds)}${reason}. See Still pending below.`;
}

/** Every account's balance, by id (at most the first 1,000 accounts). */
async function balances() {
  const found = new Map();
  for (let offset = 0; offset < 1000; offset += 100) {
    const page = await call('admin', 'GET', `/admin/v1/accounts?limit=100&offset=${offset}`);
    for (const account of page.accounts) found.set(account.account_id, account);
    if (offset + page.accounts.length >= page.total) break;
  }
  return found;
}

async function advance(seconds) {
  say('clock-msg', `Advancing ${seconds} s…`);
  try {
    const before = await loadClock();
    const balancesBefore = await balances();
    const answer = await call('admin', 'POST', '/sandbox/v1/clock/advance', { seconds });
    const after = answer.now;
    showClock(after);
    const balancesAfter = await balances();
    $('happened').hidden = false;
    $('happened-span').textContent = `Service time moved from ${when(before).textContent} to ${when(after).textContent}.`;
    $('happened-pending').textContent = stillPending(await loadPending());
    const body = table('happened-balances');
    for (const [id, now] of balancesAfter) {
      const was = balancesBefore.get(id);
      const change = was ? Number(now.balance_usd) - Number(was.balance_usd) : null;
      if (change === 0) continue;
      const tr = row('happened-balances', [idText(id), show(now.company_name), was ? money(was.balance_usd) : 'new', money(now.balance_usd), change === null ? '—' : `${change > 0 ? '+' : ''}${change.toFixed(2)}`]);
      body.append(tr);
    }
    if (!body.children.length) body.append(emptyRow('happened-balances', 'No reseller balance changed (what is still to come is under Still pending).'));
    const events = table('happened-events');
    if (sessionStorage.getItem(KEY_STORE)) {
      const page = await call('reseller', 'GET', `/events${query({ created_after: before, limit: 100 })}`);
      for (const item of page.events) {
        const subject = item.data.iccid || item.data.group_id || item.data.topup_id || '';
        events.append(row('happened-events', [item.event, when(item.created_at), idText(subject)]));
      }
      // Webhook attempts made since (the log has an attempt once its receiver answered).
      await new Promise((resolve) => setTimeout(resolve, 300));
      const hooks = await call('reseller', 'GET', '/webhooks');
      for (const hook of hooks.webhooks) {
        const log = await call('reseller', 'GET', `/webhooks/${encodeURIComponent(hook.id)}/deliveries?limit=100`);
        for (const attempt of log.attempts.filter((a) => a.attempted_at > before && !a.manual).reverse()) {
          const result = attempt.success ? `delivered (HTTP ${attempt.status})` : `failed (${attempt.status !== null ? `HTTP ${attempt.status}` : show(attempt.error)})`;
          events.append(row('happened-events', [`delivery of ${attempt.event_type}`, when(attempt.attempted_at), `${hook.url}: ${result}`]));
        }
      }
      if (!events.children.length) events.append(emptyRow('happened-events', 'No events for the signed-in reseller.'));
      $('happened-note').textContent = 'Events and webhook attempts are those of the reseller signed in on the Reseller view; attempts still in flight show in its delivery log.';
      loadWallet();
      loadEsims();
      loadEvents();
      if (state.iccid) loadEsim(state.iccid);
    } else {
      events.append(emptyRow('happened-events', 'Sign in on the Reseller view to see its events here.'));
      $('happened-note').textContent = '';
    }
    say('clock-msg', `Advanced ${seconds} s.`, false, 'clock');
  } catch (error) {
    say('clock-msg', errorText(error), true);
  }
}

async function sandboxCall(event, msgId, method, path, body, describe) {
  event.preventDefault();
  try {
    const answer = await call('admin', method, path, body);
    say(msgId, describe(answer));
    loadPending();
  } catch (error) {
    say(msgId, errorText(error), true);
  }
}

// ---------------------------------------------------------------- wiring

function speeds() {
  const select = $('throttle-speed');
  const values = ['NO_LIMIT'];
  for (let kbps = 100; kbps <= 3000; kbps += 100) values.push(`SPEED_${kbps}_KBPS`);
  for (const kbps of [3500, 4000, 4500, 5000]) values.push(`SPEED_${kbps}_KBPS`);
  for (const value of values) select.append(el('option', { value, title: value, text: speedWords(value) }));
}

function on(id, type, handler) {
  $(id).addEventListener(type, handler);
}

function start() {
  speeds();
  for (const tab of document.querySelectorAll('.tab')) tab.addEventListener('click', () => showView(tab.dataset.view));
  for (const tab of document.querySelectorAll('.section-tab')) tab.addEventListener('click', () => showSection(tab.dataset.view, tab.dataset.section));
  for (const view of ['reseller', 'operator', 'sandbox']) showSection(view, sessionStorage.getItem(`esim.dashboard.section.${view}`) || '');
  $('report-frame').addEventListener('load', fitReport);
  window.addEventListener('resize', fitReport);
  on('reseller-signin', 'submit', resellerSignIn);
  on('reseller-signout', 'click', () => resellerSignOut());
  on('reseller-refresh', 'click', resellerRefresh);
  on('provision-form', 'submit', provision);
  on('esims-filter', 'submit', (event) => { event.preventDefault(); state.esimOffset = 0; loadEsims(); });
  on('esims-prev', 'click', () => { state.esimOffset = Math.max(0, state.esimOffset - Number($('esims-limit').value)); loadEsims(); });
  on('esims-next', 'click', () => { state.esimOffset += Number($('esims-limit').value); loadEsims(); });
  on('fund-form', 'submit', fund);
  on('throttle-form', 'submit', throttle);
  on('esim-defund', 'click', () => esimAction('defund', 'Return the wallet of eSIM {iccid} to the reseller balance? Data pauses; the credit arrives in about 15 minutes.', 'POST', '/defund', undefined,
    (a) => `Defund accepted: about ${money(a.estimated_return_usd)} USD returns in ${show(a.settles_in_minutes)} minutes, in whole cents (the sub-cent rest of the wallet is conversion dust).`));
  on('esim-enable', 'click', () => esimAction('enable', 'Enable data on eSIM {iccid}?', 'POST', '/enable', undefined, () => 'Data enabled.'));
  on('esim-disable', 'click', () => esimAction('disable', 'Disable data on eSIM {iccid}?', 'POST', '/disable', undefined, () => 'Data disabled.'));
  on('esim-terminate', 'click', () => esimAction('terminate', 'Terminate eSIM {iccid}? This cannot be undone and forfeits its wallet balance.', 'POST', '/terminate', undefined, () => 'Terminated.'));
  on('group-create', 'submit', createGroup);
  on('group-fund-form', 'submit', fundGroup);
  on('group-defund', 'click', defundGroup);
  on('group-add-form', 'submit', addToGroup);
  on('webhook-create', 'submit', createWebhook);
  on('deliveries-refresh', 'click', () => loadDeliveries());
  on('events-filter', 'submit', loadEvents);
  on('key-create', 'click', createKey);
  on('refill-form', 'submit', saveRefill);

  on('admin-signin', 'submit', adminSignIn);
  for (const button of document.querySelectorAll('.admin-signout')) button.addEventListener('click', adminSignOut);
  on('operator-refresh', 'click', loadOperator);
  on('account-create', 'submit', createAccount);
  on('accounts-prev', 'click', () => { state.accountsOffset = Math.max(0, state.accountsOffset - 25); loadAccounts(); });
  on('accounts-next', 'click', () => { state.accountsOffset += 25; loadAccounts(); });
  on('topup-form', 'submit', (event) => accountChange(event, (a) => `Topped up ${money(a.amount_usd)} USD: balance ${money(a.balance_usd)} USD.`, 'POST', '/topups', () => ({ amount_usd: Number($('topup-amount').value) })));
  on('freeze-form', 'submit', (event) => accountChange(event, () => `Freeze saved: ${$('freeze-frozen').checked ? 'frozen' : 'not frozen'}.`, 'PUT', '/freeze', () => ({ frozen: $('freeze-frozen').checked })));
  on('limits-form', 'submit', (event) => accountChange(event, () => 'Limits saved.', 'PUT', '/limits', () => ({ max_groups: Number($('limits-groups').value), max_group_size: Number($('limits-size').value) })));
  on('inventory-form', 'submit', setInventory);
  on('report-form', 'submit', openReport);
  on('state-load', 'click', loadState);

  for (const button of document.querySelectorAll('.advance')) button.addEventListener('click', () => advance(Number(button.dataset.seconds)));
  on('advance-form', 'submit', (event) => { event.preventDefault(); advance(Number($('advance-seconds').value)); });
  on('pending-refresh', 'click', loadPending);
  on('advance-next', 'click', () => advance(Number($('advance-next').dataset.seconds)));
  on('install-form', 'submit', (event) => {
    const iccid = $('install-iccid').value.trim();
    sandboxCall(event, 'device-msg', 'POST', `/sandbox/v1/esims/${encodeURIComponent(iccid)}/install`, undefined, () => `Installed ${iccid}.`);
  });
  on('usage-form', 'submit', (event) => {
    const iccid = $('usage-iccid').value.trim();
    const body = { mb: Number($('usage-mb').value), country: $('usage-country').value.trim().toUpperCase() };
    sandboxCall(event, 'device-msg', 'POST', `/sandbox/v1/esims/${encodeURIComponent(iccid)}/usage`, body,
      (a) => `Used ${show(a.used_mb)} MB, charged ${money(a.charged_usd)} USD${a.data_stopped ? '; data stopped' : ''}.`);
  });
  on('faults-form', 'submit', (event) => sandboxCall(event, 'faults-msg', 'PUT', '/sandbox/v1/faults',
    { upstream_pause_fails: $('fault-pause').checked, network_read_fails: $('fault-read').checked }, () => 'Faults applied.'));

  resellerShown();
  showView(sessionStorage.getItem('esim.dashboard.view') || 'reseller');
}

document.addEventListener('DOMContentLoaded', start);
