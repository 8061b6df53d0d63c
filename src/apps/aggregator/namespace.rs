//! The namespace: which tool each name is (the engine's operations first, then the apps' in
//! registration order), the names that are skipped and why, and the tools as `tools/list`
//! writes them, written once per namespace.

use super::*;

/// The resolved namespace: app tools that made it, and those that did not.
#[derive(Default)]
pub(super) struct Namespace {
    /// (app, tool) in listing order.
    pub(super) tools: Vec<(String, Tool)>,
    /// Each tool of `tools` as `tools/list` writes it, written once per namespace.
    pub(super) json: Vec<Box<RawValue>>,
    pub(super) by_name: HashMap<String, usize>,
    pub(super) skipped: HashMap<String, Vec<Value>>,
    /// The fields of a tool of `tools` (by index) that the engine does not model, as its app
    /// wrote them (`execution`).
    pub(super) fields: HashMap<usize, serde_json::Map<String, Value>>,
    /// Each app's section of the instructions, in registration order.
    pub(super) instructions: Vec<(String, String)>,
    /// The apps' resources, templates and prompts.
    pub(super) content: resources::Content,
    /// The app's own name of each tool of `tools` (by index) listed under another (its
    /// app's `tool_prefix` in front).
    pub(super) own: HashMap<usize, String>,
}

impl Namespace {
    /// The name the app gave tool `i` of `tools` (what it is called with).
    pub(super) fn own_name(&self, i: usize) -> &str {
        match self.own.get(&i) {
            Some(n) => n,
            None => &self.tools[i].1.name,
        }
    }
}

/// The name of `/mcp`'s meta-tool of the search listing (`call_tool {name, arguments}`): no
/// app may hold it.
pub const CALL_TOOL: &str = "call_tool";

/// A tool name an MCP client accepts: 1 to 64 of `[A-Za-z0-9_-]`.
pub fn valid_tool_name(n: &str) -> bool {
    !n.is_empty()
        && n.len() <= 64
        && n.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// The tables a tool declares in `_meta["datanotes/tables"]`.
pub fn declared_tables(t: &Tool) -> Vec<String> {
    t.meta
        .as_ref()
        .and_then(|m| m.get("datanotes/tables"))
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(String::from)
                .collect()
        })
        .unwrap_or_default()
}

/// A tool as `tools/list` writes it.
pub(super) fn tool_json(t: &Tool) -> Box<RawValue> {
    serde_json::value::to_raw_value(t).expect("a tool is JSON")
}

/// A tool as `tools/list` writes it, with the fields its app wrote that the engine does not
/// model (`execution`): after the modelled ones, which they never replace.
pub(super) fn tool_json_with(t: &Tool, fields: &serde_json::Map<String, Value>) -> Box<RawValue> {
    let mut v = serde_json::to_value(t).expect("a tool is JSON");
    if let Some(o) = v.as_object_mut() {
        for (k, f) in fields {
            o.entry(k.clone()).or_insert_with(|| f.clone());
        }
    }
    serde_json::value::to_raw_value(&v).expect("a tool is JSON")
}

/// The engine's operations as MCP tools.
pub(super) fn operation_tools() -> Vec<Tool> {
    ops::describe_all()
        .iter()
        .filter_map(|o| {
            let mut t = json!({"name": o["name"], "description": o["description"], "inputSchema": o["inputSchema"],
                               "annotations": annotations(o["name"].as_str()?, o["access"].as_str()?)});
            if o["inputSchema"].get("type").is_none() {
                t["inputSchema"]["type"] = json!("object");
            }
            serde_json::from_value(t).ok()
        })
        .collect()
}

/// An operation's MCP tool annotations, from its access class: a read is read-only and
/// idempotent; a write may destroy (a delete, a drop or an alteration of a table, maintenance),
/// though the journal can undo it; nothing reaches beyond the vault. The title is the name in
/// words (`list_tables`: "List tables").
fn annotations(name: &str, access: &str) -> Value {
    let mut title = name.replace('_', " ");
    if let Some(first) = title.get(..1) {
        title.replace_range(..1, &first.to_uppercase());
    }
    let read = access == "read";
    let destructive = !read
        && (access == "maintain"
            || ["delete_", "drop_", "alter_"]
                .iter()
                .any(|p| name.starts_with(p)));
    json!({"title": title, "readOnlyHint": read, "destructiveHint": destructive,
           "idempotentHint": read, "openWorldHint": false})
}

impl Aggregator {
    /// Recomputes the namespace from the last known listings.
    pub(super) fn resolve(&self) {
        self.resolve_with(None)
    }

    /// Recomputes the namespace. A name an app holds stays with it while it lists it; a name
    /// nobody holds goes to the first app in registration order, and so does a name in the
    /// first listing of a `newcomer` (an app listed for the first time).
    pub(super) fn resolve_with(&self, newcomer: Option<&str>) {
        let _one = self.resolving.lock().unwrap_or_else(|e| e.into_inner());
        let slots = self.slots.read().unwrap();
        let mut taken: HashMap<String, String> = ops::CATALOG
            .iter()
            .map(|o| (o.name.to_string(), "engine".to_string()))
            .chain([(CALL_TOOL.to_string(), "engine".to_string())])
            .collect();
        // Why each tool of each app cannot be listed whoever holds its name (name, size).
        let unfit: Vec<Vec<Option<Value>>> = slots
            .iter()
            .map(|s| {
                let tools = s.listing.as_ref().map_or(&[][..], |l| &l.tools[..]);
                tools.iter().map(|t| self.unfit(t)).collect()
            })
            .collect();
        // Each app's tool prefix (set by the owner; none: "").
        let prefixes: Vec<String> = slots
            .iter()
            .map(|s| {
                let rec = self.registry.get(&s.name);
                rec.and_then(|r| r.tool_prefix).unwrap_or_default()
            })
            .collect();
        let held = self.held(&slots, &unfit, &prefixes, newcomer);
        let mut ns = Namespace::default();
        let mut instructions = vec![];
        for ((s, unfit), prefix) in slots.iter().zip(&unfit).zip(&prefixes) {
            let Some(l) = &s.listing else { continue };
            // What the app itself could not offer (a typed function with a resource, say).
            for v in &l.skipped {
                ns.skipped
                    .entry(s.name.clone())
                    .or_default()
                    .push(v.clone());
            }
            if let Some(i) = l.instructions.as_ref().filter(|i| !i.trim().is_empty()) {
                let i = self.caps.instructions(&s.name, i.trim());
                instructions.push((s.name.clone(), format!("## App {}\n{i}", s.name)));
            }
            let mut seen = HashSet::new();
            for (t, unfit) in l.tools.iter().zip(unfit) {
                let name = format!("{prefix}{}", t.name);
                let skip = if let Some(v) = unfit {
                    Some(v.clone())
                } else if !valid_tool_name(&name) {
                    Some(json!({"name": name, "takenBy": null,
                                "reason": "with the app's tool_prefix the name is over 64 characters"}))
                } else if let Some(by) = held.get(&name).filter(|by| **by != s.name) {
                    Some(json!({"name": name, "takenBy": by}))
                } else if let Some(by) = taken.get(&name) {
                    Some(json!({"name": name, "takenBy": by}))
                } else if !seen.insert(name.clone()) {
                    Some(
                        json!({"name": name, "takenBy": s.name, "reason": "listed twice by the app"}),
                    )
                } else {
                    None
                };
                match skip {
                    Some(v) => ns.skipped.entry(s.name.clone()).or_default().push(v),
                    None => {
                        if let Some(f) = l.fields.get(t.name.as_ref()) {
                            ns.fields.insert(ns.tools.len(), f.clone());
                        }
                        taken.insert(name.clone(), s.name.clone());
                        let mut t = t.clone();
                        if !prefix.is_empty() {
                            ns.own.insert(ns.tools.len(), t.name.to_string());
                            t.name = name.clone().into();
                        }
                        ns.by_name.insert(name, ns.tools.len());
                        if let Some(m) = t.meta.as_mut() {
                            resources::name_tool_ui(&s.name, m);
                        }
                        ns.tools.push((s.name.clone(), t));
                    }
                }
            }
        }
        ns.instructions = instructions;
        ns.content = resources::resolve(&slots, &prefixes, &self.caps);
        ns.json = ns
            .tools
            .iter()
            .enumerate()
            .map(|(i, (_, t))| match ns.fields.get(&i) {
                None => tool_json(t),
                Some(f) => tool_json_with(t, f),
            })
            .collect();
        // describe_table shows the tools that declare each table.
        let mut per_table: HashMap<String, Vec<Value>> = HashMap::new();
        for (app, t) in &ns.tools {
            // A tool the MCP Apps extension marks as its view's only is not the model's.
            if !resources::for_the_model(t) {
                continue;
            }
            for table in declared_tables(t) {
                per_table
                    .entry(table)
                    .or_default()
                    .push(json!({"name": t.name, "app": app, "description": t.description}));
            }
        }
        self.engine.set_table_tools(per_table);
        self.index_tools(&ns);
        let mut cur = self.ns.write().unwrap();
        let changed = cur.tools != ns.tools;
        let content_changed = cur.content != ns.content;
        *cur = Arc::new(ns);
        drop(cur);
        if changed {
            self.changed.send_modify(|v| *v += 1);
        }
        if content_changed {
            self.content_changed.send_modify(|v| *v += 1);
        }
    }

    /// Why a tool cannot be listed, as its `skippedTools` entry: a name MCP clients refuse, or
    /// a description or schema over the caps.
    pub(super) fn unfit(&self, t: &Tool) -> Option<Value> {
        let name = t.name.to_string();
        if !valid_tool_name(&name) {
            return Some(
                json!({"name": name, "takenBy": null, "reason": "the name must match ^[a-zA-Z0-9_-]{1,64}$"}),
            );
        }
        let why = self.caps.tool_over(t)?;
        Some(json!({"name": name, "takenBy": null, "reason": why}))
    }

    /// The names apps hold in the namespace now and still list (fit): they stay theirs.
    /// (Names as listed: with each app's prefix, `prefixes`, in front.)
    pub(super) fn held(
        &self,
        slots: &[Slot],
        unfit: &[Vec<Option<Value>>],
        prefixes: &[String],
        newcomer: Option<&str>,
    ) -> HashMap<String, String> {
        let cur = self.ns.read().unwrap().clone();
        let mut held = HashMap::new();
        for ((s, unfit), prefix) in slots.iter().zip(unfit).zip(prefixes) {
            let Some(l) = &s.listing else { continue };
            for (t, unfit) in l.tools.iter().zip(unfit) {
                if unfit.is_some() {
                    continue;
                }
                let name = format!("{prefix}{}", t.name);
                if cur
                    .by_name
                    .get(&name)
                    .is_some_and(|&i| cur.tools[i].0 == s.name)
                {
                    held.insert(name, s.name.clone());
                }
            }
        }
        // A newcomer's first listing: registration order decides against later holders.
        let pos = |app: &str| slots.iter().position(|s| s.name == app);
        if let Some(c) = newcomer.and_then(|c| pos(c).map(|i| (i, &slots[i])))
            && let Some(l) = &c.1.listing
        {
            for (t, unfit) in l.tools.iter().zip(&unfit[c.0]) {
                let name = format!("{}{}", prefixes[c.0], t.name);
                if unfit.is_none()
                    && held
                        .get(&name)
                        .and_then(|h| pos(h))
                        .is_some_and(|h| c.0 < h)
                {
                    held.remove(&name);
                }
            }
        }
        held
    }

    pub(super) fn app_tool_names(&self, app: &str) -> Vec<String> {
        let ns = self.ns.read().unwrap().clone();
        ns.tools
            .iter()
            .filter(|(a, _)| a == app)
            .map(|(_, t)| t.name.to_string())
            .collect()
    }

    /// Whether a call of this tool may send notifications or requests before its result (its
    /// app's backend says so): such a call is answered as a stream.
    pub fn streams(&self, tool: &str) -> bool {
        let ns = self.ns.read().unwrap().clone();
        let Some(&i) = ns.by_name.get(tool) else {
            return false;
        };
        let app = &ns.tools[i].0;
        self.slots
            .read()
            .unwrap()
            .iter()
            .find(|s| &s.name == app)
            .is_some_and(|s| s.backend.streams())
    }
}
