// The console's tool statistics, in the Tools view (the owner's): each tool's calls at /mcp over
// the last hour, its errors, p50 and p99 (estimated by the server from the buckets of
// mcp_server_operation_duration_seconds, as Prometheus would), and a small chart of calls per
// minute. Loaded before app.js, whose helpers (h, api, errorBox) it calls only once the page runs.
"use strict";

const SVG = "http://www.w3.org/2000/svg";

function s(tag, attrs, ...kids) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, v);
  for (const k of kids) el.append(k);
  return el;
}

/** A duration in milliseconds, in a few characters. */
function msText(ms) {
  if (ms === null || ms === undefined) return "–";
  if (ms >= 1000) return `${(ms / 1000).toFixed(ms >= 10000 ? 0 : 1)} s`;
  if (ms >= 10) return `${ms.toFixed(0)} ms`;
  return `${ms.toFixed(ms >= 1 ? 1 : 2)} ms`;
}

/** Calls per minute over the hour, oldest left: a bar per minute, its errors in red, the minute's
 * p99 in its tooltip. */
function callsChart(t) {
  const W = 180, H = 28, n = t.perMinute.length, bw = W / n;
  const max = Math.max(1, ...t.perMinute.map((m) => m.calls));
  const bars = t.perMinute.flatMap((m, i) => {
    if (!m.calls) return [];
    const hgt = Math.max(1.5, (m.calls / max) * H);
    const eh = m.errors ? Math.max(1.5, (m.errors / max) * H) : 0;
    const ago = n - 1 - i;
    const tip = `${ago ? `${ago} min ago` : "this minute"}: ${m.calls} calls, ${m.errors} errors, p99 ${msText(m.p99Ms)}`;
    return [s("g", {}, s("title", {}, tip),
      s("rect", { class: "calls", x: (i * bw).toFixed(2), y: (H - hgt).toFixed(2), width: Math.max(1, bw - 0.6).toFixed(2), height: hgt.toFixed(2) }),
      eh ? s("rect", { class: "errors", x: (i * bw).toFixed(2), y: (H - eh).toFixed(2), width: Math.max(1, bw - 0.6).toFixed(2), height: eh.toFixed(2) }) : "")];
  });
  return s("svg", { class: "spark", viewBox: `0 0 ${W} ${H}`, width: W, height: H, role: "img",
    "aria-label": `${t.tool}: calls per minute over the last hour, at most ${max} a minute` }, ...bars);
}

/** One line of a tool's hour, for its card. */
function statsLine(t) {
  return `last hour: ${t.calls} calls · ${t.errors} errors · p50 ${msText(t.p50Ms)} · p99 ${msText(t.p99Ms)}`;
}

/** The Tools view's section of statistics (the owner's): a table of the tools called in the last
 * hour, most called first. `onStats` gets them by tool name, for the tools' cards. */
function statsSection(onStats) {
  const box = h("div", { id: "tool-stats" }, h("p", { class: "muted" }, "reading the last hour…"));
  (async () => {
    try {
      const v = await api("tool-stats");
      const tools = v.tools || [];
      onStats(new Map(tools.map((t) => [t.tool, t])));
      if (!tools.length) { box.replaceChildren(h("p", { class: "muted" }, "No tool was called through /mcp in the last hour.")); return; }
      box.replaceChildren(h("div", { class: "scroll" }, h("table", { class: "stats" },
        h("thead", {}, h("tr", {}, ["tool", "app", "calls", "errors", "p50", "p99", "calls a minute, last 60 minutes"].map((c) => h("th", {}, c)))),
        h("tbody", {}, tools.map((t) => h("tr", { "data-tool": t.tool, "data-app": t.app },
          h("td", {}, h("code", {}, t.tool)), h("td", {}, t.app),
          h("td", { class: "num calls" }, String(t.calls)),
          h("td", { class: `num errors${t.errors ? " error" : ""}` }, String(t.errors)),
          h("td", { class: "num p50" }, msText(t.p50Ms)), h("td", { class: "num p99" }, msText(t.p99Ms)),
          h("td", {}, callsChart(t))))))));
    } catch (e) { box.replaceChildren(errorBox(e)); }
  })();
  return h("section", { class: "owner-only", id: "tool-stats-section" },
    h("h2", {}, "Calls in the last hour"),
    h("p", { class: "muted" }, "Calls through /mcp, by tool; p50 and p99 are estimated from the buckets of mcp_server_operation_duration_seconds, as Prometheus would."),
    box);
}
