//! What is asked of a guest, in its own terms (the world's 0.1 or 0.2 bindings): its tools
//! listed, a tool called with the caller's context, an MCP request served (resources,
//! prompts, completions).

use super::*;

/// `{key: value}` added to `v` when `value` is some.
pub(super) fn with(mut v: Value, key: &str, value: Option<String>) -> Value {
    if let Some(x) = value {
        v[key] = x.into();
    }
    v
}

/// What a 0.2 instance lists: its tools, instructions, resources, templates and prompts.
pub(super) async fn list_v2(
    v: &typed::V2,
    store: &mut wasmtime::Store<host::Host>,
) -> wasmtime::Result<(Vec<ToolRec>, String, ContentLists)> {
    let tools = v.tools.call_list_tools(&mut *store).await?;
    let instructions = v.tools.call_instructions(&mut *store).await?;
    let tools = tools.into_iter().map(ToolRec::from).collect();
    let mut c = ContentLists::default();
    if let Some(r) = &v.resources {
        for x in r.call_list_resources(&mut *store).await? {
            let e = json!({"uri": x.uri, "name": x.name});
            let e = with(e, "description", x.description);
            c.resources.push(with(e, "mimeType", x.mime_type));
        }
        for x in r.call_list_resource_templates(&mut *store).await? {
            let e = json!({"uriTemplate": x.uri_template, "name": x.name});
            let e = with(e, "description", x.description);
            c.templates.push(with(e, "mimeType", x.mime_type));
        }
    }
    if let Some(p) = &v.prompts {
        for x in p.call_list_prompts(&mut *store).await? {
            let e = with(json!({"name": x.name}), "description", x.description);
            let args: Vec<Value> = x
                .arguments
                .into_iter()
                .map(|a| {
                    let e = json!({"name": a.name, "required": a.required});
                    with(e, "description", a.description)
                })
                .collect();
            let mut e = e;
            if !args.is_empty() {
                e["arguments"] = args.into();
            }
            c.prompts.push(e);
        }
    }
    Ok((tools, instructions, c))
}

/// The call context of 0.2 (the same fields as 0.1's).
pub(super) fn v2_context(
    c: WitContext,
) -> bindings_v2::exports::datanotes::app::tools::CallContext {
    bindings_v2::exports::datanotes::app::tools::CallContext {
        harness: c.harness,
        model: c.model,
        session: c.session,
    }
}

/// An answer that stands for a JSON-RPC error (see [`RPC_ERROR_META`]).
pub(super) fn rpc_error(code: i64, message: String) -> Value {
    json!({"_meta": {RPC_ERROR_META: {"code": code, "message": message}}})
}

impl Inner {
    /// The app's tools and instructions (and, of a 0.2 component, its resources, templates and
    /// prompts), from an instance.
    pub(super) async fn list_tools(
        self: &Arc<Self>,
        deadline: tokio::time::Instant,
    ) -> Result<Listing, WasmError> {
        let mut inst = self.checkout(Actor::default(), None, deadline).await?;
        let pre = self.loaded().await?;
        let r = match (&inst.app, &pre) {
            (typed::Guest::World(app), _) => {
                let t = app.datanotes_app_tools();
                match t.call_list_tools(&mut inst.store).await {
                    Ok(tools) => t.call_instructions(&mut inst.store).await.map(|ins| {
                        let tools = tools.into_iter().map(ToolRec::from).collect();
                        (tools, ins, ContentLists::default())
                    }),
                    Err(e) => Err(e),
                }
            }
            (typed::Guest::World2(v), _) => list_v2(v, &mut inst.store).await,
            // A typed component's tools come from its types; the instance is made (and kept
            // warm) to check that it instantiates.
            (typed::Guest::Typed(_), typed::Pre::Typed(_, t)) => {
                self.checkin(inst, Ok(()))?;
                return Ok(t.listing.clone());
            }
            _ => return Err(WasmError::Wasmtime("the component changed kind".into())),
        };
        let (tools, instructions, content) = self.checkin(inst, r)?;
        let mut out = vec![];
        for t in tools {
            let schema: Value =
                serde_json::from_str(&t.input_schema).map_err(|e| WasmError::BadSchema {
                    tool: t.name.clone(),
                    why: e.to_string(),
                })?;
            let mut tool =
                json!({"name": t.name, "description": t.description, "inputSchema": schema});
            if !t.tables.is_empty() {
                tool["_meta"] = json!({"datanotes/tables": t.tables});
            }
            out.push(
                serde_json::from_value(tool).map_err(|e| WasmError::BadTool {
                    tool: t.name.clone(),
                    why: e.to_string(),
                })?,
            );
        }
        Ok(Listing {
            tools: out,
            instructions: Some(instructions).filter(|s| !s.is_empty()),
            skipped: vec![],
            resources: content.resources,
            templates: content.templates,
            prompts: content.prompts,
            fields: Default::default(),
        })
    }

    /// The actor of a call made for `cc`, and the context the guest is passed.
    pub(super) fn actor_of(&self, cc: &CallContext) -> (Actor, WitContext) {
        let (harness, model) = match cc.actor.as_deref().map(|a| a.split_once('/')) {
            Some(Some((h, m))) => (Some(h.trim().to_string()), Some(m.trim().to_string())),
            Some(None) => (cc.actor.clone(), None),
            None => (None, None),
        };
        let actor = Actor::new(
            harness.clone(),
            model.clone(),
            Some(self.scope.name.clone()),
            cc.session.clone(),
            Some(format!("app:{}", self.scope.name)),
        )
        .with_caller(cc.caller.clone());
        let wctx = WitContext {
            harness,
            model,
            session: cc.session.clone(),
        };
        (actor, wctx)
    }

    /// Calls `tool` in an instance: its answer as an MCP `CallToolResult`, or why the call
    /// failed (a trap, a limit).
    pub(super) async fn call_tool(
        self: &Arc<Self>,
        tool: &str,
        args: &Value,
        cc: &CallContext,
        deadline: tokio::time::Instant,
    ) -> Result<Value, WasmError> {
        let (actor, wctx) = self.actor_of(cc);
        if let typed::Pre::Typed(_, t) = self.loaded().await? {
            return self.call_typed(&t, tool, args, actor, cc, deadline).await;
        }
        let args = &args.to_string();
        let mut inst = self.checkout(actor, Some(cc), deadline).await?;
        let run = self.run_span(cc, &mut inst);
        let r = match &inst.app {
            typed::Guest::World(app) => {
                app.datanotes_app_tools()
                    .call_call_tool(&mut inst.store, tool, args, &wctx)
                    .await
            }
            typed::Guest::World2(v) => {
                v.tools
                    .call_call_tool(&mut inst.store, tool, args, &v2_context(wctx))
                    .await
            }
            typed::Guest::Typed(_) => {
                return Err(WasmError::Wasmtime("the component changed kind".into()));
            }
        };
        self.end_run(run, &inst, r.is_err());
        let r = self.checkin(inst, r)?;
        let max = self.limits.max_result_bytes as usize;
        let text = match r {
            Ok(t) | Err(t) if t.len() > max => {
                return Err(WasmError::TooLarge {
                    tool: tool.to_string(),
                    bytes: t.len(),
                    max,
                });
            }
            Ok(t) => t,
            Err(msg) => {
                return Ok(json!({"content": [{"type": "text", "text": msg}], "isError": true}));
            }
        };
        Ok(match serde_json::from_str::<Value>(&text) {
            Ok(v) if v.get("content").is_some_and(Value::is_array) => v,
            Ok(Value::String(s)) => json!({"content": [{"type": "text", "text": s}]}),
            Ok(v) => {
                json!({"content": [{"type": "text", "text": v.to_string()}], "structuredContent": v})
            }
            Err(_) => json!({"content": [{"type": "text", "text": text}]}),
        })
    }

    /// A request beside the tools (0.2: `resources/read`, `prompts/get`) in an instance: the
    /// guest's MCP result, or a JSON-RPC error it answered (as the aggregator passes it on).
    pub(super) async fn serve(
        self: &Arc<Self>,
        req: AppRequest,
        params: &Value,
        cc: &CallContext,
        deadline: tokio::time::Instant,
    ) -> Result<Value, WasmError> {
        let (actor, wctx) = self.actor_of(cc);
        let wctx = v2_context(wctx);
        let mut inst = self.checkout(actor, Some(cc), deadline).await?;
        let text = |k: &str| params.get(k).and_then(Value::as_str).unwrap_or_default();
        let (r, code, want) = match (&inst.app, req) {
            (typed::Guest::World2(v), AppRequest::ReadResource) if v.resources.is_some() => {
                let g = v.resources.as_ref().expect("checked");
                let r = g
                    .call_read_resource(&mut inst.store, text("uri"), &wctx)
                    .await;
                (r, -32002, "contents")
            }
            (typed::Guest::World2(v), AppRequest::GetPrompt) if v.prompts.is_some() => {
                let g = v.prompts.as_ref().expect("checked");
                let args: Vec<(String, String)> = match params.get("arguments") {
                    Some(Value::Object(m)) => m
                        .iter()
                        .map(|(k, v)| {
                            let v = v.as_str().map_or_else(|| v.to_string(), str::to_string);
                            (k.clone(), v)
                        })
                        .collect(),
                    _ => vec![],
                };
                let r = g
                    .call_get_prompt(&mut inst.store, text("name"), &args, &wctx)
                    .await;
                (r, -32602, "messages")
            }
            _ => {
                self.checkin(inst, Ok(()))?;
                return Ok(rpc_error(
                    -32601,
                    format!("the app does not answer {}", req.method()),
                ));
            }
        };
        let r = self.checkin(inst, r)?;
        let max = self.limits.max_result_bytes as usize;
        let what = || {
            format!(
                "{} ({})",
                req.method(),
                text(if want == "contents" { "uri" } else { "name" })
            )
        };
        match r {
            Ok(t) | Err(t) if t.len() > max => Err(WasmError::TooLarge {
                tool: what(),
                bytes: t.len(),
                max,
            }),
            Err(msg) => Ok(rpc_error(code, msg)),
            Ok(t) => match serde_json::from_str::<Value>(&t) {
                Ok(v) if v.get(want).is_some_and(Value::is_array) => Ok(v),
                _ => Ok(rpc_error(
                    -32603,
                    format!(
                        "the app's answer to {} is not JSON with an array \"{want}\"",
                        what()
                    ),
                )),
            },
        }
    }
}
