// The datanotes console: plain JavaScript over the engine's HTTP API. Every call carries the
// token as `Authorization: Bearer` (no cookie); the token lives in sessionStorage only.
"use strict";

const KEY = "datanotes.token";
const state = { token: null, owner: false, self: null, view: "apps", live: null };

// ---- small helpers -------------------------------------------------------------------------

// h() and $() are in dom.js.
const view = () => $("#view");
function show(...kids) { view().replaceChildren(...kids.flat().filter((k) => k !== null && k !== undefined && k !== false)); }
function json(v) { return JSON.stringify(v, null, 2); }

/** "3 s ago", "5 min ago" from an ISO time. */
function age(iso) {
  if (!iso) return "";
  const s = Math.max(0, (Date.now() - Date.parse(iso)) / 1000);
  if (s < 60) return `${Math.round(s)} s ago`;
  if (s < 3600) return `${Math.round(s / 60)} min ago`;
  if (s < 86400) return `${Math.round(s / 3600)} h ago`;
  return `${Math.round(s / 86400)} d ago`;
}

/** An API error: the server's message and hint. */
class ApiError extends Error {
  constructor(status, body) {
    const e = (body && body.error) || {};
    super(e.message || `HTTP ${status}`);
    this.status = status;
    this.hint = e.hint || "";
    this.code = e.code || "";
  }
}
function errorText(e) { return e.hint ? `${e.message} (${e.hint})` : e.message; }
function errorBox(e) { return h("p", { class: "error", role: "alert" }, errorText(e)); }

/** POST /datanotes/<path>/ with the token. */
async function api(path, body) {
  const r = await fetch(`/datanotes/${path}/`, {
    method: "POST",
    headers: { Authorization: `Bearer ${state.token}`, "Content-Type": "application/json" },
    body: JSON.stringify(body || {}),
  });
  const v = await r.json().catch(() => ({}));
  if (!r.ok) {
    const err = new ApiError(r.status, v);
    if (r.status === 401) signOut(`Token refused: ${err.message}`);
    throw err;
  }
  return v;
}

/** POST with upload progress (XMLHttpRequest: fetch reports no upload progress). */
function apiUpload(path, body, onProgress) {
  return new Promise((resolve, reject) => {
    const x = new XMLHttpRequest();
    x.open("POST", `/datanotes/${path}/`);
    x.setRequestHeader("Authorization", `Bearer ${state.token}`);
    x.setRequestHeader("Content-Type", "application/json");
    x.upload.onprogress = (e) => e.lengthComputable && onProgress(e.loaded / e.total);
    x.upload.onload = () => onProgress(1);
    x.onload = () => {
      let v = {};
      try { v = JSON.parse(x.responseText); } catch (_) { /* not JSON */ }
      if (x.status >= 200 && x.status < 300) resolve(v); else reject(new ApiError(x.status, v));
    };
    x.onerror = () => reject(new Error("the upload failed (connection lost)"));
    x.send(JSON.stringify(body));
  });
}

/** A modal dialog; resolves true on OK. */
function ask(...content) {
  const d = $("#dialog");
  $("#dialog-body").replaceChildren(...content);
  d.showModal();
  return new Promise((resolve) => {
    d.addEventListener("close", () => resolve(d.returnValue === "ok"), { once: true });
  });
}
function tell(...content) {
  $("#dialog-cancel").hidden = true;
  return ask(...content).finally(() => { $("#dialog-cancel").hidden = false; });
}

// ---- sign-in -------------------------------------------------------------------------------

function takeToken() {
  const m = location.hash.match(/(?:^#|&)token=([^&]+)/);
  if (m) {
    sessionStorage.setItem(KEY, decodeURIComponent(m[1]));
    const app = location.hash.match(/&app=([^&]+)/);
    if (app) sessionStorage.setItem(`${KEY}.app`, decodeURIComponent(app[1]));
    else sessionStorage.removeItem(`${KEY}.app`);
    // Out of the address bar (and the history) at once.
    history.replaceState(null, "", location.pathname + location.search + "#apps");
  }
  return sessionStorage.getItem(KEY);
}

function signOut(message) {
  sessionStorage.removeItem(KEY);
  sessionStorage.removeItem(`${KEY}.app`);
  state.token = null;
  stopLive();
  $("#nav").hidden = true;
  $("#signout").hidden = true;
  $("#who").textContent = "";
  view().replaceChildren();
  $("#signin").hidden = false;
  $("#signin-error").textContent = message || "";
  $("#token-input").focus();
}

async function signIn(token) {
  state.token = token;
  state.self = sessionStorage.getItem(`${KEY}.app`);
  try {
    await api("list_tables");
  } catch (e) {
    if (e.status !== 401) signOut(`Cannot sign in: ${errorText(e)}`);
    return false;
  }
  // The owner's tokens and the apps' have distinct prefixes; the server still decides every
  // call. An app's sign-in link may name the app (`#token=…&app=NAME`): it then sees its entry.
  state.owner = token.startsWith("dn_owner_");
  $("#signin").hidden = true;
  $("#nav").hidden = false;
  $("#signout").hidden = false;
  $("#who").textContent = state.owner ? "signed in as the owner" : `signed in with an app token${state.self ? ` (${state.self})` : ""}`;
  document.body.dataset.role = state.owner ? "owner" : "app";
  route();
  return true;
}

// ---- views ---------------------------------------------------------------------------------

const VIEWS = { apps: appsView, tools: toolsView, live: liveView, tables: tablesView };

function route() {
  if (!state.token) return;
  const name = (location.hash.slice(1).split("/")[0]) || "apps";
  state.view = VIEWS[name] ? name : "apps";
  for (const a of document.querySelectorAll("#nav a")) {
    if (a.dataset.view === state.view) a.setAttribute("aria-current", "page"); else a.removeAttribute("aria-current");
  }
  if (state.view !== "live") stopLive();
  VIEWS[state.view]().catch((e) => show(errorBox(e)));
}

// Apps ----------------------------------------------------------------------------------------

function reach(a) {
  if (a.kind === "client") return h("span", { class: "badge" }, "client (no tools)");
  if (a.signIn && a.signIn.required) return h("span", { class: "badge down sign-in" }, "needs sign-in");
  if (a.reachable === true) return h("span", { class: "badge up" }, "reachable");
  if (a.reachable === false) return h("span", { class: "badge down" }, "not reachable");
  return h("span", { class: "badge" }, "not checked yet");
}

function appCard(a) {
  const rights = [
    `write: ${a.write && a.write.length ? a.write.join(", ") : "none"}`,
    a.ddl ? "ddl" : null,
    a.maintain ? "maintain" : null,
    a.call_tools ? `tools it may call: ${a.call_tools.length ? a.call_tools.join(", ") : "none"}` : null,
    a.tool_prefix ? `tools listed as ${a.tool_prefix}…` : null,
    a.tool_listing === "search" ? "listed on /mcp: search_tools and call_tool" : null,
  ].filter(Boolean).join(" · ");
  const card = h("article", { class: "card app", "data-app": a.name },
    h("div", { class: "row" },
      h("h3", {}, a.name), h("span", { class: "badge" }, a.kind), reach(a),
      h("span", { class: "muted" }, `${(a.tools || []).length} tools`),
      (a.skippedTools || []).length ? h("span", { class: "badge down" }, `${a.skippedTools.length} skipped`) : null,
      a.lastSeen ? h("span", { class: "muted" }, `last seen ${age(a.lastSeen)}`) : null),
    a.description ? h("p", { class: "muted" }, a.description) : null,
    a.mcp_url ? h("div", {}, "endpoint: ", h("code", {}, a.mcp_url),
      a.self_url === false ? h("span", { class: "muted" }, " (pinned by the owner)") : null) : null,
    a.urlChangedAt ? h("div", { class: "muted" }, `the app set its address ${age(a.urlChangedAt)}${a.previousUrl ? ` (before: ${a.previousUrl})` : ""}`) : null,
    a.lastError ? h("p", { class: "error" }, `last error${a.lastErrorAt ? ` (${age(a.lastErrorAt)})` : ""}: ${a.lastError}`) : null,
    a.previousError ? h("p", { class: "muted" }, `previous error${a.previousError.at ? ` (${age(a.previousError.at)})` : ""}: ${a.previousError.message}`) : null,
    h("div", {}, "rights: ", rights));
  if (a.wasm) {
    const l = a.wasm.limits || {};
    card.append(h("div", { class: "limits" }, `limits: memory ${l.memory_mb} MiB · CPU ${duration(l.cpu_ms)} per call · ${duration(l.timeout_ms)} per call · results up to ${size(l.max_result_bytes)} · ${l.max_instances} instance${l.max_instances === 1 ? "" : "s"} at once`),
      h("div", {}, "allow_hosts: ", a.wasm.allow_hosts && a.wasm.allow_hosts.length ? a.wasm.allow_hosts.join(", ") : "none (no network)"),
      h("div", { class: "muted" }, `component ${String(a.wasm.sha256).slice(0, 12)}… (${(a.wasm.size / 1e6).toFixed(1)} MB)`));
    card.append(originBlock(a)); // install.js
    if (a.runtime) card.append(runtimeLine(a.runtime));
  }
  if ((a.tools || []).length) card.append(h("details", {}, h("summary", {}, "tools"), h("p", {}, a.tools.join(", "))));
  if ((a.skippedTools || []).length) {
    card.append(h("details", { open: true }, h("summary", {}, "skipped tools"),
      h("ul", {}, a.skippedTools.map((s) => h("li", { class: "skipped" }, h("code", {}, s.name), s.takenBy ? ` — name held by ${s.takenBy}` : "", s.reason ? ` — ${s.reason}` : "")))));
  }
  const msg = h("p", { class: "result", role: "status" });
  const actions = h("div", { class: "row actions" },
    h("button", { type: "button", class: "refresh", onclick: () => refreshApp(a.name, msg) }, "Refresh"));
  if (state.owner && a.signIn) {
    // A remote app that signs in with OAuth: the owner's browser goes to its sign-in page.
    actions.append(h("button", { type: "button", class: `connect owner-only${a.signIn.required ? " primary" : ""}`, onclick: () => connectApp(a.name, msg) },
      a.signIn.required ? "Connect" : "Reconnect"));
  }
  if (state.owner && a.wasm) actions.append(...wasmActions(a, msg)); // install.js
  if (state.owner) {
    actions.append(
      h("button", { type: "button", class: "rotate owner-only", onclick: () => rotate(a.name) }, "Rotate token"),
      h("button", { type: "button", class: "delete danger owner-only", onclick: () => removeApp(a.name) }, "Delete"));
  }
  card.append(actions, msg);
  return card;
}

function mib(bytes) { return `${(bytes / 1048576).toFixed(1)} MiB`; }

// What a WASM app holds now (its `runtime`): read again with the list, every 5 s.
function runtimeLine(r) {
  const n = r.instances || 0;
  const parts = [
    n ? `${n} instance${n === 1 ? "" : "s"} (${r.warm} warm), ${mib(r.memoryBytes)} of memory` : "no instance",
    r.codeLoaded ? "code loaded" : "code not loaded",
    r.idleMs ? `an idle instance is dropped after ${r.idleMs / 1000} s` : "no instance is kept between calls",
    r.instantiateUs == null ? null : `its last fresh instance took ${(r.instantiateUs / 1000).toFixed(2)} ms to make`,
  ];
  return h("div", { class: "runtime" }, "now: ", parts.filter(Boolean).join(" · "));
}

// The owner's view of the server's memory (`GET /datanotes/health` with the owner token).
async function serverMemory() {
  const r = await fetch("/datanotes/health", { headers: { Authorization: `Bearer ${state.token}` } });
  const m = r.ok ? (await r.json().catch(() => ({}))).memory : null;
  if (!m) return null;
  const rss = m.rssBytes == null ? "resident memory unknown" : `${mib(m.rssBytes)} resident`;
  return h("p", { class: "muted", id: "server-memory" },
    `server: ${rss} · WASM apps: ${m.wasmInstances} live instance${m.wasmInstances === 1 ? "" : "s"}, ${mib(m.wasmMemoryBytes)} of memory`);
}

async function refreshApp(name, msg) {
  msg.textContent = "refreshing…";
  try {
    const d = await api("apps/refresh", { name });
    const part = (k) => (d[k] && d[k].length ? `${k}: ${d[k].map((x) => x.name || x).join(", ")}` : null);
    msg.textContent = [part("added"), part("removed"), part("skipped")].filter(Boolean).join(" · ") || "no change";
    if (state.view === "apps") setTimeout(appsView, 800);
  } catch (e) { msg.replaceChildren(errorBox(e)); }
}

// Connects a remote app that requires OAuth: apps/connect answers where to sign in; the
// app's authorization server sends the browser back to the engine, then to #apps.
async function connectApp(name, msg) {
  msg.textContent = "opening the app's sign-in…";
  try {
    const d = await api("apps/connect", { name });
    location.assign(d.authorization_url);
  } catch (e) { msg.replaceChildren(errorBox(e)); }
}

async function rotate(name) {
  if (!(await ask(h("p", {}, `Give ${name} a new token? The old one stops working at once.`)))) return;
  try {
    const t = (await api("apps/rotate-token", { name })).token;
    const link = `${location.origin}/datanotes/ui/#token=${encodeURIComponent(t)}&app=${encodeURIComponent(name)}`;
    await tell(h("p", {}, `New token for ${name} (shown once: copy it now):`), h("p", { class: "tok new-token" }, t),
      h("p", {}, "The console as this app sees it (open in a private window): "), h("p", { class: "tok app-link" }, link));
  } catch (e) { await tell(errorBox(e)); }
}

async function removeApp(name) {
  if (!(await ask(h("p", {}, `Delete the app ${name}? Its token stops working and its tools leave the namespace.`)))) return;
  try { await api("apps/delete", { name }); } catch (e) { await tell(errorBox(e)); }
  appsView();
}

function patterns(s) { return s.split(/[\s,]+/).filter(Boolean); }

function b64(buf) {
  const bytes = new Uint8Array(buf);
  let s = "";
  for (let i = 0; i < bytes.length; i += 0x8000) s += String.fromCharCode.apply(null, bytes.subarray(i, i + 0x8000));
  return btoa(s);
}

function installForm() {
  const out = h("div", { role: "status" });
  const prog = h("progress", { max: 1, value: 0, hidden: true });
  const f = h("form", { class: "grid", id: "install-form" },
    h("div", {}, h("label", { for: "wasm-file" }, "Component (.wasm)"), h("input", { id: "wasm-file", name: "file", type: "file", accept: ".wasm", required: true })),
    h("div", {}, h("label", { for: "wasm-name" }, "Name"), h("input", { id: "wasm-name", name: "name", required: true, pattern: "[a-z][a-z0-9_\\-]{0,63}" })),
    h("div", {}, h("label", { for: "wasm-write" }, "Write patterns (comma separated)"), h("input", { id: "wasm-write", name: "write", placeholder: "personal.tasks.*" })),
    h("div", {}, h("label", {}, h("input", { type: "checkbox", name: "ddl" }), " schema changes (ddl)"), h("label", {}, h("input", { type: "checkbox", name: "maintain" }), " maintain")),
    h("div", {}, h("button", { type: "submit", class: "primary" }, "Install")));
  f.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const file = f.file.files[0];
    if (!file) return;
    const body = { name: f.name.value, wasm_base64: b64(await file.arrayBuffer()) };
    if (f.write.value.trim()) body.write = patterns(f.write.value);
    if (f.ddl.checked) body.ddl = true;
    if (f.maintain.checked) body.maintain = true;
    prog.hidden = false;
    prog.value = 0;
    out.textContent = `uploading ${file.name} (${(file.size / 1e6).toFixed(1)} MB)…`;
    try {
      const v = await apiUpload("apps/create", body, (p) => {
        prog.value = p;
        if (p >= 1) out.textContent = "compiling and checking the component…";
      });
      out.replaceChildren(h("p", { class: "ok" }, `installed ${v.app.name}: ${v.app.tools.length} tools (${v.app.tools.join(", ")})`),
        h("p", {}, "The app's token (shown once: copy it now):"), h("p", { class: "tok new-token" }, v.token));
      f.reset();
      await appsView(out);
    } catch (e) { out.replaceChildren(errorBox(e)); }
    prog.hidden = true;
  });
  return h("section", { class: "card owner-only" }, h("h2", {}, "Install a WASM app from a file"), f, prog, out);
}

function remoteForm() {
  const out = h("div", { role: "status" });
  const f = h("form", { class: "grid", id: "remote-form" },
    h("div", {}, h("label", { for: "remote-name" }, "Name"), h("input", { id: "remote-name", name: "name", required: true, pattern: "[a-z][a-z0-9_\\-]{0,63}" })),
    h("div", {}, h("label", { for: "remote-url" }, "MCP endpoint"), h("input", { id: "remote-url", name: "url", type: "url", required: true, placeholder: "http://127.0.0.1:9000/mcp" })),
    h("div", {}, h("label", { for: "remote-token" }, "Token sent to the app (optional)"), h("input", { id: "remote-token", name: "mcptoken", type: "password", autocomplete: "off" })),
    h("div", {}, h("label", { for: "remote-write" }, "Write patterns (comma separated)"), h("input", { id: "remote-write", name: "write" })),
    h("div", {}, h("button", { type: "submit", class: "primary" }, "Register")));
  f.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const body = { name: f.name.value, mcp_url: f.url.value };
    if (f.mcptoken.value) body.mcp_token = f.mcptoken.value;
    if (f.write.value.trim()) body.write = patterns(f.write.value);
    out.textContent = "registering and listing its tools…";
    try {
      const v = await api("apps/create", body);
      const a = v.app;
      out.replaceChildren(h("p", { class: a.reachable ? "ok" : "error" }, a.reachable ? `registered ${a.name}: reached, ${a.tools.length} tools` : `registered ${a.name}: not reached${a.lastError ? `: ${a.lastError}` : ""}`),
        h("p", {}, "The app's token (shown once: copy it now):"), h("p", { class: "tok new-token" }, v.token));
      f.reset();
      await appsView(out);
    } catch (e) { out.replaceChildren(errorBox(e)); }
  });
  return h("section", { class: "card owner-only" }, h("h2", {}, "Register a remote app"), f, out);
}

let forms = null;
// What the Apps view shows: the owner's list of apps and the server's memory, or an app
// token's own entry.
async function readApps() {
  if (!state.owner) {
    const apps = state.self ? [(await api("apps/get", { name: state.self })).app] : [];
    return { apps, memory: null };
  }
  const [apps, memory] = await Promise.all([api("apps"), serverMemory()]);
  return { apps: apps.apps, memory };
}

async function appsView() {
  const { apps, memory } = await readApps();
  if (state.view !== "apps") return;
  const list = h("div", { id: "apps" }, apps.length ? apps.map(appCard) : h("p", { class: "muted" }, state.owner ? "No apps yet." : "Signed in with an app token: the list of apps is the owner's. The app's own sign-in link (…#token=…&app=NAME) shows its entry here."));
  // The forms keep what they show (a new token) across a reload of the list.
  if (state.owner && !forms) forms = [sourceForm(), installForm(), remoteForm()];
  show(h("h1", {}, "Apps"), memory, list, state.owner ? grantsSection() : null, state.owner ? forms : null);
}

// Reachability changes on its own: the list is read again every 5 s while it is shown, unless
// the keyboard is in it or a dialog is open.
setInterval(async () => {
  const list = $("#apps");
  if (!state.token || state.view !== "apps" || !list || list.contains(document.activeElement) || $("#dialog").open) return;
  if (!state.owner && !state.self) return;
  try {
    const { apps, memory } = await readApps();
    if (state.view === "apps" && !list.contains(document.activeElement)) {
      list.replaceChildren(...apps.map(appCard));
      if (memory) $("#server-memory")?.replaceWith(memory);
    }
  } catch (_) { /* shown at the next action */ }
}, 5000);

// Tools ---------------------------------------------------------------------------------------

function fieldFor(tool, name, s, required) {
  const id = `arg-${tool}-${name}`;
  const label = h("label", { for: id }, name, required ? " *" : "", s.description ? h("span", { class: "muted" }, ` — ${s.description}`) : "");
  let input;
  const t = Array.isArray(s.type) ? s.type.find((x) => x !== "null") : s.type;
  if (s.enum) input = h("select", { id, name }, required ? null : h("option", { value: "" }, ""), s.enum.map((v) => h("option", { value: JSON.stringify(v) }, String(v))));
  else if (t === "boolean") input = h("select", { id, name }, h("option", { value: "" }, ""), h("option", { value: "true" }, "true"), h("option", { value: "false" }, "false"));
  else if (t === "integer" || t === "number") input = h("input", { id, name, type: "number", step: t === "integer" ? "1" : "any" });
  else if (t === "string") input = h("input", { id, name });
  else if (t === "array" && listItem(s)) input = h("input", { id, name, placeholder: "values, separated by commas" });
  else input = h("textarea", { id, name, placeholder: "JSON" });
  input.classList.add("arg");
  input.dataset.kind = s.enum ? "enum" : t === "array" && listItem(s) ? `list-${listItem(s)}` : t || "json";
  if (required) input.required = true;
  return h("div", {}, label, input);
}

/** The type of a list's items that a form takes as comma-separated values ("string",
 * "number", "integer"), or null (anything else is typed as JSON). */
function listItem(s) {
  const it = s.items || {};
  const t = Array.isArray(it.type) ? it.type.find((x) => x !== "null") : it.type;
  return !it.enum && ["string", "number", "integer"].includes(t) ? t : null;
}

function readArgs(form) {
  const args = {};
  for (const el of form.querySelectorAll("[data-kind]")) {
    const v = el.value;
    if (v === "") continue;
    const k = el.dataset.kind;
    if (k === "string") args[el.name] = v;
    else if (k === "integer" || k === "number") args[el.name] = Number(v);
    else if (k.startsWith("list-")) {
      const items = v.split(/[,\n]/).map((x) => x.trim()).filter(Boolean);
      args[el.name] = k === "list-string" ? items : items.map(Number);
    } else args[el.name] = JSON.parse(v);
  }
  return args;
}

/** A JSON value as people read it: an object as a table of its keys, a list of objects as a
 * table with a column per key, a list of plain values as a list, text as text. */
function readable(v, depth = 0) {
  if (v === null || v === undefined) return h("span", { class: "muted" }, "none");
  if (typeof v !== "object") return h("span", {}, String(v));
  if (depth > 3) return h("code", {}, JSON.stringify(v));
  if (Array.isArray(v)) {
    if (!v.length) return h("span", { class: "muted" }, "empty list");
    if (v.every((x) => x && typeof x === "object" && !Array.isArray(x))) {
      const keys = [...new Set(v.flatMap((x) => Object.keys(x)))];
      return h("div", { class: "scroll" }, h("table", { class: "readable" }, h("thead", {}, h("tr", {}, keys.map((k) => h("th", {}, k)))),
        h("tbody", {}, v.map((x) => h("tr", {}, keys.map((k) => h("td", {}, readable(x[k], depth + 1))))))));
    }
    return h("ul", { class: "readable" }, v.map((x) => h("li", {}, readable(x, depth + 1))));
  }
  const entries = Object.entries(v);
  if (!entries.length) return h("span", { class: "muted" }, "empty");
  return h("table", { class: "readable" }, h("tbody", {}, entries.map(([k, x]) => h("tr", {}, h("th", {}, k), h("td", {}, readable(x, depth + 1))))));
}

/** What a tool answered, readable: an app tool's content (text that is JSON shown as data;
 * its structured content once, not again beside the same text), an operation's answer; the
 * raw JSON one click away. */
function resultView(r) {
  const v = r.value;
  const parts = [];
  if (v && typeof v === "object" && Array.isArray(v.content)) {
    const shown = [];
    for (const c of v.content) {
      if (c.type === "text") {
        let data;
        try { data = JSON.parse(c.text); } catch (_) { data = undefined; }
        if (data !== undefined && typeof data === "object") { parts.push(readable(data)); shown.push(JSON.stringify(data)); }
        else parts.push(h("p", { class: "result-text" }, c.text));
      } else parts.push(h("p", { class: "muted" }, `${c.type}${c.mimeType ? ` (${c.mimeType})` : ""}`));
    }
    if (v.structuredContent !== undefined && !shown.includes(JSON.stringify(v.structuredContent))) parts.push(readable(v.structuredContent));
  } else if (typeof v === "string") parts.push(h("p", { class: "result-text" }, v));
  else parts.push(readable(v));
  return [h("p", { class: "result-status" }, `${r.ok ? "ok" : "error"} (served by ${r.servedBy})`), ...parts,
    h("details", { class: "raw" }, h("summary", {}, "raw JSON"), h("pre", {}, json(v)))];
}

function tryForm(t) {
  const schema = t.inputSchema || {};
  const req = new Set(schema.required || []);
  const props = schema.properties || {};
  const out = h("div", { class: "result", hidden: true });
  const f = h("form", { class: "try" }, Object.entries(props).map(([n, s]) => fieldFor(t.name, n, s, req.has(n))),
    h("div", { class: "row" }, h("button", { type: "submit", class: "primary" }, `Call ${t.name}`)));
  f.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    out.hidden = false;
    let args;
    try { args = readArgs(f); } catch (e) { out.textContent = `A JSON field is not valid JSON: ${e.message}`; return; }
    out.textContent = "calling…";
    try {
      const r = await api("apps/call", { tool: t.name, arguments: args });
      out.className = r.ok ? "result ok" : "result error";
      out.replaceChildren(...resultView(r));
    } catch (e) { out.className = "result error"; out.textContent = errorText(e); }
  });
  return h("div", {}, f, out);
}

/** The search box of the Tools view: search_tools, each tool found with its app, score, the
 * rankings that found it (ranksText, search.js) and which of the query's words it holds. */
function toolSearch() {
  const input = h("input", { id: "tool-query", type: "search", placeholder: "what should the tool do? e.g. undo a change", "aria-label": "find a tool" });
  const out = h("div", { id: "tool-hits" });
  const form = h("form", { id: "tool-search", class: "row" }, input, h("button", { type: "submit", class: "primary" }, "Find"));
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    out.textContent = "searching…";
    try {
      const a = await api("search_tools", { query: input.value, limit: 10 });
      const tools = a.tools || [];
      out.replaceChildren(
        h("p", { class: "muted" }, `mode: ${a.mode} · ${tools.length} tool${tools.length === 1 ? "" : "s"}`),
        a.note ? h("p", { class: "note", role: "note" }, a.note) : "",
        h("ol", { class: "hits" }, tools.map((t) => h("li", { class: "hit tool-hit", "data-tool": t.name, "data-ranks": Object.keys(t.ranks || {}).join(" ") },
          h("div", { class: "row" },
            h("code", {}, t.name), h("span", { class: "muted" }, t.app === "engine" ? "operation" : `app ${t.app}`),
            h("span", { class: "badge" }, `score ${scoreText(t.score)}`),
            h("span", { class: "hit-ranks", title: "the rankings that found it, and its place in each" }, ranksText(t.ranks))),
          (t.words || []).length ? h("p", { class: "muted tool-words" }, "words: ", t.words.map((w) => h("mark", {}, w))) : null,
          h("p", {}, (t.description || "").split("\n")[0])))));
    } catch (e) { out.replaceChildren(h("p", { class: "error" }, errorText(e))); }
  });
  return h("section", {}, form, out);
}

async function toolsView() {
  const v = await api("apps/tools");
  if (state.view !== "tools") return;
  const groups = [];
  let cur = null;
  for (const t of v.tools) {
    if (!cur || cur.app !== t.app) groups.push((cur = { app: t.app, tools: [] }));
    cur.tools.push(t);
  }
  // The owner sees each tool's last hour (stats.js): in a table, and on the tool's card.
  const statLines = new Map();
  const stats = state.owner ? statsSection((byTool) => {
    for (const [name, line] of statLines) { const t = byTool.get(name); if (t) { line.textContent = statsLine(t); line.hidden = false; } }
  }) : null;
  show(h("h1", {}, "Tools"), toolSearch(), stats, h("p", { class: "muted" }, `${v.tools.length} tools, in the order agents see them: the engine's operations, then each app's.`),
    groups.map((g) => h("section", {}, h("h2", {}, g.app === "engine" ? "Operations" : `App ${g.app}`),
      g.tools.map((t) => h("details", { class: "card tool", "data-tool": t.name },
        h("summary", {}, h("code", {}, t.name), h("span", { class: "muted" }, ` — ${(t.description || "").split("\n")[0]}`)),
        (() => { const line = h("p", { class: "tool-stats muted", hidden: true }); statLines.set(t.name, line); return line; })(),
        (t.description || "").includes("\n") ? h("p", { class: "tool-more" }, t.description.split("\n").slice(1).join("\n").trim()) : null,
        h("details", {}, h("summary", {}, "input schema"), h("pre", {}, json(t.inputSchema))),
        tryForm(t))))),
    v.instructions ? h("details", {}, h("summary", {}, "instructions for agents"), h("pre", {}, v.instructions)) : null);
}

// Live ----------------------------------------------------------------------------------------

function actorText(a) {
  if (!a) return "";
  const who = [a.harness, a.model].filter(Boolean).join(" / ") || a.label || a.token || "";
  const via = a.app ? `${who} via ${a.app}` : who;
  return a.caller ? `${via} for ${a.caller}` : via;
}

function stopLive() {
  if (state.live) { state.live.abort.abort(); state.live = null; }
}

/** The kinds of change Live shows. */
const LIVE_OPS = ["insert", "update", "delete", "create_table", "alter_table", "drop_table", "undo", "restore", "settings", "hand_edit", "tool_call", "app"];
/** How many earlier events Live opens with. */
const LIVE_HISTORY = 50;

/** The feed's last seq (the health answer) and the events of LIVE_OPS among the last 1,000
 * changes before it, oldest first, at most LIVE_HISTORY; none if the feed cannot say. */
async function recentEvents() {
  try {
    const r = await fetch("/datanotes/health", { headers: { Authorization: `Bearer ${state.token}` } });
    const seq = Number((await r.json()).seq);
    if (!Number.isFinite(seq)) return { seq: null, changes: [] };
    const page = await api("changes", { since: Math.max(0, seq - 1000), limit: 1000, ops: LIVE_OPS });
    const changes = (page.changes || []).filter((c) => c.seq <= seq);
    return { seq, changes: changes.slice(-LIVE_HISTORY) };
  } catch (_) {
    // History vacuumed, or a token that may not read the feed: Live starts from now.
    return { seq: null, changes: [] };
  }
}

/** Reads the SSE feed with fetch (EventSource sends no Authorization header), after seq `from`
 * (null: from now). */
async function readFeed(live, onChange, from = null) {
  let last = from;
  while (!live.abort.signal.aborted) {
    try {
      const headers = { Authorization: `Bearer ${state.token}`, Accept: "text/event-stream" };
      if (last !== null) headers["Last-Event-ID"] = String(last);
      const r = await fetch(`/datanotes/changes/stream?ops=${LIVE_OPS.join(",")}`, { headers, signal: live.abort.signal });
      if (r.status === 401) { signOut("Token refused"); return; }
      if (!r.ok) throw new ApiError(r.status, await r.json().catch(() => ({})));
      live.status("connected");
      const reader = r.body.pipeThrough(new TextDecoderStream()).getReader();
      let buf = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += value;
        let i;
        while ((i = buf.indexOf("\n\n")) >= 0) {
          const block = buf.slice(0, i);
          buf = buf.slice(i + 2);
          let data = "";
          for (const line of block.split("\n")) {
            if (line.startsWith("data:")) data += line.slice(5).replace(/^ /, "");
            else if (line.startsWith("id:")) last = line.slice(3).trim();
          }
          if (data && data !== "heartbeat") {
            try { onChange(JSON.parse(data)); } catch (_) { /* a heartbeat or a partial line */ }
          }
        }
      }
    } catch (e) {
      if (live.abort.signal.aborted) return;
      live.status(`disconnected (${e.message}); reconnecting…`);
    }
    await new Promise((r) => setTimeout(r, 1000));
  }
}

/** A call this slow (ms) is marked in Live. */
const SLOW_MS = 1000;

/** A call's trace: its ID, copied on a click, to look it up in the owner's tracing tool. */
function traceLink(id) {
  const b = h("button", { type: "button", class: "trace", "data-trace": id, title: `trace ${id} (click to copy)` }, `trace ${id.slice(0, 8)}…`);
  b.addEventListener("click", async () => {
    try { await navigator.clipboard.writeText(id); b.textContent = "copied"; } catch (_) { b.textContent = id; }
  });
  return h("div", {}, b);
}

async function liveView() {
  stopLive();
  const live = { abort: new AbortController(), pending: [], shown: 0, total: 0 };
  state.live = live;
  const status = h("span", { class: "muted", id: "live-status" }, "connecting…");
  live.status = (s) => { status.textContent = s; };
  const appSel = h("select", { id: "filter-app" }, h("option", { value: "" }, "every app"));
  const tableSel = h("select", { id: "filter-table" }, h("option", { value: "" }, "every table"));
  const count = h("span", { class: "muted", id: "live-count" }, "0 events");
  const earlier = h("span", { class: "muted", id: "live-history" });
  const body = h("tbody", { id: "live-rows" });
  const seen = { apps: new Set(), tables: new Set() };
  try {
    for (const t of (await api("list_tables")).tables) { seen.tables.add(t.table); tableSel.append(h("option", { value: t.table }, t.table)); }
    for (const t of (await api("apps/tools")).tools) if (t.app !== "engine" && !seen.apps.has(t.app)) { seen.apps.add(t.app); appSel.append(h("option", { value: t.app }, t.app)); }
  } catch (_) { /* filters fill as events come */ }
  // An `app` event (an install, upgrade or rollback by reference) names its app in `call.app`.
  const appOf = (c) => (c.op === "app" && c.call ? c.call.app
    : c.call && c.call.servedBy && c.call.servedBy !== "engine" ? c.call.servedBy : (c.actor && c.actor.app) || "");
  const visible = (tr) => (!appSel.value || tr.dataset.app === appSel.value) && (!tableSel.value || tr.dataset.table === tableSel.value);
  const refilter = () => { for (const tr of body.rows) tr.hidden = !visible(tr); };
  appSel.addEventListener("change", refilter);
  tableSel.addEventListener("change", refilter);
  const MAX = 500;
  // A change's row; `past`: one of the events before Live opened (marked, and not counted).
  const rowOf = (c, past) => {
      const app = appOf(c);
      const table = c.table || "";
      if (app && !seen.apps.has(app)) { seen.apps.add(app); appSel.append(h("option", { value: app }, app)); }
      if (table && !seen.tables.has(table)) { seen.tables.add(table); tableSel.append(h("option", { value: table }, table)); }
      const event = c.op === "app" ? c.call : null;
      const call = event ? null : c.call;
      const what = event ? `${event.action} ${event.app}` : call ? call.tool : `${c.op}${table ? ` ${table}` : ""}${c.row ? `/${c.row}` : ""}`;
      const summary = event ? [event.version && `version ${event.version}`, event.digest && `${String(event.digest).slice(0, 19)}…`, event.signature].filter(Boolean).join(" · ")
        : call && call.summary;
      const ok = call ? call.ok : true;
      const slow = call && Number(call.durationMs) >= SLOW_MS;
      const tr = h("tr", { "data-op": c.op, "data-seq": c.seq, class: [slow ? "slow" : null, past ? "past" : null].filter(Boolean).join(" ") || null },
        h("td", {}, new Date(c.ts).toLocaleTimeString()),
        h("td", {}, actorText(c.actor)),
        h("td", {}, h("code", {}, what), summary ? h("div", { class: "muted" }, summary) : null),
        h("td", { class: ok ? "ok" : "error" }, ok ? "ok" : "error"),
        h("td", {}, call ? `${Number(call.durationMs).toFixed(1)} ms` : "", call && call.traceId ? traceLink(call.traceId) : null));
      tr.dataset.app = app;
      tr.dataset.table = table;
      tr.hidden = !visible(tr);
      return tr;
  };
  const flush = () => {
    live.scheduled = false;
    if (!live.pending.length) return;
    const batch = live.pending.splice(0);
    const frag = document.createDocumentFragment();
    for (let i = batch.length - 1; i >= Math.max(0, batch.length - MAX); i--) frag.append(rowOf(batch[i], false));
    body.prepend(frag);
    while (body.rows.length > MAX) body.deleteRow(body.rows.length - 1);
    count.textContent = `${live.total} events since opened (newest ${MAX} shown)`;
  };
  show(h("h1", {}, "Live"),
    h("div", { class: "row" }, h("label", { for: "filter-app" }, "App"), appSel, h("label", { for: "filter-table" }, "Table"), tableSel, status, count, earlier),
    h("div", { class: "scroll live" }, h("table", {}, h("thead", {}, h("tr", {}, h("th", {}, "time"), h("th", {}, "actor"), h("th", {}, "tool or operation"), h("th", {}, "result"), h("th", {}, "duration"))), body)));
  // The last events before now, marked as earlier, then the stream from right after them.
  const recent = await recentEvents();
  if (state.live !== live) return;
  const past = document.createDocumentFragment();
  for (let i = recent.changes.length - 1; i >= 0; i--) past.append(rowOf(recent.changes[i], true));
  body.append(past);
  earlier.textContent = recent.changes.length ? `· ${recent.changes.length} earlier events below, marked` : "";
  readFeed(live, (c) => {
    live.total++;
    live.pending.push(c);
    if (live.pending.length > MAX) live.pending.splice(0, live.pending.length - MAX);
    if (!live.scheduled) { live.scheduled = true; requestAnimationFrame(flush); setTimeout(flush, 100); }
  }, recent.seq);
}

// Tables --------------------------------------------------------------------------------------

const PAGE = 25;

async function tablesView() {
  const parts = location.hash.slice(1).split("/");
  const table = parts[1] ? decodeURIComponent(parts[1]) : null;
  const rowId = parts[2] ? decodeURIComponent(parts[2]) : null;
  const tables = (await api("list_tables")).tables;
  if (state.view !== "tables") return;
  const list = h("ul", { id: "table-list" }, tables.map((t) => h("li", {}, h("a", { href: `#tables/${encodeURIComponent(t.table)}` }, t.table), h("span", { class: "muted" }, ` — ${t.rows} rows${t.description ? ` · ${t.description}` : ""}`))));
  if (!table) { show(h("h1", {}, "Tables"), searchCard(tables, null), list); return; }
  const d = await api("describe_table", { table });
  if (state.view !== "tables") return;
  const cols = Object.entries(d.columns || {});
  const rowsBox = h("div", { id: "rows" });
  const hist = h("div", { id: "history" });
  show(h("h1", {}, "Tables"), searchCard(tables, table), h("details", {}, h("summary", {}, "all tables"), list),
    h("section", { class: "card" }, h("h2", {}, table), d.description ? h("p", { class: "muted" }, d.description) : null,
      h("div", { class: "scroll" }, h("table", { id: "columns" }, h("thead", {}, h("tr", {}, h("th", {}, "column"), h("th", {}, "type"), h("th", {}, "constraints"))),
        h("tbody", {}, cols.map(([n, c]) => h("tr", {}, h("td", {}, n, c.description ? h("div", { class: "muted" }, c.description) : null), h("td", {}, c.type), h("td", {}, ruleText(c))))))),
      h("p", {}, `${d.rows} rows · ${(d.invalid || []).length} invalid`),
      (d.invalid || []).length ? h("ul", { class: "error", id: "invalid" }, d.invalid.map((x) => h("li", {}, `${x.id}: ${x.error}`))) : null,
      h("p", { id: "table-tools" }, "tools that declare it: ", (d.tools || []).length ? d.tools.map((t) => `${t.name} (${t.app})`).join(", ") : "none"),
      tableSemantic(d)),
    h("section", { class: "card" }, h("h2", {}, "Rows"), rowsBox), hist);
  const colNames = cols.map(([n]) => n);
  const page = async (offset) => {
    const r = await api("select_rows", { table, limit: PAGE, offset });
    const total = r.total ?? r.rows.length;
    rowsBox.replaceChildren(
      h("div", { class: "scroll" }, h("table", {}, h("thead", {}, h("tr", {}, h("th", {}, "id"), colNames.map((n) => h("th", {}, n)), h("th", {}, ""))),
        h("tbody", {}, r.rows.map((row) => h("tr", {}, h("td", {}, row.id), colNames.map((n) => h("td", {}, fmt(row.values[n]))),
          h("td", { class: "actions" },
            h("button", { type: "button", class: "history", onclick: () => history_(table, row.id, hist) }, "History"),
            h("button", { type: "button", class: "similar", onclick: () => history_(table, row.id, hist, true) }, "Similar"))))))),
      h("div", { class: "row" },
        h("button", { type: "button", disabled: offset === 0, onclick: () => page(Math.max(0, offset - PAGE)) }, "Previous"),
        h("span", { class: "muted" }, `${total ? offset + 1 : 0}–${offset + r.rows.length} of ${total}`),
        h("button", { type: "button", disabled: offset + r.rows.length >= total, onclick: () => page(offset + PAGE) }, "Next")));
  };
  await page(0);
  // #tables/TABLE/ID (a search hit, a similar note): the row itself, as its History button shows it.
  if (rowId !== null) await history_(table, rowId, hist);
}

/** A column's rules in words: "required · unique · 1 to 200 characters · one of a, b". */
function ruleText(c) {
  const unit = { text: "characters", list: "items" }[c.type];
  const value = (x) => (typeof x === "string" ? x : JSON.stringify(x));
  const bound = c.min !== undefined && c.max !== undefined ? `${value(c.min)} to ${value(c.max)}`
    : c.min !== undefined ? `at least ${value(c.min)}` : c.max !== undefined ? `at most ${value(c.max)}` : null;
  return [c.required ? "required" : null, c.unique ? "unique" : null,
    bound ? (unit ? `${bound} ${unit}` : bound) : null,
    c.pattern ? `matches ${c.pattern}` : null,
    c.values ? `one of ${c.values.join(", ")}` : null,
    c.table ? `links to ${c.table}` : null,
    c.default !== undefined ? `default ${value(c.default)}` : null].filter(Boolean).join(" · ");
}

/** A duration in ms as people say it: "500 ms", "30 s", "3 min". */
function duration(ms) {
  const n = Number(ms);
  if (!Number.isFinite(n)) return String(ms);
  if (n < 1000) return `${n} ms`;
  if (n < 60000 || n % 60000) return `${+(n / 1000).toFixed(1)} s`;
  return `${n / 60000} min`;
}

/** A size in bytes as people say it: "512 B", "64 KiB", "1 MiB". */
function size(bytes) {
  const n = Number(bytes);
  if (!Number.isFinite(n)) return String(bytes);
  for (const [u, k] of [["GiB", 1 << 30], ["MiB", 1 << 20], ["KiB", 1 << 10]]) if (n >= k) return `${+(n / k).toFixed(1)} ${u}`;
  return `${n} B`;
}

function fmt(v) {
  if (v === undefined || v === null) return "";
  return typeof v === "object" ? JSON.stringify(v) : String(v);
}

/** A row: its values and body, the notes similar to it (similar_notes, on demand or at once),
 * and its history: the table's migrations (newest first) that concern the row. */
async function history_(table, id, box, similar = false) {
  box.replaceChildren(h("p", { class: "muted" }, "reading the journal…"));
  const found = [];
  let before;
  for (let i = 0; i < 10 && found.length < 100; i++) {
    const args = { table, limit: 500 };
    if (before !== undefined) args.before = before;
    const m = (await api("list_migrations", args)).migrations;
    found.push(...m.filter((x) => x.row === id));
    if (m.length < 500) break;
    before = m[m.length - 1].seq;
  }
  const row = await api("get_row", { table, id }).catch(() => null);
  const sim = h("div", { id: "similar" });
  box.replaceChildren(h("section", { class: "card" },
    h("div", { class: "row" }, h("h2", {}, `History of ${id}`),
      h("button", { type: "button", class: "similar", onclick: () => similarNotes(table, id, sim) }, "Similar notes")),
    row ? h("details", { class: "row-values" }, h("summary", {}, `${table} / ${id} (version ${row.version})`),
      h("pre", {}, json(row.values), row.body ? `\n\n${row.body}` : "")) : null,
    sim,
    found.length ? h("div", { class: "scroll" }, h("table", {}, h("thead", {}, h("tr", {}, h("th", {}, "seq"), h("th", {}, "time"), h("th", {}, "op"), h("th", {}, "actor"), h("th", {}, "after"))),
      h("tbody", {}, found.map((x) => h("tr", {}, h("td", {}, x.seq), h("td", {}, new Date(x.ts).toLocaleString()), h("td", {}, x.op), h("td", {}, actorText(x.actor)), h("td", {}, h("code", {}, x.after ? JSON.stringify(x.after.values || x.after) : "deleted")))))))
      : h("p", { class: "muted" }, "no migrations for this row")));
  box.scrollIntoView({ block: "nearest" });
  if (similar) await similarNotes(table, id, sim);
}

// ---- start ---------------------------------------------------------------------------------

$("#signin-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const t = $("#token-input").value.trim();
  $("#token-input").value = "";
  if (await signIn(t)) sessionStorage.setItem(KEY, t);
  else if (!$("#signin-error").textContent) signOut("Token refused: check that you pasted the whole token.");
});
$("#signout").addEventListener("click", () => signOut());
// A sign-in link opened in a tab that shows the console already: only the fragment changes.
window.addEventListener("hashchange", () => {
  if (/(?:^#|&)token=/.test(location.hash)) signIn(takeToken()).then((ok) => ok || signOut($("#signin-error").textContent || "Token refused."));
  else route();
});

const saved = takeToken();
if (saved) signIn(saved).then((ok) => ok || signOut($("#signin-error").textContent || "Token refused."));
else signOut();
