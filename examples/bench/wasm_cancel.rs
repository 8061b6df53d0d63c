//! `wasm_cancel`: a cancelled WASM call, from the client's `notifications/cancelled` until its
//! instance is gone (issue 31).

use super::*;
use rmcp::model::{CallToolRequest, ClientRequest};
use rmcp::service::PeerRequestOptions;

/// On a database of its own, `hostile` (the Rust test component) with one instance at most and
/// limits no call reaches: an rmcp client through `/mcp` calls `hostile_spin` (guest code that
/// loops forever) or `hostile_sleep` (blocked in a host call), waits until the call runs in the
/// app's instance (then 0–29 ms more, so that the cancel lands anywhere in an epoch tick),
/// cancels it, and polls `apps/get` until the app has no instance left: the time from the
/// cancel to the free instance. Each round's next call runs on a fresh instance.
pub(crate) fn section_wasm_cancel(b: &mut Bench) -> Vec<Figure> {
    const S: &str = "wasm_cancel";
    let Some(plugins) = wasm::built_plugins(&["hostile"]) else {
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
            let Value::Object(a) = args.clone() else {
                unreachable!()
            };
            let p = CallToolRequestParams::new(tool).with_arguments(a);
            let handle = rt
                .block_on(c.send_cancellable_request(
                    ClientRequest::CallToolRequest(CallToolRequest::new(p)),
                    PeerRequestOptions::no_options(),
                ))
                .expect("send the call");
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
        if what == "spin" {
            f[1].target = Some(Target::AtMost(100.0));
        }
        out.extend(f.into_iter().take(2));
    }
    let _ = rt.block_on(c.cancel());
    s.stop();
    out
}
