// The console's grants, in the Apps view (the owner's): the web agents the owner allowed through
// OAuth (the consent page), each with the rights chosen there, and a Revoke button. Loaded before
// app.js, whose helpers (h, api, ask, tell, errorBox, age) it calls only once the page runs.
"use strict";

/** A grant's rights in the words of an app card's. */
function grantRights(r) {
  r = r || {};
  return [
    `read: ${r.read && r.read.length ? r.read.join(", ") : "none"}`,
    `write: ${r.write && r.write.length ? r.write.join(", ") : "none"}`,
    r.ddl ? "ddl" : null,
    r.maintain ? "maintain" : null,
    `tools it may call: ${r.call_tools && r.call_tools.length ? r.call_tools.join(", ") : "none"}`,
    r.tool_listing === "search" ? `listed: a search${r.pinned_tools && r.pinned_tools.length ? ` and ${r.pinned_tools.join(", ")}` : ""}` : null,
  ].filter(Boolean).join(" · ");
}

function grantCard(g, reload) {
  const when = (iso) => (iso ? `${age(iso)} (${new Date(iso).toLocaleString()})` : "never");
  return h("article", { class: "card grant", "data-grant": g.id },
    h("div", { class: "row" },
      h("h3", {}, g.client_name || g.client_id), h("span", { class: "badge" }, "OAuth"),
      h("span", { class: "muted" }, `created ${when(g.created)} · last used ${when(g.last_used)}`)),
    h("div", {}, "client: ", h("code", {}, g.client_id), g.client_origin ? [" · origin ", h("code", {}, g.client_origin)] : null),
    g.redirect_uri ? h("div", { class: "muted" }, "redirect: ", h("code", {}, g.redirect_uri)) : null,
    h("div", { class: "rights" }, "rights: ", grantRights(g.rights)),
    h("div", { class: "row actions" },
      h("button", { type: "button", class: "revoke danger owner-only", onclick: () => revokeGrant(g, reload) }, "Revoke")));
}

async function revokeGrant(g, reload) {
  const who = g.client_name || g.client_id;
  if (!(await ask(h("p", {}, `Revoke the grant of ${who}? Its tokens stop working at once; the agent must ask again.`)))) return;
  try { await api("grants/revoke", { id: g.id }); } catch (e) { await tell(errorBox(e)); }
  reload();
}

/** The Apps view's section of grants (the owner's): shown at once, filled when the list comes. */
function grantsSection() {
  const list = h("div", { id: "grants" }, h("p", { class: "muted" }, "reading the grants…"));
  const reload = async () => {
    try {
      const grants = (await api("grants/list")).grants || [];
      list.replaceChildren(...(grants.length ? grants.map((g) => grantCard(g, reload))
        : [h("p", { class: "muted" }, "No grants. A web agent that connects through OAuth asks you on a consent page; what you allow it is listed here.")]));
    } catch (e) { list.replaceChildren(errorBox(e)); }
  };
  reload();
  return h("section", { class: "owner-only", id: "grants-section" }, h("h2", {}, "Agents allowed through OAuth"), list);
}
