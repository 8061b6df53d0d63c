//! WIT types as JSON Schemas, in the shapes of wassette's `component2json` (so that prompts
//! written for its components carry over), with exact integer bounds.
//!
//! | WIT | JSON |
//! |-----|------|
//! | `record` | object, every field required (an `option` field may be left out or null) |
//! | `variant` | `{"tag": case, "val": payload}` (no `val` for a case without payload) |
//! | `enum` | one of the case names (a string) |
//! | `flags` | object of booleans (a missing flag is false) |
//! | `option<T>` | a `T` or null |
//! | `result<T, E>` | `{"ok": T}` or `{"err": E}` |
//! | `tuple<…>` | an array of fixed length (`prefixItems`) |
//! | `list<T>` | an array (`list<u8>` too: numbers 0..255) |
//! | `char` | a string of one character |
//! | integers | `"integer"` with the type's exact `minimum` and `maximum` |
//! | `f32`, `f64` | number |

use serde_json::{Value, json};
use wasmtime::component::Type;

/// The inclusive range of an integer type, if `t` is one.
pub(super) fn int_range(t: &Type) -> Option<(i128, i128)> {
    Some(match t {
        Type::S8 => (i8::MIN.into(), i8::MAX.into()),
        Type::U8 => (0, u8::MAX.into()),
        Type::S16 => (i16::MIN.into(), i16::MAX.into()),
        Type::U16 => (0, u16::MAX.into()),
        Type::S32 => (i32::MIN.into(), i32::MAX.into()),
        Type::U32 => (0, u32::MAX.into()),
        Type::S64 => (i64::MIN.into(), i64::MAX.into()),
        Type::U64 => (0, u64::MAX.into()),
        _ => return None,
    })
}

/// Why values of `t` cannot be JSON (a resource, a future, a stream), if they cannot.
pub(super) fn unsupported(t: &Type) -> Option<String> {
    let inner = |t: Option<Type>| t.and_then(|t| unsupported(&t));
    match t {
        Type::Own(_) | Type::Borrow(_) => Some("a resource".into()),
        Type::Future(_) => Some("a future".into()),
        Type::Stream(_) => Some("a stream".into()),
        Type::ErrorContext => Some("an error-context".into()),
        Type::Map(_) => Some("a map".into()),
        Type::List(l) => unsupported(&l.ty()),
        Type::FixedLengthList(l) => unsupported(&l.ty()),
        Type::Option(o) => unsupported(&o.ty()),
        Type::Result(r) => inner(r.ok()).or_else(|| inner(r.err())),
        Type::Record(r) => r.fields().find_map(|f| unsupported(&f.ty)),
        Type::Tuple(t) => t.types().find_map(|t| unsupported(&t)),
        Type::Variant(v) => v.cases().find_map(|c| inner(c.ty)),
        _ => None,
    }
}

/// The JSON Schema of values of `t` (a type [`unsupported`] accepts).
pub(super) fn schema(t: &Type) -> Value {
    if let Some((lo, hi)) = int_range(t) {
        return json!({"type": "integer", "minimum": num(lo), "maximum": num(hi)});
    }
    match t {
        Type::Bool => json!({"type": "boolean"}),
        Type::Float32 | Type::Float64 => json!({"type": "number"}),
        Type::Char => json!({"type": "string", "minLength": 1, "maxLength": 1,
            "description": "one character"}),
        Type::String => json!({"type": "string"}),
        Type::List(l) => json!({"type": "array", "items": schema(&l.ty())}),
        Type::FixedLengthList(l) => json!({"type": "array", "items": schema(&l.ty()),
            "minItems": l.len(), "maxItems": l.len()}),
        Type::Record(r) => {
            let mut props = serde_json::Map::new();
            let mut required = vec![];
            for f in r.fields() {
                if !matches!(f.ty, Type::Option(_)) {
                    required.push(f.name.to_string());
                }
                props.insert(f.name.to_string(), schema(&f.ty));
            }
            json!({"type": "object", "properties": props, "required": required,
                "additionalProperties": false})
        }
        Type::Tuple(t) => {
            let items: Vec<Value> = t.types().map(|t| schema(&t)).collect();
            let n = items.len();
            json!({"type": "array", "prefixItems": items, "items": false, "minItems": n, "maxItems": n})
        }
        Type::Variant(v) => {
            let cases: Vec<Value> = v
                .cases()
                .map(|c| match c.ty {
                    Some(t) => json!({"type": "object",
                        "properties": {"tag": {"const": c.name}, "val": schema(&t)},
                        "required": ["tag", "val"], "additionalProperties": false}),
                    None => json!({"type": "object", "properties": {"tag": {"const": c.name}},
                        "required": ["tag"], "additionalProperties": false}),
                })
                .collect();
            json!({"oneOf": cases})
        }
        Type::Enum(e) => json!({"type": "string", "enum": e.names().collect::<Vec<_>>()}),
        Type::Flags(f) => {
            let props: serde_json::Map<String, Value> = f
                .names()
                .map(|n| (n.to_string(), json!({"type": "boolean"})))
                .collect();
            json!({"type": "object", "properties": props, "additionalProperties": false})
        }
        Type::Option(o) => json!({"anyOf": [schema(&o.ty()), {"type": "null"}]}),
        Type::Result(r) => {
            let side = |k: &str, t: Option<Type>| {
                let s = t.map_or(json!({"type": "null"}), |t| schema(&t));
                json!({"type": "object", "properties": {k: s}, "required": [k],
                    "additionalProperties": false})
            };
            json!({"oneOf": [side("ok", r.ok()), side("err", r.err())]})
        }
        // Refused by `unsupported` before a schema is asked for.
        _ => json!({}),
    }
}

/// An integer bound as a JSON number (u64's maximum does not fit an i64).
fn num(n: i128) -> Value {
    match i64::try_from(n) {
        Ok(i) => json!(i),
        Err(_) => json!(n as u64),
    }
}

/// The input schema of a function: an object of its parameters (an `option` one may be left
/// out).
pub(super) fn input_schema(params: &[(String, Type)]) -> Value {
    let mut props = serde_json::Map::new();
    let mut required = vec![];
    for (n, t) in params {
        if !matches!(t, Type::Option(_)) {
            required.push(n.clone());
        }
        props.insert(n.clone(), schema(t));
    }
    json!({"type": "object", "properties": props, "required": required,
        "additionalProperties": false})
}

/// The output schema of a function: `{"result": …}` (null for a function without a result).
pub(super) fn output_schema(result: Option<&Type>) -> Value {
    let r = result.map_or(json!({"type": "null"}), schema);
    json!({"type": "object", "properties": {"result": r}, "required": ["result"]})
}
