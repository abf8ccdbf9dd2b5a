// The operators' dashboard of claw-gateway: the whole arcade live from
// GET /v1/stream (Server-Sent Events), admin actions through the admin API.
// With http.read_token set, the page asks for it once and keeps it in the
// tab, sent with every request (read-token.js, shared with the chain's pages).
//
// Every string that comes from a player (nick, account) or a machine is put
// into the page with textContent or as an attribute value, never as HTML.
"use strict";

(function () {
  const TOKEN_KEY = "claw-admin-token";
  const RESULTS_SHOWN = 5;
  // The outcomes a machine decides, and so an operator may correct (SPEC §16).
  const CORRECTABLE = ["won", "lost", "no_result", "machine_fault"];
  const CLIPS_READ_AFTER_MS = [6000, 15000];

  const page = {
    hello: null,
    helloAt: 0,
    // Gateway clock minus browser clock, in ms: deadlines are the gateway's.
    offset: 0,
    machines: new Map(),
    // Whether the wallets are kept here (the hello's credits): balances are read only then.
    credits: false,
    // The stream's AbortController, and when to reconnect (the stream's "retry:").
    stream: null,
    retryDelay: 2000,
    retryTimer: 0,
    live: false,
  };

  const { $, el, pill } = ClawPage;

  // MARK: The stream

  // Read with fetch() rather than EventSource, which cannot send the read
  // token: the same Server-Sent Events, parsed here, reconnecting by itself.
  function connect() {
    if (page.stream) page.stream.abort();
    clearTimeout(page.retryTimer);
    const controller = new AbortController();
    page.stream = controller;
    // What the link label says until the next try, and when that is.
    let note = null;
    let delay = page.retryDelay;
    readToken
      .fetch("/v1/stream", { headers: { Accept: "text/event-stream" }, cache: "no-store", signal: controller.signal })
      .then((response) => {
        if (response.status === 401) return needToken();
        if (!response.ok || !response.body) {
          note = readToken.note(response);
          delay = readToken.delay(response, delay);
          return;
        }
        readToken.accepted();
        setLive(true);
        return read(response.body.getReader(), controller);
      })
      .catch(() => {})
      .then(() => {
        if (controller.signal.aborted || page.stream !== controller || readToken.waiting) return;
        setLive(false, note);
        page.retryTimer = setTimeout(connect, delay);
      });
  }

  // Frames end with a blank line; a frame is "event:", "data:" and "retry:" lines.
  async function read(reader, controller) {
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done || controller.signal.aborted) return;
      buffer += decoder.decode(value, { stream: true }).replace(/\r\n?/g, "\n");
      let end;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        dispatch(buffer.slice(0, end));
        buffer = buffer.slice(end + 2);
      }
    }
  }

  const handlers = {
    hello: onHello,
    gateway: onGateway,
    snapshot: onSnapshot,
    event: onEvent,
    stats: onStats,
    gateway_stats: () => {},
    overflow: (data) => console.warn("events dropped by the feed", data.events_dropped),
    gap: (data) => console.warn("events missed by this page", data),
  };

  function dispatch(frame) {
    let name = "message";
    const data = [];
    for (const line of frame.split("\n")) {
      const colon = line.indexOf(":");
      if (colon === 0) continue;
      const field = colon < 0 ? line : line.slice(0, colon);
      const value = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
      if (field === "event") name = value;
      else if (field === "data") data.push(value);
      else if (field === "retry" && /^\d+$/.test(value)) page.retryDelay = Number(value);
    }
    const handle = handlers[name];
    if (!handle || data.length === 0) return;
    let parsed;
    try {
      parsed = JSON.parse(data.join("\n"));
    } catch (error) {
      console.warn("unreadable " + name, error);
      return;
    }
    handle(parsed);
  }

  // MARK: The read token (http.read_token)

  // Built at start (the form goes before <main>); the admin token, when one
  // was entered, reads too.
  let readToken = null;

  // The gateway wants a token: no stream until one is entered.
  function needToken() {
    setLive(false, "Token needed");
    readToken.refused();
  }

  function setLive(live, note) {
    page.live = live;
    ClawPage.live(live, note, "Disconnected, reconnecting…");
  }

  function onHello(hello) {
    page.hello = hello;
    page.credits = Boolean(hello.credits);
    page.helloAt = Date.now();
    const now = Date.parse(hello.now);
    page.offset = Number.isNaN(now) ? 0 : now - Date.now();
    $("gateway-id").textContent = hello.gateway;
    $("version").textContent = "v" + hello.version;
    $("stats-interval").textContent = hello.stats_interval_s > 0 ? hello.stats_interval_s + " s" : "— (off)";
    buildMachines(hello.machines);
    setupAdmin();
    $("parcels-link").hidden = !(hello.admin && hello.parcels);
    $("audit-link").hidden = !hello.admin;
    for (const machine of hello.machines) loadResults(machine.id);
  }

  function onGateway(status) {
    pill($("broker"), status.broker_connected ? "Broker connected" : "Broker disconnected", status.broker_connected ? "good" : "bad");
    pill($("storage"), status.storage_writable ? "Storage OK" : "Storage failing", status.storage_writable ? "good" : "bad");
    pill($("replies"), "Reply failures " + status.replies_failed, status.replies_failed > 0 ? "warn" : "good");
  }

  function onSnapshot(snapshot) {
    const machine = page.machines.get(snapshot.machine);
    if (!machine) return;
    if (machine.snapshot && snapshot.seq < machine.snapshot.seq) return;
    machine.snapshot = snapshot;
    renderSnapshot(machine);
  }

  function onEvent(event) {
    const machine = page.machines.get(event.machine);
    if (!machine) return;
    // A game changed its player's wallet: the balance after it (SPEC §11).
    if (event.type === "credits" && typeof event.balance === "number" && machine.balanceOf === event.provider + "/" + event.player) {
      machine.balance = event.balance;
      renderBalance(machine);
    }
    // A game the machine failed paid back (SPEC §11): marked on its result, whichever comes first.
    if (event.type === "credits" && event.data === "refund" && event.session) {
      machine.refunds.set(event.session, event.change);
      renderResults(machine);
    }
    machine.last.textContent = "Last: " + event.type.replace(/_/g, " ") + " " + clockTime(event.ts);
    if (event.type === "game_ended" && isGame(event.outcome)) {
      machine.results.unshift({ id: event.session, nick: event.nick || event.player, player: event.player, outcome: event.outcome, ended_at: event.ts });
      machine.results.length = Math.min(machine.results.length, RESULTS_SHOWN);
      renderResults(machine);
      // Its clips are cut a few seconds after its end (the pad, the last segment): read them then.
      for (const later of CLIPS_READ_AFTER_MS) setTimeout(() => loadResults(machine.id), later);
    }
    // A result corrected, from this page or another operator's: the list read again.
    if (event.type === "result_corrected") loadResults(machine.id);
  }

  function onStats(stats) {
    const machine = page.machines.get(stats.machine);
    if (!machine) return;
    machine.stats = stats;
    renderStats(machine);
  }

  // MARK: Machines

  function buildMachines(list) {
    const main = $("machines");
    main.replaceChildren();
    page.machines.clear();
    if (list.length === 0) main.append(el("p", "empty", "No machines configured."));
    for (const config of list) {
      // `corrections`: each listed game's Correct button and form, kept while
      // the list is drawn again so a reason being typed is not lost.
      const machine = { id: config.id, name: config.name, prize: config.prize || null, snapshot: null, stats: null, results: [], corrections: new Map(), refunds: new Map() };
      const card = el("section", "machine");
      card.dataset.machine = config.id;
      const head = el("header", "machine-head");
      const title = el("h2", null, config.name);
      title.append(el("span", "machine-id", config.id));
      machine.badges = el("div", "badges");
      head.append(title, machine.badges);
      machine.state = el("p", "state", "…");
      machine.countdown = el("span", "countdown");
      const stateRow = el("div", "state-row");
      stateRow.append(machine.state, machine.countdown);
      machine.player = el("p", "player");
      machine.fault = el("p", "fault");
      machine.fault.hidden = true;
      // Its prize and stock (SPEC §15): low and out marked.
      machine.stock = el("p", "stock");
      machine.stock.hidden = !machine.prize;
      const queueHead = el("h3", null, "Queue");
      machine.queueLength = el("span", "count");
      queueHead.append(" ", machine.queueLength);
      machine.queue = el("ol", "queue");
      const resultsHead = el("h3", null, "Last results");
      machine.resultList = el("ol", "results");
      machine.today = el("p", "today", "Today: –");
      machine.latency = el("p", "latency", "Ack latency: –");
      machine.drops = el("p", "drops", "Dropped: –");
      machine.last = el("p", "last", "");
      card.append(head, stateRow, machine.fault, machine.stock, machine.player, queueHead, machine.queue, resultsHead, machine.resultList, machine.today, machine.latency, machine.drops, machine.last);
      machine.controls = el("div", "controls");
      card.append(machine.controls);
      machine.card = card;
      page.machines.set(config.id, machine);
      main.append(card);
    }
    renderControls();
  }

  function renderSnapshot(machine) {
    const s = machine.snapshot;
    const reconnecting = !s.online && s.player !== null;
    const badges = [];
    if (reconnecting) badges.push(["Reconnecting", "warn"]);
    else badges.push(s.online ? ["Online", "good"] : ["Offline", "bad"]);
    if (s.paused) badges.push(["Paused", "info"]);
    if (s.suspect) badges.push(["Suspect", "alert"]);
    if (s.fault || s.reason) badges.push(["Maintenance", "alert"]);
    if (s.state === "out_of_stock") badges.push(["Out of stock", "alert"]);
    machine.badges.replaceChildren(...badges.map(([text, kind]) => el("span", "pill " + kind, text)));
    machine.card.dataset.state = reconnecting ? "reconnecting" : s.state;
    machine.state.textContent = reconnecting ? "reconnecting (game kept)" : s.state.replace(/_/g, " ");
    // Out of play (SPEC §12): the board's fault, or the operator's reason
    // (while a game in progress finishes, too).
    machine.fault.hidden = !(s.fault || s.reason);
    machine.fault.replaceChildren();
    if (s.fault) {
      machine.fault.append(el("strong", "fault-code", s.fault.code), " ", s.fault.text || "", " ", el("span", "meta", "since " + clockTime(s.fault.at)));
    }
    if (s.reason) machine.fault.append((s.fault ? " · " : "") + "Taken out: " + s.reason + (s.state === "maintenance" ? "" : " (after the game in progress)"));
    renderStock(machine);
    for (const button of machine.controls.querySelectorAll("button[data-action]")) lock(button);
    machine.player.replaceChildren();
    if (s.player) {
      machine.player.append(el("span", "label", "Player "));
      const nick = el("strong", "nick", s.player.nick || s.player.accid);
      nick.title = s.player.accid;
      machine.player.append(nick);
      // A continue (SPEC §3): the player who just played, offered the machine first.
      if (s.player.continue) machine.player.append(" ", el("span", "badge continue", "continue"));
      const who = s.player.provider + "/" + s.player.accid;
      if (machine.balanceOf !== who) {
        machine.balanceOf = who;
        machine.balance = null;
        loadBalance(machine, s.player);
      }
      machine.balanceText = el("span", "balance");
      machine.player.append(machine.balanceText);
      renderBalance(machine);
    } else {
      machine.balanceOf = null;
      machine.player.append(el("span", "label", "No player"));
    }
    machine.deadline = s.player && s.player.deadline ? Date.parse(s.player.deadline) : null;
    machine.queueLength.textContent = "(" + s.length + " waiting)";
    machine.queue.replaceChildren(
      ...s.waiting.map((entry) => {
        const item = el("li", null);
        const nick = el("span", "nick", entry.nick || entry.accid);
        nick.title = entry.accid;
        item.append(nick);
        if (adminOn()) {
          const remove = el("button", "small", "Remove");
          remove.type = "button";
          remove.dataset.action = "remove";
          remove.dataset.machine = machine.id;
          remove.dataset.accid = entry.accid;
          // A player is the pair (provider, account): name both.
          remove.dataset.provider = entry.provider || "";
          lock(remove);
          item.append(" ", remove);
        }
        return item;
      })
    );
    tick();
  }

  // "Prize Pikachu 30 cm · stock 2 (low)"; the stock is the snapshot's,
  // absent until an operator sets it (not counted).
  function renderStock(machine) {
    if (!machine.prize) return;
    const stock = machine.snapshot ? machine.snapshot.stock : undefined;
    const counted = typeof stock === "number";
    const level = !counted ? "uncounted" : stock === 0 ? "out" : stock <= machine.prize.low_at ? "low" : "ok";
    machine.stock.dataset.level = level;
    machine.stock.dataset.stock = counted ? String(stock) : "";
    machine.stock.replaceChildren(el("span", "label", "Prize "), el("strong", "prize-name", machine.prize.name), " · ");
    const text = !counted ? "stock not counted" : "stock " + stock + (level === "out" ? " (out)" : level === "low" ? " (low)" : "");
    machine.stock.append(el("span", "stock-level stock-" + level, text));
  }

  function renderResults(machine) {
    // A correction being typed keeps its focus while the list is drawn again.
    const focused = document.activeElement;
    const correctable = new Set();
    machine.resultList.replaceChildren(
      ...machine.results.map((game) => {
        const item = el("li", "outcome-" + game.outcome);
        item.dataset.game = game.id;
        item.append(el("span", "nick", game.nick || game.player), " ", el("span", "outcome", (game.outcome || "open").replace(/_/g, " ")));
        // The machine's word stays; the operator's correction is shown beside it.
        if (game.corrected) {
          item.classList.add("corrected");
          item.dataset.corrected = game.corrected.outcome;
          item.append(" ", correctionMark(game.corrected));
        }
        if (game.ended_at) item.append(" ", el("span", "meta", clockTime(game.ended_at)));
        if (machine.refunds.has(game.id)) {
          const credits = machine.refunds.get(game.id);
          const refunded = el("span", "refunded", "refunded" + (typeof credits === "number" ? " " + credits + " credit" + (credits === 1 ? "" : "s") : ""));
          refunded.title = "The machine failed this game: its price went back to the player's wallet";
          item.append(" ", refunded);
        }
        // The game's video (SPEC §14): a button per camera's clip, which plays it below.
        for (const clip of game.evidence || []) {
          const play = el("button", "clip", "▶ " + clip.camera);
          play.title = "Play camera " + clip.camera + "'s clip of this game (" + Math.round(clip.duration_s) + " s)";
          play.addEventListener("click", () => playClip(machine, game, clip, item));
          item.append(" ", play);
        }
        for (const gap of game.evidence_missing || []) {
          const none = el("span", "meta clip-missing", "no clip of " + gap.camera);
          none.title = gap.reason;
          item.append(" ", none);
        }
        if (isCorrectable(game)) {
          correctable.add(game.id);
          item.append(" ", correction(machine, game));
        }
        return item;
      })
    );
    for (const id of machine.corrections.keys()) if (!correctable.has(id)) machine.corrections.delete(id);
    if (machine.results.length === 0) machine.resultList.append(el("li", "meta none", "none yet"));
    machine.shownResults = JSON.stringify(machine.results);
    if (focused && focused !== document.activeElement && machine.resultList.contains(focused)) focused.focus({ preventScroll: true });
  }

  // "→ corrected: won by carol (reason)", after the machine's outcome.
  function correctionMark(corrected) {
    const mark = el("span", "correction");
    const outcome = String(corrected.outcome || "");
    mark.append("→ corrected: ", el("strong", "corrected-outcome corrected-" + outcome, outcome.replace(/_/g, " ")), " by " + corrected.by + " (" + corrected.reason + ")");
    const at = clockTime(corrected.at);
    if (at) mark.title = "Corrected at " + at;
    return mark;
  }

  // MARK: Corrected results (SPEC §16)

  // An ended game the machine decided, with the admin controls on.
  function isCorrectable(game) {
    return adminOn() && Boolean(game.id) && Boolean(game.ended_at) && CORRECTABLE.includes(game.outcome);
  }

  // What the game counts as now: the operator's outcome when corrected.
  function countedOutcome(game) {
    return (game.corrected && game.corrected.outcome) || game.outcome;
  }

  // The game's Correct button and form, made once and kept while it is listed.
  function correction(machine, game) {
    let control = machine.corrections.get(game.id);
    if (!control) {
      control = correctionForm(machine, game.id);
      machine.corrections.set(game.id, control);
    }
    control.counted = countedOutcome(game);
    if (control.form.hidden) control.to.value = opposite(control.counted);
    lock(control.toggle);
    lock(control.submit);
    return control.node;
  }

  function opposite(outcome) {
    return outcome === "won" ? "lost" : "won";
  }

  // "Correct" opens a form: won or lost (the opposite of what the game
  // counts as now, to begin with) and the reason the audit trail keeps.
  function correctionForm(machine, id) {
    const node = el("span", "correct");
    node.dataset.game = id;
    const toggle = el("button", "small correct-toggle", "Correct");
    toggle.type = "button";
    toggle.dataset.correct = id;
    toggle.dataset.machine = machine.id;
    const form = el("form", "correct-form");
    form.hidden = true;
    form.noValidate = true;
    const to = el("select", "correct-to");
    to.setAttribute("aria-label", "The game's result");
    for (const outcome of ["won", "lost"]) {
      const option = el("option", null, outcome);
      option.value = outcome;
      to.append(option);
    }
    const reason = el("input", "correct-reason");
    reason.placeholder = "reason (kept in the audit trail)";
    reason.setAttribute("aria-label", "Why the result is corrected");
    reason.required = true;
    reason.maxLength = 500;
    const submit = el("button", "small correct-submit", "Save");
    submit.type = "submit";
    submit.dataset.correct = id;
    submit.dataset.machine = machine.id;
    const cancel = el("button", "small correct-cancel", "Cancel");
    cancel.type = "button";
    const error = el("span", "correct-error");
    error.setAttribute("role", "status");
    form.append(to, reason, submit, cancel);
    node.append(toggle, form, error);
    const control = { node, toggle, form, to, reason, submit, error, counted: null };
    toggle.addEventListener("click", () => {
      to.value = opposite(control.counted);
      error.textContent = "";
      form.hidden = false;
      toggle.hidden = true;
      reason.focus();
    });
    cancel.addEventListener("click", () => closeCorrection(control));
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      correct(machine, id, control);
    });
    return control;
  }

  function closeCorrection(control) {
    control.form.hidden = true;
    control.toggle.hidden = false;
    control.reason.value = "";
    control.error.textContent = "";
  }

  // POST …/games/<g>/correct with the admin token; the list is read again on
  // 200, and the gateway's refusal is said beside the form.
  function correct(machine, id, control) {
    const token = adminToken();
    if (!token) {
      control.error.textContent = "Enter the admin token first.";
      $("admin-token").focus();
      return;
    }
    const reason = control.reason.value.trim();
    if (!reason) {
      control.error.textContent = "A reason is needed: the audit trail keeps it.";
      control.reason.focus();
      return;
    }
    const outcome = control.to.value;
    control.error.textContent = "";
    control.submit.classList.add("busy");
    control.submit.disabled = true;
    fetch("/v1/machines/" + encodeURIComponent(machine.id) + "/games/" + encodeURIComponent(id) + "/correct", {
      method: "POST",
      headers: { Authorization: "Bearer " + token, "Content-Type": "application/json" },
      body: JSON.stringify({ outcome, reason }),
    })
      .then((response) => response.json().catch(() => ({})).then((body) => ({ response, body })))
      .then(({ response, body }) => {
        if (response.ok) {
          closeCorrection(control);
          adminStatus("Done: game " + id + " of " + machine.id + " corrected to " + outcome, "ok");
          loadResults(machine.id);
        } else if (response.status === 401) {
          control.error.textContent = "The admin token was refused (401): check http.admin_token.";
        } else {
          control.error.textContent = body.message || "Not corrected (" + response.status + ").";
        }
      })
      .catch(() => {
        control.error.textContent = "The gateway did not answer.";
      })
      .finally(() => {
        control.submit.classList.remove("busy");
        lock(control.submit);
      });
  }

  // Today's games that ended, and whether one is on: `games_today` counts the
  // games started today (coins in), the one in progress included, and its
  // result is not known yet, so it is counted apart rather than as a game not
  // won.
  function renderStats(machine) {
    const s = machine.stats;
    const playing = gameOn(machine);
    const wins = tally(s.wins_today);
    // A game started before midnight and still on is not in games_today: never below the wins.
    const ended = Math.max(wins, tally(s.games_today) - playing);
    const rate = ended > 0 ? Math.round((100 * wins) / ended) + "% won" : "no game yet";
    const figures = ended > 0 || playing === 0 ? ended + (ended === 1 ? " game, " : " games, ") + wins + " won (" + rate + ")" : "no game ended yet";
    machine.today.textContent = "Today: " + figures + (playing > 0 ? " · " + playing + " playing" : "");
    const l = s.ack_latency_ms;
    machine.latency.textContent = s.acks > 0 ? "Ack latency: p50 " + l.p50 + " ms · p99 " + l.p99 + " ms · " + s.acks + " acks" : "Ack latency: no ack in the last interval";
    if (s.ack_timeouts > 0) machine.latency.textContent += " · " + s.ack_timeouts + " timed out";
    const drops = Object.entries(s.dropped);
    machine.drops.textContent = drops.length > 0 ? "Dropped: " + drops.map(([code, count]) => code.replace(/_/g, " ") + " " + count).join(", ") : "Dropped: none";
  }

  // 1 while a game is on (the coin went in, no result yet), else 0: the
  // statistics' own state, taken with its counts, says playing or awaiting
  // the result; or the PC dropped mid-game and the game is kept (offline, the
  // snapshot still showing the player: an offer is undone when the PC goes).
  function gameOn(machine) {
    const state = machine.stats.state;
    if (state === "playing" || state === "awaiting_result") return 1;
    const snapshot = machine.snapshot;
    return state === "offline" && snapshot && !snapshot.online && snapshot.player ? 1 : 0;
  }

  function tally(value) {
    return Number.isFinite(value) ? value : 0;
  }

  // An offer that was declined or ran out is not a game: no coin went in.
  // Credits (SPEC §11): the current player's balance beside their name,
  // read from their wallet when they take the machine, then from each
  // credits event. A gateway that keeps no wallets says so in its hello: nothing is asked.
  function loadBalance(machine, player) {
    if (!page.credits) return;
    const who = machine.balanceOf;
    readToken
      .fetch("/v1/players/" + encodeURIComponent(player.provider) + "/" + encodeURIComponent(player.accid) + "/wallet?limit=1", {})
      .then((response) => (response.ok ? response.json() : null))
      .then((wallet) => {
        if (!wallet || machine.balanceOf !== who || machine.balance !== null) return;
        machine.balance = wallet.balance;
        renderBalance(machine);
      })
      .catch(() => {});
  }

  function renderBalance(machine) {
    if (!machine.balanceText) return;
    machine.balanceText.textContent = machine.balance === null || machine.balance === undefined ? "" : " · " + machine.balance + " credits";
  }

  // A clip in a <video> under its game. Without a read token the browser
  // fetches it itself and seeks with Range requests; with one (a <video>
  // cannot send it) the clip is fetched whole, with the token, and played
  // from memory.
  function playClip(machine, game, clip, item) {
    const url = "/v1/machines/" + encodeURIComponent(machine.id) + "/games/" + encodeURIComponent(game.id) + "/evidence/" + encodeURIComponent(clip.camera);
    let video = item.querySelector("video");
    let label = item.querySelector(".clip-label");
    if (!video) {
      label = el("p", "clip-label");
      video = el("video", "clip-player");
      video.controls = true;
      video.muted = true;
      video.playsInline = true;
      item.append(label, video);
    }
    // Which clip this is: the camera, the game, its length.
    label.textContent = "Camera " + clip.camera + " of game " + game.id + (Number.isFinite(clip.duration_s) ? " · " + clip.duration_s.toFixed(1) + " s" : "");
    video.title = label.textContent;
    video.dataset.camera = clip.camera;
    if (!sessionStorage.getItem("claw-read-token")) {
      video.src = url;
      video.play().catch(() => {});
      return;
    }
    readToken
      .fetch(url, {})
      .then((response) => (response.ok ? response.blob() : Promise.reject(response)))
      .then((blob) => {
        video.src = URL.createObjectURL(blob);
        video.play().catch(() => {});
      })
      .catch(() => {});
  }

  function isGame(outcome) {
    return Boolean(outcome) && outcome !== "declined" && outcome !== "expired";
  }

  function loadResults(id) {
    readToken
      .fetch("/v1/machines/" + encodeURIComponent(id) + "/games?limit=" + RESULTS_SHOWN, {})
      .then((response) => (response.ok ? response.json() : { games: [] }))
      .then((body) => {
        const machine = page.machines.get(id);
        if (!machine) return;
        const results = body.games.filter((game) => game.started_at && isGame(game.outcome));
        // Unchanged: the list is left as it is (a clip playing, a correction being typed).
        if (JSON.stringify(results) === machine.shownResults) return;
        machine.results = results;
        renderResults(machine);
      })
      .catch(() => {});
  }

  // MARK: Time

  function clockTime(iso) {
    const date = new Date(iso);
    return Number.isNaN(date.getTime()) ? "" : date.toLocaleTimeString();
  }

  function tick() {
    const now = Date.now() + page.offset;
    for (const machine of page.machines.values()) {
      if (!machine.deadline || !machine.snapshot || machine.snapshot.state === "idle") {
        machine.countdown.textContent = "";
        continue;
      }
      const left = Math.max(0, Math.ceil((machine.deadline - now) / 1000));
      machine.countdown.textContent = Math.floor(left / 60) + ":" + String(left % 60).padStart(2, "0");
    }
    if (page.hello) {
      const up = page.hello.uptime_s + Math.floor((Date.now() - page.helloAt) / 1000);
      const hours = Math.floor(up / 3600);
      const minutes = Math.floor((up % 3600) / 60);
      $("uptime").textContent = "up " + (hours > 0 ? hours + " h " : "") + minutes + " min";
    }
  }

  // MARK: Admin

  function adminOn() {
    return Boolean(page.hello && page.hello.admin);
  }

  // The admin token typed into the page, kept in the tab.
  function adminToken() {
    return sessionStorage.getItem(TOKEN_KEY) || "";
  }

  // Why an action does nothing in the machine's state now ("" when it
  // applies): the gateway would refuse it or change nothing.
  function inapplicable(button) {
    const machine = page.machines.get(button.dataset.machine);
    const s = machine && machine.snapshot;
    if (!s) return "";
    const out = Boolean(s.fault || s.reason);
    switch (button.dataset.action) {
      case "pause": return s.paused ? "Already paused." : "";
      case "resume": return s.paused ? "" : "Not paused.";
      case "skip": return s.player ? "" : "Nobody holds the machine.";
      case "reset":
        if (!s.online) return "The machine is offline: its PC cannot home the gantry.";
        return s.player ? "A player holds the machine: skip their turn or wait for the game's end." : "";
      case "maintenance-on": return s.reason ? "Already taken out of play." : "";
      case "maintenance-off": return out ? "" : "The machine is in play.";
      default: return "";
    }
  }

  // An admin button is off, and says why on hover, until an admin token is
  // typed; off too while its own request is on its way, and while the
  // machine's state makes its action pointless.
  function lock(button) {
    const missing = !adminToken();
    const why = missing ? "" : inapplicable(button);
    button.disabled = missing || Boolean(why) || button.classList.contains("busy");
    button.classList.toggle("needs-token", missing);
    if (missing) button.title = "Needs the admin token (http.admin_token): type it in the Admin token field above.";
    else if (why) button.title = why;
    else button.removeAttribute("title");
  }

  function lockAll() {
    for (const button of document.querySelectorAll("#machines button[data-action], #machines button[data-restock], #machines button[data-correct]")) lock(button);
  }

  function setupAdmin() {
    const input = $("admin-token");
    if (!adminOn()) {
      input.disabled = true;
      $("admin-forget").hidden = true;
      adminStatus("Read-only: this gateway has no admin token (http.admin_token), so the controls are off.", "meta");
    } else {
      input.disabled = false;
      $("admin-forget").hidden = false;
      input.value = sessionStorage.getItem(TOKEN_KEY) || "";
      if (!input.value) adminStatus("Enter the admin token to pause, resume, skip, remove, reset, take machines out and correct results.", "meta");
    }
    renderControls();
  }

  function renderControls() {
    for (const machine of page.machines.values()) {
      machine.controls.replaceChildren();
      if (!adminOn()) continue;
      const actions = [["pause", "Pause"], ["resume", "Resume"], ["skip", "Skip turn"], ["reset", "Reset"],
        ["maintenance-on", "Maintenance"], ["maintenance-off", "Back in play"]];
      for (const [action, text] of actions) {
        const button = el("button", null, text);
        button.type = "button";
        button.dataset.action = action;
        button.dataset.machine = machine.id;
        lock(button);
        machine.controls.append(button);
      }
      if (machine.prize) machine.controls.append(restockForm(machine));
      if (machine.snapshot) renderSnapshot(machine);
    }
  }

  // Set or add to the stock, with the operator's reason (SPEC §15).
  function restockForm(machine) {
    const form = el("form", "restock");
    form.dataset.machine = machine.id;
    const how = el("select", "restock-how");
    for (const [value, text] of [["add", "Add"], ["set", "Set to"]]) {
      const option = el("option", null, text);
      option.value = value;
      how.append(option);
    }
    const count = el("input", "restock-count");
    count.type = "number";
    count.step = "1";
    count.required = true;
    count.placeholder = "prizes";
    const reason = el("input", "restock-reason");
    reason.required = true;
    reason.placeholder = "reason";
    reason.maxLength = 200;
    const button = el("button", null, "Restock");
    button.type = "submit";
    button.dataset.restock = machine.id;
    lock(button);
    form.append(how, count, reason, button);
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      restock(machine, how.value, Number(count.value), reason.value.trim(), button);
    });
    return form;
  }

  function restock(machine, how, count, reason, button) {
    const token = adminToken();
    if (!token) {
      adminStatus("Enter the admin token first.", "error");
      $("admin-token").focus();
      return;
    }
    if (!Number.isInteger(count) || !reason) {
      adminStatus("Restock " + machine.id + ": a whole number of prizes and a reason.", "error");
      return;
    }
    button.disabled = true;
    fetch("/v1/machines/" + encodeURIComponent(machine.id) + "/stock", {
      method: "POST",
      headers: { Authorization: "Bearer " + token, "Content-Type": "application/json" },
      body: JSON.stringify({ [how]: count, reason }),
    })
      .then((response) => response.json().catch(() => ({})).then((body) => ({ response, body })))
      .then(({ response, body }) => {
        if (response.status === 401) adminStatus("The admin token was refused (401): check http.admin_token.", "error");
        else if (!response.ok) adminStatus("Restock " + machine.id + " failed: " + (body.message || response.status), "error");
        else adminStatus("Done: the stock of " + machine.id + " is " + body.stock, "ok");
      })
      .catch(() => adminStatus("The gateway did not answer.", "error"))
      .finally(() => lock(button));
  }

  function checkAdminToken(token) {
    if (!token || !adminOn()) return;
    fetch("/v1/admin", { headers: { Authorization: "Bearer " + token } })
      .then((response) => {
        if (adminToken() !== token) return;
        if (response.ok) adminStatus("The admin token is right: the controls are on.", "ok");
        else if (response.status === 401) adminStatus("The admin token was refused (401): check http.admin_token.", "error");
        else if (response.status === 429) adminStatus("Too many wrong tokens from this address (429): wait a minute, then type it again.", "error");
        else adminStatus("The admin token could not be checked (" + response.status + ").", "error");
      })
      .catch(() => adminStatus("The gateway did not answer.", "error"));
  }

  function adminStatus(text, kind) {
    const status = $("admin-status");
    status.textContent = text;
    status.className = kind;
  }

  function act(button) {
    const token = adminToken();
    if (!token) {
      adminStatus("Enter the admin token first.", "error");
      $("admin-token").focus();
      return;
    }
    const id = button.dataset.machine;
    const action = button.dataset.action;
    const said = { "maintenance-on": "take out", "maintenance-off": "put back" }[action] || action;
    const base = "/v1/machines/" + encodeURIComponent(id);
    const request =
      action === "remove"
        ? {
            url: base + "/queue/" + encodeURIComponent(button.dataset.accid) +
              (button.dataset.provider ? "?provider=" + encodeURIComponent(button.dataset.provider) : ""),
            method: "DELETE",
          }
        : action.startsWith("maintenance-")
          ? { url: base + "/maintenance", method: "POST",
              body: JSON.stringify(action === "maintenance-on" ? { on: true, reason: "taken out from the dashboard" } : { on: false }) }
          : { url: base + "/" + action, method: "POST" };
    button.classList.add("busy");
    button.disabled = true;
    const headers = { Authorization: "Bearer " + token };
    if (request.body) headers["Content-Type"] = "application/json";
    fetch(request.url, { method: request.method, headers, body: request.body })
      .then((response) => response.json().catch(() => ({})).then((body) => ({ response, body })))
      .then(({ response, body }) => {
        if (response.status === 401) {
          adminStatus("The admin token was refused (401): check http.admin_token.", "error");
        } else if (!response.ok) {
          adminStatus(said + " " + id + " failed: " + (body.message || response.status), "error");
        } else {
          const what = action === "remove" ? "removed " + button.dataset.accid + " from " + id : said + " " + id;
          adminStatus(body.changed === false ? "Nothing to do: " + what : "Done: " + what, "ok");
        }
      })
      .catch(() => adminStatus("The gateway did not answer.", "error"))
      .finally(() => {
        button.classList.remove("busy");
        lock(button);
      });
  }

  // MARK: Start

  document.addEventListener("DOMContentLoaded", () => {
    readToken = ClawReadToken.start({
      server: "gateway",
      setting: "http.read_token",
      misdirected: "This gateway does not answer to this address (421): see http.allowed_hosts",
      fallbackKey: TOKEN_KEY,
      onToken: connect,
    });
    const input = $("admin-token");
    input.addEventListener("input", () => {
      const token = input.value.trim();
      if (token) sessionStorage.setItem(TOKEN_KEY, token);
      else sessionStorage.removeItem(TOKEN_KEY);
      if (adminOn()) adminStatus(token ? "Token kept for this tab." : "Enter the admin token to pause, resume, skip, remove, reset, take machines out and correct results.", "meta");
      lockAll();
    });
    // Once a token is typed (the field left, or Enter), it is checked: a
    // wrong one is said now, not when a button is pressed. Not on every
    // keystroke: each wrong token counts against the address's budget.
    input.addEventListener("change", () => checkAdminToken(input.value.trim()));
    $("admin").addEventListener("submit", (event) => {
      event.preventDefault();
      checkAdminToken(input.value.trim());
    });
    $("admin-forget").addEventListener("click", () => {
      sessionStorage.removeItem(TOKEN_KEY);
      input.value = "";
      adminStatus("Token forgotten.", "meta");
      lockAll();
    });
    $("machines").addEventListener("click", (event) => {
      const button = event.target.closest("button[data-action]");
      if (button) act(button);
    });
    setInterval(tick, 250);
    connect();
  });
})();
