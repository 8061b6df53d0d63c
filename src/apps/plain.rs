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

/// The HTTP status an error reports (rmcp writes `HTTP 404 Not Found: ...`), read after the
/// word `http` so that the digits of a port or a body are never taken for one.
fn status(text: &str) -> Option<u16> {
    text.match_indices("http ").find_map(|(i, m)| {
        let d = &text.as_bytes()[i + m.len()..];
        let three = d.get(..3).filter(|c| c.iter().all(u8::is_ascii_digit))?;
        let alone = d.get(3).is_none_or(|b| !b.is_ascii_digit());
        alone.then(|| three.iter().fold(0u16, |n, c| n * 10 + u16::from(c - b'0')))
    })
}

/// The plain sentence for an error's messages (lower-cased, see [`chain`]).
fn words(url: &str, peer: Peer, text: &str) -> String {
    // The URL (and its port) is named by the sentence, not matched against.
    let text = text.replace(&url.to_lowercase(), "");
    let has = |k: &str| text.contains(k);
    if has(crate::outbound::NOT_CONNECTED) {
        return format!(
            "{url} was not reached: its address is not public (loopback, private, link-local or reserved), and this app may connect only to public ones"
        );
    }
    let code = status(&text);
    if code == Some(401) || has("auth required") || has("authorization required") {
        return match peer {
            Peer::App => format!(
                "HTTP 401 from {url}: the app refused the engine's token (check its mcp_token)"
            ),
            Peer::Engine => format!(
                "the datanotes server at {url} refused the token (HTTP 401): check --token or DATANOTES_TOKEN"
            ),
        };
    }
    if code == Some(403) || has("insufficient scope") {
        return format!("HTTP 403 from {url}: the token is not allowed there");
    }
    if has("session expired") {
        return format!(
            "{url} no longer knows the session (it restarted?); the next call opens a new one"
        );
    }
    match code {
        Some(404) => return format!("HTTP 404 from {url}: nothing there (is the path /mcp?)"),
        Some(429) => return format!("HTTP 429 from {url}: too many requests, try again later"),
        Some(c @ 500..=599) => return format!("{url} answered with a server error (HTTP {c})"),
        Some(c @ 400..=499) => {
            return format!(
                "HTTP {c} from {url}: it does not answer as an MCP server (is the path /mcp?)"
            );
        }
        _ => {}
    }
    if has("connection refused") {
        return match peer {
            Peer::App => format!("connection refused at {url} (is the app running?)"),
            Peer::Engine => format!(
                "connection refused at {url}: is the datanotes server running (datanotes serve)?"
            ),
        };
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

/// What an HTTP status answered by the server at `url` means.
pub fn http_status(url: &str, peer: Peer, status: u16) -> String {
    words(url, peer, &format!("http {status}"))
}

/// Why a request on an open session failed (not an MCP error answer).
pub fn service_error(url: &str, peer: Peer, e: &ServiceError) -> String {
    match e {
        // It answered, with an MCP error: its own words.
        ServiceError::McpError(e) => format!("{url} answered with an error: {}", e.message),
        e => words(url, peer, &chain(e)),
    }
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
            // A port or a body with the digits of a status is not one.
            (
                "error sending request for url (http://127.0.0.1:40123/mcp) | connection reset by peer",
                "failed or was closed",
            ),
            (
                "unexpected server response: http 500 internal server error: 401 404",
                "server error (HTTP 500)",
            ),
            (
                "unexpected server response: http 405 method not allowed: ",
                "not answer as an MCP server",
            ),
        ] {
            let w = words(u, Peer::App, t);
            assert!(w.contains(want), "{t}: {w}");
            assert!(!w.contains("::") && !w.contains('<'), "{w}");
        }
        assert!(words(u, Peer::Engine, "http 401").contains("refused the token"));
        let port = "http://127.0.0.1:40123/mcp";
        let w = words(
            port,
            Peer::App,
            "error sending request for url (http://127.0.0.1:40123/mcp) | operation timed out",
        );
        assert!(w.contains("did not answer in time"), "{w}");
        assert_eq!(status("http 404 not found"), Some(404));
        assert_eq!(status("http://x:4040 | http 4040"), None);
    }
}
