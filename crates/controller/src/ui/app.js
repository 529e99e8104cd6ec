// The Sluice dashboard (docs/DASHBOARD.md). Plain script, no build step, no
// library: it polls the controller's API every POLL_MS with the token pasted
// into the page and draws what comes back; a tenant's alerts come from the
// controller's event stream instead (read with fetch(): EventSource cannot
// send the token). Everything shown goes through
// textContent or SVG attributes, never markup, since alert fields come from
// traffic.
'use strict';

const SVG_NS = 'http://www.w3.org/2000/svg';
const POLL_MS = 2000;
const KEY = 'sluice-token';
// Event kinds the operator view lists (the rest is routine).
const NOTABLE = ['failover', 'rejoin', 'scale', 'scaler', 'drain', 'catch-up', 'block',
  'contained', 'evacuated', 'store', 'error'];
// Of those, a tenant's scaling and failover history.
const HISTORY = ['failover', 'rejoin', 'scale', 'scaler', 'drain', 'catch-up'];

// How an instance's state reads (`GET /v1/instances`).
const STATE_CLASS = { alive: 'ok', placed: 'ok', dead: 'bad', down: 'bad', draining: 'warn' };

const st = {
  token: sessionStorage.getItem(KEY) || '',
  role: null, // 'operator' (every read) or 'tenant'
  tenant: null, // a tenant token's own tenant
  events: [], // oldest first, at most 500
  eventsSince: 0,
  hist: new Map(), // 'tenant/chain' -> its samples, oldest first, at most 300
  histAt: 0, // the latest sample's time (Unix ms)
  timer: null,
  busy: false,
  // The alerts of the tenant shown: its event stream, and what it sent.
  alerts: { tenant: null, list: [], since: null, abort: null, polling: false },
};

function $(id) { return document.getElementById(id); }

// An element with attributes and children (strings become text).
function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v !== null && v !== undefined) e.setAttribute(k, String(v));
  }
  for (const c of children) e.append(c instanceof Node ? c : String(c));
  return e;
}

function svg(tag, attrs, ...children) {
  const e = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v !== null && v !== undefined) e.setAttribute(k, String(v));
  }
  for (const c of children) e.append(c instanceof Node ? c : String(c));
  return e;
}

function fill(tbody, rows) { tbody.replaceChildren(...rows); }

function rate(x) {
  if (x === null || x === undefined) return '–';
  if (x >= 1e6) return (x / 1e6).toFixed(1) + 'M';
  if (x >= 1e4) return (x / 1e3).toFixed(1) + 'k';
  return x >= 100 ? x.toFixed(0) : x.toFixed(1);
}

// A duration in seconds, in µs below a millisecond.
function duration(s) {
  if (s === null || s === undefined) return '–';
  if (s < 1e-3) return (s * 1e6).toFixed(0) + ' µs';
  if (s < 1) return (s * 1e3).toFixed(s < 1e-2 ? 2 : 1) + ' ms';
  return s.toFixed(2) + ' s';
}

function clock(ms) {
  return ms ? new Date(ms).toLocaleTimeString() : '–';
}

// An age in ms (null: never).
function ago(ms) {
  if (ms === null || ms === undefined) return 'never';
  const s = ms / 1000;
  return s < 60 ? s.toFixed(1) + ' s ago' : Math.round(s / 60) + ' min ago';
}

// Unix ms as an age.
function since(unixMs) {
  return unixMs ? ago(Math.max(0, Date.now() - unixMs)) : 'never';
}

function yes(b, good, bad) {
  return el('span', { class: b ? 'ok' : 'bad' }, b ? good : bad);
}

class ApiError extends Error {
  constructor(status, msg) { super(msg); this.status = status; }
}

async function api(path) {
  const r = await fetch(path, {
    headers: { Authorization: 'Bearer ' + st.token, Accept: 'application/json' },
    cache: 'no-store',
  });
  if (!r.ok) {
    let msg = r.status + ' ' + r.statusText;
    try { msg = (await r.json()).detail || msg; } catch (_) { /* not JSON */ }
    throw new ApiError(r.status, path + ': ' + msg);
  }
  return r.json();
}

// ---- login ---------------------------------------------------------------

function showLogin(msg) {
  clearTimeout(st.timer);
  stopAlerts();
  st.role = null;
  st.tenant = null;
  // Nothing seen with the previous token stays in the page.
  st.events = [];
  st.eventsSince = 0;
  st.hist = new Map();
  st.histAt = 0;
  for (const id of ['hosts', 'chains', 'instances']) $(id).tBodies[0].replaceChildren();
  for (const id of ['store', 'events', 'graphs', 'alerts', 'history']) $(id).replaceChildren();
  $('status').textContent = '';
  $('login').hidden = false;
  $('operator').hidden = true;
  $('tenant').hidden = true;
  $('logout').hidden = true;
  $('nav').replaceChildren();
  $('who').textContent = '';
  $('login-error').textContent = msg || '';
}

async function start() {
  $('login-error').textContent = '';
  try {
    // The hosts are every operator's and read-only token's to read, and no
    // tenant's: which view to show.
    await api('/v1/hosts?limit=1');
    st.role = 'operator';
  } catch (e) {
    if (!(e instanceof ApiError) || e.status !== 403) {
      showLogin(e.status === 401 ? 'This token is not known to the controller.' : e.message);
      return;
    }
    let tenants;
    try {
      tenants = await api('/v1/tenants');
    } catch (e2) {
      showLogin('This token may not read the dashboard: ' + e2.message);
      return;
    }
    if (!tenants.length) {
      showLogin('This tenant token has no tenant applied yet.');
      return;
    }
    st.role = 'tenant';
    st.tenant = tenants[0].tenant;
  }
  $('login').hidden = true;
  $('logout').hidden = false;
  $('who').textContent = st.role === 'operator' ? 'operator view' : 'tenant ' + st.tenant;
  route();
}

// '#/tenant/NAME' is a tenant's view; anything else the operator's.
function wanted() {
  if (st.role === 'tenant') return st.tenant;
  const m = location.hash.match(/^#\/tenant\/(.+)$/);
  return m ? decodeURIComponent(m[1]) : null;
}

function route() {
  const t = wanted();
  if (t !== st.alerts.tenant) stopAlerts();
  $('operator').hidden = t !== null;
  $('tenant').hidden = t === null;
  clearTimeout(st.timer);
  poll();
}

async function poll() {
  if (st.busy || st.role === null) return;
  st.busy = true;
  try {
    const t = wanted();
    if (t === null) await refreshOperator(); else await refreshTenant(t);
    $('status').textContent = 'updated ' + new Date().toLocaleTimeString() +
      ', every ' + POLL_MS / 1000 + ' s';
    $('status').className = '';
  } catch (e) {
    if (e instanceof ApiError && e.status === 401) {
      sessionStorage.removeItem(KEY);
      showLogin('The controller no longer knows this token.');
      st.busy = false;
      return;
    }
    $('status').textContent = 'update failed: ' + e.message;
    $('status').className = 'error';
  }
  st.busy = false;
  clearTimeout(st.timer);
  st.timer = setTimeout(poll, POLL_MS);
}

// Appends the events after the last one seen (the log only grows).
async function fetchEvents() {
  const fresh = await api('/v1/events?since=' + st.eventsSince);
  for (const e of fresh) {
    st.events.push(e);
    st.eventsSince = Math.max(st.eventsSince, e.id);
  }
  if (st.events.length > 500) st.events.splice(0, st.events.length - 500);
}

// Every chain with its rates; its history is kept here, so each poll asks
// only for the samples after the last one held.
async function fetchTraffic() {
  const chains = await api('/v1/traffic' + (st.histAt ? '?since_ms=' + st.histAt : ''));
  const seen = new Set();
  for (const c of chains) {
    const k = c.tenant + '/' + c.chain;
    seen.add(k);
    const h = st.hist.get(k) || [];
    for (const p of c.history) {
      h.push(p);
      st.histAt = Math.max(st.histAt, p.at_ms);
    }
    if (h.length > 300) h.splice(0, h.length - 300);
    st.hist.set(k, h);
    c.history = h;
  }
  for (const k of [...st.hist.keys()]) if (!seen.has(k)) st.hist.delete(k);
  return chains;
}

// ---- operator view -------------------------------------------------------

async function refreshOperator() {
  const [hosts, status, instances, traffic, tenants] = await Promise.all([
    api('/v1/hosts'), api('/v1/status'), api('/v1/instances'), fetchTraffic(),
    api('/v1/tenants'), fetchEvents(),
  ]);
  nav(tenants.map((t) => t.tenant));
  fill($('hosts').tBodies[0], hosts.map((h) => el('tr', {
    'data-host': h.id, 'data-alive': h.alive, 'data-in-sync': h.in_sync,
  },
  el('td', { class: 'num' }, h.id), el('td', {}, h.name),
  el('td', {}, yes(h.alive, 'alive', 'silent')),
  el('td', {}, yes(h.in_sync, 'in sync', 'behind')),
  el('td', {}, h.desired_version + ' / ' + (h.reported_version ?? '–')),
  el('td', {}, h.slots_used + ' / ' + (h.slots_total ?? '∞')),
  el('td', {}, ago(h.last_heartbeat_ms)),
  el('td', { class: h.push_error ? 'bad' : 'muted' }, h.push_error || 'ok'))));
  drawStore(status.store);
  fill($('chains').tBodies[0], traffic.map((c) => el('tr', {
    'data-chain': c.tenant + '/' + c.chain, 'data-pps': c.packets_per_s, 'data-drops': c.drops_per_s,
  },
  el('td', {}, el('a', { href: '#/tenant/' + encodeURIComponent(c.tenant) }, c.tenant)),
  el('td', {}, c.chain),
  el('td', { class: 'num pps' }, rate(c.packets_per_s)),
  el('td', { class: 'num drops' + (c.drops_per_s > 0 ? ' bad' : '') }, rate(c.drops_per_s)),
  el('td', { class: 'num latency', 'data-p50': c.latency_p50_s, 'data-p99': c.latency_p99_s },
    duration(c.latency_p50_s) + ' / ' + duration(c.latency_p99_s)),
  el('td', {}, spark(c.history)))));
  const order = (i) => [i.tenant, i.middlebox, i.name].join('\u0000');
  instances.sort((a, b) => (order(a) < order(b) ? -1 : 1));
  fill($('instances').tBodies[0], instances.map((i) => el('tr', {
    'data-instance': i.name, 'data-state': i.state, 'data-alive': i.alive,
  },
  el('td', {}, i.tenant), el('td', {}, i.middlebox), el('td', {}, i.name),
  el('td', { class: 'num' }, i.host),
  el('td', { class: STATE_CLASS[i.state] || 'muted' }, i.state),
  el('td', {}, i.alive === null || i.alive === undefined ? el('span', { class: 'muted' }, 'unknown')
    : yes(i.alive, 'running' + (i.pid ? ' (pid ' + i.pid + ')' : ''), 'gone')))));
  feed($('events'), st.events.filter((e) => NOTABLE.includes(e.kind)));
}

function drawStore(s) {
  const rows = [el('p', {}, 'kind ', el('strong', {}, s.kind), ': ',
    yes(s.healthy, 'serving', 'not serving'),
    s.lost_data_total ? el('span', { class: 'bad' }, ' — lost data ' + s.lost_data_total + '×') : '')];
  for (const f of s.failing) rows.push(el('p', { class: 'bad' }, f.node + ': ' + f.reason));
  if (s.nodes.length) {
    rows.push(el('table', {}, el('thead', {}, el('tr', {}, el('th', {}, 'node'), el('th', {}, 'up'),
      el('th', {}, 'role'), el('th', {}, 'last answer'))),
    el('tbody', {}, ...s.nodes.map((n) => el('tr', { 'data-node': n.node },
      el('td', {}, n.node), el('td', {}, yes(n.up, 'up', 'down')),
      el('td', {}, n.role || '–'), el('td', {}, since(n.last_ok_ms)))))));
  } else {
    rows.push(el('p', { class: 'muted' }, 'in-process store: nothing to probe'));
  }
  $('store').setAttribute('data-healthy', s.healthy);
  $('store').replaceChildren(...rows);
}

function nav(tenants) {
  const here = wanted();
  const links = [el('a', { href: '#/', class: here === null ? 'current' : null }, 'Operator')];
  for (const t of tenants) {
    links.push(el('a', {
      href: '#/tenant/' + encodeURIComponent(t), class: here === t ? 'current' : null,
    }, 'Tenant ' + t));
  }
  $('nav').replaceChildren(...links);
}

// A small chart of a chain's packets (blue) and drops (red) per second.
function spark(history, w = 300, h = 36) {
  const s = svg('svg', { width: w, height: h, viewBox: `0 0 ${w} ${h}`, class: 'spark' });
  s.append(svg('line', { x1: 0, y1: h - 1, x2: w, y2: h - 1, class: 'axis' }));
  if (!history.length) return s;
  const max = Math.max(1, ...history.map((p) => p.packets_per_s));
  const t1 = history[history.length - 1].at_ms;
  // The history there is, at least a minute of it.
  const span = Math.max(60_000, t1 - history[0].at_ms);
  const pts = (f) => history.map((p) => {
    const x = w - ((t1 - p.at_ms) / span) * w;
    const y = h - 2 - (f(p) / max) * (h - 4);
    return x.toFixed(1) + ',' + y.toFixed(1);
  }).join(' ');
  s.append(svg('polyline', { points: pts((p) => p.packets_per_s), class: 'spark-pkt' }));
  s.append(svg('polyline', { points: pts((p) => p.drops_per_s), class: 'spark-drop' }));
  s.append(svg('title', {}, 'peak ' + rate(max) + ' packets/s over the last ' +
    Math.round((t1 - history[0].at_ms) / 1000) + ' s'));
  return s;
}

function feed(ol, events) {
  const items = events.slice(-100).reverse().map((e) => el('li', {
    'data-kind': e.kind, 'data-id': e.id, 'data-instance': e.instance,
  },
  el('time', {}, clock(e.at_ms)), el('span', { class: 'kind kind-' + e.kind }, e.kind), ' ',
  e.reason));
  if (!items.length) items.push(el('li', { class: 'muted' }, 'nothing yet'));
  ol.replaceChildren(...items);
}

// ---- tenant view ---------------------------------------------------------

async function refreshTenant(t) {
  const q = encodeURIComponent(t);
  followAlerts(t);
  const [traffic, tenants] = await Promise.all([
    fetchTraffic(),
    st.role === 'operator' ? api('/v1/tenants') : Promise.resolve([{ tenant: t }]),
    fetchEvents(),
  ]);
  // A controller without event streams: its alerts polled with the rest.
  if (st.alerts.polling) st.alerts.list = await api('/v1/alerts?tenant=' + q + '&limit=100');
  nav(tenants.map((x) => x.tenant));
  $('tenant-title').textContent = 'Tenant ' + t + ': chains';
  const chains = traffic.filter((c) => c.tenant === t);
  const graphs = chains.map((c, i) => graph(c, i));
  if (!graphs.length) graphs.push(el('p', { class: 'muted' }, 'no chains'));
  $('graphs').replaceChildren(...graphs);
  drawAlerts(st.alerts.list);
  feed($('history'), st.events.filter((e) => e.tenant === t && HISTORY.includes(e.kind)));
}

// Follows tenant t's alerts (`GET /v1/alerts?follow=true`), unless already.
function followAlerts(t) {
  if (st.alerts.tenant === t) return;
  stopAlerts();
  st.alerts = { tenant: t, list: [], since: null, abort: null, polling: false };
  streamAlerts(st.alerts);
}

function stopAlerts() {
  if (st.alerts.abort) st.alerts.abort.abort();
  st.alerts = { tenant: null, list: [], since: null, abort: null, polling: false };
}

// Reads the stream of `a.tenant`'s alerts into `a.list` (the newest 100),
// redrawing at each; when it ends (the controller restarted), again after
// the last alert received, a second later, unless the page moved on.
async function streamAlerts(a) {
  const ctl = new AbortController();
  a.abort = ctl;
  let path = '/v1/alerts?follow=true&limit=100&tenant=' + encodeURIComponent(a.tenant);
  if (a.since) path += '&since=' + encodeURIComponent(a.since);
  try {
    const r = await fetch(path, {
      headers: { Authorization: 'Bearer ' + st.token, Accept: 'text/event-stream' },
      cache: 'no-store',
      signal: ctl.signal,
    });
    if (r.status === 400) {
      a.polling = true;
      return;
    }
    if (r.ok) {
      const reader = r.body.pipeThrough(new TextDecoderStream()).getReader();
      let buf = '';
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += value;
        let end;
        while ((end = buf.indexOf('\n\n')) >= 0) {
          const data = buf.slice(0, end).split('\n')
            .filter((l) => l.startsWith('data:'))
            .map((l) => l.slice(5).replace(/^ /, ''))
            .join('\n');
          buf = buf.slice(end + 2);
          if (!data) continue; // a comment (keepalive)
          const e = JSON.parse(data);
          a.list.push(e);
          if (a.list.length > 100) a.list.splice(0, a.list.length - 100);
          if (e.timestamp) a.since = e.timestamp;
          if (st.alerts === a) drawAlerts(a.list);
        }
      }
    }
  } catch (_) {
    // Cut off or refused: tried again below (a token the controller no
    // longer knows ends in the login page through the polls).
  }
  if (st.alerts === a && !ctl.signal.aborted) {
    setTimeout(() => { if (st.alerts === a) streamAlerts(a); }, 1000);
  }
}

function drawAlerts(alerts) {
  const items = alerts.slice().reverse().map((a) => {
    const al = a.alert || {};
    return el('li', {
      'data-sid': al.signature_id, 'data-action': al.action, 'data-flow': a.flow_id,
    },
    el('time', {}, a.timestamp ? new Date(a.timestamp).toLocaleTimeString() : '–'),
    el('span', { class: 'kind ' + (al.action === 'blocked' ? 'bad' : 'warn') }, al.action || 'alert'),
    ' ', String(al.signature || 'sid ' + al.signature_id), ' (sid ' + al.signature_id + ') ',
    el('span', { class: 'muted' }, `${a.src_ip}:${a.src_port} → ${a.dest_ip}:${a.dest_port} ` +
      `${a.proto || ''} at ${a.host || '?'}`));
  });
  if (!items.length) items.push(el('li', { class: 'muted' }, 'no alerts'));
  $('alerts').replaceChildren(...items);
}

const BOX_W = 128;
const BOX_H = 62;
const GAP = 46;

// A chain as drawn from its spec: its path left to right (externals,
// selects, middleboxes with instances and live rates, services), its
// mirrors below, and its rates over time.
function graph(c, index) {
  const arrow = 'arrow-' + index;
  const n = c.hops.length;
  const w = Math.max(n * (BOX_W + GAP), c.mirror.length * (BOX_W + GAP)) + 10;
  const h = BOX_H + 20 + (c.mirror.length ? BOX_H + 40 : 0);
  const s = svg('svg', {
    width: w, height: h, viewBox: `0 0 ${w} ${h}`, class: 'chain',
    'data-chain': c.tenant + '/' + c.chain,
  });
  s.append(svg('defs', {}, svg('marker', {
    id: arrow, viewBox: '0 0 10 10', refX: 9, refY: 5, markerWidth: 7, markerHeight: 7,
    orient: 'auto-start-reverse',
  }, svg('path', { d: 'M0,0 L10,5 L0,10 z', class: 'arrowhead' }))));
  const x = (i) => 5 + i * (BOX_W + GAP);
  const y0 = 10;
  for (let i = 0; i + 1 < n; i++) {
    s.append(svg('line', {
      class: 'edge', x1: x(i) + BOX_W, y1: y0 + BOX_H / 2, x2: x(i + 1), y2: y0 + BOX_H / 2,
      'marker-end': `url(#${arrow})`, 'marker-start': c.bidirectional ? `url(#${arrow})` : null,
    }));
  }
  c.hops.forEach((hop, i) => s.append(box(hop, x(i), y0)));
  const y1 = y0 + BOX_H + 40;
  c.mirror.forEach((hop, i) => {
    s.append(svg('line', {
      class: 'edge mirror', x1: x(0) + BOX_W / 2, y1: y0 + BOX_H, x2: x(i) + BOX_W / 2, y2: y1,
      'marker-end': `url(#${arrow})`,
    }));
    s.append(box(hop, x(i), y1, true));
  });
  return el('div', {
    class: 'graph', 'data-chain': c.chain, 'data-pps': c.packets_per_s, 'data-drops': c.drops_per_s,
  },
  el('h3', {}, c.chain + (c.bidirectional ? ' (both directions)' : '') + ': ',
    el('span', { class: 'pps' }, rate(c.packets_per_s) + ' packets/s'), ', ',
    el('span', { class: 'drops' + (c.drops_per_s > 0 ? ' bad' : '') }, rate(c.drops_per_s) + ' drops/s'),
    c.latency_p99_s === null || c.latency_p99_s === undefined ? ''
      : el('span', { class: 'latency' }, ', added ' + duration(c.latency_p50_s) + ' median, ' +
        duration(c.latency_p99_s) + ' p99')),
  s, el('div', {}, spark(c.history, Math.min(w, 600), 40)));
}

function box(hop, x, y, mirror) {
  const r = hop.rates;
  const degraded = hop.kind === 'middlebox' && hop.up < hop.instances;
  const g = svg('g', {
    class: 'hop ' + hop.kind + (degraded ? ' degraded' : ''),
    transform: `translate(${x},${y})`,
    'data-name': hop.name, 'data-kind': hop.kind, 'data-mirror': mirror ? 'true' : null,
    'data-instances': hop.instances, 'data-up': hop.up,
    'data-rx': r ? r.rx_per_s : null, 'data-drops': r ? r.drops_per_s : null,
  });
  g.append(svg('rect', { width: BOX_W, height: BOX_H, rx: 6 }));
  g.append(svg('text', { x: 8, y: 16, class: 'name' }, hop.name));
  let detail = hop.kind;
  if (hop.kind === 'middlebox') {
    detail = `${hop.function} ×${hop.instances}` + (degraded ? ` (${hop.up} up)` : '');
  } else if (hop.kind === 'service') {
    detail = `service, ${hop.vms} VM${hop.vms === 1 ? '' : 's'}`;
  }
  g.append(svg('text', { x: 8, y: 32, class: 'detail' }, detail));
  if (r) {
    g.append(svg('text', { x: 8, y: 47, class: 'detail' }, rate(r.rx_per_s) + ' pkt/s in'));
    g.append(svg('text', { x: 8, y: 59, class: 'drops' }, rate(r.drops_per_s) + ' drops/s'));
  }
  g.append(svg('title', {}, hop.kind === 'middlebox'
    ? `${hop.name}: ${hop.instances} instance(s), ${hop.up} in their groups; ` +
      `${rate(r.rx_per_s)} in, ${rate(r.tx_per_s)} out, ${rate(r.drops_per_s)} dropped per second`
    : `${hop.name} (${hop.kind})`));
  return g;
}

// ---- wiring --------------------------------------------------------------

document.addEventListener('DOMContentLoaded', () => {
  $('login-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    st.token = $('token').value.trim();
    $('token').value = '';
    if (!st.token) return;
    sessionStorage.setItem(KEY, st.token);
    start();
  });
  $('logout').addEventListener('click', () => {
    sessionStorage.removeItem(KEY);
    st.token = '';
    showLogin('');
  });
  window.addEventListener('hashchange', () => { if (st.role) route(); });
  if (st.token) start(); else showLogin('');
});
