//! A remote app's resources, templates, prompts and completions reach the agent named by the
//! app; its hostile ones skipped, its big answers refused unread, a token's rights deciding.

use super::*;

#[test]
fn an_apps_resources_prompts_and_completions_reach_the_agent_named_by_the_app() {
    let s = Server::start();
    create_tasks(&s);
    let rt = runtime();
    let (url, shelf) = serve_app(&rt);
    create_app(&s, json!({"name": "shelf", "mcp_url": url}));
    let (c, u) = connect(&rt, &s, &s.token);
    eventually("the app's tool is listed", || {
        rt.block_on(c.list_all_tools())
            .unwrap()
            .iter()
            .any(|t| t.name == "shelf_show")
    });

    // Its tool's UI resource is named by the app; so are the URIs in its result.
    let tools = rt.block_on(c.list_all_tools()).unwrap();
    let show = tools.iter().find(|t| t.name == "shelf_show").unwrap();
    let meta = serde_json::to_value(&show.meta).unwrap();
    assert_eq!(meta["ui"]["resourceUri"], "ui://shelf/shelf/view.html");
    // A tool for its view only is listed, marked so (hosts keep it from the model), and left
    // out of what the engine tells agents (describe_table's tools).
    let refresh = tools.iter().find(|t| t.name == "shelf_refresh").unwrap();
    let meta = serde_json::to_value(&refresh.meta).unwrap();
    assert_eq!(meta["ui"]["visibility"], json!(["app"]));
    assert_eq!(meta["ui"]["resourceUri"], "ui://shelf/shelf/view.html");
    let d = s.ok("describe_table", json!({"table": "work.crm.tasks"}));
    let names: Vec<&str> = d["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["shelf_show"], "{d}");
    let r = ask(
        &rt,
        &c,
        "tools/call",
        json!({"name": "shelf_show", "arguments": {}}),
    );
    assert_eq!(r["content"][1]["uri"], "file://shelf//a.txt", "{r}");
    assert_eq!(
        r["content"][2]["resource"]["uri"], "file://shelf//b.txt",
        "{r}"
    );

    // A JSON-RPC error of the app reaches the agent as it is, data and all, on both paths
    // (rmcp's, for a call with a progress token; the lean JSON one); HTTP reads an error result.
    for progress in [false, true] {
        let mut p = json!({"name": "shelf_fail", "arguments": {}});
        if progress {
            p["_meta"] = json!({"progressToken": 1});
        }
        let e = ask(&rt, &c, "tools/call", p);
        assert_eq!(e["error"]["code"], -32042, "{e}");
        assert_eq!(e["error"]["message"], "this needs the user at a URL");
        assert_eq!(
            e["error"]["data"]["elicitations"][0]["elicitationId"], "e1",
            "{e}"
        );
    }
    let (st, v) = s.post(
        "/datanotes/apps/call/",
        Some(&s.token),
        &json!({"tool": "shelf_fail", "arguments": {}}),
    );
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["ok"], false, "{v}");
    assert_eq!(
        v["value"]["content"][0]["text"],
        "this needs the user at a URL"
    );

    // Listed after the vault's; the hostile ones skipped, each with why.
    let (all, _) = all_resources(&rt, &c);
    let apps: Vec<String> = uris(&all)
        .into_iter()
        .filter(|u| !u.starts_with("datanotes://"))
        .collect();
    assert_eq!(
        apps,
        [
            "file://shelf//a.txt",
            "ui://shelf/shelf/view.html",
            "file://shelf//big"
        ]
    );
    let view = all.iter().find(|r| r["name"] == "view").unwrap();
    assert_eq!(view["mimeType"], "text/html;profile=mcp-app");
    assert_eq!(view["_meta"]["ui"]["prefersBorder"], true, "{view}");
    let entry = s.ok_route("apps/get", json!({"name": "shelf"}))["app"].clone();
    let skipped = entry["skippedResources"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(skipped.len(), 4, "{entry}");
    assert!(
        skipped
            .iter()
            .all(|x| x["uri"].as_str().unwrap().len() <= 200)
    );
    assert!(
        !entry.to_string().contains("\\u0000"),
        "no control character shown: {entry}"
    );
    assert!(entry.to_string().contains("a .. segment"), "{entry}");

    // Read through the served URI; the app is asked with its own.
    let r = ask(
        &rt,
        &c,
        "resources/read",
        json!({"uri": "ui://shelf/shelf/view.html"}),
    );
    assert_eq!(r["contents"][0]["text"], "<p>view</p>", "{r}");
    assert_eq!(r["contents"][0]["uri"], "ui://shelf/shelf/view.html");
    // A 20 MB answer is refused unread; the server's memory stays bounded.
    let rss = s.mib("VmRSS");
    let e = ask(
        &rt,
        &c,
        "resources/read",
        json!({"uri": "file://shelf//big"}),
    );
    assert!(e.get("error").is_some(), "{e}");
    assert!(s.mib("VmRSS") < rss + 40, "RSS {rss} → {}", s.mib("VmRSS"));
    let e = ask(
        &rt,
        &c,
        "resources/read",
        json!({"uri": "file://shelf//nope"}),
    );
    assert!(e.to_string().contains("no file:///nope"), "{e}");

    // Templates, named too.
    let t = ask(&rt, &c, "resources/templates/list", json!({}));
    assert!(t.to_string().contains("file://shelf//{name}"), "{t}");

    // Prompts: the one that shadows an operation is skipped.
    let (p, names) = prompt_names(&rt, &c);
    assert_eq!(names, ["shelf_prompt"], "{p}");
    assert_eq!(entry["skippedPrompts"][0]["takenBy"], "engine", "{entry}");
    let g = ask(
        &rt,
        &c,
        "prompts/get",
        json!({"name": "shelf_prompt", "arguments": {"topic": "apples"}}),
    );
    assert_eq!(
        g["messages"][0]["content"]["text"], "tell me about apples",
        "{g}"
    );
    assert_eq!(
        g["messages"][1]["content"]["resource"]["uri"],
        "file://shelf//a.txt"
    );
    let r = ask(
        &rt,
        &c,
        "completion/complete",
        json!({"ref": {"type": "ref/prompt", "name": "shelf_prompt"},
               "argument": {"name": "topic", "value": "ap"}}),
    );
    assert_eq!(
        r["completion"]["values"],
        json!(["apple", "apricot"]),
        "{r}"
    );

    // A subscription is passed to the app; its update comes back under the served URI.
    let e = ask(
        &rt,
        &c,
        "resources/subscribe",
        json!({"uri": "file://shelf//a.txt"}),
    );
    assert!(e.get("error").is_none(), "{e}");
    eventually("the app's update", || {
        u.0.lock()
            .unwrap()
            .iter()
            .any(|x| x == "file://shelf//a.txt")
    });
    assert!(
        shelf
            .asked
            .lock()
            .unwrap()
            .iter()
            .any(|m| m == "resources/subscribe")
    );

    // A token that may call none of the app's tools sees none of its resources and prompts,
    // and may not read them; one that may call its tools sees them.
    let tok = create_app(&s, json!({"name": "other", "call_tools": ["list_*"]}));
    let (o, _) = connect(&rt, &s, &tok);
    let (all, _) = all_resources(&rt, &o);
    assert!(
        uris(&all).iter().all(|u| u.starts_with("datanotes://")),
        "{all:?}"
    );
    assert_eq!(
        ask(&rt, &o, "prompts/list", json!({}))["prompts"],
        json!([])
    );
    let e = ask(
        &rt,
        &o,
        "resources/read",
        json!({"uri": "file://shelf//a.txt"}),
    );
    assert!(e.to_string().contains("may call none of its tools"), "{e}");
    let tok = create_app(&s, json!({"name": "third", "call_tools": ["shelf_*"]}));
    let (t3, _) = connect(&rt, &s, &tok);
    let r = ask(
        &rt,
        &t3,
        "resources/read",
        json!({"uri": "file://shelf//a.txt"}),
    );
    assert_eq!(r["contents"][0]["text"], "alpha", "{r}");

    // With a tool prefix, the app's prompts are listed with it, as its tools are (the one that
    // shadowed an operation is reachable now); asked and completed by the served name, the app
    // is asked by its own.
    s.ok_route(
        "apps/update",
        json!({"name": "shelf", "tool_prefix": "sh_"}),
    );
    eventually("the prompts prefixed", || {
        ask(&rt, &c, "prompts/list", json!({}))["prompts"]
            .as_array()
            .is_some_and(|p| p.iter().any(|p| p["name"] == "sh_shelf_prompt"))
    });
    let (p, names) = prompt_names(&rt, &c);
    assert_eq!(names, ["sh_shelf_prompt", "sh_list_tables"], "{p}");
    let g = ask(
        &rt,
        &c,
        "prompts/get",
        json!({"name": "sh_shelf_prompt", "arguments": {"topic": "pears"}}),
    );
    assert_eq!(
        g["messages"][0]["content"]["text"], "tell me about pears",
        "{g}"
    );
    let old = ask(&rt, &c, "prompts/get", json!({"name": "shelf_prompt"}));
    assert!(old.get("error").is_some(), "{old}");
    let r = ask(
        &rt,
        &c,
        "completion/complete",
        json!({"ref": {"type": "ref/prompt", "name": "sh_shelf_prompt"},
               "argument": {"name": "topic", "value": "ba"}}),
    );
    assert_eq!(r["completion"]["values"], json!(["banana"]), "{r}");
}
