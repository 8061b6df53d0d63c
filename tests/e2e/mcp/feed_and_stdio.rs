//! Rights over MCP, tool calls in the feed, results passed through intact, the planning app
//! end to end, the stdio door and the agent example.

use super::*;

#[test]
fn an_app_token_writing_outside_its_scope_over_mcp_is_refused() {
    let s = Server::start();
    tasks_table(&s);
    s.ok(
        "create_table",
        json!({"table": "work.crm.leads", "columns": {"name": {"type": "text", "required": true}}}),
    );
    let t = create_app(
        &s,
        json!({"name": "planning", "write": ["personal.tasks.items"]}),
    );
    let before = snapshot(&s.dir);
    let seq_before = seq(&s);

    let agent = Agent::engine(&s, &t, Some("scoped / m"));
    let r = agent.call(
        "insert_row",
        json!({"table": "work.crm.leads", "values": {"name": "Ada"}}),
    );
    assert!(is_error(&r), "{r:?}");
    let t0 = text(&r);
    assert!(
        t0.contains("app planning may not write work.crm.leads"),
        "{t0}"
    );
    assert_eq!(
        r.structured_content.as_ref().unwrap()["error"]["code"],
        "forbidden"
    );
    let r = agent.call(
        "create_table",
        json!({"table": "work.crm.other", "columns": {"x": {"type": "text"}}}),
    );
    assert!(is_error(&r), "{r:?}");
    assert!(text(&r).contains("no ddl right"), "{}", text(&r));
    let r = agent.call("drop_table", json!({"table": "personal.tasks.items"}));
    assert!(is_error(&r), "{r:?}");

    // Nothing changed: no file, no migration (tool-call events aside).
    assert_eq!(snapshot(&s.dir), before);
    let writes: Vec<Value> = changes(&s, seq_before, None);
    assert_eq!(writes, Vec::<Value>::new());
    assert_eq!(
        s.ok("select_rows", json!({"table": "work.crm.leads"}))["total"],
        0
    );

    // Reading is allowed, and so is writing inside the scope.
    assert!(!is_error(&agent.call("list_tables", json!({}))));
    let r = agent.call(
        "insert_row",
        json!({"table": "personal.tasks.items", "values": {"title": "In scope"}}),
    );
    assert!(!is_error(&r), "{r:?}");
    let m = s.ok(
        "list_migrations",
        json!({"table": "personal.tasks.items", "limit": 1}),
    );
    assert_eq!(m["migrations"][0]["actor"]["app"], "planning");
    assert_eq!(m["migrations"][0]["actor"]["harness"], "scoped");

    // The same refusal over HTTP apps/call.
    let v = http_call(
        &s,
        &t,
        None,
        "insert_row",
        json!({"table": "work.crm.leads", "values": {"name": "Alan"}}),
    );
    assert_eq!(v["ok"], false, "{v}");
    assert_eq!(v["value"]["error"]["code"], "forbidden");
}

#[test]
fn tool_calls_are_recorded_in_the_feed_with_their_fields_and_cuts() {
    let s = Server::start();
    tasks_table(&s);
    let t = create_app(
        &s,
        json!({"name": "planning", "write": ["personal.tasks.items"]}),
    );
    let _app = App::start(&s, "planning", &t, &[]);
    wait_listed(&s, "planning");
    let since = seq(&s);

    let agent = Agent::engine(&s, &s.token, Some("feed-harness / feed-model"));
    let r1 = agent.call("list_tables", json!({}));
    let long = "é".repeat(2000);
    let r2 = agent.call("planning_echo", json!({"text": long}));
    let r3 = agent.call(
        "insert_row",
        json!({"table": "no.such.table", "values": {}}),
    );
    // An app's error result (the engine refused its write).
    let r4 = agent.call(
        "planning_add_task",
        json!({"title": "Too big", "estimate": 500}),
    );
    assert!(!is_error(&r1) && !is_error(&r2) && is_error(&r3) && is_error(&r4));

    let mut ev = vec![];
    eventually("four tool_call events", || {
        ev = changes(&s, since, Some(&["tool_call"]));
        ev.len() >= 4
    });
    assert_eq!(ev.len(), 4, "{ev:?}");
    let calls: Vec<&Value> = ev.iter().map(|e| &e["call"]).collect();
    for (e, c) in ev.iter().zip(&calls) {
        assert_eq!(e["op"], "tool_call");
        assert_eq!(e["actor"]["harness"], "feed-harness", "{e}");
        assert_eq!(e["actor"]["model"], "feed-model", "{e}");
        assert!(c["durationMs"].as_f64().is_some_and(|d| d >= 0.0), "{c}");
        assert!(c["summary"].is_string(), "{c}");
        let chars = c["resultChars"].as_u64().unwrap();
        assert!(chars > 0);
        assert_eq!(
            c["resultTokens"].as_u64().unwrap(),
            chars.div_ceil(4),
            "{c}"
        );
        assert!(c["session"].as_str().is_some_and(|x| !x.is_empty()), "{c}");
        assert_eq!(c["session"], calls[0]["session"]);
    }
    let content_chars =
        |r: &CallToolResult| serde_json::to_string(&r.content).unwrap().len() as u64;
    assert_eq!(calls[0]["tool"], "list_tables");
    assert_eq!(calls[0]["ok"], true);
    assert_eq!(calls[0]["servedBy"], "engine");
    assert_eq!(calls[0]["args"], "{}");
    assert_eq!(calls[0]["resultChars"], content_chars(&r1));

    assert_eq!(calls[1]["tool"], "planning_echo");
    assert_eq!(calls[1]["ok"], true);
    assert_eq!(calls[1]["servedBy"], "planning");
    assert_eq!(calls[1]["args"].as_str().unwrap().chars().count(), 300);
    assert!(
        calls[1]["args"]
            .as_str()
            .unwrap()
            .starts_with("{\"text\":\"éé")
    );
    assert_eq!(calls[1]["value"].as_str().unwrap().chars().count(), 1000);
    assert_eq!(calls[1]["resultChars"], content_chars(&r2));

    assert_eq!(calls[2]["tool"], "insert_row");
    assert_eq!(calls[2]["ok"], false);
    assert_eq!(calls[2]["servedBy"], "engine");
    let summary = calls[2]["summary"].as_str().unwrap();
    assert!(
        summary.contains("no.such.table") || summary.contains("no table"),
        "{summary}"
    );

    assert_eq!(calls[3]["tool"], "planning_add_task");
    assert_eq!(calls[3]["ok"], false);
    assert_eq!(calls[3]["servedBy"], "planning");
    let summary = calls[3]["summary"].as_str().unwrap();
    assert!(summary.contains("above the maximum 100"), "{summary}");

    // Consumers that do not ask for tool_call do not see them.
    assert!(
        changes(&s, since, None)
            .iter()
            .all(|c| c["op"] != "tool_call")
    );
}

#[test]
fn app_results_pass_through_intact() {
    let s = Server::start();
    let t = create_app(&s, json!({"name": "planning"}));
    let app = App::start(&s, "planning", &t, &[]);
    wait_listed(&s, "planning");
    let direct = Agent::connect(&app.url, None, None);
    let agent = Agent::engine(&s, &s.token, None);
    for fail in [false, true] {
        let args = json!({"fail": fail});
        let mut d = serde_json::to_value(direct.call("planning_mixed", args.clone())).unwrap();
        let v = serde_json::to_value(agent.call("planning_mixed", args.clone())).unwrap();
        // Modulo the app's name in its resource URIs (the vault's are left as they are).
        assert_eq!(
            v["content"][4]["resource"]["uri"], "file://planning//blob.bin",
            "{v}"
        );
        d["content"][4]["resource"]["uri"] = json!("file://planning//blob.bin");
        assert_eq!(v, d, "through /mcp");
        let kinds: Vec<&str> = v["content"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["type"].as_str().unwrap())
            .collect();
        assert_eq!(kinds, ["text", "image", "audio", "resource", "resource"]);
        assert_eq!(v["isError"], fail);
        assert_eq!(v["structuredContent"]["nested"]["ok"], !fail);
        assert_eq!(v["_meta"]["example/trace"], "mixed-1");
        assert_eq!(v["content"][0]["annotations"]["audience"], json!(["user"]));
        assert_eq!(v["content"][4]["resource"]["blob"], "AAECAw==");

        let h = http_call(&s, &s.token, None, "planning_mixed", args);
        assert_eq!(h["ok"], !fail, "{h}");
        assert_eq!(h["value"], d, "through apps/call");
    }
}

#[test]
fn the_planning_app_reads_writes_follows_the_feed_and_declares_its_table() {
    let s = Server::start();
    tasks_table(&s);
    let t = create_app(
        &s,
        json!({"name": "planning", "write": ["personal.tasks.items"]}),
    );
    let _app = App::start(&s, "planning", &t, &[]);
    wait_listed(&s, "planning");

    // describe_table shows the tools that declare the table, with their app.
    let d = s.ok("describe_table", json!({"table": "personal.tasks.items"}));
    let mut tools: Vec<(String, String)> = d["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["name"].as_str().unwrap().to_string(),
                t["app"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    tools.sort();
    let p = |n: &str| (n.to_string(), "planning".to_string());
    assert_eq!(
        tools,
        [
            p("planning_add_task"),
            p("planning_complete_task"),
            p("planning_list_tasks")
        ]
    );
    let listed = Agent::engine(&s, &s.token, None).tools();
    let add = listed
        .iter()
        .find(|t| t.name == "planning_add_task")
        .unwrap();
    assert_eq!(
        add.meta.as_ref().unwrap().0["datanotes/tables"],
        json!(["personal.tasks.items"])
    );

    let agent = Agent::engine(&s, &s.token, Some("plan-harness / plan-model"));
    let r = agent.call(
        "planning_add_task",
        json!({"title": "Call Ada", "estimate": 2}),
    );
    assert!(!is_error(&r), "{r:?}");
    assert_eq!(r.structured_content.unwrap()["id"], "call-ada");
    // The engine's refusal passes through the app as an error result.
    let r = agent.call(
        "planning_add_task",
        json!({"title": "Too big", "estimate": 500}),
    );
    assert!(is_error(&r), "{r:?}");
    assert!(text(&r).contains("above the maximum 100"), "{}", text(&r));
    let r = agent.call("planning_list_tasks", json!({"status": "todo"}));
    assert_eq!(r.structured_content.unwrap()["rows"][0]["id"], "call-ada");
    let r = agent.call("planning_complete_task", json!({"id": "call-ada"}));
    assert!(!is_error(&r), "{r:?}");
    let row = s.ok(
        "get_row",
        json!({"table": "personal.tasks.items", "id": "call-ada"}),
    );
    assert_eq!(row["values"]["status"], "done");
    // Journaled as the app, for the agent that called it.
    let m = s.ok(
        "list_migrations",
        json!({"table": "personal.tasks.items", "limit": 1}),
    );
    let actor = &m["migrations"][0]["actor"];
    assert_eq!(actor["app"], "planning", "{actor}");
    assert_eq!(actor["harness"], "plan-harness", "{actor}");
    assert_eq!(actor["model"], "plan-model", "{actor}");

    // A hand-made change is seen by the app's feed follower too.
    s.ok(
        "insert_row",
        json!({"table": "personal.tasks.items", "values": {"title": "By the owner"}}),
    );
    eventually("the app saw 3 changes", || {
        let r = agent.call("planning_changes_seen", json!({}));
        r.structured_content.unwrap()["seen"] == 3
    });
    let r = agent.call("planning_changes_seen", json!({}));
    assert_eq!(
        r.structured_content.unwrap()["ops"],
        json!(["insert", "update", "insert"])
    );
}

#[test]
fn the_stdio_door_lists_and_calls_tools() {
    let s = Server::start();
    let t = create_app(&s, json!({"name": "planning"}));
    let _app = App::start(&s, "planning", &t, &[]);
    wait_listed(&s, "planning");
    let want = Agent::engine(&s, &s.token, None).names();
    let since = seq(&s);

    let rt = runtime();
    rt.block_on(async {
        let mut child = tokio::process::Command::new(bin())
            .args(["mcp", "--url", &s.url, "--token", &s.token])
            .env("DATANOTES_LOG", "warn")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("start datanotes mcp");
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        // A desktop client whose name has a slash and whose version looks like a model's.
        let mut hello = rmcp::model::ClientConfig::default();
        hello.client_info = rmcp::model::Implementation::new("desk/top", "opus-9");
        let client = hello.serve((stdout, stdin)).await.expect("stdio handshake");
        let info = client.peer_info().unwrap();
        assert_eq!(info.server_info.as_ref().unwrap().name, "datanotes-mcp");
        let names: Vec<String> = client
            .list_all_tools()
            .await
            .unwrap()
            .iter()
            .map(|t| t.name.to_string())
            .collect();
        assert_eq!(names, want);
        let r = client
            .call_tool(CallToolRequestParams::new("list_tables"))
            .await
            .unwrap();
        assert!(!is_error(&r), "{r:?}");
        let mut a = serde_json::Map::new();
        a.insert("text".into(), json!("via stdio"));
        let r = client
            .call_tool(CallToolRequestParams::new("planning_echo").with_arguments(a))
            .await
            .unwrap();
        assert!(!is_error(&r), "{r:?}");
        let sc = r.structured_content.unwrap();
        assert_eq!(sc["text"], "via stdio");
        // The stdio client's name is the harness, whole; its version is not a model.
        assert_eq!(sc["actor"], "desk/top", "{sc}");
        client.cancel().await.unwrap();
        let status = tokio::time::timeout(std::time::Duration::from_secs(10), child.wait())
            .await
            .expect("datanotes mcp exits when its client goes away")
            .unwrap();
        assert!(status.success(), "{status}");
    });
    // Tool-call events are committed with the writer's next batch, after the answer.
    let mut ev = vec![];
    eventually("both tool_call events", || {
        ev = changes(&s, since, Some(&["tool_call"]));
        ev.len() >= 2
    });
    let tools: Vec<&str> = ev
        .iter()
        .map(|e| e["call"]["tool"].as_str().unwrap())
        .collect();
    assert_eq!(tools, ["list_tables", "planning_echo"]);
    assert_eq!(ev[1]["call"]["servedBy"], "planning");
    // The same actor as a client of /mcp with that name (delete_ends_a_session_with_204).
    for e in &ev {
        assert_eq!(e["actor"]["harness"], "desk/top", "{e}");
        assert_eq!(e["actor"]["model"], Value::Null, "{e}");
        assert_eq!(e["actor"]["label"], "desk/top", "{e}");
    }
}

#[test]
fn the_agent_example_lists_and_calls_tools() {
    let s = Server::start();
    let run = |args: &[&str]| {
        let out = Command::new(example("agent"))
            .args(["--url", &s.url])
            .args(args)
            .env("DATANOTES_TOKEN", &s.token)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).to_string(),
        )
    };
    let (code, out) = run(&["list"]);
    assert_eq!(code, Some(0));
    let names: Vec<&str> = out.lines().map(|l| l.split('\t').next().unwrap()).collect();
    assert_eq!(names, operation_names(&s));

    let (code, out) = run(&["--actor", "example / m", "call", "list_tables", "{}"]);
    assert_eq!(code, Some(0), "{out}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["structuredContent"]["tables"], json!([]));

    let (code, out) = run(&["call", "insert_row", r#"{"table": "a.b.c", "values": {}}"#]);
    assert_eq!(code, Some(2), "{out}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["isError"], true);
}

#[test]
fn the_stdio_door_survives_an_engine_restart() {
    let mut s = Server::start();
    let t = create_app(&s, json!({"name": "planning"}));
    let _app = App::start(&s, "planning", &t, &[]);
    wait_listed(&s, "planning");
    let addr = s.url.trim_start_matches("http://").to_string();
    let url = s.url.clone();
    let token = s.token.clone();

    let rt = runtime();
    let mut child = rt.block_on(async {
        tokio::process::Command::new(bin())
            .args(["mcp", "--url", &url, "--token", &token])
            .env("DATANOTES_LOG", "warn")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("start datanotes mcp")
    });
    let stdin = child.stdin.take().unwrap();
    let stdout = child.stdout.take().unwrap();
    let client = rt
        .block_on(async { ().serve((stdout, stdin)).await })
        .expect("stdio handshake");
    let echo = |client: &RunningService<RoleClient, ()>| {
        let mut a = serde_json::Map::new();
        a.insert("text".into(), json!("via stdio"));
        rt.block_on(client.call_tool(CallToolRequestParams::new("planning_echo").with_arguments(a)))
    };
    let r = echo(&client).unwrap();
    assert!(!is_error(&r), "{r:?}");
    let actor = r.structured_content.unwrap()["actor"].clone();
    assert!(
        actor.as_str().is_some_and(|a| a.starts_with("rmcp")),
        "{actor}"
    );

    // The engine restarts on the same address; the desktop client keeps its stdio door.
    // SIGTERM: the server stops promptly although the proxy holds an MCP stream open and the
    // app a long poll on the feed.
    let t0 = std::time::Instant::now();
    s.stop();
    assert!(
        t0.elapsed() < std::time::Duration::from_secs(4),
        "stopping took {:?}",
        t0.elapsed()
    );
    let dir = s.dir.clone();
    let s2 = Server::start_opts(&dir, &["--listen", &addr], &[]);
    wait_listed(&s2, "planning");
    let r = echo(&client).expect("a call after the engine restarted");
    assert!(!is_error(&r), "{r:?}");
    assert_eq!(r.structured_content.unwrap()["actor"], actor);
    rt.block_on(client.cancel()).unwrap();
    drop(s);
}
