// The client command scripts/conformance-auth gives the MCP conformance suite for its
// authorization scenarios (`conformance client --command ...`): the suite runs a mock MCP server
// behind a mock OAuth authorization server and calls this program with the server's URL.
// The OAuth client under test is the engine: this program starts a real `datanotes serve` on a
// temporary database, registers the mock server as a remote app (mcp_url, no mcp_token), waits
// for it to need sign-in, calls apps/connect as the owner, follows the authorization URL the way
// a browser does (redirects one at a time, until the engine's callback, which it GETs on the
// engine), then waits for the app to be reachable and calls its tool through the engine.
//   node conformance-auth-client.js URL          (env: DATANOTES_BIN, the engine's binary)
// Exit status 0 when the tool call through the engine succeeded.
'use strict';
const { spawn } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');

const serverUrl = process.argv[process.argv.length - 1];
const scenario = process.env.MCP_CONFORMANCE_SCENARIO || '?';
const bin = process.env.DATANOTES_BIN || path.join(__dirname, '..', 'target', 'debug', 'datanotes');
const APP = 'conf';
const log = (...a) => console.error(`[${scenario}]`, ...a);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'dn-conf-auth-'));
const db = path.join(tmp, 'db');
let server = null;

function cleanup() {
  if (server && server.exitCode === null) server.kill('SIGTERM');
  try {
    fs.rmSync(tmp, { recursive: true, force: true });
  } catch {}
}
process.on('exit', cleanup);
for (const sig of ['SIGTERM', 'SIGINT']) process.on(sig, () => process.exit(1));
// Gives up before the suite's own timeout (60 s, set by scripts/conformance-auth) would kill
// this program and leave the engine running.
setTimeout(() => {
  log('FAILED: gave up after 50 s');
  process.exit(1);
}, 50000).unref();

/** Starts the engine; resolves its base URL. */
function startEngine() {
  return new Promise((resolve, reject) => {
    server = spawn(bin, ['serve', '--database', db, '--listen', '127.0.0.1:0'], {
      env: { ...process.env, DATANOTES_LOG: process.env.DATANOTES_LOG || 'warn' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    const seen = (chunk) => {
      out += chunk.toString();
      const m = out.match(/^datanotes serving .* on (http:\S+)$/m);
      if (m) resolve(m[1]);
    };
    server.stdout.on('data', seen);
    server.stderr.on('data', (c) => {
      seen(c);
      process.stderr.write(c);
    });
    server.on('exit', (code) => reject(new Error(`the engine exited (${code}): ${out}`)));
    setTimeout(() => reject(new Error(`the engine did not start: ${out}`)), 15000);
  });
}

let base = '';
let token = '';

/** An owner's route of the engine: `POST /datanotes/<route>/`. */
async function route(name, body) {
  const r = await fetch(`${base}/datanotes/${name}/`, {
    method: 'POST',
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  const text = await r.text();
  let v;
  try {
    v = JSON.parse(text);
  } catch {
    v = text;
  }
  if (!r.ok) throw new Error(`${name}: ${r.status} ${text}`);
  return v;
}

async function entry() {
  return (await route('apps/get', { name: APP })).app;
}

/** Waits until `pred(entry)` holds (up to `ms`); answers the last entry. */
async function until(pred, ms, what) {
  const end = Date.now() + ms;
  let e;
  for (;;) {
    e = await entry();
    if (pred(e)) return e;
    if (Date.now() > end) throw new Error(`${what}: ${JSON.stringify(e)}`);
    await sleep(100);
  }
}

/** The browser: follows the authorization URL's redirects until the engine's callback. */
async function signIn(authorizationUrl) {
  let url = authorizationUrl;
  const callback = `${base}/datanotes/apps/oauth/callback`;
  for (let hop = 0; hop < 10; hop++) {
    if (url.startsWith(callback + '?')) {
      const r = await fetch(url, { redirect: 'manual' });
      const body = await r.text();
      if (r.status !== 303) throw new Error(`the engine's callback answered ${r.status}: ${body}`);
      log('callback accepted by the engine');
      return;
    }
    const r = await fetch(url, { redirect: 'manual' });
    const loc = r.headers.get('location');
    if (r.status < 300 || r.status > 399 || !loc) {
      throw new Error(`${url} answered ${r.status} without a redirect: ${await r.text()}`);
    }
    url = new URL(loc, url).toString();
  }
  throw new Error('too many redirects before the callback');
}

/** Connects the app as the owner does (apps/connect, then the browser). */
async function connect() {
  const c = await route('apps/connect', { name: APP });
  log('authorization URL:', c.authorization_url);
  await signIn(c.authorization_url);
}

async function main() {
  base = await startEngine();
  token = fs.readFileSync(path.join(db, '.datanotes', 'owner-token'), 'utf8').trim();
  log('engine at', base, '; app at', serverUrl);
  const created = await route('apps/create', { name: APP, mcp_url: serverUrl });
  log('created:', JSON.stringify(created.app && created.app.signIn), created.app && created.app.lastError);
  await until((e) => e.signIn && e.signIn.required, 15000, 'the app never needed sign-in');
  await connect();
  // The callback lists the app again before it answers: reachable, or why not.
  const settled = (e) => e.reachable || (e.signIn && e.signIn.required) || e.lastError;
  let e = await until(settled, 15000, 'the app is not reachable after sign-in');
  // A step-up (the app wants more scopes for a call) needs the owner's sign-in again: the
  // script connects again while the app asks for it, at most twice.
  for (let round = 0; ; round++) {
    if (!e.reachable) {
      if (!(e.signIn && e.signIn.required)) throw new Error(`not reachable after sign-in: ${e.lastError}`);
      if (round >= 2) throw new Error(`still not reachable: ${JSON.stringify(e)}`);
      log('needs sign-in again:', e.signIn && e.signIn.reason);
      await connect();
      e = await until(settled, 15000, 'not reachable after signing in again');
      continue;
    }
    // The app's tools are listed under their own names (a prefix only on a clash).
    const tool = (e.tools || [])[0];
    if (!tool) throw new Error(`the app lists no tool: ${JSON.stringify(e)}`);
    const out = await route('apps/call', { tool, arguments: {} });
    log('call', tool, '->', JSON.stringify(out));
    if (out.ok === true && !(out.value && out.value.isError)) return;
    e = await entry();
    if (!(e.signIn && e.signIn.required) || round >= 2) throw new Error(`the call failed: ${JSON.stringify(out)}`);
  }
}

main().then(
  () => process.exit(0),
  (err) => {
    log('FAILED:', err && err.message ? err.message : err);
    process.exit(1);
  },
);
