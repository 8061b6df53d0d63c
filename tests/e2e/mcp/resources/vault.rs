//! The vault as resources: every table and row, paged, read as its file, addressed by template,
//! completed, and followed by subscription, over HTTP and through `datanotes mcp`.

use super::*;

#[test]
fn the_vault_is_resources_paged_read_completed_and_followed() {
    let s = Server::start();
    create_tasks(&s);
    for i in 0..250 {
        s.ok(
            "insert_row",
            json!({"table": "work.crm.tasks", "id": format!("t{i:03}"), "values": {"title": format!("task {i}")}}),
        );
    }
    let rt = runtime();
    let (c, u) = connect(&rt, &s, &s.token);
    let (all, sizes) = all_resources(&rt, &c);
    assert!(sizes.iter().all(|&n| n <= 100), "{sizes:?}");
    let u_all = uris(&all);
    assert_eq!(u_all[0], "datanotes://tables/work.crm.people");
    assert!(u_all.contains(&"datanotes://tables/work.crm.tasks".to_string()));
    let rows: Vec<&String> = u_all.iter().filter(|x| x.contains("tasks/rows/")).collect();
    assert_eq!(rows.len(), 250, "every row once");
    assert_eq!(rows[0], "datanotes://tables/work.crm.tasks/rows/t000");
    assert_eq!(all[1]["mimeType"], "text/markdown");
    assert_eq!(u_all[1], "datanotes://tables/work.crm.people/rows/ada");

    // A row reads as its file on disk; the definition as its _table.yaml.
    let r = ask(
        &rt,
        &c,
        "resources/read",
        json!({"uri": "datanotes://tables/work.crm.tasks/rows/t007"}),
    );
    let file = std::fs::read_to_string(s.row_path("work.crm.tasks", "t007")).unwrap();
    assert_eq!(r["contents"][0]["text"], file, "{r}");
    assert_eq!(r["contents"][0]["mimeType"], "text/markdown");
    let r = ask(
        &rt,
        &c,
        "resources/read",
        json!({"uri": "datanotes://tables/work.crm.tasks"}),
    );
    assert!(
        r["contents"][0]["text"]
            .as_str()
            .unwrap()
            .contains("columns"),
        "{r}"
    );
    // Bad URIs say what is wrong.
    for (uri, says) in [
        ("datanotes://tables/work.crm.tasks/rows/nope", "no row nope"),
        ("datanotes://tables/work.crm.tasks/rows/BAD", "row id"),
        ("datanotes://tables/no.such.table", "no.such.table"),
        ("datanotes://elsewhere", "not a resource of the vault"),
    ] {
        let e = ask(&rt, &c, "resources/read", json!({"uri": uri}));
        let m = e["error"]["message"].as_str().unwrap_or("");
        assert!(m.contains(says), "{uri}: {e}");
    }

    // Templates, and completion of their table and id.
    let t = ask(&rt, &c, "resources/templates/list", json!({}));
    let templates: Vec<&str> = t["resourceTemplates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["uriTemplate"].as_str().unwrap())
        .collect();
    assert!(
        templates.contains(&"datanotes://tables/{table}/rows/{id}"),
        "{t}"
    );
    let complete = |arg: &str, value: &str, ctx: Value| {
        ask(
            &rt,
            &c,
            "completion/complete",
            json!({"ref": {"type": "ref/resource", "uri": "datanotes://tables/{table}/rows/{id}"},
                   "argument": {"name": arg, "value": value}, "context": {"arguments": ctx}}),
        )
    };
    let r = complete("table", "work.crm.t", json!({}));
    assert_eq!(r["completion"]["values"], json!(["work.crm.tasks"]), "{r}");
    let r = complete("id", "t24", json!({"table": "work.crm.tasks"}));
    assert_eq!(
        r["completion"]["values"],
        json!([
            "t240", "t241", "t242", "t243", "t244", "t245", "t246", "t247", "t248", "t249"
        ]),
        "{r}"
    );
    let r = complete("id", "t", json!({"table": "work.crm.tasks"}));
    assert_eq!(r["completion"]["values"].as_array().unwrap().len(), 100);
    assert_eq!(r["completion"]["hasMore"], true);

    // A subscription to a row and to a table is fed by the change feed.
    let row = "datanotes://tables/work.crm.tasks/rows/t001";
    assert!(
        ask(&rt, &c, "resources/subscribe", json!({"uri": row}))
            .get("error")
            .is_none()
    );
    s.ok(
        "update_row",
        json!({"table": "work.crm.tasks", "id": "t001", "values": {"title": "changed"}}),
    );
    eventually("the row's update", || {
        u.0.lock().unwrap().iter().any(|x| x == row)
    });
    s.ok(
        "update_row",
        json!({"table": "work.crm.tasks", "id": "t002", "values": {"title": "changed"}}),
    );
    // Then t001 again: once its second update is seen, one of t002 would have been too.
    s.ok(
        "update_row",
        json!({"table": "work.crm.tasks", "id": "t001", "values": {"title": "changed again"}}),
    );
    eventually_ok("the row's second update", || {
        let seen = u.0.lock().unwrap().clone();
        if seen.iter().filter(|x| *x == row).count() >= 2 {
            Ok(())
        } else {
            Err(format!("{seen:?}"))
        }
    });
    assert!(
        !u.0.lock().unwrap().iter().any(|x| x.ends_with("/t002")),
        "no update of a row nobody subscribed to"
    );
    let table = "datanotes://tables/work.crm.tasks";
    ask(&rt, &c, "resources/subscribe", json!({"uri": table}));
    s.ok(
        "delete_row",
        json!({"table": "work.crm.tasks", "id": "t003"}),
    );
    eventually("the table's update", || {
        u.0.lock().unwrap().iter().any(|x| x == table)
    });

    // The same through `datanotes mcp`, as a desktop client: listed, read, completed, followed.
    let du = Updates::default();
    let (desk, mut child) = rt.block_on(async {
        let mut child = tokio::process::Command::new(bin())
            .args(["mcp", "--url", &s.url, "--token", &s.token])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("start datanotes mcp");
        let (i, o) = (child.stdin.take().unwrap(), child.stdout.take().unwrap());
        (du.clone().serve((o, i)).await.unwrap(), child)
    });
    let page = ask(&rt, &desk, "resources/list", json!({}));
    assert_eq!(
        page["resources"][0]["uri"], "datanotes://tables/work.crm.people",
        "{page}"
    );
    let r = ask(&rt, &desk, "resources/read", json!({"uri": row}));
    let file = std::fs::read_to_string(s.row_path("work.crm.tasks", "t001")).unwrap();
    assert_eq!(r["contents"][0]["text"], file, "{r}");
    let r = ask(
        &rt,
        &desk,
        "completion/complete",
        json!({"ref": {"type": "ref/resource", "uri": "datanotes://tables/{table}/rows/{id}"},
               "argument": {"name": "table", "value": "work.crm.p"}}),
    );
    assert_eq!(r["completion"]["values"], json!(["work.crm.people"]), "{r}");
    ask(&rt, &desk, "resources/subscribe", json!({"uri": row}));
    s.ok(
        "update_row",
        json!({"table": "work.crm.tasks", "id": "t001", "values": {"title": "again"}}),
    );
    eventually("the row's update through datanotes mcp", || {
        du.0.lock().unwrap().iter().any(|x| x == row)
    });
    rt.block_on(async {
        let _ = desk.cancel().await;
        let _ = child.kill().await;
    });
}
