//! `planning2`: the planning app on the world 0.2 (`wit/0.2`), in Rust. Besides planning's
//! tools it reports progress and learns of cancellation (`planning_focus`, a focus timer), and
//! offers resources (the open tasks, and each task through a template) and a prompt (plan the
//! day).

wit_bindgen::generate!({ path: "../../wit/0.2", world: "app-with-content" });

use datanotes::app::types::{Prompt, PromptArgument, Resource, ResourceTemplate};
use datanotes::app::{engine, log, types::Level};
use exports::datanotes::app::tools::{CallContext, Tool};
use exports::datanotes::app::{prompts, resources, tools};
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

/// A task as a Markdown line.
fn line(row: &Value) -> String {
    let v = &row["values"];
    let due = v["due"].as_str().map(|d| format!(" (due {d})")).unwrap_or_default();
    format!("- [{}] {}{due} `{}`", if v["status"] == "done" { "x" } else { " " }, v["title"].as_str().unwrap_or(""), row["id"].as_str().unwrap_or(""))
}

/// The open tasks, as a Markdown list.
fn open_tasks() -> Result<String, String> {
    if call("describe_table", json!({"table": TABLE})).is_err() {
        return Ok("No tasks yet.\n".into());
    }
    let r = call(
        "select_rows",
        json!({"table": TABLE, "where": [{"column": "status", "op": "!=", "value": "done"}],
               "order_by": [{"column": "due", "dir": "asc"}], "limit": 100}),
    )?;
    let rows = r["rows"].as_array().cloned().unwrap_or_default();
    if rows.is_empty() {
        return Ok("Nothing open.\n".into());
    }
    Ok(rows.iter().map(line).collect::<Vec<_>>().join("\n") + "\n")
}

impl tools::Guest for Planning {
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
            tool(
                "planning_focus",
                "A focus timer: runs for the given seconds, reporting progress every tenth of a second; stops early when the caller cancels.",
                json!({"type": "object", "properties": {"seconds": {"type": "number", "minimum": 0, "maximum": 3600}}, "required": ["seconds"]}),
            ),
        ]
    }

    fn instructions() -> String {
        "planning keeps tasks in personal.tasks.items: planning_add_task to add one, planning_list_tasks to see \
         what is open, planning_complete_task when one is done. Read the resource tasks://open for the open tasks, \
         or get the prompt planning_plan_day."
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
            "planning_focus" => {
                let seconds = args["seconds"].as_f64().ok_or("give the seconds")?.clamp(0.0, 3600.0);
                let steps = (seconds * 100.0) as u64;
                for step in 0..steps {
                    // The caller gave up: stop now (the instance stays warm for the next call).
                    if engine::cancelled() {
                        return Ok(json!({"focused": step as f64 / 100.0, "cancelled": true}).to_string());
                    }
                    if step % 10 == 0 {
                        let done = step as f64 / 100.0;
                        engine::progress(done, Some(seconds), Some(&format!("{:.1} s to go", seconds - done)));
                    }
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                engine::progress(seconds, Some(seconds), Some("done"));
                Ok(json!({"focused": seconds, "cancelled": false}).to_string())
            }
            other => Err(format!("planning has no tool {other}")),
        }
    }
}

impl resources::Guest for Planning {
    fn list_resources() -> Vec<Resource> {
        vec![Resource {
            uri: "tasks://open".into(),
            name: "Open tasks".into(),
            description: Some("The tasks not done yet, soonest due first, as a Markdown list".into()),
            mime_type: Some("text/markdown".into()),
        }]
    }

    fn list_resource_templates() -> Vec<ResourceTemplate> {
        vec![ResourceTemplate {
            uri_template: "tasks://task/{id}".into(),
            name: "A task".into(),
            description: Some("One task, by id, as Markdown".into()),
            mime_type: Some("text/markdown".into()),
        }]
    }

    fn read_resource(uri: String, _ctx: CallContext) -> Result<String, String> {
        let text = if uri == "tasks://open" {
            open_tasks()?
        } else if let Some(id) = uri.strip_prefix("tasks://task/") {
            let row = call("get_row", json!({"table": TABLE, "id": id})).map_err(|_| format!("no task {id}"))?;
            line(&row) + "\n"
        } else {
            return Err(format!("no resource {uri}"));
        };
        Ok(json!({"contents": [{"uri": uri, "mimeType": "text/markdown", "text": text}]}).to_string())
    }
}

impl prompts::Guest for Planning {
    fn list_prompts() -> Vec<Prompt> {
        vec![Prompt {
            name: "planning_plan_day".into(),
            description: Some("Plan the day from the open tasks".into()),
            arguments: vec![PromptArgument {
                name: "focus".into(),
                description: Some("What matters most today".into()),
                required: false,
            }],
        }]
    }

    fn get_prompt(name: String, arguments: Vec<(String, String)>, _ctx: CallContext) -> Result<String, String> {
        if name != "planning_plan_day" {
            return Err(format!("no prompt {name}"));
        }
        let focus = arguments.iter().find(|(k, _)| k == "focus").map(|(_, v)| format!(" Focus on: {v}.")).unwrap_or_default();
        let text = format!("Here are my open tasks:\n\n{}\nPlan my day: pick at most three, in order.{focus}", open_tasks()?);
        Ok(json!({"description": "Plan the day", "messages": [
            {"role": "user", "content": {"type": "text", "text": text}},
            {"role": "user", "content": {"type": "resource_link", "uri": "tasks://open", "name": "Open tasks", "mimeType": "text/markdown"}}
        ]})
        .to_string())
    }
}

export!(Planning);
