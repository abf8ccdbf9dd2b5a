// The parcels page of claw-gateway (SPEC §15): the parcels to ship, with
// their address and prizes, from GET /v1/parcels (admin token), a form per
// parcel for its carrier and tracking number (POST /v1/parcels/<id>/shipped)
// and a button for those on their way (POST /v1/parcels/<id>/delivered).
// Served by a site's gateway, and in a chain by the recorder, which ships
// centrally. The admin token is kept in the tab, as the dashboard keeps it.
//
// Every string that comes from a player (name, phone, address) is put into
// the page with textContent, never as HTML.
"use strict";

(function () {
  const TOKEN_KEY = "claw-admin-token";
  const POLL_MS = 10000;
  // The page helpers come with the shared read-token.js; the parcels' routes
  // take the admin token alone, which the read routes also take.
  const { $, el, pill } = ClawPage;

  function adminToken() {
    return sessionStorage.getItem(TOKEN_KEY) || "";
  }

  function status(text, kind) {
    const node = $("admin-status");
    node.textContent = text;
    node.className = kind;
  }

  function call(path, init) {
    const headers = Object.assign({ Authorization: "Bearer " + adminToken() }, init && init.headers);
    return fetch(path, Object.assign({ cache: "no-store" }, init, { headers }))
      .then((response) => response.json().catch(() => ({})).then((body) => ({ response, body })));
  }

  function load() {
    if (!adminToken()) {
      pill($("link"), "Admin token needed", "bad");
      return Promise.resolve();
    }
    return Promise.all([call("/v1/parcels?state=to_ship"), call("/v1/parcels?state=shipped")])
      .then(([toShip, shipped]) => {
        if (toShip.response.status === 401) {
          pill($("link"), "Admin token refused", "bad");
          status("The admin token was refused (401).", "error");
          return;
        }
        if (!toShip.response.ok || !shipped.response.ok) {
          pill($("link"), "Not read: " + (toShip.body.message || toShip.response.status), "bad");
          return;
        }
        pill($("link"), "Live", "good");
        render($("to-ship"), $("to-ship-count"), toShip.body.parcels || [], true);
        render($("shipped"), $("shipped-count"), shipped.body.parcels || [], false);
      })
      .catch(() => pill($("link"), "Disconnected, retrying…", "bad"));
  }

  function render(list, count, parcels, toShip) {
    count.textContent = "(" + parcels.length + ")";
    if (parcels.length === 0) {
      list.replaceChildren(el("li", "empty", toShip ? "Nothing to ship." : "Nothing on its way."));
      return;
    }
    list.replaceChildren(...parcels.map((parcel) => item(parcel, toShip)));
  }

  function item(parcel, toShip) {
    const node = el("li", "parcel");
    node.dataset.parcel = parcel.id;
    const head = el("div", "parcel-head");
    head.append(el("strong", "parcel-id", parcel.id), el("span", "meta", parcel.provider + "/" + parcel.account + " · " + parcel.created_at));
    node.append(head);
    if (parcel.address) {
      const address = el("p", "parcel-address");
      address.append(el("strong", null, parcel.address.name), " · ", el("span", "phone", parcel.address.phone), "\n", parcel.address.address);
      node.append(address);
    } else {
      node.append(el("p", "parcel-address meta", "Address forgotten."));
    }
    node.append(el("p", "parcel-prizes", "Prizes: " + parcel.prizes.join(", ")));
    if (toShip) {
      const form = el("form", "ship");
      const carrier = el("input", "carrier");
      carrier.placeholder = "carrier";
      carrier.required = true;
      carrier.maxLength = 64;
      const tracking = el("input", "tracking");
      tracking.placeholder = "tracking number";
      tracking.required = true;
      tracking.maxLength = 64;
      const button = el("button", null, "Shipped");
      button.type = "submit";
      form.append(carrier, tracking, button);
      form.addEventListener("submit", (event) => {
        event.preventDefault();
        act(button, "/v1/parcels/" + encodeURIComponent(parcel.id) + "/shipped",
          { carrier: carrier.value.trim(), tracking: tracking.value.trim() }, "shipped " + parcel.id);
      });
      node.append(form);
    } else {
      node.append(el("p", "meta", "Shipped with " + (parcel.carrier || "?") + ", tracking " + (parcel.tracking || "?")));
      const button = el("button", "delivered", "Delivered");
      button.type = "button";
      button.addEventListener("click", () => act(button, "/v1/parcels/" + encodeURIComponent(parcel.id) + "/delivered", null, "delivered " + parcel.id));
      node.append(button);
    }
    return node;
  }

  function act(button, path, body, what) {
    button.disabled = true;
    const init = { method: "POST" };
    if (body) {
      init.headers = { "Content-Type": "application/json" };
      init.body = JSON.stringify(body);
    }
    call(path, init)
      .then(({ response, body: answer }) => {
        if (response.ok) status("Done: " + what, "ok");
        else status(what + " failed: " + (answer.message || response.status), "error");
      })
      .catch(() => status("The server did not answer.", "error"))
      .finally(() => {
        button.disabled = false;
        load();
      });
  }

  document.addEventListener("DOMContentLoaded", () => {
    const input = $("admin-token");
    input.value = adminToken();
    input.addEventListener("input", () => {
      const token = input.value.trim();
      if (token) sessionStorage.setItem(TOKEN_KEY, token);
      else sessionStorage.removeItem(TOKEN_KEY);
      load();
    });
    $("admin").addEventListener("submit", (event) => event.preventDefault());
    $("admin-forget").addEventListener("click", () => {
      sessionStorage.removeItem(TOKEN_KEY);
      input.value = "";
      status("Token forgotten.", "meta");
      load();
    });
    load();
    setInterval(load, POLL_MS);
  });
})();
