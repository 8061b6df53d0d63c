//! The headers a message of protocol 2026-07-28 or later carries over HTTP (SEP-2243): it
//! names its version in its own `_meta` and has no session, so each request says its version,
//! its method (`Mcp-Method`), what it names (`Mcp-Name`: a tool, a prompt, a resource, a task)
//! and, for a tool's call, the arguments the tool's input schema marks with `x-mcp-header`
//! (`Mcp-Param-<Name>`), so that what stands between client and server can route on them
//! without reading the body. `datanotes mcp` sends them for the client it relays.

use serde_json::Value;
use std::collections::HashMap;

/// The headers a message of protocol 2026-07-28 or later asks for (it names its version in its
/// own `_meta`, and has no session): its version, `Mcp-Method`, and `Mcp-Name` (SEP-2243).
/// None for a message of an earlier version (its session's headers go with it).
pub(super) fn era_headers(msg: &Value) -> Vec<(&'static str, String)> {
    let version = msg
        .pointer("/params/_meta")
        .and_then(|m| m.get("io.modelcontextprotocol/protocolVersion"))
        .and_then(Value::as_str);
    let (Some(version), Some(method)) = (version, msg.get("method").and_then(Value::as_str)) else {
        return vec![];
    };
    let mut out = vec![
        ("mcp-protocol-version", version.to_string()),
        ("mcp-method", method.to_string()),
    ];
    let key = match method {
        "tools/call" | "prompts/get" => "name",
        "resources/read" | "resources/subscribe" | "resources/unsubscribe" => "uri",
        "tasks/get" | "tasks/update" | "tasks/cancel" => "taskId",
        _ => return out,
    };
    if let Some(name) = msg
        .pointer(&format!("/params/{key}"))
        .and_then(Value::as_str)
    {
        out.push(("mcp-name", header_value(name)));
    }
    out
}

/// A value as a header carries it (SEP-2243): as it is, or Base64 between `=?base64?` and `?=`
/// if it has a character a header cannot carry, or a space at either end.
fn header_value(v: &str) -> String {
    use base64::Engine;
    let encoded = v.chars().any(|c| !(' '..='~').contains(&c))
        || v.starts_with([' ', '\t'])
        || v.ends_with([' ', '\t'])
        || (v.starts_with("=?base64?") && v.ends_with("?="));
    if !encoded {
        return v.to_string();
    }
    let b64 = base64::engine::general_purpose::STANDARD.encode(v);
    format!("=?base64?{b64}?=")
}

/// The input schemas of the tools a client was listed, by name, as a relay learns them from
/// the `tools/list` answers it passes on: what says which arguments of a call are headers.
#[derive(Default)]
pub(super) struct Schemas(std::sync::Mutex<HashMap<String, Value>>);

/// The most tools whose schemas are kept; one more forgets them all (they are learned again
/// at the next listing).
const MAX_TOOLS: usize = 4096;

impl Schemas {
    /// Notes the tools of `answer` if it answers a `tools/list` (`method`).
    pub(super) fn learn(&self, method: Option<&str>, answer: &str) {
        if method != Some("tools/list") || !answer.contains("x-mcp-header") {
            return;
        }
        let Ok(v) = serde_json::from_str::<Value>(answer) else {
            return;
        };
        let Some(tools) = v.pointer("/result/tools").and_then(Value::as_array) else {
            return;
        };
        let mut kept = self.0.lock().unwrap();
        for t in tools {
            let (Some(name), Some(schema)) =
                (t.get("name").and_then(Value::as_str), t.get("inputSchema"))
            else {
                continue;
            };
            if kept.len() >= MAX_TOOLS && !kept.contains_key(name) {
                kept.clear();
            }
            kept.insert(name.to_string(), schema.clone());
        }
    }

    /// The `Mcp-Param-<Name>` headers of a 2026-07-28 `tools/call` (`msg`): each argument its
    /// tool's schema marks with `x-mcp-header`, when the call gives it as a string, a number
    /// or a boolean. None for any other message, or a tool not listed yet.
    pub(super) fn param_headers(&self, msg: &Value) -> Vec<(String, String)> {
        if msg.get("method").and_then(Value::as_str) != Some("tools/call") {
            return vec![];
        }
        let (Some(name), Some(args)) = (
            msg.pointer("/params/name").and_then(Value::as_str),
            msg.pointer("/params/arguments"),
        ) else {
            return vec![];
        };
        let kept = self.0.lock().unwrap();
        let Some(schema) = kept.get(name) else {
            return vec![];
        };
        let mut out = vec![];
        marked(schema, &mut vec![], &mut |path, header| {
            let value = path.iter().try_fold(args, |v, k| v.get(*k));
            let text = match value {
                Some(Value::String(s)) => s.clone(),
                Some(v @ (Value::Number(_) | Value::Bool(_))) => v.to_string(),
                _ => return,
            };
            out.push((format!("mcp-param-{header}"), header_value(&text)));
        });
        out
    }
}

/// Calls `found` with each property reached from `schema` through `properties` alone that
/// carries an `x-mcp-header` naming a header (an HTTP token), and its path.
fn marked<'a>(schema: &'a Value, path: &mut Vec<&'a str>, found: &mut dyn FnMut(&[&str], &str)) {
    let Some(Value::Object(props)) = schema.get("properties") else {
        return;
    };
    for (name, prop) in props {
        path.push(name);
        if let Some(Value::String(h)) = prop.get("x-mcp-header")
            && !h.is_empty()
            && h.chars().all(is_token_char)
        {
            found(path, h);
        }
        marked(prop, path, found);
        path.pop();
    }
}

/// A character of an HTTP token (RFC 9110, 5.6.2).
fn is_token_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_2026_message_names_its_version_method_and_name_in_headers() {
        let meta = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28"});
        let call = json!({"method": "tools/call", "params": {"name": "echo", "_meta": meta}});
        assert_eq!(
            era_headers(&call),
            [
                ("mcp-protocol-version", "2026-07-28".to_string()),
                ("mcp-method", "tools/call".into()),
                ("mcp-name", "echo".into())
            ]
        );
        let read =
            json!({"method": "resources/read", "params": {"uri": "file:///é", "_meta": meta}});
        assert_eq!(era_headers(&read)[2].1, "=?base64?ZmlsZTovLy/DqQ==?=");
        // A message of an earlier version: its session's headers only.
        assert!(era_headers(&json!({"method": "tools/call", "params": {"name": "x"}})).is_empty());
    }

    #[test]
    fn a_calls_marked_arguments_are_headers() {
        let schemas = Schemas::default();
        let listing = json!({"jsonrpc": "2.0", "id": 1, "result": {"tools": [{"name": "route",
            "inputSchema": {"type": "object", "properties": {
                "region": {"type": "string", "x-mcp-header": "Region"},
                "n": {"type": "integer", "x-mcp-header": "N"},
                "bad": {"type": "string", "x-mcp-header": "two words"},
                "tags": {"type": "array", "x-mcp-header": "Tags"},
                "where": {"type": "object", "properties": {
                    "city": {"type": "string", "x-mcp-header": "City"}}}}}}]}});
        schemas.learn(Some("tools/list"), &listing.to_string());
        let call = |args: Value| json!({"method": "tools/call", "params": {"name": "route", "arguments": args}});
        let mut got = schemas.param_headers(&call(json!({"region": "eu-west", "n": 3,
            "bad": "x", "tags": ["a"], "where": {"city": " Zürich"}})));
        got.sort();
        assert_eq!(
            got,
            [
                (
                    "mcp-param-City".to_string(),
                    "=?base64?IFrDvHJpY2g=?=".to_string()
                ),
                ("mcp-param-N".into(), "3".into()),
                ("mcp-param-Region".into(), "eu-west".into()),
            ]
        );
        // An argument not given, or null: no header.
        assert_eq!(schemas.param_headers(&call(json!({"region": null}))), []);
        // A tool not listed: none; nor a tool of an answer to another request.
        let other = json!({"method": "tools/call",
            "params": {"name": "other", "arguments": {"region": "a"}}});
        assert_eq!(schemas.param_headers(&other), []);
        let listed = listing.to_string().replace("route", "other");
        schemas.learn(Some("prompts/list"), &listed);
        assert_eq!(schemas.param_headers(&other), []);
        schemas.learn(Some("tools/list"), &listed);
        assert_eq!(
            schemas.param_headers(&other),
            [("mcp-param-Region".to_string(), "a".to_string())]
        );
    }
}
