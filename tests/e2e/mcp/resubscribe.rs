//! An agent's subscription to a remote app's resource holds when the app restarts: the app
//! forgets its sessions and what was subscribed on them, and the engine finds out at its next
//! probe, opens the agent's session again, subscribes again, and tells the agent that the
//! resource may have changed meanwhile. The app's later updates reach the agent as before. So
//! when the owner moves the app to another address: the new backend takes the subscription over.

use crate::kit::mcp::{Updates, ask, transport_config};
use crate::kit::*;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use rmcp::service::RunningService;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::{RoleClient, ServiceExt};
use serde_json::{Value, json};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// An app that can restart: each run has its own session id, and a request on an earlier
/// run's session is answered 404 (as an MCP server that restarted answers), its stream ended.
struct Restarting {
    run: AtomicU64,
    /// What was subscribed, by run.
    subscribed: Mutex<Vec<(u64, String)>>,
    /// Updates to send on the standalone stream: the run they are for, and the URI.
    push: tokio::sync::broadcast::Sender<(u64, String)>,
}

impl Restarting {
    fn session(&self) -> String {
        format!("run-{}", self.run.load(Ordering::SeqCst))
    }

    /// Whether the request is on this run's session.
    fn current(&self, headers: &HeaderMap) -> bool {
        headers
            .get("mcp-session-id")
            .is_some_and(|v| v.as_bytes() == self.session().as_bytes())
    }

    fn post(&self, headers: &HeaderMap, v: Value) -> Response {
        let id = v["id"].clone();
        let method = v["method"].as_str().unwrap_or("");
        if method == "initialize" {
            let caps = json!({"tools": {}, "resources": {"subscribe": true}});
            return fake_app::initialized(&id, "restarting", caps, &self.session());
        }
        if !self.current(headers) {
            return StatusCode::NOT_FOUND.into_response();
        }
        match method {
            "tools/list" => fake_app::rpc(
                &id,
                json!({"tools": [{"name": "restarting_hello", "inputSchema": {"type": "object"}}]}),
            ),
            "resources/list" => fake_app::rpc(
                &id,
                json!({"resources": [{"uri": "file:///a", "name": "a"}]}),
            ),
            "resources/subscribe" => {
                let run = self.run.load(Ordering::SeqCst);
                let uri = v["params"]["uri"].as_str().unwrap_or("").to_string();
                self.subscribed.lock().unwrap().push((run, uri));
                fake_app::rpc(&id, json!({}))
            }
            _ if id.is_null() => StatusCode::ACCEPTED.into_response(),
            _ => fake_app::rpc(&id, json!({})),
        }
    }

    /// The standalone stream of this run's session: its updates, until the app restarts.
    fn stream(self: Arc<Self>, headers: &HeaderMap) -> Response {
        if !self.current(headers) {
            return StatusCode::NOT_FOUND.into_response();
        }
        let run = self.run.load(Ordering::SeqCst);
        let rx = fake_app::stream_of(self.push.subscribe());
        let app = self.clone();
        fake_app::sse(
            rx.take_while(move |_| {
                let alive = app.run.load(Ordering::SeqCst) == run;
                async move { alive }
            })
            .filter(move |(r, _)| {
                let mine = *r == run;
                async move { mine }
            })
            .map(|(_, uri)| {
                json!({"jsonrpc": "2.0", "method": "notifications/resources/updated",
                       "params": {"uri": uri}})
                .to_string()
            }),
        )
    }
}

fn restarting() -> Arc<Restarting> {
    Arc::new(Restarting {
        run: AtomicU64::new(1),
        subscribed: Mutex::default(),
        push: tokio::sync::broadcast::channel(16).0,
    })
}

/// Serves `app` on a port of its own; answers its `/mcp` address.
fn serve(rt: &tokio::runtime::Runtime, app: &Arc<Restarting>) -> String {
    let (posts, gets) = (app.clone(), app.clone());
    let router = axum::Router::new().route(
        "/mcp",
        axum::routing::post(move |headers: HeaderMap, body: axum::body::Bytes| {
            let app = posts.clone();
            async move {
                app.post(
                    &headers,
                    serde_json::from_slice(&body).unwrap_or(Value::Null),
                )
            }
        })
        .get(move |headers: HeaderMap| {
            let app = gets.clone();
            async move { app.stream(&headers) }
        })
        .delete(|| async { StatusCode::OK }),
    );
    format!("{}/mcp", fake_app::serve_router(rt, router))
}

#[test]
fn a_subscription_at_a_remote_app_holds_when_the_app_restarts() {
    let s = Server::start_with_env(&[("DATANOTES_APP_PROBE_MS", "200")]);
    let rt = mcp::runtime();
    let app = restarting();
    let url = serve(&rt, &app);
    create_app(&s, json!({"name": "restarting", "mcp_url": url}));
    eventually("the app's resource is listed", || {
        s.ok_route("apps/get", json!({"name": "restarting"}))["app"]["resources"] == 1
    });
    let seen = Updates::default();
    let cfg = transport_config(&format!("{}/mcp", s.url), Some(&s.token), None);
    let agent: RunningService<RoleClient, Updates> = rt
        .block_on(async {
            seen.clone()
                .serve(StreamableHttpClientTransport::from_config(cfg))
                .await
        })
        .unwrap();
    let uri = "file://restarting//a";
    let r = ask(&rt, &agent, "resources/subscribe", json!({"uri": uri}));
    assert!(r.get("error").is_none(), "{r}");
    let told = |n: usize| {
        eventually(&format!("{n} updates reach the agent"), || {
            seen.0.lock().unwrap().iter().filter(|u| *u == uri).count() >= n
        })
    };
    let _ = app.push.send((1, "file:///a".into()));
    told(1);

    // The app restarts: it forgets the session and the subscription.
    app.run.store(2, Ordering::SeqCst);
    eventually("the subscription is made again on a new session", || {
        app.subscribed
            .lock()
            .unwrap()
            .contains(&(2, "file:///a".into()))
    });
    // The agent is told the resource may have changed while it was not followed...
    told(2);
    // ...and the app's next update reaches it, from the new session.
    let _ = app.push.send((2, "file:///a".into()));
    told(3);

    // The owner moves the app to another address: a new backend takes the subscription over.
    let url2 = serve(&rt, &app);
    let moved = json!({"name": "restarting", "mcp_url": url2});
    let (st, v) = s.post("/datanotes/apps/update/", Some(&s.token), &moved);
    assert_eq!(st, 200, "{v}");
    let made = |n: usize| {
        let again = (2, "file:///a".to_string());
        let subscribed = app.subscribed.lock().unwrap();
        subscribed.iter().filter(|x| **x == again).count() >= n
    };
    eventually("the subscription is made at the new address", || made(2));
    told(4);
    let _ = rt.block_on(agent.cancel());
}
