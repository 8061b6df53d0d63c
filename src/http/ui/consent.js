// The consent page (GET /oauth/authorize, rendered by the server): a web agent asks for access;
// the owner signs in with the owner token (kept in this page's memory only, never stored),
// chooses the rights the agent gets (the vocabulary of an app entry: tables it may read and write,
// schema changes, maintenance, the tools it may call) and allows or denies. The answer sends the browser
// back to the agent's redirect_uri.
"use strict";

(() => {
  // h() and $() are in dom.js.

  // The page's parts, as the server's template (src/http/ui/consent.html) has them.
  const root = $("#consent");
  const request = root.dataset.request || "";
  const errorBox = $("#consent-error");
  const signin = $("#consent-signin-form");
  const form = $("#consent-form");
  form.hidden = true;
  const readsPart = $("#consent-reads");
  const tablesPart = $("#consent-tables");
  const toolsPart = $("#consent-tools");
  $("#consent-deny").addEventListener("click", () => decide("deny"));

  /** The token, in memory only: gone when the page is. */
  let token = null;

  function fail(message, hint) {
    errorBox.className = "error";
    errorBox.textContent = hint ? `${message} (${hint})` : message;
  }

  /** A call with the owner token: [status, answer]. */
  async function call(method, url, body) {
    const init = { method, headers: { Authorization: `Bearer ${token}` } };
    if (body !== undefined) {
      init.headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    const r = await fetch(url, init);
    return [r.status, await r.json().catch(() => ({}))];
  }
  const errorOf = (status, v) => {
    const e = (v && v.error) || {};
    return [e.message || `the server answered HTTP ${status}`, e.hint || ""];
  };

  // ---- sign-in --------------------------------------------------------------------------------

  signin.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const input = $("#consent-token");
    const t = input.value.trim();
    input.value = "";
    if (!t) return;
    fail("");
    const button = signin.querySelector("button[type=submit], button:not([type])");
    if (button) button.disabled = true;
    try {
      if (!(await signIn(t))) token = null;
    } catch (e) {
      token = null;
      fail(`Cannot reach the server: ${e.message}`);
    }
    if (button) button.disabled = false;
  });

  async function signIn(t) {
    token = t;
    const [status, tables] = await call("POST", "/datanotes/list_tables/", {});
    if (status === 401) {
      fail("Token refused: paste the whole owner token (datanotes ui --database DIR prints it in its link).");
      return false;
    }
    if (status !== 200) {
      fail(...errorOf(status, tables));
      return false;
    }
    // Only the owner may give an agent access: an owner-only route says whether this is the owner.
    const [owner, ownerBody] = await call("POST", "/datanotes/apps/", {});
    if (owner === 401 || owner === 403) {
      fail("This is not the owner token: only the owner may allow an agent. Paste the owner token (datanotes ui --database DIR prints it in its link).");
      return false;
    }
    if (owner !== 200) {
      fail(...errorOf(owner, ownerBody));
      return false;
    }
    const [[ts, tools], [os, ops]] = await Promise.all([
      call("POST", "/datanotes/apps/tools/", {}),
      call("GET", "/datanotes/operations/"),
    ]);
    if (ts !== 200) {
      fail(...errorOf(ts, tools));
      return false;
    }
    const access = new Map(os === 200 ? (ops.operations || []).map((o) => [o.name, o.access]) : []);
    rightsForm((tables.tables || []).map((x) => x.table), tools.tools || [], access);
    ($("#consent-signin") || signin).hidden = true;
    form.hidden = false;
    return true;
  }

  // ---- the rights -----------------------------------------------------------------------------

  function box(name, value, checked, ...text) {
    return h("label", { class: "choice" }, h("input", { type: "checkbox", name, value, checked }), " ", ...text);
  }

  /** A description's first sentence, short. */
  function firstLine(d) {
    const l = String(d || "").split("\n")[0].split(/(?<=\.) /)[0];
    return l.length > 120 ? `${l.slice(0, 119)}…` : l;
  }

  function rightsForm(tables, tools, access) {
    // Unticked by default: the agent reads what its tools imply (below), and writes nothing.
    const schemas = [...new Set(tables.map((t) => t.split(".").slice(0, 2).join(".")))];
    readsPart.append(
      h("p", { class: "muted" }, "None ticked: every table if it may call a tool that reads rows (select_rows, get_row, search_notes, similar_notes, describe_table, list_migrations), else none. Its listings, resources, searches and the journal show only these tables."),
      ...schemas.map((p) => box("read", `${p}.*`, false, h("code", {}, `${p}.*`), " every table of ", p)),
      ...tables.map((t) => box("read", t, false, h("code", {}, t), " may read")),
      box("read", "*", false, "every table, also those created later (", h("code", {}, "*"), ")"));
    tablesPart.append(
      h("p", { class: "muted" }, "Writing needs the write tools too (insert_row, update_row, delete_row)."),
      ...(tables.length ? tables.map((t) => box("write", t, false, h("code", {}, t), " may write")) : [h("p", { class: "muted" }, "No tables yet.")]),
      box("write", "*", false, "every table, also those created later (", h("code", {}, "*"), ")"));
    // The engine's operations: those that only read are ticked; writes and the apps' tools not.
    const reads = [];
    const writes = [];
    const apps = new Map();
    for (const t of tools) {
      const desc = firstLine(t.description);
      const about = desc ? h("span", { class: "muted" }, ` — ${desc}`) : null;
      if (t.app === "engine") {
        const a = access.get(t.name) || "";
        const badge = a && a !== "read" ? [" ", h("span", { class: "badge" }, a.replace(/_/g, " "))] : null;
        (a === "read" ? reads : writes).push(box("call_tools", t.name, a === "read", h("code", {}, t.name), badge, about));
      } else {
        if (!apps.has(t.app)) apps.set(t.app, []);
        apps.get(t.app).push(box("call_tools", t.name, false, h("code", {}, t.name), about));
      }
    }
    const tickAll = (on) => { for (const b of toolsPart.querySelectorAll("input[name=call_tools]")) b.checked = on; };
    const group = (title, items, note) => (items.length ? h("div", { class: "tool-group" }, h("h3", {}, title), note ? h("p", { class: "muted" }, note) : null, items) : null);
    toolsPart.append(...[
      tools.length ? h("div", { class: "row" },
        h("button", { type: "button", id: "consent-tools-all", onclick: () => tickAll(true) }, "Tick all tools"),
        h("button", { type: "button", id: "consent-tools-none", onclick: () => tickAll(false) }, "Untick all tools")) : h("p", { class: "muted" }, "No tools."),
      group("Operations that read", reads, "Ticked: they change nothing."),
      group("Operations that write or maintain", writes, "Each also needs the matching right above."),
      ...[...apps].map(([app, items]) => group(`App ${app}`, items)),
    ].filter(Boolean));
  }

  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    decide("allow");
  });

  // ---- the decision ---------------------------------------------------------------------------

  async function decide(decision) {
    if (!token) return;
    const picked = (name) => [...form.querySelectorAll(`input[name=${name}]:checked`)].map((x) => x.value);
    const body = {
      request,
      decision,
      write: picked("write"),
      ddl: Boolean($("#consent-ddl")?.checked),
      maintain: Boolean($("#consent-maintain")?.checked),
      call_tools: picked("call_tools"),
      read: picked("read"),
      tool_listing: form.querySelector("input[name=tool_listing]:checked")?.value || "all",
      pinned_tools: ($("#consent-pinned")?.value || "").split(/[\s,]+/).filter(Boolean),
    };
    const buttons = [...form.querySelectorAll("button")];
    for (const b of buttons) b.disabled = true;
    fail("");
    try {
      const [status, v] = await call("POST", "/oauth/authorize", body);
      if (status >= 200 && status < 300 && v.redirect) {
        errorBox.className = "muted";
        errorBox.textContent = decision === "allow" ? "Allowed: back to the agent…" : "Denied: back to the agent…";
        location.assign(v.redirect);
        return;
      }
      fail(...errorOf(status, v));
    } catch (e) {
      fail(`Cannot reach the server: ${e.message}`);
    }
    for (const b of buttons) b.disabled = false;
  }

  $("#consent-token")?.focus();
})();
