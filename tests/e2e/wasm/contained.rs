//! Hostile components contained while good calls go on; timeouts, CPU time, a caller that goes
//! away; a component for another world; limits; an install whose tools never come.

use super::*;

/// Runs `bad` (in another thread) while 50 good calls run 10 at a time; every good call must
/// succeed, and the app still answers after. Answers what `bad` answered.
fn during_good_calls(s: &Server, what: &str, bad: impl FnOnce() -> Value + Send) -> Value {
    std::thread::scope(|scope| {
        let bad = scope.spawn(bad);
        let good: Vec<_> = (0..10)
            .map(|i| {
                scope.spawn(move || {
                    for j in 0..5 {
                        let (tool, args) = if (i + j) % 2 == 0 {
                            ("hostile_ok", json!({}))
                        } else {
                            ("planning_list_tasks", json!({}))
                        };
                        let v = s.tool(tool, args);
                        assert_eq!(v["ok"], true, "{tool} during {what}: {v}");
                    }
                })
            })
            .collect();
        for g in good {
            g.join().expect("a good call failed");
        }
        let v = bad.join().unwrap();
        // After each, the app still answers.
        let ok = s.tool_ok("hostile_ok", json!({}));
        assert_eq!(ok["ok"], true, "after {what}: {ok}");
        v
    })
}

/// Calls a hostile tool during good calls: it must fail alone. Answers its error text.
fn contained(s: &Server, hostile: &str, args: Value) -> String {
    let v = during_good_calls(s, hostile, || s.tool(hostile, args.clone()));
    assert_eq!(v["ok"], false, "{hostile} should fail: {v}");
    assert_eq!(v["servedBy"], "hostile", "{v}");
    assert_eq!(v["value"]["isError"], true, "{v}");
    v["value"]["content"][0]["text"]
        .as_str()
        .unwrap()
        .to_string()
}

#[test]
fn hostile_components_are_contained() {
    let s = server();
    s.install(
        "planning",
        "planning",
        json!({"write": ["personal.tasks.items"], "ddl": true}),
    );
    s.tool_ok("planning_add_task", json!({"title": "Stay up"}));
    let v = s.install(
        "hostile",
        "hostile",
        // cpu_ms counts wall-clock ticks while guest code runs: generous enough that the memory
        // bomb reaches its memory limit first even on a loaded machine.
        json!({"limits": {"cpu_ms": 3000, "memory_mb": 32, "max_result_bytes": 1_000_000, "max_instances": 4}}),
    );
    assert_eq!(v["app"]["wasm"]["limits"]["cpu_ms"], 3000);

    let started = Instant::now();
    let e = contained(&s, "hostile_spin", json!({}));
    assert!(e.contains("CPU time (3000 ms)"), "{e}");
    assert!(started.elapsed() < Duration::from_secs(20));

    let e = contained(&s, "hostile_bomb", json!({}));
    assert!(e.contains("memory limit (32 MiB)"), "{e}");

    let e = contained(&s, "hostile_huge", json!({}));
    assert!(
        e.contains("10000000 bytes") && e.contains("limit of 1000000"),
        "{e}"
    );
    // Under the limit, a large result is fine.
    let big = s.tool_ok("hostile_huge", json!({"bytes": 900_000}));
    assert_eq!(big.as_str().unwrap().len(), 900_000);

    let e = contained(&s, "hostile_trap", json!({}));
    assert!(e.contains("trapped"), "{e}");
    assert!(
        e.contains("hostile_trap panics on purpose"),
        "the guest's panic message: {e}"
    );

    let e = contained(&s, "hostile_stack", json!({}));
    assert!(e.contains("trapped") || e.contains("stack"), "{e}");

    // A component for another world, installed meanwhile, is refused.
    let v = during_good_calls(&s, "installing mismatch", || {
        s.post(
            "/datanotes/apps/create/",
            Some(&s.token),
            &json!({"name": "mismatch", "wasm_path": component("mismatch")}),
        )
        .1
    });
    assert_eq!(v["error"]["rule"], "world", "{v}");

    // Output past the log's buffer is dropped, never a trap; and an instance that printed is
    // reused (calls counts the calls an instance answered).
    let before = s.tool_ok("hostile_ok", json!({}))["calls"]
        .as_u64()
        .unwrap();
    let p = s.tool_ok("hostile_print", json!({"bytes": 200_000}));
    assert_eq!(p["printed"], 200_000);
    let after = s.tool_ok("hostile_ok", json!({}))["calls"]
        .as_u64()
        .unwrap();
    assert_eq!(
        after,
        before + 2,
        "the instance that printed was thrown away"
    );

    // Through MCP: an isError result, and the session goes on.
    let mcp = Agent::owner(&s);
    let r = mcp.call("hostile_spin", json!({}));
    assert_eq!(r.is_error, Some(true), "{r:?}");
    assert!(text(&r).contains("CPU time"), "{r:?}");
    let r = mcp.call("hostile_ok", json!({}));
    assert_ne!(r.is_error, Some(true), "{r:?}");
    let r = mcp.call("planning_list_tasks", json!({}));
    assert_eq!(structured(&r)["total"], 1, "{r:?}");

    // The app was never marked unreachable: a trap fails the call, not the app.
    assert_eq!(s.app("hostile")["reachable"], true);
}

#[test]
fn a_call_that_timed_out_is_cancelled_and_frees_its_instance() {
    let s = server();
    s.install(
        "hostile",
        "hostile",
        json!({"limits": {"timeout_ms": 500, "max_instances": 1}}),
    );
    s.tool_ok("hostile_ok", json!({}));
    for round in 0..3 {
        // The guest sleeps in a host call (wasi:clocks): epoch interruption cannot stop it, the
        // wall-clock timeout cancels it.
        let started = Instant::now();
        let e = s.tool_err("hostile_sleep", json!({"ms": 30_000}));
        assert!(
            e.contains("timed out calling hostile_sleep (500 ms)"),
            "{e}"
        );
        assert!(
            started.elapsed() < Duration::from_millis(2500),
            "answered after {:?}",
            started.elapsed()
        );
        // The only slot is free at once: the next call does not wait for the 30 s sleep to end,
        // and runs on a fresh instance (the cancelled one was thrown away, never reused).
        let started = Instant::now();
        let ok = s.tool_ok("hostile_ok", json!({}));
        assert!(
            started.elapsed() < Duration::from_millis(2000),
            "the next call waited {:?}",
            started.elapsed()
        );
        assert_eq!(
            ok["calls"], 1,
            "round {round}: a fresh instance answers: {ok}"
        );
        // And it is kept warm again.
        let again = s.tool_ok("hostile_ok", json!({}));
        assert_eq!(again["calls"], 2, "{again}");
    }
    // A sleep shorter than the timeout answers as before.
    let v = s.tool_ok("hostile_sleep", json!({"ms": 50}));
    assert_eq!(v["slept_ms"], 50, "{v}");
    assert_eq!(s.app("hostile")["reachable"], true);
}

#[test]
fn cpu_ms_counts_guest_code_not_time_blocked_in_host_calls() {
    let s = server();
    s.install(
        "hostile",
        "hostile",
        json!({"limits": {"cpu_ms": 200, "timeout_ms": 10_000}}),
    );
    // A sleep five times longer than cpu_ms: the guest runs no code meanwhile.
    let v = s.tool_ok("hostile_sleep", json!({"ms": 1000}));
    assert_eq!(v["slept_ms"], 1000, "{v}");
    // Spinning uses it up.
    let started = Instant::now();
    let e = s.tool_err("hostile_spin", json!({}));
    assert!(e.contains("ran out of its CPU time (200 ms)"), "{e}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn a_call_whose_caller_goes_away_still_finishes() {
    use std::io::Write;
    let s = server();
    s.install(
        "hostile",
        "hostile",
        json!({"limits": {"max_instances": 1}}),
    );
    let before = s.tool_ok("hostile_ok", json!({}))["calls"]
        .as_u64()
        .unwrap();
    // A client asks for a sleep, then hangs up.
    let body = json!({"tool": "hostile_sleep", "arguments": {"ms": 800}}).to_string();
    let mut c = std::net::TcpStream::connect(s.url.trim_start_matches("http://")).unwrap();
    write!(
        c,
        "POST /datanotes/apps/call/ HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        s.token,
        body.len()
    )
    .unwrap();
    eventually_ok("the sleep runs in the only instance", || in_calls(&s, 1));
    drop(c);
    // The call goes on (only its timeout cancels it): the next call waits for the only instance,
    // and gets it back after the sleep, warm.
    let started = Instant::now();
    let after = s.tool_ok("hostile_ok", json!({}))["calls"]
        .as_u64()
        .unwrap();
    assert_eq!(after, before + 2, "the sleep was cut short");
    assert!(
        started.elapsed() >= Duration::from_millis(300),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn a_component_for_another_world_is_refused_at_install() {
    let s = server();
    let files = snapshot(&s.dir);
    let (st, v) = s.post(
        "/datanotes/apps/create/",
        Some(&s.token),
        &json!({"name": "mismatch", "wasm_path": component("mismatch")}),
    );
    assert_eq!(st, 400, "{v}");
    let e = &v["error"];
    assert_error_shape(e);
    assert_eq!(e["code"], "invalid_argument", "{e}");
    assert_eq!(e["column"], "wasm", "{e}");
    assert_eq!(e["rule"], "world", "{e}");
    let msg = e["message"].as_str().unwrap();
    assert!(
        msg.contains("datanotes:app/tools@0.1.0")
            && msg.contains("call-tool is func(name: string, arguments: string) -> string")
            && msg.contains("the world wants func(name: string, arguments: string, ctx: record"),
        "the error names what differs: {msg}"
    );
    assert!(
        e["hint"]
            .as_str()
            .unwrap()
            .contains("datanotes:app/app@0.1.0"),
        "{e}"
    );
    // Nothing is left of it: no app, no stored component.
    let (_, apps) = s.post("/datanotes/apps/", Some(&s.token), &json!({}));
    assert_eq!(apps["apps"], json!([]), "{apps}");
    assert_eq!(
        std::fs::read_dir(s.dir.join(".datanotes/apps"))
            .unwrap()
            .count(),
        0
    );
    assert!(snapshot(&s.dir) == files);

    // Not a component at all.
    let (st, v) = s.post(
        "/datanotes/apps/create/",
        Some(&s.token),
        &json!({"name": "garbage", "wasm_base64": "AGFzbQEAAAA="}),
    );
    assert_eq!(st, 400, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("component"),
        "{v}"
    );

    // The server goes on: a good app installs and answers.
    s.install("hostile", "hostile", json!({}));
    s.tool_ok("hostile_ok", json!({}));
}

#[test]
fn limits_are_checked() {
    let s = server();
    for (limits, rule) in [
        (json!({"memory_mb": 0}), "min"),
        (json!({"max_result_bytes": 0}), "min"),
        (json!({"memory_mb": 17_592_186_044_416u64}), "max"),
        (json!({"max_instances": 100_000}), "max"),
        (json!({"memory": 64}), "pattern"),
    ] {
        let (st, v) = s.post(
            "/datanotes/apps/create/",
            Some(&s.token),
            &json!({"name": "hostile", "wasm_path": component("hostile"), "limits": limits}),
        );
        assert_eq!(st, 400, "{limits}: {v}");
        assert_eq!(v["error"]["column"], "limits", "{limits}: {v}");
        if rule != "pattern" {
            assert_eq!(v["error"]["rule"], rule, "{limits}: {v}");
        }
    }
    let (_, apps) = s.post("/datanotes/apps/", Some(&s.token), &json!({}));
    assert_eq!(apps["apps"], json!([]));
    let v = s.install(
        "hostile",
        "hostile",
        json!({"limits": {"memory_mb": 4096, "max_instances": 1}}),
    );
    assert_eq!(v["app"]["wasm"]["limits"]["memory_mb"], 4096);
    s.tool_ok("hostile_ok", json!({}));
}

#[test]
fn an_install_whose_tools_never_come_times_out() {
    let s = server();
    let started = Instant::now();
    let (st, v) = s.post(
        "/datanotes/apps/create/",
        Some(&s.token),
        &json!({"name": "sleepy", "wasm_path": component("sleepy"), "limits": {"timeout_ms": 1000}}),
    );
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "install took {:?}",
        started.elapsed()
    );
    assert_eq!(st, 400, "{v}");
    assert_eq!(v["error"]["rule"], "list_tools", "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("timed out listing tools (1000 ms)"),
        "{v}"
    );
    let (_, apps) = s.post("/datanotes/apps/", Some(&s.token), &json!({}));
    assert_eq!(apps["apps"], json!([]));
    assert_eq!(
        std::fs::read_dir(s.dir.join(".datanotes/apps"))
            .unwrap()
            .count(),
        0
    );
}
