//! One request as telemetry sees it: [`Observed`] is started by a door when a request comes in
//! (its method, the trace context it carries), travels in the request's [`crate::ops::Ctx`],
//! is told by what serves it which tool and app answered and how ([`Observed::note`]), and is
//! finished once, when its answer is written: the duration goes to
//! `mcp.server.operation.duration` and the SERVER span ends.
//!
//! Off (no export), it still times the request for the metrics: one `Instant` and a histogram
//! update, no span, no context.

use super::metrics::{self, HttpLabels, OpLabels, metrics};
use super::trace;
use opentelemetry::KeyValue;
use opentelemetry::trace::{SpanContext, SpanKind, TraceId};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// A request being served, or none (a request nobody observes: the engine's own calls).
#[derive(Clone, Default)]
pub struct Observed(Option<Arc<Inner>>);

impl std::fmt::Debug for Observed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Observed")
    }
}

struct Inner {
    start: Instant,
    what: What,
    /// The context of the request's span (export on), for the spans of what it calls.
    cx: Option<SpanContext>,
    /// The trace the request belongs to: its span's (export on), else the one its caller sent.
    trace_id: Option<TraceId>,
    note: Mutex<Note>,
    done: AtomicBool,
}

/// Which door's request it is, for its metric.
enum What {
    /// An MCP request: its method (a label value).
    Mcp(&'static str),
    /// A request to the HTTP API: its method and route (the pattern, e.g. `/datanotes/{op}`).
    Http(&'static str, String),
    /// Work inside another's trace (a WASM guest's engine call): not a request of a door,
    /// timed by nothing, its spans under that trace.
    Within,
}

/// What serving the request found out.
#[derive(Default)]
struct Note {
    tool: String,
    app: String,
    error: Option<&'static str>,
    /// The request's span (export on), ended by `finish`.
    span: Option<trace::Span>,
}

/// An MCP request's identity, read from its message and headers.
pub struct Mcp<'a> {
    pub method: &'a str,
    /// The tool or prompt named (`tools/call`, `prompts/get`).
    pub target: Option<&'a str>,
    pub id: Option<String>,
    pub session: Option<&'a str>,
    pub version: Option<&'a str>,
    /// The request's `params._meta`.
    pub meta: Option<&'a serde_json::Value>,
}

/// The longest target put in a span's name or attribute, in bytes.
const LONGEST_TARGET: usize = 128;

/// `s`, cut to at most [`LONGEST_TARGET`] bytes on a character's boundary.
pub(super) fn clip(s: &str) -> &str {
    &s[..s.floor_char_boundary(LONGEST_TARGET)]
}

impl Observed {
    /// An MCP request at `/mcp`: timed, and a SERVER span (export on) under the context it
    /// carries.
    pub fn mcp(req: Mcp<'_>, headers: &http::HeaderMap) -> Observed {
        let method = metrics::method_label(req.method);
        let span = trace::on().then(|| {
            let parent = trace::extract(req.meta, headers);
            let name = match req.target.filter(|t| t.len() <= LONGEST_TARGET) {
                Some(t) => format!("{} {t}", req.method),
                None => clip(req.method).to_string(),
            };
            // Room for what `note`, `failed_rpc` and `end_span` add, so that the span's
            // attributes are allocated once.
            let mut a = Vec::with_capacity(10);
            a.push(KeyValue::new("mcp.method.name", method));
            if let Some(s) = req.session {
                a.push(KeyValue::new("mcp.session.id", s.to_string()));
            }
            if let Some(v) = req.version {
                a.push(KeyValue::new("mcp.protocol.version", v.to_string()));
            }
            if let Some(id) = req.id {
                a.push(KeyValue::new("jsonrpc.request.id", id));
            }
            if req.method == "tools/call"
                && let Some(t) = req.target
            {
                a.push(KeyValue::new("gen_ai.operation.name", "execute_tool"));
                a.push(KeyValue::new("gen_ai.tool.name", clip(t).to_string()));
            }
            if req.method == "prompts/get"
                && let Some(t) = req.target
            {
                a.push(KeyValue::new("gen_ai.prompt.name", clip(t).to_string()));
            }
            trace::start_span(parent.as_ref(), name, SpanKind::Server, a)
        });
        let span = span.flatten();
        // Export off: the caller's trace, if it sent one (the console links a call to it).
        let trace_id = match &span {
            Some(s) => Some(s.context().trace_id()),
            None if trace::carries_parent(req.meta, headers) => {
                trace::extract(req.meta, headers).map(|p| p.trace_id())
            }
            None => None,
        };
        Observed::new(What::Mcp(method), span, trace_id)
    }

    fn new(what: What, span: Option<trace::Span>, trace_id: Option<TraceId>) -> Observed {
        Observed(Some(Arc::new(Inner {
            start: Instant::now(),
            what,
            cx: span.as_ref().map(|s| s.context().clone()),
            trace_id,
            note: Mutex::new(Note {
                span,
                ..Note::default()
            }),
            done: AtomicBool::new(false),
        })))
    }

    /// A request to the HTTP API, `route` the pattern it matched (None: no route): timed, and
    /// a SERVER span (export on) under its `traceparent` header.
    pub fn http(method: &http::Method, route: Option<&str>, headers: &http::HeaderMap) -> Observed {
        let method = match *method {
            http::Method::GET => "GET",
            http::Method::POST => "POST",
            http::Method::DELETE => "DELETE",
            http::Method::PUT => "PUT",
            http::Method::OPTIONS => "OPTIONS",
            http::Method::HEAD => "HEAD",
            _ => "_OTHER",
        };
        let route = route.unwrap_or("").to_string();
        let span = trace::on().then(|| {
            let parent = trace::extract(None, headers);
            let name = if route.is_empty() {
                method.to_string()
            } else {
                format!("{method} {route}")
            };
            let mut a = vec![KeyValue::new("http.request.method", method)];
            if !route.is_empty() {
                a.push(KeyValue::new("http.route", route.clone()));
            }
            trace::start_span(parent.as_ref(), name, SpanKind::Server, a)
        });
        let span = span.flatten();
        let trace_id = span.as_ref().map(|s| s.context().trace_id());
        Observed::new(What::Http(method, route), span, trace_id)
    }

    /// Work done inside the trace of `cx` (a WASM guest's engine call, under its run's span):
    /// the spans of what it calls go under it; no metric is recorded.
    pub fn within(cx: SpanContext) -> Observed {
        Observed(Some(Arc::new(Inner {
            start: Instant::now(),
            what: What::Within,
            trace_id: cx.is_valid().then(|| cx.trace_id()),
            cx: Some(cx),
            note: Mutex::default(),
            done: AtomicBool::new(false),
        })))
    }

    /// Whether a request is observed (a door made it).
    pub fn is_some(&self) -> bool {
        self.0.is_some()
    }

    /// The trace the request belongs to (32 hex digits), if any: its span's, or with export
    /// off the one its caller sent.
    pub fn trace_id(&self) -> Option<String> {
        Some(self.0.as_ref()?.trace_id?.to_string())
    }

    /// The context of the request's span, for a span of what serving it calls.
    pub fn context(&self) -> Option<&SpanContext> {
        self.0.as_ref()?.cx.as_ref()
    }

    /// The tool (its label value, see [`metrics::Metrics::tool_label`]) and app (empty: the
    /// engine; `kind`: `engine`, `remote` or `wasm`) that served the request, and its
    /// `error.type` if it failed.
    pub fn note(&self, tool: String, app: &str, kind: &'static str, error: Option<&'static str>) {
        let Some(i) = &self.0 else { return };
        let mut n = i.note.lock().unwrap();
        if let Some(span) = &mut n.span {
            if !app.is_empty() {
                span.set_attribute(KeyValue::new("datanotes.app.name", app.to_string()));
            }
            span.set_attribute(KeyValue::new("datanotes.app.kind", kind));
        }
        n.tool = tool;
        n.app = app.to_string();
        if error.is_some() {
            n.error = error;
        }
    }

    /// A JSON-RPC error answered (`code`): the request failed with it.
    pub fn failed_rpc(&self, code: i64) {
        let Some(i) = &self.0 else { return };
        let mut n = i.note.lock().unwrap();
        if let Some(span) = &mut n.span {
            span.set_attribute(KeyValue::new("rpc.response.status_code", code.to_string()));
        }
        n.error = Some(metrics::error_type(code));
    }

    /// An attribute on the request's span (export on).
    pub fn attribute(&self, kv: impl FnOnce() -> KeyValue) {
        let Some(i) = &self.0 else { return };
        if let Some(span) = &mut i.note.lock().unwrap().span {
            span.set_attribute(kv());
        }
    }

    /// Whether a JSON-RPC error was already seen.
    pub fn has_failed(&self) -> bool {
        self.0
            .as_ref()
            .is_some_and(|i| i.note.lock().unwrap().error.is_some())
    }

    /// The request's answer is written (or the caller went away): its duration is recorded,
    /// its span ends. Only the first call counts.
    pub fn finish(&self, status: http::StatusCode) {
        let Some(i) = &self.0 else { return };
        // Only the first call counts; work within another's trace owns no span and no metric.
        if i.done.swap(true, Ordering::AcqRel) || matches!(i.what, What::Within) {
            return;
        }
        let secs = i.start.elapsed().as_secs_f64();
        let n = std::mem::take(&mut *i.note.lock().unwrap());
        let error = n.error.or_else(|| http_error(status));
        if matches!(i.what, What::Mcp("tools/call")) && !n.tool.is_empty() {
            super::recent::recent().observe(&n.app, &n.tool, secs, error.is_some());
        }
        match &i.what {
            What::Mcp(method) => metrics().observe_server(
                OpLabels {
                    mcp_method_name: method,
                    gen_ai_tool_name: n.tool,
                    datanotes_app: n.app,
                    error_type: error.unwrap_or(""),
                },
                secs,
            ),
            What::Http(method, route) => metrics().observe_http(
                HttpLabels {
                    http_request_method: method,
                    http_route: route.clone(),
                    http_response_status_code: status.as_u16(),
                },
                secs,
            ),
            What::Within => {}
        }
        if let Some(mut span) = n.span {
            if matches!(i.what, What::Http(..)) {
                span.set_attribute(KeyValue::new(
                    "http.response.status_code",
                    i64::from(status.as_u16()),
                ));
            }
            span.end(error);
        }
    }
}

/// An HTTP status that is an error, as a bounded `error.type`.
fn http_error(status: http::StatusCode) -> Option<&'static str> {
    if status.is_success() || status.is_informational() {
        return None;
    }
    Some(match status.as_u16() {
        400 => "400",
        401 => "401",
        403 => "403",
        404 => "404",
        406 => "406",
        413 => "413",
        415 => "415",
        429 => "429",
        500 => "500",
        503 => "503",
        _ => "http_error",
    })
}
