//! How an install's or an upgrade's plan reads in a terminal: the app's rights, each
//! difference marked, the signature and where the component comes from.

use super::print;
use serde_json::Value;

/// Shows a plan (the answer `v` as JSON with `--json`): without `--yes` it stops there, saying
/// `stop`; with it, answers the plan's confirm body.
pub(super) fn shown(
    v: &Value,
    plan: &Value,
    yes: bool,
    json: bool,
    stop: &str,
) -> anyhow::Result<Option<Value>> {
    match (yes, json) {
        (false, true) => print(v),
        (_, false) => plan_lines(plan).iter().for_each(|l| println!("{l}")),
        (true, true) => {}
    }
    if !yes {
        if !json {
            println!("{stop}");
        }
        return Ok(None);
    }
    let confirm = plan["confirm"].clone();
    if !confirm.is_object() {
        anyhow::bail!("the server's plan has no confirm body");
    }
    Ok(Some(confirm))
}

/// A signature check (`{status, key, detail}`) as one line.
pub(super) fn signature_line(s: &Value) -> String {
    match s["status"].as_str() {
        Some("signed") => format!("signed by {}", s["key"].as_str().unwrap_or("?")),
        Some("unsigned") => "unsigned".into(),
        Some("untrusted") => match s["detail"].as_str().filter(|d| !d.is_empty()) {
            Some(d) => format!("signed, but by no trusted key ({d})"),
            None => "signed, but by no trusted key".into(),
        },
        _ => "not checked".into(),
    }
}

/// An entry's origin in a few words: `DIGEST, signed by alice`.
pub(super) fn origin_line(o: &Value) -> String {
    format!(
        "{}, {}",
        o["digest"].as_str().unwrap_or("?"),
        signature_line(&o["signature"])
    )
}

/// A right's value in a cell: a list joined, yes/no, `-` for nothing.
pub(super) fn cell(v: &Value) -> String {
    match v {
        Value::Null => "-".into(),
        Value::Bool(b) => if *b { "yes" } else { "no" }.into(),
        Value::String(s) => s.clone(),
        Value::Array(a) if a.is_empty() => "none".into(),
        Value::Array(a) => a
            .iter()
            .map(|x| x.as_str().map_or_else(|| x.to_string(), str::to_string))
            .collect::<Vec<_>>()
            .join(", "),
        _ => v.to_string(),
    }
}

/// A plan for people: what, from where, signed or not, the rights asked next to those granted
/// (each difference marked), the tools.
pub(super) fn plan_lines(p: &Value) -> Vec<String> {
    let mut out = vec![format!("plan for {}:", p["source"].as_str().unwrap_or("?"))];
    let size = p["size"].as_u64().unwrap_or(0);
    out.push(format!(
        "  digest     {}",
        p["digest"].as_str().unwrap_or("?")
    ));
    out.push(format!(
        "  size       {size} bytes ({:.1} MB)",
        size as f64 / 1e6
    ));
    out.push(format!("  signature  {}", signature_line(&p["signature"])));
    if let Some(c) = p["signer_change"].as_str() {
        out.push(format!("  signer     {c}"));
    }
    let m = &p["manifest"];
    if m.is_object() {
        let mut about = [&m["name"], &m["version"]]
            .iter()
            .filter_map(|x| x.as_str())
            .collect::<Vec<_>>()
            .join(" ");
        if let Some(d) = m["description"].as_str() {
            about = format!("{about}: {d}");
        }
        out.push(format!("  app        {}", about.trim_start_matches(": ")));
    } else {
        out.push("  app        no manifest (it asks for no rights)".into());
    }
    let (asked, granted) = (&p["asked"], &p["granted"]);
    let mut rows: Vec<(String, Value, Value)> = ["write", "ddl", "maintain", "allow_hosts"]
        .iter()
        .map(|k| (k.to_string(), asked[k].clone(), granted[k].clone()))
        .collect();
    let mut limit_keys: Vec<&String> = Vec::new();
    for l in [&asked["limits"], &granted["limits"]] {
        for k in l.as_object().into_iter().flat_map(|o| o.keys()) {
            if !limit_keys.contains(&k) {
                limit_keys.push(k);
            }
        }
    }
    for k in limit_keys {
        let (x, y) = (&asked["limits"][k], &granted["limits"][k]);
        rows.push((format!("limits.{k}"), x.clone(), y.clone()));
    }
    let diffs = p["differences"].as_array().cloned().unwrap_or_default();
    let cells: Vec<[String; 4]> = rows
        .into_iter()
        .map(|(right, x, y)| {
            let mark = diffs
                .iter()
                .find(|d| d["right"] == right.as_str())
                .map(|d| format!("<- {}", d["change"].as_str().unwrap_or("differs")))
                .unwrap_or_default();
            [right, cell(&x), cell(&y), mark]
        })
        .collect();
    let head = ["RIGHT", "ASKED", "GRANTED", ""].map(String::from);
    let cells: Vec<_> = std::iter::once(head).chain(cells).collect();
    out.push("  rights:".into());
    out.extend(super::aligned(&cells, ["    ", "  ", " | ", "  "]));
    let tools = p["tools"].as_array().cloned().unwrap_or_default();
    out.push(format!("  tools ({}):", tools.len()));
    for t in &tools {
        let name = t["name"].as_str().or(t.as_str()).unwrap_or("?");
        match t["description"].as_str().filter(|d| !d.is_empty()) {
            Some(d) => out.push(format!("    {name}: {d}")),
            None => out.push(format!("    {name}")),
        }
    }
    out
}
