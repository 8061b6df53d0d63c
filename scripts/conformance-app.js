// A remote app for scripts/conformance: an MCP server (streamable HTTP, one session per client)
// serving the tools the MCP conformance suite's tools-call-* and related scenarios expect, as
// the suite's README describes them. The script registers it as an app so that the engine's /mcp
// lists and routes them. Run with Node 22 and NODE_PATH pointing at the suite's node_modules
// (for @modelcontextprotocol/sdk). Writes its port to $PORTFILE once listening.
"use strict";
const http = require("http");
const { randomUUID } = require("crypto");
const { Server } = require("@modelcontextprotocol/sdk/server/index.js");
const { StreamableHTTPServerTransport } = require("@modelcontextprotocol/sdk/server/streamableHttp.js");
const { ListToolsRequestSchema, CallToolRequestSchema, SetLevelRequestSchema, CreateMessageResultSchema,
  ElicitResultSchema, isInitializeRequest } = require("@modelcontextprotocol/sdk/types.js");

// A 1x1 red PNG and a minimal (silent, 1 sample) WAV.
const PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==";
const WAV = "UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAIA+AAACABAAZGF0YQIAAAAAAA==";
const none = { type: "object", properties: {} };
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const text = (t) => ({ content: [{ type: "text", text: t }] });
// Requests to the client go on the stream of the tool call that makes them.
const elicit = (extra, params) => extra.sendRequest({ method: "elicitation/create", params }, ElicitResultSchema);

const tools = [
  { name: "test_simple_text", description: "Returns simple text", inputSchema: none,
    run: async () => text("This is a simple text response for testing.") },
  { name: "test_image_content", description: "Returns a PNG image", inputSchema: none,
    run: async () => ({ content: [{ type: "image", data: PNG, mimeType: "image/png" }] }) },
  { name: "test_audio_content", description: "Returns a WAV sound", inputSchema: none,
    run: async () => ({ content: [{ type: "audio", data: WAV, mimeType: "audio/wav" }] }) },
  { name: "test_embedded_resource", description: "Returns an embedded resource", inputSchema: none,
    run: async () => ({ content: [{ type: "resource", resource: {
      uri: "test://embedded-resource", mimeType: "text/plain", text: "This is an embedded resource content." } }] }) },
  { name: "test_multiple_content_types", description: "Returns text, an image and a resource", inputSchema: none,
    run: async () => ({ content: [
      { type: "text", text: "Multiple content types test:" },
      { type: "image", data: PNG, mimeType: "image/png" },
      { type: "resource", resource: { uri: "test://mixed-content-resource", mimeType: "application/json",
        text: JSON.stringify({ test: "data", value: 123 }) } },
    ] }) },
  { name: "test_error_handling", description: "Always fails", inputSchema: none,
    run: async () => ({ isError: true, content: [{ type: "text", text: "This tool intentionally returns an error for testing" }] }) },
  { name: "test_tool_with_logging", description: "Sends three log messages", inputSchema: none,
    run: async (_args, extra) => {
      const log = (data) => extra.sendNotification({ method: "notifications/message", params: { level: "info", data } });
      await log("Tool execution started"); await sleep(50);
      await log("Tool processing data"); await sleep(50);
      await log("Tool execution completed");
      return text("Tool with logging executed successfully");
    } },
  { name: "test_tool_with_progress", description: "Reports progress 0, 50, 100 of 100", inputSchema: none,
    run: async (_args, extra) => {
      const token = extra._meta?.progressToken;
      for (const progress of [0, 50, 100]) {
        if (token !== undefined)
          await extra.sendNotification({ method: "notifications/progress", params: { progressToken: token, progress, total: 100 } });
        if (progress < 100) await sleep(50);
      }
      return text("Tool with progress executed successfully");
    } },
  { name: "test_sampling", description: "Asks the client's LLM",
    inputSchema: { type: "object", properties: { prompt: { type: "string" } }, required: ["prompt"] },
    run: async (args, extra) => {
      const r = await extra.sendRequest({ method: "sampling/createMessage", params: {
        messages: [{ role: "user", content: { type: "text", text: args.prompt } }], maxTokens: 100 } }, CreateMessageResultSchema);
      return text(`LLM response: ${r.content?.text ?? JSON.stringify(r.content)}`);
    } },
  { name: "test_elicitation", description: "Asks the user",
    inputSchema: { type: "object", properties: { message: { type: "string" } }, required: ["message"] },
    run: async (args, extra) => {
      const r = await elicit(extra, { message: args.message, requestedSchema: { type: "object", properties: {
        username: { type: "string", description: "User's response" },
        email: { type: "string", description: "User's email address" } }, required: ["username", "email"] } });
      return text(`User response: action=${r.action}, content=${JSON.stringify(r.content ?? {})}`);
    } },
  { name: "test_elicitation_sep1034_defaults", description: "Asks the user, with defaults", inputSchema: none,
    run: async (_args, extra) => {
      const r = await elicit(extra, { message: "Please review your information", requestedSchema: { type: "object", properties: {
        name: { type: "string", default: "John Doe" },
        age: { type: "integer", default: 30 },
        score: { type: "number", default: 95.5 },
        status: { type: "string", enum: ["active", "inactive", "pending"], default: "active" },
        verified: { type: "boolean", default: true } } } });
      return text(`Elicitation completed: action=${r.action}, content=${JSON.stringify(r.content ?? {})}`);
    } },
  { name: "test_elicitation_sep1330_enums", description: "Asks the user, with enums", inputSchema: none,
    run: async (_args, extra) => {
      const r = await elicit(extra, { message: "Please pick", requestedSchema: { type: "object", properties: {
        untitledSingle: { type: "string", enum: ["option1", "option2", "option3"] },
        titledSingle: { type: "string", oneOf: [{ const: "value1", title: "First Option" }, { const: "value2", title: "Second Option" }, { const: "value3", title: "Third Option" }] },
        legacyEnum: { type: "string", enum: ["opt1", "opt2", "opt3"], enumNames: ["Option One", "Option Two", "Option Three"] },
        untitledMulti: { type: "array", items: { type: "string", enum: ["option1", "option2", "option3"] } },
        titledMulti: { type: "array", items: { anyOf: [{ const: "value1", title: "First Choice" }, { const: "value2", title: "Second Choice" }, { const: "value3", title: "Third Choice" }] } },
      } } });
      return text(`Elicitation completed: action=${r.action}, content=${JSON.stringify(r.content ?? {})}`);
    } },
  { name: "test_reconnection", description: "Answers after a short wait (SEP-1699 polling)", inputSchema: none,
    run: async () => { await sleep(100); return text("Reconnection test completed"); } },
  { name: "json_schema_2020_12_tool", description: "Tool with JSON Schema 2020-12 features",
    inputSchema: {
      $schema: "https://json-schema.org/draft/2020-12/schema", type: "object",
      $defs: { address: { type: "object", properties: { street: { type: "string" }, city: { type: "string" } } } },
      properties: { name: { type: "string" }, address: { $ref: "#/$defs/address" } },
      additionalProperties: false,
    },
    run: async (args) => text(`Received: ${JSON.stringify(args)}`) },
];
const byName = new Map(tools.map((t) => [t.name, t]));

function newServer() {
  const server = new Server({ name: "conformance-app", version: "1.0.0" },
    { capabilities: { tools: {}, logging: {} }, instructions: "The MCP conformance suite's test tools." });
  server.setRequestHandler(ListToolsRequestSchema, async () => ({
    tools: tools.map(({ name, description, inputSchema }) => ({ name, description, inputSchema })) }));
  server.setRequestHandler(SetLevelRequestSchema, async () => ({}));
  server.setRequestHandler(CallToolRequestSchema, async (req, extra) => {
    const t = byName.get(req.params.name);
    if (!t) return { isError: true, content: [{ type: "text", text: `no tool ${req.params.name}` }] };
    try {
      return await t.run(req.params.arguments ?? {}, { ...extra, _meta: req.params._meta });
    } catch (e) {
      return { isError: true, content: [{ type: "text", text: `${t.name} failed: ${e instanceof Error ? e.message : e}` }] };
    }
  });
  return server;
}

const sessions = new Map();
async function body(req) {
  const chunks = [];
  for await (const c of req) chunks.push(c);
  const s = Buffer.concat(chunks).toString();
  return s ? JSON.parse(s) : undefined;
}
const srv = http.createServer(async (req, res) => {
  try {
    const parsed = req.method === "POST" ? await body(req) : undefined;
    const sid = req.headers["mcp-session-id"];
    let transport = sid && sessions.get(sid);
    if (!transport) {
      if (req.method !== "POST" || !isInitializeRequest(parsed)) {
        res.writeHead(sid ? 404 : 400, { "content-type": "application/json" });
        res.end(JSON.stringify({ jsonrpc: "2.0", id: null, error: { code: -32000, message: "no such session" } }));
        return;
      }
      transport = new StreamableHTTPServerTransport({
        sessionIdGenerator: randomUUID,
        onsessioninitialized: (id) => sessions.set(id, transport),
      });
      transport.onclose = () => transport.sessionId && sessions.delete(transport.sessionId);
      await newServer().connect(transport);
    }
    await transport.handleRequest(req, res, parsed);
  } catch (e) {
    if (!res.headersSent) res.writeHead(500);
    res.end(String(e));
  }
});
srv.listen(0, "127.0.0.1", () => {
  const port = String(srv.address().port);
  if (process.env.PORTFILE) require("fs").writeFileSync(process.env.PORTFILE, port);
  else console.log(port);
});
