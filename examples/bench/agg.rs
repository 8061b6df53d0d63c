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
        progress(format!(
            "skipped: no {} (cargo build --release --example remote_app)",
            remote_bin.display()
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
    // MCP against its own floor and against HTTP, on one raw keep-alive session, interleaved:
    // `ping`; `tools/call` of `list_tables` against `POST /datanotes/list_tables/`; `tools/call`
    // of a trivial WASM tool (when target/plugins/planning.wasm is there).
    let wasm = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/plugins/planning.wasm");
    let wasm_tool = wasm.is_file().then(|| {
        s.call(
            "apps/create",
            json!({"name": "planning", "write": ["personal.tasks.*"], "wasm_path": wasm}),
        );
        "planning_complete_task"
    });
    let (mut ping, mut lt_mcp, mut lt_http, mut w_mcp) = (vec![], vec![], vec![], vec![]);
    let timed = |f: &dyn Fn() -> usize| {
        let t0 = Instant::now();
        f();
        t0.elapsed()
    };
    for i in 0..20 + calls * 4 {
        let d1 = timed(&|| rt.block_on(mcp_raw_call(http, &url, &token, &raw_session, "ping")));
        let d2 = timed(&|| {
            rt.block_on(mcp_raw_request(
                http,
                &url,
                &token,
                &raw_session,
                "tools/call",
                json!({"name": "list_tables", "arguments": {}}),
            ))
        });
        let d3 = timed(&|| {
            rt.block_on(async {
                let r = http
                    .post(format!("{url}/datanotes/list_tables/"))
                    .bearer_auth(&token)
                    .json(&json!({}))
                    .send()
                    .await
                    .expect("list_tables");
                r.bytes().await.expect("list_tables").len()
            })
        });
        let d4 = wasm_tool.map(|t| {
            timed(&|| {
                rt.block_on(mcp_raw_request(
                    http,
                    &url,
                    &token,
                    &raw_session,
                    "tools/call",
                    json!({"name": t, "arguments": {}}),
                ))
            })
        });
        if i >= 20 {
            ping.push(d1);
            lt_mcp.push(d2);
            lt_http.push(d3);
            w_mcp.extend(d4);
        }
    }
    let (lp, lm, lhh) = (
        Latency::of(&ping),
        Latency::of(&lt_mcp),
        Latency::of(&lt_http),
    );
    progress(format!(
        "MCP ping p50 {:.3} ms; list_tables: MCP tools/call p50 {:.3} ms vs HTTP {:.3} ms = {:.2}x",
        lp.p50,
        lm.p50,
        lhh.p50,
        lm.p50 / lhh.p50
    ));
    let mut mcp_figs = vec![];
    mcp_figs.extend(lp.figures(S, "mcp_ping", None).into_iter().take(2));
    mcp_figs.extend(lm.figures(S, "mcp_list_tables", None).into_iter().take(2));
    mcp_figs.extend(lhh.figures(S, "http_list_tables", None).into_iter().take(2));
    mcp_figs.push(
        Figure::new(S, "mcp_over_http_list_tables", lm.p50 / lhh.p50, "x")
            .target(Target::AtMost(1.3)),
    );
    if wasm_tool.is_some() {
        let lw = Latency::of(&w_mcp);
        progress(format!(
            "trivial WASM tool over MCP: p50 {:.3} ms, p99 {:.3} ms = {:.2}x the ping",
            lw.p50,
            lw.p99,
            lw.p50 / lp.p50
        ));
        mcp_figs.extend(lw.figures(S, "mcp_wasm_call", None).into_iter().take(2));
        mcp_figs.push(
            Figure::new(S, "mcp_wasm_call_over_ping", lw.p50 / lp.p50, "x")
                .target(Target::AtMost(1.3)),
        );
        mcp_figs.push(
            Figure::new(S, "mcp_wasm_call_p99_over_p50", lw.p99 / lw.p50, "x")
                .target(Target::AtMost(2.0)),
        );
        mcp_figs.extend(wasm_breakdown(rt, http, &url, &token, &raw_session, calls));
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

/// A breakdown of the WASM call's cost over the ping, in a loop of its own after the figures
/// above (which it does not change), on the same session, interleaved: `ping`; `tools/call` of a
/// name no tool has (the door, the request's parsing, the aggregator's refusal, the answer and
/// its tool-call event, without an app); the trivial WASM call. Ratios to the ping's p50.
fn wasm_breakdown(
    rt: &tokio::runtime::Runtime,
    http: &reqwest::Client,
    url: &str,
    token: &str,
    sid: &str,
    calls: usize,
) -> Vec<Figure> {
    const S: &str = "agg";
    let call = |name: &str| {
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
    };
    let (mut ping, mut none, mut wasm) = (vec![], vec![], vec![]);
    for i in 0..20 + calls * 4 {
        let t0 = Instant::now();
        rt.block_on(mcp_raw_call(http, url, token, sid, "ping"));
        let d1 = t0.elapsed();
        let d2 = call("no_such_tool_here");
        let d3 = call("planning_complete_task");
        if i >= 20 {
            ping.push(d1);
            none.push(d2);
            wasm.push(d3);
        }
    }
    // The same ping right after a `POST /datanotes/list_tables/` (what precedes the WASM call in
    // the loop above): what that request leaves behind, whatever the next request is.
    let (mut ping2, mut after) = (vec![], vec![]);
    for i in 0..20 + calls * 4 {
        let t0 = Instant::now();
        rt.block_on(mcp_raw_call(http, url, token, sid, "ping"));
        let d1 = t0.elapsed();
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
        let t0 = Instant::now();
        rt.block_on(mcp_raw_call(http, url, token, sid, "ping"));
        let d2 = t0.elapsed();
        if i >= 20 {
            ping2.push(d1);
            after.push(d2);
        }
    }
    let (lp2, la) = (Latency::of(&ping2), Latency::of(&after));
    progress(format!(
        "breakdown: ping p50 {:.3} ms; the same ping right after POST /datanotes/list_tables/ {:.3} ms = {:.2}x",
        lp2.p50,
        la.p50,
        la.p50 / lp2.p50
    ));
    let (lp, ln, lw) = (Latency::of(&ping), Latency::of(&none), Latency::of(&wasm));
    progress(format!(
        "breakdown: ping p50 {:.3} ms; tools/call of no tool {:.3} ms = {:.2}x; trivial WASM tool {:.3} ms = {:.2}x",
        lp.p50,
        ln.p50,
        ln.p50 / lp.p50,
        lw.p50,
        lw.p50 / lp.p50
    ));
    vec![
        Figure::new(S, "breakdown_ping_p50_ms", lp.p50, "ms"),
        Figure::new(S, "breakdown_no_tool_p50_ms", ln.p50, "ms"),
        Figure::new(S, "breakdown_wasm_call_p50_ms", lw.p50, "ms"),
        Figure::new(S, "breakdown_no_tool_over_ping", ln.p50 / lp.p50, "x"),
        Figure::new(S, "breakdown_wasm_call_over_ping", lw.p50 / lp.p50, "x"),
        Figure::new(
            S,
            "breakdown_ping_after_http_over_ping",
            la.p50 / lp2.p50,
            "x",
        ),
    ]
}
