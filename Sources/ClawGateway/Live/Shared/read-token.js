// The read token, one way for every page served from the binary (the site's
// dashboard, the chain's dashboard, the recorder's history): when the server
// asks for its read token the page asks for it once, in a small form it adds
// before its <main>, keeps it in the tab (sessionStorage, "claw-read-token"),
// sends it as a Bearer header, forgets a refused one so a reload does not send
// it again, and says what a 401, 421 or 429 means.
//
// A page loads this file before its own script (both deferred) and calls
//   const token = ClawReadToken.start({
//     server: "router",                 // "This router needs its read token…"
//     setting: "router.read_token",     // the key the operator looks up
//     misdirected: "…(421)…",           // what a 421 means here
//     fallbackKey: "claw-admin-token",  // optional: another token to send
//     onToken: poll,                    // a token was entered: try again
//   });
// then token.fetch(url, init) in place of fetch(url, init), token.refused()
// on a 401, token.accepted() once an answer was read, token.waiting while
// the form waits, and token.note(response) / token.delay(response, ms) on
// any other refusal. A page that polls gets its loop from token.poller(…).
//
// The few DOM helpers every page uses come with it, as ClawPage:
//   $(id), el(tag, className, text), pill(node, text, kind), and
//   live(isLive, note, fallback): the "link" pill and the page's "stale" look.
"use strict";

(function () {
  const $ = (id) => document.getElementById(id);

  function el(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }

  function pill(node, text, kind) {
    node.textContent = text;
    node.className = "pill " + kind;
  }

  // The page's connection pill: "Live", or why not (`note`, else `fallback`).
  function live(isLive, note, fallback) {
    if (isLive) pill($("link"), "Live", "good");
    else pill($("link"), note || fallback, "bad");
    document.body.classList.toggle("stale", !isLive);
  }

  window.ClawPage = { $, el, pill, live };
})();

(function () {
  const KEY = "claw-read-token";

  function start(options) {
    const form = document.createElement("form");
    form.id = "login";
    form.className = "login";
    form.autocomplete = "off";
    form.hidden = true;
    const label = document.createElement("label");
    label.htmlFor = "read-token";
    label.textContent = "Read token";
    const input = document.createElement("input");
    input.id = "read-token";
    input.name = "read-token";
    input.type = "password";
    input.spellcheck = false;
    input.placeholder = "paste " + options.setting + " or the admin token";
    const submit = document.createElement("button");
    submit.type = "submit";
    submit.id = "login-submit";
    submit.textContent = "Open";
    const status = document.createElement("span");
    status.id = "login-status";
    status.setAttribute("role", "status");
    form.append(label, input, submit, status);
    const main = document.querySelector("main");
    if (main) main.before(form);
    else document.body.append(form);

    let waiting = false;

    function say(text, kind) {
      status.textContent = text;
      status.className = kind;
    }

    form.addEventListener("submit", (event) => {
      event.preventDefault();
      const token = input.value.trim();
      if (!token) return;
      sessionStorage.setItem(KEY, token);
      say("Checking…", "meta");
      waiting = false;
      options.onToken();
    });

    return {
      // Whether the page waits for a token to be entered: no requests until then.
      get waiting() {
        return waiting;
      },

      // fetch(), with the token kept in the tab as a Bearer header.
      fetch(url, init) {
        const headers = Object.assign({}, (init && init.headers) || {});
        const token = sessionStorage.getItem(KEY) || (options.fallbackKey ? sessionStorage.getItem(options.fallbackKey) : null);
        if (token) headers.Authorization = "Bearer " + token;
        return fetch(url, Object.assign({}, init, { headers }));
      },

      // The server answered 401: ask for the token once, in the page; a token
      // that was refused is forgotten.
      refused() {
        const refusedToken = sessionStorage.getItem(KEY);
        sessionStorage.removeItem(KEY);
        waiting = true;
        form.hidden = false;
        say(
          refusedToken
            ? "The token was refused (401): check " + options.setting + "."
            : "This " + options.server + " needs its read token (" + options.setting + ") or the admin token.",
          refusedToken ? "error" : "meta"
        );
        input.focus();
      },

      // The server answered with what the page asked for.
      accepted() {
        waiting = false;
        form.hidden = true;
        input.value = "";
      },

      // What a refusal other than 401 means, or null when it says nothing more.
      note(response) {
        if (response.status === 429) return "Too many wrong tokens from here; trying again in a minute";
        if (response.status === 421) return options.misdirected;
        return null;
      },

      // The wait before the next try: at least what Retry-After asks.
      delay(response, delay) {
        const after = Number(response.headers.get("Retry-After"));
        return after > 0 ? Math.max(delay, after * 1000) : delay;
      },

      // The pages' polling loop. Returns run(): one request at a time (a new
      // run, when a filter changed or a token was entered, takes the place
      // of the one in flight), cut off after `timeout` ms; the next one
      // `interval` ms after this one ended, or later as a refusal asked;
      // none while the form waits for a token. request(signal, result)
      // fetches and shows, returning a promise: it sets result.shown when it
      // showed an answer, else result.note and result.delay as it sees fit.
      // A try that showed nothing calls setLive(false, result.note).
      poller({ interval, timeout, request, setLive }) {
        let inFlight = null;
        let timer = 0;
        const run = () => {
          clearTimeout(timer);
          if (inFlight) inFlight.abort();
          const controller = new AbortController();
          inFlight = controller;
          const cutOff = setTimeout(() => controller.abort(), timeout);
          const result = { shown: false, note: null, delay: interval };
          Promise.resolve()
            .then(() => request(controller.signal, result))
            .catch(() => {})
            .then(() => {
              clearTimeout(cutOff);
              // A newer run took over.
              if (inFlight !== controller) return;
              inFlight = null;
              if (waiting) return;
              if (!result.shown) setLive(false, result.note);
              timer = setTimeout(run, result.delay);
            });
        };
        return run;
      },
    };
  }

  window.ClawReadToken = { start };
})();
