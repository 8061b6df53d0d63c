//! A row's values checked against its table's columns (type, bounds, required, defaults), with
//! errors that teach: which column, which rule, and how to write it right.

use super::*;

/// Parses a `date` value (`YYYY-MM-DD`).
pub fn parse_date(s: &str) -> Option<chrono::NaiveDate> {
    chrono::NaiveDate::parse_from_str(s, "%Y-%m-%d")
        .ok()
        .filter(|_| s.len() == 10)
}

/// Parses a `datetime` value (RFC 3339), in UTC.
pub fn parse_datetime(s: &str) -> Option<chrono::DateTime<chrono::Utc>> {
    chrono::DateTime::parse_from_rfc3339(s)
        .ok()
        .map(|d| d.to_utc())
}

pub(super) fn bound_kind(t: ColumnType) -> &'static str {
    match t {
        ColumnType::Integer => "an integer",
        ColumnType::Number => "a number",
        ColumnType::Date => "a date YYYY-MM-DD",
        ColumnType::Datetime => "an RFC 3339 datetime",
        ColumnType::List => "an item count",
        _ => "a length in characters",
    }
}

pub(super) fn type_phrase(c: &ColumnDef) -> String {
    match c.ty {
        ColumnType::Text => "text".into(),
        ColumnType::Integer => "an integer".into(),
        ColumnType::Number => "a number".into(),
        ColumnType::Boolean => "true or false".into(),
        ColumnType::Date => "a date (YYYY-MM-DD)".into(),
        ColumnType::Datetime => "a datetime (RFC 3339, e.g. 2026-11-30T09:00:00Z)".into(),
        ColumnType::Enum => format!(
            "one of {}",
            c.values.as_deref().unwrap_or_default().join(", ")
        ),
        ColumnType::List => "a list of texts".into(),
        ColumnType::Link => format!("the id of a row of {}", c.table.as_deref().unwrap_or("?")),
    }
}

pub(super) fn type_hint(c: &ColumnDef) -> String {
    let example = match c.ty {
        ColumnType::Text => "\"some text\"".to_string(),
        ColumnType::Integer => "42".into(),
        ColumnType::Number => "3.5".into(),
        ColumnType::Boolean => "true".into(),
        ColumnType::Date => "\"2026-11-30\"".into(),
        ColumnType::Datetime => "\"2026-11-30T09:00:00Z\"".into(),
        ColumnType::Enum => format!(
            "{:?}",
            c.values
                .as_deref()
                .unwrap_or_default()
                .first()
                .map(String::as_str)
                .unwrap_or("")
        ),
        ColumnType::List => "[\"a\", \"b\"]".into(),
        ColumnType::Link => "\"row-id\"".into(),
    };
    format!("send {}, e.g. {example}", type_phrase(c))
}

/// A short description of a JSON value for error messages.
pub fn describe(v: &Value) -> String {
    let s = v.to_string();
    let kind = match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a text",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    };
    if s.len() > 60 {
        format!("{kind} {}…", &s[..s.floor_char_boundary(60)])
    } else {
        format!("{kind} {s}")
    }
}

impl Table {
    /// Validates and normalizes one value against its column (type, enum, bounds, pattern).
    /// Null is handled by the caller (required).
    pub fn check_value(&self, cname: &str, c: &ColumnDef, v: &Value) -> Result<Value> {
        let t = &self.name;
        let type_err = || {
            Error::constraint(
                t,
                cname,
                "type",
                format!(
                    "column {cname} expects {}, got {}",
                    type_phrase(c),
                    describe(v)
                ),
            )
            .hint(type_hint(c))
        };
        let out = match c.ty {
            ColumnType::Text | ColumnType::Link => v.as_str().ok_or_else(type_err)?.into(),
            ColumnType::Enum => {
                let s = v.as_str().ok_or_else(type_err)?;
                let allowed = c.values.as_deref().unwrap_or_default();
                if !allowed.iter().any(|a| a == s) {
                    return Err(Error::constraint(
                        t,
                        cname,
                        "enum",
                        format!("{s:?} is not one of the values of column {cname}"),
                    )
                    .hint(format!("use one of: {}", allowed.join(", "))));
                }
                v.clone()
            }
            ColumnType::Integer => {
                if v.is_i64() {
                    v.clone()
                } else if let Some(f) = v.as_f64().filter(|f| f.fract() == 0.0 && f.abs() < 9.0e15)
                {
                    Value::from(f as i64)
                } else {
                    return Err(type_err());
                }
            }
            ColumnType::Number => {
                if !v.is_number() {
                    return Err(type_err());
                }
                v.clone()
            }
            ColumnType::Boolean => {
                if !v.is_boolean() {
                    return Err(type_err());
                }
                v.clone()
            }
            ColumnType::Date => {
                let s = v.as_str().ok_or_else(type_err)?;
                parse_date(s).ok_or_else(type_err)?;
                v.clone()
            }
            ColumnType::Datetime => {
                let s = v.as_str().ok_or_else(type_err)?;
                let d = parse_datetime(s).ok_or_else(type_err)?;
                Value::from(d.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true))
            }
            ColumnType::List => {
                let items = v.as_array().ok_or_else(type_err)?;
                if !items.iter().all(Value::is_string) {
                    return Err(type_err());
                }
                v.clone()
            }
        };
        self.check_bounds(cname, c, &out)?;
        if let Some(re) = self.patterns.get(cname) {
            let texts: Vec<&str> = match &out {
                Value::String(s) => vec![s],
                Value::Array(a) => a.iter().filter_map(Value::as_str).collect(),
                _ => vec![],
            };
            for s in texts {
                if !re.is_match(s) {
                    return Err(Error::constraint(
                        t,
                        cname,
                        "pattern",
                        format!("{s:?} does not match the pattern of column {cname}"),
                    )
                    .hint(format!("give a value matching {}", re.as_str())));
                }
            }
        }
        Ok(out)
    }

    pub(super) fn check_bounds(&self, cname: &str, c: &ColumnDef, v: &Value) -> Result<()> {
        let t = &self.name;
        for (rule, bound) in [("min", &c.min), ("max", &c.max)] {
            let Some(b) = bound else { continue };
            let is_min = rule == "min";
            let (ok, what) = match c.ty {
                ColumnType::Integer | ColumnType::Number => {
                    let (x, b) = (v.as_f64().unwrap_or(0.0), b.as_f64().unwrap_or(0.0));
                    (if is_min { x >= b } else { x <= b }, format!("{v}"))
                }
                ColumnType::Text | ColumnType::Link | ColumnType::Enum => {
                    let n = v.as_str().map(|s| s.chars().count()).unwrap_or(0) as i64;
                    let b = b.as_i64().unwrap_or(0);
                    (
                        if is_min { n >= b } else { n <= b },
                        format!("a text of {n} characters"),
                    )
                }
                ColumnType::List => {
                    let n = v.as_array().map(Vec::len).unwrap_or(0) as i64;
                    let b = b.as_i64().unwrap_or(0);
                    (
                        if is_min { n >= b } else { n <= b },
                        format!("a list of {n} items"),
                    )
                }
                ColumnType::Date | ColumnType::Datetime => {
                    let (x, b) = (v.as_str().unwrap_or(""), b.as_str().unwrap_or(""));
                    let ok = if c.ty == ColumnType::Date {
                        let (x, b) = (parse_date(x), parse_date(b));
                        if is_min { x >= b } else { x <= b }
                    } else {
                        let (x, b) = (parse_datetime(x), parse_datetime(b));
                        if is_min { x >= b } else { x <= b }
                    };
                    (ok, x.to_string())
                }
                ColumnType::Boolean => (true, String::new()),
            };
            if !ok {
                let dir = if is_min {
                    "below the minimum"
                } else {
                    "above the maximum"
                };
                return Err(Error::constraint(
                    t,
                    cname,
                    rule,
                    format!("{what} is {dir} {b} of column {cname}"),
                )
                .hint(format!(
                    "give a value with {rule} {b} ({})",
                    bound_kind(c.ty)
                )));
            }
        }
        Ok(())
    }

    /// Validates a full row (after defaults and merges): unknown columns, required, each value.
    /// Returns the normalized values in column order, nulls dropped.
    pub fn check_row(&self, values: &Map<String, Value>) -> Result<Map<String, Value>> {
        for k in values.keys() {
            if !self.def.columns.contains_key(k) {
                let known: Vec<&str> = self.def.columns.keys().map(String::as_str).collect();
                return Err(Error::constraint(
                    &self.name,
                    k,
                    "unknown_column",
                    format!("table {} has no column {k}", self.name),
                )
                .hint(format!(
                    "known columns: {}; add it with alter_table first",
                    known.join(", ")
                )));
            }
        }
        let mut out = Map::new();
        for (cname, c) in &self.def.columns {
            match values.get(cname) {
                None | Some(Value::Null) => {
                    if c.required {
                        return Err(Error::constraint(
                            &self.name,
                            cname,
                            "required",
                            format!("column {cname} is required"),
                        )
                        .hint(format!("give a value for {cname} ({})", type_phrase(c))));
                    }
                }
                Some(v) => {
                    out.insert(cname.clone(), self.check_value(cname, c, v)?);
                }
            }
        }
        if self.def.skills {
            crate::engine::skills::check_row(&self.name, &out)?;
        }
        Ok(out)
    }

    /// Fills defaults into an insert's values.
    pub fn apply_defaults(&self, values: &mut Map<String, Value>) {
        for (cname, c) in &self.def.columns {
            if let Some(d) = &c.default
                && values.get(cname).is_none_or(Value::is_null)
            {
                values.insert(cname.clone(), d.clone());
            }
        }
    }
}
