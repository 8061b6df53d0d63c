//! JSON ↔ component values, in the shapes of `schema.rs`. Arguments are checked against the
//! types before the guest runs: a wrong one is refused with its path and what was expected
//! (`p.x: expected an integer in -2147483648..2147483647, got "three"`).

use super::schema::int_range;
use serde_json::{Map, Value, json};
use wasmtime::component::{Type, Val};

/// A JSON value, shortened for an error message.
fn got(v: &Value) -> String {
    let s = v.to_string();
    if s.chars().count() > 40 {
        format!("{}…", s.chars().take(40).collect::<String>())
    } else {
        s
    }
}

/// `path: expected what, got v`.
fn expected(path: &str, what: impl std::fmt::Display, v: &Value) -> String {
    format!("{path}: expected {what}, got {}", got(v))
}

/// The arguments of a call (a JSON object) as the function's parameters, in order.
pub(super) fn args(params: &[(String, Type)], args: &Value) -> Result<Vec<Val>, String> {
    let empty = Map::new();
    let obj = match args {
        Value::Object(o) => o,
        Value::Null => &empty,
        v => return Err(expected("arguments", "an object", v)),
    };
    if let Some(k) = obj.keys().find(|k| !params.iter().any(|(n, _)| n == *k)) {
        let names: Vec<&str> = params.iter().map(|p| p.0.as_str()).collect();
        return Err(format!(
            "{k}: no such parameter (the parameters are: {})",
            if names.is_empty() {
                "none".to_string()
            } else {
                names.join(", ")
            }
        ));
    }
    params
        .iter()
        .map(|(n, t)| field(t, obj.get(n), n))
        .collect()
}

/// A record field or a parameter: an `option` may be missing (none).
fn field(t: &Type, v: Option<&Value>, path: &str) -> Result<Val, String> {
    match (v, t) {
        (Some(v), _) => to_val(t, v, path),
        (None, Type::Option(_)) => Ok(Val::Option(None)),
        (None, _) => Err(format!("{path}: missing (expected {})", what(t))),
    }
}

/// What a value of `t` looks like, for an error message.
fn what(t: &Type) -> String {
    if let Some((lo, hi)) = int_range(t) {
        return format!("an integer in {lo}..{hi}");
    }
    match t {
        Type::Bool => "true or false".into(),
        Type::Float32 | Type::Float64 => "a number".into(),
        Type::Char => "a string of one character".into(),
        Type::String => "a string".into(),
        Type::List(_) => "an array".into(),
        Type::FixedLengthList(l) => format!("an array of {} items", l.len()),
        Type::Tuple(t) => format!("an array of {} items", t.types().len()),
        Type::Record(r) => format!(
            "an object with {}",
            r.fields().map(|f| f.name).collect::<Vec<_>>().join(", ")
        ),
        Type::Variant(v) => format!(
            "an object {{\"tag\": {}, \"val\"?: …}}",
            v.cases()
                .map(|c| format!("{:?}", c.name))
                .collect::<Vec<_>>()
                .join(" | ")
        ),
        Type::Enum(e) => format!(
            "one of {}",
            e.names()
                .map(|n| format!("{n:?}"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Type::Flags(f) => format!(
            "an object of booleans ({})",
            f.names().collect::<Vec<_>>().join(", ")
        ),
        Type::Option(o) => format!("{} or null", what(&o.ty())),
        Type::Result(_) => "an object {\"ok\": …} or {\"err\": …}".into(),
        _ => "a value JSON cannot carry".into(),
    }
}

/// A JSON value as a value of `t`, or why it is not one.
pub(super) fn to_val(t: &Type, v: &Value, path: &str) -> Result<Val, String> {
    if let Some((lo, hi)) = int_range(t) {
        let n = v
            .as_i64()
            .map(i128::from)
            .or_else(|| v.as_u64().map(i128::from))
            .or_else(|| {
                // 3.0 is 3; 3.5 is not an integer.
                v.as_f64()
                    .filter(|f| f.fract() == 0.0 && f.abs() < 1e19)
                    .map(|f| f as i128)
            })
            .filter(|n| (lo..=hi).contains(n))
            .ok_or_else(|| expected(path, what(t), v))?;
        return Ok(match t {
            Type::S8 => Val::S8(n as i8),
            Type::U8 => Val::U8(n as u8),
            Type::S16 => Val::S16(n as i16),
            Type::U16 => Val::U16(n as u16),
            Type::S32 => Val::S32(n as i32),
            Type::U32 => Val::U32(n as u32),
            Type::S64 => Val::S64(n as i64),
            _ => Val::U64(n as u64),
        });
    }
    let bad = || expected(path, what(t), v);
    Ok(match t {
        Type::Bool => Val::Bool(v.as_bool().ok_or_else(bad)?),
        Type::Float32 => Val::Float32(v.as_f64().ok_or_else(bad)? as f32),
        Type::Float64 => Val::Float64(v.as_f64().ok_or_else(bad)?),
        Type::Char => {
            let s = v.as_str().ok_or_else(bad)?;
            let mut cs = s.chars();
            match (cs.next(), cs.next()) {
                (Some(c), None) => Val::Char(c),
                _ => return Err(bad()),
            }
        }
        Type::String => Val::String(v.as_str().ok_or_else(bad)?.to_string()),
        Type::List(l) => {
            let a = v.as_array().ok_or_else(bad)?;
            let t = l.ty();
            Val::List(items(&t, a, path)?)
        }
        Type::FixedLengthList(l) => {
            let a = v
                .as_array()
                .filter(|a| a.len() == l.len() as usize)
                .ok_or_else(bad)?;
            Val::FixedLengthList(items(&l.ty(), a, path)?)
        }
        Type::Tuple(tt) => {
            let a = v
                .as_array()
                .filter(|a| a.len() == tt.types().len())
                .ok_or_else(bad)?;
            let vals = tt
                .types()
                .zip(a)
                .enumerate()
                .map(|(i, (t, v))| to_val(&t, v, &format!("{path}[{i}]")))
                .collect::<Result<_, _>>()?;
            Val::Tuple(vals)
        }
        Type::Record(r) => {
            let o = v.as_object().ok_or_else(bad)?;
            if let Some(k) = o.keys().find(|k| !r.fields().any(|f| f.name == k.as_str())) {
                return Err(format!(
                    "{path}.{k}: no such field (the fields are: {})",
                    r.fields().map(|f| f.name).collect::<Vec<_>>().join(", ")
                ));
            }
            let fields = r
                .fields()
                .map(|f| {
                    let val = field(&f.ty, o.get(f.name), &format!("{path}.{}", f.name))?;
                    Ok((f.name.to_string(), val))
                })
                .collect::<Result<_, String>>()?;
            Val::Record(fields)
        }
        Type::Variant(vt) => {
            let o = v.as_object().ok_or_else(bad)?;
            let tag = o.get("tag").and_then(Value::as_str).ok_or_else(bad)?;
            let Some(case) = vt.cases().find(|c| c.name == tag) else {
                return Err(expected(&format!("{path}.tag"), what(t), &json!(tag)));
            };
            if let Some(k) = o.keys().find(|k| *k != "tag" && *k != "val") {
                return Err(format!(
                    "{path}.{k}: no such key (a variant is {{\"tag\", \"val\"}})"
                ));
            }
            let val = match (case.ty, o.get("val")) {
                (Some(t), Some(x)) => Some(Box::new(to_val(&t, x, &format!("{path}.val"))?)),
                (Some(t), None) => {
                    return Err(format!("{path}.val: missing (expected {})", what(&t)));
                }
                (None, None | Some(Value::Null)) => None,
                (None, Some(x)) => {
                    return Err(expected(
                        &format!("{path}.val"),
                        format!("nothing (the case {tag} has no value)"),
                        x,
                    ));
                }
            };
            Val::Variant(tag.to_string(), val)
        }
        Type::Enum(e) => {
            let s = v.as_str().filter(|s| e.names().any(|n| n == *s));
            Val::Enum(s.ok_or_else(bad)?.to_string())
        }
        Type::Flags(f) => {
            let o = v.as_object().ok_or_else(bad)?;
            let mut on = vec![];
            for (k, b) in o {
                if !f.names().any(|n| n == k) {
                    return Err(format!(
                        "{path}.{k}: no such flag (the flags are: {})",
                        f.names().collect::<Vec<_>>().join(", ")
                    ));
                }
                match b {
                    Value::Bool(true) => on.push(k.clone()),
                    Value::Bool(false) | Value::Null => {}
                    b => return Err(expected(&format!("{path}.{k}"), "true or false", b)),
                }
            }
            Val::Flags(on)
        }
        Type::Option(o) => match v {
            Value::Null => Val::Option(None),
            // A wrong value here (not deeper in it) could have been null too: say so.
            v => match to_val(&o.ty(), v, path) {
                Ok(x) => Val::Option(Some(Box::new(x))),
                Err(e) if e.starts_with(&format!("{path}: expected ")) => return Err(bad()),
                Err(e) => return Err(e),
            },
        },
        Type::Result(r) => {
            let o = v.as_object().filter(|o| o.len() == 1).ok_or_else(bad)?;
            let side = |t: Option<Type>, x: &Value, p: String| match t {
                Some(t) => to_val(&t, x, &p).map(|v| Some(Box::new(v))),
                None if x.is_null() => Ok(None),
                None => Err(expected(&p, "null", x)),
            };
            match (o.get("ok"), o.get("err")) {
                (Some(x), _) => Val::Result(Ok(side(r.ok(), x, format!("{path}.ok"))?)),
                (_, Some(x)) => Val::Result(Err(side(r.err(), x, format!("{path}.err"))?)),
                _ => return Err(bad()),
            }
        }
        _ => return Err(bad()),
    })
}

/// The items of a list.
fn items(t: &Type, a: &[Value], path: &str) -> Result<Vec<Val>, String> {
    a.iter()
        .enumerate()
        .map(|(i, v)| to_val(t, v, &format!("{path}[{i}]")))
        .collect()
}

/// A component value as JSON.
pub(super) fn to_json(v: &Val) -> Value {
    let boxed = |b: &Option<Box<Val>>| b.as_deref().map_or(Value::Null, to_json);
    match v {
        Val::Bool(b) => json!(b),
        Val::S8(n) => json!(n),
        Val::U8(n) => json!(n),
        Val::S16(n) => json!(n),
        Val::U16(n) => json!(n),
        Val::S32(n) => json!(n),
        Val::U32(n) => json!(n),
        Val::S64(n) => json!(n),
        Val::U64(n) => json!(n),
        // NaN and infinities have no JSON: null.
        Val::Float32(f) => json!(f),
        Val::Float64(f) => json!(f),
        Val::Char(c) => json!(c.to_string()),
        Val::String(s) => json!(s),
        Val::List(l) | Val::Tuple(l) | Val::FixedLengthList(l) => {
            Value::Array(l.iter().map(to_json).collect())
        }
        Val::Record(fs) => Value::Object(fs.iter().map(|(k, v)| (k.clone(), to_json(v))).collect()),
        Val::Variant(tag, val) => match val {
            Some(v) => json!({"tag": tag, "val": to_json(v)}),
            None => json!({"tag": tag}),
        },
        Val::Enum(s) => json!(s),
        Val::Flags(on) => Value::Object(on.iter().map(|k| (k.clone(), json!(true))).collect()),
        Val::Option(o) => boxed(o),
        Val::Result(Ok(v)) => json!({"ok": boxed(v)}),
        Val::Result(Err(e)) => json!({"err": boxed(e)}),
        Val::Map(kv) => Value::Array(
            kv.iter()
                .map(|(k, v)| json!([to_json(k), to_json(v)]))
                .collect(),
        ),
        Val::Resource(_) | Val::Future(_) | Val::Stream(_) | Val::ErrorContext(_) => Value::Null,
    }
}
