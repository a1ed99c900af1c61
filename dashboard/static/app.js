// tickflow dashboard: one page, views by location hash, data from /api/*
// (each read and action made by the server as the logged-in user, through
// authz). Every value is put in the page as text, never as markup.
"use strict";

(() => {
  let info = null; // the session: user, operator, csrf, refresh_ms
  let shown = ""; // the route and data on screen, to skip identical redraws
  // One refresh at a time: the next is scheduled when the last is done, a
  // refresh asked for meanwhile runs right after it, and failures back off.
  let timer = 0; // the next scheduled refresh
  let busy = false; // a refresh is under way
  let again = false; // one was asked for while busy
  let failures = 0; // refreshes failed in a row
  const maxBackoffMS = 60000;

  const $ = (id) => document.getElementById(id);

  // el builds an element: attrs sets attributes (on* are listeners), kids
  // are nodes or text.
  function el(tag, attrs, ...kids) {
    const n = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k.startsWith("on")) n.addEventListener(k.slice(2), v);
      else n.setAttribute(k, v === true ? "" : String(v));
    }
    for (const k of kids.flat(Infinity)) {
      if (k === undefined || k === null) continue;
      n.append(k instanceof Node ? k : document.createTextNode(String(k)));
    }
    return n;
  }

  async function get(path) {
    const r = await fetch(path, { credentials: "same-origin" });
    return answer(r);
  }

  async function post(path, body) {
    const r = await fetch(path, {
      method: "POST",
      credentials: "same-origin",
      headers: { "Content-Type": "application/json", "X-Tickflow-Csrf": info.csrf },
      body: JSON.stringify(body),
    });
    return answer(r);
  }

  async function answer(r) {
    if (r.status === 401) {
      location.href = "/login";
      throw new Error("logged out");
    }
    const body = await r.json().catch(() => ({}));
    if (!r.ok) throw new Error(body.error || r.status + " " + r.statusText);
    return body;
  }

  function notice(text, isError) {
    const n = $("notice");
    n.textContent = text;
    n.className = isError ? "error" : "";
    n.hidden = !text;
  }

  const badge = (text, cls) => el("span", { class: "badge " + (cls || text) }, text);
  // waitingText says why no worker attempts a batch's next call, and since
  // when: "no worker serves `greet` since 12:03:01".
  const waitingText = (w) => (w ? w.reason + " since " + new Date(w.since).toLocaleTimeString() : "");
  const batchLink = (id) => el("a", { href: "#/batch/" + id, class: "batch-link" }, "#" + id);
  const time = (t) => (t && !t.startsWith("0001") ? new Date(t).toLocaleTimeString() : "");

  function age(ms) {
    const s = Math.max(0, Math.floor(ms / 1000));
    if (s < 60) return s + "s";
    if (s < 3600) return Math.floor(s / 60) + "m " + (s % 60) + "s";
    return Math.floor(s / 3600) + "h " + Math.floor((s % 3600) / 60) + "m";
  }

  // ageCell shows the time since iso, kept current between redraws.
  // inFlightCount is how many batches are in flight: the reply's total when
  // authz counted them all, else the items listed, with "+" when there are
  // more.
  const inFlightCount = (f) => (f.total !== undefined ? String(f.total) : f.items.length + (f.more ? "+" : ""));

  const ageCell = (iso) => el("td", { class: "num", "data-age-from": iso }, age(Date.now() - Date.parse(iso)));

  function tickAges() {
    for (const n of document.querySelectorAll("[data-age-from]")) {
      n.textContent = age(Date.now() - Date.parse(n.dataset.ageFrom));
    }
  }

  function table(head, rows, empty) {
    if (rows.length === 0) return el("p", { class: "muted" }, empty);
    return el("table", {}, el("thead", {}, el("tr", {}, head.map((h) => el("th", {}, h)))), el("tbody", {}, rows));
  }

  async function act(what, path, body) {
    try {
      const rep = await post(path, body);
      notice(what(rep), false);
    } catch (e) {
      notice(e.message, true);
    }
    shown = "";
    refresh();
  }

  // Views: each loads its data, then builds its content from it.

  const views = {
    async overview() {
      if (!info.operator) return views.mine();
      const doms = await get("/api/domains");
      const flights = await Promise.all(doms.domains.map((d) => get("/api/inflight?limit=20&domain=" + encodeURIComponent(d.domain))));
      return {
        data: [doms, flights],
        build: () => [
          el("h1", {}, "Domains"),
          domainsTable(doms.domains),
          ...flights.map((f) => [
            el("h2", {}, "In flight in ", el("a", { href: "#/inflight/" + f.domain }, f.domain), " ", el("span", { class: "muted", id: "count-" + f.domain }, "(" + inFlightCount(f) + ", oldest first)")),
            inflightTable(f),
          ]),
        ],
      };
    },

    async inflight(domain) {
      const f = await get("/api/inflight?limit=200&domain=" + encodeURIComponent(domain || ""));
      return { data: f, build: () => [el("h1", {}, "In flight in " + f.domain + " (" + inFlightCount(f) + ")"), inflightTable(f), f.more ? el("p", { class: "muted" }, "More are in flight: these are the oldest at the front of the queues.") : null] };
    },

    async batch(id) {
      const b = await get("/api/batch?id=" + encodeURIComponent(id || ""));
      return { data: b, build: () => batchView(b) };
    },

    async dlq() {
      const q = await get("/api/dlq?limit=200");
      return { data: q, build: () => [el("h1", {}, "Dead letters"), purgeBar(q.items), dlqTable(q.items)] };
    },

    async running() {
      const p = await get("/api/presence");
      return { data: p, build: () => runningView(p) };
    },

    async mine(params) {
      params = params || new URLSearchParams();
      const q = new URLSearchParams({ limit: "50" });
      for (const k of ["status", "before"]) if (params.get(k)) q.set(k, params.get(k));
      const page = await get("/api/list?" + q);
      return { data: page, build: () => mineView(page, params) };
    },
  };

  function domainsTable(domains) {
    const rows = domains.map((d) =>
      el("tr", { id: "domain-" + d.domain },
        el("td", {}, el("a", { href: "#/inflight/" + d.domain }, d.domain)),
        el("td", {}, d.paused ? badge("paused") : badge("active"), d.paused && d.by ? el("span", { class: "muted" }, " by " + d.by + " " + time(d.at)) : null),
        el("td", { class: "num depth-high" }, d.depth.high || 0),
        el("td", { class: "num depth-med" }, d.depth.med || 0),
        el("td", { class: "num" }, el("a", { href: "#/dlq" }, d.dead_letters)),
        throttleCell(d),
        el("td", {},
          d.paused
            ? el("button", { id: "resume-" + d.domain, onclick: () => act((r) => r.domain + " resumed", "/api/resume", { domain: d.domain }) }, "Resume")
            : el("button", { id: "pause-" + d.domain, class: "danger", onclick: () => act((r) => r.domain + " paused", "/api/pause", { domain: d.domain }) }, "Pause"))));
    return table(["domain", "state", "high queue", "med queue", "dead letters", "throttle", ""], rows, "No domains in the authorization table.");
  }

  // throttleCell shows a throttled domain's steps per second, shared by its
  // replicas, and the steps taken in the last second they drew from.
  function throttleCell(d) {
    const t = d.throttle;
    if (!t) return el("td", { id: "throttle-" + d.domain, class: "muted" }, "none");
    const at = new Date(t.second * 1000).toLocaleTimeString();
    return el("td", { id: "throttle-" + d.domain }, t.steps_per_second + " steps/s", el("span", { class: "muted" }, " (" + t.used + " taken in the second of " + at + ")"));
  }

  function inflightTable(f) {
    const rows = f.items.map((it) =>
      el("tr", { id: "inflight-" + it.id },
        el("td", {}, batchLink(it.id)),
        el("td", {}, it.label),
        el("td", {}, it.submitter),
        el("td", {}, it.priority + " #" + it.position),
        el("td", {}, badge(it.state)),
        el("td", { class: "num" }, it.next + "/" + it.functions),
        el("td", { class: "num" }, it.attempts),
        el("td", {}, it.holder || el("span", { class: "muted" }, "not picked up")),
        el("td", {}, it.state === "scheduled" ? ["runs at ", time(it.run_at)] : time(it.since)),
        ageCell(it.created_at),
        el("td", { class: "error" }, waitingText(it.waiting) || it.last_error || "")));
    return table(["batch", "label", "submitter", "queue", "state", "step", "executions", "moved by", "since", "age", "last error"], rows, "Nothing in flight.");
  }

  // runningView shows the processors and workers that keep a presence
  // record (refreshed while they run, gone 30s after one stops), and what
  // of the table nothing running serves.
  function runningView(p) {
    const rows = (list, what, prefix) => list.map((r, i) =>
      el("tr", { id: prefix + i },
        el("td", {}, r.name),
        el("td", {}, (what(r) || []).join(", ")),
        el("td", {}, new Date(r.since).toLocaleString()),
        ageCell(r.since),
        el("td", {}, time(r.at))));
    return [
      el("h1", {}, "Running"),
      p.unserved.length ? el("ul", { id: "unserved", class: "error" }, p.unserved.map((w) => el("li", {}, w))) : null,
      el("h2", {}, "Processors ", el("span", { class: "muted" }, "(" + p.processors.length + ")")),
      table(["name", "domains", "since", "up", "last seen"], rows(p.processors, (r) => r.domains, "processor-"), "No processor is running."),
      el("h2", {}, "Workers ", el("span", { class: "muted" }, "(" + p.workers.length + ")")),
      table(["name", "function types", "since", "up", "last seen"], rows(p.workers, (r) => r.types, "worker-"), "No worker is running."),
    ];
  }

  function dlqTable(items) {
    const rows = items.map((d) =>
      el("tr", { id: "dead-" + d.seq },
        el("td", { class: "num" }, d.seq),
        el("td", {}, batchLink(d.batch_id)),
        el("td", {}, d.domain),
        el("td", {}, badge(d.outcome.status)),
        el("td", { class: "error" }, d.error),
        el("td", { class: "num" }, d.attempts),
        el("td", {}, time(d.at)),
        el("td", {},
          d.replayed_as
            ? el("span", { class: "replayed" }, "replayed as ", batchLink(d.replayed_as))
            : el("button", { id: "replay-" + d.seq, onclick: () => act((r) => "dead letter " + d.seq + " replayed as batch #" + r.replayed[0].as, "/api/replay", { seq: d.seq }) }, "Replay"),
          " ",
          info.operator ? el("button", { id: "purge-" + d.seq, class: "danger operator", onclick: () => purge("dead letter " + d.seq + " of batch #" + d.batch_id, { seq: d.seq }) }, "Purge") : null)));
    return table(["seq", "batch", "domain", "outcome", "error", "executions", "at", ""], rows, "No dead letters.");
  }

  // purge removes dead letters once the owner confirms: they cannot be
  // replayed afterwards.
  function purge(what, body) {
    if (!window.confirm("Purge " + what + "? Purged dead letters cannot be replayed.")) return;
    act((r) => r.purged + " dead letter(s) purged", "/api/purge", body);
  }

  // purgeBar offers the owner to purge all of a domain's dead letters, for
  // each domain among those listed, or every one older than a duration,
  // each with a confirmation.
  function purgeBar(items) {
    if (!info.operator || !items.length) return null;
    const domains = [...new Set(items.map((d) => d.domain))].sort();
    return el("p", { class: "operator" },
      domains.map((dom) => [
        el("button", { id: "purge-all-" + dom, class: "danger", onclick: () => purge("every dead letter of " + dom, { domain: dom, all: true }) }, "Purge all of " + dom),
        " ",
      ]),
      el("button", { id: "purge-older", class: "danger", onclick: () => {
        const d = window.prompt("Purge the dead letters older than (a duration, e.g. 24h or 30m):", "24h");
        if (d) purge("the dead letters older than " + d, { older_than: d });
      } }, "Purge older than…"));
  }

  function batchView(b) {
    const r = b.record, bt = r.batch, p = b.progress;
    const mayCancel = r.status === "InProcess" && (info.operator || bt.submitter === info.user);
    const fields = [
      ["status", b.scheduled ? [badge(r.status), " ", badge("scheduled")] : badge(r.status)],
      ["run at", bt.run_at ? new Date(bt.run_at).toLocaleString() : ""], ["outcome", r.outcome ? r.outcome.status + (r.outcome.reason ? ": " + r.outcome.reason : "") : ""],
      ["label", bt.label], ["domain", bt.domain], ["priority", bt.priority], ["submitter", bt.submitter],
      ["key", bt.key || ""], ["executions", r.attempts], ["created", new Date(r.created_at).toLocaleString()],
      ["updated", new Date(r.updated_at).toLocaleString()],
      ["dead letter", r.dead_letter || ""], ["replay of", bt.replay_of ? batchLink(bt.replay_of) : ""],
      ["replayed as", r.replayed_as ? batchLink(r.replayed_as) : ""],
    ];
    const out = [
      el("h1", {}, "Batch #" + bt.id + " ", mayCancel ? el("button", { id: "cancel-" + bt.id, class: "danger", onclick: () => act(() => "batch " + bt.id + " cancelled", "/api/cancel", { id: bt.id }) }, "Cancel") : null),
      el("dl", {}, fields.map(([k, v]) => [el("dt", {}, k), el("dd", {}, v)])),
      el("h2", {}, "Functions"),
      table(["#", "type", "payload"], (bt.functions || []).map((f, i) => el("tr", {}, el("td", { class: "num" }, i), el("td", {}, f.type), el("td", {}, el("pre", {}, JSON.stringify(f.payload ?? null, null, 1))))), "No functions."),
      el("h2", {}, "History"),
      table(["at", "what", "detail"], (r.history || []).map((h) => el("tr", {}, el("td", {}, new Date(h.at).toLocaleString()), el("td", {}, h.what), el("td", {}, h.detail || ""))), "No history."),
    ];
    if (p) {
      out.push(el("h2", {}, "Progress"),
        el("dl", { id: "progress" },
          ["state", "next", "step", "last_error", "by", "updated_at"].map((k) => [el("dt", {}, k), el("dd", {}, p[k] ?? "")])
            .concat(p.waiting ? [[el("dt", {}, "waiting"), el("dd", { class: "error" }, waitingText(p.waiting))]] : [])));
    }
    // Every function's output: the record's once the batch finished, the
    // progress's while it runs.
    out.push(el("h2", {}, "Outputs"),
      table(["#", "type", "data"], (b.outputs || []).map((o, i) => el("tr", { id: "output-" + i }, el("td", { class: "num" }, o.index), el("td", {}, o.type),
        el("td", {}, el("pre", {}, JSON.stringify(o.data ?? null, null, 1) + (o.ref ? "\nref " + o.ref : ""))))), r.status === "InProcess" ? "No outputs yet." : "No outputs."));
    return out;
  }

  function mineView(page, params) {
    const status = params.get("status") || "";
    const select = el("select", { id: "status-filter", onchange: (e) => { location.hash = "#/mine" + (e.target.value ? "?status=" + e.target.value : ""); } },
      ["", "InProcess", "Executed", "Rejected", "PartiallyExecuted", "RemovedByOwner", "Expired"].map((s) => el("option", { value: s, selected: s === status }, s || "any status")));
    const rows = page.items.map((b) =>
      el("tr", { id: "mine-" + b.id },
        el("td", {}, batchLink(b.id)), el("td", {}, b.label), el("td", {}, b.domain), el("td", {}, b.priority),
        el("td", {}, b.scheduled ? [badge(b.status), " ", badge("scheduled"), " ", new Date(b.run_at).toLocaleString()] : badge(b.status)), el("td", {}, b.outcome || ""), el("td", { class: "num" }, b.attempts),
        el("td", {}, new Date(b.created_at).toLocaleString())));
    const older = page.next ? el("a", { href: "#/mine?" + new URLSearchParams({ status, before: String(page.next) }), id: "older" }, "Older →") : null;
    return [el("h1", {}, "My batches"), el("p", {}, select), table(["batch", "label", "domain", "priority", "status", "outcome", "executions", "created"], rows, "No batches."), older];
  }

  function route() {
    const h = location.hash.replace(/^#\/?/, "");
    const [path, query] = h.split("?");
    const [view, arg] = path.split("/");
    const params = new URLSearchParams(query || "");
    switch (view) {
      case "inflight": return () => views.inflight(arg);
      case "batch": return () => views.batch(arg);
      case "dlq": return () => views.dlq();
      case "running": return () => views.running();
      case "mine": return () => views.mine(params);
      default: return () => views.overview();
    }
  }

  // render loads the current view and shows it; false when it failed.
  async function render() {
    const key = location.hash;
    try {
      const v = await route()();
      if (key !== location.hash) return true; // moved on meanwhile: the next refresh shows the new view
      const data = key + JSON.stringify(v.data, (k, val) => (k === "age_ms" ? undefined : val));
      if (data !== shown) {
        $("main").replaceChildren(...[v.build()].flat(2).filter((n) => n));
        shown = data;
      }
      tickAges();
      $("updated").textContent = "updated " + new Date().toLocaleTimeString() + ", every " + info.refresh_ms / 1000 + "s";
      return true;
    } catch (e) {
      $("updated").textContent = "not updated: " + e.message;
      return false;
    }
  }

  // refresh renders now, or right after the refresh under way, then
  // schedules the next: refresh_ms later, doubled for each failure in a
  // row up to a minute.
  async function refresh() {
    clearTimeout(timer);
    if (busy) {
      again = true;
      return;
    }
    busy = true;
    const ok = await render();
    busy = false;
    failures = ok ? 0 : failures + 1;
    if (again) {
      again = false;
      refresh();
      return;
    }
    const wait = Math.min(info.refresh_ms * 2 ** failures, Math.max(maxBackoffMS, info.refresh_ms));
    if (!ok) $("updated").textContent += "; next try in " + wait / 1000 + "s";
    timer = setTimeout(refresh, wait);
  }

  async function start() {
    info = await get("/api/session");
    $("user").textContent = info.user;
    $("role").textContent = info.operator ? "(owner)" : "(read-only views of your own batches)";
    document.body.classList.toggle("is-operator", info.operator);
    $("logout").addEventListener("click", async () => {
      await post("/logout", {}).catch(() => {});
      location.href = "/login";
    });
    window.addEventListener("hashchange", () => { notice(""); shown = ""; refresh(); });
    refresh();
  }

  start().catch((e) => notice(e.message, true));
})();
