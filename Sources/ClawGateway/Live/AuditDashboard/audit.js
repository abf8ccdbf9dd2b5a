// The audit page of claw-gateway (SPEC §16): who changed what, when, from
// where, from what to what, and why, from GET /v1/audit (admin token), newest
// first, filtered by operator, action, target and time, 50 entries a page.
// The admin token is kept in the tab, as the dashboard and the parcels page
// keep it, and sent when it is entered (Enter, or the field left), never on
// every keystroke: each wrong token counts against this address's budget.
//
// Every string of an entry (a reason, a target naming a player, before and
// after) is put into the page with textContent, never as HTML.
"use strict";

(function () {
  const TOKEN_KEY = "claw-admin-token";
  const LIMIT = 50;
  const POLL_MS = 10000;
  // The page helpers come with the shared read-token.js; the trail takes the admin token alone.
  const { $, el, pill } = ClawPage;

  const page = {
    // The first entry of the page shown, counted from the newest.
    offset: 0,
    // The request in flight (its AbortController), and the token it carries.
    request: null,
    sent: null,
    // The token the gateway refused: not sent again until another is entered.
    refused: null,
    // The entries shown, as JSON: an answer that changed nothing leaves the table alone.
    shown: null,
  };

  function adminToken() {
    return sessionStorage.getItem(TOKEN_KEY) || "";
  }

  function adminStatus(text, kind) {
    const node = $("admin-status");
    node.textContent = text;
    node.className = kind;
  }

  // The status line: what the gateway said of the last read.
  function status(text, kind) {
    const node = $("status");
    node.textContent = text;
    node.className = kind;
  }

  // The filters as the query of GET /v1/audit; empty ones are left out (the
  // gateway refuses an empty value). `since`, a local time in the form, goes
  // as RFC 3339 UTC. Throws a sentence when a filter cannot be read.
  function query() {
    const parts = [];
    for (const [name, id] of [["operator", "filter-operator"], ["action", "filter-action"], ["target", "filter-target"]]) {
      const value = $(id).value.trim();
      if (value) parts.push(name + "=" + encodeURIComponent(value));
    }
    const since = $("filter-since").value;
    if (since) {
      const date = new Date(since);
      if (Number.isNaN(date.getTime())) throw new Error("Since: a date and a time, such as 2026-11-25 07:00.");
      parts.push("since=" + encodeURIComponent(date.toISOString().replace(/\.\d{3}Z$/, "Z")));
    }
    parts.push("limit=" + LIMIT, "offset=" + page.offset);
    return parts.join("&");
  }

  // Nothing of the trail for a missing or refused token.
  function clear() {
    page.shown = null;
    $("entries-body").replaceChildren();
    $("empty").hidden = true;
    $("page-info").textContent = "";
    $("older").disabled = true;
    $("newer").disabled = true;
  }

  function load() {
    if (page.request) page.request.abort();
    page.request = null;
    const token = adminToken();
    if (!token) {
      clear();
      pill($("link"), "Admin token needed", "bad");
      adminStatus("Enter the admin token (http.admin_token or an admin operator's), then press Enter.", "meta");
      return;
    }
    if (token === page.refused) {
      pill($("link"), "Admin token refused", "bad");
      return;
    }
    let search;
    try {
      search = query();
    } catch (error) {
      status(error.message, "error");
      return;
    }
    const controller = new AbortController();
    page.request = controller;
    page.sent = token;
    fetch("/v1/audit?" + search, { cache: "no-store", headers: { Authorization: "Bearer " + token }, signal: controller.signal })
      .then((response) => response.json().catch(() => ({})).then((body) => ({ response, body })))
      .then(({ response, body }) => {
        if (page.request !== controller) return;
        page.request = null;
        // An answer, even a refusal: what the page shows is not stale.
        document.body.classList.remove("stale");
        if (response.status === 401) {
          page.refused = token;
          clear();
          pill($("link"), "Admin token refused", "bad");
          adminStatus("The admin token was refused (401): check http.admin_token, or the admin operator's token.", "error");
          status("", "meta");
          return;
        }
        if (response.status === 429) {
          pill($("link"), "Too many wrong tokens", "bad");
          adminStatus("Too many wrong tokens from this address (429): wait a minute, then press Enter in the token field.", "error");
          return;
        }
        if (!response.ok) {
          clear();
          pill($("link"), "Not read", "bad");
          status("The trail was not read: " + (body.message || "HTTP " + response.status), "error");
          return;
        }
        pill($("link"), "Live", "good");
        adminStatus("Token kept for this tab.", "meta");
        status("Read at " + new Date().toLocaleTimeString() + ".", "meta");
        render(Array.isArray(body.entries) ? body.entries : []);
      })
      .catch(() => {
        if (page.request !== controller) return;
        page.request = null;
        document.body.classList.add("stale");
        pill($("link"), "Disconnected, retrying…", "bad");
        status("The gateway did not answer.", "error");
      });
  }

  function render(entries) {
    $("older").disabled = entries.length < LIMIT;
    $("newer").disabled = page.offset === 0;
    $("empty").hidden = entries.length > 0;
    $("page-info").textContent =
      entries.length === 0 ? (page.offset > 0 ? "No older entries" : "") : "Entries " + (page.offset + 1) + "–" + (page.offset + entries.length) + ", newest first";
    const shown = JSON.stringify(entries);
    if (shown === page.shown) return;
    page.shown = shown;
    $("entries-body").replaceChildren(...entries.map(row));
  }

  function row(entry) {
    const tr = el("tr");
    tr.dataset.seq = String(entry.seq);
    tr.dataset.action = entry.action;
    const time = el("td", "time");
    const at = el("time", null, localTime(entry.at));
    at.dateTime = entry.at;
    at.title = entry.at;
    time.append(at);
    const change = el("td", "change");
    change.append(el("code", "before", compact(entry.before)), el("span", "arrow", " → "), el("code", "after", compact(entry.after)));
    tr.append(
      time,
      el("td", "operator", entry.operator),
      el("td", "action", entry.action),
      el("td", "target", entry.target),
      el("td", entry.reason ? "reason" : "reason none", entry.reason || "—"),
      el("td", entry.address ? "address" : "address none", entry.address || "—"),
      change
    );
    return tr;
  }

  // A before or after as one line of JSON, as the gateway kept it.
  function compact(value) {
    return value === undefined ? "—" : JSON.stringify(value);
  }

  function localTime(iso) {
    const date = new Date(iso);
    return Number.isNaN(date.getTime()) ? String(iso) : date.toLocaleString(undefined, { dateStyle: "short", timeStyle: "medium" });
  }

  // A token entered (Enter, or the field left): read with it, once; both
  // events come for one Enter.
  function tokenEntered() {
    if (page.request && page.sent === adminToken()) return;
    load();
  }

  // The first page follows the trail as it grows; an older page stays as read.
  function poll() {
    if (document.hidden || page.offset !== 0 || page.request) return;
    const token = adminToken();
    if (!token || token === page.refused) return;
    load();
  }

  document.addEventListener("DOMContentLoaded", () => {
    const input = $("admin-token");
    input.value = adminToken();
    input.addEventListener("input", () => {
      const token = input.value.trim();
      if (token) sessionStorage.setItem(TOKEN_KEY, token);
      else sessionStorage.removeItem(TOKEN_KEY);
      adminStatus(token ? "Press Enter to read the trail with this token." : "", "meta");
    });
    input.addEventListener("change", tokenEntered);
    $("admin").addEventListener("submit", (event) => {
      event.preventDefault();
      tokenEntered();
    });
    $("admin-forget").addEventListener("click", () => {
      sessionStorage.removeItem(TOKEN_KEY);
      input.value = "";
      page.refused = null;
      load();
      adminStatus("Token forgotten.", "meta");
    });
    const filters = $("filters");
    const apply = () => {
      page.offset = 0;
      load();
    };
    filters.addEventListener("change", apply);
    filters.addEventListener("submit", (event) => {
      event.preventDefault();
      apply();
    });
    $("older").addEventListener("click", () => {
      page.offset += LIMIT;
      load();
    });
    $("newer").addEventListener("click", () => {
      page.offset = Math.max(0, page.offset - LIMIT);
      load();
    });
    load();
    setInterval(poll, POLL_MS);
  });
})();
