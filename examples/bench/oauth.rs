//! `oauth`: what an OAuth access token costs on `/mcp` against a static token, measured in one
//! run on one server (pings on two raw sessions, in turn), and refreshes under a steady load of
//! calls: how many calls failed while the token rotated (target: none).

use super::*;
use crate::kit;
use agg::{mcp_raw_call, mcp_raw_session};
use kit::oauth::{enc, form};

const S: &str = "oauth";
const REDIRECT: &str = "http://127.0.0.1:9/cb";

/// A query parameter of a URL.
fn param(url: &str, key: &str) -> String {
    kit::oauth::param(url, key).unwrap_or_else(|| panic!("no {key} in {url}"))
}

/// A grant of every tool, through the whole flow: (client_id, access token, refresh token).
fn connect(s: &Server) -> (String, String, String) {
    let http = reqwest::blocking::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let reg: Value = http
        .post(format!("{}/oauth/register", s.url))
        .json(&json!({"client_name": "bench", "redirect_uris": [REDIRECT], "token_endpoint_auth_method": "none"}))
        .send()
        .and_then(|r| r.json())
        .expect("register");
    let client = reg["client_id"].as_str().expect("a client_id").to_string();
    let (verifier, challenge) = kit::oauth::pkce();
    let html = http
        .get(format!(
            "{}/oauth/authorize?response_type=code&client_id={client}&redirect_uri={}&code_challenge={challenge}&code_challenge_method=S256&state=b",
            s.url,
            enc(REDIRECT)
        ))
        .send()
        .and_then(|r| r.text())
        .expect("consent page");
    let request = html
        .split("data-request=\"")
        .nth(1)
        .and_then(|r| r.split('"').next())
        .unwrap_or_else(|| panic!("a consent page: {html}"));
    let d: Value = http
        .post(format!("{}/oauth/authorize", s.url))
        .bearer_auth(&s.token)
        .json(&json!({"request": request, "decision": "allow", "call_tools": ["*"]}))
        .send()
        .and_then(|r| r.json())
        .expect("decision");
    let code = param(d["redirect"].as_str().expect("a redirect"), "code");
    let t: Value = http
        .post(format!("{}/oauth/token", s.url))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(form(&[
            ("grant_type", "authorization_code"),
            ("code", &code),
            ("redirect_uri", REDIRECT),
            ("client_id", &client),
            ("code_verifier", &verifier),
        ]))
        .send()
        .and_then(|r| r.json())
        .expect("token");
    (
        client,
        t["access_token"].as_str().expect("an access token").into(),
        t["refresh_token"].as_str().expect("a refresh token").into(),
    )
}

/// Pings with a static token and with an OAuth access token, in turn; then refreshes under
/// load.
pub(crate) fn section_oauth(b: &mut Bench) -> Vec<Figure> {
    let calls = b.opts.app_calls;
    let s = b.server();
    let (client, access, refresh) = connect(s);
    let rt = runtime();
    let http = reqwest::Client::new();
    let url = s.url.clone();
    let owner = s.token.clone();
    let sid_static = rt.block_on(mcp_raw_session(&http, &url, &owner));
    let sid_oauth = rt.block_on(mcp_raw_session(&http, &url, &access));
    let n = (calls * 4).max(1000);
    let (mut st, mut oa) = (vec![], vec![]);
    for i in 0..20 + n {
        let t0 = Instant::now();
        rt.block_on(mcp_raw_call(&http, &url, &owner, &sid_static, "ping"));
        let d1 = t0.elapsed();
        let t0 = Instant::now();
        rt.block_on(mcp_raw_call(&http, &url, &access, &sid_oauth, "ping"));
        let d2 = t0.elapsed();
        if i >= 20 {
            st.push(d1);
            oa.push(d2);
        }
    }
    let (ls, lo) = (Latency::of(&st), Latency::of(&oa));
    progress(format!(
        "MCP ping p50: static token {:.3} ms, OAuth access token {:.3} ms = {:.3}x",
        ls.p50,
        lo.p50,
        lo.p50 / ls.p50
    ));

    // Refreshes under load: a caller pings with the newest access token it has while the
    // client refreshes every 20 ms; a call with a token that was just replaced must still pass.
    let current = Arc::new(std::sync::Mutex::new(access.clone()));
    let stop = Arc::new(AtomicBool::new(false));
    let refresher = {
        let (current, stop, url, client) = (current.clone(), stop.clone(), url.clone(), client);
        std::thread::spawn(move || {
            let http = reqwest::blocking::Client::new();
            let mut refresh = refresh;
            let mut n = 0usize;
            while !stop.load(Ordering::Relaxed) {
                let t: Value = http
                    .post(format!("{url}/oauth/token"))
                    .header("content-type", "application/x-www-form-urlencoded")
                    .body(form(&[
                        ("grant_type", "refresh_token"),
                        ("refresh_token", &refresh),
                        ("client_id", &client),
                    ]))
                    .send()
                    .and_then(|r| r.json())
                    .expect("refresh");
                refresh = t["refresh_token"]
                    .as_str()
                    .unwrap_or_else(|| panic!("a refresh failed: {t}"))
                    .into();
                *current.lock().unwrap() = t["access_token"].as_str().unwrap().into();
                n += 1;
                std::thread::sleep(Duration::from_millis(20));
            }
            n
        })
    };
    // At least `n` calls and 2 s: some 100 refreshes.
    let (mut ok, mut failed) = (0usize, 0usize);
    let t0 = Instant::now();
    while ok + failed < n || t0.elapsed() < Duration::from_secs(2) {
        let token = current.lock().unwrap().clone();
        let r = rt.block_on(async {
            http.post(format!("{url}/mcp"))
                .bearer_auth(&token)
                .header("Accept", "application/json, text/event-stream")
                .header("Mcp-Session-Id", &sid_oauth)
                .json(&json!({"jsonrpc": "2.0", "id": 3, "method": "ping", "params": {}}))
                .send()
                .await
                .map(|r| r.status().is_success())
        });
        match r {
            Ok(true) => ok += 1,
            _ => failed += 1,
        }
    }
    stop.store(true, Ordering::Relaxed);
    let refreshes = refresher.join().expect("the refresher");
    progress(format!(
        "{ok} pings during {refreshes} refreshes: {failed} failed"
    ));
    let mut out = vec![];
    out.extend(
        ls.figures(S, "mcp_ping_static_token", None)
            .into_iter()
            .take(1),
    );
    out.extend(
        lo.figures(S, "mcp_ping_oauth_token", None)
            .into_iter()
            .take(1),
    );
    out.push(
        Figure::new(S, "oauth_over_static_ping", lo.p50 / ls.p50, "x").target(Target::AtMost(1.05)),
    );
    out.push(Figure::new(
        S,
        "refreshes_under_load",
        refreshes as f64,
        "refreshes",
    ));
    out.push(
        Figure::new(S, "calls_failed_during_refreshes", failed as f64, "calls")
            .correct(Target::AtMost(0.0)),
    );
    out
}
