//! 2026-07-28 clients listening to an app's resource (`subscriptions/listen`): subscribed at
//! the app before the acknowledgment, unsubscribed there when the last one goes.

use super::*;

/// A client of 2026-07-28 subscribes with `subscriptions/listen`: an app's resource it names is
/// subscribed at the app before the stream acknowledges it (a client may act on the
/// acknowledgment at once), its updates come on the stream under the served URI, and the app
/// is told when the client goes.
#[test]
fn a_2026_listen_is_subscribed_at_the_app_before_it_is_acknowledged() {
    use std::io::BufRead;
    let s = Server::start();
    let rt = runtime();
    let (url, shelf) = serve_app(&rt);
    create_app(&s, json!({"name": "shelf", "mcp_url": url}));
    let uri = "file://shelf//a.txt";
    let r = mcp::listen_2026(&s, &[uri]);
    let subscribed = || {
        let asked = shelf.asked.lock().unwrap();
        asked.iter().filter(|m| *m == "resources/subscribe").count()
    };
    let mut lines = std::io::BufReader::new(r).lines();
    let mut next = || loop {
        let line = lines.next().expect("the stream goes on").unwrap();
        if let Some(m) = line.strip_prefix("data:").map(str::trim)
            && let Ok(v) = serde_json::from_str::<Value>(m)
        {
            return v;
        }
    };
    let ack = next();
    assert_eq!(
        ack["method"], "notifications/subscriptions/acknowledged",
        "{ack}"
    );
    assert_eq!(
        subscribed(),
        1,
        "subscribed at the app before the acknowledgment"
    );
    let updated = next();
    assert_eq!(
        updated["method"], "notifications/resources/updated",
        "{updated}"
    );
    assert_eq!(updated["params"]["uri"], uri, "{updated}");
    drop(lines);
    eventually("the app is told the client went", || {
        shelf
            .asked
            .lock()
            .unwrap()
            .iter()
            .any(|m| m == "resources/unsubscribe")
    });
    assert_eq!(subscribed(), 1, "subscribed once");
}

/// Two 2026-07-28 clients listen to one app resource. Having no sessions, both are subscribed on
/// the app's shared session: when the first goes, the app is not asked to unsubscribe (the
/// other still listens, and an app keeps one subscription per session); when the last goes,
/// it is, once.
#[test]
fn two_2026_listens_to_one_resource_unsubscribe_at_the_app_when_the_last_goes() {
    use std::io::BufRead;
    let s = Server::start();
    let rt = runtime();
    let (url, shelf) = serve_app(&rt);
    create_app(&s, json!({"name": "shelf", "mcp_url": url}));
    let uri = "file://shelf//a.txt";
    let count = |method: &str| {
        let asked = shelf.asked.lock().unwrap();
        asked.iter().filter(|m| *m == method).count()
    };
    // Each stream read up to its first update: both are running.
    let open = || {
        let mut lines = std::io::BufReader::new(mcp::listen_2026(&s, &[uri])).lines();
        loop {
            let line = lines.next().expect("the stream goes on").unwrap();
            if line.contains("notifications/resources/updated") {
                return lines;
            }
        }
    };
    let (first, second) = (open(), open());
    assert_eq!(count("resources/subscribe"), 2);
    drop(first);
    // The first stream's end is seen when the server writes to it next: a keep-alive, or the
    // app's next update.
    let _ = shelf.push.send(
        json!({"jsonrpc": "2.0", "method": "notifications/resources/updated",
               "params": {"uri": "file:///a.txt"}})
        .to_string(),
    );
    // Time, not an event: that the first listen ended has no effect to see by design (that is
    // what is checked), and the server notices it only when it next writes to it.
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(
        count("resources/unsubscribe"),
        0,
        "the app was asked to unsubscribe while a client still listens"
    );
    drop(second);
    let _ = shelf.push.send(
        json!({"jsonrpc": "2.0", "method": "notifications/resources/updated",
               "params": {"uri": "file:///a.txt"}})
        .to_string(),
    );
    eventually("the app is told the last client went", || {
        count("resources/unsubscribe") == 1
    });
}
