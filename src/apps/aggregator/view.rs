//! Each caller's view of the namespace's tools: which it may list and call (its `call_tools`,
//! through `auth::authorize`), `tools/list` written from the namespace's JSON, and the
//! instructions of the apps it may use.

use super::{Aggregator, Namespace};
use crate::auth::{self, Access, Caller, Target};
use rmcp::model::Tool;
use serde_json::value::RawValue;
use serde_json::{Value, json};
use std::collections::HashSet;
use std::sync::Arc;

/// MCP's `tools/list` result (`{"tools": [...]}`), as [`Aggregator::tool_list`] picks it.
pub struct ToolList<'a> {
    ops: &'a [Box<RawValue>],
    ns: Arc<Namespace>,
    picks: Vec<usize>,
}

impl ToolList<'_> {
    fn tool(&self, i: usize) -> &RawValue {
        match self.ops.get(i) {
            Some(t) => t,
            None => &self.ns.json[i - self.ops.len()],
        }
    }
}

impl serde::Serialize for ToolList<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        #[derive(serde::Serialize)]
        struct Out<'b> {
            tools: Vec<&'b RawValue>,
        }
        let tools = self.picks.iter().map(|&i| self.tool(i)).collect();
        Out { tools }.serialize(s)
    }
}

impl Aggregator {
    /// Every tool a caller may list and call (its `call_tools`, through `auth::authorize`):
    /// the engine's operations first, then the apps', each with the app that serves it
    /// (`engine` for operations).
    fn visible(&self, caller: &Caller, hidden: &HashSet<String>) -> Vec<(String, Tool)> {
        let ns = self.ns.read().unwrap().clone();
        let ops = self.op_tools.iter().map(|t| ("engine", t));
        let all: Vec<_> = ops
            .chain(ns.tools.iter().map(|(a, t)| (&a[..], t)))
            .collect();
        self.picks(caller, &ns, hidden)
            .into_iter()
            .map(|i| (all[i].0.to_string(), all[i].1.clone()))
            .collect()
    }

    /// Which tools a caller may list and call, but those `hidden` from its agent
    /// (`shown.rs`): indices into the operations' tools followed by the namespace's.
    fn picks(&self, caller: &Caller, ns: &Namespace, hidden: &HashSet<String>) -> Vec<usize> {
        let apps = ns.tools.iter().map(|(_, t)| t);
        // An operation's name is no app tool's: only apps' tools are hidden.
        self.op_tools
            .iter()
            .chain(apps)
            .enumerate()
            .filter(|(_, t)| {
                (hidden.is_empty() || !hidden.contains(t.name.as_ref()))
                    && crate::ops::listed(caller, &t.name)
            })
            .map(|(i, _)| i)
            .collect()
    }

    /// MCP's `tools/list` result for a caller (every tool a caller may list and call, the
    /// engine's operations first), written from each tool's JSON as the namespace holds it:
    /// no tool is copied or written again per listing.
    pub fn tool_list(&self, caller: &Caller, hidden: &HashSet<String>) -> ToolList<'_> {
        let ns = self.ns.read().unwrap().clone();
        ToolList {
            picks: self.picks(caller, &ns, hidden),
            ops: &self.op_json,
            ns,
        }
    }

    /// Every tool a caller may list and call, but those `hidden` from its agent: the engine's
    /// operations first, then the apps'.
    pub fn tools(&self, caller: &Caller, hidden: &HashSet<String>) -> Vec<Tool> {
        self.visible(caller, hidden)
            .into_iter()
            .map(|(_, t)| t)
            .collect()
    }

    /// Every tool a caller may list and call, with the app that serves it (`engine` for
    /// operations).
    pub fn tools_json(&self, caller: &Caller) -> Value {
        let out: Vec<Value> = self
            .visible(caller, &HashSet::new())
            .into_iter()
            .map(|(app, t)| {
                let mut v = serde_json::to_value(t).unwrap_or_default();
                v["app"] = json!(app);
                v
            })
            .collect();
        json!({"tools": out, "instructions": self.instructions(caller)})
    }

    /// The instructions for agents: the engine's, then those of each app the caller may call a
    /// tool of (or that lists no tool now).
    pub fn instructions(&self, caller: &Caller) -> String {
        let ns = self.ns.read().unwrap().clone();
        let shown = |app: &str| {
            let mut tools = ns.tools.iter().filter(|(a, _)| a == app).peekable();
            tools.peek().is_none()
                || tools.any(|(_, t)| {
                    auth::authorize(caller, Access::CallTool, Target::Tool(&t.name)).is_ok()
                })
        };
        let sections: Vec<&str> = ns
            .instructions
            .iter()
            .filter(|(app, _)| shown(app))
            .map(|(_, i)| i.as_str())
            .collect();
        // What the caller can do, and no more.
        let mut s = String::from(
            "datanotes: Markdown notes as typed tables named catalog.schema.table. Start with list_tables and \
             describe_table; read with select_rows, get_row and search_notes; find a tool with search_tools.",
        );
        if auth::may_ever(caller, Access::RowWrite) {
            s.push_str(
                " Write with insert_row, update_row and delete_row. Every write is validated (errors say \
                 which value broke which rule and how to fix it) and journaled (list_migrations)",
            );
            s.push_str(if auth::may_ever(caller, Access::Maintain) {
                "; it can be undone (undo_migration)."
            } else {
                "."
            });
        }
        if !sections.is_empty() {
            s.push_str("\n\n");
            s.push_str(&sections.join("\n\n"));
        }
        s
    }

    /// Who serves a tool of the namespace: its app, or `engine` (an operation, or a name no app
    /// holds).
    pub fn served_by(&self, tool: &str) -> String {
        let ns = self.ns.read().unwrap().clone();
        match ns.by_name.get(tool) {
            Some(&i) => ns.tools[i].0.clone(),
            None => "engine".into(),
        }
    }
}
