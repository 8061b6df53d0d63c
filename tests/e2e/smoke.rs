use crate::kit::*;
use serde_json::json;

#[test]
fn serves_and_refuses_without_token() {
    let s = Server::start();
    let (st, v) = s.get("/datanotes/health");
    assert_eq!(st, 200);
    assert_eq!(v["ok"], true);
    let (st, v) = s.post("/datanotes/list_tables/", None, &json!({}));
    assert_eq!(st, 401, "{v}");
    assert_eq!(v["error"]["code"], "unauthorized");
    let (st, _) = s.post("/datanotes/list_tables/", Some("dn_owner_bad"), &json!({}));
    assert_eq!(st, 401);
    assert_eq!(s.ok("list_tables", json!({}))["tables"], json!([]));
}

/// The console is public static files compiled into the binary, served with a policy that keeps
/// every request on this server; it holds no data (that takes a token, through the API).
#[test]
fn the_console_is_static_and_holds_no_data() {
    let s = Server::start();
    let page = s
        .http
        .get(format!("{}/datanotes/ui/", s.url))
        .send()
        .unwrap();
    assert_eq!(page.status().as_u16(), 200);
    let csp = page.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .to_string();
    assert!(csp.contains("connect-src 'self'"), "{csp}");
    assert!(csp.contains("default-src 'none'"), "{csp}");
    assert!(
        page.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/html")
    );
    let html = page.text().unwrap();
    assert!(
        html.contains("app.js") && html.contains("id=\"signin\""),
        "{html}"
    );
    assert!(!html.contains(&s.token));
    // Nothing loaded from elsewhere (the browser test checks every request the page makes).
    assert!(
        !html.contains("src=\"http") && !html.contains("href=\"http"),
        "{html}"
    );
    let mut weight = html.len();
    for (file, ty) in [("app.js", "text/javascript"), ("app.css", "text/css")] {
        let r = s
            .http
            .get(format!("{}/datanotes/ui/{file}", s.url))
            .send()
            .unwrap();
        assert_eq!(r.status().as_u16(), 200, "{file}");
        assert!(
            r.headers()["content-type"]
                .to_str()
                .unwrap()
                .starts_with(ty)
        );
        weight += r.text().unwrap().len();
    }
    assert!(weight <= 300_000, "the console weighs {weight} bytes");
    // Without the trailing slash: redirected; an unknown file: a JSON 404 that says where to go.
    let r = reqwest::blocking::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
        .get(format!("{}/datanotes/ui", s.url))
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 308);
    let (st, v) = s.get("/datanotes/ui/secrets.json");
    assert_eq!(st, 404, "{v}");
    assert_eq!(v["error"]["hint"], "open /datanotes/ui/");
}
