// The chain's dashboard, served by claw-gateway route: every site and its
// machines, read from GET /v1/sites once a second. A site whose heartbeat
// stopped (reachable false) stays on the page, greyed and marked cut off, its
// machines as they were last known.
//
// With router.read_token set, the page asks for it once, the way the site's
// page does (read-token.js, shared by both), and sends it as a Bearer header.
//
// Every string from the router (site, machine, player) is put into the page
// with textContent or as an attribute value, never as HTML.
"use strict";

(function () {
  const POLL_INTERVAL = 1000;
  // A router that does not answer within this is counted as down.
  const REQUEST_TIMEOUT = 5000;

  const page = {
    // Site name -> { section, badges, count, note, grid, machines: Map(id -> card parts) }.
    sites: new Map(),
    empty: null,
  };

  const { $, el } = ClawPage;

  function pills(node, list) {
    node.replaceChildren(...list.map(([text, kind]) => el("span", "pill " + kind, text)));
  }

  // Moves nodes only when the order changed: a text the operator selected
  // stays selected from one second to the next.
  function place(parent, children) {
    const current = parent.children;
    if (current.length === children.length && children.every((child, index) => current[index] === child)) return;
    parent.replaceChildren(...children);
  }

  // MARK: Polling

  // GET /v1/sites, shown: the request of readToken's poller, once a second.
  function request(signal, result) {
    return readToken
      .fetch("/v1/sites", { headers: { Accept: "application/json" }, cache: "no-store", signal })
      .then((response) => {
        if (response.status === 401) return needToken();
        if (!response.ok) {
          result.note = readToken.note(response) || "The router answered " + response.status + "; retrying…";
          result.delay = readToken.delay(response, result.delay);
          return;
        }
        return response.json().then((body) => {
          if (!body || !Array.isArray(body.sites)) throw new Error("no sites in the answer");
          readToken.accepted();
          render(body.sites);
          setLive(true);
          result.shown = true;
        });
      });
  }

  function setLive(live, note) {
    ClawPage.live(live, note, "Disconnected, retrying…");
  }

  // MARK: The read token (router.read_token)

  // Built at start (the form goes before <main>), with the polling loop.
  let readToken = null;
  let poll = null;

  // The router wants a token: no polling until one is entered.
  function needToken() {
    setLive(false, "Token needed");
    readToken.refused();
  }

  // MARK: Sites

  function render(list) {
    const seen = new Set();
    const sections = [];
    let machines = 0;
    let cutOff = 0;
    for (const data of list) {
      if (!data || typeof data !== "object") continue;
      const name = String(data.site);
      if (seen.has(name)) continue;
      seen.add(name);
      let site = page.sites.get(name);
      if (!site) {
        site = buildSite(name);
        page.sites.set(name, site);
      }
      const reachable = data.reachable === true;
      if (!reachable) cutOff += 1;
      const machinesOf = Array.isArray(data.machines) ? data.machines : [];
      machines += machinesOf.length;
      renderSite(site, reachable, machinesOf);
      sections.push(site.section);
    }
    for (const name of page.sites.keys()) if (!seen.has(name)) page.sites.delete(name);
    if (sections.length === 0) {
      page.empty = page.empty || el("p", "empty", "No site yet: none has published its directory on the cluster.");
      sections.push(page.empty);
    }
    place($("sites"), sections);
    $("summary").textContent =
      count(seen.size, "site", "sites") + (cutOff > 0 ? ", " + cutOff + " cut off" : "") + " · " + count(machines, "machine", "machines");
    $("updated").textContent = "Updated " + new Date().toLocaleTimeString() + ".";
  }

  function count(number, one, many) {
    return number + " " + (number === 1 ? one : many);
  }

  function buildSite(name) {
    const section = el("section", "site");
    section.dataset.site = name;
    const head = el("header", "site-head");
    const title = el("h2", "site-name", name);
    const badges = el("div", "badges");
    const summary = el("span", "meta site-count");
    head.append(title, badges, summary);
    const note = el("p", "site-note", "No heartbeat from this site: its machines as last known.");
    const grid = el("div", "machines");
    section.append(head, note, grid);
    return { section, badges, summary, note, grid, machines: new Map(), empty: null };
  }

  function renderSite(site, reachable, list) {
    site.section.classList.toggle("cut-off", !reachable);
    site.section.dataset.reachable = String(reachable);
    pills(site.badges, [reachable ? ["Reachable", "good"] : ["Cut off", "bad"]]);
    site.note.hidden = reachable;
    const online = list.filter((machine) => machine && machine.online === true).length;
    site.summary.textContent = count(list.length, "machine", "machines") + ", " + online + " online" + (reachable ? "" : " (last known)");

    const seen = new Set();
    const cards = [];
    for (const data of list) {
      if (!data || typeof data !== "object") continue;
      const id = String(data.id);
      if (seen.has(id)) continue;
      seen.add(id);
      let machine = site.machines.get(id);
      if (!machine) {
        machine = buildMachine(id);
        site.machines.set(id, machine);
      }
      renderMachine(machine, data, reachable);
      cards.push(machine.card);
    }
    for (const id of site.machines.keys()) if (!seen.has(id)) site.machines.delete(id);
    if (cards.length === 0) {
      site.empty = site.empty || el("p", "empty", "No machine in this site's directory.");
      cards.push(site.empty);
    }
    place(site.grid, cards);
  }

  // MARK: Machines

  function buildMachine(id) {
    const card = el("article", "machine");
    card.dataset.machine = id;
    const head = el("header", "machine-head");
    const title = el("h2", null);
    const name = el("span", "machine-name");
    title.append(name, el("span", "machine-id", id));
    const badges = el("div", "badges");
    head.append(title, badges);
    const state = el("p", "state");
    const player = el("p", "player");
    const queue = el("p", "queue-length");
    card.append(head, state, player, queue);
    return { card, name, badges, state, player, queue };
  }

  // What the router has not heard yet (no snapshot from the site) is null:
  // said as unknown, never guessed.
  function renderMachine(machine, data, reachable) {
    const player = data.player;
    const known = typeof data.online === "boolean";
    const online = data.online === true;
    // Offline with a player: the PC dropped mid-game and the game is kept for it.
    const reconnecting = data.online === false && player !== null && player !== undefined;
    const state = typeof data.state === "string" ? data.state : null;
    machine.name.textContent = data.name === null || data.name === undefined || data.name === "" ? String(data.id) : String(data.name);
    const badges = [];
    if (!reachable) badges.push(["Last known", "warn"]);
    if (reconnecting) badges.push(["Reconnecting", "warn"]);
    else if (!known) badges.push(["Unknown", "unknown"]);
    else badges.push(online ? ["Online", "good"] : ["Offline", "bad"]);
    pills(machine.badges, badges);
    machine.card.dataset.state = !reachable ? "last-known" : reconnecting ? "reconnecting" : state || "unknown";
    machine.state.textContent = reconnecting ? "reconnecting (game kept)" : state ? state.replace(/_/g, " ") : "no snapshot yet";

    machine.player.replaceChildren();
    if (player && typeof player === "object") {
      machine.player.append(el("span", "label", "Player "));
      const nick = el("strong", "nick", player.nick || player.accid || "?");
      if (player.accid) nick.title = String(player.accid);
      machine.player.append(nick);
    } else if (typeof player === "string" && player !== "") {
      machine.player.append(el("span", "label", "Player "), el("strong", "nick", player));
    } else {
      machine.player.append(el("span", "label", "No player"));
    }
    machine.queue.textContent = Number.isFinite(data.queue_length) ? "Queue: " + data.queue_length + " waiting" : "Queue: unknown";
  }

  // MARK: Start

  document.addEventListener("DOMContentLoaded", () => {
    readToken = ClawReadToken.start({
      server: "router",
      setting: "router.read_token",
      misdirected: "The router does not answer to this address (421)",
      onToken: () => poll(),
    });
    poll = readToken.poller({ interval: POLL_INTERVAL, timeout: REQUEST_TIMEOUT, request, setLive });
    poll();
  });
})();
