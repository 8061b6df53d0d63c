//! `wasm_cancel`: a cancelled WASM call, from the client's `notifications/cancelled` until its
//! instance is gone (issue 31).

use super::*;
use rmcp::model::{CallToolRequest, ClientRequest};
use rmcp::service::{PeerRequestOptions, RequestHandle, RoleClient};

/// Sends a `tools/call` through the client `c`, cancellable.
fn send_cancellable(
    rt: &tokio::runtime::Runtime,
    c: &rmcp::service::RunningService<RoleClient, ()>,
    tool: &str,
    args: &Value,
) -> RequestHandle<RoleClient> {
    let p = CallToolRequestParams::new(tool.to_string())
        .with_arguments(args.as_object().expect("arguments").clone());
    rt.block_on(c.send_cancellable_request(
        ClientRequest::CallToolRequest(CallToolRequest::new(p)),
        PeerRequestOptions::no_options(),
    ))
    .expect("send the call")
}

/// On a database of its own, `hostile` (the Rust test component) with one instance at most and
/// limits no call reaches: an rmcp client through `/mcp` calls `hostile_spin` (guest code that
/// loops forever) or `hostile_sleep` (blocked in a host call), waits until the call runs in the
/// app's instance (then 0–29 ms more, so that the cancel lands anywhere in an epoch tick),
/// cancels it, and polls `apps/get` until the app has no instance left: the time from the
/// cancel to the free instance. Each round's next call runs on a fresh instance.
pub(crate) fn section_wasm_cancel(b: &mut Bench) -> Vec<Figure> {
    const S: &str = "wasm_cancel";
    let Some(plugins) = wasm::built_plugins(&["hostile", "planning2"]) else {
        return vec![];
    };
    let rounds = if b.opts.quick { 60 } else { 200 };
    let tmp = tempfile::tempdir().expect("a database folder");
    let s = Server::start(&b.bin, tmp.path());
    s.call(
        "apps/create",
        json!({"name": "hostile", "wasm_path": plugins.join("hostile.wasm"),
               "limits": {"cpu_ms": 600_000, "timeout_ms": 600_000, "max_instances": 1}}),
    );
    wait_reachable(&s, 1);
    let instances = || {
        let rt = s.call("apps/get", json!({"name": "hostile"}))["app"]["runtime"].clone();
        let n = |k: &str| rt[k].as_u64().unwrap_or_else(|| panic!("{rt}"));
        (n("instances"), n("warm"))
    };
    // The kit's runtime (a worker thread): the client's transport goes on between `block_on`s.
    let rt = kit::runtime();
    let c = kit::mcp::connect_on(&rt, &format!("{}/mcp", s.url), Some(&s.token), None);
    let call = |tool: &str, args: Value| {
        let Value::Object(a) = args else {
            unreachable!()
        };
        let p = CallToolRequestParams::new(tool.to_string()).with_arguments(a);
        rt.block_on(c.call_tool(p))
            .unwrap_or_else(|e| panic!("{tool}: {e}"))
    };
    call("hostile_ok", json!({}));
    let mut rng = Rng(0x5eed_cafe);
    let mut out = vec![];
    for (what, tool, args) in [
        ("spin", "hostile_spin", json!({})),
        ("sleep", "hostile_sleep", json!({"ms": 600_000})),
    ] {
        let mut freed = vec![];
        for round in 0..rounds {
            let handle = send_cancellable(&rt, &c, tool, &args);
            let t0 = Instant::now();
            while instances() != (1, 0) {
                assert!(t0.elapsed() < Duration::from_secs(10), "{tool} never ran");
            }
            std::thread::sleep(Duration::from_millis(rng.next() % 30));
            let cancelled_at = Instant::now();
            rt.block_on(handle.cancel(None)).expect("cancel the call");
            loop {
                let (live, _) = instances();
                if live == 0 {
                    break;
                }
                let dt = cancelled_at.elapsed();
                assert!(dt < Duration::from_secs(10), "{tool}: still running");
            }
            freed.push(cancelled_at.elapsed());
            let r = kit::structured(&call("hostile_ok", json!({})));
            assert_eq!(
                r["calls"], 1,
                "round {round}: a fresh instance answers: {r}"
            );
        }
        let l = Latency::of(&freed);
        progress(format!(
            "cancelled {tool}: cancel -> free instance p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms ({} calls)",
            l.p50, l.p99, l.max, l.n
        ));
        let mut f = l.figures(S, &format!("cancel_{what}_to_free"), None);
        f[1].target = Some(Target::AtMost(100.0));
        out.extend(f.into_iter().take(2));
    }
    let _ = rt.block_on(c.cancel());
    out.extend(while_guests_spin(&s, rounds.min(40)));
    s.stop();
    out.extend(cooperative_cancel(b, &plugins, rounds.min(40)));
    out
}

/// `hostile` again, installed anew with 8 instances and a 4 s CPU limit: 8 callers spin in it while
/// `/health` and `insert_row` are timed (`n` of each), a request every 50 ms (what
/// `tests/e2e/wasm/mod.rs` checks answers at all). Every spinning call must end on its CPU limit.
fn while_guests_spin(s: &Server, n: usize) -> Vec<Figure> {
    const S: &str = "wasm_cancel";
    let plugins = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/plugins");
    s.call("apps/delete", json!({"name": "hostile"}));
    s.call(
        "apps/create",
        json!({"name": "hostile", "wasm_path": plugins.join("hostile.wasm"),
               "limits": {"cpu_ms": 4000, "max_instances": 8}}),
    );
    wait_reachable(s, 1);
    s.call(
        "create_table",
        json!({"table": "bench.spin.rows", "description": "rows written while guests spin",
               "columns": {"title": {"type": "text", "required": true}}}),
    );
    let spin = |_| {
        let c = AsyncClient::new(s);
        std::thread::spawn(move || c.app_call("hostile_spin", &json!({})).1)
    };
    let spinning: Vec<_> = (0..8).map(spin).collect();
    // Until the 8 calls run in the app's 8 instances.
    let t0 = Instant::now();
    while s.call("apps/get", json!({"name": "hostile"}))["app"]["runtime"]["instances"] != 8 {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "the spinning calls never ran"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let c = AsyncClient::new(s);
    let (mut health, mut writes) = (vec![], vec![]);
    for i in 0..n {
        health.push(c.health());
        let t = Instant::now();
        s.call(
            "insert_row",
            json!({"table": "bench.spin.rows", "values": {"title": format!("while guests spin {i}")}}),
        );
        writes.push(t.elapsed());
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut ended = 0;
    for t in spinning {
        let v = t.join().expect("a spinning caller");
        if v.to_string().contains("CPU time") {
            ended += 1;
        } else {
            progress(format!("a spinning call ended otherwise: {v}"));
        }
    }
    let (h, w) = (Latency::of(&health), Latency::of(&writes));
    progress(format!(
        "while 8 guests spin: /health p50 {:.2} ms, max {:.2} ms; insert_row p50 {:.2} ms, max {:.2} ms",
        h.p50, h.max, w.p50, w.max
    ));
    vec![
        Figure::new(S, "health_while_8_spin_p50_ms", h.p50, "ms").target(Target::AtMost(5.0)),
        Figure::new(S, "insert_while_8_spin_p50_ms", w.p50, "ms").target(Target::AtMost(50.0)),
        Figure::new(
            S,
            "spin_calls_not_ended_by_cpu_limit",
            (8 - ended) as f64,
            "calls",
        )
        .correct(Target::AtMost(0.0)),
    ]
}

/// `planning2` (world 0.2), whose `planning_focus` checks `engine.cancelled` as it waits: a
/// cancelled call returns and its instance is back, warm, not thrown away. The time from the
/// cancel until then (`n` rounds).
fn cooperative_cancel(b: &Bench, plugins: &Path, n: usize) -> Vec<Figure> {
    const S: &str = "wasm_cancel";
    let tmp = tempfile::tempdir().expect("a database folder");
    let s = Server::start(&b.bin, tmp.path());
    s.call(
        "apps/create",
        json!({"name": "plan", "wasm_path": plugins.join("planning2.wasm"),
               "write": ["personal.tasks.items"], "ddl": true,
               "limits": {"cpu_ms": 600_000, "timeout_ms": 600_000, "max_instances": 1}}),
    );
    wait_reachable(&s, 1);
    let instances = || {
        let rt = s.call("apps/get", json!({"name": "plan"}))["app"]["runtime"].clone();
        (rt["instances"].as_u64(), rt["warm"].as_u64())
    };
    let rt = kit::runtime();
    let c = kit::mcp::connect_on(&rt, &format!("{}/mcp", s.url), Some(&s.token), None);
    let mut back = vec![];
    for _ in 0..n {
        let handle = send_cancellable(&rt, &c, "planning_focus", &json!({"seconds": 600}));
        let t0 = Instant::now();
        while instances() != (Some(1), Some(0)) {
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "planning_focus never ran"
            );
        }
        let cancelled_at = Instant::now();
        rt.block_on(handle.cancel(None)).expect("cancel the call");
        while instances() != (Some(1), Some(1)) {
            assert!(
                cancelled_at.elapsed() < Duration::from_secs(10),
                "still in the call"
            );
        }
        back.push(cancelled_at.elapsed());
    }
    let _ = rt.block_on(c.cancel());
    s.stop();
    let l = Latency::of(&back);
    progress(format!(
        "cancelled planning_focus: cancel -> instance back, warm, p50 {:.1} ms, p99 {:.1} ms ({} calls)",
        l.p50, l.p99, l.n
    ));
    let mut f = l.figures(S, "cancel_cooperative_to_warm", None);
    f[1].target = Some(Target::AtMost(100.0));
    f.into_iter().take(2).collect()
}
