//! A call from the engine to an app's tool, as telemetry sees it: timed for
//! `mcp.client.operation.duration`, and a CLIENT span under the request's (export on) whose
//! context the backend passes on to the app (a remote app's `params._meta` and headers).

use super::metrics::{OpLabels, metrics};
use super::request::Observed;
use super::trace;
use opentelemetry::trace::SpanKind;
use opentelemetry::{Context, KeyValue};
use std::time::Instant;

pub struct AppCall {
    start: Instant,
    cx: Option<Context>,
    tool: String,
    app: String,
}

impl AppCall {
    /// `tool`: the label value of the tool as listed; `name`: the name the app gave it.
    pub fn start(
        observed: &Observed,
        tool: String,
        name: &str,
        app: &str,
        kind: &'static str,
    ) -> AppCall {
        let cx = trace::tracer().and_then(|_| {
            let parent = observed.context().cloned().unwrap_or_default();
            trace::start_span(
                &parent,
                format!("tools/call {tool}"),
                SpanKind::Client,
                vec![
                    KeyValue::new("mcp.method.name", "tools/call"),
                    KeyValue::new("gen_ai.operation.name", "execute_tool"),
                    KeyValue::new(
                        "gen_ai.tool.name",
                        name.chars().take(128).collect::<String>(),
                    ),
                    KeyValue::new("datanotes.app.name", app.to_string()),
                    KeyValue::new("datanotes.app.kind", kind),
                ],
            )
        });
        AppCall {
            start: Instant::now(),
            cx,
            tool,
            app: app.to_string(),
        }
    }

    /// The context of the call's span, for what the backend sends or does.
    pub fn context(&self) -> Option<&Context> {
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
        if let Some(cx) = &self.cx {
            trace::end_span(cx, error);
        }
    }
}
