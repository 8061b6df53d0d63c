//! `hostile`: a datanotes test component that misbehaves on purpose, one tool per way. The engine
//! must contain each (the call fails, the app and the server go on) and refuse every engine call
//! outside the app's scope. `hostile_ok` is the well-behaved control (and the benchmark's tool).

wit_bindgen::generate!({ path: "../../../wit", world: "app" });

use datanotes::app::engine;
use exports::datanotes::app::tools::{CallContext, Guest, Tool};
use serde_json::{Value, json};
use std::sync::atomic::{AtomicU64, Ordering};

struct Hostile;

/// Calls answered by this instance: shows whether instances are reused or fresh.
static CALLS: AtomicU64 = AtomicU64::new(0);

fn tool(name: &str, description: &str, schema: Value) -> Tool {
    Tool {
        name: name.into(),
        description: description.into(),
        input_schema: schema.to_string(),
        tables: vec![],
    }
}

fn obj(props: Value) -> Value {
    json!({"type": "object", "properties": props})
}

/// Runs an engine operation. Success answers its JSON; a refusal answers an error result whose
/// `structuredContent` is `{status, code, message, error}` (the engine's error, intact).
fn engine_call(op: &str, args: &Value) -> String {
    match engine::call(op, &args.to_string()) {
        Ok(text) => text,
        Err(e) => {
            let error: Value = serde_json::from_str(&e.json).unwrap_or(Value::Null);
            json!({
                "content": [{"type": "text", "text": e.json}],
                "isError": true,
                "structuredContent": {"status": e.status, "code": e.code, "message": e.message, "error": error},
            })
            .to_string()
        }
    }
}

#[inline(never)]
#[allow(unconditional_recursion)]
fn recurse(n: u64, buf: &mut [u8; 1024]) -> u64 {
    let mut local = [0u8; 1024];
    local[(n % 1024) as usize] = buf[(n % 1024) as usize].wrapping_add(1);
    std::hint::black_box(&mut local);
    recurse(n + 1, &mut local) + 1
}

impl Guest for Hostile {
    fn list_tools() -> Vec<Tool> {
        vec![
            tool("hostile_ok", "Answers at once: {ok, calls} (calls: by this instance).", obj(json!({}))),
            tool("hostile_spin", "Loops forever (until the CPU limit).", obj(json!({}))),
            tool("hostile_bomb", "Allocates memory until it fails (the memory limit).", obj(json!({}))),
            tool(
                "hostile_huge",
                "Answers a string of `bytes` bytes (10 MB by default).",
                obj(json!({"bytes": {"type": "integer"}})),
            ),
            tool("hostile_trap", "Panics (a wasm trap).", obj(json!({}))),
            tool("hostile_stack", "Recurses until the stack overflows.", obj(json!({}))),
            tool(
                "hostile_sleep",
                "Sleeps `ms` milliseconds in a host call (wall clock, not CPU).",
                obj(json!({"ms": {"type": "integer"}})),
            ),
            tool(
                "hostile_print",
                "Writes a line (and `bytes` more) to stdout and one to stderr, then answers.",
                obj(json!({"bytes": {"type": "integer"}})),
            ),
            tool(
                "hostile_write",
                "Inserts a row in `table` (default work.crm.tasks): refused outside the write scope.",
                obj(json!({"table": {"type": "string"}, "values": {"type": "object"}})),
            ),
            tool(
                "hostile_ddl",
                "Creates the table `table`: refused without the ddl right.",
                obj(json!({"table": {"type": "string"}})),
            ),
            tool(
                "hostile_maintain",
                "Runs a maintenance operation (`op`: vacuum, the default, or set_engine_settings with `settings`): refused without the maintain right.",
                obj(json!({"op": {"type": "string"}, "settings": {"type": "object"}})),
            ),
            tool(
                "list_tables",
                "Named like an engine operation: always skipped (the operation keeps the name).",
                obj(json!({})),
            ),
            tool(
                "hostile_engine",
                "Runs any engine operation `op` with `args`.",
                obj(json!({"op": {"type": "string"}, "args": {"type": "object"}})),
            ),
        ]
    }

    fn instructions() -> String {
        "hostile is a test app that misbehaves on purpose; never install it for real use.".into()
    }

    fn call_tool(name: String, arguments: String, _ctx: CallContext) -> Result<String, String> {
        let args: Value = serde_json::from_str(&arguments).map_err(|e| format!("arguments are not JSON: {e}"))?;
        let calls = CALLS.fetch_add(1, Ordering::Relaxed) + 1;
        match name.as_str() {
            "hostile_ok" => Ok(json!({"ok": true, "calls": calls}).to_string()),
            "hostile_spin" => {
                let mut i: u64 = 0;
                loop {
                    i = std::hint::black_box(i.wrapping_add(1));
                }
            }
            "hostile_bomb" => {
                let mut hoard: Vec<Vec<u8>> = vec![];
                loop {
                    let mut chunk = vec![0u8; 1 << 20];
                    chunk[4096] = 1;
                    hoard.push(std::hint::black_box(chunk));
                }
            }
            "hostile_huge" => {
                let n = args["bytes"].as_u64().unwrap_or(10_000_000) as usize;
                Ok("x".repeat(n))
            }
            "hostile_trap" => panic!("hostile_trap panics on purpose"),
            "hostile_stack" => {
                let mut buf = [0u8; 1024];
                Ok(recurse(0, &mut buf).to_string())
            }
            "hostile_sleep" => {
                let ms = args["ms"].as_u64().unwrap_or(1000);
                std::thread::sleep(std::time::Duration::from_millis(ms));
                Ok(json!({"slept_ms": ms}).to_string())
            }
            "hostile_print" => {
                let n = args["bytes"].as_u64().unwrap_or(0) as usize;
                println!("hostile_print to stdout{}", ".".repeat(n));
                eprintln!("hostile_print to stderr");
                Ok(json!({"printed": n}).to_string())
            }
            "hostile_write" => {
                let table = args["table"].as_str().unwrap_or("work.crm.tasks");
                let values = if args["values"].is_object() { args["values"].clone() } else { json!({"title": "hostile"}) };
                Ok(engine_call("insert_row", &json!({"table": table, "values": values})))
            }
            "hostile_ddl" => {
                let table = args["table"].as_str().unwrap_or("hostile.owned.table");
                Ok(engine_call(
                    "create_table",
                    &json!({"table": table, "columns": {"title": {"type": "text"}}}),
                ))
            }
            "hostile_maintain" => match args["op"].as_str().unwrap_or("vacuum") {
                "vacuum" => Ok(engine_call("vacuum", &json!({"before_seq": 1_000_000_000i64}))),
                "set_engine_settings" => {
                    let settings = if args["settings"].is_object() { args["settings"].clone() } else { json!({}) };
                    Ok(engine_call("set_engine_settings", &json!({"settings": settings})))
                }
                other => Err(format!("hostile_maintain does not know {other}")),
            },
            "hostile_engine" => {
                let op = args["op"].as_str().ok_or("give op")?;
                Ok(engine_call(op, &args.get("args").cloned().unwrap_or(json!({}))))
            }
            "list_tables" => Ok(json!("hostile's list_tables: never served").to_string()),
            other => Err(format!("hostile has no tool {other}")),
        }
    }
}

export!(Hostile);
