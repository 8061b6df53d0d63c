// The console's WASM apps by reference (the owner's, in the Apps view): a source (oci://… or
// https://…) is reviewed first as a plan (what the app is, who signed it, its tools, and the
// rights it asks next to those the owner ticks, none ticked at first), then installed with what
// was ticked; a WASM app's entry shows where it came from, with Upgrade and Roll back. Loaded
// before app.js, whose helpers (h, api, ask, tell, errorBox, age, appsView) it calls only once
// the page runs. Everything the server answers is shown as text, never as HTML.
"use strict";

const LIMITS = [
  ["memory_mb", "memory (MiB)"], ["cpu_ms", "CPU time per call (ms)"], ["timeout_ms", "time per call (ms)"],
  ["max_result_bytes", "largest result (bytes)"], ["max_instances", "instances at once"],
  ["idle_ms", "instance kept warm after a call (ms)"],
];

/** "sha256:8b0797c8d82f…" */
function shortDigest(d) {
  const s = String(d || "");
  const i = s.indexOf(":");
  return i < 0 ? `${s.slice(0, 12)}…` : `${s.slice(0, i + 1)}${s.slice(i + 1, i + 13)}…`;
}

function signatureLine(sig) {
  const s = sig || {};
  if (s.status === "signed") return `signed by ${s.key || "an unnamed key"}`;
  if (s.status === "untrusted") return "signed, but by no trusted key";
  return "unsigned";
}

function signatureBadge(sig) {
  const s = sig || {};
  const cls = s.status === "signed" ? " up" : s.status === "untrusted" ? " down" : "";
  return h("span", { class: `badge signature${cls}`, "data-status": s.status || "unsigned", title: s.detail || null }, signatureLine(s));
}

function sizeText(n) { return n >= 1e6 ? `${(n / 1e6).toFixed(1)} MB` : `${(n / 1e3).toFixed(1)} kB`; }

// ---- the plan --------------------------------------------------------------------------------

/** What differs between a right asked and the right granted: null, "not granted", "less", "more". */
function change(kind, asked, granted) {
  // A limit is a budget: only less than the app asked for is a difference (as the server says).
  if (kind === "limit") return asked !== undefined && granted !== undefined && granted < asked ? "less" : null;
  if (asked && !granted) return "not granted";
  if (!asked && granted) return "more";
  return null;
}

/** A plan as the owner reads it. Editable: each right asked (or granted) has a box (or a
 * number) the owner sets, ticked as the plan grants it (an install's: nothing; an upgrade's:
 * what the app has now); `grants()` answers what is ticked. Read-only: the rights granted. */
function planView(plan, editable) {
  const asked = plan.asked || {};
  const granted = plan.granted || {};
  const rows = [];
  const tbody = h("tbody", {});
  const summary = h("p", { class: "plan-summary", role: "status" });
  const refresh = () => {
    let n = 0;
    for (const r of rows) {
      const c = change(r.kind, r.asked, r.value());
      r.tr.classList.toggle("differs", Boolean(c));
      r.tr.dataset.change = c || "";
      r.cell.textContent = c || "";
      if (c) n++;
    }
    summary.textContent = n ? `${n} difference${n === 1 ? "" : "s"} between what it asks and what ${editable ? "you grant" : "it has now"} (marked)` : "it gets what it asks, nothing more";
    summary.classList.toggle("note", n > 0);
  };
  const row = (kind, right, label, askedV, grantedV, askedText) => {
    let control;
    let value;
    if (!editable) {
      control = kind === "limit" ? (grantedV === undefined ? "the default" : String(grantedV)) : grantedV ? "granted" : "not granted";
      value = () => grantedV;
    } else if (kind === "limit") {
      control = h("input", { type: "number", min: "0", step: "1", value: grantedV === undefined ? "" : String(grantedV), placeholder: "the default", "aria-label": `${label}: granted`, "data-limit": right.slice(7) });
      control.addEventListener("input", refresh);
      value = () => (control.value === "" ? undefined : Number(control.value));
    } else {
      const box = h("input", { type: "checkbox", "aria-label": `grant ${label}`, "data-grant": right, value: askedText });
      box.checked = Boolean(grantedV);
      box.addEventListener("change", refresh);
      control = h("label", { class: "tick" }, box, " grant");
      value = () => box.checked;
    }
    const cell = h("td", { class: "change" });
    const askedCell = kind !== "limit" ? (askedV ? "asked" : "not asked") : askedV === undefined ? "the default" : String(askedV);
    const tr = h("tr", { "data-right": right }, h("td", {}, label), h("td", {}, askedCell), h("td", {}, control), cell);
    rows.push({ kind, asked: kind === "limit" ? askedV : Boolean(askedV), value, tr, cell, right, item: askedText });
    tbody.append(tr);
  };
  for (const [key, label] of [["write", "write"], ["allow_hosts", "network"]]) {
    const a = asked[key] || [];
    const items = [...new Set([...a, ...(granted[key] || [])])];
    if (!items.length) tbody.append(h("tr", { "data-right": key }, h("td", {}, label), h("td", {}, "nothing asked"), h("td", {}, editable ? "" : "none"), h("td", { class: "change" })));
    for (const p of items) row("item", key, `${label}: ${p}`, a.includes(p), (granted[key] || []).includes(p), p);
  }
  row("bool", "ddl", "schema changes (ddl)", asked.ddl, granted.ddl, "ddl");
  row("bool", "maintain", "maintenance (maintain)", asked.maintain, granted.maintain, "maintain");
  const al = asked.limits || {};
  const gl = granted.limits || {};
  for (const [k, label] of LIMITS) if (k in al || k in gl) row("limit", `limits.${k}`, `limit: ${label}`, al[k], gl[k]);
  refresh();

  const m = plan.manifest;
  const el = h("div", { class: "plan" },
    h("dl", { class: "facts" },
      h("dt", {}, "source"), h("dd", {}, h("code", { class: "plan-source" }, plan.source)),
      h("dt", {}, "digest"), h("dd", {}, h("code", { class: "plan-digest", title: plan.digest }, plan.digest)),
      h("dt", {}, "size"), h("dd", {}, sizeText(plan.size || 0)),
      h("dt", {}, "signature"), h("dd", {}, signatureBadge(plan.signature), plan.signature && plan.signature.detail ? h("span", { class: "muted" }, ` ${plan.signature.detail}`) : null),
      h("dt", {}, "app"), h("dd", { class: "plan-manifest" }, m ? [m.name || "(no name)", m.version ? ` ${m.version}` : "", m.description ? h("span", { class: "muted" }, ` — ${m.description}`) : null] : h("span", { class: "muted" }, "it says nothing of itself (no manifest)"))),
    h("details", { class: "plan-tools", open: true }, h("summary", {}, `${(plan.tools || []).length} tools`),
      h("ul", {}, (plan.tools || []).map((t) => h("li", {}, h("code", {}, t.name), t.description ? h("span", { class: "muted" }, ` — ${t.description}`) : null)))),
    h("div", { class: "scroll" }, h("table", { class: "plan-rights" },
      h("thead", {}, h("tr", {}, h("th", {}, "right"), h("th", {}, "it asks"), h("th", {}, editable ? "you grant" : "it has now"), h("th", {}, "difference"))), tbody)),
    summary);
  const grants = () => {
    const g = { write: [], ddl: false, maintain: false, allow_hosts: [], limits: {} };
    for (const r of rows) {
      if (r.kind === "item" && r.value()) g[r.right].push(r.item);
      else if (r.kind === "bool") g[r.right] = r.value();
      else if (r.kind === "limit" && r.value() !== undefined && r.value() !== gl[r.right.slice(7)]) g.limits[r.right.slice(7)] = r.value();
    }
    return g;
  };
  const grantAll = () => {
    for (const r of rows) {
      const input = r.tr.querySelector("input");
      if (!input) continue;
      if (r.kind === "limit") input.value = r.asked === undefined ? "" : String(r.asked);
      else input.checked = r.asked;
    }
    refresh();
  };
  return { el, grants, grantAll };
}

// ---- install by reference ---------------------------------------------------------------------

function sourceForm() {
  const out = h("div", { id: "source-result", role: "status" });
  const planBox = h("div", { id: "source-plan" });
  const shaBox = h("div", { hidden: true }, h("label", { for: "source-sha256" }, "SHA-256 of the component (hex, required for a URL)"),
    h("input", { id: "source-sha256", name: "sha256", autocomplete: "off", pattern: "[0-9a-fA-F]{64}" }));
  const f = h("form", { class: "grid", id: "source-form" },
    h("div", { class: "wide" }, h("label", { for: "source-ref" }, "Source"), h("input", { id: "source-ref", name: "source", required: true, autocomplete: "off", placeholder: "oci://registry/repo:tag or https://host/app.wasm" })),
    h("div", {}, h("label", { for: "source-name" }, "Name (optional: the app's own)"), h("input", { id: "source-name", name: "name", pattern: "[a-z][a-z0-9_\\-]{0,63}" })),
    shaBox,
    h("div", {}, h("button", { type: "submit", class: "primary" }, "Review")));
  const isUrl = () => /^https?:\/\//i.test(f.source.value.trim());
  f.source.addEventListener("input", () => { shaBox.hidden = !isUrl(); f.sha256.required = isUrl(); });
  f.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const body = { source: f.source.value.trim() };
    if (f.name.value.trim()) body.name = f.name.value.trim();
    if (isUrl() && f.sha256.value.trim()) body.sha256 = f.sha256.value.trim().toLowerCase();
    planBox.replaceChildren();
    out.textContent = "fetching, checking and compiling the component (nothing is enabled yet)…";
    try {
      const v = await api("apps/create", body);
      out.replaceChildren();
      showPlan(v.plan, planBox, out, f);
    } catch (e) { out.replaceChildren(errorBox(e)); }
  });
  return h("section", { class: "card owner-only", id: "source-section" }, h("h2", {}, "Install from a registry or URL"),
    h("p", { class: "muted" }, "Review shows what the app is, who signed it, its tools and the rights it asks for; nothing runs until you install it with the rights you tick."),
    f, planBox, out);
}

function showPlan(plan, box, out, form) {
  const pv = planView(plan, true);
  const install = h("button", { type: "button", class: "primary", id: "source-install" }, "Install");
  install.addEventListener("click", async () => {
    const g = pv.grants();
    const body = { ...plan.confirm, ...g, digest: plan.digest, confirm: true };
    if (!Object.keys(g.limits).length) delete body.limits;
    install.disabled = true;
    out.textContent = "installing…";
    try {
      const v = await api("apps/create", body);
      const a = v.app;
      box.replaceChildren();
      out.replaceChildren(h("p", { class: "ok" }, `installed ${a.name} from ${plan.source} (${shortDigest(plan.digest)}): ${a.tools.length} tools (${a.tools.join(", ")})`),
        h("p", {}, "The app's token (shown once: copy it now):"), h("p", { class: "tok new-token" }, v.token));
      form.reset();
      form.sha256.required = false;
      form.sha256.parentElement.hidden = true;
      await appsView();
    } catch (e) { install.disabled = false; out.replaceChildren(errorBox(e)); }
  });
  box.replaceChildren(h("h3", {}, "Plan"), pv.el,
    h("div", { class: "row actions" },
      h("button", { type: "button", id: "source-grant-all", onclick: pv.grantAll }, "Grant all asked"),
      install,
      h("button", { type: "button", onclick: () => { box.replaceChildren(); out.replaceChildren(); } }, "Cancel")));
  box.scrollIntoView({ block: "nearest" });
}

// ---- an installed app's origin, upgrade and rollback -----------------------------------------

function originText(o) {
  return [o.version ? `version ${o.version}` : null, shortDigest(o.digest), o.source].filter(Boolean).join(", ");
}

/** Where a WASM app came from, and the version kept for a rollback. */
function originBlock(a) {
  const o = a.wasm.origin;
  const p = a.wasm.previous;
  const when = o && o.installed ? `installed ${age(o.installed)} (${new Date(o.installed).toLocaleString()})` : null;
  return h("div", { class: "origin" },
    o ? h("div", {}, "from ", h("code", { class: "origin-source" }, o.source), " · ", h("code", { class: "origin-digest", title: o.digest }, shortDigest(o.digest)),
      o.version ? ` · version ${o.version}` : "", " · ", signatureBadge(o.signature), when ? ` · ${when}` : "")
      : h("div", { class: "muted" }, "from a file or an upload"),
    p ? h("div", { class: "previous muted" }, "kept for a rollback: ", p.origin ? originText(p.origin) : `a component from a file (${String(p.sha256).slice(0, 12)}…)`) : null);
}

/** The owner's Upgrade and Roll back buttons of a WASM app. */
function wasmActions(a, msg) {
  return [
    h("button", { type: "button", class: "upgrade owner-only", onclick: () => upgradeApp(a, msg) }, "Upgrade"),
    a.wasm.previous ? h("button", { type: "button", class: "rollback owner-only", onclick: () => rollbackApp(a, msg) }, "Roll back") : null,
  ].filter(Boolean);
}

/** ask() with another label on its OK button. */
async function askTo(label, ...content) {
  const ok = $("#dialog-ok");
  ok.textContent = label;
  try { return await ask(...content); } finally { ok.textContent = "OK"; }
}

async function upgradeApp(a, msg) {
  const cur = a.wasm.origin ? a.wasm.origin.source : "";
  const src = h("input", { id: "upgrade-source", value: cur, autocomplete: "off", placeholder: "oci://registry/repo:tag", class: "wide-input" });
  const sha = h("input", { id: "upgrade-sha256", autocomplete: "off", placeholder: "for an https:// source", class: "wide-input" });
  const go = await askTo("Upgrade", h("h3", {}, `Upgrade ${a.name}`),
    h("p", {}, cur ? "Pull its source again (a tag may point to a newer version), or give another one." : "It was installed from a file: give the new version's source."),
    h("label", { for: "upgrade-source" }, "Source"), src, h("label", { for: "upgrade-sha256" }, "SHA-256 (hex, a URL source only)"), sha);
  if (!go) return;
  const body = { name: a.name };
  if (src.value.trim() && src.value.trim() !== cur) body.source = src.value.trim();
  if (sha.value.trim()) body.sha256 = sha.value.trim().toLowerCase();
  msg.textContent = "pulling and checking the new version…";
  try {
    let v = await api("apps/upgrade", body);
    if (v.plan) {
      const pv = planView(v.plan, true);
      const ok = await askTo("Confirm upgrade", h("h3", {}, `Upgrade ${a.name}: the new version asks for more`),
        h("p", {}, "Ticked: the rights it has now. What it asks beyond what you tick is marked, and stays not granted."), pv.el);
      if (!ok) { msg.textContent = "upgrade not confirmed: nothing changed"; return; }
      msg.textContent = "upgrading…";
      const g = pv.grants();
      const body = { ...v.plan.confirm, ...g, confirm: true };
      if (!Object.keys(g.limits).length) delete body.limits;
      v = await api("apps/upgrade", body);
    }
    const u = v.upgraded;
    const text = u ? `upgraded ${a.name}: ${shortDigest(u.from)} → ${shortDigest(u.to)}` : `${a.name} is already at ${shortDigest(a.wasm.origin ? a.wasm.origin.digest : "")}: nothing to do`;
    msg.textContent = text;
    await tell(h("p", { class: u ? "ok upgraded" : "upgraded" }, text));
  } catch (e) { msg.replaceChildren(errorBox(e)); return; }
  await appsView();
}

async function rollbackApp(a, msg) {
  const p = a.wasm.previous;
  const to = p.origin ? originText(p.origin) : `the component ${String(p.sha256).slice(0, 12)}… from a file`;
  if (!(await askTo("Roll back", h("p", {}, `Roll ${a.name} back to ${to}? New calls go to it at once; the version it leaves is kept.`)))) return;
  msg.textContent = "rolling back…";
  try {
    const r = (await api("apps/rollback", { name: a.name })).rolledBack;
    const text = `rolled ${a.name} back: ${shortDigest(r.from)} → ${shortDigest(r.to)}`;
    msg.textContent = text;
    await tell(h("p", { class: "ok rolled-back" }, text));
  } catch (e) { msg.replaceChildren(errorBox(e)); return; }
  await appsView();
}
