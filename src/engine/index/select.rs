//! `select_rows` in SQL: conditions, order, paging and projection over a table's typed
//! columns.

use super::*;

/// One `where` clause of `select_rows`.
pub struct Cond {
    pub column: String,
    pub op: String,
    pub value: Value,
}

pub struct Query {
    pub conds: Vec<Cond>,
    pub order: Vec<(String, bool)>,
    pub limit: i64,
    pub offset: i64,
    pub with_body: bool,
}

pub const OPS: &[&str] = &["=", "!=", "<", "<=", ">", ">=", "in", "contains"];

/// Runs a select; columns and ops are checked by the caller. Returns rows and the total.
pub fn select(c: &Connection, t: &Table, q: &Query) -> Result<(Vec<IndexedRow>, i64)> {
    let mut wh = vec![];
    let mut args: Vec<Sql> = vec![];
    for cond in &q.conds {
        let (col, ty) = if cond.column == "id" {
            ("id".to_string(), ColumnType::Text)
        } else {
            let cd = t
                .column(&cond.column)
                .ok_or_else(|| Error::invalid("unknown column"))?;
            (cname(&cond.column), cd.ty)
        };
        let mut bind = |v: Sql| {
            args.push(v);
            format!("?{}", args.len())
        };
        let clause = match (cond.op.as_str(), &cond.value) {
            ("=", Value::Null) => format!("{col} IS NULL"),
            ("!=", Value::Null) => format!("{col} IS NOT NULL"),
            ("!=", v) => format!("({col} IS NULL OR {col} != {})", bind(filter_sql(ty, v))),
            ("in", Value::Array(items)) => {
                let ph: Vec<String> = items.iter().map(|v| bind(filter_sql(ty, v))).collect();
                if ph.is_empty() {
                    "0".to_string()
                } else {
                    format!("{col} IN ({})", ph.join(","))
                }
            }
            ("contains", v) if ty == ColumnType::List => {
                format!(
                    "EXISTS (SELECT 1 FROM json_each({col}) WHERE value = {})",
                    bind(filter_sql(ty, v))
                )
            }
            ("contains", v) => {
                let s = v
                    .as_str()
                    .map(str::to_string)
                    .unwrap_or_else(|| v.to_string());
                format!("instr(lower({col}), lower({})) > 0", bind(Sql::Text(s)))
            }
            (op, v) => format!("{col} {op} {}", bind(filter_sql(ty, v))),
        };
        wh.push(clause);
    }
    let tn = tname(&t.name);
    let where_sql = if wh.is_empty() {
        String::new()
    } else {
        format!(" WHERE {}", wh.join(" AND "))
    };
    let mut order: Vec<String> = q
        .order
        .iter()
        .map(|(col, desc)| {
            let col = if col == "id" {
                "id".to_string()
            } else {
                cname(col)
            };
            format!("{col} {}", if *desc { "DESC" } else { "ASC" })
        })
        .collect();
    if !q.order.iter().any(|(c, _)| c == "id") {
        order.push("id ASC".into());
    }
    let sql = format!(
        "SELECT {} FROM {tn}{where_sql} ORDER BY {} LIMIT {} OFFSET {}",
        select_cols(t),
        order.join(", "),
        q.limit,
        q.offset
    );
    let mut st = c.prepare_cached(&sql)?;
    let rows = st
        .query_map(params_from_iter(args.iter()), |r| {
            read_row(t, r, q.with_body)
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    let total = if (rows.len() as i64) < q.limit && (q.offset == 0 || !rows.is_empty()) {
        q.offset + rows.len() as i64
    } else {
        c.prepare_cached(&format!("SELECT count(*) FROM {tn}{where_sql}"))?
            .query_row(params_from_iter(args.iter()), |r| r.get(0))?
    };
    Ok((rows, total))
}
