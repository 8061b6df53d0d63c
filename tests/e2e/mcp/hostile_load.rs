//! The apps host under hostile load: bounded listings, probes, sessions; stable names.

use super::*;

/// How many `initialize` and `tools/list` requests a remote_app served.
fn app_stats(app: &App) -> Value {
    let direct = Agent::connect(&app.url, None, None);
    let r = direct.call("datanotes_test_stats", json!({}));
    r.structured_content.unwrap()
}

/// Waits until the app's lastError contains `what`; answers the entry.
fn wait_error(s: &Server, name: &str, what: &str) -> Value {
    let mut e = Value::Null;
    eventually(&format!("app {name}'s lastError names {what}"), || {
        e = entry(s, name);
        e["lastError"].as_str().is_some_and(|m| m.contains(what))
    });
    e
}

#[test]
fn a_hostile_listing_stops_at_its_caps_and_the_previous_tools_stay_listed() {
    let s = Server::start();
    let t = create_app(&s, json!({"name": "planning"}));
    let _good = App::start(&s, "planning", &t, &[]);
    let before = wait_listed(&s, "planning")["tools"].clone();
    let rss0 = s.mib("VmRSS");

    // An endless nextCursor chain (200 tools a page): stopped at 2,000 tools.
    let endless = App::start(
        &s,
        "planning",
        &t,
        &["--endless-listing", "--page-tools", "200"],
    );
    let e = wait_error(&s, "planning", "DATANOTES_APP_MAX_TOOLS");
    let msg = e["lastError"].as_str().unwrap();
    assert!(msg.contains("more than 2000 tools"), "{msg}");
    assert_plain(msg);
    assert_eq!(e["tools"], before, "the previous tools stay listed");
    let lists = app_stats(&endless)["lists"].as_u64().unwrap();
    assert!(lists <= 2000 / 200 + 2, "{lists} pages asked");

    // Padded tools (4 KB descriptions): stopped at 4 MiB.
    let padded = App::start(
        &s,
        "planning",
        &t,
        &[
            "--endless-listing",
            "--page-tools",
            "100",
            "--pad-bytes",
            "4000",
        ],
    );
    wait_error(&s, "planning", "DATANOTES_APP_MAX_LISTING_BYTES");
    let lists = app_stats(&padded)["lists"].as_u64().unwrap();
    assert!(lists <= (4 << 20) / (100 * 4000) + 2, "{lists} pages asked");

    // 100,000 tools in one answer (about 15 MB): refused at the byte cap before it is parsed.
    let _huge = App::start(&s, "planning", &t, &["--huge-listing", "100000"]);
    let e = wait_error(&s, "planning", "over 4194304 bytes");
    assert!(
        e["lastError"]
            .as_str()
            .unwrap()
            .contains("DATANOTES_APP_MAX_LISTING_BYTES"),
        "{e}"
    );
    assert_eq!(e["tools"], before, "the previous tools stay listed");
    let agent = Agent::engine(&s, &s.token, None);
    assert!(agent.names().len() < 200);
    let rss1 = s.mib("VmRSS");
    eprintln!("hostile listings: VmRSS {rss0} -> {rss1} MiB");
    assert!(rss1 < rss0 + 64, "VmRSS {rss0} -> {rss1} MiB");
}

#[test]
fn tools_and_instructions_over_the_caps_are_skipped_or_cut() {
    let s = Server::start();
    let t = create_app(&s, json!({"name": "planning"}));
    let _app = App::start(
        &s,
        "planning",
        &t,
        &[
            "--big-description",
            "20000",
            "--big-schema",
            "70000",
            "--instructions-bytes",
            "30000",
        ],
    );
    let e = wait_listed(&s, "planning");
    let skipped = e["skippedTools"].as_array().unwrap();
    let reason = |n: &str| {
        skipped
            .iter()
            .find(|x| x["name"] == n)
            .unwrap_or_else(|| panic!("{n} not skipped: {e}"))["reason"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let r = reason("planning_big_description");
    assert!(
        r.contains("20000 bytes") && r.contains("DATANOTES_APP_MAX_DESCRIPTION_BYTES"),
        "{r}"
    );
    let r = reason("planning_big_schema");
    assert!(r.contains("DATANOTES_APP_MAX_SCHEMA_BYTES"), "{r}");
    let names = Agent::engine(&s, &s.token, None).names();
    assert!(names.contains(&"planning_echo".to_string()));
    assert!(!names.iter().any(|n| n.starts_with("planning_big")));
    let v = owner_post(&s, "/datanotes/apps/tools/", json!({}));
    let i = v["instructions"].as_str().unwrap();
    assert!(i.contains("App planning: plan tasks"), "{i}");
    assert!(
        i.contains("cut at 16384 bytes of 30000 (DATANOTES_APP_MAX_INSTRUCTIONS_BYTES)"),
        "{}",
        &i[i.len().saturating_sub(300)..]
    );
    assert!(i.len() < 16384 + 2000, "{}", i.len());
}

#[test]
fn probes_of_a_failing_app_back_off() {
    // Probes every 100 ms without backoff would list 60 times in 6 s.
    let s = Server::start_with_env(&[("DATANOTES_APP_PROBE_MS", "100")]);
    let t = create_app(&s, json!({"name": "planning"}));
    let app = App::start(&s, "planning", &t, &["--fail-list"]);
    eventually("the failing app is not reachable", || {
        entry(&s, "planning")["reachable"] == false
    });
    // Its refusal in its own words.
    let e = entry(&s, "planning");
    assert!(
        e["lastError"].as_str().is_some_and(
            |m| m.contains("answered with an error: this app refuses to list its tools")
        ),
        "{e}"
    );
    let n0 = app_stats(&app)["lists"].as_u64().unwrap();
    // A rate: the probes counted over 6 s of time (no state marks the end of a window).
    std::thread::sleep(std::time::Duration::from_secs(6));
    let n1 = app_stats(&app)["lists"].as_u64().unwrap();
    eprintln!("probes of a failing app: {n0} then {n1} after 6 s");
    // 100, 200, 400, 800, 1600, 3200 ms...: at most 7 more in 6 s, and at least one.
    assert!(n1 > n0, "{n0} -> {n1}: no more probes");
    assert!(n1 - n0 <= 7, "{n0} -> {n1}: probes do not back off");
    assert_eq!(entry(&s, "planning")["reachable"], false);
}

#[test]
fn distinct_actors_share_one_session_with_the_app() {
    let s = Server::start();
    let t = create_app(&s, json!({"name": "planning"}));
    let app = App::start(&s, "planning", &t, &[]);
    wait_listed(&s, "planning");
    for i in 0..200 {
        let actor = format!("harness-{i} / model-{i}");
        let v = http_call(&s, &s.token, Some(&actor), "planning_echo", json!({}));
        assert_eq!(v["ok"], true, "{v}");
        assert_eq!(v["value"]["structuredContent"]["actor"], actor.as_str());
    }
    // Over MCP too: the actor travels with each call.
    let agent = Agent::engine(&s, &s.token, Some("mcp-harness / mcp-model"));
    let r = agent.call("planning_echo", json!({}));
    assert_eq!(
        r.structured_content.unwrap()["actor"],
        "mcp-harness / mcp-model"
    );
    // One listing session, one call session (HTTP), one for the MCP agent's session, and
    // this test's own.
    let n = app_stats(&app)["initializes"].as_u64().unwrap();
    assert!(n <= 4, "{n} sessions opened with the app for 201 actors");
    // A second agent gets a session of its own; the first keeps its.
    let other = Agent::engine(&s, &s.token, Some("other / model"));
    other.call("planning_echo", json!({}));
    agent.call("planning_echo", json!({}));
    other.call("planning_echo", json!({}));
    let m = app_stats(&app)["initializes"].as_u64().unwrap();
    // (Reading the app's stats opens a session of the test's own each time.)
    assert_eq!(m, n + 2, "one more session, for the second agent");
}

/// `initialize` then `notifications/initialized` on `/mcp`, raw; answers the session id.
fn raw_session(s: &Server, token: &str) -> String {
    mcp::RawSession::open(s, token, "2025-06-18").id
}

fn raw_post(
    s: &Server,
    http: &reqwest::blocking::Client,
    token: &str,
    sid: &str,
    body: Value,
) -> (u16, String) {
    let r = http
        .post(format!("{}/mcp", s.url))
        .bearer_auth(token)
        .header("accept", "application/json, text/event-stream")
        .header("mcp-session-id", sid)
        .json(&body)
        .send()
        .unwrap();
    (r.status().as_u16(), r.text().unwrap_or_default())
}

fn ping(s: &Server, http: &reqwest::blocking::Client, token: &str, sid: &str) -> (u16, String) {
    raw_post(
        s,
        http,
        token,
        sid,
        json!({"jsonrpc": "2.0", "id": 9, "method": "ping"}),
    )
}

#[test]
fn mcp_sessions_are_capped_per_token_and_in_all() {
    // No session idles out during the test (the default idle time), however slow the machine:
    // every count below is the caps' alone.
    let s = Server::start_with_env(&[
        ("DATANOTES_MCP_SESSIONS_PER_TOKEN", "4"),
        ("DATANOTES_MCP_SESSIONS", "6"),
    ]);
    let nobody = create_app(&s, json!({"name": "nobody"}));
    let http = reqwest::blocking::Client::new();
    let rss0 = s.mib("VmRSS");
    // 500 sessions from a token with no rights: only the last 4 stay open.
    let ids: Vec<String> = (0..500).map(|_| raw_session(&s, &nobody)).collect();
    let rss1 = s.mib("VmRSS");
    eprintln!("500 MCP sessions: VmRSS {rss0} -> {rss1} MiB");
    assert!(rss1 < rss0 + 32, "VmRSS {rss0} -> {rss1} MiB");
    let open: Vec<bool> = ids
        .iter()
        .map(|id| ping(&s, &http, &nobody, id).0 == 200)
        .collect();
    assert_eq!(open.iter().filter(|o| **o).count(), 4);
    assert!(open[496..].iter().all(|o| *o));
    let (st, body) = ping(&s, &http, &nobody, &ids[0]);
    assert_eq!(st, 404);
    assert!(
        body.contains("expired or was closed") && body.contains("initialize"),
        "{body}"
    );

    // The owner's 4 sessions: 8 in all, over 6: the least recently used (nobody's) go first.
    let mine: Vec<String> = (0..4).map(|_| raw_session(&s, &s.token)).collect();
    for id in &mine {
        assert_eq!(ping(&s, &http, &s.token, id).0, 200);
    }
    let still: usize = ids[496..]
        .iter()
        .filter(|id| ping(&s, &http, &nobody, id).0 == 200)
        .count();
    assert_eq!(still, 2);
}

#[test]
fn an_mcp_session_idle_for_longer_than_allowed_expires_and_says_so() {
    let s = Server::start_with_env(&[("DATANOTES_MCP_SESSION_IDLE_MS", "5000")]);
    let http = reqwest::blocking::Client::new();
    let t0 = std::time::Instant::now();
    let id = raw_session(&s, &s.token);
    let (st, body) = ping(&s, &http, &s.token, &id);
    assert!(
        t0.elapsed() < std::time::Duration::from_secs(5),
        "the machine took over 5 s to open a session and ping it: the check below would mean nothing"
    );
    assert_eq!(st, 200, "{body}");
    // Idle for longer than 5 s: expired, and said so. Time itself is what is waited for: a poll
    // would use the session and keep it alive.
    std::thread::sleep(std::time::Duration::from_millis(5500));
    let (st, body) = ping(&s, &http, &s.token, &id);
    assert_eq!(st, 404, "{body}");
    assert!(body.contains("idle for more than 5 s"), "{body}");
}

#[test]
fn a_name_an_app_holds_stays_with_it_whatever_the_registration_order() {
    let s = Server::start();
    let ta = create_app(&s, json!({"name": "alpha"}));
    let tb = create_app(&s, json!({"name": "beta"}));
    let _a = App::start(&s, "alpha", &ta, &[]);
    let _b = App::start(&s, "beta", &tb, &["--tool", "shared"]);
    wait_listed(&s, "alpha");
    wait_listed(&s, "beta");
    let agent = Agent::engine(&s, &s.token, None);
    assert_eq!(
        text(&agent.call("shared", json!({}))),
        "shared served by beta"
    );

    // alpha, registered earlier, adds beta's name at a refresh: beta keeps it.
    let _a2 = App::start(&s, "alpha", &ta, &["--tool", "shared"]);
    let r = owner_post(&s, "/datanotes/apps/refresh/", json!({"name": "alpha"}));
    assert_eq!(
        r["app"]["skippedTools"],
        json!([{"name": "shared", "takenBy": "beta"}]),
        "{r}"
    );
    assert_eq!(
        text(&agent.call("shared", json!({}))),
        "shared served by beta"
    );
    let v = http_call(&s, &s.token, None, "shared", json!({}));
    assert_eq!(v["servedBy"], "beta");

    // The other order: beta, registered later, adds alpha's tool name: alpha keeps it.
    let _b2 = App::start(
        &s,
        "beta",
        &tb,
        &["--tool", "shared", "--tool", "alpha_echo"],
    );
    let r = owner_post(&s, "/datanotes/apps/refresh/", json!({"name": "beta"}));
    assert_eq!(
        r["app"]["skippedTools"],
        json!([{"name": "alpha_echo", "takenBy": "alpha"}]),
        "{r}"
    );
    assert_eq!(
        entry(&s, "alpha")["skippedTools"],
        json!([{"name": "shared", "takenBy": "beta"}])
    );

    // beta stops listing `shared`: alpha gets it at its next refresh.
    let _b3 = App::start(&s, "beta", &tb, &[]);
    owner_post(&s, "/datanotes/apps/refresh/", json!({"name": "beta"}));
    let r = owner_post(&s, "/datanotes/apps/refresh/", json!({"name": "alpha"}));
    assert_eq!(r["app"]["skippedTools"], json!([]), "{r}");
    assert_eq!(
        text(&agent.call("shared", json!({}))),
        "shared served by alpha"
    );
}

/// Each engine operation is listed with annotations from its access class, as rmcp's client
/// reads them: reads are read-only and idempotent, deletes and maintenance may destroy, and
/// none reaches beyond the vault.
#[test]
fn engine_operations_carry_annotations_from_their_access_class() {
    let s = Server::start();
    let agent = Agent::owner(&s);
    let tools = agent.tools();
    let ann = |name: &str| {
        let t = tools
            .iter()
            .find(|t| t.name == name)
            .unwrap_or_else(|| panic!("{name}"));
        serde_json::to_value(t.annotations.as_ref().expect("annotations")).unwrap()
    };
    assert_eq!(
        ann("list_tables"),
        json!({"title": "List tables", "readOnlyHint": true, "destructiveHint": false,
               "idempotentHint": true, "openWorldHint": false})
    );
    assert_eq!(ann("insert_row")["readOnlyHint"], false);
    assert_eq!(ann("insert_row")["destructiveHint"], false);
    assert_eq!(ann("delete_row")["destructiveHint"], true);
    assert_eq!(ann("drop_table")["destructiveHint"], true);
    assert_eq!(ann("vacuum")["destructiveHint"], true);
    assert!(
        tools
            .iter()
            .filter(|t| ops_names().contains(&t.name.to_string()))
            .all(|t| t.annotations.as_ref().is_some_and(|a| a.title.is_some())),
        "every operation has a title"
    );
}

/// The engine's operations, by name.
fn ops_names() -> Vec<String> {
    datanotes::ops::describe_all()
        .iter()
        .map(|o| o["name"].as_str().unwrap().to_string())
        .collect()
}
