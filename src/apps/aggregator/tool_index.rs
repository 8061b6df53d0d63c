//! The tool index's listings: after each change of the namespace, the engine's operations
//! (as the app `engine`) and each app's listed tools, with its instructions, go to the
//! engine's [`crate::engine::tools::ToolIndex`] (operation `search_tools`).

use super::{Aggregator, Namespace};
use crate::engine::tools::Tool as Doc;
use rmcp::model::Tool;
use serde_json::Value;
use std::sync::Arc;

/// What is said of the engine, for its operations in the index.
const ENGINE: &str = "Markdown notes as typed tables (catalog.schema.table): rows, columns, \
search, history and undo";

fn doc(t: &Tool, context: &Arc<str>) -> Doc {
    Doc::new(
        &t.name,
        t.description.as_deref().unwrap_or(""),
        Value::Object((*t.input_schema).clone()),
        context.clone(),
    )
}

impl Aggregator {
    /// Hands the index every listing of `ns`.
    pub(super) fn index_tools(&self, ns: &Namespace) {
        let engine = Doc::context("engine", ENGINE);
        let mut apps: Vec<(String, Vec<Doc>)> = vec![(
            "engine".into(),
            self.op_tools.iter().map(|t| doc(t, &engine)).collect(),
        )];
        for (app, t) in &ns.tools {
            if apps.last().is_none_or(|(a, _)| a != app) {
                apps.push((app.clone(), vec![]));
            }
            let instructions = ns
                .instructions
                .iter()
                .find(|(a, _)| a == app)
                .map_or("", |(_, i)| i.as_str());
            let context = match apps.last().and_then(|(_, d)| d.first()) {
                Some(first) => first.context.clone(),
                None => Doc::context(app, instructions),
            };
            if let Some((_, docs)) = apps.last_mut() {
                docs.push(doc(t, &context));
            }
        }
        self.engine.tools().set_apps(apps);
    }
}
