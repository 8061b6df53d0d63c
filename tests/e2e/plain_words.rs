//! What an agent or an owner reads when an app or the server cannot be reached: plain words
//! (which address, what it answered, what to check), never a Rust type name; and what the
//! server's log says about it: one line per change of an app's reachability, naming the app.

use crate::kit::*;
use rmcp::ServiceExt;
use serde_json::{Value, json};
use std::io::{Read, Write};
use std::net::TcpListener;
use std::process::{Command, Stdio};

/// What an agent or an owner reads names no Rust type.
fn assert_plain(msg: &str) {
    for bad in [
        "::",
        "<",
        "Transport",
        "Client error",
        "reqwest",
        "Os {",
        "(Connect)",
        "hyper",
    ] {
        assert!(!msg.contains(bad), "{bad:?} in {msg:?}");
    }
}

fn entry(s: &Server, name: &str) -> Value {
    s.ok_route("apps/get", json!({"name": name}))["app"].clone()
}

/// A port nothing listens on.
fn closed_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A real HTTP server that is not an MCP server: every request gets a small HTML page.
fn html_server() -> String {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for mut c in l.incoming().flatten() {
            // Read the head and the body it announces, then answer and close.
            let mut buf = vec![];
            let mut chunk = [0u8; 4096];
            while let Ok(n) = c.read(&mut chunk) {
                if n == 0 {
                    break;
                }
                buf.extend_from_slice(&chunk[..n]);
                let text = String::from_utf8_lossy(&buf).to_lowercase();
                if let Some(end) = text.find("\r\n\r\n") {
                    let len = text[..end]
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length:"))
                        .and_then(|v| v.trim().parse::<usize>().ok())
                        .unwrap_or(0);
                    if buf.len() >= end + 4 + len {
                        break;
                    }
                }
            }
            let body = "<html><body>hello</body></html>";
            let _ = write!(
                c,
                "HTTP/1.1 200 OK\r\ncontent-type: text/html\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    format!("http://{addr}")
}

/// `datanotes apps list` against `url` with `token`: (success, stderr).
fn cli_list(url: &str, token: &str) -> (bool, String) {
    let out = Command::new(bin())
        .args(["apps", "--url", url, "--token", token, "list"])
        .env_remove("DATANOTES_TOKEN")
        .env_remove("DATANOTES_URL")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

#[test]
fn an_app_address_that_is_not_an_mcp_server_is_said_so() {
    let s = Server::start_with_env(&[("DATANOTES_APP_PROBE_MS", "100")]);
    let html = html_server();
    s.ok_route(
        "apps/create",
        json!({"name": "page", "mcp_url": format!("{html}/mcp")}),
    );
    let mut e = Value::Null;
    eventually("the app's error", || {
        e = entry(&s, "page");
        e["lastError"].is_string()
    });
    let msg = e["lastError"].as_str().unwrap();
    assert!(
        msg.contains(&format!("{html}/mcp")) && msg.contains("not as an MCP server"),
        "{msg}"
    );
    assert_plain(msg);
    assert_eq!(e["reachable"], false, "{e}");
    assert!(e["lastErrorAt"].is_string(), "{e}");

    // An address where nothing listens: connection refused, at that address.
    let url = format!("http://127.0.0.1:{}/mcp", closed_port());
    s.ok_route("apps/update", json!({"name": "page", "mcp_url": url}));
    eventually("connection refused", || {
        e = entry(&s, "page");
        e["lastError"]
            .as_str()
            .is_some_and(|m| m.starts_with(&format!("connection refused at {url}")))
    });
    assert_plain(e["lastError"].as_str().unwrap());
}

#[test]
fn the_cli_says_what_went_wrong_in_plain_words() {
    // Nothing listens there.
    let url = format!("http://127.0.0.1:{}", closed_port());
    let (ok, err) = cli_list(&url, "dn_owner_x");
    assert!(!ok);
    assert!(
        err.contains(&format!("nothing answers at {url}")) && err.contains("datanotes serve"),
        "{err}"
    );
    assert_plain(&err);
    assert_eq!(err.lines().count(), 1, "one line: {err}");

    // A folder that is not there: which folder, what to do.
    let out = Command::new(bin())
        .args([
            "apps",
            "--url",
            &url,
            "--database",
            "/nonexistent/db",
            "list",
        ])
        .env_remove("DATANOTES_TOKEN")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("/nonexistent/db: no such folder") && err.contains("datanotes init"),
        "{err}"
    );
    assert_plain(&err);

    // A server that is not datanotes.
    let html = html_server();
    let (ok, err) = cli_list(&html, "dn_owner_x");
    assert!(!ok);
    assert!(err.contains("a datanotes server?"), "{err}");
    assert_plain(&err);

    // The server refuses the token: it says so (and it is not "cannot reach").
    let s = Server::start();
    let (ok, err) = cli_list(&s.url, "dn_owner_wrong");
    assert!(!ok);
    assert!(err.contains("401") && err.contains("token"), "{err}");
    assert!(!err.contains("reach"), "{err}");
    assert_plain(&err);
    let (ok, err) = cli_list(&s.url, &s.token);
    assert!(ok, "{err}");

    // `datanotes mcp` with nothing at its address says so to its client, in plain words.
    let rt = runtime();
    rt.block_on(async {
        let mut child = tokio::process::Command::new(bin())
            .args(["mcp", "--url", &url, "--token", "dn_owner_x"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("start datanotes mcp");
        let (i, o) = (child.stdin.take().unwrap(), child.stdout.take().unwrap());
        let e = match ().serve((o, i)).await {
            Ok(_) => panic!("a server that is not there answered"),
            Err(e) => e.to_string(),
        };
        assert!(
            e.contains("connection refused at") && e.contains("datanotes serve"),
            "{e}"
        );
        assert!(!e.contains("WorkerTransport") && !e.contains("::"), "{e}");
    });
}

#[test]
fn the_log_says_once_per_change_that_an_app_is_down_or_back() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("server.log");
    let s = Server::start_logging(
        &log,
        &[
            ("DATANOTES_APP_PROBE_MS", "100"),
            ("DATANOTES_APP_PROBE_MAX_MS", "200"),
        ],
    );
    let t = create_app(&s, json!({"name": "planning"}));
    let mut app = App::start(&s, "planning", &t, &[]);
    eventually("listed", || entry(&s, "planning")["reachable"] == true);
    let agent = Agent::engine(&s, &s.token, None);
    for round in 0..2 {
        app.kill();
        // A reachable app is not probed: the first call finds it down.
        let r = agent.call("planning_echo", json!({}));
        assert!(is_error(&r), "round {round}");
        eventually("down", || entry(&s, "planning")["reachable"] == false);
        // Many probes (every 100 to 200 ms) and more calls while it is down: no more lines.
        for _ in 0..3 {
            assert!(is_error(&agent.call("planning_echo", json!({}))));
        }
        // Five failed probes more (each notes the time of its error).
        let mut probes = std::collections::BTreeSet::new();
        eventually_ok("5 more probes of the app while it is down", || {
            let e = entry(&s, "planning");
            probes.insert(e["lastErrorAt"].to_string());
            if probes.len() > 5 {
                Ok(())
            } else {
                Err(format!("{} errors noted, the last: {e}", probes.len()))
            }
        });
        app.restart();
        eventually("back", || entry(&s, "planning")["reachable"] == true);
    }
    drop(agent);
    let mut s = s;
    s.stop();
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let down: Vec<&&str> = lines
        .iter()
        .filter(|l| l.contains("app planning is not reachable"))
        .collect();
    let back: Vec<&&str> = lines
        .iter()
        .filter(|l| l.contains("app planning is reachable again"))
        .collect();
    assert_eq!(down.len(), 2, "one line per change:\n{text}");
    assert_eq!(back.len(), 2, "one line per change:\n{text}");
    for l in &down {
        assert!(l.contains("connection refused at"), "{l}");
        assert_plain(l);
    }
    assert!(!text.contains('\u{1b}'), "no colours in a file:\n{text}");
    assert!(!text.contains("rmcp"), "no rmcp lines:\n{text}");
    assert!(!text.contains("worker quit"), "{text}");
    // No struct dumps (rmcp's peer_info, Debug output).
    assert!(
        !text.contains("peer_info")
            && !text.contains("Implementation {")
            && !text.contains(": Some("),
        "{text}"
    );
    assert!(
        lines.iter().any(|l| l.contains("serving on")),
        "the server's own INFO lines are there:\n{text}"
    );
}
