//! A 0.2 guest whose resources and prompts misbehave: each fault skipped, bounded or refused.

use super::*;

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
