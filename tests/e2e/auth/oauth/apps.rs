//! A grant and apps: it reaches a WASM app only through the tools the owner ticked, and the
//! engine never passes a client's token on to a remote app.

use super::*;

#[test]
fn a_grant_reaches_a_wasm_app_only_through_the_tools_the_owner_ticked() {
    let s = Server::start_with_env(&[("DATANOTES_CACHE_DIR", &crate::wasm::shared_cache())]);
    s.install(
        "planning",
        "planning",
        json!({"write": ["personal.tasks.items"], "ddl": true}),
    );
    let mcp = format!("{}/mcp", s.url);
    // The tool it is given writes with the app's own rights (the host import), recorded as
    // called by the client; the grant itself still writes nothing.
    let writer = oauth::connect(&s, "Writer", json!({"call_tools": ["planning_add_task"]}));
    let agent = Agent::connect(&mcp, Some(&writer.access), None);
    let r = agent.call("planning_add_task", json!({"title": "through the app"}));
    assert!(!is_error(&r), "{}", text(&r));
    let m = &s.ok(
        "list_migrations",
        json!({"table": "personal.tasks.items", "limit": 1}),
    )["migrations"][0];
    assert_eq!(m["actor"]["app"], "planning", "{m}");
    assert!(
        m["actor"]["caller"]
            .as_str()
            .unwrap()
            .starts_with("client:Writer (g_"),
        "{m}"
    );
    let r = agent.call(
        "insert_row",
        json!({"table": "personal.tasks.items", "values": {"title": "direct"}}),
    );
    assert!(
        is_error(&r) && text(&r).contains("may not call the tool insert_row"),
        "{}",
        text(&r)
    );
    let reader = oauth::connect(&s, "Reader", json!({"call_tools": ["planning_list_tasks"]}));
    let agent = Agent::connect(&mcp, Some(&reader.access), None);
    assert_eq!(agent.names(), ["planning_list_tasks"]);
    let r = agent.call("planning_add_task", json!({"title": "not mine to add"}));
    assert!(
        is_error(&r) && text(&r).contains("may not call the tool planning_add_task"),
        "{}",
        text(&r)
    );
    let r = agent.call("planning_list_tasks", json!({}));
    assert!(!is_error(&r), "{}", text(&r));
}

#[test]
fn the_engine_never_passes_a_clients_token_on_to_an_app() {
    use axum::http::HeaderMap;
    use std::sync::{Arc, Mutex};
    // A remote app that notes every Authorization header it receives.
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let rt = runtime();
    let noted = seen.clone();
    let router = axum::Router::new().route(
        "/mcp",
        axum::routing::post(move |headers: HeaderMap, body: axum::body::Bytes| {
            let noted = noted.clone();
            async move {
                if let Some(a) = headers.get("authorization") {
                    noted.lock().unwrap().push(a.to_str().unwrap().to_string());
                }
                let m: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                let id = m["id"].clone();
                match m["method"].as_str() {
                    Some("initialize") => {
                        fake_app::initialized(&id, "echo", json!({"tools": {}}), "s1")
                    }
                    Some("tools/list") => fake_app::rpc(
                        &id,
                        json!({"tools": [{"name": "hello",
                        "inputSchema": {"type": "object"}}]}),
                    ),
                    Some("tools/call") => {
                        fake_app::rpc(&id, json!({"content": [{"type": "text", "text": "hi"}]}))
                    }
                    _ => axum::http::StatusCode::ACCEPTED.into_response(),
                }
            }
        })
        .get(|| async { axum::http::StatusCode::METHOD_NOT_ALLOWED }),
    );
    use axum::response::IntoResponse;
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    rt.spawn(async move { axum::serve(listener, router).await });

    let s = Server::start();
    s.ok_route(
        "apps/create",
        json!({"name": "echo", "mcp_url": url, "mcp_token": "the-apps-own-secret"}),
    );
    eventually("the app is listed", || {
        s.ok_route("apps/get", json!({"name": "echo"}))["app"]["tools"] == json!(["hello"])
    });
    let t = oauth::connect(&s, "Deputy", json!({"call_tools": ["hello"]}));
    let agent = Agent::connect(&format!("{}/mcp", s.url), Some(&t.access), None);
    let r = agent.call("hello", json!({}));
    assert!(!is_error(&r), "{}", text(&r));
    let seen = seen.lock().unwrap().clone();
    assert!(!seen.is_empty());
    for a in &seen {
        assert_eq!(a, "Bearer the-apps-own-secret", "the app saw {a}");
        assert!(!a.contains(&t.access));
    }
}
