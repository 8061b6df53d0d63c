//! `wasm`: WASM apps installed, called through `/apps/call/` and inside the engine.

use super::*;

/// The example apps measured, one per language: name, component, write scope, a trivial call
/// (arguments the guest refuses at once: no engine call) and a read (one or two engine calls).
pub(crate) const WASM_APPS: &[(&str, &str, &str, &str, &str, &str, &str)] = &[
    // (lang, app, component, write, trivial tool, read tool, read arguments); `WASM_SEED` adds a
    // row first, which makes the app's table.
    (
        "rust",
        "planning",
        "planning",
        "personal.tasks.*",
        "planning_complete_task",
        "planning_list_tasks",
        "{}",
    ),
    (
        "python",
        "journal",
        "journal",
        "personal.notes.daily",
        "journal_search",
        "journal_read",
        r#"{"date": "2026-11-30"}"#,
    ),
    (
        "js",
        "bookmarks",
        "bookmarks",
        "personal.notes.bookmarks",
        "bookmarks_by_tag",
        "bookmarks_tags",
        "{}",
    ),
];

/// One write per example app, before the reads.
pub(crate) const WASM_SEED: &[(&str, &str)] = &[
    ("planning_add_task", r#"{"title": "Measure the WASM apps"}"#),
    (
        "journal_append",
        r#"{"text": "Benchmarked the apps", "date": "2026-11-30"}"#,
    ),
    (
        "bookmarks_add",
        r#"{"url": "https://example.com/bench", "title": "Bench", "tags": ["bench"]}"#,
    ),
];

/// WASM apps: install (compile), trivial and read calls through `/apps/call/` for the Rust,
/// Python and JS example apps (interleaved), a call on a fresh instance after a trap, start from
/// the compile cache and memory per idle app, then the same calls inside the engine (the
/// aggregator in this process, no HTTP).
pub(crate) fn section_wasm(b: &mut Bench) -> Vec<Figure> {
    const S: &str = "wasm";
    let components: Vec<&str> = WASM_APPS.iter().map(|a| a.2).chain(["hostile"]).collect();
    let Some(plugins) = built_plugins(&components) else {
        return vec![];
    };
    let (calls, copies) = (b.opts.app_calls * 4, b.opts.wasm_copies);
    let mut out = vec![];
    let s = b.server();
    for (lang, app, file, write, ..) in WASM_APPS {
        let t0 = Instant::now();
        s.call(
            "apps/create",
            json!({"name": app, "write": [write], "ddl": true,
                   "wasm_path": plugins.join(format!("{file}.wasm"))}),
        );
        let dt = t0.elapsed().as_secs_f64();
        progress(format!(
            "install {app} ({lang}): {dt:.2} s (validate, compile, list)"
        ));
        out.push(Figure::new(S, format!("install_{lang}_s"), dt, "s"));
    }
    s.call(
        "apps/create",
        json!({"name": "hostile", "wasm_path": plugins.join("hostile.wasm")}),
    );
    let base_apps = WASM_APPS.len() + 1;
    wait_reachable(s, base_apps);

    let args_of = |t: &str| serde_json::from_str::<Value>(t).expect("arguments");
    let client = AsyncClient::new(s);
    for (tool, args) in WASM_SEED {
        let (_, v) = client.app_call(tool, &args_of(args));
        assert_eq!(v["ok"], true, "{tool}: {v}");
    }
    // Warm calls, interleaved across the languages.
    let mut trivial = vec![vec![]; WASM_APPS.len()];
    let mut read = vec![vec![]; WASM_APPS.len()];
    for i in 0..20 + calls {
        for (k, (_, _, _, _, tool, rtool, rargs)) in WASM_APPS.iter().enumerate() {
            let (dt, v) = client.app_call(tool, &json!({}));
            assert!(v["servedBy"] != "engine", "{tool}: {v}");
            assert_eq!(v["ok"], false, "{tool} refuses empty arguments: {v}");
            let (dr, v) = client.app_call(rtool, &args_of(rargs));
            assert_eq!(v["ok"], true, "{rtool}: {v}");
            if i >= 20 {
                trivial[k].push(dt);
                read[k].push(dr);
            }
        }
    }
    for (k, (lang, ..)) in WASM_APPS.iter().enumerate() {
        let (t, r) = (Latency::of(&trivial[k]), Latency::of(&read[k]));
        progress(format!(
            "{lang}: trivial call via /apps/call/ p50 {:.3} ms, p99 {:.3} ms; read p50 {:.3} ms, p99 {:.3} ms",
            t.p50, t.p99, r.p50, r.p99
        ));
        let mut tf = t.figures(S, &format!("call_{lang}"), None);
        if *lang == "rust" {
            tf[0].target = Some(Target::AtMost(0.150));
        }
        out.extend(tf.into_iter().take(2));
        out.extend(
            r.figures(S, &format!("read_{lang}"), None)
                .into_iter()
                .take(2),
        );
    }

    // A fresh instance after a trap (the Rust test component: the example apps never trap).
    let mut fresh = vec![];
    for i in 0..5 + calls / 4 {
        let (_, v) = client.app_call("hostile_trap", &json!({}));
        assert_eq!(v["ok"], false, "hostile_trap: {v}");
        let (dt, v) = client.app_call("hostile_ok", &json!({}));
        assert_eq!(v["ok"], true, "hostile_ok: {v}");
        if i >= 5 {
            fresh.push(dt);
        }
    }
    let fresh = Latency::of(&fresh);
    progress(format!(
        "rust, after a trap (fresh instance): p50 {:.3} ms, p99 {:.3} ms",
        fresh.p50, fresh.p99
    ));
    out.extend(
        fresh
            .figures(S, "after_trap_rust", None)
            .into_iter()
            .take(2),
    );

    // Start from the cache: `copies` more apps (copies of the Rust example: their tools collide
    // and are skipped, but each is an app the server loads, instantiates and lists), then the
    // time from the server's spawn until every app is reachable. The cost per app is measured
    // inside the engine (`wasm_in_engine`), where it is not lost in the noise of a restart.
    let s = b.server();
    for i in 0..copies {
        s.call(
            "apps/create",
            json!({"name": format!("copy{i:02}"), "write": ["personal.tasks.*"],
                   "wasm_path": plugins.join("planning.wasm")}),
        );
    }
    let s = b.restart();
    let t0 = Instant::now();
    wait_reachable(s, base_apps + copies);
    let ready = s.started_in + t0.elapsed();
    std::thread::sleep(Duration::from_millis(200));
    let idle_rss = rss_mib(s);
    progress(format!(
        "restart with {} apps: all reachable after {:.1} ms, server RSS {idle_rss:.1} MiB",
        base_apps + copies,
        ready.as_secs_f64() * 1e3,
    ));
    out.extend([
        Figure::new(S, "start_apps", (base_apps + copies) as f64, "apps"),
        Figure::new(S, "start_ready_ms", ready.as_secs_f64() * 1e3, "ms"),
        Figure::new(S, "start_rss_mib", idle_rss, "MiB"),
    ]);

    // Inside the engine: this process opens the database and calls through the aggregator.
    b.stop();
    out.extend(wasm_in_engine(&b.dir, calls));
    let s = b.server();
    for i in 0..copies {
        s.call("apps/delete", json!({"name": format!("copy{i:02}")}));
    }
    b.stop();
    out.extend(at_rest(b, &plugins));
    out
}

/// Apps at rest (issue 15), on a database of their own: five copies of the Python example
/// installed, then after a restart (the server's RSS); the memory an app holds once its idle
/// instance is dropped, and its first call after that, for each language.
fn at_rest(b: &Bench, plugins: &Path) -> Vec<Figure> {
    const S: &str = "wasm";
    // Instances are dropped after this much idle time (the apps' `idle_ms`).
    const IDLE_MS: u64 = 100;
    let evicted = || std::thread::sleep(Duration::from_millis(IDLE_MS + 300));
    let mut out = vec![];
    let tmp = tempfile::tempdir().expect("a database folder");
    let s = Server::start(&b.bin, tmp.path());
    let empty = rss_mib(&s);
    for i in 0..5 {
        s.call(
            "apps/create",
            json!({"name": format!("py{i}"), "write": ["personal.notes.daily"], "ddl": true,
                   "wasm_path": plugins.join("journal.wasm"), "limits": {"idle_ms": IDLE_MS}}),
        );
    }
    evicted();
    let installed = rss_mib(&s);
    s.stop();
    let s = Server::start(&b.bin, tmp.path());
    wait_reachable(&s, 5);
    std::thread::sleep(Duration::from_millis(300));
    let restarted = rss_mib(&s);
    progress(format!(
        "five idle Python apps: server RSS {empty:.1} MiB empty, {installed:.1} MiB after installing them, {restarted:.1} MiB after a restart"
    ));
    out.extend([
        Figure::new(S, "python5_installed_rss_mib", installed, "MiB").target(Target::AtMost(150.0)),
        Figure::new(S, "python5_restart_rss_mib", restarted, "MiB").target(Target::AtMost(45.0)),
    ]);
    // The other languages (`py0` serves the Python tools; the other copies' are skipped), and
    // the Rust test component, called first: what any first call costs the process once (the
    // guests' threads, wasmtime's first instance) is not counted against one app.
    for (app, file, write) in [
        ("planning", "planning", "personal.tasks.*"),
        ("bookmarks", "bookmarks", "personal.notes.bookmarks"),
        ("hostile", "hostile", ""),
    ] {
        let mut body = json!({"name": app, "limits": {"idle_ms": IDLE_MS},
                              "wasm_path": plugins.join(format!("{file}.wasm"))});
        if !write.is_empty() {
            body["write"] = json!([write]);
            body["ddl"] = json!(true);
        }
        s.call("apps/create", body);
    }
    wait_reachable(&s, 8);
    let client = AsyncClient::new(&s);
    let (_, v) = client.app_call("hostile_ok", &json!({}));
    assert_eq!(v["ok"], true, "hostile_ok: {v}");
    evicted();
    for (lang, app, _, _, tool, ..) in WASM_APPS {
        let app = if *lang == "python" { "py0" } else { app };
        let before = rss_mib(&s);
        let (_, v) = client.app_call(tool, &json!({}));
        assert!(v["servedBy"] == app, "{tool}: {v}");
        evicted();
        let rt = s.call("apps/get", json!({"name": app}))["app"]["runtime"].clone();
        assert_eq!(rt["instances"], 0, "{app} still has an instance: {rt}");
        let grew = rss_mib(&s) - before;
        progress(format!(
            "{lang}: an idle app holds {grew:.2} MiB after its instance is dropped"
        ));
        out.push(
            Figure::new(S, format!("idle_after_eviction_{lang}_mib"), grew, "MiB")
                .target(Target::AtMost(2.0)),
        );
    }
    let rounds = if b.opts.quick { 8 } else { 20 };
    for (lang, app, _, _, tool, ..) in WASM_APPS {
        let app = if *lang == "python" { "py0" } else { app };
        let (mut first, mut made) = (vec![], vec![]);
        for _ in 0..rounds {
            evicted();
            let (dt, v) = client.app_call(tool, &json!({}));
            assert!(v["servedBy"] != "engine", "{tool}: {v}");
            first.push(dt);
            // The server's own time for the fresh instance (part of that call).
            let rt = s.call("apps/get", json!({"name": app}))["app"]["runtime"].clone();
            let us = rt["instantiateUs"].as_f64();
            let us = us.unwrap_or_else(|| panic!("{app}: no instantiateUs: {rt}"));
            made.push(Duration::from_secs_f64(us / 1e6));
        }
        let f = Latency::of(&first);
        let m = Latency::of(&made);
        progress(format!(
            "{lang}: first call after eviction via /apps/call/ p50 {:.3} ms, max {:.3} ms (making its instance: p50 {:.3} ms)",
            f.p50, f.max, m.p50
        ));
        out.push(Figure::new(
            S,
            format!("instantiate_after_eviction_{lang}_ms"),
            m.p50,
            "ms",
        ));
        let most = if *lang == "rust" { 0.5 } else { 3.0 };
        out.push(
            Figure::new(
                S,
                format!("first_call_after_eviction_{lang}_ms"),
                f.p50,
                "ms",
            )
            .target(Target::AtMost(most)),
        );
        out.push(Figure::new(
            S,
            format!("first_call_after_eviction_{lang}_max_ms"),
            f.max,
            "ms",
        ));
    }
    // The same pause with the instance kept warm (Rust): what waking an idle server costs a
    // call, whatever the instance.
    s.call(
        "apps/update",
        json!({"name": "planning", "limits": {"idle_ms": 600_000}}),
    );
    let tool = WASM_APPS[0].4;
    client.app_call(tool, &json!({}));
    let mut paused = vec![];
    for _ in 0..rounds {
        evicted();
        paused.push(client.app_call(tool, &json!({})).0);
    }
    let p = Latency::of(&paused);
    progress(format!(
        "rust: a call after the same pause, instance kept warm: p50 {:.3} ms, max {:.3} ms",
        p.p50, p.max
    ));
    out.push(Figure::new(S, "call_after_pause_rust_ms", p.p50, "ms"));
    // The floor of any request after the same pause: `GET /datanotes/health`, which touches
    // no app. A first call after eviction cannot cost less than this on the same machine.
    let mut empty = vec![];
    for _ in 0..rounds {
        evicted();
        empty.push(client.health());
    }
    let e = Latency::of(&empty);
    progress(format!(
        "an empty request (health) after the same pause: p50 {:.3} ms, max {:.3} ms",
        e.p50, e.max
    ));
    out.push(Figure::new(S, "health_after_pause_ms", e.p50, "ms"));
    out.extend(shared_copies(&s, &client, plugins, IDLE_MS));
    drop(client);
    s.stop();
    out
}

/// Apps installed from one file share its loaded component: five copies of the typed Python
/// component `units` (their tools are named for each app, so each can be called), each called
/// once and left idle; the server's growth for the first and for each further copy.
fn shared_copies(s: &Server, client: &AsyncClient, plugins: &Path, idle_ms: u64) -> Vec<Figure> {
    const S: &str = "wasm";
    let file = plugins.join("units.wasm");
    if !file.is_file() {
        skip("wasm (the shared copies): no units.wasm (run scripts/build-plugins)");
        return vec![];
    }
    for i in 0..5 {
        s.call(
            "apps/create",
            json!({"name": format!("units{i}"), "wasm_path": file, "limits": {"idle_ms": idle_ms}}),
        );
    }
    std::thread::sleep(Duration::from_millis(idle_ms + 300));
    let mut grew = vec![];
    for i in 0..5 {
        let before = rss_mib(s);
        let (_, v) = client.app_call(&format!("units{i}_parse_number"), &json!({"text": "12"}));
        assert_eq!(v["ok"], true, "units{i}_parse_number: {v}");
        std::thread::sleep(Duration::from_millis(idle_ms + 300));
        grew.push(rss_mib(s) - before);
    }
    let more = grew[1..].iter().sum::<f64>() / 4.0;
    progress(format!(
        "five apps of one Python component, each called once then idle: the first holds {:.2} MiB, each further one {more:.2} MiB",
        grew[0]
    ));
    vec![
        Figure::new(
            S,
            "idle_after_eviction_python_first_copy_mib",
            grew[0],
            "MiB",
        ),
        Figure::new(S, "idle_after_eviction_python_next_copy_mib", more, "MiB"),
    ]
}

/// The WASM calls again, inside the engine: the aggregator's `call` in this process, no HTTP.
pub(crate) fn wasm_in_engine(dir: &Path, calls: usize) -> Vec<Figure> {
    use datanotes::apps::{Registry, aggregator::Aggregator, wasm::WasmRuntime};
    const S: &str = "wasm";
    let rt = runtime();
    let engine = datanotes::engine::Engine::open(dir).expect("open the bench database");
    let registry = Registry::open(&engine.meta_dir).expect("open the apps registry");
    // The WASM host keeps a handle on the runtime it is made in (engine calls run there).
    let _in_rt = rt.enter();
    let wasm = WasmRuntime::new(engine.clone()).expect("wasm runtime");
    let agg = Aggregator::new(engine.clone(), registry.clone(), wasm);
    let ctx = || datanotes::ops::Ctx::owner("bench");
    // On a worker thread of the runtime, as a request handler runs (from `block_on`'s thread,
    // every call would also pay a wake-up of the worker that runs it).
    let task = {
        let (agg, registry) = (agg.clone(), registry.clone());
        rt.spawn(async move {
        let mut out = vec![];
        // Start from the cache: each app's first refresh lists its tools, as the server does for
        // every app when it starts. The listings the cache keeps are per binary (the server's
        // are not this one's): here each app is loaded from its compiled code and lists its
        // tools from an instance. (What an app holds at rest is measured on the server, in
        // `at_rest`: this process's RSS says nothing about it.)
        let mut starts = vec![];
        for rec in registry.list() {
            let t0 = Instant::now();
            agg.refresh(&rec.name).await.expect("refresh");
            starts.push(t0.elapsed());
        }
        let st = Latency::of(&starts);
        progress(format!(
            "start from the cache, inside the engine, {} apps: p50 {:.2} ms, max {:.2} ms per app",
            starts.len(),
            st.p50,
            st.max
        ));
        out.push(Figure::new(S, "start_per_app_p50_ms", st.p50, "ms").target(Target::AtMost(5.0)));
        out.push(Figure::new(S, "start_per_app_max_ms", st.max, "ms"));
        let mut trivial = vec![vec![]; WASM_APPS.len()];
        for i in 0..50 + calls * 4 {
            for (k, (_, _, _, _, tool, ..)) in WASM_APPS.iter().enumerate() {
                let t0 = Instant::now();
                let r = agg.call(tool, json!({}), ctx()).await;
                let dt = t0.elapsed();
                assert!(!r.ok && r.served_by != "engine", "{tool}: {}", r.value);
                if i >= 50 {
                    trivial[k].push(dt);
                }
            }
        }
        for (k, (lang, ..)) in WASM_APPS.iter().enumerate() {
            let t = Latency::of(&trivial[k]);
            progress(format!(
                "{lang}: trivial call inside the engine p50 {:.1} µs, p99 {:.1} µs",
                t.p50 * 1e3,
                t.p99 * 1e3
            ));
            let mut tf = t.figures(S, &format!("engine_call_{lang}"), None);
            if *lang == "rust" {
                tf[0].target = Some(Target::AtMost(0.020));
            }
            out.extend(tf.into_iter().take(2));
        }
        let mut fresh = vec![];
        for i in 0..5 + calls {
            let r = agg.call("hostile_trap", json!({}), ctx()).await;
            assert!(!r.ok, "hostile_trap: {}", r.value);
            let t0 = Instant::now();
            let r = agg.call("hostile_ok", json!({}), ctx()).await;
            let dt = t0.elapsed();
            assert!(r.ok, "hostile_ok: {}", r.value);
            if i >= 5 {
                fresh.push(dt);
            }
        }
        let f = Latency::of(&fresh);
        progress(format!(
            "rust, after a trap, inside the engine: p50 {:.1} µs, p99 {:.1} µs",
            f.p50 * 1e3,
            f.p99 * 1e3
        ));
        out.extend(
            f.figures(S, "engine_after_trap_rust", None)
                .into_iter()
                .take(2),
        );
        out
        })
    };
    let out = rt.block_on(task).expect("the in-engine calls");
    drop(agg);
    engine.shutdown();
    out
}

/// The folder of the built example components, when every one of `components` is there;
/// otherwise says which are missing and answers `None` (the section is skipped).
pub(crate) fn built_plugins(components: &[&str]) -> Option<PathBuf> {
    let plugins = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/plugins");
    let missing: Vec<&str> = components
        .iter()
        .copied()
        .filter(|c| !plugins.join(format!("{c}.wasm")).is_file())
        .collect();
    if missing.is_empty() {
        return Some(plugins);
    }
    skip(format!(
        "no {} in {} (run scripts/build-plugins)",
        missing.join(", "),
        plugins.display()
    ));
    None
}
