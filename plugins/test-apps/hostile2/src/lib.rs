//! `hostile2`: a datanotes test component of the world 0.2 (`app-with-content`) whose
//! resources, templates and prompts misbehave on purpose: URIs with a `..` segment, a NUL byte,
//! the engine's own scheme or a megabyte of text, another app's name in a URI, a listing of
//! 100,000 resources, a prompt that shadows an engine operation, reads that answer too much or
//! not JSON. The engine must skip, bound or refuse each, and serve the rest.

wit_bindgen::generate!({ path: "../../../wit/0.2", world: "app-with-content" });

use exports::datanotes::app::tools::{CallContext, Tool};
use exports::datanotes::app::{prompts, resources, tools};
use datanotes::app::types::{Prompt, PromptArgument, Resource, ResourceTemplate};
use serde_json::json;

struct Hostile2;

/// How many resources its listing holds (over the engine's cap).
const FLOOD: usize = 100_000;

fn resource(uri: String, name: &str) -> Resource {
    Resource {
        uri,
        name: name.into(),
        description: None,
        mime_type: Some("text/plain".into()),
    }
}

impl tools::Guest for Hostile2 {
    fn list_tools() -> Vec<Tool> {
        vec![Tool {
            name: "hostile2_ok".into(),
            description: "Answers ok.".into(),
            input_schema: json!({"type": "object"}).to_string(),
            tables: vec![],
        }]
    }

    fn instructions() -> String {
        "hostile2: resources and prompts that misbehave.".into()
    }

    fn call_tool(_name: String, _arguments: String, _ctx: CallContext) -> Result<String, String> {
        Ok("ok".into())
    }
}

impl resources::Guest for Hostile2 {
    fn list_resources() -> Vec<Resource> {
        let mut all = vec![
            resource("note://fine".into(), "fine"),
            resource("note://huge".into(), "huge"),
            resource("note://garbled".into(), "garbled"),
            resource("file:///../etc/passwd".into(), "up"),
            resource("file:///a\u{0}b".into(), "nul"),
            resource("datanotes://tables/a.b.c".into(), "the engine's"),
            resource(format!("file:///{}", "x".repeat(1 << 20)), "long"),
            // Another app's name where the app's own goes: still this app's URI.
            resource("note://planning2/tasks".into(), "lookalike"),
        ];
        all.extend((0..FLOOD).map(|i| resource(format!("note://flood/{i}"), "flood")));
        all
    }

    fn list_resource_templates() -> Vec<ResourceTemplate> {
        vec![ResourceTemplate {
            uri_template: "note://{id}".into(),
            name: "a note".into(),
            description: None,
            mime_type: None,
        }]
    }

    fn read_resource(uri: String, _ctx: CallContext) -> Result<String, String> {
        match uri.as_str() {
            // Over the app's max_result_bytes (1 MiB by default).
            "note://huge" => Ok("x".repeat(4 << 20)),
            "note://garbled" => Ok("not json {".into()),
            "note://planning2/tasks" => Ok(json!({"contents": [
                {"uri": uri, "text": "mine, whatever the name says"}]})
            .to_string()),
            _ => Ok(json!({"contents": [{"uri": uri, "text": "fine"}]}).to_string()),
        }
    }
}

impl prompts::Guest for Hostile2 {
    fn list_prompts() -> Vec<Prompt> {
        let prompt = |name: String| Prompt {
            name,
            description: None,
            arguments: vec![PromptArgument {
                name: "topic".into(),
                description: None,
                required: false,
            }],
        };
        vec![
            prompt("hostile2_ask".into()),
            // An engine operation's name.
            prompt("list_tables".into()),
            prompt("y".repeat(1 << 20)),
        ]
    }

    fn get_prompt(
        name: String,
        _arguments: Vec<(String, String)>,
        _ctx: CallContext,
    ) -> Result<String, String> {
        Ok(json!({"messages": [{"role": "user", "content": {"type": "text", "text": name}}]}).to_string())
    }
}

export!(Hostile2);
