"""The HTML dashboard served at ``/``: one static page, no assets, no build step.

At load it reads ``GET /roles/`` once (every worker's roles, each with the
last offset folded into it), then follows ``GET /events/`` with an
``EventSource`` and never asks again: each event updates the role it names
if it is newer than what the page shows (its offset is past the role's; a
``lapsed`` applies to the lease it names). It shows:

- per worker, how many roles it holds;
- the roles: status, holder, token, held since, members, and a timeline of
  the tenures the page has seen (who held the role when, and how each
  tenure ended: resigned, lapsed, or fenced when a new token took over
  without either);
- the live feed of events, newest first;
- a filter by role name or worker (a click on a worker sets it);
- the rebalancing (``GET /rebalance/``): each worker's last plan (the roles
  it counts held per live member, the fair share) and the handovers made,
  newest first, each with its reason. It is read at load and again shortly
  after an ``elected`` or ``resigned`` event (a handover is both), never on
  a timer.

Timelines and the feed start with the recent events each worker sends a new
stream (docs/app.md, "Live events"). Elements carry ``data-role``,
``data-worker``, ``data-kind`` and a class per field, and ``<body>`` carries
``data-stream`` (``connecting``, ``open``, ``reconnecting``) and
``data-events`` (events handled), and handovers ``data-role``,
``data-from`` and ``data-to``, so a headless browser test can read what
it shows.
"""

from __future__ import annotations

__all__ = ["DASHBOARD_HTML"]

DASHBOARD_HTML = r"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>krabka-coordination: roles</title>
<style>
  body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #222; }
  h1 { font-size: 1.3em; margin: 0 0 .2em; }
  h2 { font-size: 1.05em; margin: 1.2em 0 .4em; }
  #meta { color: #666; margin-bottom: .6em; }
  #filter { font: inherit; padding: .2em .4em; width: 20em; }
  .columns { display: flex; gap: 2em; align-items: flex-start; }
  .main { flex: 3; min-width: 0; }
  .side { flex: 1; min-width: 18em; }
  table { border-collapse: collapse; width: 100%; }
  th, td { text-align: left; padding: .3em .5em; border-bottom: 1px solid #ddd;
           vertical-align: middle; }
  th { background: #f4f4f4; }
  .held { color: #137333; font-weight: 600; }
  .lapsed { color: #b06000; font-weight: 600; }
  .vacant { color: #888; }
  #workers { list-style: none; padding: 0; margin: 0; }
  #workers li { display: flex; align-items: center; gap: .5em; cursor: pointer;
                margin: .15em 0; }
  #workers .name { width: 12em; overflow: hidden; text-overflow: ellipsis; white-space: nowrap; }
  #workers .bar { background: #4a7bd0; height: .9em; min-width: 1px; }
  .timeline { display: flex; width: 24em; height: 1.2em; background: #f6f6f6; }
  .tenure { height: 100%; overflow: hidden; white-space: nowrap; font-size: 11px;
            color: #fff; padding: 0 2px; box-sizing: border-box; border-right: 1px solid #fff; }
  .tenure.ongoing { background: #137333; }
  .tenure.resigned { background: #5f6f86; }
  .tenure.lapsed { background: #b06000; }
  .tenure.fenced { background: #b00020; }
  #feed { list-style: none; padding: 0; margin: 0; max-height: 36em; overflow-y: auto;
          font-size: 13px; }
  #feed li { border-bottom: 1px solid #eee; padding: .15em 0; }
  #feed .kind { font-weight: 600; }
  .legend span { margin-right: .8em; }
  .legend i { display: inline-block; width: .8em; height: .8em; margin-right: .2em; }
  #plans { font-size: 13px; margin: 0; padding-left: 1em; }
  #moves { list-style: none; padding: 0; margin: 0; max-height: 16em; overflow-y: auto;
           font-size: 13px; }
  #moves li { border-bottom: 1px solid #eee; padding: .15em 0; }
  #errors { color: #b00020; margin-top: 1em; white-space: pre-wrap; }
  [hidden] { display: none !important; }
</style>
</head>
<body data-stream="connecting" data-events="0">
<h1>Roles</h1>
<div id="meta">loading&hellip;</div>
<input id="filter" type="search" placeholder="filter by role or worker" autocomplete="off">
<div class="columns">
  <div class="main">
    <h2>Roles</h2>
    <table id="roles">
      <thead><tr><th>role</th><th>status</th><th>holder</th><th>token</th><th>since</th>
      <th>members</th><th>tenures seen</th></tr></thead>
      <tbody></tbody>
    </table>
    <div class="legend">
      <span><i class="tenure ongoing"></i>holding</span>
      <span><i class="tenure resigned"></i>resigned</span>
      <span><i class="tenure lapsed"></i>lapsed</span>
      <span><i class="tenure fenced"></i>fenced</span>
    </div>
  </div>
  <div class="side">
    <h2>Held roles per worker</h2>
    <ul id="workers"></ul>
    <h2>Rebalancing</h2>
    <ul id="plans"></ul>
    <ul id="moves"></ul>
    <h2>Live events</h2>
    <ul id="feed"></ul>
  </div>
</div>
<div id="errors"></div>
<script>
"use strict";
const FEED_LENGTH = 300;
const roles = new Map();      // role -> {role, status, holder, token, since, members, offset}
const tenures = new Map();    // role -> [{member, tenure, from, to, end}]
const seen = new Set();       // "role|kind|offset" of handled events (they can repeat)
const feedEvents = [];
const workers = new Set();
let loaded = false;
let early = [];               // events that came before the listing
let handled = 0;
const $ = id => document.getElementById(id);

function el(tag, text, cls) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = text;
  if (cls) node.className = cls;
  return node;
}
function tokenText(token) {
  if (!token) return "\u2014";
  return token.term !== undefined ? "term " + token.term  // a term-mode role
    : token.producer_id + ":" + token.producer_epoch;
}
function sameToken(a, b) {
  return !!a && !!b && tokenText(a) === tokenText(b);
}
function clock(ms) {
  return ms ? new Date(ms).toLocaleTimeString() : "\u2014";
}
function matches(...texts) {
  const wanted = $("filter").value.trim().toLowerCase();
  return !wanted || texts.some(t => t && String(t).toLowerCase().includes(wanted));
}

// --- the table: the listing, then each newer event ---------------------------------
function applyToRole(ev) {
  let row = roles.get(ev.role);
  if (!row) {
    row = {role: ev.role, status: "vacant", holder: null, token: null, since: null,
           members: 0, offset: -1};
    roles.set(ev.role, row);
  }
  if (ev.kind === "lapsed") {
    // Located at the lease record that lapsed: it applies while that lease is shown.
    if (row.status === "held" && row.holder === ev.member && sameToken(row.token, ev.token)) {
      row.status = "lapsed";
    }
    return;
  }
  if (ev.offset <= row.offset) return;  // the listing already has it
  row.offset = ev.offset;
  if (ev.kind === "elected") {
    Object.assign(row, {status: "held", holder: ev.member, token: ev.token,
                        since: ev.granted_at});
  } else if (ev.kind === "resigned") {
    Object.assign(row, {status: "vacant", holder: null, token: null, since: null});
  } else if (ev.kind === "member-joined") {
    row.members = ev.rank + 1;  // a registration puts its member last
  } else if (ev.kind === "member-left") {
    row.members = Math.max(0, row.members - 1);
  }
}

// --- the timelines: tenures seen in events ------------------------------------------
function applyToTimeline(ev) {
  if (!["elected", "resigned", "lapsed"].includes(ev.kind)) return;
  const list = tenures.get(ev.role) || [];
  tenures.set(ev.role, list);
  let tenure = list.find(t => t.tenure === ev.tenure);
  if (ev.kind === "elected") {
    if (tenure) return;
    for (const open of list) {
      if (open.end === null) Object.assign(open, {end: "fenced", to: ev.timestamp});
    }
    list.push({member: ev.member, tenure: ev.tenure, from: ev.granted_at || ev.timestamp,
               to: null, end: null});
    list.sort((a, b) => a.tenure - b.tenure);
    return;
  }
  if (!tenure) {  // its start is older than what the page has seen
    tenure = {member: ev.member, tenure: ev.tenure, from: ev.granted_at, to: null, end: null};
    list.push(tenure);
    list.sort((a, b) => a.tenure - b.tenure);
  }
  if (tenure.end === null || tenure.end === "lapsed") {
    tenure.end = ev.kind;
    tenure.to = ev.kind === "lapsed" ? ev.deadline : ev.timestamp;
  }
}

function handle(ev) {
  const key = ev.role + "|" + ev.kind + "|" + ev.offset;
  if (seen.has(key)) return;
  seen.add(key);
  handled += 1;
  document.body.dataset.events = String(handled);
  if (ev.member) workers.add(ev.member);
  // Newest first by the record's time: the workers' replays interleave on arrival.
  feedEvents.push(ev);
  feedEvents.sort((a, b) => b.timestamp - a.timestamp || b.offset - a.offset);
  feedEvents.length = Math.min(feedEvents.length, FEED_LENGTH);
  applyToTimeline(ev);
  if (ev.kind === "elected" || ev.kind === "resigned") refreshRebalance();
  if (loaded) applyToRole(ev); else early.push(ev);
  schedule();
}

// --- rendering ----------------------------------------------------------------------
let pending = false;
function schedule() {
  if (!pending) { pending = true; requestAnimationFrame(() => { pending = false; render(); }); }
}

function timeline(role, now) {
  const cell = el("td");
  const bar = el("div", null, "timeline");
  cell.append(bar);
  const list = tenures.get(role) || [];
  if (!list.length) return cell;
  const start = Math.min(...list.map(t => t.from || now));
  const span = Math.max(now - start, 1);
  for (const t of list) {
    const to = t.to || now;
    const part = el("span", t.member, "tenure " + (t.end || "ongoing"));
    part.dataset.member = t.member;
    part.dataset.end = t.end || "ongoing";
    part.style.flexBasis = Math.max(2, 100 * (to - (t.from || start)) / span) + "%";
    part.title = t.member + ": " + clock(t.from) + " \u2013 " +
      (t.end ? clock(to) + " (" + t.end + ")" : "now");
    bar.append(part);
  }
  return cell;
}

function render() {
  const now = Date.now();
  const body = $("roles").tBodies[0];
  const rows = [...roles.values()].sort((a, b) => a.role < b.role ? -1 : 1);
  body.replaceChildren(...rows.filter(r => matches(r.role, r.holder) ||
      (tenures.get(r.role) || []).some(t => matches(t.member))).map(r => {
    const tr = document.createElement("tr");
    tr.dataset.role = r.role;
    const open = (tenures.get(r.role) || []).find(t => t.end === null && t.member === r.holder);
    const since = r.since || (r.holder && open ? open.from : null);
    tr.append(el("td", r.role, "role"), el("td", r.status, "status " + r.status),
              el("td", r.holder === null ? "\u2014" : r.holder, "holder"),
              el("td", tokenText(r.token), "token"), el("td", clock(since), "since"),
              el("td", String(r.members), "members"), timeline(r.role, now));
    return tr;
  }));
  const held = new Map([...workers].map(w => [w, 0]));
  for (const r of roles.values()) {
    if (r.status === "held" && r.holder) held.set(r.holder, (held.get(r.holder) || 0) + 1);
  }
  const most = Math.max(1, ...held.values());
  $("workers").replaceChildren(...[...held.entries()].sort((a, b) => b[1] - a[1] ||
      (a[0] < b[0] ? -1 : 1)).map(([worker, count]) => {
    const li = el("li");
    li.dataset.worker = worker;
    li.hidden = !matches(worker);
    const bar = el("span", null, "bar");
    bar.style.width = (8 * count / most) + "em";
    li.append(el("span", worker, "name"), bar, el("span", String(count), "count"));
    li.onclick = () => { $("filter").value = worker; render(); };
    return li;
  }));
  $("feed").replaceChildren(...feedEvents.filter(ev => matches(ev.role, ev.member)).map(ev => {
    const li = el("li");
    li.dataset.kind = ev.kind;
    li.dataset.role = ev.role;
    li.append(el("span", clock(ev.timestamp) + " ", "time"), el("span", ev.role, "role"),
              document.createTextNode(" "), el("span", ev.kind, "kind"),
              document.createTextNode(" " + (ev.member || "")));
    return li;
  }));
  const stream = document.body.dataset.stream;
  $("meta").textContent = roles.size + " roles \u00b7 " + workers.size + " workers \u00b7 " +
    "live events: " + stream + " \u00b7 " + handled + " events";
}

// --- the stream first (so nothing is missed), then the listing once -----------------
const source = new EventSource("/events/");
source.onopen = () => { document.body.dataset.stream = "open"; schedule(); };
source.onerror = () => {
  document.body.dataset.stream = source.readyState === EventSource.CLOSED ? "closed"
                                                                            : "reconnecting";
  schedule();
};
source.onmessage = message => handle(JSON.parse(message.data));

async function load() {
  try {
    const response = await fetch("/roles/", {cache: "no-store"});
    const listing = await response.json();
    if (!response.ok) throw new Error(listing.error || String(response.status));
    for (const row of listing.roles) {
      roles.set(row.role, {role: row.role, status: row.status, holder: row.holder,
                           token: row.token, since: null, members: row.members,
                           offset: row.offset});
      if (row.holder) workers.add(row.holder);
    }
    $("errors").textContent = (listing.unavailable || []).map(gone =>
      "worker " + gone.worker + " (partitions " + gone.partitions.join(", ") +
      ") did not answer: " + gone.error).join("\n");
    loaded = true;
    early.forEach(applyToRole);
    early = [];
    schedule();
  } catch (err) {
    // Not answered yet (a rebalance): ask again until the first answer, never after.
    $("errors").textContent = "GET /roles/: " + err;
    setTimeout(load, 2000);
  }
}
// --- the rebalancing: read at load and after a change of holder ----------------------
let rebalance = {workers: [], moves: []};
let rebalanceDue = null;
function refreshRebalance() {
  if (rebalanceDue === null) rebalanceDue = setTimeout(loadRebalance, 1000);
}
async function loadRebalance() {
  rebalanceDue = null;
  try {
    const response = await fetch("/rebalance/", {cache: "no-store"});
    if (response.ok) { rebalance = await response.json(); renderRebalance(); }
  } catch (err) { /* the next change of holder asks again */ }
}
function renderRebalance() {
  $("plans").replaceChildren(...rebalance.workers.map(w => {
    const li = el("li");
    li.dataset.worker = w.member;
    if (!w.enabled) { li.textContent = w.member + ": off (" + w.off + ")"; return li; }
    if (!w.plan) { li.textContent = w.member + ": no plan yet"; return li; }
    const held = Object.entries(w.plan.held).map(([m, n]) => m + " " + n).join(", ");
    li.textContent = w.member + " at " + clock(w.plan.at) + ": fair share " +
      w.plan.fair_share + " of the " + w.plan.roles + " roles every live worker hosts (" +
      w.plan.hosted + " hosted here); held: " + held + "; " +
      w.plan.moves.length + " to hand over" +
      (w.plan.standing.length ? "; standing up: " + w.plan.standing.join(", ") : "");
    return li;
  }));
  $("moves").replaceChildren(...[...rebalance.moves].reverse()
      .filter(m => matches(m.role, m.from, m.to)).map(m => {
    const li = el("li");
    li.dataset.role = m.role;
    li.dataset.from = m.from;
    li.dataset.to = m.to;
    li.title = m.reason;
    li.append(el("span", clock(m.at) + " ", "time"), el("span", m.role, "role"),
              document.createTextNode(" " + m.from + " \u2192 " + m.to));
    return li;
  }));
}
$("filter").addEventListener("input", () => { render(); renderRebalance(); });
setInterval(render, 1000);  // ongoing tenures grow; no request is made
load();
loadRebalance();
</script>
</body>
</html>
"""
