//! Client ID metadata documents are fetched as hostile input: https only, no private address,
//! bounded in size and time, no redirect, naming themselves.

use super::*;

#[test]
fn client_metadata_documents_are_fetched_as_hostile_input() {
    let docs = documents();
    let (verifier, challenge) = pkce();
    let page = |s: &Server, client: &str| {
        let (st, loc, body) = open(&oauth::authorize_url(s, client, REDIRECT, &challenge, "m"));
        assert!(
            loc.is_none(),
            "{client}: no redirect for an untrusted client"
        );
        (st, body)
    };

    // By default: https only, and never a private or loopback address.
    let s = Server::start();
    let (st, body) = page(&s, &format!("{docs}/good.json"));
    assert_eq!(st, 400);
    assert!(body.contains("must be served over https"), "{body}");
    let https = format!("{}/good.json", docs.replace("http://", "https://"));
    let (st, body) = page(&s, &https);
    assert_eq!(st, 400);
    assert!(
        body.contains("private, loopback or link-local")
            && body.contains("--oauth-private-clients"),
        "{body}"
    );
    drop(s);

    // The owner allows private addresses: still bounded in size and time, no redirect, and the
    // document must name itself.
    let s = Server::start_with_env(&[("DATANOTES_OAUTH_PRIVATE_CLIENTS", "true")]);
    for (path, why) in [
        ("/big.json", "larger than 65536 bytes"),
        ("/redirect", "redirects are not followed"),
        ("/wrong-id.json", "client_id equal to its own URL"),
        ("/nope.json", "404"),
    ] {
        let (st, body) = page(&s, &format!("{docs}{path}"));
        assert_eq!(st, 400, "{path}");
        assert!(body.contains(why), "{path}: {body}");
    }
    let t0 = std::time::Instant::now();
    let (st, body) = page(&s, &format!("{docs}/hang"));
    assert_eq!(st, 400);
    assert!(body.contains("took longer than 5 s"), "{body}");
    assert!(t0.elapsed() < Duration::from_secs(8), "{:?}", t0.elapsed());

    // A good document: the page names the client and the document's origin, and the whole
    // flow works with the URL as client_id.
    let client = format!("{docs}/good.json");
    let (st, html) = page(&s, &client);
    assert_eq!(st, 200, "{html}");
    assert!(
        html.contains("Metadata agent") && html.contains(&docs),
        "{html}"
    );
    let (st, v) = decide(
        &s,
        &s.token,
        &json!({"request": oauth::request_id(&html), "decision": "allow", "call_tools": ["list_tables"]}),
    );
    assert_eq!(st, 200, "{v}");
    let code = param(v["redirect"].as_str().unwrap(), "code").unwrap();
    let (st, v) = post_form(
        &s,
        "/oauth/token",
        &[
            ("grant_type", "authorization_code"),
            ("code", &code),
            ("client_id", &client),
            ("code_verifier", &verifier),
            ("redirect_uri", REDIRECT),
        ],
    );
    assert_eq!(st, 200, "{v}");
    let agent = Agent::connect(&format!("{}/mcp", s.url), v["access_token"].as_str(), None);
    assert_eq!(agent.names(), ["list_tables"]);
    let g = &s.ok_route("grants/list", json!({}))["grants"][0];
    assert_eq!(g["client_origin"], json!(docs));
}
