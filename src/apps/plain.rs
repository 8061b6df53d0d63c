//! Plain words for what went wrong talking MCP to a server (a remote app, or the engine for
//! `datanotes mcp`): what an agent or an owner reads, never a Rust type name.

use rmcp::ServiceError;
use rmcp::service::ClientInitializeError;
use rmcp::transport::streamable_http_client::StreamableHttpError;
use std::error::Error;

/// Who was being talked to: the words differ (whose token to check).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Peer {
    App,
    Engine,
}

/// Every message of an error and its sources, lower-cased (through rmcp's HTTP client error,
/// which does not give its cause as a source).
fn chain(e: &(dyn Error + 'static)) -> String {
    let mut out = String::new();
    let mut cur = Some(e);
    while let Some(s) = cur {
        out.push_str(" | ");
        out.push_str(&s.to_string());
        if let Some(StreamableHttpError::Client(c)) =
            s.downcast_ref::<StreamableHttpError<reqwest::Error>>()
        {
            out.push_str(&chain(c));
        }
        cur = s.source();
    }
    out.to_lowercase()
}

/// The plain sentence for an error's messages (lower-cased, see [`chain`]).
fn words(url: &str, peer: Peer, text: &str) -> String {
    let has = |k: &str| text.contains(k);
    if has("connection refused") {
        return format!("connection refused at {url} (is it running?)");
    }
    if has("401") || has("unauthorized") || has("auth required") {
        return match peer {
            Peer::App => format!(
                "HTTP 401 from {url}: the app refused the engine's token (check its mcp_token)"
            ),
            Peer::Engine => format!(
                "the datanotes server at {url} refused the token (HTTP 401): check --token or DATANOTES_TOKEN"
            ),
        };
    }
    if has("403") || has("forbidden") || has("insufficient scope") {
        return format!("HTTP 403 from {url}: the token is not allowed there");
    }
    if has("session expired") {
        return format!(
            "{url} no longer knows the session (it restarted?); the next call opens a new one"
        );
    }
    if has("404") || has("not found") {
        return format!("HTTP 404 from {url}: nothing there (is the path /mcp?)");
    }
    if has("dns error") || has("failed to lookup") || has("name or service not known") {
        return format!("cannot resolve the host of {url}");
    }
    if has("timed out") || has("timeout") {
        return format!("{url} did not answer in time");
    }
    if has("unexpected content type")
        || has("unexpected server response")
        || has("deserialize")
        || has("expected initialized")
        || has("expect initialized")
    {
        return format!("{url} answered, but not as an MCP server (is the path /mcp?)");
    }
    if has("http 5") || has("500") || has("502") || has("503") {
        return format!("{url} answered with a server error (HTTP 5xx)");
    }
    if has("connection reset")
        || has("connection closed")
        || has("broken pipe")
        || has("end of stream")
        || has("channel closed")
        || has("transport closed")
        || has("error sending request")
    {
        return format!("the connection to {url} failed or was closed");
    }
    format!("the MCP exchange with {url} failed")
}

/// Why a session could not be opened.
pub fn init_error(url: &str, peer: Peer, e: &ClientInitializeError) -> String {
    let text = match e {
        ClientInitializeError::TransportError { error, .. } => chain(error),
        e => chain(e),
    };
    words(url, peer, &text)
}

/// Why an HTTP exchange with an MCP server failed (a call posted directly, its stream).
pub fn error_words(url: &str, peer: Peer, e: &(dyn Error + 'static)) -> String {
    words(url, peer, &chain(e))
}

/// Why a request on an open session failed (not an MCP error answer).
pub fn service_error(url: &str, peer: Peer, e: &ServiceError) -> String {
    words(url, peer, &chain(e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_words_name_no_type() {
        let u = "http://127.0.0.1:9/mcp";
        for (t, want) in [
            (
                "transport [rmcp::x<y>] error: client error: error sending request | tcp connect error | connection refused (os error 111)",
                "connection refused at",
            ),
            (
                "unexpected server response: http 401 unauthorized: {}",
                "check its mcp_token",
            ),
            (
                "unexpected server response: http 404 not found: ",
                "is the path /mcp?",
            ),
            (
                "unexpected content type: some(\"text/html\")",
                "not as an MCP server",
            ),
            (
                "something else entirely <rmcp::Foo>",
                "the MCP exchange with",
            ),
        ] {
            let w = words(u, Peer::App, t);
            assert!(w.contains(want), "{t}: {w}");
            assert!(!w.contains("::") && !w.contains('<'), "{w}");
        }
        assert!(words(u, Peer::Engine, "http 401").contains("refused the token"));
    }
}
