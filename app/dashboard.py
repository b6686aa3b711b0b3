"""The HTML dashboard served at ``/``: one self-refreshing page, no assets.

It polls ``/roles/`` and each role's ``/roles/{role}/`` every second and
shows holder, token (a term-mode role's term), time to deadline, status,
roster and skipped records.
Rows carry ``data-role`` and cells a class per field, so a headless browser
test can read what it shows. Time to deadline uses the server's ``now``, so a
skewed browser clock does not distort it.
"""

from __future__ import annotations

__all__ = ["DASHBOARD_HTML"]

DASHBOARD_HTML = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>krabka-coordination: roles</title>
<style>
  body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #222; }
  h1 { font-size: 1.3em; margin: 0 0 .2em; }
  #meta { color: #666; margin-bottom: 1em; }
  table { border-collapse: collapse; width: 100%; }
  th, td { text-align: left; padding: .35em .6em; border-bottom: 1px solid #ddd;
           vertical-align: top; }
  th { background: #f4f4f4; }
  .held { color: #137333; font-weight: 600; }
  .lapsed { color: #b06000; font-weight: 600; }
  .vacant { color: #888; }
  .roster span { display: inline-block; margin-right: .6em; }
  .roster .leader { font-weight: 600; }
  #errors { color: #b00020; margin-top: 1em; white-space: pre-wrap; }
  code { font-size: 13px; }
</style>
</head>
<body>
<h1>Roles</h1>
<div id="meta">loading&hellip;</div>
<table id="roles">
  <thead><tr><th>role</th><th>status</th><th>holder</th><th>token</th>
  <th>deadline in</th><th>roster (rank order)</th><th>skipped</th></tr></thead>
  <tbody></tbody>
</table>
<div id="errors"></div>
<script>
"use strict";
const tbody = document.querySelector("#roles tbody");
const meta = document.getElementById("meta");
const errors = document.getElementById("errors");

function text(tag, value, cls) {
  const el = document.createElement(tag);
  el.textContent = value;
  if (cls) el.className = cls;
  return el;
}

function tokenText(token) {
  if (!token) return "\\u2014";
  return token.term !== undefined ? "term " + token.term  // term mode
    : token.producer_id + ":" + token.producer_epoch;
}

function remaining(deadline, now) {
  if (deadline === null || deadline === undefined) return "\\u2014";
  const ms = deadline - now;
  return (ms >= 0 ? "" : "-") + (Math.abs(ms) / 1000).toFixed(1) + " s";
}

async function getJson(path) {
  const response = await fetch(path, {cache: "no-store"});
  const body = await response.json();
  if (!response.ok) throw new Error(path + ": " + (body.error || response.status));
  return body;
}

async function refresh() {
  const problems = [];
  let listing;
  try {
    listing = await getJson("/roles/");
  } catch (err) {
    errors.textContent = String(err);
    return;
  }
  const details = await Promise.all(listing.roles.map(row =>
    getJson("/roles/" + encodeURIComponent(row.role) + "/").catch(err => {
      problems.push(String(err));
      return null;
    })));
  tbody.replaceChildren();
  listing.roles.forEach((row, i) => {
    const info = details[i] || row;
    const now = info.now || listing.now;
    const tr = document.createElement("tr");
    tr.dataset.role = row.role;
    tr.append(text("td", row.role, "role"));
    tr.append(text("td", info.status, "status " + info.status));
    tr.append(text("td", info.holder === null ? "\\u2014" : info.holder, "holder"));
    tr.append(text("td", tokenText(info.token), "token"));
    tr.append(text("td", remaining(info.deadline, now), "deadline"));
    const roster = text("td", "", "roster");
    (info.roster || []).forEach(entry => {
      roster.append(text("span", entry.rank + ". " + entry.member,
                         entry.member === info.holder ? "leader" : ""));
    });
    tr.append(roster);
    const skipped = info.skipped === undefined ? "" : String(info.skipped);
    const last = info.last_error ? " (last: offset " + info.last_error.offset + ")" : "";
    tr.append(text("td", skipped + last, "skipped"));
    tbody.append(tr);
  });
  for (const gone of listing.unavailable || []) {
    problems.push("worker " + gone.worker + " (partitions " + gone.partitions.join(", ") +
                  ") unreachable: " + gone.error);
  }
  meta.textContent = listing.roles.length + " roles \\u00b7 updated " +
    new Date(listing.now).toISOString();
  errors.textContent = problems.join("\\n");
}

refresh();
setInterval(refresh, 1000);
</script>
</body>
</html>
"""
