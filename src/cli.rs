//! The owner's `datanotes apps ...` commands: thin HTTP calls to a running server with the owner
//! token (read from the database folder or given).

use clap::Subcommand;
use serde_json::{Value, json};
use std::path::PathBuf;

/// How the CLI reaches a running server.
#[derive(clap::Args)]
pub struct Conn {
    /// The running server.
    #[arg(
        long,
        global = true,
        default_value = "http://127.0.0.1:5234",
        env = "DATANOTES_URL"
    )]
    pub url: String,
    /// The owner token; or use --database to read it.
    #[arg(long, global = true, env = "DATANOTES_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Read the owner token from this database folder.
    #[arg(long, global = true)]
    pub database: Option<PathBuf>,
}

/// The fields of an app entry the owner sets.
#[derive(clap::Args, Default)]
pub struct AppArgs {
    /// The app's name: [a-z][a-z0-9_-]{0,63}.
    #[arg(long)]
    pub name: String,
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
}

impl AppArgs {
    fn to_json(&self) -> Value {
        let mut v = json!({"name": self.name});
        if !self.write.is_empty() {
            v["write"] = json!(self.write);
        }
        for (k, x) in [("ddl", self.ddl), ("maintain", self.maintain)] {
            if let Some(x) = x {
                v[k] = x.into();
            }
        }
        for (k, x) in [
            ("mcp_url", &self.mcp_url),
            ("mcp_token", &self.mcp_token),
            ("description", &self.description),
            ("instructions", &self.instructions),
        ] {
            if let Some(x) = x {
                v[k] = x.clone().into();
            }
        }
        v
    }
}

#[derive(Subcommand)]
/// `datanotes apps ...`: the owner's commands on the apps of a running server.
pub enum AppsCmd {
    /// Register an app; prints its token once.
    Create(AppArgs),
    /// List the apps with their tools and reachability.
    List,
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
    /// Install a WASM component as an app, or replace an app's component; prints a new app's token once.
    Install {
        /// The component (.wasm) built for the world in wit/datanotes-app.wit.
        file: PathBuf,
        #[command(flatten)]
        /// The app's name and rights.
        app: AppArgs,
        /// Linear memory limit, MiB.
        #[arg(long)]
        memory_mb: Option<u64>,
        /// CPU time per call, ms.
        #[arg(long)]
        cpu_ms: Option<u64>,
        /// Wall-clock time per call, ms.
        #[arg(long)]
        timeout_ms: Option<u64>,
        /// Largest result, bytes.
        #[arg(long)]
        max_result_bytes: Option<u64>,
        /// Concurrent instances.
        #[arg(long)]
        max_instances: Option<u32>,
        /// How long an instance stays warm after a call, ms (0: none kept).
        #[arg(long)]
        idle_ms: Option<u64>,
        /// A host the app may send HTTP requests to (`host`, `host:port`, `*.domain`); repeat it
        /// for several. Without it the app has no network; on an update, the hosts given
        /// replace the app's list (`--allow-host ''` empties it).
        #[arg(long = "allow-host", value_name = "HOST")]
        allow_hosts: Vec<String>,
    },
}

/// Sends one owner request to the running server; an error is printed with its hint and exits 1.
pub fn post(conn: &Conn, route: &str, body: Value) -> anyhow::Result<Value> {
    let token = match (&conn.token, &conn.database) {
        (Some(t), _) => t.clone(),
        (None, Some(db)) => crate::auth::read_owner_token(db)?,
        (None, None) => anyhow::bail!(
            "give --database DIR (to read the owner token) or --token (or DATANOTES_TOKEN)"
        ),
    };
    let url = format!("{}/datanotes/{route}/", conn.url.trim_end_matches('/'));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let (status, v) = rt.block_on(async {
        let r = reqwest::Client::new()
            .post(&url)
            .bearer_auth(token)
            .json(&body)
            .send()
            .await?;
        let status = r.status();
        let v: Value = r.json().await.unwrap_or_default();
        Ok::<_, anyhow::Error>((status, v))
    })?;
    if !status.is_success() {
        let e = &v["error"];
        eprintln!(
            "error ({status}): {}",
            e["message"].as_str().unwrap_or("unknown")
        );
        if let Some(h) = e["hint"].as_str() {
            eprintln!("hint: {h}");
        }
        std::process::exit(1);
    }
    Ok(v)
}

fn print(v: &Value) {
    println!("{}", serde_json::to_string_pretty(v).unwrap_or_default());
}

/// Runs an `apps` command against the server at `conn`, printing its answer as JSON.
pub fn run(conn: Conn, cmd: AppsCmd) -> anyhow::Result<()> {
    match cmd {
        AppsCmd::Create(a) => {
            let v = post(&conn, "apps/create", a.to_json())?;
            print(&v["app"]);
            println!("token (shown once): {}", v["token"].as_str().unwrap_or(""));
        }
        AppsCmd::List => print(&post(&conn, "apps", json!({}))?),
        AppsCmd::Update(a) => print(&post(&conn, "apps/update", a.to_json())?["app"]),
        AppsCmd::RotateToken { name } => {
            let v = post(&conn, "apps/rotate-token", json!({"name": name}))?;
            println!(
                "new token for {name} (shown once; the old one no longer works): {}",
                v["token"].as_str().unwrap_or("")
            );
        }
        AppsCmd::Delete { name } => print(&post(&conn, "apps/delete", json!({"name": name}))?),
        AppsCmd::Install {
            file,
            app,
            memory_mb,
            cpu_ms,
            timeout_ms,
            max_result_bytes,
            max_instances,
            idle_ms,
            allow_hosts,
        } => {
            let path = file
                .canonicalize()
                .map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
            let size = std::fs::metadata(&path)?.len();
            let mut body = app.to_json();
            body["wasm_path"] = path.display().to_string().into();
            let mut limits = serde_json::Map::new();
            for (k, v) in [
                ("memory_mb", memory_mb),
                ("cpu_ms", cpu_ms),
                ("timeout_ms", timeout_ms),
                ("max_result_bytes", max_result_bytes),
                ("max_instances", max_instances.map(u64::from)),
                ("idle_ms", idle_ms),
            ] {
                if let Some(v) = v {
                    limits.insert(k.into(), v.into());
                }
            }
            if !limits.is_empty() {
                body["limits"] = limits.into();
            }
            if !allow_hosts.is_empty() {
                let hosts: Vec<&String> = allow_hosts.iter().filter(|h| !h.is_empty()).collect();
                body["allow_hosts"] = json!(hosts);
            }
            let exists = post(&conn, "apps", json!({}))?["apps"]
                .as_array()
                .is_some_and(|a| a.iter().any(|x| x["name"] == app.name.as_str()));
            eprintln!(
                "{} {} from {} ({:.1} MB): compiling and checking the component (a Python or JS one takes a few seconds)...",
                if exists { "updating" } else { "installing" },
                app.name,
                path.display(),
                size as f64 / 1e6
            );
            let started = std::time::Instant::now();
            let (tx, rx) = std::sync::mpsc::channel::<()>();
            let ticker = std::thread::spawn(move || {
                while rx.recv_timeout(std::time::Duration::from_secs(2)).is_err() {
                    eprintln!("  ... {} s", started.elapsed().as_secs());
                }
            });
            let v = post(
                &conn,
                if exists { "apps/update" } else { "apps/create" },
                body,
            );
            let _ = tx.send(());
            let _ = ticker.join();
            let v = v?;
            let entry = &v["app"];
            let tools: Vec<&str> = entry["tools"]
                .as_array()
                .map(|t| t.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            eprintln!(
                "done in {:.1} s: {} tools: {}",
                started.elapsed().as_secs_f64(),
                tools.len(),
                tools.join(", ")
            );
            if let Some(sk) = entry["skippedTools"].as_array().filter(|a| !a.is_empty()) {
                eprintln!(
                    "skipped (name taken or invalid): {}",
                    Value::Array(sk.clone())
                );
            }
            print(entry);
            if let Some(t) = v["token"].as_str() {
                println!("token (shown once): {t}");
            }
        }
    }
    Ok(())
}
