//! The imports of the world: `datanotes:app/engine` (`engine.call`: an engine operation through
//! `ops::call`, with the app's own scope) and `datanotes:app/log`, of version 0.1 and of 0.2,
//! whose engine adds `progress` (to the caller, as MCP `notifications/progress`) and
//! `cancelled` (whether the caller gave up on the call).

use super::Host;
use crate::apps::wasm::bindings;
use crate::apps::wasm::bindings::datanotes::app::types::{EngineError, Level};
use crate::apps::wasm::bindings_v2::datanotes::app as v2;
use crate::auth::Caller;
use crate::error::Error;
use crate::ops::{self, Ctx};
use serde_json::Value;

impl bindings::datanotes::app::types::Host for Host {}

impl bindings::datanotes::app::engine::Host for Host {
    async fn call(&mut self, op: String, args: String) -> std::result::Result<String, EngineError> {
        self.engine_call(op, args).await
    }
}

impl Host {
    /// `engine.call`, of either version.
    async fn engine_call(
        &mut self,
        op: String,
        args: String,
    ) -> std::result::Result<String, EngineError> {
        let mut ctx = Ctx::new(Caller::App(self.scope.clone()), self.actor.clone());
        // Traced under the guest's run (export on).
        if let Some(cx) = &self.trace {
            ctx.observed = crate::telemetry::Observed::within(cx.clone());
        }
        let engine = self.engine.clone();
        // `ops::call` reads SQLite and waits on the writer: not on an executor thread. If the
        // guest's call is cancelled meanwhile, the operation still finishes (it is atomic).
        let r = self
            .server
            .spawn_blocking(move || {
                serde_json::from_str::<Value>(&args)
                    .map_err(|e| {
                        Error::invalid(format!("the arguments are not JSON: {e}"))
                            .hint("pass JSON text, e.g. {\"table\": \"a.b.c\"}")
                    })
                    .and_then(|a| ops::call(&engine, &ctx, &op, a))
            })
            .await
            .unwrap_or_else(|_| Err(Error::internal("the operation panicked")));
        self.waited = true;
        r.map(|v| v.to_string()).map_err(|e| EngineError {
            status: e.status,
            code: e.code.to_string(),
            message: e.message.clone(),
            json: e.to_json()["error"].to_string(),
        })
    }
}

impl bindings::datanotes::app::log::Host for Host {
    fn log(&mut self, level: Level, message: String) {
        self.log_at(level, message);
    }
}

impl Host {
    /// `log.log`, of either version.
    fn log_at(&mut self, level: Level, message: String) {
        let app = &self.scope.name;
        match level {
            Level::Trace => tracing::trace!(app = %app, "{message}"),
            Level::Debug => tracing::debug!(app = %app, "{message}"),
            Level::Info => tracing::info!(app = %app, "{message}"),
            Level::Warn => tracing::warn!(app = %app, "{message}"),
            Level::Error => tracing::error!(app = %app, "{message}"),
        }
    }
}

impl v2::types::Host for Host {}

impl v2::engine::Host for Host {
    async fn call(
        &mut self,
        op: String,
        args: String,
    ) -> std::result::Result<String, v2::types::EngineError> {
        self.engine_call(op, args)
            .await
            .map_err(|e| v2::types::EngineError {
                status: e.status,
                code: e.code,
                message: e.message,
                json: e.json,
            })
    }

    async fn progress(&mut self, done: f64, total: Option<f64>, message: Option<String>) {
        let Some(client) = self.client.clone().filter(|c| c.wants_progress()) else {
            return;
        };
        let mut p = serde_json::json!({"progress": done});
        if let Some(t) = total {
            p["total"] = t.into();
        }
        if let Some(m) = message {
            p["message"] = m.into();
        }
        client.notify("notifications/progress", p).await;
        // The time it waited for the client is not guest time.
        self.waited = true;
    }

    fn cancelled(&mut self) -> bool {
        self.cancel.is_cancelled()
    }
}

impl v2::log::Host for Host {
    fn log(&mut self, level: v2::types::Level, message: String) {
        use v2::types::Level as L;
        let level = match level {
            L::Trace => Level::Trace,
            L::Debug => Level::Debug,
            L::Info => Level::Info,
            L::Warn => Level::Warn,
            L::Error => Level::Error,
        };
        self.log_at(level, message);
    }
}
