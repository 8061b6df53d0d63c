//! Outgoing HTTP only to the hosts the owner allows; memory bounds; spinning guests; limits
//! changed without the component.

use super::*;

/// A tiny HTTP/1.1 server on 127.0.0.1, in this process: answers `GET <path>` with
/// `hello <path>` (after `ms` milliseconds for `/slow?ms=<ms>`); counts the requests it got. It
/// speaks no TLS: to a TLS client hello it answers plain text at once.
struct Web {
    port: u16,
    hits: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl Web {
    fn start() -> Web {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let hits = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = hits.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut c) = conn else { continue };
                let counter = counter.clone();
                std::thread::spawn(move || {
                    let mut head = vec![];
                    let mut buf = [0u8; 1024];
                    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                        match c.read(&mut buf) {
                            Ok(0) | Err(_) => return,
                            Ok(n) => head.extend_from_slice(&buf[..n]),
                        }
                        // A TLS handshake record.
                        if head[0] == 0x16 {
                            let _ = c.write_all(b"HTTP/1.1 400 Bad Request\r\n\r\nno TLS here");
                            return;
                        }
                    }
                    counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    let head = String::from_utf8_lossy(&head).into_owned();
                    let path = head.split_whitespace().nth(1).unwrap_or("/").to_string();
                    if let Some(ms) = path.strip_prefix("/slow?ms=") {
                        // A slow peer: its delay is what the test asks of it.
                        std::thread::sleep(Duration::from_millis(ms.parse().unwrap()));
                    }
                    let body = format!("hello {path}");
                    let _ = write!(
                        c,
                        "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    );
                });
            }
        });
        Web { port, hits }
    }

    fn hits(&self) -> usize {
        self.hits.load(std::sync::atomic::Ordering::SeqCst)
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }
}

impl Server {
    /// Fetches `url` with the fetcher app: `Ok(body)` or `Err(error text)`.
    fn fetch(&self, url: &str) -> Result<String, String> {
        let v = self.tool("fetcher_get", json!({"url": url}));
        if v["ok"] == true {
            let r = &v["value"]["structuredContent"];
            assert_eq!(r["status"], 200, "{v}");
            Ok(r["body"].as_str().unwrap().to_string())
        } else {
            Err(v["value"]["content"][0]["text"]
                .as_str()
                .unwrap_or_default()
                .to_string())
        }
    }

    /// An owner update of the fetcher app; answers status and body.
    fn update_fetcher(&self, fields: Value) -> (u16, Value) {
        let mut body = json!({"name": "fetcher"});
        for (k, v) in fields.as_object().unwrap() {
            body[k] = v.clone();
        }
        self.post("/datanotes/apps/update/", Some(&self.token), &body)
    }
}

fn assert_denied(s: &Server, url: &str) {
    let e = s.fetch(url).expect_err("the request should be denied");
    assert!(
        e.contains(&format!("fetching {url} failed")) && e.contains("HttpRequestDenied"),
        "{e}"
    );
}

#[test]
fn outgoing_http_goes_only_to_the_hosts_the_owner_allows() {
    let s = server();
    let web = Web::start();
    let other = Web::start();
    let v = s.install(
        "fetcher",
        "fetcher",
        json!({"limits": {"timeout_ms": 2000}}),
    );
    assert_eq!(v["app"]["wasm"]["allow_hosts"], json!([]), "{v}");
    let app_token = v["token"].as_str().unwrap().to_string();

    // Without allow_hosts, no network at all: the request never leaves.
    assert_denied(&s, &web.url("/a"));
    assert_eq!(web.hits(), 0);

    // The owner allows one host:port: the app gets its answer.
    let allowed = format!("127.0.0.1:{}", web.port);
    let (st, v) = s.update_fetcher(json!({"allow_hosts": [allowed]}));
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["app"]["wasm"]["allow_hosts"], json!([allowed]), "{v}");
    assert_eq!(s.fetch(&web.url("/a")).unwrap(), "hello /a");
    assert_eq!(web.hits(), 1);
    // Another port of the same address, another name for it: denied, nothing sent.
    assert_denied(&s, &other.url("/b"));
    assert_denied(&s, &format!("http://localhost:{}/b", web.port));
    assert_eq!((web.hits(), other.hits()), (1, 0));
    // Kept in the registry file, and in effect after a restart.
    let apps: Value =
        serde_json::from_slice(&std::fs::read(s.dir.join(".datanotes/apps.json")).unwrap())
            .unwrap();
    assert_eq!(apps[0]["wasm"]["allow_hosts"], json!([allowed]), "{apps}");
    let s = s.restart();
    eventually("fetcher is listed after the restart", || {
        s.app("fetcher")["tools"]
            .as_array()
            .is_some_and(|t| !t.is_empty())
    });
    assert_eq!(s.fetch(&web.url("/again")).unwrap(), "hello /again");

    // A request slower than the call's timeout is cut at the call's deadline (the request's
    // own timeouts are bounded by it; the call is cancelled then), and the app goes on at once.
    let started = Instant::now();
    let e = s.fetch(&web.url("/slow?ms=20000")).unwrap_err();
    assert!(
        e.contains("timed out calling fetcher_get (2000 ms)")
            || e.contains("ConnectionReadTimeout"),
        "{e}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(6),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(s.fetch(&web.url("/after")).unwrap(), "hello /after");
    // https goes through rustls (whose crypto provider the engine installs: without one the
    // request task panicked): a server that speaks no TLS is a TLS error, and the app goes on.
    let e = s
        .fetch(&format!("https://127.0.0.1:{}/tls", web.port))
        .unwrap_err();
    assert!(e.contains("Tls"), "{e}");
    assert_eq!(s.fetch(&web.url("/after-tls")).unwrap(), "hello /after-tls");

    // The app may not grant itself a host.
    let snapshot_apps = std::fs::read(s.dir.join(".datanotes/apps.json")).unwrap();
    let (st, v) = s.post(
        "/datanotes/apps/update/",
        Some(&app_token),
        &json!({"name": "fetcher", "allow_hosts": ["example.org", allowed]}),
    );
    assert_eq!(st, 403, "{v}");
    assert_eq!(v["error"]["column"], "allow_hosts", "{v}");
    assert_eq!(v["error"]["rule"], "owner", "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("may not change its own allow_hosts"),
        "{v}"
    );
    // Bad values: refused with what is wrong and how to write it; nothing changes.
    for (bad, why) in [
        (json!(["http://127.0.0.1:80"]), "scheme"),
        (json!(["127.0.0.1:80/api"]), "path"),
        (json!(["*"]), "every host"),
        (json!(["a.*.example.org"]), "leading *."),
        (json!(["127.0.0.1:0"]), "port"),
        (json!(["::1"]), "brackets"),
        (json!([""]), "empty"),
        (json!([8080]), "not a string"),
        (json!("127.0.0.1"), "array"),
    ] {
        let (st, v) = s.update_fetcher(json!({"allow_hosts": bad}));
        assert_eq!(st, 400, "{bad}: {v}");
        assert_error_shape(&v["error"]);
        assert_eq!(v["error"]["column"], "allow_hosts", "{bad}: {v}");
        let msg = v["error"]["message"].as_str().unwrap();
        assert!(msg.contains(why), "{bad}: {msg}");
        assert!(
            v["error"]["hint"].as_str().unwrap().contains("host:port"),
            "{bad}: {v}"
        );
    }
    assert_eq!(
        std::fs::read(s.dir.join(".datanotes/apps.json")).unwrap(),
        snapshot_apps,
        "a refused update changed the registry"
    );
    assert_eq!(s.fetch(&web.url("/still")).unwrap(), "hello /still");

    // A bad value at create: refused before the component is stored.
    let stored = std::fs::read_dir(s.dir.join(".datanotes/apps"))
        .unwrap()
        .count();
    let (st, v) = s.post(
        "/datanotes/apps/create/",
        Some(&s.token),
        &json!({"name": "fetcher2", "wasm_path": component("fetcher"), "allow_hosts": ["https://example.org/"]}),
    );
    assert_eq!(st, 400, "{v}");
    assert_eq!(v["error"]["column"], "allow_hosts", "{v}");
    assert_eq!(
        std::fs::read_dir(s.dir.join(".datanotes/apps"))
            .unwrap()
            .count(),
        stored
    );
    assert_eq!(
        s.post(
            "/datanotes/apps/get/",
            Some(&s.token),
            &json!({"name": "fetcher2"})
        )
        .0,
        404
    );
    // Only WASM apps take allow_hosts.
    let (st, v) = s.post(
        "/datanotes/apps/create/",
        Some(&s.token),
        &json!({"name": "client", "allow_hosts": [allowed]}),
    );
    assert_eq!(st, 400, "{v}");
    assert_eq!(v["error"]["column"], "allow_hosts", "{v}");

    // A new component keeps the grant.
    let (st, v) = s.update_fetcher(json!({"wasm_path": component("fetcher")}));
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["app"]["wasm"]["allow_hosts"], json!([allowed]), "{v}");
    // The owner takes it away: denied again at once.
    let hits = web.hits();
    let (st, v) = s.update_fetcher(json!({"allow_hosts": []}));
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["app"]["wasm"]["allow_hosts"], json!([]), "{v}");
    assert_denied(&s, &web.url("/gone"));
    assert_eq!(web.hits(), hits);

    // Granted at create, with a wildcard entry too.
    let (st, v) = s.post(
        "/datanotes/apps/delete/",
        Some(&s.token),
        &json!({"name": "fetcher"}),
    );
    assert_eq!(st, 200, "{v}");
    let v = s.install(
        "fetcher",
        "fetcher",
        json!({"allow_hosts": ["*.example.invalid", format!("127.0.0.1:{}", other.port)]}),
    );
    assert_eq!(
        v["app"]["wasm"]["allow_hosts"],
        json!(["*.example.invalid", format!("127.0.0.1:{}", other.port)])
    );
    assert_eq!(s.fetch(&other.url("/new")).unwrap(), "hello /new");
    assert_denied(&s, &web.url("/old"));
    assert_eq!((web.hits(), other.hits()), (hits, 1));
}

#[test]
fn memory_mb_bounds_every_memory_and_table_of_an_instance() {
    let s = server();
    // greedy (WebAssembly text) has four memories and a table. Per memory, 32 MiB would let it
    // take 96 MiB in its three extra memories, and its table is unbounded: memory_mb counts them
    // all together.
    s.install(
        "greedy",
        "greedy",
        json!({"limits": {"memory_mb": 32, "max_instances": 1, "cpu_ms": 5000}}),
    );
    assert_eq!(s.tool_ok("greedy_ok", json!({}))["ok"], true);
    let (rss0, hwm0) = (s.mib("VmRSS"), s.mib("VmHWM"));
    for tool in ["greedy_memories", "greedy_table"] {
        let e = s.tool_err(tool, json!({}));
        assert!(
            e.contains("the call hit the memory limit (32 MiB)") && e.contains("memory_mb"),
            "{tool}: {e}"
        );
        assert!(!e.contains("::") && !e.contains("wasmtime"), "{e}");
        // The app goes on, on a fresh instance.
        assert_eq!(s.tool_ok("greedy_ok", json!({}))["ok"], true);
    }
    let (rss1, hwm1) = (s.mib("VmRSS"), s.mib("VmHWM"));
    eprintln!("greedy: VmRSS {rss0} -> {rss1} MiB, VmHWM {hwm0} -> {hwm1} MiB");
    assert!(
        hwm1 < hwm0 + 32 + 24,
        "the peak grew from {hwm0} to {hwm1} MiB"
    );
    // What the trapped instances held is released.
    assert!(rss1 < rss0 + 16, "VmRSS {rss0} -> {rss1} MiB");

    // 99 memories, or a table of 16M elements (128 MiB), are refused at install.
    for (name, want) in [
        (
            "manymem",
            "the app needs 99 linear memories, more than the 4 an app may have",
        ),
        ("bigtable", "the call hit the memory limit (4 MiB)"),
    ] {
        let (st, v) = s.post(
            "/datanotes/apps/create/",
            Some(&s.token),
            &json!({"name": name, "wasm_path": component(name), "limits": {"memory_mb": 4}}),
        );
        assert_eq!(st, 400, "{v}");
        assert_eq!(v["error"]["rule"], "limits", "{v}");
        let msg = v["error"]["message"].as_str().unwrap();
        assert!(msg.contains(want), "{name}: {v}");
    }
    let hwm2 = s.mib("VmHWM");
    assert!(
        hwm2 < hwm1 + 16,
        "the refused installs took {hwm1} -> {hwm2} MiB"
    );
}

#[test]
fn spinning_guests_do_not_hold_up_the_server() {
    let s = server();
    create_tasks(&s);
    s.install(
        "hostile",
        "hostile",
        json!({"limits": {"cpu_ms": 4000, "max_instances": 8}}),
    );
    s.tool_ok("hostile_ok", json!({}));
    std::thread::scope(|scope| {
        let spinning: Vec<_> = (0..8)
            .map(|_| scope.spawn(|| s.tool_err("hostile_spin", json!({}))))
            .collect();
        eventually_ok("the 8 guests spin", || in_calls(&s, 8));
        let mut health = vec![];
        let mut writes = vec![];
        // Samples 50 ms apart, spread over a second of spinning: a pace, not a wait for a state.
        for i in 0..20 {
            let t = Instant::now();
            let (st, _) = s.get("/datanotes/health");
            assert_eq!(st, 200);
            health.push(t.elapsed());
            let t = Instant::now();
            s.ok(
                "insert_row",
                json!({"table": TASKS, "values": {"title": format!("while guests spin {i}")}}),
            );
            writes.push(t.elapsed());
            std::thread::sleep(Duration::from_millis(50));
        }
        health.sort();
        writes.sort();
        eprintln!(
            "while 8 guests spin: /health p50 {:?} max {:?}; insert_row p50 {:?} max {:?}",
            health[10], health[19], writes[10], writes[19]
        );
        // Each answers (a hang guard): how fast is the benchmark's (`wasm_cancel`,
        // `health_while_8_spin_p50_ms` and `insert_while_8_spin_p50_ms`).
        assert!(health[19] < Duration::from_secs(5), "{health:?}");
        assert!(writes[19] < Duration::from_secs(5), "{writes:?}");
        for t in spinning {
            let e = t.join().unwrap();
            assert!(e.contains("CPU time"), "{e}");
        }
    });
}

#[test]
fn limits_change_without_the_component_and_paths_are_checked_before_reading() {
    let s = server();
    s.install("hostile", "hostile", json!({"limits": {"cpu_ms": 200}}));
    let (st, v) = s.post(
        "/datanotes/apps/update/",
        Some(&s.token),
        &json!({"name": "hostile", "limits": {"cpu_ms": 300}}),
    );
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["app"]["wasm"]["limits"]["cpu_ms"], 300, "{v}");
    assert_eq!(v["app"]["wasm"]["limits"]["memory_mb"], 128, "{v}");
    let e = s.tool_err("hostile_spin", json!({}));
    assert!(e.contains("CPU time (300 ms)"), "{e}");
    // Invalid limits are refused and change nothing.
    let (st, v) = s.post(
        "/datanotes/apps/update/",
        Some(&s.token),
        &json!({"name": "hostile", "limits": {"cpu_ms": 0}}),
    );
    assert_eq!(st, 400, "{v}");
    assert_eq!(s.app("hostile")["wasm"]["limits"]["cpu_ms"], 300);
    // A device is not read (its size says nothing); a folder neither.
    for p in ["/dev/zero", "/tmp"] {
        let (st, v) = s.post(
            "/datanotes/apps/create/",
            Some(&s.token),
            &json!({"name": "dev", "wasm_path": p}),
        );
        assert_eq!(st, 400, "{v}");
        assert_eq!(v["error"]["column"], "wasm_path", "{v}");
    }
    // The scheme of Authorization is case-insensitive.
    for scheme in ["bearer", "BEARER", "Bearer"] {
        let (st, v) = s.post_raw(
            "/datanotes/list_tables/",
            None,
            &[("Authorization", &format!("{scheme} {}", s.token))],
            b"{}".to_vec(),
        );
        assert_eq!(st, 200, "{scheme}: {v}");
    }
}
