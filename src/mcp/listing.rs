//! The search listing: a client that connects to `/mcp?tools=search` is listed two tools
//! whatever the number behind the address, `search_tools` (the engine's operation) and
//! `call_tool {name, arguments}` (any tool the caller may call, with the same checks, events
//! and journal as a direct call), so the listing an agent pays for at each turn stays small.
//! The tools a `search_tools` finds on a session join that session's listing, and the client
//! is told (`notifications/tools/list_changed`), so a client that follows it can call them
//! directly.
//!
//! Both tools are there for every token in search mode: its `call_tools` bound what they find
//! and call, not whether they exist. `call_tool` is a name no app can hold.
//!
//! An app entry's `tool_listing: "search"` gives its token the same listing.

use super::Session;
use crate::apps::ToolListing;
use crate::auth::Caller;
use crate::server::Shared;
use rmcp::ErrorData;
use rmcp::model::{CallToolResult, Tool};
use serde_json::{Value, json};
use std::collections::HashSet;
use std::sync::Arc;

use crate::apps::aggregator::CALL_TOOL;
/// The engine's search operation.
const SEARCH_TOOLS: &str = "search_tools";
/// The most tools a session's listing gains from its searches.
pub(super) const MAX_FOUND: usize = 200;

/// Whether a request is served the search listing: it asked for it (`/mcp?tools=search`), or
/// its token says so (`tool_listing: "search"`: an app's entry, a grant's consent).
pub(super) fn search_mode(server: &Shared, parts: &http::request::Parts, caller: &Caller) -> bool {
    let asked = parts
        .uri
        .query()
        .is_some_and(|q| q.split('&').any(|kv| kv == "tools=search"));
    asked || token_listing(server, caller).0 == ToolListing::Search
}

/// How a caller's token is listed, and its pinned tools (an app's entry, a grant's consent).
fn token_listing(server: &Shared, caller: &Caller) -> (ToolListing, Vec<String>) {
    match caller {
        Caller::App(a) => server
            .apps
            .get(&a.name)
            .map(|r| (r.tool_listing, r.pinned_tools.clone()))
            .unwrap_or_default(),
        Caller::Grant(g) => (g.tool_listing, g.pinned_tools.clone()),
        Caller::Owner | Caller::Metrics(_) => Default::default(),
    }
}

/// The tools a caller's search listing shows besides the search: its token's pinned patterns.
pub(super) fn pinned(server: &Shared, caller: &Caller) -> Vec<String> {
    token_listing(server, caller).1
}

/// The caller in search mode: `search_tools` is one of the tools it may call.
pub(super) fn widen(caller: Caller) -> Caller {
    let add = |calls: &mut Vec<String>| {
        if !calls.iter().any(|p| p == SEARCH_TOOLS) {
            calls.push(SEARCH_TOOLS.into());
        }
    };
    match caller {
        c @ (Caller::Owner | Caller::Metrics(_)) => c,
        Caller::App(a) => {
            let mut a = (*a).clone();
            add(&mut a.call_tools);
            Caller::App(Arc::new(a))
        }
        Caller::Grant(g) => {
            let mut g = (*g).clone();
            add(&mut g.scope.call_tools);
            Caller::Grant(Arc::new(g))
        }
    }
}

/// The `call_tool` meta-tool as listed.
fn call_tool() -> Tool {
    let schema = json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "description": "The tool's name, as search_tools answered it."},
            "arguments": {"type": "object", "description": "Its arguments, as its inputSchema describes them."}
        },
        "required": ["name"],
        "additionalProperties": false
    });
    let Value::Object(schema) = schema else {
        unreachable!("an object")
    };
    Tool::new(
        CALL_TOOL,
        "Call a tool found with search_tools, by its name: {name, arguments}. It runs as if called \
         directly (the same checks, answer and journal).",
        Arc::new(schema),
    )
}

/// The search listing of a caller: `search_tools`, `call_tool`, then its pinned tools and the
/// tools its session's searches found (those it may still call and is shown, from `visible`:
/// its whole listing), in the listing's order.
pub(super) fn tools(visible: Vec<Tool>, session: Option<&Session>, pinned: &[String]) -> Vec<Tool> {
    let found: HashSet<String> = session
        .map(|s| s.found.lock().unwrap().iter().cloned().collect())
        .unwrap_or_default();
    let mut out = vec![];
    let mut rest = vec![];
    for t in visible {
        if t.name == SEARCH_TOOLS {
            out.push(t);
        } else if found.contains(t.name.as_ref())
            || pinned
                .iter()
                .any(|p| crate::auth::tool_pattern_matches(p, &t.name))
        {
            rest.push(t);
        }
    }
    out.push(call_tool());
    out.extend(rest);
    out
}

/// Notes the tools a session's `search_tools` answered: new ones join its listing, and the
/// client is told.
pub(super) async fn found(session: &Session, result: &CallToolResult) {
    let Some(tools) = result
        .structured_content
        .as_ref()
        .and_then(|v| v.get("tools"))
        .and_then(Value::as_array)
    else {
        return;
    };
    let added = {
        let mut found = session.found.lock().unwrap();
        let mut added = false;
        // Tools only: a skill found is read, not listed.
        let names = tools
            .iter()
            .filter(|t| t.get("kind").and_then(Value::as_str) != Some("skill"))
            .filter_map(|t| t.get("name")?.as_str());
        for name in names {
            if found.len() >= MAX_FOUND {
                break;
            }
            if !found.iter().any(|f| f == name) {
                found.push(name.to_string());
                added = true;
            }
        }
        added
    };
    if added {
        let _ = session.peer.notify_tool_list_changed().await;
    }
}

/// A call of `call_tool`: the tool it names and its arguments; anything else as it is.
pub(super) fn unwrap(tool: String, args: Value) -> Result<(String, Value), ErrorData> {
    if tool != CALL_TOOL {
        return Ok((tool, args));
    }
    let bad = |m: &str| ErrorData::invalid_params(format!("call_tool: {m}"), None);
    let Value::Object(mut a) = args else {
        return Err(bad("the arguments must be an object {name, arguments}"));
    };
    let name = match a.remove("name") {
        Some(Value::String(n)) if !n.is_empty() => n,
        _ => {
            return Err(bad(
                "name must be the name of a tool (search_tools finds them)",
            ));
        }
    };
    if name == CALL_TOOL {
        return Err(bad("name must be another tool than call_tool"));
    }
    let inner = match a.remove("arguments") {
        None | Some(Value::Null) => Value::Object(Default::default()),
        Some(v @ Value::Object(_)) => v,
        Some(_) => return Err(bad("arguments must be an object")),
    };
    if let Some(k) = a.keys().next() {
        return Err(bad(&format!(
            "unknown field {k:?}: give {{name, arguments}}"
        )));
    }
    Ok((name, inner))
}
