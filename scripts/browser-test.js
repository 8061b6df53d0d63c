// The console's scenarios in a real headless Chromium (run by scripts/browser, which starts the
// server and gives LINK, the owner's sign-in link it printed, and WASM, a component to upload).
// The install by reference also needs the registry and wkg from scripts/fetch-oci-tools and
// planning2.wasm next to WASM (scripts/build-plugins); SCENARIO=registry runs it alone.
// Prints one line per scenario and the figures; exits 1 on the first failure.
"use strict";

const { chromium: playwright } = require("playwright-core");
const chromium = require("@sparticuz/chromium").default;
const { Client } = require("@modelcontextprotocol/sdk/client/index.js");
const { StreamableHTTPClientTransport } = require("@modelcontextprotocol/sdk/client/streamableHttp.js");

const link = process.env.LINK;
const base = new URL(link).origin;
const token = decodeURIComponent(link.split("#token=")[1]);
const ui = `${base}/datanotes/ui/`;
/** Where the scenarios' screenshots go (SHOTS, else target/browser-shots/), for a person to look. */
const path = require("path");
const shots = process.env.SHOTS || path.join(__dirname, "..", "target", "browser-shots");
require("fs").mkdirSync(shots, { recursive: true });

let step = "start";
const started = Date.now();
function ok(what, detail) {
  console.log(`PASS ${what}${detail ? ` (${detail})` : ""}`);
}
function check(cond, what) {
  if (!cond) throw new Error(`${step}: ${what}`);
}

/** An owner call from the test itself (not through the page). */
async function api(path, body, tok = token) {
  const r = await fetch(`${base}/datanotes/${path}/`, {
    method: "POST",
    headers: { Authorization: `Bearer ${tok}`, "Content-Type": "application/json" },
    body: JSON.stringify(body || {}),
  });
  return { status: r.status, body: await r.json().catch(() => ({})) };
}

/** An agent: a real MCP client on /mcp. */
async function agent(name) {
  const c = new Client({ name, version: "1.0" });
  await c.connect(new StreamableHTTPClientTransport(new URL(`${base}/mcp`), {
    requestInit: { headers: { Authorization: `Bearer ${token}` } },
  }));
  return c;
}

/** The page's first contentful paint (its start time, ms). The browser reports the entry once the
 * frame is presented, which may come a little after the DOM the test waited for: waits for it (a
 * buffered observer), 5 s at most, and fails when no contentful paint was reported. */
async function firstContentfulPaint(page) {
  const t = await page.evaluate(() => new Promise((resolve) => {
    const timer = setTimeout(() => resolve(null), 5000);
    new PerformanceObserver((list, obs) => {
      const e = list.getEntries().find((x) => x.name === "first-contentful-paint");
      if (e) { clearTimeout(timer); obs.disconnect(); resolve(e.startTime); }
    }).observe({ type: "paint", buffered: true });
  }));
  const seen = await page.evaluate(() => performance.getEntriesByType("paint").map((e) => e.name).join(", ") || "none");
  check(typeof t === "number", `no first-contentful-paint within 5 s (paint entries: ${seen})`);
  return t;
}

async function main() {
  // A step that hangs fails the run, naming the step, instead of holding the test suite.
  setTimeout(() => {
    console.error(`FAIL ${step}: the run took longer than 300 s`);
    process.exit(1);
  }, 300_000).unref();
  const browser = await playwright.launch({
    executablePath: await chromium.executablePath(),
    args: chromium.args,
    headless: true,
  });
  const context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  // Every request the page makes must go to this server.
  const outside = [];
  context.on("request", (r) => {
    const u = r.url();
    if (!u.startsWith(`${base}/`) && !u.startsWith("data:")) outside.push(u);
  });
  // Browser console errors, by scenario; a refused token is a 401 the console reports itself.
  const errors = [];
  const watch = (page) => {
    page.on("console", (m) => m.type() === "error" && errors.push({ step, text: m.text() }));
    page.on("pageerror", (e) => errors.push({ step, text: String(e) }));
  };
  const page = await context.newPage();
  watch(page);

  // First paint of the console, cold, without a token: only the sign-in form, no data.
  step = "first paint";
  await page.goto(ui);
  await page.waitForSelector("#signin:not([hidden])");
  const paint = { paint: await firstContentfulPaint(page), load: await page.evaluate(() => performance.getEntriesByType("navigation")[0]?.loadEventEnd ?? null) };
  check(paint.load !== null, "no navigation entry");
  // Again, the browser warm (the first navigation of a new browser includes its own start-up).
  const paints = [];
  for (let i = 0; i < 5; i++) {
    await page.goto("about:blank");
    await page.goto(ui);
    await page.waitForSelector("#signin:not([hidden])");
    paints.push(await firstContentfulPaint(page));
  }
  paints.sort((x, y) => x - y);
  check(await page.locator("#nav").isHidden(), "the navigation shows without a token");
  check((await page.locator("#view").innerHTML()) === "", "data shows without a token");
  ok("without a token: only the sign-in form", `first contentful paint ${paint.paint.toFixed(0)} ms cold, median ${paints[2].toFixed(0)} ms warm (${paints.map((x) => x.toFixed(0)).join(", ")}), load ${paint.load.toFixed(0)} ms`);

  step = "wrong token";
  await page.fill("#token-input", "dn_owner_0000000000000000000000000000000000000000000000000000000000000000");
  await page.click("#signin-form button[type=submit]");
  await page.waitForFunction(() => /refused/i.test(document.querySelector("#signin-error").textContent));
  check(await page.locator("#nav").isHidden(), "signed in with a wrong token");
  check(!(await page.evaluate(() => sessionStorage.getItem("datanotes.token"))), "a wrong token was kept");
  ok("a wrong token is refused");

  step = "sign in by form";
  await page.fill("#token-input", token);
  await page.keyboard.press("Enter");
  await page.waitForSelector("#nav:not([hidden])");
  check((await page.textContent("#who")).includes("owner"), "not signed in as the owner");
  await page.click("#signout");
  await page.waitForSelector("#signin:not([hidden])");
  ok("sign in by form, sign out");

  step = "sign in by link";
  await page.goto(link);
  await page.waitForSelector("#nav:not([hidden])");
  check(!page.url().includes("token"), `the token stayed in the address bar: ${page.url()}`);
  check(await page.evaluate(() => history.length >= 1 && !location.href.includes("token")), "token in location");
  check((await page.evaluate(() => sessionStorage.getItem("datanotes.token"))) === token, "token not in sessionStorage");
  await page.waitForSelector("#apps");
  ok("sign in by link: the token left the address bar at once", page.url());
  // SCENARIO=registry runs only the install by reference (quicker while working on it).
  if (process.env.SCENARIO === "registry") {
    await registryScenario(page);
    return finish(browser, outside, errors);
  }

  step = "register a remote app that is down";
  await page.fill("#remote-name", "weather");
  await page.fill("#remote-url", "http://127.0.0.1:9/mcp");
  await page.click("#remote-form button[type=submit]");
  await page.waitForSelector('[data-app="weather"]');
  await page.waitForFunction(() => /not reachable/.test(document.querySelector('[data-app="weather"]').textContent));
  const weather = await page.textContent('[data-app="weather"]');
  check(/last error/.test(weather), "no last error on the down app");
  check(/remote/.test(weather), "kind not shown");
  ok("apps listed: the down remote app is marked not reachable, with its last error");

  step = "install a .wasm by upload";
  await page.setInputFiles("#wasm-file", process.env.WASM);
  await page.fill("#wasm-name", "planning");
  await page.fill("#wasm-write", "personal.tasks.*");
  await page.check('#install-form input[name="ddl"]');
  const t0 = Date.now();
  await page.click("#install-form button[type=submit]");
  await page.waitForSelector('#install-form ~ div .new-token', { timeout: 120000 });
  await page.waitForSelector('[data-app="planning"]');
  const planning = await page.textContent('[data-app="planning"]');
  check(/3 tools/.test(planning), `planning does not show its 3 tools: ${planning}`);
  check(/allow_hosts/.test(planning) && /limits/.test(planning), "no limits or allow_hosts on the WASM app");
  check(/tools it may call: \*/.test(planning), `the tools the app may call are not shown: ${planning}`);
  ok("install a .wasm by upload: its tools are listed", `${Date.now() - t0} ms`);

  step = "find a tool with the search box";
  await page.click('a[data-view="tools"]');
  await page.fill("#tool-query", "add a new task");
  await page.click("#tool-search button[type=submit]");
  await page.waitForSelector("#tool-hits li.tool-hit");
  const firstHit = await page.locator("#tool-hits li.tool-hit").first();
  check((await firstHit.getAttribute("data-tool")) === "planning_add_task", `the first tool found is ${await firstHit.getAttribute("data-tool")}`);
  check(/words: /.test(await firstHit.textContent()), "the words that matched are not shown");
  check(/text #\d/.test(await firstHit.textContent()), "the rankings that found it are not shown");
  ok("find a tool: search_tools from the Tools view");

  step = "call a tool from the form";
  await page.click('a[data-view="tools"]');
  const tool = page.locator('details[data-tool="planning_add_task"]');
  await tool.locator("summary").first().click();
  await page.fill("#arg-planning_add_task-title", "Water the plants");
  // A list of text is typed as values separated by commas, not as JSON.
  check((await page.getAttribute("#arg-planning_add_task-tags", "placeholder")) === "values, separated by commas", "tags is typed as JSON");
  await page.fill("#arg-planning_add_task-tags", "home, plants");
  await tool.locator("button[type=submit]").click();
  await tool.locator("div.result.ok").waitFor();
  const out = await tool.locator("div.result .result-status").textContent();
  check(out === "ok (served by planning)", `unexpected result: ${out}`);
  // The answer reads as a table of its keys, shown once; the raw JSON is one click away.
  const keys = await tool.locator("div.result table.readable > tbody > tr > th").allTextContents();
  check(keys.includes("id") && keys.includes("version") && new Set(keys).size === keys.length, `the answer's keys, once each: ${JSON.stringify(keys)}`);
  check((await tool.locator("div.result table.readable").count()) === 1, "the answer is shown twice");
  check(await tool.locator("div.result details.raw pre").isHidden(), "the raw JSON is not behind a click");
  await tool.locator("div.result details.raw summary").click();
  check(/"structuredContent"|"content"/.test(await tool.locator("div.result details.raw pre").textContent()), "the raw JSON is not the tool's answer");
  // The tool's description is not repeated under its summary line.
  const cardText = await tool.textContent();
  const first = (await tool.locator("summary").first().textContent()).split(" — ")[1] || "";
  check(first && cardText.split(first).length === 2, `the description is shown twice: ${first}`);
  await page.screenshot({ path: path.join(shots, "tools-try-it.png") });
  const rows = await api("select_rows", { table: "personal.tasks.items", where: [{ column: "title", op: "=", value: "Water the plants" }] });
  check(rows.body.rows && rows.body.rows.length === 1, "the row the tool added is not in the table");
  check(JSON.stringify(rows.body.rows[0].values.tags) === '["home","plants"]', `the list typed with commas: ${JSON.stringify(rows.body.rows[0].values)}`);
  ok("call a tool from the form generated from its schema", out.split("\n")[0]);

  step = "what a WASM app holds now";
  await page.click('a[data-view="apps"]');
  const line = await page.locator('[data-app="planning"] .runtime').textContent();
  const rt = (await api("apps/get", { name: "planning" })).body.app.runtime;
  check(rt.instances >= 1 && rt.instantiateUs > 0, `the server says: ${JSON.stringify(rt)}`);
  const held = new RegExp(`now: ${rt.instances} instances? \\(${rt.warm} warm\\), [0-9.]+ MiB of memory · code loaded · an idle instance is dropped after 60 s · its last fresh instance took [0-9.]+ ms to make`);
  check(held.test(line), `the app's line does not say what it holds (${JSON.stringify(rt)}): ${line}`);
  const mem = await page.textContent("#server-memory");
  const m = /^server: ([0-9.]+) MiB resident · WASM apps: ([0-9]+) live instances?, [0-9.]+ MiB of memory$/.exec(mem);
  check(m && Number(m[1]) > 1 && Number(m[2]) >= rt.instances, `the server's memory is not shown: ${mem}`);
  const limits = await page.locator('[data-app="planning"] .limits').textContent();
  check(/^limits: memory \d+ MiB · CPU [0-9.]+ (ms|s|min) per call · [0-9.]+ (ms|s|min) per call · results up to [0-9.]+ (B|KiB|MiB|GiB) · \d+ instances? at once$/.test(limits) && !/\d{4,} (ms|B)/.test(limits),
    `the limits do not read as units: ${limits}`);
  ok("the console shows what a WASM app and the server hold now", `${line.trim()}; ${mem}; ${limits}`);

  step = "live";
  await page.click('a[data-view="live"]');
  await page.waitForFunction(() => document.querySelector("#live-status")?.textContent === "connected");
  const a = await agent("browser-test");
  const c0 = Date.now();
  await a.callTool({ name: "planning_list_tasks", arguments: {} });
  const c1 = Date.now();
  await page.waitForSelector('#live-rows tr[data-op="tool_call"]:has-text("planning_list_tasks")', { timeout: 2000 });
  const c2 = Date.now();
  const row = await page.textContent('#live-rows tr[data-op="tool_call"]:has-text("planning_list_tasks")');
  check(/browser-test/.test(row), `the actor is not shown: ${row}`);
  ok("an agent's MCP tool call appears in Live without reload", `${c2 - c1} ms after the call answered (${c1 - c0} ms call)`);

  {
    // A call made in the agent's own trace (its traceparent in _meta): Live links it to that trace.
    step = "live: a call's trace";
    const traceId = "4bf92f3577b34da6a3ce929d0e0e4736";
    await a.callTool({ name: "planning_list_tasks", arguments: {}, _meta: { traceparent: `00-${traceId}-00f067aa0ba902b7-01` } });
    await page.waitForSelector(`#live-rows button.trace[data-trace="${traceId}"]`, { timeout: 5000 })
      .catch(async () => check(false, `no trace link in Live: ${await page.textContent("#live-rows")}`));
    const traced = await page.textContent(`#live-rows tr:has(button.trace[data-trace="${traceId}"])`);
    check(/planning_list_tasks/.test(traced) && traced.includes(`trace ${traceId.slice(0, 8)}`), `the traced call's row: ${traced}`);
    ok("Live links a call to the trace its agent sent", traced.replace(/\s+/g, " ").trim());
  }

  // Filters: by app, then by table.
  await page.selectOption("#filter-app", "planning");
  check(await page.locator('#live-rows tr[data-app="planning"]').first().isVisible(), "the app filter hides the app's calls");
  await page.selectOption("#filter-app", "");
  await page.selectOption("#filter-table", "personal.tasks.items");
  check(await page.locator('#live-rows tr[data-op="tool_call"]').first().isHidden(), "the table filter shows tool calls");
  await page.selectOption("#filter-table", "");
  ok("Live filters by app and by table");

  // 100 tool calls a second for 3 s, from 4 agents: Live keeps up.
  step = "live at 100 calls/s";
  const agents = [a, await agent("load-1"), await agent("load-2"), await agent("load-3")];
  const before = await page.evaluate(() => Number(document.querySelector("#live-count").textContent.split(" ")[0]));
  const N = Number(process.env.LIVE_CALLS || 300);
  const calls = [];
  const l0 = Date.now();
  for (let i = 0; i < N; i++) {
    const due = l0 + i * 10;
    const wait = due - Date.now();
    if (wait > 0) await new Promise((r) => setTimeout(r, wait));
    calls.push(agents[i % agents.length].callTool({ name: "list_tables", arguments: {} }));
  }
  await Promise.all(calls);
  const l1 = Date.now();
  await page.waitForFunction((n) => Number(document.querySelector("#live-count").textContent.split(" ")[0]) >= n, before + N, { timeout: 10000 });
  const l2 = Date.now();
  const rate = N / ((l1 - l0) / 1000);
  check(l2 - l1 <= 2000, `Live fell behind: ${l2 - l1} ms after the last call`);
  ok("Live keeps up with 100 tool calls/s", `${N} calls at ${rate.toFixed(0)}/s; all shown ${l2 - l1} ms after the last answered`);
  for (const x of agents) await x.close();

  {
    // The Tools view: each tool's last hour, from the server's own histogram buckets.
    step = "tools: the last hour";
    await page.click('a[data-view="tools"]');
    const statRow = '#tool-stats tr[data-tool="list_tables"]';
    await page.waitForSelector(statRow, { timeout: 5000 })
      .catch(async () => check(false, `no statistics for list_tables: ${await page.textContent("#tool-stats-section")}`));
    const listed = Number(await page.textContent(`${statRow} td.calls`));
    check(listed >= N, `list_tables shows ${listed} calls, not at least ${N}`);
    check(Number(await page.textContent(`${statRow} td.errors`)) === 0, "list_tables shows errors");
    const p50 = await page.textContent(`${statRow} td.p50`), p99 = await page.textContent(`${statRow} td.p99`);
    check(/^[0-9.]+ (ms|s)$/.test(p50) && /^[0-9.]+ (ms|s)$/.test(p99), `p50 ${p50}, p99 ${p99}`);
    const bars = await page.locator(`${statRow} svg.spark rect.calls`).count();
    check(bars >= 1 && bars <= 3, `the chart of list_tables has ${bars} minutes with calls`);
    check(await page.locator('#tool-stats tr[data-tool="planning_list_tasks"][data-app="planning"]').count() === 1, "the app's tool has no row");
    const card = await page.textContent('details[data-tool="list_tables"] p.tool-stats');
    check(card.startsWith(`last hour: ${listed} calls · 0 errors · p50 ${p50}`), `the tool's card: ${card}`);
    ok("Tools shows each tool's calls, errors, p50 and p99 of the last hour, with a chart", `list_tables: ${listed} calls, p50 ${p50}, p99 ${p99}`);
  }

  step = "rotate a token";
  await page.click('a[data-view="apps"]');
  await page.click('[data-app="planning"] button.rotate');
  await page.click("#dialog-ok");
  await page.waitForSelector("#dialog .new-token");
  const appToken = (await page.textContent("#dialog .new-token")).trim();
  const appLink = (await page.textContent("#dialog .app-link")).trim();
  await page.click("#dialog-ok");
  check(appToken.startsWith("dn_app_"), `not an app token: ${appToken}`);
  check((await api("list_tables", {}, appToken)).status === 200, "the new token does not work");
  ok("rotate a token: shown once, works");

  step = "an app token sees no owner actions";
  const appPage = await (await browser.newContext({ viewport: { width: 390, height: 800 } })).newPage();
  appPage.context().on("request", (r) => { const u = r.url(); if (!u.startsWith(`${base}/`) && !u.startsWith("data:")) outside.push(u); });
  watch(appPage);
  await appPage.goto(appLink);
  await appPage.waitForSelector('[data-app="planning"]');
  check((await appPage.textContent("#who")).includes("app token"), "not shown as an app token");
  check((await appPage.locator(".owner-only").count()) === 0, "owner actions shown to an app token");
  check((await appPage.locator("#install-form, #remote-form, button.rotate, button.delete").count()) === 0, "owner forms shown");
  const width = await appPage.evaluate(() => document.documentElement.scrollWidth);
  check(width <= 392, `the page is wider than a phone: ${width} px`);
  await appPage.click('a[data-view="tools"]');
  await appPage.waitForSelector('details[data-tool="planning_add_task"]');
  ok("an app token sees its app, its tools, no owner actions (phone width 390 px)");

  step = "delete an app";
  await page.click('[data-app="weather"] button.delete');
  await page.click("#dialog-ok");
  await page.waitForSelector('[data-app="weather"]', { state: "detached" });
  check(!(await api("apps")).body.apps.some((x) => x.name === "weather"), "weather is still registered");
  ok("delete an app (after confirmation)");

  step = "tables";
  // A row edited by hand into an invalid one: describe shows it with its reason.
  require("fs").writeFileSync(`${process.env.HOME_TMP}/db/personal/tasks/items/broken.md`, "---\nstatus: todo\n---\n");
  await new Promise((r) => setTimeout(r, 1500));
  await page.click('a[data-view="tables"]');
  await page.click('a[href="#tables/personal.tasks.items"]');
  await page.waitForSelector("#columns");
  // A column's rules read as words, not JSON.
  const rules = Object.fromEntries(await page.$$eval("#columns tbody tr", (trs) => trs.map((tr) => [tr.cells[0].firstChild.textContent, tr.cells[2].textContent])));
  check(rules.title === "required" && /^one of todo, doing, done · default todo$/.test(rules.status || "") && !Object.values(rules).some((r) => /[{}"]/.test(r)),
    `the columns' rules: ${JSON.stringify(rules)}`);
  await page.screenshot({ path: path.join(shots, "table-rules.png") });
  check(/broken: column title is required/.test(await page.textContent("#invalid")), "the invalid row is not shown");
  check(/planning_add_task \(planning\)/.test(await page.textContent("#table-tools")), "the tools declaring the table are not shown");
  await page.waitForSelector('#rows td:text("buy-oat-milk")');
  await page.locator('#rows tr:has-text("buy-oat-milk") button.history').click();
  await page.waitForSelector('#history td:text("insert")');
  ok("tables: describe (rules in words, invalid rows, declaring tools), browse, a row's history", `status: ${rules.status}`);

  step = "search";
  // A few notes; the target ("Buy oat milk", about groceries) has none of the query's words.
  const notes = "personal.notes.misc";
  const made = await api("create_table", { table: notes, description: "Loose notes", columns: { title: { type: "text", required: true } } });
  check(made.status === 200, `create_table: ${JSON.stringify(made.body)}`);
  for (const [id, title, body] of [
    ["oat-milk", "Buy oat milk", "Groceries for the week: oat milk for the coffee, since we avoid lactose. Also bananas and bread."],
    ["almond-milk", "Almond milk at home", "Soak almonds overnight, blend them with water and strain: a plant-based milk for breakfast."],
    ["bike-brakes", "Fix the bike brakes", "The rear brake pads are worn; order new ones and adjust the cable."],
    ["tax-return", "File the tax return", "Gather the receipts and the bank statements before the deadline in April."],
    ["conference-talk", "Prepare the conference talk", "Slides about the storage engine, a live demo and ten minutes of questions."],
  ]) {
    const r = await api("insert_row", { table: notes, id, values: { title }, body });
    check(r.status === 200, `insert_row ${id}: ${JSON.stringify(r.body)}`);
  }
  // The semantic index catches up with the journal (the owner's health says how far it is).
  const health = async () => (await (await fetch(`${base}/datanotes/health`, { headers: { Authorization: `Bearer ${token}` } })).json());
  const lastSeq = (await health()).seq;
  check(Number.isInteger(lastSeq), `health has no seq: ${lastSeq}`);
  const i0 = Date.now();
  let sem;
  for (;;) {
    sem = (await health()).semantic;
    check(sem && sem.status, `health has no semantic state: ${JSON.stringify(sem)}`);
    check(sem.state !== "unavailable", `the semantic index is unavailable: ${sem.status}`);
    if (sem.state === "ready" && sem.indexedThrough >= lastSeq) break;
    check(Date.now() - i0 < 60000, `the semantic index did not catch up in 60 s: ${JSON.stringify(sem)}`);
    await page.waitForTimeout(200);
  }
  const caughtUp = Date.now() - i0;
  await page.click('a[data-view="tables"]');
  await page.click(`#table-list a[href="#tables/${notes}"]`);
  await page.waitForSelector("#table-semantic");
  const described = await page.textContent("#table-semantic");
  check(/semantic index: on/.test(described) && /ready/.test(described), `the table's semantic state is not shown: ${described}`);
  await page.waitForFunction(() => /^semantic index: ready/.test(document.querySelector("#semantic-status").textContent));
  const statusLine = await page.textContent("#semantic-status");
  check(/potion-base-8M/.test(statusLine) && /\d+ rows, \d+ chunks/.test(statusLine), `the index's state is not shown: ${statusLine}`);

  // Hybrid (the default), every table: the target is found by meaning only.
  check((await page.inputValue("#search-mode")) === "hybrid", "hybrid is not the default mode");
  await page.selectOption("#search-scope", "");
  await page.fill("#search-query", "dairy-free drink shopping");
  await page.click("#search-form button[type=submit]");
  await page.waitForSelector('#search-results .answer[data-mode="hybrid"]');
  const target = `#search-results li.hit[data-table="${notes}"][data-id="oat-milk"]`;
  const listed = async (sel) => page.$$eval(sel, (xs) => xs.map((x) => `${x.dataset.table}/${x.dataset.id} [${x.querySelector(".hit-ranks")?.textContent || ""}]`));
  check((await page.locator(target).count()) === 1, `hybrid did not find the note: ${await listed("#search-results li.hit")}`);
  const ranks = await page.textContent(`${target} .hit-ranks`);
  const place = /semantic #(\d+)/.exec(ranks);
  check(place && Number(place[1]) <= 3, `the note is not among the 3 nearest in meaning: ${ranks}; hits ${await listed("#search-results li.hit")}`);
  check(!/text #/.test(ranks), `full text found a note without the query's words: ${ranks}`);
  check(/indexed through seq \d+/.test(await page.textContent("#search-results .answer")), "the answer does not say how far it is indexed");
  const hybridHits = await listed("#search-results li.hit");

  // Text mode: every word must appear, so the note is not found.
  await page.selectOption("#search-mode", "text");
  await page.waitForSelector('#search-results .answer[data-mode="text"]');
  check((await page.locator(target).count()) === 0, "text mode found a note without the query's words");
  // A word it has: found by full text, the word marked in its snippet (as text, not HTML).
  await page.fill("#search-query", "lactose");
  await page.click("#search-form button[type=submit]");
  await page.waitForSelector(`${target} .snippet mark`);
  check((await page.textContent(`${target} .hit-ranks`)) === "text #1", `text ranks: ${await page.textContent(`${target} .hit-ranks`)}`);
  check((await page.textContent(`${target} .snippet mark`)) === "lactose", "the marked word is not lactose");
  check(!(await page.textContent(`${target} .snippet`)).includes("**"), "the snippet shows its marks");
  ok("search: hybrid finds a note by meaning (semantic rank), text mode needs the words and marks them", `${hybridHits.slice(0, 3).join(", ")}; index caught up in ${caughtUp} ms`);

  step = "similar notes";
  await page.click(`${target} a.hit-id`);
  await page.waitForSelector('#history h2:text("History of oat-milk")');
  await page.waitForSelector('#history td:text("insert")');
  check(page.url().endsWith(`#tables/${notes}/oat-milk`), `the hit did not open its row: ${page.url()}`);
  check((await page.locator(target).count()) === 1, "the search's answer is gone after opening a hit");
  await page.click("#history button.similar");
  await page.waitForSelector("#similar .answer");
  const similar = await page.$$eval("#similar li.hit", (xs) => xs.map((x) => ({ table: x.dataset.table, id: x.dataset.id, ranks: x.querySelector(".hit-ranks")?.textContent || "" })));
  const shown = similar.map((x) => `${x.table}/${x.id} [${x.ranks}]`).join(", ");
  const almond = similar.findIndex((x) => x.table === notes && x.id === "almond-milk");
  check(almond >= 0, `the related note is not listed: ${shown}`);
  check(/^semantic #\d+$/.test(similar[almond].ranks), `similar notes' ranks: ${shown}`);
  check(!similar.some((x) => x.table === notes && x.id === "oat-milk"), `the row is listed as similar to itself: ${shown}`);
  for (const far of ["bike-brakes", "tax-return"]) {
    const i = similar.findIndex((x) => x.table === notes && x.id === far);
    check(i < 0 || i > almond, `${far} is nearer than almond-milk: ${shown}`);
  }
  ok("similar notes of a row list a related note", shown.split(", ").slice(0, 3).join(", "));

  step = "search scope";
  await page.fill("#search-query", "milk");
  await page.selectOption("#search-scope", "personal.tasks.items");
  await page.waitForFunction(() => {
    const a = document.querySelector("#search-results .answer");
    const hits = [...document.querySelectorAll("#search-results li.hit")];
    return a && a.dataset.mode === "text" && hits.length > 0 && hits.every((x) => x.dataset.table === "personal.tasks.items");
  });
  await page.selectOption("#search-scope", notes);
  await page.waitForFunction((t) => {
    const hits = [...document.querySelectorAll("#search-results li.hit")];
    return hits.length >= 2 && hits.every((x) => x.dataset.table === t);
  }, notes);
  ok("search within one table");

  step = "search error";
  // A table chosen as the scope, then dropped: the server's 404 is shown with its hint.
  check((await api("create_table", { table: "personal.notes.scratch", columns: { title: { type: "text" } } })).status === 200, "create_table scratch");
  await page.click('a[data-view="tables"]');
  await page.waitForSelector('#search-scope option[value="personal.notes.scratch"]', { state: "attached" });
  await page.selectOption("#search-mode", "hybrid");
  await page.waitForSelector('#search-results .answer[data-mode="hybrid"]');
  check((await api("drop_table", { table: "personal.notes.scratch" })).status === 200, "drop_table scratch");
  await page.selectOption("#search-scope", "personal.notes.scratch");
  await page.waitForSelector("#search-results .error");
  const refused = await page.textContent("#search-results .error");
  check(/no table personal\.notes\.scratch/.test(refused) && /list_tables/.test(refused), `the error is not shown with its hint: ${refused}`);
  ok("a refused search shows the server's error and hint", refused);

  step = "keyboard";
  await page.goto("about:blank");
  await page.goto(`${ui}#apps`);
  await page.waitForSelector("#apps");
  const focused = [];
  for (let i = 0; i < 6; i++) {
    await page.keyboard.press("Tab");
    focused.push(await page.evaluate(() => document.activeElement.textContent.trim().slice(0, 20)));
  }
  check(focused.includes("Tools") && focused.includes("Live"), `the navigation is not reachable by keyboard: ${focused}`);
  ok("keyboard reachable", focused.join(" → "));

  step = "phone width";
  await page.setViewportSize({ width: 390, height: 800 });
  for (const v of ["apps", "tools", "live", "tables/personal.tasks.items"]) {
    await page.goto(`${ui}#${v}`);
    await page.waitForLoadState("networkidle").catch(() => {});
    await page.waitForTimeout(300);
    const w = await page.evaluate(() => document.documentElement.scrollWidth);
    check(w <= 392, `#${v} is wider than a phone: ${w} px`);
  }
  ok("every view fits a phone's width (390 px)");

  await grantScenario(browser, page, watch);
  await appOAuthScenario(browser, watch);
  await registryScenario(page);
  await finish(browser, outside, errors);
}

/** The last checks: nothing left the server, no errors in the browser's console. */
async function finish(browser, outside, errors) {
  step = "end";
  check(outside.length === 0, `requests left the server: ${outside.join(", ")}`);
  ok("no request left the server");
  const unexpected = errors.filter((e) => !(e.step === "wrong token" && /status of 401/.test(e.text)) &&
    !(e.step === "search error" && /status of 404/.test(e.text)));
  check(unexpected.length === 0, `browser console errors: ${JSON.stringify(unexpected)}`);
  ok("no errors in the browser console");
  await Promise.race([browser.close(), new Promise((r) => setTimeout(r, 5000))]);
  console.log(`browser: every scenario passed in ${((Date.now() - started) / 1000).toFixed(1)} s`);
}

main().catch((e) => {
  console.error(`FAIL ${e.message}`);
  process.exit(1);
});

// A web agent's grant: registered over plain HTTP, allowed on the consent page (owner sign-in,
// one table and one tool ticked), listed in the console's Apps view with those rights, revoked
// there. Its own context: the agent's redirect_uri (127.0.0.1:9, nothing listens) is answered by
// page.route, and only there may a request leave the server.
async function grantScenario(browser, page, watch) {
  step = "grant: consent";
  const redirect = "http://127.0.0.1:9/cb";
  const reg = await fetch(`${base}/oauth/register`, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ client_name: "Test agent", redirect_uris: [redirect], token_endpoint_auth_method: "none" }),
  });
  const client = await reg.json().catch(() => ({}));
  check(reg.ok && client.client_id, `POST /oauth/register answered ${reg.status}: ${JSON.stringify(client)}`);
  const crypto = require("crypto");
  const verifier = crypto.randomBytes(32).toString("base64url");
  const challenge = crypto.createHash("sha256").update(verifier).digest("base64url");
  const q = new URLSearchParams({ response_type: "code", client_id: client.client_id, redirect_uri: redirect, code_challenge: challenge, code_challenge_method: "S256", state: "s1", resource: `${base}/mcp` });
  const ctx = await browser.newContext({ viewport: { width: 390, height: 800 } });
  const left = [];
  ctx.on("request", (r) => { const u = r.url(); if (!u.startsWith(`${base}/`) && !u.startsWith(`${redirect}?`) && !u.startsWith("data:")) left.push(u); });
  await ctx.route(`${redirect}**`, (r) => r.fulfill({ status: 200, contentType: "text/plain", body: "the agent's callback" }));
  const p = await ctx.newPage();
  watch(p);
  const res = await p.goto(`${base}/oauth/authorize?${q}`);
  check(res.status() === 200, `the consent page answered ${res.status()}`);
  check((await p.textContent("body")).includes("Test agent"), "the consent page does not name the client");
  check(await p.locator("#consent-form").isHidden(), "the rights show before sign-in");
  await p.fill("#consent-token", token);
  await p.click("#consent-signin-form [type=submit]");
  await p.waitForSelector("#consent-form", { state: "visible" });
  check(!(await p.evaluate(() => JSON.stringify(sessionStorage) + JSON.stringify(localStorage) + document.cookie)).includes(token), "the owner token was stored");
  check(await p.locator('input[name=call_tools][value="list_tables"]').isChecked(), "a read operation is not ticked by default");
  check(!(await p.locator('input[name=call_tools][value="insert_row"]').isChecked()), "a write operation is ticked by default");
  check(!(await p.locator('input[name=write][value="personal.tasks.items"]').isChecked()), "a table is ticked by default");
  const width = await p.evaluate(() => document.documentElement.scrollWidth);
  check(width <= 392, `the consent page is wider than a phone: ${width} px`);
  await p.click("#consent-tools-none");
  check((await p.locator("#consent-form input[type=checkbox]:checked").count()) === 0, "something is still ticked after unticking all tools");
  await p.check('input[name=write][value="personal.tasks.items"]');
  await p.check('input[name=call_tools][value="planning_list_tasks"]');
  // Listed as a search, with the app's tools pinned.
  await p.check('input[name=tool_listing][value="search"]');
  await p.fill("#consent-pinned", "planning_*");
  const arrived = p.waitForURL((u) => u.href.startsWith(`${redirect}?`), { waitUntil: "commit" });
  await p.click("#consent-allow");
  await arrived;
  const back = new URL(p.url());
  check(back.searchParams.get("code") && back.searchParams.get("state") === "s1", `the agent got back ${p.url()}`);
  // Not closed: closing a page right after it went to another origin can hang this
  // single-process Chromium for minutes; the browser closes it at the end.
  check(left.length === 0, `requests left the server: ${left.join(", ")}`);
  ok("consent page: the owner signs in, ticks one table and one tool, chooses the search listing with pinned tools, Allow sends the agent its code", `${back.origin}${back.pathname}?code=…&state=${back.searchParams.get("state")}`);

  // The agent trades its code for tokens (the grant is made then): its MCP session lists the
  // one tool ticked.
  const tok = await fetch(`${base}/oauth/token`, {
    method: "POST",
    headers: { "Content-Type": "application/x-www-form-urlencoded" },
    body: new URLSearchParams({ grant_type: "authorization_code", code: back.searchParams.get("code"), redirect_uri: redirect, client_id: client.client_id, code_verifier: verifier, resource: `${base}/mcp` }),
  });
  const tokens = await tok.json().catch(() => ({}));
  check(tok.ok && tokens.access_token, `POST /oauth/token answered ${tok.status}: ${JSON.stringify(tokens)}`);
  const mcp = async () => {
    const c = new Client({ name: "oauth-agent", version: "1.0" });
    await c.connect(new StreamableHTTPClientTransport(new URL(`${base}/mcp`), { requestInit: { headers: { Authorization: `Bearer ${tokens.access_token}` } } }));
    return c;
  };
  const agentWithGrant = await mcp();
  const listed = (await agentWithGrant.listTools()).tools.map((t) => t.name);
  await agentWithGrant.close();
  check(listed.join() === "search_tools,call_tool,planning_list_tasks", `the agent lists ${listed.join(", ")}`);

  step = "grant: listed and revoked";
  await page.setViewportSize({ width: 1280, height: 800 });
  await page.goto(`${ui}#apps`);
  const card = page.locator('#grants [data-grant]:has-text("Test agent")');
  await card.waitFor();
  const rights = await card.locator(".rights").textContent();
  check(rights === "rights: read: none · write: personal.tasks.items · tools it may call: planning_list_tasks · listed: a search and planning_*", `the grant's rights: ${rights}`);
  check((await api("grants/list")).body.grants.length === 1, "the server lists another number of grants");
  await card.locator("button.revoke").click();
  await page.click("#dialog-ok");
  await card.waitFor({ state: "detached" });
  check((await api("grants/list")).body.grants.length === 0, "the grant is still there");
  check(await mcp().then((c) => c.close().then(() => false), () => true), "the revoked grant's access token still opens /mcp");
  ok("the console lists the grant with its rights; Revoke removes it", rights);
}

// A remote app whose MCP server requires OAuth: the MCP TypeScript SDK's example server
// (simpleStreamableHttp.js --oauth, on two free ports; its demo authorization server approves
// at its authorize endpoint at once and issues no refresh token), registered by the owner,
// connected with the console's Connect button (in a context of its own: the sign-in goes to the
// app's authorization server, off this server), its tools then called through the engine's /mcp.
async function appOAuthScenario(browser, watch) {
  step = "oauth app: start the SDK's example server";
  const { spawn } = require("child_process");
  const fs = require("fs");
  const net = require("net");
  const freePort = () => new Promise((resolve, reject) => {
    const s = net.createServer();
    s.on("error", reject);
    s.listen(0, "127.0.0.1", () => { const p = s.address().port; s.close(() => resolve(p)); });
  });
  const mcpPort = await freePort();
  const authPort = await freePort();
  const example = path.join(process.env.NODE_PATH, "@modelcontextprotocol/sdk/dist/esm/examples/server/simpleStreamableHttp.js");
  const ts = spawn(process.execPath, [example, "--oauth"], {
    env: { ...process.env, MCP_PORT: String(mcpPort), MCP_AUTH_PORT: String(authPort) },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let log = "";
  ts.stdout.on("data", (d) => { log += d; });
  ts.stderr.on("data", (d) => { log += d; });
  try {
    for (let i = 0; i < 100 && !(/Authorization Server listening/.test(log) && /MCP Streamable HTTP Server listening/.test(log)); i++) {
      await new Promise((r) => setTimeout(r, 100));
    }
    check(/MCP Streamable HTTP Server listening/.test(log), `the example server did not start: ${log}`);

    step = "oauth app: registered";
    const url = `http://localhost:${mcpPort}/mcp`;
    const created = await api("apps/create", { name: "tsdemo", mcp_url: url });
    check(created.status === 200, `apps/create answered ${created.status}: ${JSON.stringify(created.body)}`);
    const e = created.body.app;
    check(e.signIn && e.signIn.required === true && e.reachable === false, `the app does not need sign-in: ${JSON.stringify(e)}`);
    check(/needs sign-in/.test(e.lastError) && /apps\/connect/.test(e.lastError), `the reason: ${e.lastError}`);

    step = "oauth app: Connect";
    const ctx = await browser.newContext({ viewport: { width: 1280, height: 800 } });
    const visited = [];
    ctx.on("request", (r) => visited.push(r.url()));
    const p = await ctx.newPage();
    watch(p);
    await p.goto(link);
    await p.waitForSelector("#nav:not([hidden])");
    await p.goto(`${ui}#apps`);
    const card = p.locator('[data-app="tsdemo"]');
    await card.waitFor();
    check(/needs sign-in/.test(await card.textContent()), "the app's entry does not say it needs sign-in");
    const back = p.waitForURL((u) => u.href === `${ui}#apps` && visited.some((v) => v.includes("/datanotes/apps/oauth/callback?")), { waitUntil: "commit" });
    await card.locator("button.connect").click();
    await back;
    await p.locator('[data-app="tsdemo"] .badge.up').waitFor({ timeout: 15000 });
    const authorize = visited.find((v) => v.startsWith(`http://localhost:${authPort}/authorize?`));
    check(authorize, `the browser never went to the app's authorization server: ${visited.join(", ")}`);
    const q = new URL(authorize).searchParams;
    check(q.get("code_challenge_method") === "S256" && q.get("resource") === url && q.get("redirect_uri") === `${base}/datanotes/apps/oauth/callback`, `the authorization request: ${authorize}`);
    check((await p.locator('[data-app="tsdemo"] .badge.sign-in').count()) === 0, "the entry still says it needs sign-in");
    const tools = await p.locator('[data-app="tsdemo"] details').first().textContent();
    check(/greet/.test(tools), `the entry's tools after Connect: ${tools}`);
    // (Neither the page nor its context is closed: after a visit to another site, closing them
    // fails or hangs in the single-process headless Chromium; they go with the browser.)
    ok("an OAuth app (the TypeScript SDK's example server) is connected with the console's Connect button", `registered by dynamic client registration, PKCE S256, resource ${url}`);

    step = "oauth app: called through /mcp";
    const a = await agent("oauth-app-test");
    const r = await a.callTool({ name: "greet", arguments: { name: "console" } });
    await a.close();
    check(!r.isError && r.content[0].text === "Hello, console!", `greet answered ${JSON.stringify(r)}`);
    const file = path.join(process.env.HOME_TMP, "db", ".datanotes", "app-oauth", "tsdemo.json");
    const st = fs.statSync(file);
    check((st.mode & 0o777) === 0o600, `the tokens file's mode is ${(st.mode & 0o777).toString(8)}`);
    const saved = JSON.parse(fs.readFileSync(file, "utf8"));
    const refresh = Boolean(saved.credentials && saved.credentials.token_response && saved.credentials.token_response.refresh_token);
    const listing = JSON.stringify((await api("apps")).body);
    check(!listing.includes(saved.credentials.token_response.access_token), "the access token is answered by apps/");
    ok("its tool called through the engine's /mcp with the OAuth access token", `greet → "${r.content[0].text}"; tokens file 0600; refresh token issued: ${refresh ? "yes" : "no (the demo provider issues none)"}`);

    step = "oauth app: deleted";
    check((await api("apps/delete", { name: "tsdemo" })).status === 200, "apps/delete");
    check(!fs.existsSync(file), "the tokens file is still there after the app was deleted");
    ok("deleting the app removes its tokens");
  } finally {
    ts.kill();
  }
}

// An app installed by reference from a real OCI registry (CNCF distribution, the Debian
// package's docker-registry, installed by scripts/fetch-oci-tools with wkg, the client that
// pushes): planning 0.1.0 and planning2 as 0.2.0 (asking for more), each with its manifest in
// the `dev.datanotes.app` annotation. In the console: the plan (its rights unticked, the
// differences marked and updated as the owner ticks), install with only some rights, the
// entry's origin, Upgrade (its plan, confirmed), Roll back.
async function registryScenario(page) {
  step = "registry: start it and push";
  const { spawn, execFileSync } = require("child_process");
  const fs = require("fs");
  const net = require("net");
  const root = path.resolve(__dirname, "..");
  const registryBin = path.join(root, "target/oci-tools/docker-registry");
  const wkg = path.join(root, "target/oci-tools/bin/wkg");
  for (const f of [registryBin, wkg]) check(fs.existsSync(f), `${path.relative(root, f)} is missing: run bash scripts/fetch-oci-tools`);
  const wasm2 = process.env.WASM2 || path.join(path.dirname(process.env.WASM), "planning2.wasm");
  check(fs.existsSync(wasm2), `${wasm2} is missing: run bash scripts/build-plugins`);
  const port = await new Promise((resolve, reject) => {
    const s = net.createServer();
    s.on("error", reject);
    s.listen(0, "127.0.0.1", () => { const p = s.address().port; s.close(() => resolve(p)); });
  });
  const addr = `127.0.0.1:${port}`;
  const dir = path.join(process.env.HOME_TMP, "registry");
  fs.mkdirSync(path.join(dir, "data"), { recursive: true });
  fs.writeFileSync(path.join(dir, "config.yml"), `version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: ${dir}/data\nhttp:\n  addr: ${addr}\n  secret: browser-test\n`);
  const reg = spawn(registryBin, ["serve", path.join(dir, "config.yml")], { stdio: ["ignore", "pipe", "pipe"] });
  let log = "";
  reg.stdout.on("data", (d) => { log += d; });
  reg.stderr.on("data", (d) => { log += d; });
  try {
    let up = false;
    for (let i = 0; i < 100 && !up; i++) {
      up = await fetch(`http://${addr}/v2/`).then((r) => r.ok, () => false);
      if (!up) await new Promise((r) => setTimeout(r, 50));
    }
    check(up, `the registry did not answer on ${addr}: ${log}`);
    const push = (tag, file, manifest) => {
      const out = execFileSync(wkg, ["oci", "push", "--insecure", addr, `${addr}/apps/planning:${tag}`, file,
        "--annotation", `dev.datanotes.app=${JSON.stringify(manifest)}`], { encoding: "utf8", env: { ...process.env, HOME: dir } });
      const d = /digest: (sha256:[0-9a-f]{64})/.exec(out);
      check(d, `wkg pushed ${tag} without saying its digest: ${out}`);
      return d[1];
    };
    const asked1 = { write: ["personal.tasks.*"], ddl: true, limits: { memory_mb: 100 } };
    const d1 = push("0.1.0", process.env.WASM, { name: "planning", description: "Plans work", version: "0.1.0", rights: asked1 });
    const d2 = push("0.2.0", wasm2, { name: "planning", description: "Plans work", version: "0.2.0", rights: { ...asked1, maintain: true } });
    const short = (d) => `${d.slice(0, 19)}…`;
    // 0.2.0 signed by alice (a key made by `datanotes apps keygen`), whom the owner trusts.
    const bin = path.resolve(root, process.env.DATANOTES_BIN || "target/debug/datanotes");
    const plain = { ...process.env };
    delete plain.COSIGN_PASSWORD;
    execFileSync(bin, ["apps", "keygen", path.join(dir, "alice")], { encoding: "utf8", env: plain });
    execFileSync(bin, ["apps", "sign", `oci://${addr}/apps/planning:0.2.0`, "--key", path.join(dir, "alice.key")], { encoding: "utf8", env: plain });
    const trusted = [{ name: "alice", public_key: fs.readFileSync(path.join(dir, "alice.pub"), "utf8") }];
    const set = await api("set_engine_settings", { settings: { trusted_keys: trusted } });
    check(set.status === 200, `set_engine_settings: ${JSON.stringify(set.body)}`);
    // The app installed by upload earlier holds the name and the tools.
    if ((await api("apps")).body.apps.some((x) => x.name === "planning")) check((await api("apps/delete", { name: "planning" })).status === 200, "apps/delete planning");
    ok("a real registry (docker-registry) with planning 0.1.0 and 0.2.0 pushed by wkg, 0.2.0 signed by a trusted key", `${addr}; ${short(d1)}, ${short(d2)}`);

    step = "registry: the plan";
    await page.setViewportSize({ width: 1280, height: 800 });
    await page.goto(`${ui}#apps`);
    await page.waitForSelector("#source-form");
    const source = `oci://${addr}/apps/planning:0.1.0`;
    await page.fill("#source-ref", "https://example.com/app.wasm");
    check(await page.locator("#source-sha256").isVisible(), "no sha256 field for a URL source");
    await page.fill("#source-ref", source);
    check(await page.locator("#source-sha256").isHidden(), "a sha256 field for an oci:// source");
    await page.click("#source-form button[type=submit]");
    await page.waitForSelector("#source-plan .plan", { timeout: 60000 });
    const plan = page.locator("#source-plan");
    check((await plan.locator(".plan-source").textContent()) === source, "the plan's source");
    check((await plan.locator(".plan-digest").textContent()) === d1, `the plan's digest is not ${d1}`);
    check((await plan.locator(".signature").textContent()) === "unsigned", "the plan does not say unsigned");
    const manifest = await plan.locator(".plan-manifest").textContent();
    check(/planning 0\.1\.0/.test(manifest) && /Plans work/.test(manifest), `the plan's app: ${manifest}`);
    const tools = await plan.locator(".plan-tools").textContent();
    check(/planning_add_task/.test(tools) && /planning_list_tasks/.test(tools) && /3 tools/.test(tools), `the plan's tools: ${tools}`);
    check((await api("apps")).body.apps.every((x) => x.name !== "planning"), "the review made an entry");
    // Nothing ticked: what it asks (write, ddl) is marked as not granted.
    const marked = () => page.$$eval("#source-plan tr.differs", (xs) => xs.map((x) => `${x.dataset.right}:${x.dataset.change}`).sort().join(" "));
    check((await plan.locator("input[type=checkbox]:checked").count()) === 0, "a right is ticked before the owner ticks it");
    check(await marked() === "ddl:not granted write:not granted", `marked at first: ${await marked()}`);
    const color = await plan.locator('tr.differs[data-right="ddl"]').evaluate((x) => getComputedStyle(x).backgroundColor);
    check(color !== "rgba(0, 0, 0, 0)" && color !== "rgb(255, 255, 255)", `a difference is not coloured: ${color}`);
    await plan.locator("#source-grant-all").click();
    check(await marked() === "", `marked after granting all asked: ${await marked()}`);
    await plan.locator('input[data-grant="ddl"]').uncheck();
    check(await marked() === "ddl:not granted", `marked after unticking ddl: ${await marked()}`);
    await plan.locator('input[data-grant="write"]').uncheck();
    await plan.locator('input[data-grant="write"]').check();
    check(await marked() === "ddl:not granted", `marked with write ticked, ddl not: ${await marked()}`);
    await plan.locator('input[data-limit="memory_mb"]').fill("64");
    check(await marked() === "ddl:not granted limits.memory_mb:less", `marked with less memory: ${await marked()}`);
    ok("the plan: source, digest, unsigned, the manifest, 3 tools; the rights asked unticked and marked, marks follow the ticks and the limits", await plan.locator(".plan-summary").textContent());

    step = "registry: install";
    await page.click("#source-install");
    await page.waitForSelector("#source-result .new-token", { timeout: 60000 });
    check((await page.textContent("#source-result .new-token")).trim().startsWith("dn_app_"), "no app token shown");
    const e1 = (await api("apps/get", { name: "planning" })).body.app;
    check(JSON.stringify(e1.write) === '["personal.tasks.*"]' && !e1.ddl && !e1.maintain && e1.wasm.limits.memory_mb === 64, `granted more or less than ticked: ${JSON.stringify(e1)}`);
    check(e1.wasm.origin.digest === d1 && e1.wasm.origin.source === source && !e1.wasm.previous, `the entry's origin: ${JSON.stringify(e1.wasm)}`);
    const card = page.locator('[data-app="planning"]');
    const shows = async (re) => {
      await page.waitForFunction((r) => new RegExp(r).test(document.querySelector('[data-app="planning"] .origin')?.textContent || ""), re.source, { timeout: 15000 })
        .catch(async () => check(false, `the entry's origin does not match ${re}: ${await card.locator(".origin").textContent().catch(() => "(none)")}`));
      return card.locator(".origin").textContent();
    };
    const o1 = await shows(new RegExp(`from oci://${addr}/apps/planning:0\\.1\\.0 · ${d1.slice(0, 19)}… · version 0\\.1\\.0 · unsigned · installed`));
    check(/3 tools/.test(await card.textContent()) && /planning_add_task/.test(await card.locator("details").first().textContent()), "the app's tools are not listed");
    check((await card.locator("button.rollback").count()) === 0, "a Roll back button without an earlier version");
    const called = await api("apps/call", { tool: "planning_list_tasks", arguments: {} });
    check(called.status === 200 && called.body.ok, `planning_list_tasks: ${JSON.stringify(called.body)}`);
    ok("installed with only the rights ticked: the entry shows its origin and its tools", o1.trim());

    step = "registry: upgrade";
    await card.locator("button.upgrade").click();
    check((await page.inputValue("#upgrade-source")) === source, "the upgrade does not offer the app's source");
    await page.fill("#upgrade-source", `oci://${addr}/apps/planning:0.2.0`);
    await page.click("#dialog-ok");
    await page.waitForSelector("#dialog[open] .plan", { timeout: 60000 });
    check((await page.textContent("#dialog-ok")) === "Confirm upgrade", "no Confirm upgrade button");
    const upMarks = await page.$$eval("#dialog tr.differs", (xs) => xs.map((x) => `${x.dataset.right}:${x.dataset.change}`).sort().join(" "));
    check(upMarks === "ddl:not granted limits.memory_mb:less maintain:not granted", `the upgrade's plan marks: ${upMarks}`);
    check(/0\.2\.0/.test(await page.textContent("#dialog .plan-manifest")), "the upgrade's plan is not 0.2.0's");
    check((await page.textContent("#dialog .signature")) === "signed by alice", `the upgrade's plan does not say signed by alice: ${await page.textContent("#dialog .signature")}`);
    check((await api("apps/get", { name: "planning" })).body.app.wasm.origin.digest === d1, "upgraded before the owner confirmed");
    // What it has now is ticked; grant maintain with it, not ddl.
    check(await page.locator('#dialog input[data-grant="write"]').isChecked(), "the upgrade's plan does not tick the write it has");
    await page.locator('#dialog input[data-grant="maintain"]').check();
    const upMarks2 = await page.$$eval("#dialog tr.differs", (xs) => xs.map((x) => `${x.dataset.right}:${x.dataset.change}`).sort().join(" "));
    check(upMarks2 === "ddl:not granted limits.memory_mb:less", `the upgrade's marks with maintain ticked: ${upMarks2}`);
    await page.click("#dialog-ok");
    await page.waitForSelector("#dialog[open] .upgraded", { timeout: 60000 });
    const said = await page.textContent("#dialog .upgraded");
    check(said === `upgraded planning: ${short(d1)} → ${short(d2)}`, `the upgrade says: ${said}`);
    await page.click("#dialog-ok");
    const o2 = await shows(new RegExp(`planning:0\\.2\\.0 · ${d2.slice(0, 19)}… · version 0\\.2\\.0 · signed by alice · installed`));
    check(/kept for a rollback: version 0\.1\.0/.test(o2), `the entry does not show the version kept: ${o2}`);
    await page.waitForFunction(() => /planning_focus/.test(document.querySelector('[data-app="planning"] details')?.textContent || ""), null, { timeout: 15000 });
    const e2 = (await api("apps/get", { name: "planning" })).body.app;
    check(e2.wasm.origin.digest === d2 && e2.wasm.previous.origin.digest === d1 && !e2.ddl && e2.maintain && e2.wasm.limits.memory_mb === 64, `after the upgrade: ${JSON.stringify(e2)}`);
    ok("upgrade to 0.2.0: its plan (signed by alice) marks what it asks beyond the rights it has, maintain granted with it, confirmed; the entry shows 0.2.0 and its new tool", said);

    step = "registry: roll back";
    await card.locator("button.rollback").click();
    await page.click("#dialog-ok");
    await page.waitForSelector("#dialog[open] .rolled-back", { timeout: 30000 });
    const back = await page.textContent("#dialog .rolled-back");
    check(back === `rolled planning back: ${short(d2)} → ${short(d1)}`, `the rollback says: ${back}`);
    await page.click("#dialog-ok");
    const o3 = await shows(new RegExp(`planning:0\\.1\\.0 · ${d1.slice(0, 19)}… · version 0\\.1\\.0 · unsigned`));
    check(/kept for a rollback: version 0\.2\.0/.test(o3), `the entry does not keep 0.2.0: ${o3}`);
    await page.waitForFunction(() => !/planning_focus/.test(document.querySelector('[data-app="planning"] details')?.textContent || "planning_focus"), null, { timeout: 15000 });
    const e3 = (await api("apps/get", { name: "planning" })).body.app;
    check(e3.wasm.origin.digest === d1 && e3.wasm.previous.origin.digest === d2, `after the rollback: ${JSON.stringify(e3.wasm)}`);
    check((await api("apps/call", { tool: "planning_list_tasks", arguments: {} })).body.ok, "planning_list_tasks after the rollback");
    ok("roll back: the entry is 0.1.0 again, 0.2.0 kept", back);

    // Live shows an install, an upgrade or a rollback as it happens (an `app` event).
    step = "registry: Live shows app events";
    await page.goto(`${ui}#live`);
    await page.waitForFunction(() => document.querySelector("#live-status")?.textContent === "connected");
    // Live opens with what happened before (marked as earlier): here the install, upgrade and
    // rollback just made in the console, newest first.
    const pastApp = '#live-rows tr.past[data-op="app"][data-app="planning"]';
    const pastRows = await page.$$eval(pastApp, (xs) => xs.map((x) => x.textContent));
    check(pastRows.length === 3 && /rollback planning/.test(pastRows[0]) && /upgrade planning/.test(pastRows[1]) && /install planning/.test(pastRows[2]),
      `Live does not open with the app's earlier events, newest first: ${JSON.stringify(pastRows)}`);
    const earlier = await page.textContent("#live-history");
    const nPast = await page.locator("#live-rows tr.past").count();
    check(nPast >= 3 && nPast <= 50 && earlier === `· ${nPast} earlier events below, marked`, `the earlier events: ${nPast} rows, said: ${earlier}`);
    check((await page.locator("#live-rows tr:not(.past)").count()) === 0 && /^0 events/.test(await page.textContent("#live-count")), "earlier events counted as new");
    await page.screenshot({ path: path.join(shots, "live-earlier.png") });
    ok("Live opens with the recent events from the feed, marked as earlier", `${nPast} earlier events; the app's: ${pastRows.map((r) => r.replace(/\s+/g, " ").trim().slice(0, 40)).join(" | ")}`);
    const upgraded = await api("apps/upgrade", { name: "planning", source: `oci://${addr}/apps/planning:0.2.0`, digest: d2, confirm: true, maintain: true });
    check(upgraded.status === 200, `apps/upgrade: ${JSON.stringify(upgraded.body)}`);
    const appRow = '#live-rows tr:not(.past)[data-op="app"][data-app="planning"]';
    await page.waitForSelector(`${appRow}:has-text("upgrade planning")`, { timeout: 5000 })
      .catch(async () => check(false, `no upgrade row in Live: ${await page.textContent("#live-rows")}`));
    const liveRow = await page.textContent(appRow);
    check(/version 0\.2\.0/.test(liveRow) && liveRow.includes(d2.slice(0, 19)) && /signed by alice/.test(liveRow) && /ok/.test(liveRow), `the upgrade's row in Live: ${liveRow}`);
    check((await api("apps/rollback", { name: "planning" })).status === 200, "apps/rollback");
    await page.waitForSelector(`${appRow}:has-text("rollback planning")`, { timeout: 5000 })
      .catch(async () => check(false, `no rollback row in Live: ${await page.textContent("#live-rows")}`));
    ok("Live shows the app's upgrade and rollback as they happen, with version, digest and signature", liveRow.replace(/\s+/g, " ").trim());

    // The other two example apps (Python, JavaScript) the same way, all in the console:
    // review, grant what they ask, install, upgrade (no more rights asked: no plan), roll back.
    for (const [name, lang] of [["journal", "Python"], ["bookmarks", "JavaScript"]]) {
      step = `registry: ${name} (${lang})`;
      const dir0 = path.dirname(process.env.WASM);
      const [v1, v2] = [path.join(dir0, `${name}.wasm`), path.join(dir0, `${name}2.wasm`)];
      for (const f of [v1, v2]) check(fs.existsSync(f), `${f} is missing: run bash scripts/build-plugins`);
      const pushApp = (tag, file) => {
        const m = { name, description: `the ${lang} example`, version: tag, rights: { write: ["personal.*"] } };
        const out = execFileSync(wkg, ["oci", "push", "--insecure", addr, `${addr}/apps/${name}:${tag}`, file,
          "--annotation", `dev.datanotes.app=${JSON.stringify(m)}`], { encoding: "utf8", env: { ...process.env, HOME: dir } });
        return /digest: (sha256:[0-9a-f]{64})/.exec(out)[1];
      };
      const [a1, a2] = [pushApp("0.1.0", v1), pushApp("0.2.0", v2)];
      await page.goto(`${ui}#apps`);
      await page.waitForSelector("#source-form");
      await page.fill("#source-ref", `oci://${addr}/apps/${name}:0.1.0`);
      await page.click("#source-form button[type=submit]");
      await page.waitForSelector("#source-plan .plan", { timeout: 120000 });
      check((await page.locator("#source-plan .plan-digest").textContent()) === a1, `${name}: the plan's digest`);
      await page.locator("#source-grant-all").click();
      await page.click("#source-install");
      await page.waitForSelector("#source-result .new-token", { timeout: 120000 });
      const i1 = (await api("apps/get", { name })).body.app;
      check(i1.wasm.origin.digest === a1 && JSON.stringify(i1.write) === '["personal.*"]' && i1.tools.length > 0, `${name} installed: ${JSON.stringify(i1)}`);
      const appCard = page.locator(`[data-app="${name}"]`);
      await appCard.locator("button.upgrade").click();
      await page.fill("#upgrade-source", `oci://${addr}/apps/${name}:0.2.0`);
      await page.click("#dialog-ok");
      await page.waitForSelector("#dialog[open] .upgraded", { timeout: 120000 });
      check((await page.textContent("#dialog .upgraded")) === `upgraded ${name}: ${short(a1)} → ${short(a2)}`, `${name}: the upgrade says ${await page.textContent("#dialog .upgraded")}`);
      await page.click("#dialog-ok");
      check((await api("apps/get", { name })).body.app.wasm.origin.digest === a2, `${name}: not upgraded`);
      await page.waitForSelector(`[data-app="${name}"] button.rollback`, { timeout: 15000 });
      await appCard.locator("button.rollback").click();
      await page.click("#dialog-ok");
      await page.waitForSelector("#dialog[open] .rolled-back", { timeout: 60000 });
      await page.click("#dialog-ok");
      const i3 = (await api("apps/get", { name })).body.app;
      check(i3.wasm.origin.digest === a1 && i3.wasm.previous.origin.digest === a2, `${name}: after the rollback ${JSON.stringify(i3.wasm)}`);
      const t = i3.tools.find((x) => /list|recent|search/.test(x)) || i3.tools[0];
      const r = await api("apps/call", { tool: t, arguments: {} });
      check(r.status === 200, `${name}: ${t} after the rollback: ${JSON.stringify(r.body)}`);
      ok(`${name} (${lang}) from the registry in the console: installed, upgraded, rolled back`, `${short(a1)} → ${short(a2)} → ${short(a1)}; ${t} answers`);
    }
  } finally {
    reg.kill();
  }
}
