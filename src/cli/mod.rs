//! The owner's `datanotes apps ...`, `grants ...` and `metrics-tokens ...` commands: thin HTTP calls to a running server with the owner
//! token (read from the database folder or given).

mod grants;
mod install;
mod keys;
mod metrics_tokens;
mod plan;

use crate::discover::Endpoint;
use clap::Subcommand;
pub use grants::{GrantsCmd, run_grants};
pub use metrics_tokens::{MetricsTokensCmd, run_metrics_tokens};
use serde_json::{Value, json};
use std::path::PathBuf;

/// How the CLI reaches a running server: its address recorded in `--database DIR` (written by
/// `serve`), or `--url`; the owner token read from the same folder, or `--token`.
#[derive(clap::Args)]
pub struct Conn {
    /// The running server's address, e.g. http://127.0.0.1:5234 (by default the one recorded by
    /// `datanotes serve` in DIR/.datanotes/server.json).
    #[arg(long, global = true, env = "DATANOTES_URL")]
    pub url: Option<String>,
    /// The token to send (by default the owner token, read from DIR/.datanotes/owner-token).
    /// Prefer the variable DATANOTES_TOKEN: a command line is visible to the machine's other
    /// users.
    #[arg(long, global = true, env = "DATANOTES_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// The database folder the server serves: its address and the owner token are read from it.
    #[arg(long, global = true)]
    pub database: Option<PathBuf>,
}

impl Conn {
    /// The server to talk to (see [`crate::discover::find`]).
    pub fn endpoint(&self) -> anyhow::Result<Endpoint> {
        crate::discover::find(self.url.as_deref(), self.database.as_deref())
    }

    /// The token to send: `--token`, else the owner token of `--database`.
    pub fn token(&self) -> anyhow::Result<String> {
        match (&self.token, &self.database) {
            (Some(t), _) => Ok(t.clone()),
            (None, Some(db)) => crate::discover::owner_token(db),
            (None, None) => anyhow::bail!(
                "no token: give --database DIR (to read the owner token) or set DATANOTES_TOKEN"
            ),
        }
    }
}

/// The fields of an app entry the owner sets.
#[derive(clap::Args, Default)]
pub struct AppArgs {
    /// The app's name: [a-z][a-z0-9_-]{0,63}.
    #[arg(long)]
    pub name: String,
    #[command(flatten)]
    /// Its rights and fields.
    pub fields: EntryArgs,
}

/// The fields of an app entry the owner sets, but its name (shared by `create`, `update` and
/// `install`).
#[derive(clap::Args, Default, Clone)]
pub struct EntryArgs {
    /// A write pattern (catalog.schema.table, catalog.schema.*, catalog.*, *); repeat for more.
    #[arg(long)]
    pub write: Vec<String>,
    /// Allow schema changes on tables matching `write`.
    #[arg(long)]
    pub ddl: Option<bool>,
    /// Allow maintenance (settings, undo, restore, vacuum, rebuild).
    #[arg(long)]
    pub maintain: Option<bool>,
    /// A remote app's MCP endpoint.
    #[arg(long)]
    pub mcp_url: Option<String>,
    /// The token the engine sends to the remote app.
    #[arg(long)]
    pub mcp_token: Option<String>,
    #[arg(long)]
    /// What the app does, for agents.
    pub description: Option<String>,
    #[arg(long)]
    /// Instructions for agents using the app's tools.
    pub instructions: Option<String>,
    /// A tool the app's token may list and call (a name or a pattern with *, e.g.
    /// `planning_*`); repeat for more. Default: every tool.
    #[arg(long = "call-tool")]
    pub call_tools: Vec<String>,
    /// Whether the app may change its own mcp_url (false pins it).
    #[arg(long)]
    pub self_url: Option<bool>,
    /// Whether an mcp_url the app sets for itself may be a loopback or private address.
    #[arg(long)]
    pub self_url_private: Option<bool>,
    /// What the app's tools are listed with in front of their names (e.g. `gh_`), so that two
    /// apps' tools of one name both stay reachable; `''` removes it.
    #[arg(long)]
    pub tool_prefix: Option<String>,
    /// What the app's token is listed on /mcp: `all` (every tool it may call) or `search`
    /// (search_tools and call_tool).
    #[arg(long)]
    pub tool_listing: Option<String>,
    /// A tool (name or pattern with *) the search listing shows besides search_tools and
    /// call_tool; repeat the flag for more, `--pin-tool ''` alone for none.
    #[arg(long = "pin-tool", value_name = "TOOL")]
    pub pinned_tools: Vec<String>,
}

impl EntryArgs {
    /// The fields given, as the apps routes take them.
    fn to_json(&self) -> Value {
        let mut v = json!({});
        if !self.write.is_empty() {
            v["write"] = json!(self.write);
        }
        // `--call-tool ''` alone: no tool; `--pin-tool ''` alone: none pinned.
        if !self.call_tools.is_empty() {
            let tools: Vec<&String> = self.call_tools.iter().filter(|t| !t.is_empty()).collect();
            v["call_tools"] = json!(tools);
        }
        if !self.pinned_tools.is_empty() {
            let tools: Vec<&String> = self.pinned_tools.iter().filter(|t| !t.is_empty()).collect();
            v["pinned_tools"] = json!(tools);
        }
        for (k, x) in [
            ("ddl", self.ddl),
            ("maintain", self.maintain),
            ("self_url", self.self_url),
            ("self_url_private", self.self_url_private),
        ] {
            if let Some(x) = x {
                v[k] = x.into();
            }
        }
        match self.tool_prefix.as_deref() {
            Some("") => v["tool_prefix"] = Value::Null,
            Some(p) => v["tool_prefix"] = json!(p),
            None => {}
        }
        for (k, x) in [
            ("mcp_url", &self.mcp_url),
            ("mcp_token", &self.mcp_token),
            ("description", &self.description),
            ("instructions", &self.instructions),
            ("tool_listing", &self.tool_listing),
        ] {
            if let Some(x) = x {
                v[k] = x.clone().into();
            }
        }
        v
    }
}

impl AppArgs {
    fn to_json(&self) -> Value {
        let mut v = self.fields.to_json();
        v["name"] = self.name.clone().into();
        v
    }
}

#[derive(Subcommand)]
/// `datanotes apps ...`: the owner's commands on the apps of a running server.
pub enum AppsCmd {
    /// Register an app; prints its token once.
    Create(AppArgs),
    /// One line per app: name, kind, reachable, tools, skipped, a WASM app's live instances and
    /// their memory, last error and its age (the same as `status`; `--json` for every field).
    List {
        /// Print the apps' entries as JSON instead.
        #[arg(long)]
        json: bool,
    },
    /// One line per app: name, kind, reachable, tools, skipped, a WASM app's live instances and
    /// their memory, last error and its age.
    Status {
        /// Print the apps' entries as JSON instead.
        #[arg(long)]
        json: bool,
    },
    /// One app's entry, as JSON.
    Get {
        /// The app's name.
        name: String,
    },
    /// Lists an app's tools again now; prints what changed.
    Refresh {
        /// The app's name.
        name: String,
    },
    /// Change an app's rights or fields.
    Update(AppArgs),
    /// Give an app a new token (the old one stops working at once); prints it once.
    RotateToken {
        #[arg(long)]
        /// The app's name.
        name: String,
    },
    /// Delete an app (its token stops working at once).
    Delete {
        #[arg(long)]
        /// The app's name.
        name: String,
    },
    /// Install a WASM component as an app: from a file (or replace an app's component), or by
    /// reference (oci://, https://): the plan first (rights asked and granted), then `--yes`.
    Install(install::InstallArgs),
    /// Upgrade an app installed by reference: pull its source again, or a new one; a version that
    /// asks for more rights shows its plan and needs `--yes`.
    Upgrade(install::UpgradeArgs),
    /// Return an app installed by reference to its previous version at once.
    Rollback {
        /// The app's name.
        name: String,
        /// Print the server's answer as JSON instead.
        #[arg(long)]
        json: bool,
    },
    /// Make a signing key pair: PREFIX.key (private, kept secret; encrypted when COSIGN_PASSWORD
    /// is set) and PREFIX.pub (public).
    Keygen {
        /// Where to write the keys: PREFIX.key and PREFIX.pub.
        prefix: PathBuf,
    },
    /// Sign an app published in an OCI registry (cosign-compatible); needs no server.
    Sign(keys::SignArgs),
    /// Trust a public key: apps signed with its private key install as "signed by NAME".
    Trust {
        /// The name to know the signer by.
        name: String,
        /// The public key file (PREFIX.pub from `datanotes apps keygen`, or a cosign.pub).
        #[arg(long)]
        key: PathBuf,
    },
}

/// Sends one owner request to the running server; a refusal is an error with the server's
/// message and hint, a server that does not answer an error naming the address tried.
pub fn post(conn: &Conn, route: &str, body: Value) -> anyhow::Result<Value> {
    let ep = conn.endpoint()?;
    let token = conn.token()?;
    let url = format!("{}/datanotes/{route}/", ep.url);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let (status, v) = rt.block_on(async {
        let r = reqwest::Client::new()
            .post(&url)
            .bearer_auth(token)
            .json(&body)
            .send()
            .await
            .map_err(|e| ep.request_failed(&e))?;
        let status = r.status();
        let v: Option<Value> = r.json().await.ok();
        Ok::<_, anyhow::Error>((status, v))
    })?;
    let Some(v) = v else {
        anyhow::bail!(
            "{url} answered HTTP {status} without a datanotes answer (is {} a datanotes server?)",
            ep.url
        );
    };
    if !status.is_success() {
        let e = &v["error"];
        let mut msg = format!(
            "{} (HTTP {} from {})",
            e["message"]
                .as_str()
                .unwrap_or("the server refused the request"),
            status.as_u16(),
            ep.url
        );
        if let Some(h) = e["hint"].as_str() {
            msg.push_str(&format!("\nhint: {h}"));
        }
        anyhow::bail!(msg);
    }
    Ok(v)
}

/// Rows as aligned text columns: each cell but the last padded to its column's width, `seps[i]`
/// between columns `i` and `i + 1`, trailing blanks trimmed.
fn aligned<const N: usize>(rows: &[[String; N]], seps: [&str; N]) -> Vec<String> {
    let mut width = [0usize; N];
    for r in rows {
        for (w, c) in width.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    rows.iter()
        .map(|r| {
            let mut line = String::new();
            for (i, c) in r.iter().enumerate() {
                line.push_str(seps[i]);
                line.push_str(c);
                if i + 1 < N {
                    let pad = width[i] - c.chars().count();
                    line.extend(std::iter::repeat_n(' ', pad));
                }
            }
            line.trim_end().to_string()
        })
        .collect()
}

fn print(v: &Value) {
    println!("{}", serde_json::to_string_pretty(v).unwrap_or_default());
}

/// Runs an `apps` command against the server at `conn`, printing its answer as JSON.
pub fn run(conn: Conn, cmd: AppsCmd) -> anyhow::Result<()> {
    match cmd {
        AppsCmd::Create(a) => {
            let v = post(&conn, "apps/create", a.to_json())?;
            if v["app"]["kind"] == "remote" {
                eprintln!("{}", reached(&v["app"]));
            }
            print(&v["app"]);
            println!("token (shown once): {}", v["token"].as_str().unwrap_or(""));
        }
        AppsCmd::List { json } | AppsCmd::Status { json } => {
            let v = post(&conn, "apps", json!({}))?;
            if json {
                print(&v);
            } else {
                print_status(v["apps"].as_array().map(Vec::as_slice).unwrap_or_default());
            }
        }
        AppsCmd::Get { name } => print(&post(&conn, "apps/get", json!({"name": name}))?["app"]),
        AppsCmd::Refresh { name } => {
            let v = post(&conn, "apps/refresh", json!({"name": name}))?;
            let names = |k: &str| -> String {
                let n: Vec<String> = v[k]
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .map(|x| x["name"].as_str().or(x.as_str()).unwrap_or("?").to_string())
                            .collect()
                    })
                    .unwrap_or_default();
                if n.is_empty() {
                    "none".into()
                } else {
                    n.join(", ")
                }
            };
            println!("{}", status_line(&v["app"], chrono::Utc::now()));
            println!(
                "added: {}; removed: {}; skipped: {}",
                names("added"),
                names("removed"),
                names("skipped")
            );
        }
        AppsCmd::Update(a) => print(&post(&conn, "apps/update", a.to_json())?["app"]),
        AppsCmd::RotateToken { name } => {
            let v = post(&conn, "apps/rotate-token", json!({"name": name}))?;
            println!(
                "new token for {name} (shown once; the old one no longer works): {}",
                v["token"].as_str().unwrap_or("")
            );
        }
        AppsCmd::Delete { name } => print(&post(&conn, "apps/delete", json!({"name": name}))?),
        AppsCmd::Install(a) => install::install(&conn, a)?,
        AppsCmd::Upgrade(a) => install::upgrade(&conn, a)?,
        AppsCmd::Rollback { name, json } => install::rollback(&conn, &name, json)?,
        AppsCmd::Keygen { prefix } => keys::keygen(&prefix)?,
        AppsCmd::Sign(a) => keys::sign(a)?,
        AppsCmd::Trust { name, key } => keys::trust(&conn, name, &key)?,
    }
    Ok(())
}

/// Whether a new remote app was reached, and what it lists (or why not).
fn reached(app: &Value) -> String {
    let name = app["name"].as_str().unwrap_or("?");
    let url = app["mcp_url"].as_str().unwrap_or("?");
    match app["reachable"].as_bool() {
        Some(true) => format!(
            "{name}: reached at {url}; it lists {} tools: {}",
            app["tools"].as_array().map_or(0, Vec::len),
            strs(&app["tools"]).join(", ")
        ),
        _ => format!(
            "{name}: not reached at {url}: {}; the engine tries again in the background \
             (`datanotes apps refresh {name}` to try now)",
            app["lastError"].as_str().unwrap_or("no answer yet")
        ),
    }
}

fn strs(v: &Value) -> Vec<&str> {
    v.as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

/// How long ago an RFC 3339 time was, in plain words (`12 s ago`, `3 min ago`).
fn age(at: &str, now: chrono::DateTime<chrono::Utc>) -> Option<String> {
    let t = chrono::DateTime::parse_from_rfc3339(at).ok()?;
    let s = (now - t.with_timezone(&chrono::Utc)).num_seconds().max(0);
    Some(match s {
        0..60 => format!("{s} s ago"),
        60..3600 => format!("{} min ago", s / 60),
        3600..86400 => format!("{} h ago", s / 3600),
        _ => format!("{} d ago", s / 86400),
    })
}

/// One app as a line: name, kind, reachable, tools, skipped, a WASM app's live instances and
/// their memory, last error with its age.
fn status_line(a: &Value, now: chrono::DateTime<chrono::Utc>) -> String {
    let kind = a["kind"].as_str().unwrap_or("?");
    let reach = match (kind, a["reachable"].as_bool()) {
        ("client", _) => "-",
        (_, Some(true)) => "reachable",
        (_, Some(false)) => "NOT REACHABLE",
        (_, None) => "not checked yet",
    };
    let skipped = a["skippedTools"].as_array().map_or(0, Vec::len);
    // A WASM app's live instances (in a call or warm) and their memory.
    let rt = &a["runtime"];
    let live = match (rt["instances"].as_u64(), rt["memoryBytes"].as_u64()) {
        (Some(n), Some(b)) => format!("{n} ({:.1} MiB)", b as f64 / 1048576.0),
        _ => "-".to_string(),
    };
    // The name, and the prefix its tools are listed with.
    let name = match a["tool_prefix"].as_str() {
        Some(p) => format!("{} ({p}*)", a["name"].as_str().unwrap_or("?")),
        None => a["name"].as_str().unwrap_or("?").to_string(),
    };
    let mut line = format!(
        "{:<20} {:<7} {:<15} {:>5} {:>7}  {:<14}",
        name,
        kind,
        reach,
        a["tools"].as_array().map_or(0, Vec::len),
        skipped,
        live
    );
    if let Some(e) = a["lastError"].as_str() {
        let when = a["lastErrorAt"]
            .as_str()
            .and_then(|t| age(t, now))
            .map(|a| format!(" ({a})"))
            .unwrap_or_default();
        line.push_str(&format!("{e}{when}"));
    }
    line.trim_end().to_string()
}

/// The apps, one line each, after a header; and the skipped tools with who holds each name.
fn print_status(apps: &[Value]) {
    if apps.is_empty() {
        println!("no apps (add one with `datanotes apps create` or `datanotes apps install`)");
        return;
    }
    let now = chrono::Utc::now();
    println!(
        "{:<20} {:<7} {:<15} {:>5} {:>7}  {:<14}LAST ERROR",
        "NAME", "KIND", "REACHABLE", "TOOLS", "SKIPPED", "INSTANCES"
    );
    for a in apps {
        println!("{}", status_line(a, now));
        for t in a["skippedTools"].as_array().into_iter().flatten() {
            let why = match t["takenBy"].as_str() {
                Some(by) => format!("the name is held by {by}"),
                None => t["reason"].as_str().unwrap_or("").to_string(),
            };
            println!("    skipped {}: {why}", t["name"].as_str().unwrap_or("?"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::grants::grants_table;

    #[test]
    fn a_grant_line_names_its_client_and_rights() {
        let now = chrono::DateTime::parse_from_rfc3339("2026-12-01T10:00:00Z")
            .unwrap()
            .with_timezone(&chrono::Utc);
        let g = json!({"id": "g1", "client_name": "Test agent", "client_id": "c1",
            "client_origin": "https://agent.example", "redirect_uri": "https://agent.example/cb",
            "rights": {"write": ["personal.tasks.items"], "ddl": false, "maintain": true,
                       "call_tools": ["list_tables", "insert_row"]},
            "created": "2026-12-01T09:57:00Z", "last_used": null});
        let t = grants_table(&[g], now);
        assert!(t[0].starts_with("ID  CLIENT"), "{t:?}");
        assert_eq!(
            t[1],
            "g1  Test agent (https://agent.example)  3 min ago  never      \
             write: personal.tasks.items · maintain · tools: list_tables, insert_row"
        );
    }

    #[test]
    fn a_status_line_says_what_is_wrong_and_since_when() {
        let now = chrono::DateTime::parse_from_rfc3339("2026-12-01T10:00:00Z")
            .unwrap()
            .with_timezone(&chrono::Utc);
        let a = json!({"name": "weather", "kind": "remote", "reachable": false, "tools": [],
            "skippedTools": [{"name": "x", "takenBy": "planning"}],
            "lastError": "connection refused", "lastErrorAt": "2026-12-01T09:58:30.000Z"});
        let l = status_line(&a, now);
        assert!(l.starts_with("weather"), "{l}");
        assert!(l.contains("NOT REACHABLE"), "{l}");
        let nums: Vec<&str> = l.split_whitespace().skip(4).take(2).collect();
        assert_eq!(nums, ["0", "1"], "tools, skipped: {l}");
        assert!(
            l.ends_with("  -             connection refused (1 min ago)"),
            "{l}"
        );
        let a = json!({"name": "planning", "kind": "wasm", "reachable": true, "tools": [1, 2],
            "runtime": {"instances": 1, "memoryBytes": 1179648}});
        let l = status_line(&a, now);
        assert!(l.ends_with("  2       0  1 (1.1 MiB)"), "{l}");
    }
}
