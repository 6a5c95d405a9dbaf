// The Ankusa console: a page per concern, each drawn from the admin API
// (the OpenAPI document at /openapi.json is its contract), so everything
// done here can be done with curl.
//
// Hook data is untrusted input: every value reaches the page through
// `textContent` (see `el`), never as markup, and the server's
// Content-Security-Policy allows no inline script besides.

const TOKEN_KEY = "ankusa.admin-token";
const POLL_MS = 2000;
const HISTORY = 60;
const CLASSES = ["transient", "permanent", "timeout", "fault", "denied", "gone", "retry_after"];

// ---------------------------------------------------------------- DOM

/** An element with attributes, handlers (`on*` functions) and children;
 *  strings become text nodes, never markup. */
function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith("on") && typeof value === "function") node.addEventListener(key.slice(2), value);
    else if (key === "class") node.className = value;
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  append(node, children);
  return node;
}

function append(node, children) {
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

const $ = (selector) => document.querySelector(selector);

function replace(node, ...children) {
  node.replaceChildren();
  append(node, children);
}

function toast(message, isError = false) {
  const box = $("#toast");
  box.textContent = message;
  box.className = isError ? "error" : "";
  box.hidden = false;
  clearTimeout(toast.timer);
  toast.timer = setTimeout(() => (box.hidden = true), isError ? 8000 : 3500);
}

const pill = (text, kind = text) => el("span", { class: `pill ${kind || ""}` }, text ?? "–");

function when(ms) {
  if (!ms) return "–";
  return new Date(Number(ms)).toLocaleString();
}

function ago(ms) {
  if (!ms) return "";
  const s = Math.max(0, Math.round((Date.now() - Number(ms)) / 1000));
  if (s < 90) return `${s}s ago`;
  if (s < 5400) return `${Math.round(s / 60)}m ago`;
  if (s < 129600) return `${Math.round(s / 3600)}h ago`;
  return `${Math.round(s / 86400)}d ago`;
}

function count(n) {
  if (n === undefined || n === null || Number.isNaN(n)) return "–";
  return Number(n).toLocaleString(undefined, { maximumFractionDigits: 1 });
}

function bytes(n) {
  if (n < 1024) return `${n} B`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KiB`;
  return `${(n / 1024 / 1024).toFixed(1)} MiB`;
}

function sparkline(values) {
  const svgNs = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(svgNs, "svg");
  svg.setAttribute("viewBox", `0 0 ${HISTORY} 30`);
  svg.setAttribute("preserveAspectRatio", "none");
  svg.setAttribute("aria-hidden", "true");
  if (values.length > 1) {
    const max = Math.max(1, ...values);
    const line = document.createElementNS(svgNs, "polyline");
    const offset = HISTORY - values.length;
    line.setAttribute("points", values.map((v, i) => `${offset + i},${(29 - (v / max) * 27).toFixed(1)}`).join(" "));
    line.setAttribute("vector-effect", "non-scaling-stroke");
    svg.append(line);
  }
  return svg;
}

function table(headers, rows, empty = "Nothing here.") {
  const head = el("tr", {}, headers.map((h) => el("th", { class: h.num ? "num" : "" }, h.label ?? h)));
  const body = el("tbody");
  if (!rows.length) body.append(el("tr", {}, el("td", { class: "empty", colspan: headers.length }, empty)));
  for (const row of rows) body.append(row);
  return el("div", { class: "table-wrap" }, el("table", {}, el("thead", {}, head), body));
}

// ---------------------------------------------------------------- API

class ApiError extends Error {
  constructor(status, body) {
    super(body?.message || `HTTP ${status}`);
    this.status = status;
    this.body = body;
  }
}

const token = {
  get: () => sessionStorage.getItem(TOKEN_KEY) || "",
  set: (value) => sessionStorage.setItem(TOKEN_KEY, value),
  clear: () => sessionStorage.removeItem(TOKEN_KEY),
};

/** One admin API call; JSON in and out (text for /metrics). A 401 sends
 *  the user to the sign-in form. */
async function api(method, path, body) {
  const headers = { accept: "application/json" };
  if (token.get()) headers.authorization = `Bearer ${token.get()}`;
  if (body !== undefined) headers["content-type"] = "application/json";
  let response;
  try {
    response = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body), cache: "no-store" });
  } catch (e) {
    throw new ApiError(0, { message: `the node does not answer (${e.message})` });
  }
  const text = await response.text();
  let parsed = text;
  if ((response.headers.get("content-type") || "").includes("json")) {
    try { parsed = JSON.parse(text); } catch { parsed = text; }
  }
  if (response.status === 401) {
    showLogin(token.get() ? "The token was refused." : "");
    throw new ApiError(401, parsed);
  }
  if (!response.ok) throw new ApiError(response.status, typeof parsed === "object" ? parsed : { message: text });
  return parsed;
}

function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null && v !== "") q.set(k, v);
  const s = q.toString();
  return s ? `?${s}` : "";
}

/** Prometheus text exposition: [{name, labels, value}]. */
function parseMetrics(text) {
  const samples = [];
  for (const line of text.split("\n")) {
    if (!line || line.startsWith("#")) continue;
    const m = /^([a-zA-Z_:][\w:]*)(\{(.*)\})?\s+(\S+)/.exec(line);
    if (!m) continue;
    const labels = {};
    const re = /(\w+)="((?:[^"\\]|\\.)*)"/g;
    let l;
    while ((l = re.exec(m[3] || ""))) labels[l[1]] = l[2].replace(/\\(.)/g, (_, c) => (c === "n" ? "\n" : c));
    samples.push({ name: m[1], labels, value: Number(m[4]) });
  }
  return samples;
}

const sum = (samples, name, match = () => true) =>
  samples.filter((s) => s.name === name && match(s.labels)).reduce((a, s) => a + s.value, 0);

// ---------------------------------------------------------------- shell

let current = null; // the page's stop function

function showLogin(message) {
  stopPage();
  $("#login").hidden = false;
  $("#page").replaceChildren();
  const error = $("#login-error");
  error.textContent = message || "";
  error.hidden = !message;
  $("#sign-out").hidden = true;
  $("#token").focus();
}

function stopPage() {
  if (current) current();
  current = null;
}

function route() {
  stopPage();
  $("#login").hidden = true;
  $("#sign-out").hidden = !token.get();
  const name = (location.hash.replace(/^#\/?/, "").split("/")[0] || "overview").split("?")[0];
  const page = PAGES[name] || PAGES.overview;
  for (const a of document.querySelectorAll("#nav a")) a.classList.toggle("active", a.dataset.page === name);
  const root = el("div");
  $("#page").replaceChildren(root);
  const stops = [];
  current = () => stops.forEach((f) => f());
  page(root, (f) => stops.push(f)).catch(fail(root));
}

/** Show an API failure in `root` (a 401 has already shown the sign-in). */
function fail(root) {
  return (e) => {
    if (e instanceof ApiError && e.status === 401) return;
    root.prepend(el("div", { class: "banner-error", role: "alert" }, `Error: ${e.message}`));
  };
}

/** Run `f` now and every `ms` until the page is left. */
function every(ms, onStop, f) {
  let timer = null;
  let stopped = false;
  const tick = async () => {
    try { await f(); } catch (e) { if (!(e instanceof ApiError && e.status === 401)) toast(e.message, true); else stopped = true; }
    if (!stopped) timer = setTimeout(tick, ms);
  };
  onStop(() => { stopped = true; clearTimeout(timer); });
  return tick();
}

// ---------------------------------------------------------------- overview

async function overview(root, onStop) {
  root.append(el("h1", {}, "Overview"));
  const stats = el("div", { class: "grid" });
  const sinks = el("div", { class: "card" });
  root.append(stats, sinks);
  const history = { accepted: [], delivered: [] };
  let last = null;
  await every(POLL_MS, onStop, async () => {
    const [text, loaded] = await Promise.all([api("GET", "/metrics"), api("GET", "/v1/sinks")]);
    const m = parseMetrics(text);
    const now = Date.now();
    const totals = {
      accepted: sum(m, "ankusa_ingest_requests_total", (l) => l.outcome === "accepted"),
      duplicate: sum(m, "ankusa_ingest_requests_total", (l) => l.outcome === "duplicate"),
      rejected: sum(m, "ankusa_ingest_requests_total", (l) => !["accepted", "duplicate"].includes(l.outcome)),
      delivered: sum(m, "ankusa_deliveries_total", (l) => l.class === "ok"),
      failed: sum(m, "ankusa_deliveries_total", (l) => l.class !== "ok"),
      filtered: sum(m, "ankusa_filtered_total"),
    };
    if (last) {
      const seconds = Math.max(0.001, (now - last.at) / 1000);
      for (const key of ["accepted", "delivered"]) {
        history[key].push(Math.max(0, (totals[key] - last[key]) / seconds));
        if (history[key].length > HISTORY) history[key].shift();
      }
    }
    last = { at: now, ...totals };
    const rows = (state) => sum(m, "ankusa_queue_rows", (l) => l.state === state);
    const rate = (key) => (history[key].length ? history[key][history[key].length - 1] : 0);
    const stat = (label, value, extra = {}) =>
      el("div", { class: `stat ${extra.kind || ""}`, "data-stat": extra.id || label },
        el("div", { class: "label" }, label), el("div", { class: "value" }, value), extra.chart);
    const open = loaded.filter((s) => s.breaker !== "closed").length;
    const oldest = sum(m, "ankusa_queue_oldest_due_age_seconds");
    replace(stats,
      stat("Ingest /s", count(rate("accepted")), { id: "ingest-rate", chart: sparkline(history.accepted) }),
      stat("Delivered /s", count(rate("delivered")), { id: "delivered-rate", chart: sparkline(history.delivered) }),
      stat("Accepted", count(totals.accepted), { id: "accepted" }),
      stat("Duplicates", count(totals.duplicate), { id: "duplicates" }),
      stat("Rejected", count(totals.rejected), { id: "rejected", kind: totals.rejected ? "warn" : "" }),
      stat("Pending", count(rows("pending")), { id: "pending" }),
      stat("Scheduled", count(rows("scheduled")), { id: "scheduled" }),
      stat("Inflight", count(rows("inflight")), { id: "inflight" }),
      stat("Dead", count(rows("dead")), { id: "dead", kind: rows("dead") ? "bad" : "" }),
      stat("Filtered", count(totals.filtered), { id: "filtered" }),
      stat("Oldest due", `${count(oldest)} s`, { id: "oldest-due", kind: oldest > 60 ? "warn" : "" }),
      stat("Breakers open", count(open), { id: "breakers-open", kind: open ? "bad" : "" }),
    );
    const bySink = new Map();
    for (const s of m.filter((s) => s.name === "ankusa_deliveries_total")) {
      const key = `${s.labels.source}\u0000${s.labels.sink}`;
      const entry = bySink.get(key) || { source: s.labels.source, sink: s.labels.sink, classes: {} };
      entry.classes[s.labels.class] = (entry.classes[s.labels.class] || 0) + s.value;
      bySink.set(key, entry);
    }
    for (const s of loaded) {
      const key = `${s.source}\u0000${s.name}`;
      if (!bySink.has(key)) bySink.set(key, { source: s.source, sink: s.name, classes: {} });
      bySink.get(key).breaker = s.breaker;
      bySink.get(key).filtered = s.filtered;
    }
    const heads = ["Source", "Sink", "Breaker", { label: "Delivered", num: true }, { label: "Filtered", num: true }, ...CLASSES.map((c) => ({ label: c, num: true }))];
    const lines = [...bySink.values()].map((e) =>
      el("tr", { "data-sink": e.sink },
        el("td", {}, e.source), el("td", {}, e.sink), el("td", {}, pill(e.breaker || "closed")),
        el("td", { class: "num" }, count(e.classes.ok || 0)),
        el("td", { class: "num", "data-filtered": e.filtered || 0 }, e.filtered ? count(e.filtered) : ""),
        CLASSES.map((c) => el("td", { class: "num" }, e.classes[c] ? count(e.classes[c]) : "")),
      ));
    replace(sinks, el("h2", {}, "Deliveries by sink and outcome"), table(heads, lines, "No deliveries yet."));
  });
}

// ---------------------------------------------------------------- sources & sinks

async function sources(root) {
  root.append(el("h1", {}, "Sources & sinks"));
  const [all, loaded] = await Promise.all([api("GET", "/v1/sources"), api("GET", "/v1/sinks")]);
  const srcRows = all.map((s) =>
    el("tr", {},
      el("td", {}, el("strong", {}, s.name)), el("td", {}, s.tenant), el("td", {}, s.origin),
      el("td", { class: "mono" }, s.url),
      el("td", {}, s.verify || el("span", { class: "muted" }, "none"), " ", s.verify ? pill(`on failure: ${s.on_verify_failure}`, "") : ""),
      el("td", {}, s.dedupe || el("span", { class: "muted" }, "none")),
      el("td", {}, s.sinks.map((k) => pill(k.name, "")).reduce((acc, p) => (acc.length ? [...acc, " ", p] : [p]), [])),
    ));
  root.append(el("section", { class: "card" }, el("h2", {}, "Sources"),
    table(["Source", "Tenant", "Origin", "URL", "Verification", "Dedupe", "Sinks"], srcRows, "No sources.")));

  const reload = el("button", {
    type: "button", class: "secondary",
    onclick: async () => {
      reload.disabled = true;
      try {
        const report = await api("POST", "/v1/sinks/reload", {});
        toast(`Reloaded: ${JSON.stringify(report)}`);
        route();
      } catch (e) { if (e.status !== 401) toast(`Reload failed: ${e.message}`, true); } finally { reload.disabled = false; }
    },
  }, "Reload components");
  const sinkRows = loaded.map((s) =>
    el("tr", {},
      el("td", {}, el("strong", {}, s.name)), el("td", {}, s.source), el("td", { class: "mono" }, s.component),
      el("td", { class: "mono", title: s.sha256 }, s.sha256.slice(0, 12)),
      el("td", {}, s.durable ? pill("durable", "ok") : pill("not durable", "")),
      el("td", {}, pill(s.breaker)),
      el("td", { class: "num" }, count(s.instances.live)), el("td", { class: "num" }, count(s.instances.idle)),
      el("td", { class: "num" }, count(s.instances.traps)), el("td", { class: "num" }, count(s.instances.timeouts)),
      el("td", { class: "num" }, count(s.instances.memory_faults)),
      el("td", { class: "num" }, bytes(s.memory_bytes)),
    ));
  root.append(el("section", { class: "card" },
    el("div", { class: "actions" }, el("h2", { class: "flush" }, "Sinks"), el("span", { class: "spacer" }), reload),
    table(["Sink", "Source", "Component", "sha256", "Durability", "Breaker", { label: "Live", num: true },
      { label: "Idle", num: true }, { label: "Traps", num: true }, { label: "Timeouts", num: true },
      { label: "Memory faults", num: true }, { label: "Memory", num: true }], sinkRows, "No sinks.")));
}

// ---------------------------------------------------------------- dead letters

function hashParams() {
  const q = location.hash.split("?")[1] || "";
  return Object.fromEntries(new URLSearchParams(q));
}

async function dlq(root, onStop) {
  root.append(el("h1", {}, "Dead letters"));
  const params = hashParams();
  const [all] = await Promise.all([api("GET", "/v1/sources")]);
  const sinkNames = [...new Set(all.flatMap((s) => s.sinks.map((k) => k.name)))].sort();
  const select = (name, options, value) =>
    el("select", { name }, el("option", { value: "" }, "any"), options.map((o) => el("option", { value: o, selected: o === value }, o)));
  const form = el("form", { class: "filters", id: "dlq-filters" },
    el("label", {}, "Source", select("source", all.map((s) => s.name), params.source)),
    el("label", {}, "Sink", select("sink", sinkNames, params.sink)),
    el("label", {}, "Error class", select("error_class", CLASSES, params.error_class)),
    el("label", {}, "Tenant", el("input", { name: "tenant", value: params.tenant || "", placeholder: "any", size: 10 })),
    el("label", {}, "Dead since", el("input", { name: "since", type: "datetime-local", value: params.since ? localInput(params.since) : "" })),
    el("label", {}, "Per page", el("input", { name: "limit", type: "number", min: 1, max: 1000, value: params.limit || 50, class: "w-s" })),
    el("button", { type: "submit" }, "Apply"),
  );
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const data = Object.fromEntries(new FormData(form));
    if (data.since) data.since = String(new Date(data.since).getTime());
    location.hash = `#/dlq${query(data)}`;
  });
  const list = el("div", { class: "card", id: "dlq-list" });
  const detail = el("div", { class: "card", id: "hook-detail" }, el("p", { class: "muted" }, "Select a dead letter to see its hook."));
  const jobs = el("div", { id: "replay-jobs" });
  const held = el("div", { class: "card", id: "held-keys" });
  root.append(el("section", { class: "card" }, form), el("div", { class: "split" }, list, detail), held, jobs);

  const filter = {
    source: params.source, sink: params.sink, error_class: params.error_class,
    tenant: params.tenant, since: params.since,
  };
  const cursors = [undefined];
  const selected = new Map();
  const draw = async () => {
    const cursor = cursors[cursors.length - 1];
    const page = await api("GET", `/v1/dlq${query({ ...filter, limit: params.limit, cursor })}`);
    const rows = page.entries.map((e) => {
      const key = `${e.seq}/${e.sink_index}`;
      const box = el("input", {
        type: "checkbox", "aria-label": `select ${e.id}`, checked: selected.has(key),
        onclick: (event) => event.stopPropagation(),
        onchange: (event) => { if (event.target.checked) selected.set(key, e); else selected.delete(key); updateSelection(); },
      });
      const tr = el("tr", { class: "clickable", "data-seq": e.seq, "data-id": e.id },
        el("td", {}, box),
        el("td", { class: "mono" }, e.id || `#${e.seq}`),
        el("td", {}, e.source), el("td", {}, e.sink ?? `#${e.sink_index}`), el("td", {}, pill(e.error_class || "unknown")),
        el("td", { class: "num" }, e.attempts), el("td", { title: when(e.dead_at) }, ago(e.dead_at)),
        el("td", {}, e.reason),
      );
      tr.addEventListener("click", () => {
        for (const r of list.querySelectorAll("tr.selected")) r.classList.remove("selected");
        tr.classList.add("selected");
        showHook(detail, e.seq, e.sink_index).catch(fail(detail));
      });
      return tr;
    });
    const total = page.total === null || page.total === undefined ? "" : `${count(page.total)} in all`;
    const prev = el("button", { type: "button", class: "secondary", id: "dlq-prev", disabled: cursors.length < 2,
      onclick: () => { cursors.pop(); draw().catch(fail(list)); } }, "← Newer");
    const next = el("button", { type: "button", class: "secondary", id: "dlq-next", disabled: !page.next_cursor,
      onclick: () => { cursors.push(page.next_cursor); draw().catch(fail(list)); } }, "Older →");
    replace(list,
      el("div", { class: "actions" }, el("h2", { class: "flush" }, "Dead rows"), el("span", { class: "muted", id: "dlq-total" }, total),
        el("span", { class: "spacer" }), el("span", { class: "muted", id: "dlq-page" }, `page ${cursors.length}`), prev, next),
      table(["", "Hook", "Source", "Sink", "Class", { label: "Attempts", num: true }, "Dead", "Reason"], rows, "No dead letters match."),
      selectionBar,
    );
  };
  const selectionCount = el("span", { class: "muted" });
  const replaySelected = el("button", { type: "button", id: "replay-selected", disabled: true,
    onclick: () => startReplay({ kind: "dlq", rows: [...selected.values()].map((e) => ({ seq: e.seq, sink_index: e.sink_index })) }) },
  "Replay selected");
  const replayFilter = el("button", { type: "button", class: "secondary", id: "replay-filter",
    onclick: () => startReplay({
      kind: "dlq", source: filter.source || undefined, sink: filter.sink || undefined,
      error_class: filter.error_class || undefined, tenants: filter.tenant ? filter.tenant.split(",") : undefined,
      since: filter.since ? Number(filter.since) : undefined,
    }) }, "Replay everything matching the filter");
  const selectionBar = el("div", { class: "actions" }, replaySelected, selectionCount, el("span", { class: "spacer" }), replayFilter);
  const updateSelection = () => {
    replaySelected.disabled = selected.size === 0;
    selectionCount.textContent = selected.size ? `${selected.size} selected` : "";
  };
  const startReplay = async (body) => {
    try {
      const job = await api("POST", "/v1/replays", body);
      toast(`Replay ${job.id} started`);
      selected.clear();
      updateSelection();
    } catch (e) { if (e.status !== 401) toast(`Replay refused: ${e.message}`, true); }
  };
  await draw();
  await drawHeld(held, draw);
  await replayJobs(jobs, onStop, async () => { cursors.splice(1); await draw(); await drawHeld(held, draw); });
}

/** Ordering keys a dead hook holds (`on_dead: hold`): replay the hook from
 * the list above, or release the key here. */
async function drawHeld(box, redrawDead) {
  const page = await api("GET", `/v1/ordering/held${query({ tenant: hashParams().tenant })}`);
  const release = (k) => el("button", { type: "button", class: "secondary", "data-release-key": k.key,
    onclick: async () => {
      if (!confirm(`Release key ${k.key} of ${k.source} → ${k.sink}? Its dead hook stays in the DLQ; the hooks behind it are delivered.`)) return;
      try {
        await api("POST", "/v1/ordering/release", { tenant: k.tenant, source: k.source, sink: k.sink, key: k.key });
        toast(`Released ${k.key}`);
        await drawHeld(box, redrawDead);
        await redrawDead();
      } catch (e) { if (e.status !== 401) toast(`Release refused: ${e.message}`, true); }
    } }, "Release");
  const rows = page.entries.map((k) =>
    el("tr", { "data-key": k.key },
      el("td", {}, k.source), el("td", {}, k.sink ?? `#${k.sink_index}`), el("td", { class: "mono" }, k.key),
      el("td", { class: "mono" }, el("a", { href: `#/hooks/${k.seq}` }, k.hook_id || `#${k.seq}`)),
      el("td", {}, k.sink && release(k))));
  replace(box, el("h2", {}, "Held ordering keys"),
    table(["Source", "Sink", "Key", "Held by", ""], rows, "No ordering key is held."),
    el("p", { class: "muted" }, "A key of a binding with on_dead: hold stops at its dead hook. Replay that hook to deliver it first, or release the key to go on without it."));
}

function localInput(ms) {
  const d = new Date(Number(ms));
  const pad = (n) => String(n).padStart(2, "0");
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}T${pad(d.getHours())}:${pad(d.getMinutes())}`;
}

/** A hook's detail: what it was, and each of its deliveries. */
async function showHook(box, seq, sinkIndex) {
  replace(box, el("p", { class: "muted" }, "Loading…"));
  const hook = await api("GET", `/v1/hooks/${seq}`);
  const row = hook.deliveries.find((d) => d.sink_index === sinkIndex) || hook.deliveries[0];
  let body = hook.body ?? "";
  let label = hook.body_encoding === "base64" ? "Body (base64: not UTF-8)" : "Body";
  if (hook.body_encoding === "utf8" && (/json/i.test(hook.content_type || "") || /^\s*[{[]/.test(body))) {
    try { body = JSON.stringify(JSON.parse(body), null, 2); label = "Body (JSON)"; } catch { /* shown as sent */ }
  }
  replace(box,
    el("h2", {}, "Hook ", el("span", { class: "mono" }, hook.id)),
    el("dl", { class: "facts" },
      el("dt", {}, "Source"), el("dd", { id: "hook-source" }, hook.source),
      el("dt", {}, "Tenant"), el("dd", {}, hook.tenant),
      el("dt", {}, "Received"), el("dd", {}, when(hook.received_at)),
      el("dt", {}, "Size"), el("dd", {}, bytes(hook.size)),
      el("dt", {}, "sha256"), el("dd", { class: "mono" }, hook.sha256),
      el("dt", {}, "Verification"), el("dd", {}, hook.verification),
      row && [
        el("dt", {}, "Sink"), el("dd", {}, row.sink ?? `#${row.sink_index}`),
        el("dt", {}, "State"), el("dd", {}, pill(row.state, row.state === "dead" ? "failed" : row.state)),
        el("dt", {}, "Error class"), el("dd", {}, pill(row.error_class || "–")),
        el("dt", {}, "Attempts"), el("dd", {}, row.attempts),
        row.due_at != null && [el("dt", {}, "Next attempt"), el("dd", {}, when(row.due_at))],
        row.failed_at != null
          ? [el("dt", {}, "Last failure"), el("dd", { id: "hook-reason" }, `${when(row.failed_at)}: ${row.reason}`)]
          : [el("dt", {}, "Reason"), el("dd", { id: "hook-reason" }, row.reason || "–")],
      ],
    ),
    el("h3", {}, "Headers"),
    table(["Name", "Value"], hook.headers.map(([name, value]) => el("tr", {}, el("td", { class: "mono" }, name), el("td", { class: "mono" }, value)))),
    el("h3", {}, label),
    el("pre", { class: "body", id: "hook-body" }, body),
    hook.deliveries.length > 1 && [el("h3", {}, "Every sink"),
      table(["Sink", "State", "Class", { label: "Attempts", num: true }],
        hook.deliveries.map((d) => el("tr", {}, el("td", {}, d.sink ?? `#${d.sink_index}`), el("td", {}, pill(d.state)), el("td", {}, d.error_class || ""), el("td", { class: "num" }, d.attempts))))],
  );
}

/** The replay jobs, newest first, polled while any runs. */
async function replayJobs(box, onStop, onFinished) {
  let known = null; // each job's state at the previous poll
  const active = (state) => state === "running" || state === "paused";
  await every(POLL_MS, onStop, async () => {
    const jobs = (await api("GET", "/v1/replays")).slice().reverse().slice(0, 10);
    // A job that ended since the last poll (or started and ended between
    // two) has moved rows: the caller redraws.
    const finished = known !== null && jobs.some((j) => !active(j.state) && known.get(j.id) !== j.state);
    known = new Map(jobs.map((j) => [j.id, j.state]));
    const control = (job, state, label) =>
      el("button", { type: "button", class: "secondary", "data-action": state,
        onclick: async () => { try { await api("PATCH", `/v1/replays/${encodeURIComponent(job.id)}`, { state }); } catch (e) { if (e.status !== 401) toast(e.message, true); } } }, label);
    const rows = jobs.map((j) =>
      el("tr", { "data-job": j.id, "data-state": j.state },
        el("td", { class: "mono" }, j.id), el("td", {}, j.kind), el("td", {}, pill(j.state)),
        el("td", { class: "num" }, count(j.moved)), el("td", {}, j.reason || ""),
        el("td", {}, el("div", { class: "actions flush" },
          j.state === "running" && control(j, "paused", "Pause"),
          j.state === "paused" && control(j, "running", "Resume"),
          (j.state === "running" || j.state === "paused") && control(j, "cancelled", "Cancel"))),
      ));
    replace(box, el("section", { class: "card" }, el("h2", {}, "Replay jobs"),
      table(["Job", "Kind", "State", { label: "Moved", num: true }, "Note", ""], rows, "No replay jobs yet.")));
    if (finished && onFinished) await onFinished();
  });
}

// ---------------------------------------------------------------- quarantine

async function quarantine(root, onStop) {
  root.append(el("h1", {}, "Quarantine"));
  const params = hashParams();
  const form = el("form", { class: "filters" },
    el("label", {}, "Tenant", el("input", { name: "tenant", value: params.tenant || "", placeholder: "any", size: 10 })),
    el("label", {}, "Source", el("input", { name: "source", value: params.source || "", placeholder: "any (needs tenant)", size: 14 })),
    el("button", { type: "submit" }, "Apply"));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    location.hash = `#/quarantine${query(Object.fromEntries(new FormData(form)))}`;
  });
  const list = el("div", { class: "card", id: "pen" });
  const jobs = el("div");
  root.append(el("section", { class: "card" }, form), list, jobs);
  const cursors = [undefined];
  const draw = async () => {
    const page = await api("GET", `/v1/quarantine${query({ tenant: params.tenant, source: params.source, cursor: cursors[cursors.length - 1] })}`);
    const bySource = new Map();
    for (const h of page.entries) bySource.set(`${h.tenant}\u0000${h.source}`, h);
    const release = (h) => el("button", { type: "button", "data-release": h.source,
      onclick: async () => {
        try {
          const job = await api("POST", "/v1/replays", { kind: "quarantine", source: h.source, tenant: h.tenant });
          toast(`Releasing ${h.source}: job ${job.id}`);
        } catch (e) { if (e.status !== 401) toast(`Release refused: ${e.message}`, true); }
      } }, `Release ${h.source}`);
    const drop = (h) => el("button", { type: "button", class: "danger", "data-drop": h.source,
      onclick: async () => {
        if (!confirm(`Drop every held hook of source ${h.source} (tenant ${h.tenant})? They are deleted.`)) return;
        try {
          const purged = await api("DELETE", `/v1/quarantine${query({ tenant: h.tenant, source: h.source })}`);
          toast(`Dropped ${purged.purged} held hooks`);
          cursors.splice(1);
          await draw();
        } catch (e) { if (e.status !== 401) toast(`Drop refused: ${e.message}`, true); }
      } }, `Drop ${h.source}`);
    const rows = page.entries.map((h) =>
      el("tr", { "data-id": h.id },
        el("td", { class: "mono" }, h.id), el("td", {}, h.tenant), el("td", {}, h.source),
        el("td", {}, pill(h.reason || "unverified", "failed")), el("td", {}, h.scheme || ""),
        el("td", { title: when(h.received_at) }, ago(h.received_at)), el("td", { class: "num" }, bytes(h.size))));
    replace(list,
      el("div", { class: "actions" }, el("h2", { class: "flush" }, "Held hooks"),
        el("span", { class: "muted" }, `${bytes(page.held_bytes)} held`), el("span", { class: "spacer" }),
        el("button", { type: "button", class: "secondary", disabled: cursors.length < 2, onclick: () => { cursors.pop(); draw(); } }, "← Back"),
        el("button", { type: "button", class: "secondary", disabled: !page.next_cursor, onclick: () => { cursors.push(page.next_cursor); draw(); } }, "More →")),
      table(["Hook", "Tenant", "Source", "Why", "Scheme", "Received", { label: "Size", num: true }], rows, "The pen is empty."),
      bySource.size > 0 && el("div", { class: "actions" }, [...bySource.values()].map((h) => [release(h), drop(h)])),
      el("p", { class: "muted" }, "Release re-verifies a source's held hooks with its current secrets and delivers those that pass."),
    );
  };
  await draw();
  await replayJobs(jobs, onStop, async () => { cursors.splice(1); await draw(); });
}

// ---------------------------------------------------------------- tenants

async function tenants(root, onStop) {
  root.append(el("h1", {}, "Tenants"));
  const params = hashParams();
  const list = await api("GET", "/v1/tenants");
  const rows = list.map((t) =>
    el("tr", { class: "clickable", "data-tenant": t.tenant, onclick: () => (location.hash = `#/tenants?tenant=${encodeURIComponent(t.tenant)}`) },
      el("td", {}, el("strong", {}, t.tenant)), el("td", { class: "num" }, count(t.sources)),
      el("td", { class: "num" }, count(t.pending)), el("td", { class: "num" }, count(t.inflight)),
      el("td", { class: "num" }, count(t.dead)), el("td", { class: "num" }, bytes(t.bytes)),
      el("td", {}, t.erasing ? pill("erasing", "paused") : "")));
  root.append(el("section", { class: "card" }, el("h2", {}, "All tenants"),
    table(["Tenant", { label: "Sources", num: true }, { label: "Pending", num: true }, { label: "Inflight", num: true },
      { label: "Dead", num: true }, { label: "Bytes", num: true }, ""], rows, "No tenants.")));
  if (params.tenant) await tenant(root, onStop, params.tenant);
}

async function tenant(root, onStop, id) {
  const path = `/v1/tenants/${encodeURIComponent(id)}`;
  const box = el("section", { class: "card", id: "tenant" });
  root.append(box);
  const [usage, rate, owned] = await Promise.all([api("GET", `${path}/usage`), api("GET", `${path}/rate-limit`), api("GET", `${path}/sources`)]);
  const facts = el("dl", { class: "facts" },
    ["pending", "scheduled", "inflight", "dead", "dedupe_keys", "sources"].map((k) => [el("dt", {}, k.replace("_", " ")), el("dd", {}, count(usage[k]))]),
    el("dt", {}, "bytes"), el("dd", {}, bytes(usage.bytes)));

  const rateForm = el("form", { class: "filters" },
    el("label", {}, "Requests/s", el("input", { name: "rate", type: "number", step: "any", min: 0, value: rate.rate, class: "w-m" })),
    el("label", {}, "Burst", el("input", { name: "burst", type: "number", min: 0, value: rate.burst, class: "w-s" })),
    el("button", { type: "submit" }, "Save rate limit"),
    el("span", { class: "muted" }, rate.own ? "its own limit" : "the node's default"));
  rateForm.addEventListener("submit", async (event) => {
    event.preventDefault();
    const data = Object.fromEntries(new FormData(rateForm));
    try {
      await api("PUT", `${path}/rate-limit`, { rate: Number(data.rate), burst: Number(data.burst) });
      toast("Rate limit saved");
    } catch (e) { if (e.status !== 401) toast(`Refused: ${e.message}`, true); }
  });

  const editor = el("textarea", { id: "source-editor", spellcheck: "false", "aria-label": "source JSON" });
  const editorNote = el("p", { class: "muted" });
  const edit = (source) => {
    editor.value = JSON.stringify(source ? { name: source.name, sinks: source.sinks.map((s) => s.name) } : { name: "", sinks: [] }, null, 2);
    editorNote.textContent = source
      ? `Editing ${source.name}: saving replaces it (secrets are not shown; give verify again if it has one).`
      : "A new source: name, sinks, and optionally verify, dedupe, on_verify_failure, forward_headers.";
    editor.dataset.editing = source ? source.name : "";
  };
  edit(null);
  const saveSource = el("button", { type: "button", id: "save-source", onclick: async () => {
    let body;
    try { body = JSON.parse(editor.value); } catch (e) { toast(`Not JSON: ${e.message}`, true); return; }
    const name = editor.dataset.editing;
    try {
      if (name) await api("PUT", `${path}/sources/${encodeURIComponent(name)}`, body);
      else await api("POST", `${path}/sources`, body);
      toast(`Source ${body.name || name} saved`);
      route();
    } catch (e) {
      // The API's message names the first problem; `details.problems` has them all.
      const problems = e.body?.details?.problems;
      const text = Array.isArray(problems) && problems.length > 1
        ? problems.map((p) => `${p.key}: ${p.message}`).join("; ") : e.message;
      if (e.status !== 401) toast(`Refused: ${text}`, true);
    }
  } }, "Save source");
  const sourceRows = owned.map((s) =>
    el("tr", { "data-source": s.name },
      el("td", {}, el("strong", {}, s.name)), el("td", {}, s.origin), el("td", { class: "mono" }, s.url),
      el("td", {}, s.sinks.map((k) => k.name).join(", ")),
      el("td", {}, s.origin === "runtime" && el("div", { class: "actions flush" },
        el("button", { type: "button", class: "secondary", onclick: () => edit(s) }, "Edit"),
        el("button", { type: "button", class: "danger", onclick: async () => {
          if (!confirm(`Delete source ${s.name}?`)) return;
          try { await api("DELETE", `${path}/sources/${encodeURIComponent(s.name)}`); toast(`Deleted ${s.name}`); route(); }
          catch (e) { if (e.status !== 401) toast(`Refused: ${e.message}`, true); }
        } }, "Delete")))));

  const confirmInput = el("input", { id: "erase-confirm", placeholder: `type ${id} to confirm`, autocomplete: "off" });
  const eraseButton = el("button", { type: "button", class: "danger", id: "erase", disabled: true, onclick: async () => {
    if (confirmInput.value !== id) return;
    try { await api("DELETE", path); toast(`Erasing ${id}`); } catch (e) { if (e.status !== 401) toast(`Refused: ${e.message}`, true); }
  } }, "Erase tenant");
  confirmInput.addEventListener("input", () => (eraseButton.disabled = confirmInput.value !== id));
  const eraseStatus = el("div", { id: "erase-status" });

  replace(box,
    el("h2", {}, `Tenant ${id}`),
    el("div", { class: "split" },
      el("div", {}, el("h3", {}, "Usage"), facts, el("h3", {}, "Rate limit"), rateForm),
      el("div", {}, el("h3", {}, "Erase"),
        el("p", { class: "muted" }, "Erasing refuses the tenant's new hooks and deletes its rows, hooks, held hooks, sources and dedupe keys. It cannot be undone."),
        el("div", { class: "actions" }, confirmInput, eraseButton), eraseStatus)),
    el("h3", {}, "Sources"),
    table(["Source", "Origin", "URL", "Sinks", ""], sourceRows, "No sources."),
    el("div", { class: "actions" }, el("button", { type: "button", class: "secondary", onclick: () => edit(null) }, "New source")),
    editorNote, editor, el("div", { class: "actions" }, saveSource),
  );

  await every(POLL_MS, onStop, async () => {
    let erase = null;
    try { erase = await api("GET", path); } catch (e) { if (e.status !== 404) throw e; }
    if (!erase) { replace(eraseStatus); return; }
    const removed = Object.entries(erase.removed || {}).filter(([, n]) => n).map(([k, n]) => `${count(n)} ${k}`).join(", ");
    replace(eraseStatus, el("p", {}, "Erase: ", pill(erase.phase, erase.phase === "done" ? "done" : "running"), " ",
      removed ? `removed ${removed}` : "", erase.error ? el("span", { class: "error" }, ` ${erase.error}`) : ""));
  });
}

// ---------------------------------------------------------------- hooks

/** One stored hook by its seq (`#/hooks/SEQ`): retrying, dead or waiting. */
async function hooks(root) {
  const seq = location.hash.replace(/^#\/?hooks\/?/, "").split("?")[0];
  const detail = el("div", { id: "hook-detail" });
  const form = el("form", { class: "filters", id: "hook-lookup" },
    el("label", {}, "Seq", el("input", { name: "seq", inputmode: "numeric", value: seq })),
    el("button", { type: "submit" }, "Show"));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    location.hash = `#/hooks/${encodeURIComponent(new FormData(form).get("seq"))}`;
  });
  root.append(el("section", { class: "card" }, el("h2", {}, "Hook"), form), el("section", { class: "card" }, detail));
  if (seq) await showHook(detail, seq, 0).catch(fail(detail));
}

// ---------------------------------------------------------------- transforms

/** The configured transforms, and a panel to try one on a hook. */
async function transforms(root) {
  const list = await api("GET", "/v1/transforms");
  root.append(el("h1", {}, "Transforms"));
  root.append(el("section", { class: "card" }, el("h2", {}, "Configured"),
    table(["Name", "Component", "Bindings"], list.map((t) =>
      el("tr", { "data-transform": t.name }, el("td", {}, t.name), el("td", { class: "mono" }, t.component),
        el("td", {}, t.bindings.join(", ") || "–"))), "No transforms configured.")));
  const result = el("div", { id: "try-result" });
  const form = el("form", { id: "try-form", class: "stack" },
    el("label", {}, "Transform", el("select", { name: "name" }, list.map((t) => el("option", { value: t.name }, t.name)))),
    el("label", {}, "Headers (one Name: value a line)", el("textarea", { name: "headers", rows: 3, class: "mono" }, "content-type: application/json")),
    el("label", {}, "Body", el("textarea", { name: "body", rows: 8, class: "mono" }, '{"type": "invoice.paid"}')),
    el("div", { class: "actions" }, el("button", { type: "submit", disabled: list.length === 0 }, "Try")));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const data = new FormData(form);
    const headers = String(data.get("headers")).split("\n").map((line) => line.trim()).filter(Boolean)
      .map((line) => { const at = line.indexOf(":"); return at < 0 ? [line, ""] : [line.slice(0, at).trim(), line.slice(at + 1).trim()]; });
    replace(result, el("p", { class: "muted" }, "Running…"));
    try {
      const tried = await api("POST", `/v1/transforms/${encodeURIComponent(data.get("name"))}/try`, { body: String(data.get("body")), headers });
      const verdict = pill(tried.verdict, tried.verdict === "deliver" ? "done" : "failed");
      const out = tried.hook;
      replace(result,
        el("dl", { class: "facts" },
          el("dt", {}, "Verdict"), el("dd", { id: "try-verdict" }, verdict),
          tried.reason && [el("dt", {}, "Reason"), el("dd", { id: "try-reason" }, tried.reason)],
          tried.class && [el("dt", {}, "Class"), el("dd", {}, pill(tried.class))],
          out && [el("dt", {}, "Content type"), el("dd", {}, out.content_type || "–")]),
        out && [el("h3", {}, "Headers the sink gets"),
          table(["Name", "Value"], out.headers.map(([n, v]) => el("tr", {}, el("td", { class: "mono" }, n), el("td", { class: "mono" }, v)))),
          el("h3", {}, out.body_encoding === "base64" ? "Body (base64)" : "Body the sink gets"),
          el("pre", { class: "body", id: "try-body" }, out.body)]);
    } catch (e) {
      if (e.status !== 401) replace(result, el("p", { class: "error", id: "try-error" }, e.message));
    }
  });
  root.append(el("section", { class: "card" }, el("h2", {}, "Try a transform"),
    el("p", { class: "muted" }, "Runs the transform on the hook below; nothing is stored or delivered."), form, result));
}

// ---------------------------------------------------------------- start

const PAGES = { overview, sources, dlq, hooks, quarantine, tenants, transforms };

async function start() {
  $("#login-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    token.set($("#token").value.trim());
    $("#token").value = "";
    try {
      await api("GET", "/v1/config");
      route();
    } catch (e) {
      if (e.status !== 401) showLogin(e.message);
    }
  });
  $("#sign-out").addEventListener("click", () => { token.clear(); showLogin(""); });
  window.addEventListener("hashchange", route);
  try {
    const config = await api("GET", "/v1/config");
    const roles = config?.node?.roles;
    $("#node-label").textContent = Array.isArray(roles) ? roles.join(", ") : "";
    route();
  } catch (e) {
    if (e.status !== 401) {
      $("#page").replaceChildren(el("div", { class: "banner-error", role: "alert" }, `Error: ${e.message}`));
    }
  }
}

start();
