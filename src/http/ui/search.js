// The console's search, on the Tables view: search_notes (full-text, semantic or both), a row's
// similar notes (similar_notes) and the semantic index's state. Loaded before app.js, whose
// helpers (h, api, errorBox, mib, route, state) it calls only once the page runs.
"use strict";

const MODES = ["hybrid", "text", "semantic"];
const RANKINGS = ["text", "semantic"];

/** What the search box holds and showed last: kept across the Tables view's redraws (opening a
 * hit redraws the view), with the semantic index's state as last read. */
const searchKept = { query: "", mode: "hybrid", scope: "", limit: 20, answer: null, error: null, semantic: null };
let searchSeq = 0;
let statusTimer = null;

/** A snippet's `**word**` marks (from full-text) as <mark>; every piece of text stays text. */
function marked(snippet) {
  const parts = String(snippet ?? "").split("**");
  // An odd number of marks: the last one is not a mark but the note's own text.
  if (parts.length % 2 === 0) parts.splice(-2, 2, `${parts[parts.length - 2]}**${parts[parts.length - 1]}`);
  return parts.map((t, i) => (i % 2 ? h("mark", {}, t) : t)).filter((t) => t !== "");
}

/** "text #2 · semantic #1": the rankings that found a hit, and its place in each. */
function ranksText(ranks) {
  const order = (k) => (RANKINGS.includes(k) ? RANKINGS.indexOf(k) : RANKINGS.length);
  return Object.keys(ranks || {}).sort((a, b) => order(a) - order(b)).map((k) => `${k} #${ranks[k]}`).join(" · ");
}

function scoreText(s) {
  return typeof s === "number" && Number.isFinite(s) ? String(Number(s.toPrecision(3))) : String(s ?? "");
}

/** One hit: its id opens the row (its table, the row and its history), as the rows' list does. */
function hitItem(x) {
  const href = `#tables/${encodeURIComponent(x.table)}/${encodeURIComponent(x.id)}`;
  const ranks = ranksText(x.ranks);
  return h("li", { class: "hit", "data-table": x.table, "data-id": x.id, "data-ranks": Object.keys(x.ranks || {}).join(" ") },
    h("div", { class: "row" },
      h("a", { href, class: "hit-id", onclick: (ev) => { if (location.hash === href) { ev.preventDefault(); route(); } } }, x.id),
      h("span", { class: "muted hit-table" }, x.table),
      h("span", { class: "badge hit-score", title: "score" }, `score ${scoreText(x.score)}`),
      ranks ? h("span", { class: "hit-ranks", title: "the rankings that found it, and its place in each" }, ranks) : null),
    x.snippet ? h("p", { class: "snippet" }, marked(x.snippet)) : null);
}

/** How far the index has read the journal. */
function indexedText(a) {
  const parts = [];
  if (a.indexedThrough != null) parts.push(`indexed through seq ${a.indexedThrough}`);
  if (a.pending != null) parts.push(a.pending ? `${a.pending} change${a.pending === 1 ? "" : "s"} pending` : "nothing pending");
  return parts.join(", ");
}

/** An answer of search_notes or similar_notes: its mode, note, how far it is indexed, its hits. */
function answerView(a, none) {
  const hits = a.hits || [];
  return [
    h("div", { class: "row answer", "data-mode": a.mode || "" },
      a.mode ? h("span", { class: "badge answer-mode" }, `mode: ${a.mode}`) : null,
      h("span", { class: "muted" }, [`${hits.length} hit${hits.length === 1 ? "" : "s"}`, indexedText(a)].filter(Boolean).join(" · "))),
    a.note ? h("p", { class: "note", role: "note" }, a.note) : null,
    hits.length ? h("ol", { class: "hits" }, hits.map(hitItem)) : h("p", { class: "muted" }, none),
  ];
}

function modelText(m) {
  if (!m) return "";
  if (typeof m === "string") return m.split("/").filter(Boolean).pop() || m;
  return m.name || m.id || JSON.stringify(m);
}

/** The semantic index's state: `status` first (ready, building 120/1000, unavailable: …). */
function semanticText(s) {
  if (!s) return "";
  const parts = [`semantic index: ${s.status || s.state || "unknown"}`];
  if (s.model) parts.push(`model ${modelText(s.model)}`);
  if (s.rows != null) parts.push(`${s.rows} rows, ${s.chunks ?? 0} chunks${s.memoryBytes != null ? `, ${mib(s.memoryBytes)}` : ""}`);
  const through = indexedText(s);
  if (through) parts.push(through);
  if (s.journalSeq != null) parts.push(`journal at seq ${s.journalSeq}`);
  return parts.join(" · ");
}

function showSemantic(el = document.getElementById("semantic-status")) {
  if (!el) return;
  const s = searchKept.semantic;
  el.hidden = !s;
  el.dataset.state = (s && s.state) || "";
  el.textContent = semanticText(s);
}

/** The state an answer carries: merged into what health said (model, rows, memory). */
function noteSemantic(a) {
  if (!a || !a.semantic) return;
  searchKept.semantic = { ...(searchKept.semantic || {}), ...a.semantic, indexedThrough: a.indexedThrough, pending: a.pending, journalSeq: null };
  showSemantic();
}

/** The whole state from `GET /datanotes/health` (the owner's: others get none), read again every
 * 2 s while the index builds and the status is shown. */
async function readSemantic() {
  clearTimeout(statusTimer);
  let s = null;
  let seq = null;
  try {
    const r = await fetch("/datanotes/health", { headers: { Authorization: `Bearer ${state.token}` } });
    const v = r.ok ? await r.json().catch(() => ({})) : {};
    s = v.semantic || null;
    seq = v.seq ?? null;
  } catch (_) { /* shown at the next search */ }
  if (!s) return;
  // Health says how far the journal is (seq), not how many rows wait: behind while it is ahead.
  const behind = seq != null && s.indexedThrough != null && s.indexedThrough < seq;
  searchKept.semantic = { ...s, journalSeq: behind ? seq : null };
  showSemantic();
  if (s.state === "building" || behind) {
    statusTimer = setTimeout(() => { if (document.getElementById("semantic-status")) readSemantic(); }, 2000);
  }
}

async function runSearch(out) {
  const k = searchKept;
  if (!k.query.trim()) return;
  const body = { query: k.query, mode: k.mode, limit: k.limit };
  if (k.scope) body.tables = [k.scope];
  const n = ++searchSeq;
  out.setAttribute("aria-busy", "true");
  try {
    const a = await api("search_notes", body);
    if (n !== searchSeq) return;
    k.answer = a;
    k.error = null;
    noteSemantic(a);
  } catch (e) {
    if (n !== searchSeq) return;
    k.answer = null;
    k.error = e;
  }
  out.removeAttribute("aria-busy");
  showAnswer(out);
}

function showAnswer(out) {
  const k = searchKept;
  if (k.error) out.replaceChildren(errorBox(k.error));
  else if (k.answer) out.replaceChildren(...answerView(k.answer, "no note matches").filter(Boolean));
  else out.replaceChildren();
}

/** The search box of the Tables view: a query, a mode, all tables or one. */
function searchCard(tables, current) {
  const k = searchKept;
  if (k.scope && !tables.some((t) => t.table === k.scope)) k.scope = "";
  const out = h("div", { id: "search-results", role: "status" });
  const query = h("input", { id: "search-query", name: "query", type: "search", required: true, autocomplete: "off", placeholder: "words, or what the note is about", value: k.query });
  const mode = h("select", { id: "search-mode", name: "mode" }, MODES.map((m) => h("option", { value: m, selected: m === k.mode }, m)));
  const scope = h("select", { id: "search-scope", name: "scope" }, h("option", { value: "" }, "all tables"),
    tables.map((t) => h("option", { value: t.table, selected: t.table === k.scope }, t.table === current ? `${t.table} (this table)` : t.table)));
  const read = () => { k.query = query.value; k.mode = mode.value; k.scope = scope.value; };
  const f = h("form", { class: "search", id: "search-form", role: "search" },
    h("div", { class: "grow" }, h("label", { for: "search-query" }, "Search notes"), query),
    h("div", {}, h("label", { for: "search-mode" }, "Mode"), mode),
    h("div", {}, h("label", { for: "search-scope" }, "In"), scope),
    h("div", {}, h("button", { type: "submit", class: "primary" }, "Search")));
  f.addEventListener("submit", (ev) => { ev.preventDefault(); read(); runSearch(out); });
  // Another mode or scope asks again at once.
  for (const s of [mode, scope]) s.addEventListener("change", () => { read(); if (k.query.trim()) runSearch(out); });
  const status = h("p", { class: "muted", id: "semantic-status", hidden: true });
  const card = h("section", { class: "card", id: "search" }, f, status, out);
  showAnswer(out);
  showSemantic(status);
  readSemantic();
  return card;
}

/** The notes nearest in meaning to a row (similar_notes), in `box`. */
async function similarNotes(table, id, box) {
  const head = h("h3", {}, `Similar to ${id}`);
  box.replaceChildren(head, h("p", { class: "muted" }, "looking for similar notes…"));
  try {
    const a = await api("similar_notes", { table, id, limit: 10 });
    noteSemantic(a);
    box.replaceChildren(head, ...answerView(a, "no similar note").filter(Boolean));
  } catch (e) {
    box.replaceChildren(head, errorBox(e));
  }
}

/** describe_table's `semantic`: whether the table is in the index, which columns, its state. */
function tableSemantic(d) {
  const s = d.semantic;
  if (!s) return null;
  const cols = (s.columns || []).join(", ");
  return h("p", { id: "table-semantic", "data-enabled": String(!!s.enabled) }, "semantic index: ",
    s.enabled ? `on${cols ? ` (${cols})` : ""}` : "off", s.status ? ` · ${s.status}` : "");
}
