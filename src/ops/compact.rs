//! The operations' input schemas as an agent reads them: what schemars derives, made shorter
//! without losing what a model needs (every listing pays for each byte at every turn).
//!
//! - An optional field is its type, not `[type, "null"]` or `anyOf [{...}, {"type": "null"}]`,
//!   and `"default": null` goes: leaving a field out already says "none".
//! - A choice of constants, each with its description (`oneOf [{const, description}]`), is one
//!   `enum` whose description names each value that says more than its name.
//! - Descriptions are one line.

use serde_json::{Map, Value, json};

/// The schema `v`, compacted (see the module's text).
pub fn compact(v: Value) -> Value {
    match v {
        Value::Object(o) => compact_object(o),
        Value::Array(a) => Value::Array(a.into_iter().map(compact).collect()),
        Value::String(s) if s.contains('\n') => {
            Value::String(s.split_whitespace().collect::<Vec<_>>().join(" "))
        }
        other => other,
    }
}

fn compact_object(mut o: Map<String, Value>) -> Value {
    if o.get("default") == Some(&Value::Null) {
        o.remove("default");
    }
    // `"type": ["string", "null"]` → `"type": "string"`.
    if let Some(Value::Array(types)) = o.get("type") {
        let kept: Vec<Value> = types.iter().filter(|t| *t != "null").cloned().collect();
        if kept.len() == 1 {
            o.insert("type".into(), kept[0].clone());
        }
    }
    // `anyOf [X, {"type": "null"}]` → X (with the field's own description).
    if let Some(Value::Array(any)) = o.get("anyOf") {
        let kept: Vec<&Value> = any
            .iter()
            .filter(|s| **s != json!({"type": "null"}))
            .collect();
        if kept.len() == 1 && kept.len() < any.len() {
            let one = kept[0].clone();
            o.remove("anyOf");
            if let Value::Object(inner) = one {
                for (k, v) in inner {
                    o.entry(k).or_insert(v);
                }
            }
        }
    }
    // `oneOf` of described string constants → one `enum`.
    if let Some(Value::Array(one_of)) = o.get("oneOf") {
        let consts: Option<Vec<(String, Option<String>)>> = one_of
            .iter()
            .map(|s| {
                let c = s.get("const")?.as_str()?.to_string();
                let d = s
                    .get("description")
                    .and_then(Value::as_str)
                    .map(String::from);
                Some((c, d))
            })
            .collect();
        if let Some(consts) = consts {
            o.remove("oneOf");
            o.insert("type".into(), json!("string"));
            o.insert(
                "enum".into(),
                consts
                    .iter()
                    .map(|(c, _)| json!(c))
                    .collect::<Vec<_>>()
                    .into(),
            );
            // Only what a value's name does not already say (a date's format, an enum's values).
            let said: Vec<String> = consts
                .iter()
                .filter_map(|(c, d)| {
                    let d = d.as_deref()?.trim_end_matches('.');
                    let plain = ["a string", "a whole number", "a number", "true or false"];
                    (!plain.iter().any(|p| d.eq_ignore_ascii_case(p))).then(|| format!("{c}: {d}"))
                })
                .collect();
            if !said.is_empty() {
                let base = o
                    .get("description")
                    .and_then(Value::as_str)
                    .map(|d| format!("{} ", d.trim_end_matches('.')))
                    .unwrap_or_default();
                o.insert(
                    "description".into(),
                    json!(format!("{base}({})", said.join("; "))),
                );
            }
        }
    }
    Value::Object(o.into_iter().map(|(k, v)| (k, compact(v))).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn optional_fields_and_constant_choices_get_shorter_and_keep_their_meaning() {
        let v = json!({
            "type": "object",
            "properties": {
                "description": {"type": ["string", "null"], "default": null},
                "semantic": {"description": "In the index?\nor not", "anyOf": [{"$ref": "#/$defs/S"}, {"type": "null"}], "default": null},
                "ty": {"description": "The type.", "oneOf": [
                    {"description": "A string.", "type": "string", "const": "text"},
                    {"description": "A date, `YYYY-MM-DD`.", "type": "string", "const": "date"}]}
            }
        });
        let c = compact(v);
        let p = &c["properties"];
        assert_eq!(p["description"], json!({"type": "string"}));
        assert_eq!(
            p["semantic"],
            json!({"description": "In the index? or not", "$ref": "#/$defs/S"})
        );
        assert_eq!(p["ty"]["enum"], json!(["text", "date"]));
        assert_eq!(
            p["ty"]["description"],
            "The type (date: A date, `YYYY-MM-DD`)"
        );
        assert!(p["ty"].get("oneOf").is_none());
    }
}
