//! Progress reaches the client with its token; a guest (Rust, Python, JavaScript) learns that
//! its caller cancelled and returns, its instance kept warm.

use super::*;

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
