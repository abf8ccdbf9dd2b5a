// The chain's history, served by claw-gateway record: games per hour, the win
// rate of each machine per day (the figure an operator tunes the claw's
// strength by), the daily report, each machine's odds over the days (SPEC
// §16: wins, strong grabs, payout) and the latest games, read from the
// recorder's GET /v1/report/hourly, /v1/report/daily, /v1/report/fairness and
// /v1/games every 30 seconds, for the site, machine and number of days chosen.
//
// The charts are Chart.js's (window.Chart, from /history/chart.js: Debian's
// libjs-chart.js on the recorder's host). Without it the page says so in
// place of the charts and still shows its tables.
//
// With recorder.read_token set, the page asks for it once, the way the
// chain's dashboard does (read-token.js, shared by both), and sends it as a
// Bearer header.
//
// Every string from the recorder (site, machine, player) is put into the page
// with textContent or as an attribute value, never as HTML; in the charts it
// is drawn on the canvas.
"use strict";

(function () {
  // Every 30 s, or as the address says (`/history?reload=10`, 2 s at the least): a wall display may want its own pace.
  const RELOAD_INTERVAL = (() => {
    const seconds = Number(new URLSearchParams(window.location.search).get("reload"));
    return Number.isFinite(seconds) && seconds >= 2 ? seconds * 1000 : 30000;
  })();
  // A recorder that does not answer within this is counted as down.
  const REQUEST_TIMEOUT = 10000;
  const GAMES_LIMIT = 25;
  // /v1/report/hourly's most.
  const MAX_HOURS = 720;
  const HOUR = 3600 * 1000;
  const DAY = 24 * HOUR;
  // Games per hour: the axis starts at the first hour with a game, but spans a
  // day at the least; past a week of hours, a bar holds several hours (2, 3,
  // 6, 12 or 24, UTC-aligned) so that no more than a week's worth of bars
  // (168) share the width and none is a hairline.
  const MIN_HOURS = 24;
  const MAX_BARS = 168;
  const BAR_HOURS = [1, 2, 3, 6, 12, 24];
  // Its axis names 8 round times at the most (every 1, 2, 3, 6 or 12 hours,
  // or every 1, 2, 3, 4 or 7 days), each with a grid line.
  const TICK_HOURS = [1, 2, 3, 6, 12, 24, 48, 72, 96, 168];
  const MAX_TICKS = 8;
  const PALETTE = ["#4e9af1", "#f39c4a", "#5fd38d", "#e0607e", "#b48ef0", "#e8c547", "#4fd1c5", "#c7836b", "#8fbf4d", "#93a1ae"];
  // Win rate: a shape per line as well as a colour, so that machines with the
  // same rate on a day stay apart (with a slight sideways shift: dodge, below).
  const POINT_STYLES = ["circle", "rect", "triangle", "rectRot", "star", "crossRot", "rectRounded", "cross"];
  // Its markers' radius, and the least they shrink to where many lines share
  // a day (markerRadius, below); their border is 2 px.
  const MARKER = 5;
  const MIN_MARKER = 3;
  const MARKER_BORDER = 2;

  const page = {
    // The Chart.js charts; null when Chart.js is missing.
    hourly: null,
    winRate: null,
    // Every site seen, with its machines: the filters' choices.
    known: new Map(),
    // A colour per series, kept from one reload to the next.
    colours: new Map(),
    // A point style per line of the win-rate chart, kept the same way.
    styles: new Map(),
    // Games per hour as drawn: each bar's [start, end) in ms, the hours it
    // holds, and its label on the axis ("" for most).
    bars: { spans: [], hours: 1, ticks: [] },
    // Whether the tables were ever filled: until then they say why they are empty.
    shown: false,
  };

  const { $, el } = ClawPage;

  function compare(a, b) {
    return a < b ? -1 : a > b ? 1 : 0;
  }

  function count(value) {
    return Number.isFinite(value) ? value : 0;
  }

  function percent(rate) {
    return typeof rate === "number" && Number.isFinite(rate) ? (rate * 100).toFixed(1) + "%" : "–";
  }

  // A figure the recorder may not have (null): "–" then, as percent's.
  function figure(value) {
    return typeof value === "number" && Number.isFinite(value) ? String(value) : "–";
  }

  function colour(key) {
    if (!page.colours.has(key)) page.colours.set(key, PALETTE[page.colours.size % PALETTE.length]);
    return page.colours.get(key);
  }

  function pointStyle(key) {
    if (!page.styles.has(key)) page.styles.set(key, POINT_STYLES[page.styles.size % POINT_STYLES.length]);
    return page.styles.get(key);
  }

  // A time in UTC as the charts write it: "11-24 08:00" (month-day hour).
  function utcLabel(ms) {
    const iso = new Date(ms).toISOString();
    return iso.slice(5, 10) + " " + iso.slice(11, 16);
  }

  // MARK: Filters

  function filters() {
    const days = Number($("days").value);
    return { site: $("site").value, machine: $("machine").value, days: Number.isInteger(days) && days > 0 ? days : 7 };
  }

  function query(params) {
    const search = new URLSearchParams();
    for (const [name, value] of Object.entries(params)) if (value !== "" && value !== null && value !== undefined) search.set(name, String(value));
    return search.toString();
  }

  function learn(site, machine) {
    if (typeof site !== "string" || site === "") return;
    if (!page.known.has(site)) page.known.set(site, new Set());
    if (typeof machine === "string" && machine !== "") page.known.get(site).add(machine);
  }

  function machinesOf(site) {
    const machines = new Set();
    for (const [name, set] of page.known) if (!site || name === site) for (const machine of set) machines.add(machine);
    return Array.from(machines).sort(compare);
  }

  function renderFilters() {
    const chosen = filters();
    fill($("site"), "All sites", Array.from(page.known.keys()).sort(compare), chosen.site);
    fill($("machine"), "All machines", machinesOf(chosen.site), chosen.machine);
  }

  // Rebuilt only when the choices changed, so an open list is not disturbed;
  // the chosen value stays a choice.
  function fill(select, all, values, chosen) {
    if (chosen && !values.includes(chosen)) values.push(chosen);
    const current = Array.from(select.options, (option) => option.value).slice(1);
    if (current.length === values.length && current.every((value, index) => value === values[index])) return;
    const option = (value, text) => {
      const node = el("option", null, text);
      node.value = value;
      return node;
    };
    select.replaceChildren(option("", all), ...values.map((value) => option(value, value)));
    select.value = chosen;
  }

  // MARK: Loading

  // The four reads for the filters chosen, shown: the request of
  // readToken's poller (load), every RELOAD_INTERVAL and at once when a
  // filter changes.
  function request(signal, result) {
    const chosen = filters();
    const hours = Math.min(chosen.days * 24, MAX_HOURS);
    const scope = { site: chosen.site, machine: chosen.machine };
    const urls = [
      "/v1/report/hourly?" + query(Object.assign({ hours }, scope)),
      "/v1/report/daily?" + query(Object.assign({ days: chosen.days }, scope)),
      "/v1/games?" + query(Object.assign({ limit: GAMES_LIMIT }, scope)),
      "/v1/report/fairness?" + query(Object.assign({ days: chosen.days }, scope)),
    ];
    const options = { headers: { Accept: "application/json" }, cache: "no-store", signal };
    if (!page.shown) tableNotes("Waiting for the recorder…");
    return Promise.all(urls.map((url) => readToken.fetch(url, options))).then((responses) => {
      if (responses.some((response) => response.status === 401)) return needToken();
      const failed = responses.find((response) => !response.ok);
      if (failed) {
        result.note = readToken.note(failed) || "The recorder answered " + failed.status + "; retrying…";
        result.delay = readToken.delay(failed, result.delay);
        return failed
          .json()
          .then((body) => {
            if (body && typeof body.message === "string" && failed.status !== 429 && failed.status !== 421) result.note += " " + body.message;
          })
          .catch(() => {});
      }
      return Promise.all(responses.map((response) => response.json())).then(([hourly, daily, games, fairness]) => {
        if (!hourly || !Array.isArray(hourly.hours)) throw new Error("no hours in the answer");
        if (!daily || !Array.isArray(daily.days)) throw new Error("no days in the answer");
        if (!games || !Array.isArray(games.games)) throw new Error("no games in the answer");
        if (!fairness || !Array.isArray(fairness.machines)) throw new Error("no machines in the answer");
        readToken.accepted();
        render(chosen, hours, hourly, daily, games.games, fairness.machines);
        setLive(true);
        result.shown = true;
        page.shown = true;
      });
    });
  }

  function setLive(live, note) {
    ClawPage.live(live, note, "The recorder does not answer; retrying…");
  }

  // MARK: The read token (recorder.read_token)

  // Built at start (the form goes before <main>), with the loading loop.
  let readToken = null;
  let load = null;

  // The recorder wants a token: no loading until one is entered. The tables,
  // empty until a first answer, say so rather than "Waiting for the recorder…"
  // (figures already shown stay, faded).
  function needToken() {
    setLive(false, "Token needed");
    readToken.refused();
    if (!page.shown) tableNotes("The recorder needs its read token (recorder.read_token) or the admin token: enter it above.");
  }

  // The empty tables' note, before any answer.
  function tableNotes(text) {
    for (const id of ["daily-empty", "fairness-empty", "games-empty"]) {
      const note = $(id);
      note.textContent = text;
      note.hidden = false;
    }
  }

  // MARK: Rendering

  function render(chosen, hours, hourly, daily, games, machines) {
    for (const row of hourly.hours) if (row && typeof row === "object") learn(row.site);
    for (const row of daily.days) if (row && typeof row === "object") learn(row.site, row.machine);
    for (const row of machines) if (row && typeof row === "object") learn(row.site, row.machine);
    for (const game of games) if (game && typeof game === "object") learn(game.site, game.machine);
    renderFilters();
    if (page.hourly) renderHourly(hourly, hours);
    if (page.winRate) renderWinRate(daily, chosen.days);
    renderDaily(daily.days);
    renderFairness(machines);
    renderGames(games);
    renderSummary(daily.days, chosen.days);
    // UTC, as everything else on the page.
    $("updated").textContent = "Updated " + new Date().toISOString().slice(11, 19) + " UTC.";
  }

  // The axis runs from the first hour with a game (MIN_HOURS before the
  // window's end at the least) to the window's end, the current hour; an hour
  // the recorder does not list had no game. Past MAX_BARS hours, a bar holds
  // several (BAR_HOURS, aligned on UTC midnight); the first bar starts with
  // the first hour shown, the last one ends with the current hour.
  function renderHourly(answer, hours) {
    const since = Date.parse(answer.since);
    const labels = [];
    const spans = [];
    const ticks = [];
    const sites = new Map();
    let size = 1;
    if (Number.isFinite(since)) {
      const rows = [];
      let first = hours;
      for (const row of answer.hours) {
        if (!row || typeof row !== "object") continue;
        const index = Math.round((Date.parse(row.hour) - since) / HOUR);
        if (!(index >= 0 && index < hours)) continue;
        const games = count(row.games);
        rows.push({ index, site: String(row.site), games });
        if (games > 0) first = Math.min(first, index);
      }
      const start = Math.max(0, Math.min(first, hours - MIN_HOURS));
      size = BAR_HOURS.find((bar) => Math.ceil((hours - start) / bar) <= MAX_BARS) || BAR_HOURS[BAR_HOURS.length - 1];
      const end = since + hours * HOUR;
      // Bars start on whole multiples of `size` hours since the epoch (UTC midnight for 24).
      const origin = Math.floor((since + start * HOUR) / (size * HOUR));
      const bar = (index) => Math.floor((since + index * HOUR) / (size * HOUR)) - origin;
      const bars = bar(hours - 1) + 1;
      for (let index = 0; index < bars; index += 1) {
        const from = index === 0 ? since + start * HOUR : (origin + index) * size * HOUR;
        spans.push([from, Math.min(end, (origin + index + 1) * size * HOUR)]);
        labels.push(utcLabel(from));
      }
      // The axis' names: round times, the day under the first one and under each midnight.
      const every = TICK_HOURS.find((tick) => tick >= size && (end - spans[0][0]) / (tick * HOUR) <= MAX_TICKS) || TICK_HOURS[TICK_HOURS.length - 1];
      let named = false;
      for (const [from] of spans) {
        const label = utcLabel(from);
        if (from % (every * HOUR) !== 0) ticks.push("");
        else if (every >= 24) ticks.push(label.slice(0, 5));
        else ticks.push(!named || label.slice(6) === "00:00" ? [label.slice(6), label.slice(0, 5)] : label.slice(6));
        named = named || from % (every * HOUR) === 0;
      }
      for (const row of rows) {
        if (row.index < start) continue;
        if (!sites.has(row.site)) sites.set(row.site, new Array(bars).fill(0));
        sites.get(row.site)[bar(row.index)] += row.games;
      }
    }
    page.bars = { spans, hours: size, ticks };
    const datasets = Array.from(sites.keys())
      .sort(compare)
      .map((site) => ({ label: site, data: sites.get(site), backgroundColor: colour("site " + site), borderColor: colour("site " + site), stack: "games" }));
    page.hourly.options.scales.y.title.text = size === 1 ? "games" : "games per " + size + " hours";
    draw(page.hourly, labels, datasets);
  }

  // A bar's hours, for its tooltip: "11-24 08:00–09:00 UTC", "11-24 18:00–24:00 UTC".
  function barTitle(index) {
    const span = page.bars.spans[index];
    if (!span) return "";
    const from = utcLabel(span[0]);
    const to = utcLabel(span[1]);
    if (to.slice(0, 5) === from.slice(0, 5)) return from + "–" + to.slice(6) + " UTC";
    if (to.slice(6) === "00:00" && span[1] - span[0] <= DAY) return from + "–24:00 UTC";
    return from + " – " + to + " UTC";
  }

  // The hourly axis' names and grid lines: only at the round times renderHourly chose.
  function barTick(index) {
    return page.bars.ticks[index] || "";
  }

  // One line per site and machine, a point per day; a day the machine
  // played no game is a gap, not a zero.
  function renderWinRate(answer, days) {
    const since = Date.parse(answer.since);
    const labels = [];
    if (Number.isFinite(since)) for (let index = 0; index < days; index += 1) labels.push(new Date(since + index * DAY).toISOString().slice(0, 10));
    const series = new Map();
    for (const row of answer.days) {
      if (!row || typeof row !== "object") continue;
      const index = labels.indexOf(String(row.day));
      if (index < 0) continue;
      const site = String(row.site);
      const machine = String(row.machine);
      const key = JSON.stringify([site, machine]);
      if (!series.has(key)) series.set(key, { site, machine, data: new Array(labels.length).fill(null), games: new Array(labels.length).fill(null) });
      series.get(key).data[index] = typeof row.win_rate === "number" ? row.win_rate : null;
      series.get(key).games[index] = [count(row.wins), count(row.games)];
    }
    const datasets = Array.from(series.values())
      .sort((a, b) => compare(a.site, b.site) || compare(a.machine, b.machine))
      .map((line) => {
        const key = "machine " + JSON.stringify([line.site, line.machine]);
        return {
          label: line.site + " · " + line.machine,
          data: line.data,
          // [wins, games] per day, for the tooltip.
          games: line.games,
          borderColor: colour(key),
          backgroundColor: colour(key),
          pointStyle: pointStyle(key),
          // The shape's inside lets another one show through it.
          pointBackgroundColor: colour(key) + "59",
          pointBorderColor: colour(key),
          spanGaps: false,
        };
      });
    draw(page.winRate, labels, datasets);
  }

  // The same chart, its data replaced: no animation every 30 seconds.
  function draw(chart, labels, datasets) {
    chart.data.labels = labels;
    chart.data.datasets = datasets;
    chart.update("none");
  }

  // Table cells are classed col-*: the site page's style (app.css) has its own .machine, .state, .outcome.
  function renderDaily(rows) {
    const list = rows
      .filter((row) => row && typeof row === "object")
      .sort((a, b) => compare(String(b.day), String(a.day)) || compare(String(a.site), String(b.site)) || compare(String(a.machine), String(b.machine)));
    $("daily").tBodies[0].replaceChildren(
      ...list.map((row) => {
        const tr = el("tr");
        tr.dataset.day = String(row.day);
        tr.dataset.site = String(row.site);
        tr.dataset.machine = String(row.machine);
        const noResult = count(row.no_result);
        tr.append(
          el("td", "col-day", row.day),
          el("td", "col-site", row.site),
          el("td", "col-machine", row.machine),
          el("td", "number col-games", count(row.games)),
          el("td", "number col-wins", count(row.wins)),
          el("td", "number col-win-rate", percent(row.win_rate)),
          el("td", "number col-no-result" + (noResult > 0 ? " attention" : ""), noResult)
        );
        return tr;
      })
    );
    emptyNote($("daily-empty"), list.length, "No game in these days.");
  }

  // Each machine's odds over the days chosen (SPEC §16), from
  // /v1/report/fairness: games won or lost (as corrected), the strong
  // (full-power) grabs among them, and what the prizes cost against the
  // credits taken. Null is a figure the recorder does not have: no game to
  // take a rate of, or no wallets to count credits by.
  function renderFairness(rows) {
    const list = rows
      .filter((row) => row && typeof row === "object")
      .sort((a, b) => compare(String(a.site), String(b.site)) || compare(String(a.machine), String(b.machine)));
    $("fairness").tBodies[0].replaceChildren(
      ...list.map((row) => {
        const tr = el("tr");
        tr.dataset.site = String(row.site);
        tr.dataset.machine = String(row.machine);
        const strong = count(row.strong_games);
        tr.append(
          el("td", "col-site", row.site),
          el("td", "col-machine", row.machine),
          el("td", "number col-games", count(row.games)),
          el("td", "number col-wins", count(row.wins)),
          el("td", "number col-win-rate", percent(row.win_rate)),
          el("td", "number col-strong", strong > 0 ? count(row.strong_wins) + " of " + strong + " won" : "–"),
          el("td", "number col-credits", figure(row.credits_taken)),
          el("td", "number col-prize-cost", figure(row.prize_cost)),
          el("td", "number col-payout", percent(row.payout))
        );
        return tr;
      })
    );
    emptyNote($("fairness-empty"), list.length, "No game in these days.");
  }

  function renderGames(games) {
    const list = games.filter((game) => game && typeof game === "object");
    $("games").tBodies[0].replaceChildren(
      ...list.map((game) => {
        const tr = el("tr", "outcome-" + (typeof game.outcome === "string" ? game.outcome : "none"));
        tr.dataset.site = String(game.site);
        tr.dataset.game = String(game.id);
        const offered = typeof game.offered_at === "string" ? game.offered_at.slice(0, 19).replace("T", " ") : "–";
        const player = el("td", "col-player", game.nick || game.player || "–");
        if (game.player) player.title = String(game.provider || "") + ":" + String(game.player);
        const outcome = typeof game.outcome === "string" ? game.outcome.replace(/_/g, " ") : game.started_at ? "playing" : "offered";
        tr.append(
          el("td", "col-offered", offered),
          el("td", "col-site", game.site),
          el("td", "col-machine", game.machine),
          player,
          el("td", "col-outcome", outcome),
          el("td", "number col-commands", count(game.commands))
        );
        return tr;
      })
    );
    emptyNote($("games-empty"), list.length, "No game yet.");
  }

  function emptyNote(node, rows, text) {
    node.textContent = text;
    node.hidden = rows > 0;
  }

  function renderSummary(rows, days) {
    let games = 0;
    let wins = 0;
    for (const row of rows) {
      if (!row || typeof row !== "object") continue;
      games += count(row.games);
      wins += count(row.wins);
    }
    $("summary").textContent =
      games + (games === 1 ? " game" : " games") + ", " + wins + " won (" + percent(games > 0 ? wins / games : null) + ") in the last " + (days === 1 ? "day" : days + " days");
  }

  // MARK: Charts

  // Lines side by side: each visible line's points are moved sideways by a
  // few pixels, the same for the whole line, so that machines with the same
  // rate on a day show as points next to each other rather than one on top
  // of another. Only where they are drawn: the data stays the API's.
  const dodge = {
    id: "dodge",
    afterDatasetsUpdate(chart) {
      const metas = chart.getSortedVisibleDatasetMetas();
      if (metas.length < 2 || chart.data.labels.length === 0) return;
      const step = dodgeStep(chart);
      metas.forEach((meta, rank) => {
        const shift = (rank - (metas.length - 1) / 2) * step;
        for (const point of meta.data) point.x += shift;
      });
    },
  };

  // How far apart the lines' points are on a day: the lines shown share half
  // a day's width (the other half keeps the days apart, and the last day's
  // points inside the chart), a whole marker each at the most.
  function dodgeStep(chart) {
    const days = chart.data.labels.length;
    const lines = chart.getSortedVisibleDatasetMetas().length;
    const width = chart.scales.x ? chart.scales.x.width : 0;
    const marker = 2 * MARKER + MARKER_BORDER;
    return days > 0 && lines > 0 && width > 0 ? Math.min(marker, (0.5 * width) / days / lines) : marker;
  }

  // Markers as wide as their step, so that equal rates read as a row of
  // shapes rather than a pile; never smaller than MIN_MARKER, and a lone
  // line keeps its full size.
  function markerRadius(chart) {
    if (chart.getSortedVisibleDatasetMetas().length < 2) return MARKER;
    return Math.max(MIN_MARKER, Math.min(MARKER, (dodgeStep(chart) - MARKER_BORDER) / 2));
  }

  function makeCharts() {
    const style = getComputedStyle(document.documentElement);
    const muted = style.getPropertyValue("--muted").trim();
    const line = style.getPropertyValue("--line").trim();
    if (muted) window.Chart.defaults.color = muted;
    if (line) window.Chart.defaults.borderColor = line;
    const common = {
      animation: false,
      responsive: true,
      maintainAspectRatio: false,
      interaction: { mode: "index", intersect: false },
      plugins: { legend: { position: "bottom" } },
    };
    page.hourly = new window.Chart($("hourly-chart"), {
      type: "bar",
      data: { labels: [], datasets: [] },
      options: Object.assign({}, common, {
        // A bar of a few hours stays a bar, not a slab; 168 stay visible.
        datasets: { bar: { categoryPercentage: 0.9, barPercentage: 0.9, maxBarThickness: 40 } },
        scales: {
          x: {
            stacked: true,
            ticks: { autoSkip: false, maxRotation: 0, callback: (value) => barTick(value) },
            grid: { offset: false, color: (context) => (barTick(context.index) ? window.Chart.defaults.borderColor : "transparent") },
          },
          y: { stacked: true, beginAtZero: true, grace: "5%", ticks: { precision: 0 }, title: { display: true, text: "games" } },
        },
        plugins: Object.assign({}, common.plugins, {
          // The bar's hours, and the sites that played in them.
          tooltip: { filter: (item) => item.parsed.y > 0, callbacks: { title: (items) => (items.length > 0 ? barTitle(items[0].dataIndex) : "") } },
        }),
      }),
    });
    page.winRate = new window.Chart($("win-rate-chart"), {
      type: "line",
      data: { labels: [], datasets: [] },
      plugins: [dodge],
      options: Object.assign({}, common, {
        elements: {
          point: {
            radius: (context) => markerRadius(context.chart),
            hoverRadius: (context) => markerRadius(context.chart) + 2,
            borderWidth: MARKER_BORDER,
            hoverBorderWidth: MARKER_BORDER,
          },
          line: { borderWidth: 2 },
        },
        // A point at 0 % or 100 % is drawn whole, over the axis.
        datasets: { line: { clip: false } },
        layout: { padding: { top: 8, right: 8 } },
        scales: {
          // offset: the first and the last day are half a day in from the edges.
          // The day without its year on the axis ("11-24"), whole in the tooltip.
          x: {
            offset: true,
            ticks: {
              maxRotation: 0,
              autoSkipPadding: 16,
              callback(value) {
                return String(this.getLabelForValue(value)).slice(5);
              },
            },
          },
          // A little room below 0 % and above 100 %, the grid at every quarter.
          y: {
            min: -0.05,
            max: 1.05,
            afterBuildTicks: (scale) => {
              scale.ticks = [0, 0.25, 0.5, 0.75, 1].map((value) => ({ value }));
            },
            ticks: { callback: (value) => Math.round(value * 100) + "%" },
            title: { display: true, text: "win rate" },
          },
        },
        plugins: Object.assign({}, common.plugins, {
          legend: { position: "bottom", labels: { usePointStyle: true, boxWidth: 8, boxHeight: 8 } },
          // Every machine with a point that day, the highest rate first.
          tooltip: {
            usePointStyle: true,
            itemSort: (a, b) => b.parsed.y - a.parsed.y || a.datasetIndex - b.datasetIndex,
            callbacks: {
              label: (item) => {
                const games = item.dataset.games && item.dataset.games[item.dataIndex];
                return item.dataset.label + ": " + percent(item.parsed.y) + (games ? " (" + games[0] + " of " + games[1] + " won)" : "");
              },
            },
          },
        }),
      }),
    });
  }

  // No window.Chart: /history/chart.js answered 503 (libjs-chart.js is not
  // installed where the recorder runs). Its message, in place of the charts.
  function chartsMissing() {
    const note = $("charts-missing");
    note.textContent = "The charts need Chart.js from Debian's libjs-chart.js on the recorder's host: install it and restart the recorder.";
    note.hidden = false;
    for (const panel of document.querySelectorAll(".chart-panel")) panel.hidden = true;
    fetch("/history/chart.js", { cache: "no-store" })
      .then((response) => (response.status === 503 ? response.json() : null))
      .then((body) => {
        if (body && typeof body.message === "string") note.textContent = body.message;
      })
      .catch(() => {});
  }

  // MARK: Start

  document.addEventListener("DOMContentLoaded", () => {
    if (typeof window.Chart === "function") makeCharts();
    else chartsMissing();
    readToken = ClawReadToken.start({
      server: "recorder",
      setting: "recorder.read_token",
      misdirected: "The recorder does not answer to this address (421)",
      onToken: () => load(),
    });
    load = readToken.poller({ interval: RELOAD_INTERVAL, timeout: REQUEST_TIMEOUT, request, setLive });
    $("site").addEventListener("change", () => {
      const chosen = filters();
      if (chosen.machine && !machinesOf(chosen.site).includes(chosen.machine)) $("machine").value = "";
      renderFilters();
      load();
    });
    $("machine").addEventListener("change", () => load());
    $("days").addEventListener("change", () => load());
    $("reload").addEventListener("click", () => load());
    load();
  });
})();
