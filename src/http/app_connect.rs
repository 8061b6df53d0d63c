//! Connecting a remote app whose MCP server requires OAuth: the owner's `apps/connect` (a
//! route of [`super::routes`]: it answers the authorization URL the owner's browser goes to),
//! the public redirect endpoint the browser comes back to, `GET /datanotes/apps/oauth/callback`
//! (the `state` names one pending connect: single use, 10 minutes), and the engine's client ID
//! metadata document, `GET /datanotes/apps/oauth/client`, used when the engine is reached at a
//! public https address and the app's authorization server takes one. The protocol is rmcp's
//! (`apps::remote::oauth`).

use crate::apps::remote::oauth;
use crate::error::{Error, parse};
use crate::server::Shared;
use axum::Json;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use serde_json::{Value, json};
use std::collections::HashMap;

/// Where the owner's browser comes back.
pub(crate) const CALLBACK: &str = "/datanotes/apps/oauth/callback";
/// The engine's client ID metadata document.
const CLIENT_DOC: &str = "/datanotes/apps/oauth/client";

/// The engine's own base URL as the browser reached it ([`crate::server::base_url`]); `None`
/// without a valid `Host`.
pub(crate) fn origin(h: &HeaderMap) -> Option<String> {
    let host = h.get(header::HOST)?.to_str().ok()?.trim();
    if host.is_empty() || host.contains(['/', '@', ' ', '\\', '?', '#']) {
        return None;
    }
    Some(crate::server::base_url(h))
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct ConnectArgs {
    name: String,
    /// Set by the route from the request (see [`origin`]), never taken from the body.
    #[serde(default)]
    origin: Option<String>,
}

/// `apps/connect` `{"name"}` (owner): `{"authorization_url"}`, where the owner's browser signs
/// in to the app's authorization server.
pub(crate) async fn connect(s: Shared, v: Value) -> Result<Response, Error> {
    let a: ConnectArgs = parse("apps/connect", v)?;
    let rec = s
        .apps
        .get(&a.name)
        .ok_or_else(|| crate::apps::no_app(&a.name))?;
    let Some(url) = rec.mcp_url.clone() else {
        return Err(
            Error::invalid(format!("app {} is not a remote app", a.name))
                .column("name")
                .hint("only an app registered with mcp_url signs in with OAuth"),
        );
    };
    if rec.mcp_token.is_some() {
        return Err(Error::invalid(format!(
            "app {} is sent a static mcp_token; it does not sign in with OAuth",
            a.name
        ))
        .column("name")
        .hint(
            "remove its mcp_token (apps/update with \"mcp_token\": null) to connect it with OAuth",
        ));
    }
    let Some(base) = a.origin else {
        return Err(Error::invalid("the request has no usable Host header")
            .hint("call apps/connect from the console, or with a Host header naming this server"));
    };
    let redirect = format!("{base}{CALLBACK}");
    let doc = oauth::is_public_https(&base).then(|| format!("{base}{CLIENT_DOC}"));
    let auth_url = oauth::start(
        &s.engine.meta_dir,
        &rec.name,
        &url,
        &redirect,
        doc.as_deref(),
    )
    .await
    .map_err(|why| {
        Error::new(502, "sign_in_failed", why)
            .hint("check that the app is running and publishes its OAuth metadata, then try again")
    })?;
    Ok(Json(json!({"authorization_url": auth_url})).into_response())
}

/// `GET /datanotes/apps/oauth/callback?code&state[&iss]` (public: the owner's browser arrives
/// without a bearer; the `state` is the proof): on success, to the console's Apps view.
async fn callback(State(s): State<Shared>, Query(q): Query<HashMap<String, String>>) -> Response {
    let Some(state) = q.get("state") else {
        return failed("the callback has no state: it does not answer a sign-in of this server");
    };
    let error = q.get("error").map(|e| match q.get("error_description") {
        Some(d) => format!("{e}: {d}"),
        None => e.clone(),
    });
    let r = oauth::finish(
        &s.engine.meta_dir,
        state,
        q.get("code").map(String::as_str),
        error.as_deref(),
        q.get("iss").map(String::as_str),
    )
    .await;
    match r {
        Ok(app) => {
            // The app's backend now signs its requests: listed again at once.
            s.agg.sync();
            let _ = s.agg.refresh(&app).await;
            Redirect::to("/datanotes/ui/#apps").into_response()
        }
        Err(why) => failed(&why),
    }
}

/// A plain page saying why a sign-in failed.
fn failed(why: &str) -> Response {
    let esc = why
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;");
    let body = format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>Sign-in failed</title></head>\
         <body><h1>The app could not be connected</h1><p id=\"why\">{esc}</p>\
         <p><a href=\"/datanotes/ui/#apps\">Back to the apps</a></p></body></html>"
    );
    (
        StatusCode::BAD_REQUEST,
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (
                header::CONTENT_SECURITY_POLICY,
                "default-src 'none'; frame-ancestors 'none'",
            ),
        ],
        body,
    )
        .into_response()
}

/// `GET /datanotes/apps/oauth/client`: the engine's client ID metadata document (its URL is its
/// client ID), for an authorization server that fetches it.
async fn client_doc(headers: HeaderMap) -> Response {
    match origin(&headers) {
        Some(base) => Json(oauth::client_metadata(&base)).into_response(),
        None => Error::invalid("the request has no usable Host header").into_response(),
    }
}

/// Puts the public routes on the router.
pub(super) fn register(r: super::Routes<Shared>) -> super::Routes<Shared> {
    r.route(CALLBACK, get(callback))
        .route(CLIENT_DOC, get(client_doc))
}

#[cfg(test)]
mod tests {
    use super::origin;
    use axum::http::{HeaderMap, HeaderValue, header};

    fn of(host: &str, from: Option<&str>) -> Option<String> {
        let mut h = HeaderMap::new();
        h.insert(header::HOST, HeaderValue::from_str(host).unwrap());
        if let Some(o) = from {
            h.insert(header::ORIGIN, HeaderValue::from_str(o).unwrap());
        }
        origin(&h)
    }

    #[test]
    fn the_engine_base_as_the_browser_reached_it() {
        let s = |x: &str| Some(x.to_string());
        assert_eq!(of("127.0.0.1:7777", None), s("http://127.0.0.1:7777"));
        assert_eq!(of("localhost:7777", None), s("http://localhost:7777"));
        assert_eq!(of("[::1]:7777", None), s("http://[::1]:7777"));
        assert_eq!(
            of("Notes.Example.com", None),
            s("https://notes.example.com")
        );
        assert_eq!(of("192.168.1.5:7777", None), s("http://192.168.1.5:7777"));
        // The browser's Origin names the scheme when it names the same host.
        assert_eq!(
            of("notes.example.com", Some("http://notes.example.com")),
            s("http://notes.example.com")
        );
        assert_eq!(
            of("notes.example.com", Some("http://evil.example")),
            s("https://notes.example.com")
        );
        assert_eq!(of("a/b", None), None);
        assert_eq!(of("user@host", None), None);
    }
}
