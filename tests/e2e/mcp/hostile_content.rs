//! A hostile remote app's resources: an endless `resources/list` cursor, a flood of
//! `notifications/resources/updated`, URIs of a megabyte or with `..` in its tool results.
//! Each is bounded, refused or skipped; the app's tools are still served, the engine's memory
//! stays bounded, and other agents are not held up.

use crate::kit::mcp::ask;
use crate::kit::*;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use rmcp::RoleClient;
use rmcp::model::ResourceUpdatedNotificationParam;
use rmcp::service::NotificationContext;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::{ClientHandler, ServiceExt};
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// The app: counts the pages it was asked for; floods the subscribers' streams.
struct Flood {
    pages: AtomicUsize,
    /// Floods whose every update is queued on the app's stream.
    flooded: AtomicUsize,
    push: tokio::sync::broadcast::Sender<String>,
}

use fake_app::rpc;

impl Flood {
    fn post(self: Arc<Self>, body: Value) -> Response {
        let id = body.get("id").cloned().unwrap_or(Value::Null);
        match body["method"].as_str().unwrap_or("") {
            "initialize" => fake_app::initialized(
                &id,
                "flood",
                json!({"tools": {}, "resources": {"subscribe": true}}),
                "flood-session",
            ),
            "tools/list" => rpc(
                &id,
                json!({"tools": [{"name": "flood_links", "inputSchema": {"type": "object"}}]}),
            ),
            "tools/call" => rpc(
                &id,
                json!({"content": [
                    {"type": "resource_link", "uri": format!("file:///{}", "x".repeat(1 << 20)), "name": "big"},
                    {"type": "resource_link", "uri": "file:///a/../../etc/passwd", "name": "up"},
                    {"type": "resource_link", "uri": "file:///fine", "name": "fine"}]}),
            ),
            // Never the last page.
            "resources/list" => {
                let n = self.pages.fetch_add(1, Ordering::Relaxed);
                let items: Vec<Value> = (0..100)
                    .map(|i| json!({"uri": format!("file:///p{n}/r{i}"), "name": "x".repeat(900)}))
                    .collect();
                rpc(
                    &id,
                    json!({"resources": items, "nextCursor": format!("c{}", n + 1)}),
                )
            }
            "resources/subscribe" => {
                let (push, app) = (self.push.clone(), self.clone());
                let uri = body["params"]["uri"].as_str().unwrap_or("").to_string();
                tokio::spawn(async move {
                    let n = json!({"jsonrpc": "2.0", "method": "notifications/resources/updated",
                                   "params": {"uri": uri}})
                    .to_string();
                    for _ in 0..100_000 {
                        if push.send(n.clone()).is_err() {
                            tokio::task::yield_now().await;
                        }
                    }
                    app.flooded.fetch_add(1, Ordering::SeqCst);
                });
                rpc(&id, json!({}))
            }
            _ => StatusCode::ACCEPTED.into_response(),
        }
    }
}

fn serve_app(rt: &tokio::runtime::Runtime) -> (String, Arc<Flood>) {
    let flood = Arc::new(Flood {
        pages: AtomicUsize::new(0),
        flooded: AtomicUsize::new(0),
        push: tokio::sync::broadcast::channel(200_000).0,
    });
    let app = flood.clone();
    let post: fake_app::Post = Arc::new(move |v| {
        let app = app.clone();
        Box::pin(async move { app.post(v) })
    });
    let url = fake_app::serve(rt, post, Some(flood.push.clone()));
    (url, flood)
}

#[derive(Clone, Default)]
struct Count(Arc<AtomicUsize>);

impl ClientHandler for Count {
    async fn on_resource_updated(
        &self,
        _p: ResourceUpdatedNotificationParam,
        _c: NotificationContext<RoleClient>,
    ) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

#[test]
fn a_hostile_apps_resources_are_bounded_and_its_tools_still_served() {
    let s = Server::start();
    let rt = runtime();
    let (url, flood) = serve_app(&rt);
    let rss0 = s.mib("VmRSS");
    create_app(&s, json!({"name": "flood", "mcp_url": url}));
    let count = Count::default();
    let cfg = transport_config(&format!("{}/mcp", s.url), Some(&s.token), None);
    let c = rt
        .block_on(async {
            count
                .clone()
                .serve(StreamableHttpClientTransport::from_config(cfg))
                .await
        })
        .unwrap();
    // The endless cursor stops at the listing's caps; the app's tool is served all the same.
    eventually("the app's tool is listed", || {
        rt.block_on(c.list_all_tools())
            .unwrap()
            .iter()
            .any(|t| t.name == "flood_links")
    });
    let pages = flood.pages.load(Ordering::Relaxed);
    assert!((1..=100).contains(&pages), "{pages} pages asked for");
    let entry = s.ok_route("apps/get", json!({"name": "flood"}))["app"].clone();
    assert_eq!(entry["reachable"], true, "{entry}");
    let listed = entry["resources"].as_u64().unwrap();
    assert!((100..=2000).contains(&listed), "{listed} resources kept");

    // URIs of a megabyte or with `..` in a result never reach the agent as they were.
    let r = ask(
        &rt,
        &c,
        "tools/call",
        json!({"name": "flood_links", "arguments": {}}),
    );
    assert_eq!(r["content"][0]["uri"], "datanotes:invalid-uri");
    assert_eq!(r["content"][1]["uri"], "datanotes:invalid-uri");
    assert_eq!(r["content"][2]["uri"], "file://flood//fine");

    // A flood of 100,000 updates: passed on at most as fast as the agent takes them, dropped
    // beyond the queue; the engine's memory stays bounded and another agent is served at once.
    let e = ask(
        &rt,
        &c,
        "resources/subscribe",
        json!({"uri": "file://flood//p0/r0"}),
    );
    assert!(e.get("error").is_none(), "{e}");
    eventually("updates arrive", || count.0.load(Ordering::Relaxed) > 0);
    let other = Agent::owner(&s);
    let t0 = Instant::now();
    assert!(!other.names().is_empty());
    assert!(
        t0.elapsed() < Duration::from_secs(5),
        "another agent waited {:?}",
        t0.elapsed()
    );
    // The whole flood queued, and the engine has read 40,000 updates of it from the app's stream
    // (about what it reads in 2 s here; then it slows down to the agent's pace).
    eventually_ok("the engine reads 40,000 updates of the flood", || {
        let (flooded, unread) = (flood.flooded.load(Ordering::SeqCst), flood.push.len());
        if flooded > 0 && unread <= 60_000 {
            Ok(())
        } else {
            Err(format!("{flooded} floods queued, {unread} updates unread"))
        }
    });
    let rss = s.mib("VmRSS");
    assert!(rss < rss0 + 150, "RSS {rss0} MiB → {rss} MiB");
    eprintln!(
        "flood: {} updates reached the agent, {} unread; RSS {rss0} → {rss} MiB",
        count.0.load(Ordering::Relaxed),
        flood.push.len()
    );
}
