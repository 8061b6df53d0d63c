//! `agg`: the aggregator (`tools/list` over many remote apps, `/apps/call/` against a direct
//! call), and MCP against its floor and against HTTP.

use super::*;

/// Opens an MCP session by hand (initialize, initialized): its `Mcp-Session-Id`.
pub(crate) async fn mcp_raw_session(http: &reqwest::Client, url: &str, token: &str) -> String {
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "bench", "version": "0"}}});
    let r = http
        .post(format!("{url}/mcp"))
        .bearer_auth(token)
        .header("Accept", "application/json, text/event-stream")
        .json(&init)
        .send()
        .await
        .expect("initialize");
    let sid = r
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .expect("an Mcp-Session-Id")
        .to_string();
    let _ = r.bytes().await;
    http.post(format!("{url}/mcp"))
        .bearer_auth(token)
        .header("Accept", "application/json, text/event-stream")
        .header("Mcp-Session-Id", &sid)
        .json(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        .send()
        .await
        .expect("initialized");
    sid
}

/// One JSON-RPC request on a raw session; answers the size of the answer (read, not parsed).
pub(crate) async fn mcp_raw_call(
    http: &reqwest::Client,
    url: &str,
    token: &str,
    sid: &str,
    method: &str,
) -> usize {
    mcp_raw_request(http, url, token, sid, method, json!({})).await
}

/// One JSON-RPC request with its params on a raw session; answers the size of the answer.
pub(crate) async fn mcp_raw_request(
    http: &reqwest::Client,
    url: &str,
    token: &str,
    sid: &str,
    method: &str,
    params: Value,
) -> usize {
    let r = http
        .post(format!("{url}/mcp"))
        .bearer_auth(token)
        .header("Accept", "application/json, text/event-stream")
        .header("Mcp-Session-Id", sid)
        .json(&json!({"jsonrpc": "2.0", "id": 2, "method": method, "params": params}))
        .send()
        .await
        .expect(method);
    assert!(r.status().is_success(), "{method}: {}", r.status());
    // The answer is one SSE event (or plain JSON); the stream may stay open a moment after it,
    // as an rmcp client does not wait for that, neither does this.
    let sse = r
        .headers()
        .get("content-type")
        .is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"));
    let mut r = r;
    let mut body: Vec<u8> = vec![];
    while let Some(chunk) = r.chunk().await.expect(method) {
        body.extend_from_slice(&chunk);
        let has_result = body.windows(8).any(|w| w == b"\"result\"");

        if sse && has_result && body.ends_with(b"\n\n") {
            break;
        }
    }
    assert!(
        body.windows(8).any(|w| w == b"\"result\""),
        "{method} answered no result: {}",
        String::from_utf8_lossy(&body[..body.len().min(300)])
    );
    body.len()
}

/// The aggregator: `tools/list` through the engine's `/mcp` with many remote apps (some down),
/// and `/apps/call/` to a remote app against a direct MCP call to it, interleaved.
pub(crate) fn section_aggregator(b: &mut Bench) -> Vec<Figure> {
    const S: &str = "agg";
    const TOOLS: usize = 20;
    let remote_bin = kit::example("remote_app");
    if !remote_bin.is_file() {
        skip(format!(
            "agg: no {} (cargo build{} --example remote_app)",
            remote_bin.display(),
            crate::RELEASE_FLAG
        ));
        return vec![];
    }
    let (apps, down, calls) = (b.opts.apps, b.opts.apps_down, b.opts.app_calls);
    let s = b.server();
    let (url, token) = (s.url.clone(), s.token.clone());
    let mut running = vec![];
    let mut names = vec![];
    let mut first_url = String::new();
    for i in 0..apps - down {
        let name = format!("ra{i:02}");
        // The app registers its own address, on 127.0.0.1: the owner allows it.
        let v = s.call(
            "apps/create",
            json!({"name": &name, "self_url_private": true}),
        );
        let app_token = v["token"].as_str().expect("app token").to_string();
        let mut args = vec!["--bare".to_string()];
        for t in 1..=TOOLS {
            args.extend(["--tool".to_string(), format!("{name}_t{t}")]);
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let app = kit::App::spawn(&url, &name, &app_token, &args, true);
        let mcp_url = app.url.clone();
        if i == 0 {
            first_url = mcp_url;
        }
        running.push(app);
        names.push(name);
    }
    for i in 0..down {
        let name = format!("down{i:02}");
        // Nothing listens on port 9 (discard) on this machine: connection refused.
        s.call(
            "apps/create",
            json!({"name": &name, "mcp_url": "http://127.0.0.1:9/mcp"}),
        );
        names.push(name);
    }
    let client = AsyncClient::new(s);
    let rt = &client.rt;
    let agent = kit::mcp::connect_on(rt, &format!("{url}/mcp"), Some(&token), None);
    let want = (apps - down) * TOOLS;
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut listed = 0;
    loop {
        let tools = rt.block_on(agent.list_all_tools()).expect("tools/list");
        listed = listed.max(tools.iter().filter(|t| t.name.starts_with("ra")).count());
        if listed >= want || Instant::now() > deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    progress(format!(
        "{} remote apps up, {down} down: {listed} of {want} remote tools listed",
        apps - down
    ));
    // The same request as raw HTTP, its answer read but not parsed: what the engine and the
    // transport take, without the client's decoding of every tool. Interleaved with the first.
    let http = &client.http;
    let raw_session = rt.block_on(mcp_raw_session(http, &url, &token));
    let (mut samples, mut raw, mut bytes) = (vec![], vec![], 0);
    let mut total_tools = 0;
    for i in 0..10 + calls {
        let t0 = Instant::now();
        let tools = rt.block_on(agent.list_all_tools()).expect("tools/list");
        let d1 = t0.elapsed();
        let t0 = Instant::now();
        bytes = rt.block_on(mcp_raw_call(http, &url, &token, &raw_session, "tools/list"));
        let d2 = t0.elapsed();
        if i >= 10 {
            samples.push(d1);
            raw.push(d2);
        }
        total_tools = tools.len();
    }
    let (list, list_raw) = (Latency::of(&samples), Latency::of(&raw));
    progress(format!(
        "tools/list ({total_tools} tools): p50 {:.2} ms, p99 {:.2} ms with an rmcp client; {:.2} / {:.2} ms as raw HTTP ({} KB, not parsed)",
        list.p50,
        list.p99,
        list_raw.p50,
        list_raw.p99,
        bytes / 1024
    ));
    // /apps/call/ vs direct, interleaved.
    let direct = kit::mcp::connect_on(rt, &first_url, None, None);
    let tool = format!("{}_t1", names[0]);
    let (mut via, mut dir) = (vec![], vec![]);
    // Both calls are made from the same one-thread runtime (reqwest for `/apps/call/`, rmcp's
    // client for the direct call), so that the ratio measures the engine, not two client stacks;
    // beside them, the floor: one HTTP round trip to the engine that does nothing.
    let mut hop = vec![];
    for i in 0..10 + calls {
        let (d1, v) = client.app_call(&tool, &json!({}));
        assert_eq!(v["ok"], true, "{tool} through /apps/call/: {v}");
        let h = client.health();
        if i >= 10 {
            hop.push(h);
        }
        let p = CallToolRequestParams::new(tool.clone());
        let t0 = Instant::now();
        let r = rt.block_on(direct.call_tool(p)).expect("direct tools/call");
        let d2 = t0.elapsed();
        assert!(r.is_error != Some(true), "direct call failed");
        if i >= 10 {
            via.push(d1);
            dir.push(d2);
        }
    }
    let (lv, ld, lh) = (Latency::of(&via), Latency::of(&dir), Latency::of(&hop));
    let ratio = lv.p50 / ld.p50;
    progress(format!(
        "/apps/call/ p50 {:.2} ms vs direct {:.2} ms = {ratio:.2}x; an HTTP round trip to the engine (GET /health) p50 {:.2} ms",
        lv.p50, ld.p50, lh.p50
    ));
    let _ = rt.block_on(direct.cancel());
    let _ = rt.block_on(agent.cancel());
    for n in &names {
        s.call("apps/delete", json!({"name": n}));
    }
    drop(running);
    // MCP against its own floor and against HTTP, on one raw keep-alive session, in two loops of
    // their own (see BENCHMARKS.md): each measured MCP request follows an MCP request, never an
    // HTTP request served on the blocking pool, whose after-effects (wake-ups of its threads)
    // slow down whatever request comes next.
    let wasm = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/plugins/planning.wasm");
    let wasm_tool = wasm.is_file().then(|| {
        s.call(
            "apps/create",
            json!({"name": "planning", "write": ["personal.tasks.*"], "wasm_path": wasm}),
        );
        "planning_complete_task"
    });
    let mcp_figs = mcp_floor(rt, http, &url, &token, &raw_session, calls, wasm_tool);
    if wasm_tool.is_some() {
        s.call("apps/delete", json!({"name": "planning"}));
    }
    let mut out = vec![
        Figure::new(S, "agg_apps", apps as f64, "apps"),
        Figure::new(S, "agg_apps_down", down as f64, "apps"),
        Figure::new(S, "agg_tools_listed", total_tools as f64, "tools"),
    ];
    let mut lf = list.figures(S, "tools_list", None);
    lf[0].target = Some(Target::AtMost(2.0));
    out.extend(lf);
    out.extend(
        list_raw
            .figures(S, "tools_list_raw", None)
            .into_iter()
            .take(2),
    );
    out.push(Figure::new(
        S,
        "tools_list_kib",
        bytes as f64 / 1024.0,
        "KiB",
    ));
    out.extend(lv.figures(S, "apps_call_remote", None));
    out.extend(ld.figures(S, "direct_call_remote", None));
    out.extend(
        lh.figures(S, "engine_http_roundtrip", None)
            .into_iter()
            .take(2),
    );
    out.push(Figure::new(S, "apps_call_over_direct", ratio, "x").target(Target::AtMost(1.3)));
    out.extend(mcp_figs);
    out
}

/// One `tools/call` on a raw session, timed.
fn mcp_tool_call(
    rt: &tokio::runtime::Runtime,
    http: &reqwest::Client,
    url: &str,
    token: &str,
    sid: &str,
    name: &str,
) -> Duration {
    let t0 = Instant::now();
    rt.block_on(mcp_raw_request(
        http,
        url,
        token,
        sid,
        "tools/call",
        json!({"name": name, "arguments": {}}),
    ));
    t0.elapsed()
}

/// One MCP `ping` on a raw session, timed.
fn mcp_ping(
    rt: &tokio::runtime::Runtime,
    http: &reqwest::Client,
    url: &str,
    token: &str,
    sid: &str,
) -> Duration {
    let t0 = Instant::now();
    rt.block_on(mcp_raw_call(http, url, token, sid, "ping"));
    t0.elapsed()
}

/// MCP against its floor and against HTTP, on one raw keep-alive session: pings alone (the
/// tail of a request that leaves the writer nothing to do), then two loops:
/// 1. `ping`, `tools/call` of a name no tool has (the door, parsing, the aggregator's refusal,
///    the answer and its tool-call event, no app), `tools/call` of the trivial WASM tool
///    (when there is one), in turn: each follows an MCP request on the session;
/// 2. `tools/call` of `list_tables`, `POST /datanotes/list_tables/`, `ping`, in turn: both
///    `list_tables` follow an MCP request; the ping follows the HTTP request, against the
///    ping of loop 1: what an HTTP request served on the blocking pool costs the next request.
fn mcp_floor(
    rt: &tokio::runtime::Runtime,
    http: &reqwest::Client,
    url: &str,
    token: &str,
    sid: &str,
    calls: usize,
    wasm_tool: Option<&str>,
) -> Vec<Figure> {
    const S: &str = "agg";
    // A p99 needs samples: at least 1,000 of each (half a second), in the quick run too.
    let n = (calls * 4).max(1000);
    // 0. Pings alone: no tool call, so no tool-call event and nothing for the writer to do.
    //    Their tail is the machine's (and the door's) floor for the tail of any request.
    let mut alone = vec![];
    for i in 0..20 + n {
        let d = mcp_ping(rt, http, url, token, sid);
        if i >= 20 {
            alone.push(d);
        }
    }
    let (mut ping, mut none, mut wasm) = (vec![], vec![], vec![]);
    for i in 0..20 + n {
        let d1 = mcp_ping(rt, http, url, token, sid);
        let d2 = mcp_tool_call(rt, http, url, token, sid, "no_such_tool_here");
        let d3 = wasm_tool.map(|t| mcp_tool_call(rt, http, url, token, sid, t));
        if i >= 20 {
            ping.push(d1);
            none.push(d2);
            wasm.extend(d3);
        }
    }
    let (mut lt_mcp, mut lt_http, mut after) = (vec![], vec![], vec![]);
    for i in 0..20 + n {
        let d1 = mcp_tool_call(rt, http, url, token, sid, "list_tables");
        let t0 = Instant::now();
        rt.block_on(async {
            let r = http
                .post(format!("{url}/datanotes/list_tables/"))
                .bearer_auth(token)
                .json(&json!({}))
                .send()
                .await
                .expect("list_tables");
            r.bytes().await.expect("list_tables").len()
        });
        let d2 = t0.elapsed();
        let d3 = mcp_ping(rt, http, url, token, sid);
        if i >= 20 {
            lt_mcp.push(d1);
            lt_http.push(d2);
            after.push(d3);
        }
    }
    let (lp, ln) = (Latency::of(&ping), Latency::of(&none));
    let (lm, lh, la) = (
        Latency::of(&lt_mcp),
        Latency::of(&lt_http),
        Latency::of(&after),
    );
    progress(format!(
        "MCP ping p50 {:.3} ms; tools/call of no tool {:.3} ms = {:.2}x; a ping right after POST /datanotes/list_tables/ {:.3} ms = {:.2}x",
        lp.p50,
        ln.p50,
        ln.p50 / lp.p50,
        la.p50,
        la.p50 / lp.p50
    ));
    progress(format!(
        "list_tables: MCP tools/call p50 {:.3} ms vs HTTP {:.3} ms = {:.2}x",
        lm.p50,
        lh.p50,
        lm.p50 / lh.p50
    ));
    let l0 = Latency::of(&alone);
    progress(format!(
        "MCP pings alone: p50 {:.3} ms, p99 {:.3} ms = {:.2}x its p50 (the floor of a tail here)",
        l0.p50,
        l0.p99,
        l0.p99 / l0.p50
    ));
    let mut out = vec![];
    out.push(Figure::new(
        S,
        "mcp_ping_alone_p99_over_p50",
        l0.p99 / l0.p50,
        "x",
    ));
    out.extend(lp.figures(S, "mcp_ping", None).into_iter().take(2));
    out.extend(lm.figures(S, "mcp_list_tables", None).into_iter().take(2));
    out.extend(lh.figures(S, "http_list_tables", None).into_iter().take(2));
    out.push(
        Figure::new(S, "mcp_over_http_list_tables", lm.p50 / lh.p50, "x")
            .target(Target::AtMost(1.3)),
    );
    out.extend(ln.figures(S, "mcp_no_tool", None).into_iter().take(2));
    out.push(Figure::new(
        S,
        "mcp_no_tool_over_ping",
        ln.p50 / lp.p50,
        "x",
    ));
    out.push(Figure::new(
        S,
        "mcp_ping_after_http_over_ping",
        la.p50 / lp.p50,
        "x",
    ));
    if wasm_tool.is_some() {
        let lw = Latency::of(&wasm);
        progress(format!(
            "trivial WASM tool over MCP: p50 {:.3} ms, p99 {:.3} ms = {:.2}x the ping",
            lw.p50,
            lw.p99,
            lw.p50 / lp.p50
        ));
        out.extend(lw.figures(S, "mcp_wasm_call", None).into_iter().take(2));
        out.push(
            Figure::new(S, "mcp_wasm_call_over_ping", lw.p50 / lp.p50, "x")
                .target(Target::AtMost(1.3)),
        );
        out.push(
            Figure::new(S, "mcp_wasm_call_p99_over_p50", lw.p99 / lw.p50, "x")
                .target(Target::AtMost(2.0)),
        );
    }
    out
}
