// The fidelity table of the engine's /mcp (issue 31), run by scripts/fidelity: the official
// TypeScript SDK client connects once directly to the MCP "everything" server and once to the
// engine's /mcp, where the everything server is a registered remote app, runs the same exchange
// on both for every feature, compares the answers modulo namespacing and prints a table
// (feature | direct | through /mcp | equal? | note). Then it runs scripts/fidelity.py with each
// Python SDK given in PYTHONS, which does the same rows with that client, and compares its
// answers the same way, one table per client. docs/fidelity.md explains each row.
//
// Namespacing through /mcp: tool and prompt names are not prefixed (the engine's own operations
// come first; an app's item whose name is taken is skipped); an app's resource URI S://R is
// S://<app>/R everywhere it appears (listings, templates, resource links and embedded resources
// in results, _meta.ui.resourceUri, notifications/resources/updated) and is read and subscribed
// to as such. So the direct answer, with its URIs rewritten that way, must equal the answer
// through /mcp; the engine's own resources (datanotes://) are left out of the comparison.
//
// What the app receives is seen through two recording proxies started by scripts/fidelity (this
// file, run with --proxy): one in front of the everything server for the direct client, one for
// the engine (the app is registered at its address). Their logs are JSON lines.
//
// Environment: DIRECT_URL (the everything server, through its proxy), MCP_URL (the engine's
// /mcp), TOKEN (the owner token), APP (the app's name), DIRECT_LOG, APP_LOG (the proxies' logs),
// PYTHONS ("python-1=/path/to/python python-2=..."), FIDELITY_ONLY (a regular expression:
// only the rows whose feature matches, with the rows they report on).
// Arguments: --markdown (the tables in Markdown), --json (every row with both answers).
// Exit status: 0 when every row has its expected outcome, 1 otherwise, 2 when the run broke.
"use strict";

// ---------------------------------------------------------------------------------------------
// The expected outcome of each row. "equal": the answer through /mcp is the direct one (modulo
// namespacing); "differs": it is known not to be, `why` says why, and `diff` pins the first
// difference (a string, or a regular expression for a list). A row not listed here is expected
// equal. A row expected equal that differs fails the run; so does one expected to differ that
// differs otherwise than pinned, or that is now equal (update this table and docs/fidelity.md).
// ---------------------------------------------------------------------------------------------
const EXPECTED = {
  "initialize: server capabilities": { expected: "equal" },
  "initialize: the app's instructions": { expected: "equal" },
  "initialize: the client's capabilities reach the app": { expected: "equal" },
  "tools/list": { expected: "equal" },
  "tool echo": { expected: "equal" },
  "tool get-annotated-message": { expected: "equal" },
  "tool get-env": { expected: "equal" },
  "tool get-resource-links": { expected: "equal" },
  "tool get-resource-reference (Text)": { expected: "equal" },
  "tool get-resource-reference (Blob)": { expected: "equal" },
  "tool get-resource-reference (bad id: isError)": { expected: "equal" },
  "tool get-structured-content": { expected: "equal" },
  "tool get-sum": { expected: "equal" },
  "tool get-sum (bad arguments)": { expected: "equal" },
  "tool get-tiny-image": { expected: "equal" },
  "tool gzip-file-as-resource (embedded resource)": { expected: "equal" },
  "tool gzip-file-as-resource (resource link)": { expected: "equal" },
  "tool toggle-simulated-logging": { expected: "equal" },
  "tool toggle-subscriber-updates": { expected: "equal" },
  "JSON numbers (integers stay integers)": { expected: "equal" },
  progress: { expected: "equal" },
  cancellation: { expected: "equal" },
  "sampling (trigger-sampling-request)": { expected: "equal" },
  "elicitation, form (trigger-elicitation-request)": { expected: "equal" },
  "elicitation, URL (trigger-url-elicitation)": { expected: "equal" },
  "elicitation, URL, error -32042 (trigger-url-elicitation)": { expected: "equal" },
  "roots (get-roots-list)": { expected: "equal" },
  "roots: notifications/roots/list_changed": { expected: "equal" },
  "logging: setLevel and a tool's messages": { expected: "equal" },
  "logging: messages outside a call": { expected: "equal" },
  "resources/list": { expected: "equal" },
  "resources/read (every listed resource)": { expected: "equal" },
  "resources/read (from the templates)": { expected: "equal" },
  "resources/read (unknown resource: error)": { expected: "equal" },
  "resources/templates/list": { expected: "equal" },
  "resources/subscribe and notifications/resources/updated": { expected: "equal" },
  "resources/read of a session resource (a tool's link)": { expected: "equal" },
  "notifications/resources/list_changed": { expected: "equal" },
  "prompts/list": { expected: "equal" },
  "prompts/get simple-prompt": { expected: "equal" },
  "prompts/get args-prompt": { expected: "equal" },
  "prompts/get completable-prompt": { expected: "equal" },
  "prompts/get resource-prompt (embedded resource)": { expected: "equal" },
  "completion/complete (prompt argument)": { expected: "equal" },
  "completion/complete (prompt argument, with context)": { expected: "equal" },
  "completion/complete (resource template)": { expected: "equal" },
  "tasks: simulate-research-query (taskSupport required)": { expected: "equal" },
  "tasks: simulate-research-query with elicitation (input_required)": { expected: "equal" },
  "tasks: trigger-sampling-request-async (the client's task)": { expected: "equal" },
  "tasks: trigger-elicitation-request-async (the client's task)": { expected: "equal" },
};

// Per client (the names given in PYTHONS by scripts/fidelity), what differs from the above.
// python-2 speaks 2026-07-28 through /mcp and 2025-11-25 directly (the app knows no newer).
const ROOTS_AT_OPEN =
  "the app asks for the client's roots when its session opens, outside any call, and a 2026-07-28 client can be asked something only as an input request within a request of its own (the engine turns an app's requests during a call into those): cannot be equal";
const EXPECTED_FOR = {
  "python-1": {
    // The Python SDK declares no tasks.
    "initialize: the client's capabilities reach the app": { expected: "equal" },
  },
  "python-2": {
    "initialize: the client's capabilities reach the app": {
      expected: "differs",
      diff: "roots.listChanged: only direct: true",
      why: "2026-07-28 has no `roots/list_changed`, so the app is told `roots` without `listChanged`, rightly: cannot be equal",
    },
    "tools/list": {
      expected: "differs",
      // Each tool's `execution`, and nothing else.
      diff: /^differ: [\w-]+\.execution(, [\w-]+\.execution)*$/,
      why: "2026-07-28 removed each tool's `execution` (its tasks are an extension, SEP-2663, where the server decides whether a call becomes a task; the SDK's own types say `execution` is of 2025-11-25 only), so the app's `execution.taskSupport` is not listed at that version, rightly: cannot be equal",
    },
    // As input requests, written as the app wrote its requests (no progress token added, the
    // numbers as spelled).
    "sampling (trigger-sampling-request)": { expected: "equal" },
    "elicitation, form (trigger-elicitation-request)": { expected: "equal" },
    "elicitation, URL (trigger-url-elicitation)": { expected: "equal" },
    "roots (get-roots-list)": { expected: "differs", diff: "clientAsked: true ≠ false", why: ROOTS_AT_OPEN },
    "roots: notifications/roots/list_changed": {
      expected: "differs",
      diff: "clientAsked: true ≠ false",
      why: `${ROOTS_AT_OPEN}; and 2026-07-28 has no \`roots/list_changed\` (the SDK sends it, deprecated)`,
    },
    "logging: setLevel and a tool's messages": {
      expected: "differs",
      diff: "appToldLevel: true ≠ false",
      why: "2026-07-28 has no log messages outside a request (a request opts in with `_meta`), so the app's messages sent outside a call cannot reach a client of that era: cannot be equal",
    },
    "logging: messages outside a call": {
      expected: "differs",
      diff: "through /mcp: resources/subscribe is removed at 2026-07-28",
      why: "2026-07-28 has no `resources/subscribe` (whose acknowledgment this message is) and no log messages outside a request: cannot be equal",
    },
    "notifications/resources/list_changed": {
      expected: "differs",
      diff: "received: true ≠ false",
      why: "at 2026-07-28 list changes come only on a `subscriptions/listen` stream (the engine serves it), and this row's client opens none for them: cannot be equal as written",
    },
  },
};

// ---------------------------------------------------------------------------------------------
// The rows.
// ---------------------------------------------------------------------------------------------
const LRO = "trigger-long-running-operation";
const TEXT_TEMPLATE = "demo://resource/dynamic/text/{resourceId}";
const BLOB_TEMPLATE = "demo://resource/dynamic/blob/{resourceId}";
const DOC = "demo://resource/static/document/features.md";
// A small file for gzip-file-as-resource, as a data: URI (the tool's default fetches from GitHub).
const GZ_DATA = `data:text/plain;base64,${Buffer.from("fidelity: the same bytes both ways\n".repeat(8)).toString("base64")}`;

function rows() {
  const R = [];
  const row = (feature, run, opts = {}) => R.push({ feature, run, ...opts });
  const tool = (feature, name, args, opts = {}) =>
    row(feature, async (s) => (s.has(name) ? s.call(name, args) : { notListed: name }), opts);

  row("initialize: server capabilities", async (s) => {
    const c = s.client.getServerCapabilities() ?? {};
    // Tasks are their own rows.
    return pick(c, ["completions", "logging", "prompts", "resources", "tools"]);
  }, { show: (v) => Object.keys(v).join(", ") || "none" });

  row("initialize: the app's instructions", async (s, both) => {
    const mine = s.client.getInstructions() ?? "";
    // Directly they are the app's; through /mcp they must contain them (trimmed).
    const app = (both.direct.client.getInstructions() ?? "").trim();
    return { containsTheApp: app.length > 0 && mine.includes(app) };
  }, { show: (v) => (v.containsTheApp ? "the app's" : "missing") });

  row("tools/list", async (s) => {
    const { tools } = await s.client.listTools();
    return tools.filter((t) => !s.engineOps.has(t.name));
  }, { show: (v) => `${v.length} tools`, diff: toolsDiff });

  // Plain tools, with arguments valid for their schemas.
  tool("tool echo", "echo", { message: "fidelity ✓" });
  tool("tool get-annotated-message", "get-annotated-message", { messageType: "error", includeImage: true });
  tool("tool get-env", "get-env", {});
  tool("tool get-resource-links", "get-resource-links", { count: 4 });
  tool("tool get-resource-reference (Text)", "get-resource-reference", { resourceType: "Text", resourceId: 2 });
  tool("tool get-resource-reference (Blob)", "get-resource-reference", { resourceType: "Blob", resourceId: 3 });
  tool("tool get-resource-reference (bad id: isError)", "get-resource-reference", { resourceType: "Text", resourceId: 0 });
  tool("tool get-structured-content", "get-structured-content", { location: "Chicago" });
  tool("tool get-sum", "get-sum", { a: 2, b: 3.5 });
  tool("tool get-sum (bad arguments)", "get-sum", { a: "two", b: 3 });
  tool("tool get-tiny-image", "get-tiny-image", {});

  row("initialize: the client's capabilities reach the app", async (s) => {
    // The capabilities in the initialize of the app session that carried this side's echo call.
    const log = readLog(s.log).slice(s.logStart);
    const call = log.find((e) => e.dir === "in" && e.msg.method === "tools/call" && e.msg.params?.name === "echo");
    if (!call) return { error: { message: "no echo call reached the app" } };
    const init = log.find((e) => e.dir === "in" && e.msg.method === "initialize" && e.sid === call.sid);
    return init ? init.msg.params.capabilities : { error: { message: "no initialize for its session" } };
  }, { show: (v) => (v.error ? v.error.message : Object.keys(v).join(", ") || "{}") });

  row("JSON numbers (integers stay integers)", async (s) => {
    // The numbers as the client's bytes spell them (JavaScript's JSON.parse cannot tell 1 from 1.0).
    const mark = s.raw.length;
    await s.call("get-annotated-message", { messageType: "error", includeImage: true });
    await s.call(LRO, { duration: 0.2, steps: 2 }, { onprogress: () => {} });
    const text = s.raw.slice(mark).join("");
    const found = new Set();
    for (const m of text.matchAll(/"(priority|progress|total)":\s*(-?[0-9][0-9.eE+-]*)/g)) found.add(`${m[1]}: ${m[2]}`);
    return [...found].sort();
  }, { show: (v) => (Array.isArray(v) ? (v.some((t) => /\.0$/.test(t)) ? "1 spelled 1.0" : "1 spelled 1") : undefined) });

  row("progress", async (s) => {
    const from = s.wire.length;
    const result = await s.call(LRO, { duration: 0.5, steps: 5 }, { onprogress: () => {} });
    // The call's progress notifications that reached the client before its answer, as the SDK
    // would hand them to `onprogress` (without the token), read off the wire (see `s.wire`).
    const seen = s.wire.slice(from);
    const end = seen.findIndex((m) => m.id !== undefined && !m.method && ("result" in m || "error" in m));
    const progress = seen.slice(0, end < 0 ? seen.length : end)
      .filter((m) => m.method === "notifications/progress")
      .map(({ params: { progressToken, ...p } }) => p);
    return { progress, result };
  }, { show: (v) => (v.progress ? `${v.progress.length} notifications` : undefined) });

  row("cancellation", async (s) => {
    // A long call (8 s, a step every 0.1 s) cancelled at its first progress notification.
    const ac = new AbortController();
    const errors = s.errors.length;
    const resumptions = s.resumptions;
    const started = Date.now();
    let rejected;
    try {
      await s.client.callTool({ name: LRO, arguments: { duration: 8, steps: 80 } }, undefined, {
        signal: ac.signal, timeout: 20000, onprogress: () => ac.abort("fidelity: cancelled") });
      rejected = "answered";
    } catch (e) {
      rejected = e?.name === "AbortError" || /cancel/i.test(String(e?.message ?? e)) ? "cancelled" : `error: ${e?.message ?? e}`;
    }
    const cancelledAfterMs = Date.now() - started;
    await sleep(1500);
    const after = s.errors.slice(errors).map(String);
    // What the app received: notifications/cancelled naming its request.
    const log = readLog(s.log).slice(s.logStart);
    const call = log.find((e) => e.dir === "in" && e.msg.method === "tools/call" && e.msg.params?.arguments?.steps === 80);
    const told = !!call && log.some((e) => e.dir === "in" && e.msg.method === "notifications/cancelled" &&
      e.sid === call.sid && e.msg.params?.requestId === call.msg.id);
    const next = await s.call("echo", { message: "after the cancel" });
    return {
      // Not compared: the everything server's tool does not stop when cancelled, so directly its
      // progress goes on arriving (for a token the client no longer knows); the engine may drop it.
      info: { staleProgress: after.some((e) => /unknown token/i.test(e)) },
      call: rejected,
      cancelledWithin1s: cancelledAfterMs < 1000,
      appReceivedCancelled: told,
      answerAfterCancel: after.some((e) => /unknown message ID/i.test(e)),
      // The client resumed a stream (GET with Last-Event-ID): the call's stream ended unanswered.
      resumedAStream: s.resumptions > resumptions,
      nextCall: next.content?.[0]?.text ?? next,
    };
  }, { show: (v) => (v.call ? `${v.call}; app told: ${v.appReceivedCancelled ? "yes" : "no"}; next call ${typeof v.nextCall === "string" ? "ok" : "fails"}` : undefined) });

  row("sampling (trigger-sampling-request)", async (s) => {
    if (!s.has("trigger-sampling-request")) return { notListed: "trigger-sampling-request" };
    const mark = s.sampling.length;
    const result = await s.call("trigger-sampling-request", { prompt: "fidelity", maxTokens: 20 });
    return { requests: s.sampling.slice(mark), result };
  });
  row("elicitation, form (trigger-elicitation-request)", async (s) => {
    if (!s.has("trigger-elicitation-request")) return { notListed: "trigger-elicitation-request" };
    const mark = s.elicitation.length;
    const result = await s.call("trigger-elicitation-request", {});
    return { requests: s.elicitation.slice(mark), result };
  });
  row("elicitation, URL (trigger-url-elicitation)", async (s) => {
    if (!s.has("trigger-url-elicitation")) return { notListed: "trigger-url-elicitation" };
    const mark = s.elicitation.length;
    const result = await s.call("trigger-url-elicitation", { url: "https://example.com/fidelity", elicitationId: "fidelity-url" });
    return { requests: s.elicitation.slice(mark), result };
  });
  row("elicitation, URL, error -32042 (trigger-url-elicitation)", async (s) => {
    if (!s.has("trigger-url-elicitation")) return { notListed: "trigger-url-elicitation" };
    const args = { url: "https://example.com/fidelity-error", elicitationId: "fidelity-error", errorPath: true };
    const first = await s.call("trigger-url-elicitation", args);
    const retry = await s.call("trigger-url-elicitation", args);
    return { first, retry };
  }, { show: (v) => (v.first ? `${summary(v.first)}, then ${summary(v.retry)}` : undefined) });
  row("roots (get-roots-list)", async (s) => {
    if (!s.has("get-roots-list")) return { notListed: "get-roots-list" };
    return { result: await s.call("get-roots-list", {}), clientAsked: s.rootsAsked > 0 };
  });
  row("roots: notifications/roots/list_changed", async (s) => {
    if (!s.has("get-roots-list")) return { notListed: "get-roots-list" };
    const asked = s.rootsAsked;
    s.roots = [...ROOTS, { uri: "file:///tmp/fidelity-2", name: "second" }];
    await s.client.sendRootsListChanged();
    await until(() => s.rootsAsked > asked, 2000);
    await sleep(200); // the app keeps the answer once it has it
    return { result: await s.call("get-roots-list", {}), clientAsked: s.rootsAsked > asked };
  });

  row("logging: setLevel and a tool's messages", async (s) => {
    const setLevel = await s.request(() => s.client.setLoggingLevel("debug"));
    const mark = s.logs.length;
    const on = await s.call("toggle-simulated-logging", {});
    await until(() => s.logs.slice(mark).some(isSimulated), 2000);
    const off = await s.call("toggle-simulated-logging", {});
    const msg = s.logs.slice(mark).find(isSimulated);
    const appToldLevel = readLog(s.log).slice(s.logStart).some((e) => e.dir === "in" && e.msg.method === "logging/setLevel" && e.msg.params?.level === "debug");
    // Its level is random; its text names it.
    return { setLevel, appToldLevel, on, off, message: msg ? { ...msg, level: "<random>", data: String(msg.data).replace(/^\S+(?: level-| )?message/i, "<level> message") } : "none" };
  }, { show: (v) => (v.message ? (v.message === "none" ? "no message" : "message received") : undefined) });
  tool("tool toggle-simulated-logging", "toggle-simulated-logging", {}, { twice: true });

  row("logging: messages outside a call", async (s) => {
    // The app acknowledges a subscription with a log message on its standalone stream.
    const mark = s.logs.length;
    const uri = "demo://resource/static/document/instructions.md";
    const sub = await s.request(() => s.client.subscribeResource({ uri: s.uri(uri) }));
    await until(() => s.logs.slice(mark).some((m) => /Subscribe Resource/.test(m.data)), 2000);
    await s.request(() => s.client.unsubscribeResource({ uri: s.uri(uri) }));
    const msg = s.logs.slice(mark).find((m) => /Subscribe Resource/.test(m.data));
    return { subscribe: sub, message: msg ? { ...msg, data: String(msg.data).replace(/ from session .*/, "") } : "none" };
  }, { show: (v) => (v.message ? (v.message === "none" ? "no message" : "message received") : undefined) });

  row("resources/list", async (s) => s.request(async () => s.own(await s.all((c) => s.client.listResources(c), "resources"))),
    { show: (v) => (Array.isArray(v) ? `${v.length} resources` : undefined) });
  row("resources/read (every listed resource)", async (s, both) => {
    const list = await both.direct.all((c) => both.direct.client.listResources(c), "resources");
    const out = [];
    for (const r of list) out.push(await s.request(() => s.client.readResource({ uri: s.uri(r.uri) })));
    return out;
  }, { show: (v) => (Array.isArray(v) ? `${v.filter((r) => !r.error).length} read` : undefined) });
  row("resources/read (from the templates)", async (s) => [
    await s.request(() => s.client.readResource({ uri: s.uri("demo://resource/dynamic/text/2") })),
    await s.request(() => s.client.readResource({ uri: s.uri("demo://resource/dynamic/blob/3") })),
  ], { show: (v) => (Array.isArray(v) ? `${v.filter((r) => !r.error).length} read` : undefined) });
  row("resources/read (unknown resource: error)", async (s) =>
    s.request(() => s.client.readResource({ uri: s.uri("demo://resource/dynamic/text/0") })));
  row("resources/templates/list", async (s) =>
    s.request(async () => s.own(await s.all((c) => s.client.listResourceTemplates(c), "resourceTemplates"), "uriTemplate")),
  { show: (v) => (Array.isArray(v) ? `${v.length} templates` : undefined) });
  row("resources/subscribe and notifications/resources/updated", async (s) => {
    // The app sends an update for each subscribed URI when its updates are turned on, then every 5 s.
    const mark = s.updated.length;
    const subscribe = await s.request(() => s.client.subscribeResource({ uri: s.uri(DOC) }));
    await s.call("toggle-subscriber-updates", {});
    await until(() => s.updated.length > mark, 2000);
    const unsubscribe = await s.request(() => s.client.unsubscribeResource({ uri: s.uri(DOC) }));
    await s.call("toggle-subscriber-updates", {});
    const updated = [...new Set(s.updated.slice(mark).map((u) => u.uri))].map((uri) => ({ uri }));
    return { subscribe, updated, unsubscribe };
  }, { show: (v) => (v.updated ? `${v.updated.length} updated` : undefined) });
  tool("tool toggle-subscriber-updates", "toggle-subscriber-updates", {}, { twice: true });

  // Through /mcp, prompts the app does not list (the engine's own, if any) are left out.
  row("prompts/list", async (s, both) => s.request(async () => {
    const list = await s.all((c) => s.client.listPrompts(c), "prompts");
    if (s.name !== "mcp") return list;
    const app = new Set((await both.direct.all((c) => both.direct.client.listPrompts(c), "prompts")).map((p) => p.name));
    return list.filter((p) => app.has(p.name));
  }),
    { show: (v) => (Array.isArray(v) ? `${v.length} prompts` : undefined) });
  const prompt = (feature, name, args) =>
    row(feature, async (s) => s.request(() => s.client.getPrompt({ name, arguments: args })));
  prompt("prompts/get simple-prompt", "simple-prompt", {});
  prompt("prompts/get args-prompt", "args-prompt", { city: "Paris", state: "Texas" });
  prompt("prompts/get completable-prompt", "completable-prompt", { department: "Sales", name: "Eve" });
  prompt("prompts/get resource-prompt (embedded resource)", "resource-prompt", { resourceType: "Text", resourceId: "2" });

  row("completion/complete (prompt argument)", async (s) => [
    await s.request(() => s.client.complete({ ref: { type: "ref/prompt", name: "completable-prompt" }, argument: { name: "department", value: "S" } })),
    await s.request(() => s.client.complete({ ref: { type: "ref/prompt", name: "resource-prompt" }, argument: { name: "resourceType", value: "B" } })),
  ]);
  row("completion/complete (prompt argument, with context)", async (s) =>
    s.request(() => s.client.complete({ ref: { type: "ref/prompt", name: "completable-prompt" },
      argument: { name: "name", value: "" }, context: { arguments: { department: "Engineering" } } })));
  row("completion/complete (resource template)", async (s) => [
    await s.request(() => s.client.complete({ ref: { type: "ref/resource", uri: s.uri(TEXT_TEMPLATE) }, argument: { name: "resourceId", value: "3" } })),
    await s.request(() => s.client.complete({ ref: { type: "ref/resource", uri: s.uri(BLOB_TEMPLATE) }, argument: { name: "resourceId", value: "x" } })),
  ]);

  // A tool that registers a resource in the caller's session on the app (so after the listings;
  // the same URI on both sides, and the app keeps one such resource per URI: one side after the
  // other).
  tool("tool gzip-file-as-resource (embedded resource)", "gzip-file-as-resource", {
    name: "fidelity-embedded.txt.gz", data: GZ_DATA, outputType: "resource" }, { sequential: true });
  row("tool gzip-file-as-resource (resource link)", async (s) => {
    const mark = s.resourcesChanged;
    const result = await s.call("gzip-file-as-resource", { name: "fidelity-link.txt.gz", data: GZ_DATA, outputType: "resourceLink" });
    s.gzLink = result.content?.find((c) => c.type === "resource_link")?.uri;
    await until(() => s.resourcesChanged > mark, 1500);
    s.gzListChanged = s.resourcesChanged > mark;
    s.gzRead = s.gzLink ? await s.request(() => s.client.readResource({ uri: s.gzLink })) : { error: { message: "no link" } };
    return result;
  }, { sequential: true });
  row("notifications/resources/list_changed", async (s) => ({ received: s.gzListChanged }),
    { show: (v) => (v.received ? "received" : "none"), needs: LINK_ROW });
  row("resources/read of a session resource (a tool's link)", async (s) => s.gzRead, { needs: LINK_ROW });

  // Tasks (experimental in the SDK): a tool that requires task augmentation, and tools that make
  // the client's own sampling and elicitation a task.
  const task = (feature, name, args) => row(feature, async (s) => {
    if (!s.has(name)) return { notListed: name };
    const mark = s.elicitation.length;
    const messages = [];
    try {
      const stream = s.client.experimental.tasks.callToolStream({ name, arguments: args }, undefined, { task: { ttl: 60000 }, timeout: 20000 });
      for await (const m of stream) messages.push(m);
    } catch (e) {
      messages.push({ type: "error", error: e });
    }
    const last = messages[messages.length - 1];
    return {
      kinds: [...new Set(messages.map((m) => m.type))],
      statuses: [...new Set(messages.filter((m) => m.task).map((m) => m.task.status))],
      // The task's own (tied to it by its related-task `_meta`): a late one of an earlier row
      // may arrive on either side meanwhile.
      elicitation: s.elicitation.slice(mark).filter((e) => e?._meta?.["io.modelcontextprotocol/related-task"]),
      end: last?.type === "result" ? last.result : last?.type === "error" ? errorOf(last.error) : last,
    };
  }, { show: (v) => (v.kinds ? (v.end?.error ? summary(v.end) : v.kinds.join(", ")) : undefined) });
  task("tasks: simulate-research-query (taskSupport required)", "simulate-research-query", { topic: "fidelity" });
  task("tasks: simulate-research-query with elicitation (input_required)", "simulate-research-query", { topic: "python", ambiguous: true });
  const clientTask = (feature, name, args) => row(feature, async (s) => {
    if (!s.has(name)) return { notListed: name };
    const mark = { sampling: s.sampling.length, elicitation: s.elicitation.length };
    const result = await s.call(name, args, { timeout: 20000 });
    return { requests: [...s.sampling.slice(mark.sampling), ...s.elicitation.slice(mark.elicitation)], result };
  });
  clientTask("tasks: trigger-sampling-request-async (the client's task)", "trigger-sampling-request-async", { prompt: "fidelity", maxTokens: 20 });
  clientTask("tasks: trigger-elicitation-request-async (the client's task)", "trigger-elicitation-request-async", {});
  return R;
}

const LINK_ROW = "tool gzip-file-as-resource (resource link)";
const isSimulated = (m) => /level[- ]message/i.test(String(m.data));

// ---------------------------------------------------------------------------------------------
// The two clients.
// ---------------------------------------------------------------------------------------------
const ROOTS = [{ uri: "file:///tmp/fidelity", name: "fidelity" }];

// One client: `name` "direct" (the app at `url`) or "mcp" (the engine: its `/mcp` at `url`, or
// with `stdio` the command line of `datanotes mcp` for it).
async function side(name, url, headers, log, sdk, stdio) {
  const { Client, StreamableHTTPClientTransport, StdioClientTransport, T, InMemoryTaskStore } = sdk;
  const s = {
    name, log, logStart: readLog(log).length, raw: [], errors: [], logs: [], updated: [], sampling: [], elicitation: [],
    roots: ROOTS, rootsAsked: 0, resumptions: 0, resourcesChanged: 0, engineOps: new Set(),
    uri: (u) => (name === "mcp" ? rewrite(u) : u),
  };
  const capabilities = {
    sampling: {},
    elicitation: { form: {}, url: {} },
    roots: { listChanged: true },
    tasks: { list: {}, cancel: {}, requests: { sampling: { createMessage: {} }, elicitation: { create: {} } } },
  };
  const client = new Client({ name: "datanotes-fidelity", version: "1.0.0" }, { capabilities, taskStore: new InMemoryTaskStore() });
  s.client = client;
  client.onerror = (e) => s.errors.push(e?.message ?? String(e));
  // Answers deterministically; a request that asks for a task gets one, completed at once.
  const answer = (list, make) => async (req, extra) => {
    list.push(req.params);
    const result = make(req.params);
    if (req.params.task && extra.taskStore) {
      const t = await extra.taskStore.createTask({ ttl: req.params.task.ttl ?? 60000, pollInterval: 200 });
      setTimeout(() => extra.taskStore.storeTaskResult(t.taskId, "completed", result).catch(() => {}), 20);
      return { task: t };
    }
    return result;
  };
  client.setRequestHandler(T.CreateMessageRequestSchema, answer(s.sampling, (p) => ({
    role: "assistant", model: "fidelity-model", stopReason: "endTurn",
    content: { type: "text", text: `sampled: ${p.messages?.[0]?.content?.text ?? ""}` } })));
  client.setRequestHandler(T.ElicitRequestSchema, answer(s.elicitation, elicitAnswer));
  client.setRequestHandler(T.ListRootsRequestSchema, async () => { s.rootsAsked++; return { roots: s.roots }; });
  client.setNotificationHandler(T.LoggingMessageNotificationSchema, (n) => s.logs.push(n.params));
  client.setNotificationHandler(T.ResourceUpdatedNotificationSchema, (n) => s.updated.push(n.params));
  client.setNotificationHandler(T.ResourceListChangedNotificationSchema, () => s.resourcesChanged++);
  // The bytes as they arrive (for the numbers' spelling), and the requests made.
  const fetchRaw = async (u, init) => {
    if ((init?.method ?? "GET") === "GET" && new Headers(init?.headers).has("last-event-id")) s.resumptions++;
    const res = await fetch(u, init);
    if (!res.body) return res;
    const [a, b] = res.body.tee();
    (async () => {
      const dec = new TextDecoder();
      for await (const c of b) s.raw.push(dec.decode(c, { stream: true }));
    })().catch(() => {});
    return new Response(a, { status: res.status, statusText: res.statusText, headers: res.headers });
  };
  let transport;
  if (stdio) {
    transport = new StdioClientTransport({ command: stdio[0], args: stdio.slice(1), stderr: "ignore" });
    // The bytes as they arrive on the child's stdout.
    const start = transport.start.bind(transport);
    transport.start = async () => {
      const append = transport._readBuffer.append.bind(transport._readBuffer);
      transport._readBuffer.append = (chunk) => { s.raw.push(chunk.toString("utf8")); append(chunk); };
      await start();
    };
  } else {
    transport = new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers }, fetch: fetchRaw });
  }
  await client.connect(transport);
  // Every message as the transport hands it to the SDK, in order: what reached the client,
  // whatever the SDK does with it next. (The SDK drops a request's progress handler as soon as
  // it reads the answer, so a last progress notification read in the same chunk as the answer
  // never reaches `onprogress`: typescript-sdk issue 2580. Over stdio both often come in one
  // read.)
  s.wire = [];
  const onmessage = transport.onmessage;
  transport.onmessage = (m, extra) => {
    s.wire.push(m);
    onmessage?.(m, extra);
  };
  s.tools = new Map();
  for (const t of await s_all(client, (c) => client.listTools(c), "tools")) s.tools.set(t.name, t);
  s.has = (t) => s.tools.has(t);
  // A request's answer, or its error as a value.
  s.request = async (f) => {
    try {
      return await f();
    } catch (e) {
      const r = errorOf(e);
      // An error's text names the app's URIs as the app spelled them.
      if (name === "mcp") r.error.message = unrewrite(r.error.message);
      return r;
    }
  };
  s.call = (tool, args, opts = {}) => s.request(() => client.callTool({ name: tool, arguments: args }, undefined, { timeout: 15000, ...opts }));
  s.all = (page, key) => s_all(client, page, key);
  // Through /mcp, the engine's own resources and templates are left out.
  s.own = (list, key = "uri") => (name === "mcp" ? list.filter((r) => !String(r[key]).startsWith("datanotes://")) : list);
  return s;
}

async function s_all(client, page, key) {
  const out = [];
  let cursor;
  for (let i = 0; i < 100; i++) {
    const r = await page(cursor ? { cursor } : undefined);
    out.push(...(r[key] ?? []));
    if (!r.nextCursor) break;
    cursor = r.nextCursor;
  }
  return out;
}

function elicitAnswer(p) {
  if (p.mode === "url") return { action: "accept" };
  const content = {};
  for (const [k, sch] of Object.entries(p.requestedSchema?.properties ?? {})) content[k] = valueFor(sch);
  return { action: "accept", content };
}
function valueFor(s) {
  if (s.default !== undefined) return s.default;
  if (s.enum) return s.enum[0];
  if (s.oneOf) return s.oneOf[0].const;
  switch (s.type) {
    case "boolean": return true;
    case "integer": return Math.max(s.minimum ?? 7, 7);
    case "number": return Math.max(s.minimum ?? 2.5, 2.5);
    case "array": {
      const it = s.items ?? {};
      return [it.enum?.[0] ?? it.anyOf?.[0]?.const ?? it.oneOf?.[0]?.const ?? "one"];
    }
    default:
      return { email: "ada@example.com", uri: "https://example.com/ada", date: "1815-12-10", "date-time": "1815-12-10T12:00:00Z" }[s.format] ?? "Ada";
  }
}

function errorOf(e) {
  return { error: { code: e?.code, message: String(e?.message ?? e), ...(e?.data !== undefined ? { data: e.data } : {}) } };
}

// ---------------------------------------------------------------------------------------------
// Namespacing and comparison.
// ---------------------------------------------------------------------------------------------
const APP = process.env.APP || "everything";
const SDK_VERSION = (() => {
  try {
    const dir = (process.env.NODE_PATH ?? "").split(require("path").delimiter)[0];
    return JSON.parse(require("fs").readFileSync(require("path").join(dir, "@modelcontextprotocol/sdk/package.json"), "utf8")).version;
  } catch {
    return "?";
  }
})();
// S://R as /mcp serves it: S://<app>/R.
function rewrite(uri) {
  const i = uri.indexOf("://");
  return i < 0 ? uri : `${uri.slice(0, i + 3)}${APP}/${uri.slice(i + 3)}`;
}
// And back, in free text (an error's message).
function unrewrite(text) {
  return text.replace(new RegExp(`([a-zA-Z][a-zA-Z0-9+.-]*://)${APP}/`, "g"), "$1");
}
const URI_KEYS = new Set(["uri", "uriTemplate", "resourceUri"]);
// The direct answer with its resource URIs as /mcp must rewrite them.
function namespaced(v, key) {
  if (Array.isArray(v)) return v.map((x) => namespaced(x));
  if (v && typeof v === "object") return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, namespaced(x, k)]));
  if (typeof v === "string" && URI_KEYS.has(key)) return rewrite(v);
  return v;
}
// What legitimately differs between two runs: ids, times, a blob's timestamp.
const UUID = /[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/gi;
// A task id the client's own task store makes (32 hex digits), as an app writes it into a text.
const TASK_ID = /\b[0-9a-f]{32}\b/g;
const TIME = /\b\d{1,2}:\d{2}:\d{2}(\s?[AP]M)?/g;
const ISO = /\b\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z\b/g;
const VOLATILE = new Set(["taskId", "createdAt", "lastUpdatedAt", "sessionId"]);
// Fields of the 2026-07-28 results (and defaults a 2.x SDK fills in): not the app's answer.
const ERA = new Set(["resultType", "ttlMs", "cacheScope"]);
// Reported in --json, not compared.
const INFO = "info";
function normal(v, key) {
  if (Array.isArray(v)) return v.map((x) => normal(x));
  if (v && typeof v === "object") {
    const o = {};
    for (const k of Object.keys(v).sort()) if (k !== INFO && !ERA.has(k)) o[k] = VOLATILE.has(k) ? "<volatile>" : normal(v[k], k);
    return o;
  }
  if (typeof v === "string") {
    if (key === "blob") {
      const t = Buffer.from(v, "base64").toString("utf8");
      if (Buffer.from(t, "utf8").toString("base64") === v && /^[\x20-\x7e\n]*$/.test(t)) return `<base64 of: ${normal(t)}>`;
      return v;
    }
    return v.replace(UUID, "<uuid>").replace(TASK_ID, "<task id>").replace(ISO, "<time>").replace(TIME, "<time>");
  }
  return v;
}
// The first difference, as a path and the two values (short).
function firstDiff(a, b, path = "") {
  if (a === b) return null;
  if (Array.isArray(a) && Array.isArray(b)) {
    for (let i = 0; i < Math.max(a.length, b.length); i++) {
      if (i >= a.length) return `${path}[${i}]: only through /mcp: ${short(b[i])}`;
      if (i >= b.length) return `${path}[${i}]: only direct: ${short(a[i])}`;
      const d = firstDiff(a[i], b[i], `${path}[${i}]`);
      if (d) return d;
    }
    return null;
  }
  if (a && b && typeof a === "object" && typeof b === "object" && !Array.isArray(a) && !Array.isArray(b)) {
    for (const k of [...new Set([...Object.keys(a), ...Object.keys(b)])]) {
      const p = path ? `${path}.${k}` : k;
      if (!(k in b)) return `${p}: only direct: ${short(a[k])}`;
      if (!(k in a)) return `${p}: only through /mcp: ${short(b[k])}`;
      const d = firstDiff(a[k], b[k], p);
      if (d) return d;
    }
    return null;
  }
  return `${path || "answer"}: ${short(a)} ≠ ${short(b)}`;
}
function short(v, n = 70) {
  const s = v === undefined ? "undefined" : JSON.stringify(v);
  return s.length > n ? `${s.slice(0, n - 1)}…` : s;
}
// tools/list: which tools are missing, and which fields differ.
function toolsDiff(d, m) {
  if (!Array.isArray(d) || !Array.isArray(m)) return firstDiff(d, m);
  const byName = new Map(m.map((t) => [t.name, t]));
  const missing = d.filter((t) => !byName.has(t.name)).map((t) => t.name);
  const extra = m.filter((t) => !d.some((x) => x.name === t.name)).map((t) => t.name);
  const fields = [];
  for (const t of d) {
    const o = byName.get(t.name);
    if (!o) continue;
    for (const k of new Set([...Object.keys(t), ...Object.keys(o)]))
      if (firstDiff(t[k], o[k])) fields.push(`${t.name}.${k}`);
  }
  const order = firstDiff(d.map((t) => t.name).filter((n) => byName.has(n)), m.map((t) => t.name).filter((n) => d.some((x) => x.name === n)));
  const parts = [];
  if (missing.length) parts.push(`not listed through /mcp: ${missing.join(", ")}`);
  if (extra.length) parts.push(`only through /mcp: ${extra.join(", ")}`);
  if (fields.length) parts.push(`differ: ${fields.join(", ")}`);
  if (order && !missing.length && !extra.length) parts.push(`order: ${order}`);
  return parts.length ? parts.join("; ") : null;
}
// The first error in an answer, in one short line.
function firstError(v) {
  if (Array.isArray(v)) {
    for (const x of v) {
      const e = firstError(x);
      if (e) return e;
    }
    return null;
  }
  if (!v || typeof v !== "object") return null;
  if (v.error && typeof v.error === "object") {
    const msg = String(v.error.message ?? "").replace(/\s+/g, " ").replace(/ input_value=.*$/, "");
    return short(`${v.error.code ?? ""} ${msg}`.trim(), 140).replace(/^"|"$/g, "");
  }
  for (const k of Object.keys(v)) {
    if (k === INFO) continue;
    const e = firstError(v[k]);
    if (e) return e;
  }
  return null;
}
function summary(v) {
  if (v === undefined) return "—";
  if (v && v.timeout) return "timeout";
  if (v && v.notListed) return "not listed";
  if (v && v.error) return v.error.code != null ? `error ${v.error.code}` : `error: ${String(v.error.message).split("\n")[0].slice(0, 60)}`;
  if (v && Array.isArray(v.content)) return v.isError ? "isError" : "ok";
  if (Array.isArray(v) && v.length && v.every((x) => x && x.error)) return summary(v[0]);
  if (Array.isArray(v) && v.some((x) => x && x.error)) return `${v.filter((x) => x && x.error).length} of ${v.length} fail`;
  return "ok";
}

// ---------------------------------------------------------------------------------------------
// The run.
// ---------------------------------------------------------------------------------------------
async function main() {
  const { Client } = require("@modelcontextprotocol/sdk/client/index.js");
  const { StreamableHTTPClientTransport } = require("@modelcontextprotocol/sdk/client/streamableHttp.js");
  const { StdioClientTransport } = require("@modelcontextprotocol/sdk/client/stdio.js");
  const { InMemoryTaskStore } = require("@modelcontextprotocol/sdk/experimental/tasks/stores/in-memory.js");
  const T = require("@modelcontextprotocol/sdk/types.js");
  const sdk = { Client, StreamableHTTPClientTransport, StdioClientTransport, T, InMemoryTaskStore };
  const { DIRECT_URL, MCP_URL, TOKEN, DIRECT_LOG, APP_LOG } = process.env;
  const format = process.argv.includes("--markdown") ? "markdown" : process.argv.includes("--json") ? "json" : "text";
  const only = process.env.FIDELITY_ONLY ? new RegExp(process.env.FIDELITY_ONLY) : null;
  const defs = new Map(rows().map((r) => [r.feature, r]));
  const tables = [];

  // The TypeScript SDK client, in this process: through /mcp, then through `datanotes mcp`
  // (stdio) unless FIDELITY_STDIO=0.
  const typescript = async (name, client, stdio) => {
    const t0 = Date.now();
    const both = {
      direct: await side("direct", DIRECT_URL, {}, DIRECT_LOG, sdk),
      mcp: await side("mcp", MCP_URL, { Authorization: `Bearer ${TOKEN}` }, APP_LOG, sdk, stdio),
    };
    // The engine's own operations (tools), which come first through /mcp.
    const ops = await (await fetch(new URL("/datanotes/operations/", MCP_URL), { headers: { Authorization: `Bearer ${TOKEN}` } })).json();
    for (const o of ops.operations ?? ops) both.mcp.engineOps.add(o.name);
    // The app asks for the client's roots 350 ms after initialize.
    await sleep(500);
    // The rows chosen, with the rows whose exchange they report on.
    const chosen = new Set([...defs.values()].filter((r) => !only || only.test(r.feature)).flatMap((r) => [r.feature, r.needs ?? []].flat()));
    const raw = [];
    for (const r of defs.values()) {
      if (!chosen.has(r.feature)) continue;
      const run = async (s) => {
        const go = async () => {
          const v = await r.run(s, both);
          if (r.twice) await r.run(s, both);
          return v;
        };
        let timer;
        const timeout = new Promise((res) => { timer = setTimeout(() => res({ timeout: true }), r.timeoutMs ?? 30000); });
        try {
          return await Promise.race([go(), timeout]);
        } catch (e) {
          return errorOf(e);
        } finally {
          clearTimeout(timer);
        }
      };
      let d, m;
      if (r.sequential) {
        d = await run(both.direct);
        m = await run(both.mcp);
      } else {
        [d, m] = await Promise.all([run(both.direct), run(both.mcp)]);
      }
      raw.push({ feature: r.feature, direct: d, mcp: m });
    }
    const protocol = (c) => c.transport?.protocolVersion ?? c._negotiatedProtocolVersion ?? "2025-11-25";
    tables.push(compare(name, client, { direct: protocol(both.direct.client), mcp: protocol(both.mcp.client) },
      raw, [], defs, Date.now() - t0));
    // Done with these connections (a session that still streams may not close at once).
    await Promise.race([Promise.allSettled([both.direct.client.close(), both.mcp.client.close()]), sleep(2000)]);
  };
  await typescript("typescript", `TypeScript SDK ${SDK_VERSION}`);
  const stdio = process.env.FIDELITY_STDIO !== "0" && process.env.DATANOTES
    ? [process.env.DATANOTES, "mcp", "--url", MCP_URL, "--token", TOKEN] : null;
  if (stdio) await typescript("typescript-stdio", `TypeScript SDK ${SDK_VERSION} over stdio (datanotes mcp)`, stdio);

  // The Python SDK clients (scripts/fidelity.py), one after the other: PYTHONS="name=python
  // ...", each through /mcp, then through `datanotes mcp` (stdio).
  const runs = (process.env.PYTHONS ?? "").split(/\s+/).filter(Boolean).flatMap((spec) => {
    const [name, python] = spec.split("=");
    return [[name, python, null], ...(stdio ? [[`${name}-stdio`, python, stdio]] : [])];
  });
  for (const [name, python, through] of runs) {
    const t0 = Date.now();
    const env = through ? { ...process.env, STDIO: JSON.stringify(through) } : process.env;
    const out = require("child_process").spawnSync(python, [require("path").join(__dirname, "fidelity.py")], {
      env, encoding: "utf8", timeout: 300000, maxBuffer: 256 << 20 });
    let doc;
    try {
      doc = JSON.parse(out.stdout.trim().split("\n").pop());
    } catch {
      doc = { fatal: `no answer (status ${out.status}): ${out.stderr.slice(-2000)}` };
    }
    if (doc.fatal) {
      tables.push({ name, client: doc.client ?? name, fatal: doc.fatal, results: [], notRun: [] });
      continue;
    }
    tables.push(compare(name, doc.client, doc.protocol, doc.rows, doc.notRun ?? [], defs, Date.now() - t0));
  }
  print(tables, format);
  const failed = tables.some((t) => t.fatal || t.results.some((r) => r.status === "FAIL" || r.status === "now equal"));
  process.exit(failed ? 1 : 0);
}

// One client's rows: compared, with their expected outcomes.
function compare(name, client, protocol, raw, notRun, defs, ms) {
  const results = [];
  for (const { feature, direct: d, mcp: m } of raw) {
    const r = defs.get(feature) ?? { feature };
    const dn = normal(namespaced(d));
    const mn = normal(m);
    let diff = (r.diff ?? firstDiff)(dn, mn);
    // An error on one side only says more than where the answers part.
    const de = firstError(d), me = firstError(m);
    if (diff && me && !de) diff = `through /mcp: ${me}`;
    else if (diff && de && !me) diff = `directly: ${de}`;
    // A client over stdio is expected what it is over HTTP.
    const base = name.replace(/-stdio$/, "");
    const exp = { ...(EXPECTED[feature] ?? { expected: "equal", why: "(not in the table: expected equal)" }), ...(EXPECTED_FOR[base]?.[feature] ?? {}) };
    const equal = !diff;
    // A known difference is the one pinned, no other.
    const pinned = (d) => (exp.diff instanceof RegExp ? exp.diff.test(d) : exp.diff === d);
    let status = equal ? (exp.expected === "equal" ? "ok" : "now equal") : exp.expected === "equal" ? "FAIL" : "known";
    if (status === "known" && !pinned(diff)) {
      status = "FAIL";
      diff = `differs otherwise than expected (${exp.diff ?? "no difference pinned"}): ${diff}`;
    }
    const show = (v) => (r.show && v && !v.error && !v.notListed && !v.timeout ? r.show(v) ?? summary(v) : summary(v));
    results.push({ feature, direct: show(d), mcp: show(m), equal, status, diff, why: exp.why, answers: { direct: d, mcp: m } });
  }
  return { name, client, protocol, results, notRun, seconds: (ms / 1000).toFixed(1) };
}

function print(tables, format) {
  const note = (r) => {
    if (r.status === "ok") return "";
    if (r.status === "now equal") return `expected to differ, now equal: update the table (${r.why})`;
    if (r.status === "FAIL") return `FAIL: ${r.diff}`;
    return r.why ? `${r.why}. First difference: ${r.diff}` : r.diff;
  };
  const tally = (t) => {
    const counts = {};
    for (const r of t.results) counts[r.status] = (counts[r.status] ?? 0) + 1;
    return `${t.results.length} rows: ${t.results.filter((r) => r.equal).length} equal, ${t.results.filter((r) => !r.equal).length} differ` +
      ` (${counts.known ?? 0} known, ${counts.FAIL ?? 0} failing), ${counts["now equal"] ?? 0} now equal that were expected to differ; ${t.seconds} s`;
  };
  const title = (t) => `${t.client}: protocol ${t.protocol?.direct ?? "?"} directly, ${t.protocol?.mcp ?? "?"} through /mcp`;
  if (format === "json") {
    console.log(JSON.stringify(tables.map((t) => ({ ...t, tally: t.fatal ? undefined : tally(t) })), null, 2));
    return;
  }
  for (const t of tables) {
    if (t.fatal) {
      console.log(`${format === "markdown" ? "### " : "fidelity: "}${t.client}: did not run: ${t.fatal}\n`);
      continue;
    }
    if (format === "markdown") {
      const cell = (s) => String(s ?? "").replace(/\|/g, "\\|").replace(/\n/g, " ");
      console.log(`### ${title(t)}\n`);
      console.log("| feature | direct | through /mcp | equal? | note |");
      console.log("|---|---|---|---|---|");
      for (const r of t.results) {
        const eq = r.equal ? "yes" : r.status === "FAIL" ? "**no (FAIL)**" : "no";
        const why = r.status === "known" ? r.why : r.status === "FAIL" ? `expected equal: ${r.diff}` : r.status === "now equal" ? `was expected to differ: ${r.why}` : "";
        console.log(`| ${cell(r.feature)} | ${cell(r.direct)} | ${cell(r.mcp)} | ${eq} | ${cell(why)} |`);
      }
      for (const n of t.notRun) console.log(`| ${cell(n.feature)} | — | — | not run | ${cell(n.why)} |`);
      console.log(`\n${tally(t)}\n`);
      continue;
    }
    const w = [44, 22, 22, 8];
    const pad = (s, n) => (String(s).length > n ? `${String(s).slice(0, n - 1)}…` : String(s).padEnd(n));
    console.log(`== ${title(t)}`);
    console.log(`${pad("feature", w[0])} ${pad("direct", w[1])} ${pad("through /mcp", w[2])} ${pad("equal?", w[3])} note`);
    for (const r of t.results) {
      const eq = r.equal ? "yes" : r.status === "FAIL" ? "NO" : "no";
      console.log(`${pad(r.feature, w[0])} ${pad(r.direct, w[1])} ${pad(r.mcp, w[2])} ${pad(eq, w[3])} ${note(r)}`);
    }
    for (const n of t.notRun) console.log(`${pad(n.feature, w[0])} ${pad("—", w[1])} ${pad("—", w[2])} ${pad("not run", w[3])} ${n.why}`);
    console.log(`fidelity: ${t.client}: ${tally(t)}`);
    const fails = t.results.filter((r) => r.status === "FAIL").map((r) => r.feature);
    if (fails.length) console.log(`fidelity: ${t.client}: expected equal but differ: ${fails.join("; ")}`);
    const now = t.results.filter((r) => r.status === "now equal").map((r) => r.feature);
    if (now.length) console.log(`fidelity: ${t.client}: expected to differ but now equal (update EXPECTED in scripts/fidelity.js and docs/fidelity.md): ${now.join("; ")}`);
    console.log("");
  }
}

// ---------------------------------------------------------------------------------------------
// Helpers.
// ---------------------------------------------------------------------------------------------
function pick(o, keys) {
  return Object.fromEntries(keys.filter((k) => o[k] !== undefined).map((k) => [k, o[k]]));
}
function sleep(ms) {
  return new Promise((r) => setTimeout(r, ms));
}
async function until(pred, ms) {
  const end = Date.now() + ms;
  while (!pred() && Date.now() < end) await sleep(20);
  return pred();
}
function readLog(file) {
  const fs = require("fs");
  if (!file || !fs.existsSync(file)) return [];
  return fs.readFileSync(file, "utf8").split("\n").filter(Boolean).map((l) => JSON.parse(l));
}

// ---------------------------------------------------------------------------------------------
// --proxy: a recording HTTP proxy in front of the everything server. Passes every request and
// answer through unchanged (streams too, ended when either end hangs up) and appends each
// JSON-RPC message it sees to $LOGFILE: {t, dir: "in" (to the app) | "out" (from it), sid, msg}.
// Listens on 127.0.0.1, a port the system picks, written to $PORTFILE; forwards to $TARGET.
// ---------------------------------------------------------------------------------------------
function proxy() {
  const http = require("http");
  const fs = require("fs");
  const target = new URL(process.env.TARGET);
  const logfile = process.env.LOGFILE;
  const record = (dir, sid, body) => {
    let msgs;
    try {
      msgs = JSON.parse(body);
    } catch {
      return;
    }
    for (const msg of Array.isArray(msgs) ? msgs : [msgs])
      fs.appendFileSync(logfile, `${JSON.stringify({ t: Date.now(), dir, sid, msg })}\n`);
  };
  const srv = http.createServer((req, res) => {
    const chunks = [];
    req.on("data", (c) => chunks.push(c));
    req.on("end", () => {
      const body = Buffer.concat(chunks);
      const up = http.request({ host: target.hostname, port: target.port, method: req.method, path: req.url, headers: req.headers }, (r) => {
        const sid = req.headers["mcp-session-id"] || r.headers["mcp-session-id"];
        if (body.length) record("in", sid, body.toString());
        if (req.method === "GET") fs.appendFileSync(logfile, `${JSON.stringify({ t: Date.now(), dir: "get", sid, lastEventId: req.headers["last-event-id"] })}\n`);
        res.writeHead(r.statusCode, r.headers);
        const sse = /text\/event-stream/.test(r.headers["content-type"] || "");
        let buf = "";
        r.on("data", (c) => {
          res.write(c);
          buf += c.toString();
          if (!sse) return;
          let i;
          while ((i = buf.search(/\r?\n\r?\n/)) >= 0) {
            const ev = buf.slice(0, i);
            buf = buf.slice(buf.slice(i).match(/^\r?\n\r?\n/)[0].length + i);
            const data = ev.split(/\r?\n/).filter((l) => l.startsWith("data:")).map((l) => l.slice(5).replace(/^ /, "")).join("\n");
            if (data) record("out", sid, data);
          }
        });
        r.on("end", () => {
          if (!sse && buf) record("out", sid, buf);
          res.end();
        });
        r.on("error", () => res.destroy());
      });
      up.on("error", (e) => {
        if (!res.headersSent) res.writeHead(502);
        res.end(String(e));
      });
      res.on("close", () => up.destroy());
      up.end(body);
    });
  });
  srv.listen(0, "127.0.0.1", () => fs.writeFileSync(process.env.PORTFILE, String(srv.address().port)));
}

if (process.argv[2] === "--proxy") {
  proxy();
} else {
  main().catch((e) => {
    console.error("fidelity:", e && e.stack ? e.stack : e);
    process.exit(2);
  });
}
