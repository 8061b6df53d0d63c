//! `planning`: a datanotes WASM app in Rust. Tasks live in `personal.tasks.items`; the app adds,
//! lists and completes them through the engine import, with the app's own rights.

wit_bindgen::generate!({ path: "../../wit", world: "app" });

use datanotes::app::{engine, log, types::Level};
use exports::datanotes::app::tools::{CallContext, Guest, Tool};
use serde_json::{Value, json};

const TABLE: &str = "personal.tasks.items";

struct Planning;

fn tool(name: &str, description: &str, schema: Value) -> Tool {
    Tool { name: name.into(), description: description.into(), input_schema: schema.to_string(), tables: vec![TABLE.into()] }
}

/// Calls an engine operation; an engine refusal becomes the tool's error, teaching text intact.
fn call(op: &str, args: Value) -> Result<Value, String> {
    match engine::call(op, &args.to_string()) {
        Ok(text) => serde_json::from_str(&text).map_err(|e| e.to_string()),
        Err(e) => Err(e.json),
    }
}

fn ensure_table() -> Result<(), String> {
    if call("describe_table", json!({"table": TABLE})).is_ok() {
        return Ok(());
    }
    call(
        "create_table",
        json!({"table": TABLE, "description": "Things to do", "columns": {
            "title": {"type": "text", "required": true},
            "status": {"type": "enum", "values": ["todo", "doing", "done"], "default": "todo"},
            "due": {"type": "date"},
            "tags": {"type": "list"}
        }}),
    )
    .map(|_| ())
}

impl Guest for Planning {
    fn list_tools() -> Vec<Tool> {
        vec![
            tool(
                "planning_add_task",
                "Add a task to personal.tasks.items. Answers its id.",
                json!({"type": "object", "properties": {
                    "title": {"type": "string"},
                    "due": {"type": "string", "description": "YYYY-MM-DD"},
                    "tags": {"type": "array", "items": {"type": "string"}}
                }, "required": ["title"]}),
            ),
            tool(
                "planning_list_tasks",
                "List tasks, optionally only those with a status (todo, doing, done), soonest due first.",
                json!({"type": "object", "properties": {"status": {"type": "string", "enum": ["todo", "doing", "done"]}}}),
            ),
            tool(
                "planning_complete_task",
                "Mark a task done, by id.",
                json!({"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]}),
            ),
        ]
    }

    fn instructions() -> String {
        "planning keeps tasks in personal.tasks.items: planning_add_task to add one, planning_list_tasks to see \
         what is open, planning_complete_task when one is done."
            .into()
    }

    fn call_tool(name: String, arguments: String, ctx: CallContext) -> Result<String, String> {
        let args: Value = serde_json::from_str(&arguments).map_err(|e| format!("arguments are not JSON: {e}"))?;
        let who = ctx.harness.unwrap_or_else(|| "someone".into());
        match name.as_str() {
            "planning_add_task" => {
                ensure_table()?;
                let title = args["title"].as_str().ok_or("give a title")?;
                let mut values = json!({"title": title});
                for k in ["due", "tags"] {
                    if !args[k].is_null() {
                        values[k] = args[k].clone();
                    }
                }
                let r = call("insert_row", json!({"table": TABLE, "values": values}))?;
                log::log(Level::Info, &format!("{who} added task {}", r["id"]));
                Ok(json!({"id": r["id"], "version": r["version"]}).to_string())
            }
            "planning_list_tasks" => {
                let mut q = json!({"table": TABLE, "order_by": [{"column": "due", "dir": "asc"}], "limit": 100});
                if let Some(s) = args["status"].as_str() {
                    q["where"] = json!([{"column": "status", "op": "=", "value": s}]);
                }
                let r = call("select_rows", q)?;
                Ok(r.to_string())
            }
            "planning_complete_task" => {
                let id = args["id"].as_str().ok_or("give the task's id")?;
                let r = call("update_row", json!({"table": TABLE, "id": id, "values": {"status": "done"}}))?;
                Ok(json!({"id": id, "version": r["version"], "status": "done"}).to_string())
            }
            other => Err(format!("planning has no tool {other}")),
        }
    }
}

export!(Planning);
