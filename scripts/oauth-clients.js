// The official TypeScript SDK's OAuth client against /mcp (run by scripts/oauth-clients, which
// starts the server and gives BASE, OWNER_TOKEN, ACCESS_TTL and RESULTS, a file of JSON lines, one
// per checked step: {client, step, ok, detail}).
//
//   node scripts/oauth-clients.js              the contract's discovery documents, then the
//                                              SDK's OAuth client end to end (below)
//   node scripts/oauth-clients.js --consent    the consent page only, for scripts/oauth-clients.py:
//                                              AUTH_URL (an authorization URL), GRANT (tool names,
//                                              comma separated), DECISION (allow or deny); the
//                                              browser ends on the client's redirect_uri
//
// The SDK's flow: an in-memory OAuthClientProvider with StreamableHTTPClientTransport({authProvider});
// connect -> 401 -> RFC 9728 and RFC 8414 discovery -> RFC 7591 registration (a public client) ->
// redirectToAuthorization(url), which opens the consent page in a real headless Chromium
// (playwright-core + @sparticuz/chromium): the owner signs in with the owner token, ticks read
// tools only and clicks Allow; a local callback server (the redirect_uri) receives code, state
// and iss -> transport.finishAuth(code) -> reconnect: tools/list shows the granted tools only, a
// call succeeds, a write tool is refused; after the access token expires the SDK refreshes it;
// the rotated-out refresh token is refused; Deny; revocation. Then shorter runs for a
// client_secret_basic client (ts-basic) and, with CIMD_BASE (a server run with
// --oauth-private-clients) and CIMD_OWNER_TOKEN, a client ID metadata document client (ts-cimd);
// with ANY_PORT=1 also one whose document names its loopback redirect without a port (ts-anyport,
// RFC 8252 section 7.3). OAUTH_CLIENTS_DEBUG=1: the consent driver's steps, timed, on stderr.
"use strict";

const http = require("http");
const crypto = require("crypto");
const fs = require("fs");
const { chromium: playwright } = require("playwright-core");
const chromium = require("@sparticuz/chromium").default;
const { Client } = require("@modelcontextprotocol/sdk/client/index.js");
const { StreamableHTTPClientTransport } = require("@modelcontextprotocol/sdk/client/streamableHttp.js");
const { UnauthorizedError, startAuthorization } = require("@modelcontextprotocol/sdk/client/auth.js");

const TIMEOUT = 30_000; // every wait, unless said otherwise
const base = (process.env.BASE || "").replace(/\/$/, "");
const ownerToken = process.env.OWNER_TOKEN;
const ttl = Number(process.env.ACCESS_TTL || 3);
const GRANT = ["list_tables", "select_rows"]; // read tools the owner ticks

// ---------------------------------------------------------------------------------------------
// Results

const started = Date.now();
let failed = 0;
function record(client, step, ok, detail) {
  if (!ok) failed++;
  const line = { client, step, ok, detail: detail || "" };
  if (process.env.RESULTS) fs.appendFileSync(process.env.RESULTS, JSON.stringify(line) + "\n");
  console.log(`${ok ? "PASS" : "FAIL"} [${client}] ${step}${detail ? ` (${detail})` : ""} [${((Date.now() - started) / 1000).toFixed(1)} s]`);
}
class Fail extends Error {}
/** OAUTH_CLIENTS_DEBUG=1: the consent driver's steps, timed, on stderr. */
function debug(what) {
  if (process.env.OAUTH_CLIENTS_DEBUG) console.error(`  [${((Date.now() - started) / 1000).toFixed(1)} s] ${what}`);
}
function check(cond, what) {
  if (!cond) throw new Fail(what);
}
/** A promise that fails after `ms` with a message naming what was awaited. */
function within(ms, promise, what) {
  let timer;
  return Promise.race([
    promise,
    new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Fail(`timed out after ${ms / 1000} s: ${what}`)), ms);
    }),
  ]).finally(() => clearTimeout(timer));
}
function short(v, n = 300) {
  const s = typeof v === "string" ? v : JSON.stringify(v);
  return s && s.length > n ? `${s.slice(0, n)}...` : s;
}

// ---------------------------------------------------------------------------------------------
// The browser and the consent page

// One browser and one context for the run, with one blank page kept open: this Chromium runs as a
// single process, which ends with its last context. Each consent gets a page of its own and
// starts signed out (cookies cleared). A browser that died is replaced.
let browserPromise;
function launch() {
  return (async () => {
    const browser = await playwright.launch({ executablePath: await chromium.executablePath(), args: chromium.args, headless: true });
    const context = await browser.newContext();
    await context.newPage();
    return { browser, context };
  })();
}
/** A fresh page in the shared context, signed out; relaunches the browser once if it is broken. */
async function freshPage() {
  for (let attempt = 0; ; attempt++) {
    browserPromise ||= launch();
    const b = await within(60_000, browserPromise, "launching headless Chromium");
    try {
      if (!b.browser.isConnected()) throw new Error("the browser is gone");
      await within(10_000, b.context.clearCookies(), "clearing the browser's cookies");
      return await within(10_000, b.context.newPage(), "opening a browser page");
    } catch (e) {
      if (attempt > 0) throw e;
      debug(`consent: relaunching the browser (${e.message.split("\n")[0]})`);
      const old = b.browser;
      browserPromise = null;
      bounded(old.close(), 5000);
    }
  }
}
/** Waits for `promise` at most `ms`, whatever its outcome (cleanup that must not hang the run). */
function bounded(promise, ms) {
  return Promise.race([Promise.resolve(promise).catch(() => {}), new Promise((r) => setTimeout(r, ms).unref())]);
}

/** Opens the authorization URL in Chromium, signs in with the owner token, ticks exactly `grant`
 * (call_tools; no write table, no schema change, no maintenance) and clicks Allow (or Deny).
 * Resolves once the browser is on the client's redirect_uri. Returns what the page offered. */
function consent(authUrl, options) {
  return within(90_000, consentPage(authUrl, options), "the consent in Chromium");
}
async function consentPage(authUrl, { grant = GRANT, decision = "allow", token = ownerToken } = {}) {
  const redirect = new URL(authUrl).searchParams.get("redirect_uri");
  check(redirect, `the authorization URL has no redirect_uri: ${authUrl}`);
  debug(`consent: ${decision} ${authUrl.slice(0, 80)}`);
  const errors = [];
  const page = await freshPage();
  try {
    page.setDefaultTimeout(TIMEOUT);
    page.on("pageerror", (e) => errors.push(String(e)));
    page.on("console", (m) => m.type() === "error" && errors.push(m.text()));
    debug("consent: new page");
    const res = await page.goto(authUrl, { timeout: TIMEOUT });
    debug(`consent: page loaded (${res && res.status()})`);
    if (!res || res.status() !== 200) {
      const text = res ? (await res.text()).replace(/<(script|style)[^]*?<\/\1>/g, "").replace(/<[^>]*>/g, " ").replace(/&quot;/g, '"').replace(/&amp;/g, "&").replace(/\s+/g, " ").trim() : "";
      throw new Fail(`GET /oauth/authorize answered ${res && res.status()}: ${short(text, 400)}`);
    }
    check(/text\/html/.test(res.headers()["content-type"] || ""), `the consent page is ${res.headers()["content-type"]}, not HTML`);
    await page.waitForSelector("#consent", { state: "attached" }).catch(() => {
      throw new Fail("the consent page has no #consent element");
    });
    const request = await page.getAttribute("#consent", "data-request");
    check(request !== null, "#consent has no data-request attribute");
    await page.fill("#consent-token", token).catch((e) => {
      throw new Fail(`cannot type the owner token into #consent-token: ${e.message.split("\n")[0]}`);
    });
    await page.click("#consent-signin-form [type=submit]").catch((e) => {
      throw new Fail(`cannot click the submit button of #consent-signin-form: ${e.message.split("\n")[0]}`);
    });
    const said = async () => {
      const e = ((await page.textContent("#consent-error").catch(() => "")) || "").trim();
      const text = e || ((await page.textContent("body").catch(() => "")) || "").replace(/\s+/g, " ");
      return `${e ? "#consent-error" : "page text"}: ${short(text, 300)}${errors.length ? `; page errors: ${short(errors)}` : ""}`;
    };
    // The rights form, or the page saying why not (a refused token), whichever comes first.
    await page.waitForFunction(() => {
      const f = document.querySelector("#consent-form");
      const e = document.querySelector("#consent-error");
      return (f && !f.hidden && f.offsetParent !== null) || (e && e.textContent.trim());
    }).catch(() => {});
    debug("consent: signed in");
    if (!(await page.isVisible("#consent-form"))) throw new Fail(`#consent-form did not appear after signing in (${await said()})`);
    const offered = await page.$$eval("input[name=call_tools]", (els) => els.map((e) => e.value));
    const writes = await page.$$eval("input[name=write]", (els) => els.map((e) => e.value));
    for (const t of grant) check(offered.includes(t), `the consent form offers no call_tools checkbox for ${t} (offered: ${offered.join(", ")})`);
    for (const sel of ["input[name=write]", "#consent-ddl", "#consent-maintain", "input[name=call_tools]"]) {
      const boxes = page.locator(sel);
      const n = await boxes.count();
      check(n > 0 || sel === "input[name=write]", `the consent form has no ${sel}`);
      for (let i = 0; i < n; i++) await boxes.nth(i).setChecked(false);
    }
    for (const t of grant) await page.locator(`input[name=call_tools][value="${t}"]`).setChecked(true);
    const arrived = page.waitForURL((u) => u.href.startsWith(redirect), { timeout: TIMEOUT, waitUntil: "commit" });
    debug("consent: boxes set");
    await page.click(decision === "deny" ? "#consent-deny" : "#consent-allow");
    debug("consent: clicked");
    await arrived.catch(async () => {
      throw new Fail(`after ${decision} the browser did not go to the redirect_uri ${redirect} (it is on ${page.url()}; ${await said()})`);
    });
    debug("consent: on the redirect_uri");
    return { request, offered, writes, errors };
  } finally {
    // The page stays open until the browser closes: closing a page that has just been
    // redirected to the callback sometimes never finishes in this single-process Chromium (seen
    // under load: minutes, then a browser without its context).
    debug("consent: done");
  }
}

// ---------------------------------------------------------------------------------------------
// The redirect_uri: a local callback server

/** A server on 127.0.0.1:<free port>/callback; next() resolves with the next callback's query. */
async function callbackServer() {
  const waiting = [];
  const arrived = [];
  const served = []; // fetches of the client ID metadata document
  const self = { document: null, served };
  const server = http.createServer((req, res) => {
    const u = new URL(req.url, "http://127.0.0.1");
    if (u.pathname === "/client.json" && self.document) {
      served.push(req.headers["user-agent"] || "");
      res.writeHead(200, { "Content-Type": "application/json" }).end(JSON.stringify(self.document));
      return;
    }
    if (u.pathname !== "/callback") {
      res.writeHead(404).end();
      return;
    }
    const q = Object.fromEntries(u.searchParams);
    res.writeHead(200, { "Content-Type": "text/html" }).end("<!doctype html><title>done</title><p>You may close this window.</p>");
    if (waiting.length) waiting.shift()(q);
    else arrived.push(q);
  });
  await new Promise((r) => server.listen(0, "127.0.0.1", r));
  return Object.assign(self, {
    url: `http://127.0.0.1:${server.address().port}/callback`,
    documentUrl: `http://127.0.0.1:${server.address().port}/client.json`,
    next: () => {
      const p = within(TIMEOUT, arrived.length ? Promise.resolve(arrived.shift()) : new Promise((r) => waiting.push(r)), "the redirect to the callback server");
      p.catch(() => {}); // awaited later, after the consent; a failed consent is the error then
      return p;
    },
    close: () => server.close(),
  });
}

// ---------------------------------------------------------------------------------------------
// The contract's discovery documents, fetched raw

async function getJson(url, init) {
  const r = await within(TIMEOUT, fetch(url, init), `${(init && init.method) || "GET"} ${url}`);
  const text = await r.text();
  let body;
  try {
    body = JSON.parse(text);
  } catch {
    body = undefined;
  }
  return { status: r.status, headers: r.headers, text, body };
}

async function contract() {
  const C = "contract";
  const mcp = `${base}/mcp`;
  let asMeta;
  const steps = [
    ["/mcp without a token: 401 + WWW-Authenticate resource_metadata", async () => {
      const r = await getJson(mcp, {
        method: "POST",
        headers: { "Content-Type": "application/json", Accept: "application/json, text/event-stream" },
        body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "initialize", params: { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "probe", version: "1" } } }),
      });
      const h = r.headers.get("www-authenticate") || "";
      check(r.status === 401, `POST /mcp without a token answered ${r.status}: ${short(r.text)}`);
      check(/^Bearer\b/i.test(h) && /resource_metadata="[^"]+"/.test(h), `WWW-Authenticate is ${JSON.stringify(h)}`);
      return h;
    }],
    ["RFC 9728 protected resource metadata (with and without /mcp)", async () => {
      const out = [];
      for (const path of ["/.well-known/oauth-protected-resource/mcp", "/.well-known/oauth-protected-resource"]) {
        const r = await getJson(base + path);
        check(r.status === 200 && r.body, `GET ${path} answered ${r.status}: ${short(r.text)}`);
        check(r.body.resource === mcp, `GET ${path}: resource is ${JSON.stringify(r.body.resource)}, expected ${mcp}`);
        const servers = r.body.authorization_servers || [];
        check(servers.some((s) => s.replace(/\/$/, "") === base), `GET ${path}: authorization_servers ${JSON.stringify(servers)} does not name ${base}`);
        out.push(path);
      }
      return `resource ${mcp}`;
    }],
    ["RFC 8414 authorization server metadata", async () => {
      const r = await getJson(`${base}/.well-known/oauth-authorization-server`);
      check(r.status === 200 && r.body, `answered ${r.status}: ${short(r.text)}`);
      const m = r.body;
      asMeta = m; // the SDK flows run on what is there, even when a check below fails
      const want = {
        authorization_endpoint: `${base}/oauth/authorize`,
        token_endpoint: `${base}/oauth/token`,
        registration_endpoint: `${base}/oauth/register`,
      };
      for (const [k, v] of Object.entries(want)) check(m[k] === v, `${k} is ${JSON.stringify(m[k])}, expected ${v}`);
      check(typeof m.revocation_endpoint === "string", `no revocation_endpoint`);
      check(m.issuer && m.issuer.replace(/\/$/, "") === base, `issuer is ${JSON.stringify(m.issuer)}, expected ${base}`);
      check(JSON.stringify(m.code_challenge_methods_supported) === '["S256"]', `code_challenge_methods_supported is ${JSON.stringify(m.code_challenge_methods_supported)}`);
      check(m.client_id_metadata_document_supported === true, `client_id_metadata_document_supported is ${JSON.stringify(m.client_id_metadata_document_supported)}`);
      const methods = m.token_endpoint_auth_methods_supported || [];
      for (const x of ["none", "client_secret_post", "client_secret_basic"]) check(methods.includes(x), `token_endpoint_auth_methods_supported ${JSON.stringify(methods)} lacks ${x}`);
      check((m.grant_types_supported || ["authorization_code"]).includes("refresh_token"), `grant_types_supported ${JSON.stringify(m.grant_types_supported)} lacks refresh_token`);
      return `issuer ${m.issuer}`;
    }],
    ["RFC 9207: the metadata says the redirect carries iss", async () => {
      check(asMeta, "no authorization server metadata");
      check(asMeta.authorization_response_iss_parameter_supported === true, `authorization_response_iss_parameter_supported is ${JSON.stringify(asMeta.authorization_response_iss_parameter_supported)}, while the consent page sends iss (RFC 9207 section 3: absent means false)`);
      return "authorization_response_iss_parameter_supported: true";
    }],
  ];
  for (const [name, fn] of steps) {
    try {
      record(C, name, true, await fn());
    } catch (e) {
      record(C, name, false, e.message);
    }
  }
  return asMeta;
}

// ---------------------------------------------------------------------------------------------
// The TypeScript SDK's OAuth client

/** An OAuthClientProvider kept in memory (the SDK's interface; nothing on disk). */
class MemoryProvider {
  constructor(redirectUrl, authMethod) {
    this._redirectUrl = redirectUrl;
    this._authMethod = authMethod;
    this.client = undefined;
    this.saved = []; // every token set saveTokens received, in order
    this.authUrls = [];
    this.states = [];
    this.invalidated = [];
  }
  get redirectUrl() {
    return this._redirectUrl;
  }
  get clientMetadata() {
    return {
      client_name: "datanotes oauth-clients (TypeScript SDK)",
      redirect_uris: [this._redirectUrl],
      grant_types: ["authorization_code", "refresh_token"],
      response_types: ["code"],
      token_endpoint_auth_method: this._authMethod,
    };
  }
  state() {
    const s = crypto.randomBytes(16).toString("base64url");
    this.states.push(s);
    return s;
  }
  clientInformation() {
    return this.client;
  }
  saveClientInformation(info) {
    this.client = info;
  }
  tokens() {
    return this.saved[this.saved.length - 1];
  }
  saveTokens(tokens) {
    this.saved.push(tokens);
  }
  redirectToAuthorization(url) {
    this.authUrls.push(new URL(url));
  }
  saveCodeVerifier(v) {
    this.verifier = v;
  }
  codeVerifier() {
    return this.verifier;
  }
  invalidateCredentials(scope) {
    this.invalidated.push(scope);
    if (scope === "all" || scope === "tokens") this.saved.push(undefined);
    if (scope === "all" || scope === "client") this.client = undefined;
  }
}

function toolError(result) {
  return result && result.isError ? (result.content || []).map((c) => c.text).join(" ") : null;
}

async function typescriptFlow(asMeta) {
  const C = "typescript";
  const cb = await callbackServer();
  const provider = new MemoryProvider(cb.url, "none");
  const url = new URL(`${base}/mcp`);
  const clients = [];
  let step = "";
  const run = async (name, fn) => {
    step = name;
    const detail = await fn();
    record(C, name, true, detail);
    return detail;
  };
  try {
    let authUrl;
    await run("connect -> 401 -> discovery -> dynamic registration -> redirectToAuthorization", async () => {
      const client = new Client({ name: "oauth-clients-ts", version: "1.0" });
      clients.push(client);
      const transport = new StreamableHTTPClientTransport(url, { authProvider: provider });
      let err;
      try {
        await within(TIMEOUT, client.connect(transport), "the first connect");
      } catch (e) {
        err = e;
      }
      check(err instanceof UnauthorizedError, `the first connect should stop with UnauthorizedError (the user must consent), got ${err ? `${err.constructor.name}: ${err.message}` : "a connection"}`);
      check(provider.client && provider.client.client_id, "the SDK registered no client");
      check(provider.authUrls.length === 1, `redirectToAuthorization was called ${provider.authUrls.length} times`);
      authUrl = provider.authUrls[0];
      const p = authUrl.searchParams;
      check(authUrl.href.startsWith(`${base}/oauth/authorize?`), `the authorization URL is ${authUrl.href}`);
      const want = { response_type: "code", code_challenge_method: "S256", client_id: provider.client.client_id, redirect_uri: cb.url, resource: `${base}/mcp`, state: provider.states[0] };
      for (const [k, v] of Object.entries(want)) check(p.get(k) === v, `the authorization URL's ${k} is ${JSON.stringify(p.get(k))}, expected ${JSON.stringify(v)}`);
      check(p.get("code_challenge"), "no code_challenge");
      return `client_id ${provider.client.client_id}, token_endpoint_auth_method ${provider.client.token_endpoint_auth_method || "(not echoed)"}`;
    });

    let callback;
    await run(`consent in headless Chromium: owner signs in, ticks ${GRANT.join(" + ")} only, Allow`, async () => {
      const t0 = Date.now();
      const next = cb.next();
      const page = await consent(authUrl.href);
      callback = await next;
      check(!callback.error, `the callback carries error=${callback.error} ${callback.error_description || ""}`);
      check(callback.code, `the callback has no code: ${JSON.stringify(callback)}`);
      return `offered tools: ${page.offered.length}, write tables: ${page.writes.length}; ${Date.now() - t0} ms`;
    });

    await run("redirect carries state and iss (RFC 9207)", async () => {
      check(callback.state === provider.states[0], `state is ${JSON.stringify(callback.state)}, expected ${JSON.stringify(provider.states[0])}`);
      const issuer = asMeta ? asMeta.issuer : base;
      check(callback.iss === issuer, `iss is ${JSON.stringify(callback.iss)}, expected ${JSON.stringify(issuer)}`);
      return `iss ${callback.iss}`;
    });

    let first;
    await run("transport.finishAuth(code): code + PKCE verifier -> tokens", async () => {
      const transport = new StreamableHTTPClientTransport(url, { authProvider: provider });
      await within(TIMEOUT, transport.finishAuth(callback.code), "finishAuth");
      first = provider.tokens();
      check(first && first.access_token, "saveTokens got no access token");
      check(/^bearer$/i.test(first.token_type), `token_type is ${first.token_type}`);
      check(first.refresh_token, "no refresh_token");
      check(first.expires_in === ttl, `expires_in is ${first.expires_in}, expected ${ttl} (DATANOTES_OAUTH_ACCESS_TTL)`);
      return `expires_in ${first.expires_in}, scope ${JSON.stringify(first.scope)}`;
    });

    let client;
    await run("reconnect with the token: initialize", async () => {
      client = new Client({ name: "oauth-clients-ts", version: "1.0" });
      clients.push(client);
      await within(TIMEOUT, client.connect(new StreamableHTTPClientTransport(url, { authProvider: provider })), "connect");
      return `server ${client.getServerVersion().name} ${client.getServerVersion().version}`;
    });

    await run("tools/list shows only the granted tools", async () => {
      const { tools } = await within(TIMEOUT, client.listTools(), "tools/list");
      const names = tools.map((t) => t.name).sort();
      check(JSON.stringify(names) === JSON.stringify([...GRANT].sort()), `tools/list answered ${names.join(", ")}; granted ${GRANT.join(", ")}`);
      return names.join(", ");
    });

    await run("tools/call list_tables succeeds", async () => {
      const r = await within(TIMEOUT, client.callTool({ name: "list_tables", arguments: {} }), "tools/call list_tables");
      check(!toolError(r), `list_tables failed: ${toolError(r)}`);
      const text = JSON.stringify(r.structuredContent || r.content);
      check(text.includes("personal.tasks.items"), `list_tables does not name the demo's tables: ${short(text)}`);
      return "the demo's tables";
    });

    await run("a write tool (insert_row) is refused", async () => {
      const title = `written through OAuth (${C})`;
      const r = await within(TIMEOUT, client.callTool({ name: "insert_row", arguments: { table: "personal.tasks.items", values: { title } } }), "tools/call insert_row");
      // The refusal is the tool's answer (isError), naming the tool: not a transport error.
      const err = toolError(r);
      check(err && err.includes("may not call the tool insert_row"), `insert_row was not refused as a tool it may not call: ${short(r)}`);
      const rows = await getJson(`${base}/datanotes/select_rows/`, {
        method: "POST",
        headers: { authorization: `Bearer ${ownerToken}`, "content-type": "application/json" },
        body: JSON.stringify({ table: "personal.tasks.items", where: [{ column: "title", op: "=", value: title }] }),
      });
      check(rows.status === 200 && Array.isArray(rows.body && rows.body.rows), `the owner's select_rows answered ${rows.status}: ${short(rows.text)}`);
      check(rows.body.rows.length === 0, `the refused insert_row wrote a row: ${short(rows.text)}`);
      return short(`isError: ${err}; no row written`, 160);
    });

    await run(`after the access token expires (${ttl} s) the SDK refreshes it and the call succeeds`, async () => {
      const before = provider.saved.length;
      const old = provider.tokens();
      await new Promise((r) => setTimeout(r, (ttl + 1.5) * 1000));
      const r = await within(TIMEOUT, client.callTool({ name: "list_tables", arguments: {} }), "tools/call after expiry");
      check(!toolError(r), `list_tables failed after expiry: ${toolError(r)}`);
      const now = provider.tokens();
      check(provider.saved.length > before && now && now.access_token !== old.access_token, `no new access token was saved (saveTokens calls: ${provider.saved.length - before})`);
      check(now.refresh_token && now.refresh_token !== old.refresh_token, "the refresh token did not rotate");
      return `saveTokens called ${provider.saved.length - before} time(s); new access and refresh tokens`;
    });

    await run("the rotated-out refresh token is refused", async () => {
      const r = await getJson(asMeta.token_endpoint, {
        method: "POST",
        headers: { "Content-Type": "application/x-www-form-urlencoded" },
        body: new URLSearchParams({ grant_type: "refresh_token", refresh_token: first.refresh_token, client_id: provider.client.client_id }),
      });
      check(r.status === 400 && r.body && r.body.error === "invalid_grant", `reusing the first refresh token answered ${r.status}: ${short(r.text)}`);
      return "400 invalid_grant";
    });

    await run("the session still works after the reuse attempt", async () => {
      const r = await within(TIMEOUT, client.callTool({ name: "list_tables", arguments: {} }), "tools/call");
      // RFC 9700 allows revoking the whole grant when a rotated-out refresh token comes back;
      // either outcome is reported, a silent wrong answer is not.
      check(!toolError(r), `list_tables failed: ${toolError(r)}`);
      return "list_tables ok";
    }).catch((e) => record(C, "the session still works after the reuse attempt", true, `no: the grant was revoked on reuse (${short(e.message, 120)})`));

    await run("Deny: the redirect carries error=access_denied and the state", async () => {
      const state = crypto.randomBytes(16).toString("base64url");
      const { authorizationUrl } = await startAuthorization(base, { metadata: asMeta, clientInformation: provider.client, redirectUrl: cb.url, state, resource: new URL(`${base}/mcp`) });
      const next = cb.next();
      await consent(authorizationUrl.href, { decision: "deny" });
      const q = await next;
      check(q.error === "access_denied", `the callback is ${JSON.stringify(q)}`);
      check(q.state === state, `state is ${JSON.stringify(q.state)}, expected ${state}`);
      check(!q.code, "a code came with the denial");
      return `error=access_denied, iss ${q.iss}`;
    });

    await run("RFC 7009 revocation: a revoked access token is refused by /mcp", async () => {
      const token = provider.tokens().access_token;
      const r = await getJson(asMeta.revocation_endpoint, {
        method: "POST",
        headers: { "Content-Type": "application/x-www-form-urlencoded" },
        body: new URLSearchParams({ token, client_id: provider.client.client_id }),
      });
      check(r.status === 200, `revocation answered ${r.status}: ${short(r.text)}`);
      const m = await getJson(`${base}/mcp`, {
        method: "POST",
        headers: { Authorization: `Bearer ${token}`, "Content-Type": "application/json", Accept: "application/json, text/event-stream" },
        body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "initialize", params: { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "probe", version: "1" } } }),
      });
      check(m.status === 401, `/mcp with the revoked token answered ${m.status}: ${short(m.text)}`);
      return "revoked: 200; /mcp: 401";
    });
  } catch (e) {
    record(C, step, false, e instanceof Fail ? e.message : (e && e.stack) || String(e));
  } finally {
    for (const c of clients) await c.close().catch(() => {});
    cb.close();
  }
}


/** A shorter run of the TypeScript SDK's flow for another kind of client: registration (or
 * none), consent, finishAuth, tools/list and a call, and with `refresh`, a call after expiry.
 *  - ts-basic: a confidential client registered with client_secret_basic (the SDK sends its
 *    secret in the Authorization header to the token endpoint, for the code and the refresh).
 *  - ts-cimd: a client ID metadata document client: the client_id is the URL of a JSON document
 *    the server fetches. The SDKs' own clientMetadataUrl accepts https URLs only, which a loopback
 *    test cannot serve to the server; so the SDK gets the URL as its client information (what it
 *    does itself with clientMetadataUrl), the document is served on loopback http by the callback
 *    server, and that server (CIMD_BASE) runs with --oauth-private-clients. */
async function shortFlow(C, flowBase, { authMethod = "none", cimd = false, anyPort = false, refresh = false, token = ownerToken } = {}) {
  const cb = await callbackServer();
  const provider = new MemoryProvider(cb.url, authMethod);
  if (cimd) {
    provider.client = { client_id: cb.documentUrl };
    cb.document = { ...provider.clientMetadata, client_id: cb.documentUrl, client_name: "datanotes oauth-clients (CIMD)" };
    // A static document cannot know the port a native client will listen on: it names the
    // loopback redirect without one, and the client uses any port (RFC 8252 section 7.3).
    if (anyPort) cb.document.redirect_uris = [cb.url.replace(/:\d+\//, "/")];
  }
  const url = new URL(`${flowBase}/mcp`);
  // How the SDK authenticates to the token endpoint: the transports' fetch, watched.
  const tokenAuth = [];
  const watched = async (input, init) => {
    const u = String(input instanceof Request ? input.url : input);
    if (u.startsWith(`${flowBase}/oauth/token`)) {
      const h = new Headers(init && init.headers);
      const body = String((init && init.body) || "");
      tokenAuth.push(/^basic /i.test(h.get("authorization") || "") ? "basic" : /(^|&)client_secret=/.test(body) ? "post" : "none");
    }
    return fetch(input, init);
  };
  const transport = () => new StreamableHTTPClientTransport(url, { authProvider: provider, fetch: watched });
  let step = `connect -> 401 -> discovery -> ${cimd ? "a URL client_id" : `registration (${authMethod})`} -> redirectToAuthorization`;
  let client;
  try {
    client = new Client({ name: `oauth-clients-${C}`, version: "1.0" });
    let err;
    try {
      await within(TIMEOUT, client.connect(transport()), "the first connect");
    } catch (e) {
      err = e;
    }
    check(err instanceof UnauthorizedError, `expected UnauthorizedError, got ${err ? `${err.constructor.name}: ${err.message}` : "a connection"}`);
    check(provider.authUrls.length === 1, `redirectToAuthorization was called ${provider.authUrls.length} times`);
    if (cimd) check(provider.authUrls[0].searchParams.get("client_id") === cb.documentUrl, `the authorization URL is ${provider.authUrls[0]}`);
    else check(provider.client.client_secret && provider.client.token_endpoint_auth_method === authMethod, `the registration answered ${short(provider.client)}`);
    step = "consent in Chromium";
    const next = cb.next();
    await consent(provider.authUrls[0].href, { token });
    const q = await next;
    check(q.code && q.state === provider.states[0], `the callback is ${JSON.stringify(q)}`);
    if (cimd) check(cb.served.length > 0, "the server never fetched the client ID metadata document");
    step = "finishAuth, connect, tools/list, tools/call";
    await within(TIMEOUT, transport().finishAuth(q.code), "finishAuth");
    client = new Client({ name: `oauth-clients-${C}`, version: "1.0" });
    await within(TIMEOUT, client.connect(transport()), "connect");
    const { tools } = await within(TIMEOUT, client.listTools(), "tools/list");
    const names = tools.map((t) => t.name).sort();
    check(JSON.stringify(names) === JSON.stringify([...GRANT].sort()), `tools/list answered ${names.join(", ")}`);
    const r = await within(TIMEOUT, client.callTool({ name: "list_tables", arguments: {} }), "tools/call list_tables");
    check(!toolError(r), `list_tables failed: ${toolError(r)}`);
    record(C, anyPort ? "loopback redirect_uri registered without a port, used with one (RFC 8252 7.3)" : cimd ? "URL client_id: the server fetched the document; consent, token, tools/list, tools/call" : `${authMethod} client: registration, consent, token, tools/list, tools/call`, true,
      cimd ? `document fetched ${cb.served.length} time(s); ${names.join(", ")}` : `client_id ${provider.client.client_id}`);
    if (refresh) {
      step = `refresh after expiry (${authMethod})`;
      const old = provider.tokens();
      await new Promise((res) => setTimeout(res, (ttl + 1.5) * 1000));
      const r2 = await within(TIMEOUT, client.callTool({ name: "list_tables", arguments: {} }), "tools/call after expiry");
      check(!toolError(r2), `list_tables failed after expiry: ${toolError(r2)}`);
      check(provider.tokens().access_token !== old.access_token, "no new access token was saved");
      const want = { client_secret_basic: "basic", client_secret_post: "post", none: "none" }[authMethod];
      check(tokenAuth.length >= 2 && tokenAuth.every((a) => a === want), `the SDK's token requests authenticated as ${tokenAuth.join(", ")}; registered ${authMethod}`);
      record(C, step, true, `new access token; token requests: ${tokenAuth.join(", ")}`);
    }
  } catch (e) {
    record(C, step, false, e instanceof Fail ? e.message : (e && e.stack) || String(e));
  } finally {
    if (client) await client.close().catch(() => {});
    cb.close();
  }
}

// ---------------------------------------------------------------------------------------------

async function main() {
  if (process.argv.includes("--consent")) {
    // For scripts/oauth-clients.py: drive the consent page and report what it offered.
    const grant = (process.env.GRANT || GRANT.join(",")).split(",").filter(Boolean);
    const page = await consent(process.env.AUTH_URL, { grant, decision: process.env.DECISION || "allow" });
    process.stdout.write(JSON.stringify({ ok: true, offered: page.offered, writes: page.writes }) + "\n");
    return;
  }
  check(base && ownerToken, "BASE and OWNER_TOKEN are needed");
  const asMeta = await contract();
  if (!asMeta) {
    record("typescript", "the SDK's flow", false, "not run: the authorization server metadata is missing");
  } else {
    await typescriptFlow(asMeta);
  }
  if (asMeta) await shortFlow("ts-basic", base, { authMethod: "client_secret_basic", refresh: true });
  if (process.env.CIMD_BASE) {
    const cimdBase = process.env.CIMD_BASE.replace(/\/$/, "");
    const token = process.env.CIMD_OWNER_TOKEN || ownerToken;
    await shortFlow("ts-cimd", cimdBase, { cimd: true, token });
    if (process.env.ANY_PORT === "1") await shortFlow("ts-anyport", cimdBase, { cimd: true, anyPort: true, token });
  }
  console.log(`typescript: ${failed ? `${failed} failure(s)` : "all passed"} in ${((Date.now() - started) / 1000).toFixed(1)} s`);
}

main()
  .catch((e) => {
    failed++;
    if (process.argv.includes("--consent")) process.stdout.write(JSON.stringify({ ok: false, error: e instanceof Fail ? e.message : String(e && e.stack) }) + "\n");
    else console.error(e instanceof Fail ? e.message : e);
  })
  .finally(async () => {
    // Playwright ends the browser with this process if closing it hangs.
    if (browserPromise) await bounded(browserPromise.then((b) => b.browser.close()), 5000);
    process.exit(failed ? 1 : 0);
  });
