//! `datanotes apps install | upgrade | rollback | keygen | sign | trust`: installing a WASM app
//! from a file or by reference (an OCI registry or a URL: the plan first, then `--yes`), and the
//! keys that sign apps (made, used and trusted here; `sign` needs no server).

use super::{AppArgs, Conn, EntryArgs, post, print};
use crate::apps::source::oci;
use crate::apps::source::signature::{self, TrustedKey};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

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

/// `datanotes apps sign REF --key FILE`.
#[derive(clap::Args)]
pub struct SignArgs {
    /// The app in its registry: [oci://]REGISTRY/REPO:TAG or [oci://]REGISTRY/REPO@sha256:HEX.
    #[arg(value_name = "REF")]
    pub reference: String,
    /// The private key (PREFIX.key from `datanotes apps keygen`, or a cosign.key with
    /// COSIGN_PASSWORD set).
    #[arg(long)]
    pub key: PathBuf,
    /// The registry's credentials: a Docker config.json.
    #[arg(long, env = "DATANOTES_REGISTRY_AUTH")]
    pub registry_auth: Option<PathBuf>,
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

/// Shows a plan (the answer `v` as JSON with `--json`): without `--yes` it stops there, saying
/// `stop`; with it, answers the plan's confirm body.
fn shown(
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
fn signature_line(s: &Value) -> String {
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
fn origin_line(o: &Value) -> String {
    format!(
        "{}, {}",
        o["digest"].as_str().unwrap_or("?"),
        signature_line(&o["signature"])
    )
}

/// A right's value in a cell: a list joined, yes/no, `-` for nothing.
fn cell(v: &Value) -> String {
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
fn plan_lines(p: &Value) -> Vec<String> {
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
    let mut w = [0usize; 3];
    for r in std::iter::once(&head).chain(&cells) {
        for (w, c) in w.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    out.push("  rights:".into());
    for r in std::iter::once(&head).chain(&cells) {
        let line = format!(
            "    {:<w0$}  {:<w1$} | {:<w2$}  {}",
            r[0],
            r[1],
            r[2],
            r[3],
            w0 = w[0],
            w1 = w[1],
            w2 = w[2]
        );
        out.push(line.trim_end().to_string());
    }
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

/// PREFIX with a suffix appended (`keys/alice` → `keys/alice.key`).
fn with_suffix(prefix: &Path, suffix: &str) -> PathBuf {
    let mut s = prefix.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

/// `datanotes apps keygen PREFIX`: PREFIX.key (0600) and PREFIX.pub, never over existing files.
pub fn keygen(prefix: &Path) -> anyhow::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let (key, public) = (with_suffix(prefix, ".key"), with_suffix(prefix, ".pub"));
    for p in [&key, &public] {
        if p.exists() {
            anyhow::bail!(
                "{} already exists: it is not overwritten; give another PREFIX",
                p.display()
            );
        }
    }
    let (private_pem, public_pem) = signature::keygen()?;
    let write = |p: &Path, text: &str, mode: u32| -> anyhow::Result<()> {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(p)
            .map_err(|e| anyhow::anyhow!("cannot write {}: {}", p.display(), plain_io(&e)))?;
        f.write_all(text.as_bytes())
            .map_err(|e| anyhow::anyhow!("cannot write {}: {}", p.display(), plain_io(&e)))
    };
    write(&key, &private_pem, 0o600)?;
    write(&public, &public_pem, 0o644)?;
    let encrypted = private_pem.contains("ENCRYPTED");
    println!(
        "wrote {} (the private key{}: keep it secret) and {} (the public key, fingerprint {})",
        key.display(),
        if encrypted {
            ", encrypted with COSIGN_PASSWORD"
        } else {
            ""
        },
        public.display(),
        signature::fingerprint(&public_pem)
    );
    println!(
        "sign an app:   datanotes apps sign oci://REGISTRY/REPO:TAG --key {}",
        key.display()
    );
    println!(
        "trust the key: datanotes apps trust NAME --key {} --database DIR",
        public.display()
    );
    Ok(())
}

/// An I/O error in plain words (no "os error N").
fn plain_io(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::NotFound => "no such file or folder".into(),
        std::io::ErrorKind::PermissionDenied => "permission denied".into(),
        std::io::ErrorKind::AlreadyExists => "it already exists".into(),
        _ => {
            let s = e.to_string();
            s.split(" (os error").next().unwrap_or(&s).to_string()
        }
    }
}

/// An engine error as the CLI says it: the message, then the hint.
fn said(e: crate::error::Error) -> anyhow::Error {
    match &e.hint {
        Some(h) => anyhow::anyhow!("{}\nhint: {h}", e.message),
        None => anyhow::anyhow!("{}", e.message),
    }
}

/// A small text file the user points to (a key).
fn read_key(p: &Path) -> anyhow::Result<String> {
    let b = oci::read_small(p, 64 * 1024)
        .map_err(|e| anyhow::anyhow!("cannot read the key {}: {}", p.display(), plain_io(&e)))?;
    String::from_utf8(b).map_err(|_| anyhow::anyhow!("{} is not a PEM key file", p.display()))
}

/// `datanotes apps sign REF --key FILE`: signs in this process and pushes the `.sig` tag.
pub fn sign(a: SignArgs) -> anyhow::Result<()> {
    let r = a.reference.strip_prefix("oci://").unwrap_or(&a.reference);
    let image = oci::parse_reference(r).map_err(said)?;
    let key = read_key(&a.key)?;
    let auth = oci::auth_for(image.registry(), a.registry_auth.as_deref()).map_err(said)?;
    let client = oci::client_for(image.registry());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let (digest, tag) = rt.block_on(signature::sign(&client, &auth, &image, &key))?;
    println!("signed {} ({digest})", image.whole());
    println!(
        "pushed the signature to {}/{}:{tag}",
        image.registry(),
        image.repository()
    );
    Ok(())
}

/// `datanotes apps trust NAME --key FILE.pub`: adds the key to the server's `trusted_keys`.
pub fn trust(conn: &Conn, name: String, key: &Path) -> anyhow::Result<()> {
    let public_key = read_key(key)?;
    if public_key.contains("PRIVATE KEY-----") {
        anyhow::bail!(
            "{} is a private key: give the public one (PREFIX.pub), and keep this one secret",
            key.display()
        );
    }
    let k = TrustedKey { name, public_key };
    k.check().map_err(said)?;
    let settings = post(conn, "get_engine_settings", json!({}))?["settings"].clone();
    let Some(keys) = settings.get("trusted_keys").and_then(Value::as_array) else {
        anyhow::bail!(
            "this server has no trusted_keys setting: it predates signed apps; upgrade it"
        );
    };
    let mut keys = keys.clone();
    let fp = crate::apps::source::signature::fingerprint(&k.public_key);
    for x in &keys {
        let same = x["public_key"]
            .as_str()
            .is_some_and(|p| signature::fingerprint(p) == fp);
        match (x["name"] == k.name.as_str(), same) {
            (true, true) => {
                println!("{} is already trusted (key {fp})", k.name);
                return Ok(());
            }
            (true, false) => anyhow::bail!(
                "another key is already trusted as {}: choose another name (or remove it from trusted_keys with set_engine_settings)",
                k.name
            ),
            (false, true) => anyhow::bail!(
                "this key is already trusted as {}",
                x["name"].as_str().unwrap_or("?")
            ),
            _ => {}
        }
    }
    keys.push(serde_json::to_value(&k)?);
    post(
        conn,
        "set_engine_settings",
        json!({"settings": {"trusted_keys": keys}}),
    )?;
    println!(
        "trusted {} (key {fp}): apps signed with its private key show \"signed by {}\"",
        k.name, k.name
    );
    if settings["require_signature"] != true {
        println!(
            "signatures are not required: to refuse apps not signed by a trusted key, set \
             require_signature (set_engine_settings {{\"settings\": {{\"require_signature\": true}}}})"
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

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
