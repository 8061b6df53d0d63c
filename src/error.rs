//! The one error type every door answers with.
//!
//! A refusal is `{"error": {"code", "message", "table"?, "column"?, "rule"?, "hint"?}}` and an HTTP
//! status; the same value is what MCP and the WASM host import return as a structured error.
//!
//! `parse` is the strict reading of a call's JSON arguments: the failing field's path
//! (serde_path_to_error) goes into `column` and the message, in JSON's words (integer, list,
//! object), never Rust's type names.

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

/// A refusal or failure. Boxed: errors are the cold path, and `Result`s stay small.
#[derive(Debug, Clone, PartialEq)]
pub struct Error(Box<Detail>);

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Detail {
    #[serde(skip)]
    pub status: u16,
    pub code: &'static str,
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub table: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub column: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
    /// A JSON-RPC error an app answered (`{"code", "message", "data"?}`), passed on: the MCP
    /// door answers it as it is.
    #[serde(skip)]
    pub rpc: Option<Value>,
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub fn new(status: u16, code: &'static str, message: impl Into<String>) -> Self {
        Error(Box::new(Detail {
            status,
            code,
            message: message.into(),
            table: None,
            column: None,
            rule: None,
            hint: None,
            rpc: None,
        }))
    }
    /// 400: the call itself is malformed (shape, type, unknown field).
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(400, "invalid_argument", message)
    }
    /// 422: a value breaks a rule of the table.
    pub fn constraint(table: &str, column: &str, rule: &str, message: impl Into<String>) -> Self {
        Self::new(422, "constraint_violation", message)
            .table(table)
            .column(column)
            .rule(rule)
    }
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(404, "not_found", message)
    }
    pub fn conflict(message: impl Into<String>) -> Self {
        Self::new(409, "conflict", message)
    }
    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(403, "forbidden", message)
    }
    pub fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(401, "unauthorized", message)
    }
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(500, "internal", message)
    }
    pub fn table(mut self, t: impl Into<String>) -> Self {
        self.table = Some(t.into());
        self
    }
    pub fn column(mut self, c: impl Into<String>) -> Self {
        self.column = Some(c.into());
        self
    }
    pub fn rule(mut self, r: impl Into<String>) -> Self {
        self.rule = Some(r.into());
        self
    }
    pub fn hint(mut self, h: impl Into<String>) -> Self {
        self.hint = Some(h.into());
        self
    }
    /// Carries the JSON-RPC error an app answered, for the MCP door to pass on.
    pub fn rpc(mut self, e: Value) -> Self {
        self.rpc = Some(e);
        self
    }
    /// The wire shape: `{"error": {...}}`.
    pub fn to_json(&self) -> Value {
        json!({ "error": &*self.0 })
    }
    /// The same error with another message.
    pub fn with_message(mut self, m: impl Into<String>) -> Self {
        self.message = m.into();
        self
    }
}

/// Parses an operation's arguments strictly; a mistake names the field and how to fix it.
pub fn parse<T: DeserializeOwned>(op: &str, args: Value) -> Result<T> {
    let args = if args.is_null() {
        Value::Object(Default::default())
    } else {
        args
    };
    if !args.is_object() {
        return Err(
            Error::invalid(format!("the arguments of {op} must be a JSON object"))
                .rule("arguments")
                .hint(format!(
                    "send an object such as {{}}; the input schema of {op} lists the fields"
                )),
        );
    }
    serde_path_to_error::deserialize(args).map_err(|e| {
        let path = e.path().to_string();
        let why = plain_words(&e.inner().to_string());
        let mut err = match path.as_str() {
            "." | "" => Error::invalid(format!("invalid arguments for {op}: {why}")),
            p => Error::invalid(format!("invalid arguments for {op}: {p}: {why}")).column(p),
        };
        err = err.rule("arguments").hint(format!(
            "check the field names and types against the input schema of {op}"
        ));
        err
    })
}

/// Refuses a key of the object `args` that is not one of `fields`, as [`parse`] would with
/// `deny_unknown_fields` (which serde does not apply across a flattened struct).
pub fn known_fields(op: &str, args: &Value, fields: &[&str]) -> Result<()> {
    let Some(unknown) = args
        .as_object()
        .and_then(|o| o.keys().find(|k| !fields.contains(&k.as_str())))
    else {
        return Ok(());
    };
    let k: String = unknown.chars().take(80).collect();
    Err(Error::invalid(format!(
        "invalid arguments for {op}: unknown field `{k}`, expected one of {}",
        fields
            .iter()
            .map(|f| format!("`{f}`"))
            .collect::<Vec<_>>()
            .join(", ")
    ))
    .column(k.as_str())
    .rule("arguments")
    .hint(format!(
        "check the field names and types against the input schema of {op}"
    )))
}

/// A parse error in words an agent reads: the serde wording without Rust's type names.
fn plain_words(msg: &str) -> String {
    let mut out = msg.to_string();
    for (rust, plain) in [
        ("expected i64", "expected an integer"),
        ("expected i32", "expected an integer"),
        ("expected u64", "expected a whole number, 0 or more"),
        ("expected u32", "expected a whole number, 0 or more"),
        ("expected u16", "expected a whole number, 0 or more"),
        ("expected u8", "expected a whole number, 0 or more"),
        ("expected usize", "expected a whole number, 0 or more"),
        ("expected f64", "expected a number"),
        ("expected f32", "expected a number"),
        ("a sequence", "a list"),
        ("expected a map", "expected an object"),
        ("invalid type: map", "invalid type: an object"),
        ("invalid type: sequence", "invalid type: a list"),
        ("expected unit", "expected nothing"),
    ] {
        out = out.replace(rust, plain);
    }
    // `expected struct SelectRows` and the like: an object.
    while let Some(i) = out.find("struct ") {
        let end = out[i + 7..]
            .find(|c: char| !c.is_alphanumeric() && c != '_')
            .map_or(out.len(), |j| i + 7 + j);
        out.replace_range(i..end, "an object");
    }
    out
}

impl std::ops::Deref for Error {
    type Target = Detail;
    fn deref(&self) -> &Detail {
        &self.0
    }
}

impl std::ops::DerefMut for Error {
    fn deref_mut(&mut self) -> &mut Detail {
        &mut self.0
    }
}

impl Serialize for Error {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        self.0.serialize(s)
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code, self.message)?;
        if let Some(h) = &self.hint {
            write!(f, " (hint: {h})")?;
        }
        Ok(())
    }
}

impl std::error::Error for Error {}

impl From<rusqlite::Error> for Error {
    /// The full error (which may quote SQL) goes to the log; the answer only says what kind of
    /// failure it was.
    fn from(e: rusqlite::Error) -> Self {
        tracing::error!("index or journal error: {e}");
        let kind = match &e {
            rusqlite::Error::SqliteFailure(f, _) => f.to_string(),
            rusqlite::Error::SqlInputError { error, .. } => error.to_string(),
            _ => "see the server log".to_string(),
        };
        Error::internal(format!("index or journal error: {kind}"))
    }
}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Error::internal(format!("file system error: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_parse_error_names_the_field_in_json_words() {
        #[derive(Debug, serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        #[allow(dead_code)]
        struct Inner {
            n: u64,
        }
        #[derive(Debug, serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        #[allow(dead_code)]
        struct Args {
            limit: Option<i64>,
            inner: Option<Inner>,
            list: Option<Vec<String>>,
        }
        let e = parse::<Args>("op", serde_json::json!({"inner": {"n": -1}})).unwrap_err();
        assert_eq!(e.column.as_deref(), Some("inner.n"), "{e}");
        assert!(
            e.message.contains("expected a whole number, 0 or more"),
            "{e}"
        );
        let e = parse::<Args>("op", serde_json::json!({"inner": 3})).unwrap_err();
        assert!(e.message.ends_with("expected an object"), "{e}");
        let e = parse::<Args>("op", serde_json::json!({"list": {"a": 1}})).unwrap_err();
        assert!(e.message.contains("an object, expected a list"), "{e}");
        let e = parse::<Args>("op", serde_json::json!({"limit": 1.5})).unwrap_err();
        assert!(e.message.ends_with("expected an integer"), "{e}");
        for rust in ["i64", "u64", "struct", "sequence", "map"] {
            assert!(!e.message.contains(rust), "{e}");
        }
    }
}
