// The official TypeScript SDK's client on the search listing (`tests/e2e/mcp/search_tools.rs`
// runs it): connects to URL (with TOKEN), lists the tools, searches, follows
// notifications/tools/list_changed, lists again and calls the tool found directly, then through
// call_tool. Prints one JSON object of what it saw; exits 1 on an error.
"use strict";
const { Client } = require("@modelcontextprotocol/sdk/client/index.js");
const { StreamableHTTPClientTransport } = require("@modelcontextprotocol/sdk/client/streamableHttp.js");
const T = require("@modelcontextprotocol/sdk/types.js");

async function main() {
  const url = new URL(process.env.URL);
  const transport = new StreamableHTTPClientTransport(url, {
    requestInit: { headers: { Authorization: `Bearer ${process.env.TOKEN}` } },
  });
  const client = new Client({ name: "ts-search-listing", version: "1.0.0" });
  let changed = 0;
  let wake = () => {};
  client.setNotificationHandler(T.ToolListChangedNotificationSchema, () => { changed += 1; wake(); });
  await client.connect(transport);
  const before = (await client.listTools()).tools.map((t) => t.name);
  const found = await client.callTool({ name: "search_tools", arguments: { query: process.env.QUERY, limit: 1 } });
  const names = (found.structuredContent?.tools ?? []).map((t) => t.name);
  // list_changed, within 5 s.
  if (changed === 0) await new Promise((resolve) => { wake = resolve; setTimeout(resolve, 5000); });
  const after = (await client.listTools()).tools.map((t) => t.name);
  const direct = await client.callTool({ name: names[0] ?? "none", arguments: {} });
  const via = await client.callTool({ name: "call_tool", arguments: { name: names[0] ?? "none", arguments: {} } });
  const text = (r) => (r.content ?? []).map((c) => c.text ?? "").join("");
  console.log(JSON.stringify({ before, found: names, changed, after, direct: text(direct), via: text(via) }));
  await client.close();
}

main().catch((e) => { console.error(String(e && e.stack || e)); process.exit(1); });
