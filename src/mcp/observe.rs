//! Telemetry at the `/mcp` door: each POSTed request is observed from its arrival
//! ([`start`]: its method, target, id, session, protocol version and trace context) to the end
//! of its answer ([`watch`]: the answer's body, read as it is written for a JSON-RPC error,
//! finishes the observation when it ends or is dropped).

use crate::telemetry::{Observed, request};
use axum::body::{Body, Bytes};
use axum::response::Response;
use http::StatusCode;
use http_body::{Frame, SizeHint};
use serde::Deserialize;
use serde_json::Value;
use std::borrow::Cow;
use std::pin::Pin;
use std::task::{Context, Poll};

#[derive(Deserialize)]
struct Probe<'a> {
    #[serde(borrow, default)]
    method: Option<Cow<'a, str>>,
    #[serde(default)]
    id: Option<Value>,
    #[serde(borrow, default)]
    params: Option<Params<'a>>,
}

#[derive(Deserialize)]
struct Params<'a> {
    #[serde(borrow, default)]
    name: Option<Cow<'a, str>>,
    #[serde(default, rename = "_meta")]
    meta: Option<Value>,
}

/// The observation of a POSTed message: a request (a method and an id); anything else (a
/// notification, an answer, a batch, unreadable JSON) is not observed.
pub(super) fn start(parts: &http::request::Parts, body: &[u8]) -> Observed {
    let Ok(p) = serde_json::from_slice::<Probe>(body) else {
        return Observed::default();
    };
    let (Some(method), Some(id)) = (p.method.as_deref(), &p.id) else {
        return Observed::default();
    };
    let id = match id {
        Value::String(s) => s.chars().take(128).collect(),
        Value::Number(n) => n.to_string(),
        _ => return Observed::default(),
    };
    let header = |name: &str| parts.headers.get(name).and_then(|v| v.to_str().ok());
    let params = p.params.as_ref();
    let target = match method {
        "tools/call" | "prompts/get" => params.and_then(|p| p.name.as_deref()),
        _ => None,
    };
    Observed::mcp(
        request::Mcp {
            method,
            target,
            id: Some(id),
            session: header("mcp-session-id"),
            version: header("mcp-protocol-version"),
            meta: params.and_then(|p| p.meta.as_ref()),
        },
        &parts.headers,
    )
}

/// The answer `r`, finishing `observed` when its body ends (or is dropped: the caller went
/// away).
pub(super) fn watch(r: Response, observed: Observed) -> Response {
    if !observed.is_some() {
        return r;
    }
    let status = r.status();
    let (parts, inner) = r.into_parts();
    Response::from_parts(
        parts,
        Body::new(Watched {
            inner,
            observed,
            status,
        }),
    )
}

struct Watched {
    inner: Body,
    observed: Observed,
    status: StatusCode,
}

impl http_body::Body for Watched {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let r = Pin::new(&mut self.inner).poll_frame(cx);
        match &r {
            Poll::Ready(Some(Ok(f))) => {
                if let Some(d) = f.data_ref()
                    && !self.observed.has_failed()
                    && let Some(code) = rpc_error(d)
                {
                    self.observed.failed_rpc(code);
                }
            }
            Poll::Ready(None) => self.observed.finish(self.status),
            _ => {}
        }
        r
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for Watched {
    fn drop(&mut self) {
        self.observed.finish(self.status);
    }
}

/// How far into a message its `"error"` member is looked for: every answer written here and by
/// rmcp begins `{"jsonrpc":"2.0","id":...,` then `"result"` or `"error"`.
const HEAD: usize = 256;

/// The code of a JSON-RPC error this chunk of an answer carries (a JSON body, or SSE events),
/// read from the head of each message only: a result is never scanned.
fn rpc_error(chunk: &[u8]) -> Option<i64> {
    let starts: Vec<usize> = if chunk.first() == Some(&b'{') {
        vec![0]
    } else {
        // SSE: each event's `data:` line within its first bytes.
        let head = &chunk[..chunk.len().min(HEAD * 2)];
        find(head, b"data:").map(|i| i + 5).into_iter().collect()
    };
    for s in starts {
        let msg = &chunk[s..];
        let head = &msg[..msg.len().min(HEAD)];
        let Some(at) = find(head, b"\"error\":{") else {
            continue;
        };
        if find(head, b"\"result\":").is_some_and(|r| r < at) {
            continue;
        }
        let after = &msg[at + 9..];
        if let Some(rest) = after.strip_prefix(b"\"code\":") {
            let digits: Vec<u8> = rest
                .iter()
                .copied()
                .take_while(|c| *c == b'-' || c.is_ascii_digit())
                .collect();
            if let Some(code) = std::str::from_utf8(&digits)
                .ok()
                .and_then(|d| d.parse().ok())
            {
                return Some(code);
            }
        }
        return Some(-32603);
    }
    None
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::rpc_error;

    #[test]
    fn errors_are_read_from_the_head_of_json_and_sse_answers() {
        let json = br#"{"jsonrpc":"2.0","id":3,"error":{"code":-32602,"message":"bad"}}"#;
        assert_eq!(rpc_error(json), Some(-32602));
        let sse = b"id: 0/4\ndata: {\"jsonrpc\":\"2.0\",\"id\":\"a\",\"error\":{\"code\":-32601,\"message\":\"no\"}}\n\n";
        assert_eq!(rpc_error(sse), Some(-32601));
        // A result that holds an error object is a result.
        let ok = br#"{"jsonrpc":"2.0","id":3,"result":{"structuredContent":{"error":{"code":1}}}}"#;
        assert_eq!(rpc_error(ok), None);
        let progress = b"data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\"}\n\n";
        assert_eq!(rpc_error(progress), None);
    }
}
