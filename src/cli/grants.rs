//! `datanotes grants list | revoke`: the OAuth grants the owner gave, as a table in a terminal.

use super::*;

#[derive(Subcommand)]
/// `datanotes grants ...`: the owner's commands on the grants web agents got through OAuth (the
/// rights the owner chose on the consent page).
pub enum GrantsCmd {
    /// One line per grant: id, client, created, last used, rights (`--json` for every field).
    List {
        /// Print the grants as JSON instead.
        #[arg(long)]
        json: bool,
    },
    /// Revoke a grant: its agent's tokens stop working at once.
    Revoke {
        /// The grant's id (from `datanotes grants list`).
        id: String,
    },
}

/// Runs a `grants` command against the server at `conn`.
pub fn run_grants(conn: Conn, cmd: GrantsCmd) -> anyhow::Result<()> {
    match cmd {
        GrantsCmd::List { json } => {
            let v = post(&conn, "grants/list", json!({}))?;
            if json {
                print(&v);
            } else {
                print_grants(
                    v["grants"]
                        .as_array()
                        .map(Vec::as_slice)
                        .unwrap_or_default(),
                    chrono::Utc::now(),
                );
            }
        }
        GrantsCmd::Revoke { id } => {
            // The client it was given to, to say whose access ends (the server names an unknown id).
            let client = post(&conn, "grants/list", json!({}))?["grants"]
                .as_array()
                .and_then(|g| g.iter().find(|g| g["id"] == id.as_str()))
                .and_then(|g| g["client_name"].as_str().map(|c| format!(" ({c})")))
                .unwrap_or_default();
            post(&conn, "grants/revoke", json!({"id": id}))?;
            println!("revoked grant {id}{client}: its tokens no longer work");
        }
    }
    Ok(())
}

/// A grant's rights in a few words: `write: a.b.c · ddl · maintain · tools: x, y`.
pub(super) fn grant_rights(r: &Value) -> String {
    let list = |k: &str| {
        let v = strs(&r[k]);
        if v.is_empty() {
            "none".to_string()
        } else {
            v.join(", ")
        }
    };
    let mut parts = vec![format!("write: {}", list("write"))];
    if r["ddl"].as_bool() == Some(true) {
        parts.push("ddl".into());
    }
    if r["maintain"].as_bool() == Some(true) {
        parts.push("maintain".into());
    }
    parts.push(format!("tools: {}", list("call_tools")));
    parts.join(" · ")
}

/// The grants as a table: id, client, created, last used, rights (last: it may be long).
pub(super) fn grants_table(grants: &[Value], now: chrono::DateTime<chrono::Utc>) -> Vec<String> {
    let when = |v: &Value, none: &str| {
        v.as_str()
            .map(|t| age(t, now).unwrap_or_else(|| t.to_string()))
            .unwrap_or_else(|| none.to_string())
    };
    let rows: Vec<[String; 5]> = grants
        .iter()
        .map(|g| {
            let name = g["client_name"]
                .as_str()
                .filter(|n| !n.is_empty())
                .or(g["client_id"].as_str())
                .unwrap_or("?");
            let client = match g["client_origin"].as_str().filter(|o| !o.is_empty()) {
                Some(o) => format!("{name} ({o})"),
                None => name.to_string(),
            };
            [
                g["id"].as_str().unwrap_or("?").to_string(),
                client,
                when(&g["created"], "?"),
                when(&g["last_used"], "never"),
                grant_rights(&g["rights"]),
            ]
        })
        .collect();
    let head = ["ID", "CLIENT", "CREATED", "LAST USED", "RIGHTS"].map(String::from);
    let rows: Vec<_> = std::iter::once(head).chain(rows).collect();
    super::aligned(&rows, ["", "  ", "  ", "  ", "  "])
}

pub(super) fn print_grants(grants: &[Value], now: chrono::DateTime<chrono::Utc>) {
    if grants.is_empty() {
        println!(
            "no grants (a web agent gets one when the owner allows it on the consent page of \
             /oauth/authorize)"
        );
        return;
    }
    for l in grants_table(grants, now) {
        println!("{l}");
    }
}
