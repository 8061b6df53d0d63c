//! WASM apps on version 0.2 of the world (`wit/0.2`), end to end through `/mcp` with rmcp's
//! client: the Rust example `planning2` (`plugins/planning-v2`) reports progress, which reaches
//! the client with its progress token; learns that its caller cancelled (`engine.cancelled`)
//! and returns, its instance kept warm and its slot free at once; and offers resources, a
//! resource template and a prompt, which join the namespace like a remote app's (its URIs named
//! by the app: `tasks://open` of the app `plan` is `tasks://plan/open`). The 0.1 guests keep
//! working: `wasm::` runs them all, on the same server build.

use crate::kit::mcp::{ask, transport_config};
use crate::kit::*;
use crate::wasm::shared_cache;
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, ClientRequest, ProgressNotificationParam,
};
use rmcp::service::{NotificationContext, PeerRequestOptions, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A server (the shared compile cache) with `planning2` installed as `plan`.
fn server(limits: Value) -> Server {
    let s = Server::start_with_env(&[("DATANOTES_CACHE_DIR", &shared_cache())]);
    s.install(
        "plan",
        "planning2",
        json!({"write": ["personal.tasks.items"], "ddl": true, "limits": limits}),
    );
    s
}

/// The client: keeps the progress notifications it receives, and the URIs of the
/// `resources/updated` ones.
#[derive(Clone, Default)]
struct Progress(
    Arc<Mutex<Vec<ProgressNotificationParam>>>,
    Arc<Mutex<Vec<String>>>,
);

impl ClientHandler for Progress {
    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _c: NotificationContext<RoleClient>,
    ) {
        self.0.lock().unwrap().push(params);
    }

    async fn on_resource_updated(
        &self,
        params: rmcp::model::ResourceUpdatedNotificationParam,
        _c: NotificationContext<RoleClient>,
    ) {
        self.1.lock().unwrap().push(params.uri.to_string());
    }
}

type Client = RunningService<RoleClient, Progress>;

fn connect(rt: &tokio::runtime::Runtime, s: &Server) -> (Client, Progress) {
    let p = Progress::default();
    let cfg = transport_config(&format!("{}/mcp", s.url), Some(&s.token), None);
    let c = rt
        .block_on(async {
            p.clone()
                .serve(StreamableHttpClientTransport::from_config(cfg))
                .await
        })
        .unwrap();
    (c, p)
}

/// Calls a tool; its structured result.
fn call(rt: &tokio::runtime::Runtime, c: &Client, tool: &str, args: Value) -> Value {
    let r = ask(
        rt,
        c,
        "tools/call",
        json!({"name": tool, "arguments": args}),
    );
    assert_ne!(r["isError"], true, "{tool}: {r}");
    r["structuredContent"].clone()
}

/// The app's live instances (in a call or warm) and its warm ones.
fn instances(s: &Server) -> (u64, u64) {
    instances_of(s, "plan")
}

/// The live instances of the app `app` (in a call or warm) and its warm ones.
fn instances_of(s: &Server, app: &str) -> (u64, u64) {
    let r = s.app(app)["runtime"].clone();
    (
        r["instances"].as_u64().unwrap(),
        r["warm"].as_u64().unwrap(),
    )
}

#[test]
fn progress_reaches_the_client_with_its_token() {
    let s = server(json!({}));
    let rt = runtime();
    let (c, progress) = connect(&rt, &s);
    let names: Vec<String> = rt
        .block_on(c.list_all_tools())
        .unwrap()
        .iter()
        .map(|t| t.name.to_string())
        .collect();
    assert!(names.contains(&"planning_focus".to_string()), "{names:?}");
    // rmcp's client gives every request a progress token: the guest's progress goes with it.
    let t0 = Instant::now();
    let handle = rt
        .block_on(
            c.send_cancellable_request(
                ClientRequest::CallToolRequest(CallToolRequest::new(
                    CallToolRequestParams::new("planning_focus")
                        .with_arguments(json!({"seconds": 0.5}).as_object().unwrap().clone()),
                )),
                PeerRequestOptions::no_options(),
            ),
        )
        .unwrap();
    let token = handle.progress_token.clone();
    let r = rt.block_on(handle.await_response()).unwrap();
    let r = serde_json::to_value(r).unwrap();
    assert_eq!(
        r["structuredContent"],
        json!({"focused": 0.5, "cancelled": false}),
        "{r}"
    );
    assert!(t0.elapsed() >= Duration::from_millis(500));
    // The last progress is written just before the result, and rmcp's client hands each
    // notification to its handler in a task of its own: it may be noted a moment after.
    let got = eventually_ok("the last progress", || {
        let got = progress.0.lock().unwrap().clone();
        match got.last() {
            Some(p) if p.message.as_deref() == Some("done") => Ok(got),
            _ => Err(format!("{got:?}")),
        }
    });
    // Every tenth of a second, and once at the end.
    assert!(got.len() >= 5, "{got:?}");
    assert!(got.iter().all(|p| p.progress_token == token), "{got:?}");
    assert!(got.iter().all(|p| p.total == Some(0.5)), "{got:?}");
    let last = got.last().unwrap();
    assert_eq!(
        (last.progress, last.message.as_deref()),
        (0.5, Some("done"))
    );
    assert_eq!(got[0].progress, 0.0);
    assert_eq!(got[0].message.as_deref(), Some("0.5 s to go"));
    // Over HTTP `apps/call/` nobody receives progress: the call is the same.
    let v = s.tool_ok("planning_focus", json!({"seconds": 0.05}));
    assert_eq!(v["cancelled"], false, "{v}");
    let _ = rt.block_on(c.cancel());
}

#[test]
fn a_guest_learns_it_was_cancelled_and_returns() {
    // One instance, and limits far above the test's time: only the cancellation ends the call.
    let s = server(json!({"cpu_ms": 120_000, "timeout_ms": 120_000, "max_instances": 1}));
    let rt = runtime();
    let (c, progress) = connect(&rt, &s);
    let since = s.seq();
    let handle = rt
        .block_on(
            c.send_cancellable_request(
                ClientRequest::CallToolRequest(CallToolRequest::new(
                    CallToolRequestParams::new("planning_focus")
                        .with_arguments(json!({"seconds": 100}).as_object().unwrap().clone()),
                )),
                PeerRequestOptions::no_options(),
            ),
        )
        .unwrap();
    eventually("the call runs in the app's instance", || {
        instances(&s) == (1, 0)
    });
    // Past its first step: the guest's loop reports its second progress (0.1 s in).
    eventually_ok("the guest's second progress", || {
        let n = progress.0.lock().unwrap().len();
        if n >= 2 {
            Ok(())
        } else {
            Err(format!("{n} progress notifications"))
        }
    });
    assert_eq!(instances(&s), (1, 0), "the call still runs");
    let cancelled_at = Instant::now();
    rt.block_on(handle.cancel(Some("enough".into()))).unwrap();
    // The guest saw `cancelled()` and returned: its instance is back, warm, not thrown away.
    let dt = loop {
        let dt = cancelled_at.elapsed();
        if instances(&s) == (1, 1) {
            break dt;
        }
        assert!(
            dt < Duration::from_secs(5),
            "still in the call: {:?}",
            instances(&s)
        );
    };
    // How soon is the benchmark's (`wasm_cancel`, `cancel_cooperative_to_warm`); the loop
    // above is the hang guard.
    eprintln!("cancel -> instance back, warm, in {dt:?}");
    let mut ev = vec![];
    eventually("the cancelled call's event", || {
        let page = s.ok_route("changes", json!({"since": since, "ops": ["tool_call"]}));
        ev = page["changes"].as_array().cloned().unwrap_or_default();
        ev.iter().any(|e| e["call"]["tool"] == "planning_focus")
    });
    let e = ev
        .iter()
        .find(|e| e["call"]["tool"] == "planning_focus")
        .unwrap();
    assert_eq!(e["call"]["cancelled"], true, "{e}");
    // The warm instance answers the next call.
    let v = call(&rt, &c, "planning_focus", json!({"seconds": 0}));
    assert_eq!(v["cancelled"], false, "{v}");
    assert_eq!(instances(&s), (1, 1));
    let _ = rt.block_on(c.cancel());
}

#[test]
fn resources_templates_and_prompts_join_the_namespace() {
    let s = server(json!({}));
    let rt = runtime();
    let (c, seen) = connect(&rt, &s);
    let a = call(
        &rt,
        &c,
        "planning_add_task",
        json!({"title": "Write the report", "due": "2026-12-04"}),
    );
    call(&rt, &c, "planning_add_task", json!({"title": "Call Ada"}));
    let id = a["id"].as_str().unwrap().to_string();

    // Listed after the vault's own (paged), named by the app.
    let (mut list, mut cursor) = (vec![], None::<Value>);
    loop {
        let p = cursor.take().map_or(json!({}), |c| json!({"cursor": c}));
        let page = ask(&rt, &c, "resources/list", p);
        list.extend(page["resources"].as_array().cloned().unwrap_or_default());
        match page.get("nextCursor").filter(|c| !c.is_null()) {
            Some(n) => cursor = Some(n.clone()),
            None => break,
        }
    }
    let ours: Vec<&Value> = list
        .iter()
        .filter(|r| r["uri"].as_str().unwrap().starts_with("tasks://"))
        .collect();
    assert_eq!(
        ours,
        [
            &json!({"uri": "tasks://plan/open", "name": "Open tasks", "mimeType": "text/markdown",
                 "description": "The tasks not done yet, soonest due first, as a Markdown list"})
        ],
        "{list:?}"
    );
    let t = ask(&rt, &c, "resources/templates/list", json!({}));
    let tpl: Vec<&Value> = t["resourceTemplates"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["uriTemplate"].as_str().unwrap().starts_with("tasks://"))
        .collect();
    assert_eq!(tpl.len(), 1, "{t}");
    assert_eq!(tpl[0]["uriTemplate"], "tasks://plan/task/{id}", "{t}");
    assert_eq!(tpl[0]["name"], "A task");

    // Read: the guest reads the vault at the time of the read; its URIs named for the agent.
    let r = ask(
        &rt,
        &c,
        "resources/read",
        json!({"uri": "tasks://plan/open"}),
    );
    let content = &r["contents"][0];
    assert_eq!(content["uri"], "tasks://plan/open", "{r}");
    assert_eq!(content["mimeType"], "text/markdown", "{r}");
    let text = content["text"].as_str().unwrap();
    assert!(
        text.contains("- [ ] Write the report (due 2026-12-04)"),
        "{text}"
    );
    assert!(text.contains("Call Ada"), "{text}");
    let r = ask(
        &rt,
        &c,
        "resources/read",
        json!({"uri": format!("tasks://plan/task/{id}")}),
    );
    assert_eq!(
        r["contents"][0]["uri"],
        format!("tasks://plan/task/{id}"),
        "{r}"
    );
    assert!(
        r["contents"][0]["text"]
            .as_str()
            .unwrap()
            .contains("Write the report")
    );
    // A URI the guest does not know: its error, as a JSON-RPC error.
    let r = ask(
        &rt,
        &c,
        "resources/read",
        json!({"uri": "tasks://plan/nothing"}),
    );
    assert_eq!(r["error"]["code"], -32002, "{r}");
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("no resource tasks://nothing"),
        "{r}"
    );

    // No completions to offer.
    let r = ask(
        &rt,
        &c,
        "completion/complete",
        json!({"ref": {"type": "ref/resource", "uri": "tasks://plan/task/{id}"},
               "argument": {"name": "id", "value": "w"}}),
    );
    assert_eq!(r["completion"]["values"], json!([]), "{r}");
    // A subscription: the guest reads the vault, so a change of the vault may change the
    // resource, and the subscriber is told (a tool call, which changes nothing, does not).
    let r = ask(
        &rt,
        &c,
        "resources/subscribe",
        json!({"uri": "tasks://plan/open"}),
    );
    assert!(r.get("error").is_none(), "{r}");
    call(&rt, &c, "planning_list_tasks", json!({}));
    // Time, not an event: the call's own event is committed after its answer, and any later
    // change of the vault (the only event that could follow it) notifies the subscriber too.
    std::thread::sleep(Duration::from_millis(300));
    assert!(seen.1.lock().unwrap().is_empty(), "{:?}", seen.1);
    call(&rt, &c, "planning_add_task", json!({"title": "Buy stamps"}));
    eventually("the subscriber is told the resource changed", || {
        seen.1
            .lock()
            .unwrap()
            .iter()
            .any(|u| u == "tasks://plan/open")
    });
    let r = ask(
        &rt,
        &c,
        "resources/read",
        json!({"uri": "tasks://plan/open"}),
    );
    assert!(
        r["contents"][0]["text"]
            .as_str()
            .unwrap()
            .contains("Buy stamps"),
        "{r}"
    );
    // A new backend for the app (new rights here; a new component alike) may serve its
    // resources otherwise: the subscriber is told.
    seen.1.lock().unwrap().clear();
    let update = json!({"name": "plan", "maintain": true});
    let (st, v) = s.post("/datanotes/apps/update/", Some(&s.token), &update);
    assert_eq!(st, 200, "{v}");
    eventually("the subscriber is told of the app's new backend", || {
        seen.1
            .lock()
            .unwrap()
            .iter()
            .any(|u| u == "tasks://plan/open")
    });

    // Prompts: listed, and got with their arguments.
    let p = ask(&rt, &c, "prompts/list", json!({}));
    let plan = p["prompts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "planning_plan_day")
        .unwrap_or_else(|| panic!("{p}"));
    assert_eq!(
        plan["arguments"],
        json!([{"name": "focus", "description": "What matters most today", "required": false}])
    );
    let g = ask(
        &rt,
        &c,
        "prompts/get",
        json!({"name": "planning_plan_day", "arguments": {"focus": "the report"}}),
    );
    let text = g["messages"][0]["content"]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("{g}"));
    assert!(
        text.contains("Write the report") && text.contains("Focus on: the report."),
        "{text}"
    );
    // The resource link in the prompt is named by the app too.
    assert_eq!(
        g["messages"][1]["content"]["uri"], "tasks://plan/open",
        "{g}"
    );
    let g = ask(&rt, &c, "prompts/get", json!({"name": "planning_nothing"}));
    assert!(g.get("error").is_some(), "{g}");
    let _ = rt.block_on(c.cancel());
}

/// The Python and JavaScript examples on 0.2 learn that their caller cancelled
/// (`engine.cancelled()`, asked between two rows) and return: each one's instance is back and
/// warm (a guest interrupted after the grace is thrown away), and the call's event says it was
/// cancelled.
#[test]
fn the_python_and_javascript_guests_learn_they_were_cancelled() {
    let s = Server::start_with_env(&[("DATANOTES_CACHE_DIR", &shared_cache())]);
    let limits = json!({"cpu_ms": 120_000, "timeout_ms": 120_000, "max_instances": 1});
    let grants = |table: &str| json!({"write": [table], "ddl": true, "limits": limits});
    s.install("journal", "journal2", grants("personal.notes.daily"));
    s.install("links", "bookmarks2", grants("personal.notes.bookmarks"));
    let rt = runtime();
    let (c, progress) = connect(&rt, &s);
    // Rows enough for seconds of work: the call is cancelled after its first row.
    call(&rt, &c, "journal_append", json!({"text": "one"}));
    call(
        &rt,
        &c,
        "bookmarks_add",
        json!({"url": "https://0.example"}),
    );
    for i in 1..300 {
        let d = format!("2025-{:02}-{:02}", 1 + i / 28, 1 + i % 28);
        s.ok_route(
            "insert_row",
            json!({"table": "personal.notes.daily", "id": d, "values": {"date": d},
                   "body": "- 09:00 one two\n"}),
        );
        let url = format!("https://{i}.example");
        s.ok_route(
            "insert_row",
            json!({"table": "personal.notes.bookmarks",
                   "values": {"url": url, "title": url, "tags": ["Later"]}}),
        );
    }
    for (app, tool, args) in [
        ("journal", "journal_tally", json!({"pause": 0.01})),
        ("links", "bookmarks_retag", json!({})),
    ] {
        let since = s.seq();
        progress.0.lock().unwrap().clear();
        let mut p =
            CallToolRequestParams::new(tool).with_arguments(args.as_object().unwrap().clone());
        let mut meta = p.meta.take().unwrap_or_default();
        meta.set_progress_token(rmcp::model::ProgressToken(rmcp::model::RequestId::Number(
            9,
        )));
        p.meta = Some(meta);
        let handle = rt
            .block_on(c.send_cancellable_request(
                ClientRequest::CallToolRequest(CallToolRequest::new(p)),
                PeerRequestOptions::no_options(),
            ))
            .unwrap();
        eventually("the call's first row is done", || {
            !progress.0.lock().unwrap().is_empty()
        });
        assert_eq!(instances_of(&s, app), (1, 0), "{tool} runs");
        let cancelled_at = Instant::now();
        rt.block_on(handle.cancel(Some("enough".into()))).unwrap();
        eventually("the guest returned, its instance kept warm", || {
            instances_of(&s, app) == (1, 1)
        });
        eprintln!(
            "{tool}: cancel -> instance back, warm, in {:?}",
            cancelled_at.elapsed()
        );
        let rows = progress.0.lock().unwrap().len();
        assert!(rows < 300, "{tool} went through all the rows: {rows}");
        let mut ev = vec![];
        eventually("the cancelled call's event", || {
            let page = s.ok_route("changes", json!({"since": since, "ops": ["tool_call"]}));
            ev = page["changes"].as_array().cloned().unwrap_or_default();
            ev.iter().any(|e| e["call"]["tool"] == tool)
        });
        let e = ev.iter().find(|e| e["call"]["tool"] == tool).unwrap();
        assert_eq!(e["call"]["cancelled"], true, "{e}");
    }
    let _ = rt.block_on(c.cancel());
}

/// A client of 2026-07-28 listens to a WASM app's resource (`subscriptions/listen`, no
/// session): a change of the vault tells it on the stream, and so does a new backend for the
/// app.
#[test]
fn a_2026_listen_follows_a_wasm_apps_resource() {
    use std::io::BufRead;
    let s = server(json!({}));
    let uri = "tasks://plan/open";
    let r = crate::kit::mcp::listen_2026(&s, &[uri]);
    let (tx, rx) = std::sync::mpsc::channel::<Value>();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(r).lines().map_while(Result::ok) {
            if let Some(m) = line.strip_prefix("data:").map(str::trim)
                && let Ok(v) = serde_json::from_str::<Value>(m)
                && tx.send(v).is_err()
            {
                return;
            }
        }
    });
    let next = || rx.recv_timeout(Duration::from_secs(10)).expect("a message");
    let ack = next();
    assert_eq!(
        ack["method"], "notifications/subscriptions/acknowledged",
        "{ack}"
    );
    s.tool_ok("planning_add_task", json!({"title": "Buy stamps"}));
    let updated = next();
    assert_eq!(
        updated["method"], "notifications/resources/updated",
        "{updated}"
    );
    assert_eq!(updated["params"]["uri"], uri, "{updated}");
    // Nothing more from that write.
    while let Ok(m) = rx.recv_timeout(Duration::from_millis(500)) {
        assert_eq!(m["params"]["uri"], uri, "{m}");
    }
    let update = json!({"name": "plan", "maintain": true});
    let (st, v) = s.post("/datanotes/apps/update/", Some(&s.token), &update);
    assert_eq!(st, 200, "{v}");
    let updated = next();
    assert_eq!(updated["params"]["uri"], uri, "{updated}");
}

/// Calls `tool` with a progress token, as a 2026-07-28 request read raw: its structured result
/// and the progress notifications of its stream, in the order they were written (rmcp's client
/// hands each notification to its handler in a task of its own, so it cannot tell the order of
/// two sent back to back).
fn call_with_progress(s: &Server, tool: &str, args: Value) -> (Value, Vec<Value>) {
    let r = crate::kit::mcp::post_2026(
        s,
        &s.token,
        "tools/call",
        json!({"name": tool, "arguments": args}),
        json!({}),
        Some("p-1"),
    );
    let messages = crate::kit::mcp::messages_of(r);
    let (last, notes) = messages.split_last().expect("an answer");
    assert_eq!(last["id"], 1, "the answer comes last: {messages:?}");
    assert_ne!(last["result"]["isError"], true, "{tool}: {last}");
    let got: Vec<Value> = notes
        .iter()
        .filter(|m| m["method"] == "notifications/progress")
        .map(|m| m["params"].clone())
        .collect();
    assert!(got.iter().all(|p| p["progressToken"] == "p-1"), "{got:?}");
    (last["result"]["structuredContent"].clone(), got)
}

#[test]
fn the_python_and_javascript_examples_on_0_2() {
    let s = Server::start_with_env(&[("DATANOTES_CACHE_DIR", &shared_cache())]);
    s.install(
        "journal",
        "journal2",
        json!({"write": ["personal.notes.daily"], "ddl": true}),
    );
    s.install(
        "links",
        "bookmarks2",
        json!({"write": ["personal.notes.bookmarks"], "ddl": true}),
    );
    let rt = runtime();
    let (c, _) = connect(&rt, &s);

    // Python: progress, a resource, a template, a prompt.
    let v = call(
        &rt,
        &c,
        "journal_append",
        json!({"text": "wrote three words"}),
    );
    let today = v["date"].as_str().unwrap().to_string();
    for d in ["2026-01-01", "2026-01-02"] {
        s.ok_route(
            "insert_row",
            json!({"table": "personal.notes.daily", "id": d, "values": {"date": d},
                   "body": "- 09:00 one two\n"}),
        );
    }
    let (v, got) = call_with_progress(&s, "journal_tally", json!({}));
    assert_eq!(v, json!({"days": 3, "words": 13, "cancelled": false}));
    let steps: Vec<_> = got
        .iter()
        .map(|p| (p["progress"].as_f64(), p["total"].as_f64()))
        .collect();
    let three = Some(3.0);
    assert_eq!(
        steps,
        [(Some(1.0), three), (Some(2.0), three), (Some(3.0), three)]
    );
    let r = ask(
        &rt,
        &c,
        "resources/read",
        json!({"uri": "journal://journal/today"}),
    );
    assert_eq!(r["contents"][0]["uri"], "journal://journal/today", "{r}");
    let text = r["contents"][0]["text"].as_str().unwrap();
    assert!(
        text.starts_with(&format!("# {today}")) && text.contains("wrote three words"),
        "{text}"
    );
    let r = ask(
        &rt,
        &c,
        "resources/read",
        json!({"uri": "journal://journal/day/2026-01-02"}),
    );
    assert!(
        r["contents"][0]["text"]
            .as_str()
            .unwrap()
            .contains("one two"),
        "{r}"
    );
    let t = ask(&rt, &c, "resources/templates/list", json!({}));
    assert!(
        t.to_string().contains("journal://journal/day/{date}"),
        "{t}"
    );
    let g = ask(
        &rt,
        &c,
        "prompts/get",
        json!({"name": "journal_reflect", "arguments": {"mood": "calm"}}),
    );
    let text = g["messages"][0]["content"]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("{g}"));
    assert!(
        text.contains("wrote three words") && text.ends_with("The day felt calm."),
        "{text}"
    );

    // JavaScript: the same.
    for (url, tags) in [
        ("https://a.example", ["Rust"]),
        ("https://b.example", ["wasm"]),
    ] {
        call(
            &rt,
            &c,
            "bookmarks_add",
            json!({"url": url, "title": url, "tags": tags}),
        );
    }
    s.ok_route(
        "insert_row",
        json!({"table": "personal.notes.bookmarks",
               "values": {"url": "https://c.example", "title": "C", "tags": ["MCP"]}}),
    );
    let (v, got) = call_with_progress(&s, "bookmarks_retag", json!({}));
    assert_eq!(v, json!({"done": 3, "changed": 1, "cancelled": false}));
    assert_eq!(got.len(), 3, "{got:?}");
    assert!(
        got.iter()
            .any(|p| p["message"] == "retagged https://c.example"),
        "{got:?}"
    );
    let r = ask(
        &rt,
        &c,
        "resources/read",
        json!({"uri": "bookmarks://links/tag/mcp"}),
    );
    assert_eq!(r["contents"][0]["uri"], "bookmarks://links/tag/mcp", "{r}");
    assert_eq!(
        r["contents"][0]["text"], "- [C](https://c.example)\n",
        "{r}"
    );
    let p = ask(&rt, &c, "prompts/list", json!({}));
    let names: Vec<&str> = p["prompts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"journal_reflect") && names.contains(&"bookmarks_reading_plan"),
        "{p}"
    );
    let g = ask(
        &rt,
        &c,
        "prompts/get",
        json!({"name": "bookmarks_reading_plan", "arguments": {"minutes": "20"}}),
    );
    let text = g["messages"][0]["content"]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("{g}"));
    assert!(
        text.contains("[C](https://c.example)") && text.contains("I have 20 minutes"),
        "{text}"
    );
    let _ = rt.block_on(c.cancel());
}

/// A guest of 0.2 whose content misbehaves (`hostile2`, `plugins/test-apps/hostile2`): each
/// fault is skipped, bounded or refused, and the rest is served.
/// - Its listing of 100,000 resources is cut to the cap (`DATANOTES_APP_MAX_TOOLS` of each
///   kind); URIs with a `..` segment, a NUL byte, the engine's scheme or a megabyte of text are
///   skipped with why; one with another app's name in it is still this app's.
/// - A prompt named like an engine operation, and one with a megabyte name, are skipped.
/// - A read that answers 4 MiB (over `max_result_bytes`) or not JSON is refused; the next one
///   works. The server's memory stays bounded.
#[test]
fn a_hostile_guests_content_is_skipped_bounded_or_refused() {
    let s = Server::start_with_env(&[
        ("DATANOTES_CACHE_DIR", &shared_cache()),
        ("DATANOTES_APP_MAX_TOOLS", "500"),
    ]);
    let rss0 = s.mib("VmRSS");
    s.install("rogue", "hostile2", json!({}));
    let app = s.ok_route("apps/get", json!({"name": "rogue"}))["app"].clone();
    let skipped = app["skippedResources"].to_string();
    for why in [
        "the URI has a .. segment",
        "control character",
        "the datanotes: scheme is the engine's",
        "longer than 2048 bytes",
    ] {
        assert!(skipped.contains(why), "{why}: {skipped}");
    }
    assert!(
        skipped.len() < 4096,
        "what is shown of a skipped URI is short: {} bytes",
        skipped.len()
    );
    let prompts = app["skippedPrompts"].to_string();
    assert!(prompts.contains("\"takenBy\":\"engine\""), "{prompts}");
    assert!(prompts.contains("^[a-zA-Z0-9_-]{1,64}$"), "{prompts}");
    assert_eq!(app["prompts"], json!(["hostile2_ask"]), "{app}");

    let rt = runtime();
    let (c, _) = connect(&rt, &s);
    let (mut ours, mut cursor) = (0usize, None::<Value>);
    loop {
        let p = cursor.take().map_or(json!({}), |c| json!({"cursor": c}));
        let page = ask(&rt, &c, "resources/list", p);
        let list = page["resources"].as_array().cloned().unwrap_or_default();
        ours += list
            .iter()
            .filter(|r| r["uri"].as_str().unwrap().starts_with("note://rogue/"))
            .count();
        match page.get("nextCursor").filter(|c| !c.is_null()) {
            Some(n) => cursor = Some(n.clone()),
            None => break,
        }
    }
    // The first 500 the guest listed (the cap), less the 4 skipped: fine, huge, garbled, the
    // lookalike, and the first of the flood.
    assert_eq!(ours, 500 - 4, "the app's resources served");

    let read = |uri: &str| ask(&rt, &c, "resources/read", json!({"uri": uri}));
    let r = read("note://rogue/fine");
    assert_eq!(r["contents"][0]["text"], "fine", "{r}");
    let r = read("note://rogue/planning2/tasks");
    assert_eq!(
        r["contents"][0]["uri"], "note://rogue/planning2/tasks",
        "{r}"
    );
    let r = read("note://rogue/huge");
    let e = r["error"].to_string();
    assert!(e.contains("bytes"), "over max_result_bytes: {r}");
    let r = read("note://rogue/garbled");
    assert!(r["error"].to_string().contains("not JSON"), "not JSON: {r}");
    let r = read("note://rogue/fine");
    assert_eq!(r["contents"][0]["text"], "fine", "the app goes on: {r}");
    let p = ask(
        &rt,
        &c,
        "prompts/get",
        json!({"name": "hostile2_ask", "arguments": {"topic": "x"}}),
    );
    assert_eq!(p["messages"][0]["content"]["text"], "hostile2_ask", "{p}");
    let grown = s.mib("VmRSS").saturating_sub(rss0);
    assert!(grown < 200, "the server grew {grown} MiB");
}
