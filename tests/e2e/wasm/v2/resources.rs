//! A 0.2 guest's resources, resource template and prompt join the namespace, named by the app,
//! and are followed by subscription (a session's or a 2026-07-28 listen).

use super::*;

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
