//! A call of a typed component's function: its arguments checked and converted before the
//! guest runs, its result answered as `structuredContent: {"result": …}` and as text; a
//! `result` that is `err` is an error result carrying the error.

use super::super::Inner;
use super::super::error::WasmError;
use super::{Guest, Typed, convert};
use crate::apps::backend::CallContext;
use crate::engine::Actor;
use serde_json::{Value, json};
use std::sync::Arc;
use wasmtime::component::{Type, Val};

impl Inner {
    /// Calls the function behind `tool` with `args`: its answer as an MCP `CallToolResult`, or
    /// why the call failed (a trap, a limit).
    pub(in crate::apps::wasm) async fn call_typed(
        self: &Arc<Self>,
        typed: &Typed,
        tool: &str,
        args: &Value,
        actor: Actor,
        cc: &CallContext,
        deadline: tokio::time::Instant,
    ) -> Result<Value, WasmError> {
        let Some(f) = typed.funcs.get(tool) else {
            return Ok(error_result(format!("the app has no tool {tool}")));
        };
        // Checked before the guest runs: a wrong argument never reaches it.
        let params = match convert::args(&f.params, args) {
            Ok(p) => p,
            Err(msg) => return Ok(error_result(msg)),
        };
        let mut inst = self.checkout(actor, Some(cc), deadline).await?;
        let func = match &inst.app {
            Guest::Typed(i) => i.get_func(&mut inst.store, f.index),
            _ => None,
        };
        let Some(func) = func else {
            return Err(WasmError::Wasmtime(format!(
                "the component has no function for {tool}"
            )));
        };
        let mut results = vec![Val::Bool(false); usize::from(f.result.is_some())];
        // The guest's run is a span of its own, as an untyped component's is.
        let run = self.run_span(cc, &mut inst);
        let r = func
            .call_async(&mut inst.store, &params, &mut results)
            .await;
        self.end_run(run, &inst, r.is_err());
        self.checkin(inst, r)?;
        let value = results.first().map_or(Value::Null, convert::to_json);
        let max = self.limits.max_result_bytes as usize;
        let text = value.to_string();
        if text.len() > max {
            return Err(WasmError::TooLarge {
                tool: tool.to_string(),
                bytes: text.len(),
                max,
            });
        }
        // A `result` that is `err`: an error result carrying the error.
        if let (Some(Type::Result(_)), Some(Val::Result(Err(_)))) = (&f.result, results.first()) {
            let e = &value["err"];
            let text = e.as_str().map_or_else(|| e.to_string(), str::to_string);
            return Ok(json!({"content": [{"type": "text", "text": text}], "isError": true}));
        }
        Ok(json!({
            "content": [{"type": "text", "text": text}],
            "structuredContent": {"result": value},
        }))
    }
}

/// A refused call's answer: an error result, the guest not called.
fn error_result(msg: String) -> Value {
    json!({"content": [{"type": "text", "text": msg}], "isError": true})
}
