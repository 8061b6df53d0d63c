//! `fetcher`: a datanotes test component that GETs a URL through wasi:http. The engine must let
//! the request out only to a host in the app's `allow_hosts`, and deny every other one.

wit_bindgen::generate!({ path: "../../../wit", world: "app" });

use exports::datanotes::app::tools::{CallContext, Guest, Tool};
use serde_json::{Value, json};
use wasip2::http::outgoing_handler;
use wasip2::http::types::{Fields, OutgoingRequest, Scheme};
use wasip2::io::streams::StreamError;

struct Fetcher;

/// GETs `url` (http:// or https://): answers the status and the body (as text).
fn get(url: &str) -> Result<(u16, String), String> {
    let (scheme, rest) = if let Some(r) = url.strip_prefix("http://") {
        (Scheme::Http, r)
    } else if let Some(r) = url.strip_prefix("https://") {
        (Scheme::Https, r)
    } else {
        return Err(format!("{url:?} is not an http:// or https:// URL"));
    };
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let req = OutgoingRequest::new(Fields::new());
    req.set_scheme(Some(&scheme)).map_err(|()| "bad scheme")?;
    req.set_authority(Some(authority)).map_err(|()| format!("bad authority {authority:?}"))?;
    req.set_path_with_query(Some(path)).map_err(|()| format!("bad path {path:?}"))?;
    let failed = |e: &dyn std::fmt::Debug| format!("fetching {url} failed: {e:?}");
    let pending = outgoing_handler::handle(req, None).map_err(|e| failed(&e))?;
    let resp = loop {
        match pending.get() {
            Some(r) => break r,
            None => pending.subscribe().block(),
        }
    };
    let resp = resp
        .map_err(|()| failed(&"the response was already taken"))?
        .map_err(|e| failed(&e))?;
    let status = resp.status();
    let body = resp.consume().map_err(|()| failed(&"no body"))?;
    let stream = body.stream().map_err(|()| failed(&"no body stream"))?;
    let mut out = vec![];
    loop {
        match stream.blocking_read(64 << 10) {
            Ok(chunk) => out.extend(chunk),
            Err(StreamError::Closed) => break,
            Err(StreamError::LastOperationFailed(e)) => return Err(failed(&e.to_debug_string())),
        }
    }
    drop(stream);
    drop(wasip2::http::types::IncomingBody::finish(body));
    Ok((status, String::from_utf8_lossy(&out).into_owned()))
}

impl Guest for Fetcher {
    fn list_tools() -> Vec<Tool> {
        vec![Tool {
            name: "fetcher_get".into(),
            description: "GETs `url` through wasi:http: answers {status, body}.".into(),
            input_schema: json!({"type": "object", "properties": {"url": {"type": "string"}}, "required": ["url"]})
                .to_string(),
            tables: vec![],
        }]
    }

    fn instructions() -> String {
        "fetcher is a test app: it fetches URLs (only from its allow_hosts).".into()
    }

    fn call_tool(name: String, arguments: String, _ctx: CallContext) -> Result<String, String> {
        let args: Value = serde_json::from_str(&arguments).map_err(|e| format!("arguments are not JSON: {e}"))?;
        match name.as_str() {
            "fetcher_get" => {
                let url = args["url"].as_str().ok_or("give url")?;
                let (status, body) = get(url)?;
                Ok(json!({"status": status, "body": body}).to_string())
            }
            other => Err(format!("fetcher has no tool {other}")),
        }
    }
}

export!(Fetcher);
