//! A call from the engine to an app's tool, as telemetry sees it: timed for
//! `mcp.client.operation.duration`, and, for a call that leaves the process, a CLIENT span
//! under the request's (export on) whose context the backend passes on to the app (a remote
//! app's `params._meta` and headers). An in-process call (a WASM guest) is handed the request's
//! own context: its instance and run spans are the request's children.

use super::metrics::{OpLabels, metrics};
use super::request::Observed;
use super::trace;
use opentelemetry::KeyValue;
use opentelemetry::trace::{SpanContext, SpanKind};
use std::time::Instant;

pub struct AppCall {
    start: Instant,
    /// What the backend works under: the call's own span, else the request's.
    cx: Option<SpanContext>,
    /// The call's own CLIENT span (export on, a call that leaves the process).
    span: Option<trace::Span>,
    tool: String,
    app: String,
}

impl AppCall {
    /// `tool`: the label value of the tool as listed; `name`: the name the app gave it;
    /// `client`: whether the call leaves the process (a CLIENT span of its own).
    pub fn start(
        observed: &Observed,
        tool: String,
        name: &str,
        app: &str,
        kind: &'static str,
        client: bool,
    ) -> AppCall {
        let span = (client && trace::on()).then(|| {
            trace::start_span(
                observed.context(),
                format!("tools/call {tool}"),
                SpanKind::Client,
                vec![
                    KeyValue::new("mcp.method.name", "tools/call"),
                    KeyValue::new("gen_ai.operation.name", "execute_tool"),
                    KeyValue::new("gen_ai.tool.name", super::request::clip(name).to_string()),
                    KeyValue::new("datanotes.app.name", app.to_string()),
                    KeyValue::new("datanotes.app.kind", kind),
                ],
            )
        });
        let span = span.flatten();
        AppCall {
            start: Instant::now(),
            cx: span
                .as_ref()
                .map(|s| s.context())
                .or(observed.context())
                .cloned(),
            span,
            tool,
            app: app.to_string(),
        }
    }

    /// The context of the call's span, for what the backend sends or does.
    pub fn context(&self) -> Option<&SpanContext> {
        self.cx.as_ref()
    }

    /// The app answered (or not: `error`).
    pub fn end(self, error: Option<&'static str>) {
        metrics().observe_client(
            OpLabels {
                mcp_method_name: "tools/call",
                gen_ai_tool_name: self.tool,
                datanotes_app: self.app,
                error_type: error.unwrap_or(""),
            },
            self.start.elapsed().as_secs_f64(),
        );
        if let Some(span) = self.span {
            span.end(error);
        }
    }
}
