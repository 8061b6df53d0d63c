//! `datanotes apps install | upgrade | rollback | keygen | sign | trust`: installing a WASM app
//! from a file or by reference (an OCI registry or a URL: the plan first, then `--yes`), and the
//! keys that sign apps (made, used and trusted here; `sign` needs no server).

use super::plan::{origin_line, shown, signature_line};
use super::{AppArgs, Conn, EntryArgs, post, print};
use serde_json::{Value, json};
use std::path::PathBuf;

/// `datanotes apps install SOURCE ...`.
#[derive(clap::Args)]
pub struct InstallArgs {
    /// The component: a .wasm file built for the world in wit/datanotes-app.wit, or a reference:
    /// oci://REGISTRY/REPO:TAG, oci://REGISTRY/REPO@sha256:HEX, https://HOST/PATH/app.wasm
    /// (with --sha256).
    #[arg(value_name = "SOURCE")]
    pub source: String,
    /// The app's name: [a-z][a-z0-9_-]{0,63} (needed for a file; for a reference, by default the
    /// name its manifest gives).
    #[arg(long)]
    pub name: Option<String>,
    #[command(flatten)]
    /// Its rights and fields.
    pub fields: EntryArgs,
    /// Linear memory limit, MiB.
    #[arg(long)]
    pub memory_mb: Option<u64>,
    /// CPU time per call, ms.
    #[arg(long)]
    pub cpu_ms: Option<u64>,
    /// Wall-clock time per call, ms.
    #[arg(long)]
    pub timeout_ms: Option<u64>,
    /// Largest result, bytes.
    #[arg(long)]
    pub max_result_bytes: Option<u64>,
    /// Concurrent instances.
    #[arg(long)]
    pub max_instances: Option<u32>,
    /// How long an instance stays warm after a call, ms (0: none kept).
    #[arg(long)]
    pub idle_ms: Option<u64>,
    /// A host the app may send HTTP requests to (`host`, `host:port`, `*.domain`); repeat it
    /// for several. Without it the app has no network; on an update, the hosts given
    /// replace the app's list (`--allow-host ''` empties it).
    #[arg(long = "allow-host", value_name = "HOST")]
    pub allow_hosts: Vec<String>,
    /// The SHA-256 (hex) the component at an https:// source must have.
    #[arg(long, value_name = "HEX")]
    pub sha256: Option<String>,
    /// Grant exactly the rights the app asks for (its manifest), as the plan lists them; limit
    /// flags given replace the limits it asks for.
    #[arg(long, conflicts_with_all = ["write", "ddl", "maintain", "allow_hosts"])]
    pub grant_asked: bool,
    /// Install after showing the plan (without it, a reference only shows the plan).
    #[arg(long, short)]
    pub yes: bool,
    /// Print the server's answers as JSON.
    #[arg(long)]
    pub json: bool,
}

/// `datanotes apps upgrade NAME [SOURCE]`.
#[derive(clap::Args)]
pub struct UpgradeArgs {
    /// The app's name.
    pub name: String,
    /// A new source (oci://... or https://...); by default the app's own, pulled again.
    pub source: Option<String>,
    /// The SHA-256 (hex) the component at an https:// source must have.
    #[arg(long, value_name = "HEX")]
    pub sha256: Option<String>,
    /// Upgrade even if the new version asks for more rights (after showing the plan).
    #[arg(long, short)]
    pub yes: bool,
    /// With --yes, when the new version asks for more: grant it what it asks (what it has is
    /// kept otherwise).
    #[arg(long, requires = "yes")]
    pub grant_asked: bool,
    /// Print the server's answers as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Whether SOURCE is a reference (else a file).
fn is_reference(s: &str) -> bool {
    ["oci://", "https://", "http://"]
        .iter()
        .any(|p| s.get(..p.len()).is_some_and(|h| h.eq_ignore_ascii_case(p)))
}

/// Runs `f` while telling the user every 2 s that it is still going.
fn ticking<T>(what: &str, f: impl FnOnce() -> T) -> T {
    eprintln!("{what}");
    let started = std::time::Instant::now();
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let ticker = std::thread::spawn(move || {
        while rx.recv_timeout(std::time::Duration::from_secs(2)).is_err() {
            eprintln!("  ... {} s", started.elapsed().as_secs());
        }
    });
    let r = f();
    let _ = tx.send(());
    let _ = ticker.join();
    r
}

impl InstallArgs {
    fn app_args(&self) -> AppArgs {
        AppArgs {
            name: self.name.clone().unwrap_or_default(),
            fields: self.fields.clone(),
        }
    }

    fn limits(&self) -> serde_json::Map<String, Value> {
        let mut limits = serde_json::Map::new();
        for (k, v) in [
            ("memory_mb", self.memory_mb),
            ("cpu_ms", self.cpu_ms),
            ("timeout_ms", self.timeout_ms),
            ("max_result_bytes", self.max_result_bytes),
            ("max_instances", self.max_instances.map(u64::from)),
            ("idle_ms", self.idle_ms),
        ] {
            if let Some(v) = v {
                limits.insert(k.into(), v.into());
            }
        }
        limits
    }
}

/// `datanotes apps install`: a file as before, or a reference through the plan.
pub fn install(conn: &Conn, a: InstallArgs) -> anyhow::Result<()> {
    if is_reference(&a.source) {
        return install_reference(conn, a);
    }
    let Some(name) = a.name.clone() else {
        anyhow::bail!(
            "give the app's name: --name NAME (a file carries none)\nhint: datanotes apps install {} --name NAME",
            a.source
        );
    };
    let file = PathBuf::from(&a.source);
    let app = AppArgs {
        name,
        ..a.app_args()
    };
    let path = file.canonicalize().map_err(|e| {
        let why = match e.kind() {
            std::io::ErrorKind::NotFound => "no such file".to_string(),
            _ => e.to_string(),
        };
        anyhow::anyhow!(
            "{}: {why}; give the path of a .wasm component (or an oci:// or https:// reference)",
            file.display()
        )
    })?;
    let size = std::fs::metadata(&path)?.len();
    // The world is checked here first: a mismatch is said before any compile.
    let bytes =
        std::fs::read(&path).map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?;
    if let Some(why) = crate::apps::wasm::check_before_compile(&bytes) {
        anyhow::bail!(
            "{} cannot be installed: {why}\nhint: build a component for the world in wit/datanotes-app.wit (docs/apps.md)",
            path.display()
        );
    }
    drop(bytes);
    let mut body = app.to_json();
    body["wasm_path"] = path.display().to_string().into();
    let limits = a.limits();
    if !limits.is_empty() {
        body["limits"] = limits.into();
    }
    if !a.allow_hosts.is_empty() {
        let hosts: Vec<&String> = a.allow_hosts.iter().filter(|h| !h.is_empty()).collect();
        body["allow_hosts"] = json!(hosts);
    }
    let exists = post(conn, "apps", json!({}))?["apps"]
        .as_array()
        .is_some_and(|x| x.iter().any(|x| x["name"] == app.name.as_str()));
    let started = std::time::Instant::now();
    let v = ticking(
        &format!(
            "{} {} from {} ({:.1} MB): compiling and checking the component (a Python or JS one takes a few seconds)...",
            if exists { "updating" } else { "installing" },
            app.name,
            path.display(),
            size as f64 / 1e6
        ),
        || {
            post(
                conn,
                if exists { "apps/update" } else { "apps/create" },
                body,
            )
        },
    )?;
    let entry = &v["app"];
    let tools = super::strs(&entry["tools"]);
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
    Ok(())
}

/// The plan of an answer, or an error saying the server did not give one.
fn plan_of(v: &Value) -> anyhow::Result<Value> {
    match v.get("plan") {
        Some(p) if p.is_object() => Ok(p.clone()),
        _ => anyhow::bail!(
            "the server answered without a plan (is it older than installs by reference?)"
        ),
    }
}

/// Install by reference: the plan (granting what the flags say, or with `--grant-asked` what
/// the app asks), then with `--yes` its `confirm`.
fn install_reference(conn: &Conn, a: InstallArgs) -> anyhow::Result<()> {
    let mut body = a.app_args().to_json();
    if let (None, Some(o)) = (&a.name, body.as_object_mut()) {
        o.remove("name");
    }
    body["source"] = a.source.clone().into();
    if let Some(h) = &a.sha256 {
        body["sha256"] = h.clone().into();
    }
    if !a.allow_hosts.is_empty() {
        let hosts: Vec<&String> = a.allow_hosts.iter().filter(|h| !h.is_empty()).collect();
        body["allow_hosts"] = json!(hosts);
    }
    let limits = a.limits();
    if !limits.is_empty() {
        body["limits"] = limits.clone().into();
    }
    let planning = format!(
        "planning {}: pulling, checking the signature, compiling...",
        a.source
    );
    let mut v = ticking(&planning, || post(conn, "apps/create", body.clone()))?;
    let mut plan = plan_of(&v)?;
    if a.grant_asked {
        let asked = &plan["asked"];
        for k in ["write", "ddl", "maintain", "allow_hosts"] {
            if let Some(x) = asked.get(k).filter(|x| !x.is_null()) {
                body[k] = x.clone();
            }
        }
        let mut l = asked["limits"].as_object().cloned().unwrap_or_default();
        l.retain(|_, x| !x.is_null());
        l.extend(limits);
        if !l.is_empty() {
            body["limits"] = l.into();
        }
        v = post(conn, "apps/create", body)?;
        let again = plan_of(&v)?;
        if again["digest"] != plan["digest"] || again["asked"] != plan["asked"] {
            anyhow::bail!(
                "{} changed while planning (digest {} then {}); run the command again",
                a.source,
                plan["digest"].as_str().unwrap_or("?"),
                again["digest"].as_str().unwrap_or("?")
            );
        }
        plan = again;
    }
    let Some(confirm) = shown(&v, &plan, a.yes, a.json, "to install, run again with --yes")? else {
        return Ok(());
    };
    let v = ticking("installing...", || post(conn, "apps/create", confirm))?;
    if a.json {
        print(&v);
        return Ok(());
    }
    let entry = &v["app"];
    eprintln!(
        "installed {} ({}), {} tools",
        entry["name"].as_str().unwrap_or("?"),
        origin_line(&entry["wasm"]["origin"]),
        entry["tools"].as_array().map_or(0, Vec::len)
    );
    print(entry);
    if let Some(t) = v["token"].as_str() {
        println!("token (shown once): {t}");
    }
    Ok(())
}

/// `datanotes apps upgrade NAME [SOURCE]`.
pub fn upgrade(conn: &Conn, a: UpgradeArgs) -> anyhow::Result<()> {
    let mut body = json!({"name": a.name});
    if let Some(s) = &a.source {
        body["source"] = s.clone().into();
    }
    if let Some(h) = &a.sha256 {
        body["sha256"] = h.clone().into();
    }
    let what = format!("upgrading {}: pulling, checking, compiling...", a.name);
    let mut v = ticking(&what, || post(conn, "apps/upgrade", body))?;
    if v.get("plan").is_some_and(Value::is_object) && v.get("app").is_none() {
        let plan = plan_of(&v)?;
        let stop = match plan["signer_change"].as_str() {
            Some(_) => "the new version changes its signer: to upgrade, run again with --yes",
            None => "the new version asks for more rights: to upgrade, run again with --yes",
        };
        let Some(mut confirm) = shown(&v, &plan, a.yes, a.json, stop)? else {
            return Ok(());
        };
        if a.grant_asked {
            for (k, x) in plan["asked"].as_object().into_iter().flatten() {
                confirm[k] = x.clone();
            }
        }
        v = post(conn, "apps/upgrade", confirm)?;
    }
    if a.json {
        print(&v);
        return Ok(());
    }
    let origin = &v["app"]["wasm"]["origin"];
    match &v["upgraded"] {
        Value::Object(u) => println!(
            "upgraded {}: {} -> {} ({})",
            a.name,
            u.get("from").and_then(Value::as_str).unwrap_or("?"),
            u.get("to").and_then(Value::as_str).unwrap_or("?"),
            signature_line(&origin["signature"])
        ),
        _ => println!(
            "{} is up to date ({}): nothing to do",
            a.name,
            origin_line(origin)
        ),
    }
    Ok(())
}

/// `datanotes apps rollback NAME`.
pub fn rollback(conn: &Conn, name: &str, json: bool) -> anyhow::Result<()> {
    let v = post(conn, "apps/rollback", json!({"name": name}))?;
    if json {
        print(&v);
        return Ok(());
    }
    let r = &v["rolledBack"];
    println!(
        "rolled back {name}: {} -> {} ({})",
        r["from"].as_str().unwrap_or("?"),
        r["to"].as_str().unwrap_or("?"),
        signature_line(&v["app"]["wasm"]["origin"]["signature"])
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::keys::with_suffix;
    use crate::cli::plan::plan_lines;
    use std::path::Path;

    #[test]
    fn a_plan_marks_each_difference() {
        let p = json!({"source": "oci://127.0.0.1:5000/apps/planning:0.1.0",
            "digest": "sha256:abc", "sha256": "def", "size": 126420,
            "signature": {"status": "signed", "key": "alice", "detail": "x"},
            "manifest": {"name": "planning", "description": "Plans work", "version": "0.2.0"},
            "asked": {"write": ["work.planning.*"], "ddl": true, "maintain": false,
                      "allow_hosts": [], "limits": {"memory_mb": 128}},
            "granted": {"write": [], "ddl": false, "maintain": false, "allow_hosts": [],
                        "limits": {"memory_mb": 128}},
            "differences": [{"right": "write", "asked": ["work.planning.*"], "granted": [],
                             "change": "not granted"},
                            {"right": "ddl", "asked": true, "granted": false, "change": "less"}],
            "tools": [{"name": "planning_add", "description": "Adds a plan"}],
            "confirm": {}});
        let l = plan_lines(&p);
        let text = l.join("\n");
        assert!(text.contains("signature  signed by alice"), "{text}");
        assert!(
            text.contains("app        planning 0.2.0: Plans work"),
            "{text}"
        );
        let row = |r: &str| {
            l.iter()
                .find(|x| x.trim_start().starts_with(r))
                .unwrap()
                .clone()
        };
        assert!(row("write").ends_with("<- not granted"), "{text}");
        assert!(row("write").contains("work.planning.* | none"), "{text}");
        assert!(row("ddl").ends_with("<- less"), "{text}");
        assert!(row("maintain").ends_with("no"), "{text}");
        assert!(row("limits.memory_mb").ends_with("128"), "{text}");
        assert!(text.ends_with("planning_add: Adds a plan"), "{text}");
    }

    #[test]
    fn a_source_is_a_reference_or_a_file() {
        for r in [
            "oci://h:5000/a:b",
            "https://x/a.wasm",
            "HTTP://127.0.0.1/a.wasm",
        ] {
            assert!(is_reference(r), "{r}");
        }
        for f in ["a.wasm", "/tmp/oci:/x.wasm", "oci:/x"] {
            assert!(!is_reference(f), "{f}");
        }
        assert_eq!(
            with_suffix(Path::new("keys/alice"), ".key"),
            PathBuf::from("keys/alice.key")
        );
    }
}
