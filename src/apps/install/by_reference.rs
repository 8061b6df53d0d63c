//! WASM apps by reference: `apps/create` with a `source` (a plan, then a confirm),
//! `apps/upgrade` and `apps/rollback`. The fetching and checking is `apps::source`'s; this file
//! holds the two-step shape, the plan the owner reads, the swap of versions in the registry and
//! the `app` events in the feed.
//!
//! A plan fetches, verifies, compiles and lists the tools, and enables nothing: the component
//! is stored content-addressed in `.datanotes/apps/` (the cache a confirm finds again), and no
//! entry is made. A confirm holds to the plan's digest: a tag that moved is refused.
//!
//! An upgrade answers a plan again when the new version asks for more or changes signer. Each step
//! is recorded as an `app` event with its digests. An upgrade or a rollback swaps the entry's
//! version in one atomic registry write, the component stored and compiled first: after a crash
//! exactly one version is active.

use super::Installer;
use crate::apps::source::manifest::AppRights;
use crate::apps::source::{self, Artifact, Expect, Previous, Source};
use crate::apps::wasm::{Limits, WasmInfo};
use crate::apps::{self, AppFields, AppRecord};
use crate::auth::AppScope;
use crate::engine::Actor;
use crate::engine::journal::Op;
use crate::engine::{Cmd, EventCall};
use crate::error::{Error, parse};
use serde_json::{Value, json};

/// The largest component installed by reference (as from a file).
const MAX_COMPONENT: u64 = crate::apps::wasm::MAX_COMPONENT_BYTES;

/// The arguments of `apps/upgrade`.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct UpgradeArgs {
    name: String,
    #[serde(default)]
    source: Option<String>,
    #[serde(default)]
    sha256: Option<String>,
    #[serde(default)]
    digest: Option<String>,
    #[serde(default)]
    confirm: Option<bool>,
    /// The rights granted with the new version (each absent one stays as it is).
    #[serde(default)]
    write: Option<Vec<String>>,
    #[serde(default)]
    ddl: Option<bool>,
    #[serde(default)]
    maintain: Option<bool>,
    #[serde(default)]
    allow_hosts: Option<Value>,
    #[serde(default)]
    limits: Option<Value>,
}

impl UpgradeArgs {
    /// The rights the app has with the new version: those it has, with those the call gives
    /// (checked as an update checks them).
    fn grants(&self, rec: &AppRecord, cur: &WasmInfo) -> Result<(AppRights, Limits), Error> {
        apps::check(&AppFields {
            write: self.write.clone(),
            allow_hosts: self.allow_hosts.clone(),
            ..Default::default()
        })?;
        let limits = match &self.limits {
            Some(l) => cur.limits.merged(l)?,
            None => cur.limits.clone(),
        };
        let allow_hosts = match &self.allow_hosts {
            Some(h) => crate::apps::wasm::net::allow_hosts(h)?,
            None => cur.allow_hosts.clone(),
        };
        let fields = AppFields {
            write: self.write.clone(),
            ddl: self.ddl,
            maintain: self.maintain,
            ..Default::default()
        };
        let rights = AppRights {
            rights: fields.rights_over(&rec.rights),
            allow_hosts,
            limits: serde_json::to_value(&limits)
                .ok()
                .and_then(|v| v.as_object().cloned())
                .unwrap_or_default(),
        };
        Ok((rights, limits))
    }

    /// The grant fields the call gave, for the plan's confirm body.
    fn given(&self) -> serde_json::Map<String, Value> {
        let mut m = serde_json::Map::new();
        for (k, v) in [
            ("write", self.write.as_ref().map(|w| json!(w))),
            ("ddl", self.ddl.map(Value::from)),
            ("maintain", self.maintain.map(Value::from)),
            ("allow_hosts", self.allow_hosts.clone()),
            ("limits", self.limits.clone()),
        ] {
            if let Some(v) = v {
                m.insert(k.into(), v);
            }
        }
        m
    }
}

/// A component already stored under `.datanotes/apps/`, if its bytes still have its digest.
fn cached(s: &Installer<'_>) -> impl Fn(&str) -> Option<Vec<u8>> + use<> {
    let dir = s.agg.wasm.apps_dir.clone();
    move |sha: &str| {
        use sha2::Digest;
        let b = source::oci::read_small(&dir.join(format!("{sha}.wasm")), MAX_COMPONENT).ok()?;
        (hex::encode(sha2::Sha256::digest(&b)) == sha).then_some(b)
    }
}

/// Fetches a source under the owner's settings (trusted keys, required signatures).
async fn fetch(s: &Installer<'_>, src: &Source, digest: Option<&str>) -> Result<Artifact, Error> {
    let settings = s.engine.settings();
    let expect = Expect {
        digest,
        trusted: &settings.trusted_keys,
        require_signature: settings.require_signature,
        max_bytes: MAX_COMPONENT,
    };
    source::fetch(src, &expect, s.sources, cached(s)).await
}

/// Stores, compiles and lists a fetched component under `scope` and `limits`: the plan's
/// check, and what a confirm installs. Nothing is enabled.
async fn check(
    s: &Installer<'_>,
    a: &Artifact,
    scope: AppScope,
    limits: Limits,
) -> Result<(WasmInfo, Value), Error> {
    let refuse = |rule: &str, why: String| {
        Error::invalid(format!("{} cannot be installed: {why}", a.source.text()))
            .column("source")
            .rule(rule)
            .hint("build a component for the world in wit/datanotes-app.wit (docs/apps.md); nothing was installed")
    };
    if let Some(why) = crate::apps::wasm::not_a_component(&a.bytes) {
        return Err(refuse("component", why));
    }
    if let Some(why) = crate::apps::wasm::check_before_compile(&a.bytes) {
        return Err(refuse("world", why));
    }
    let (info, listing) = s.agg.wasm.install(a.bytes.clone(), scope, limits).await?;
    let tools: Vec<Value> = listing
        .tools
        .iter()
        .map(|t| json!({"name": t.name, "description": t.description}))
        .collect();
    Ok((info, Value::Array(tools)))
}

/// The plan an owner reads: what the artifact is, who signed it, what it asks, what the call
/// grants and where they differ, its tools, and the body that confirms it.
fn plan(a: &Artifact, info: &WasmInfo, granted: &AppRights, tools: Value, confirm: Value) -> Value {
    let asked = a.asked();
    json!({
        "source": a.source.text(),
        "digest": a.digest,
        "sha256": info.sha256,
        "size": info.size,
        "signature": a.signature,
        "manifest": a.manifest.as_ref().map(|m| json!({
            "name": m.name, "description": m.description, "version": m.version,
        })),
        "asked": asked,
        "granted": rights_json(granted),
        "differences": AppRights::differences(&asked, granted),
        "tools": tools,
        "confirm": confirm,
    })
}

/// Rights granted as the plan shows them: limits complete (the defaults filled in). The
/// rights asked are shown as the app asks them (only the limits it names).
fn rights_json(r: &AppRights) -> Value {
    let limits = Limits::default()
        .merged(&Value::Object(r.limits.clone()))
        .unwrap_or_default();
    json!({
        "write": r.rights.write, "ddl": r.rights.ddl, "maintain": r.rights.maintain,
        "allow_hosts": r.allow_hosts, "limits": limits,
    })
}

/// Records an install, an upgrade or a rollback in the journal and the feed (an `app` event).
fn record(
    s: &Installer<'_>,
    actor: Actor,
    action: &str,
    app: &str,
    to: &WasmInfo,
    from: Option<&str>,
) {
    let o = to.origin.as_ref();
    let event = json!({
        "action": action,
        "app": app,
        "source": o.map(|o| &o.source),
        "digest": o.map(|o| &o.digest),
        "sha256": to.sha256,
        "version": o.and_then(|o| o.version.as_ref()),
        "from": from,
        "signature": o.map(|o| o.signature.line()),
    });
    s.engine.write_nowait(
        Cmd::Event {
            op: Op::App,
            call: EventCall::later(move || {
                serde_json::value::to_raw_value(&event).map_err(|e| Error::internal(e.to_string()))
            }),
        },
        actor,
    );
}

/// The digest an installed version is known by: its origin's, else its component's.
fn digest_of(w: &WasmInfo) -> String {
    w.origin
        .as_ref()
        .map(|o| o.digest.clone())
        .unwrap_or_else(|| format!("sha256:{}", w.sha256))
}

/// `apps/create` with a `source`: a plan, or (with `confirm: true`) the install.
pub(super) async fn create(s: &Installer<'_>, actor: Actor, f: AppFields) -> Result<Value, Error> {
    apps::check(&f)?;
    if f.wasm_path.is_some() || f.wasm_base64.is_some() || f.mcp_url.is_some() {
        return Err(Error::invalid(
            "give the component one way: source, wasm_path or wasm_base64 (and no mcp_url)",
        )
        .column("source")
        .hint("drop the other fields"));
    }
    let text = f.source.clone().unwrap_or_default();
    let src = Source::parse(&text, f.sha256.as_deref())?;
    let a = fetch(s, &src, f.digest.as_deref()).await?;
    let name = f
        .name
        .clone()
        .or_else(|| a.manifest.as_ref().and_then(|m| m.name.clone()))
        .ok_or_else(|| {
            Error::invalid("the app needs a name: the call gives none and its manifest neither")
                .column("name")
                .rule("required")
                .hint("add \"name\": \"planning\"")
        })?;
    if s.apps.get(&name).is_some() {
        return Err(Error::conflict(format!("app {name} already exists"))
            .column("name")
            .rule("unique")
            .hint("pick another name, or upgrade it with apps/upgrade"));
    }
    let granted = AppRights::granted(&f);
    let limits = Limits::default().merged(&Value::Object(granted.limits.clone()))?;
    let scope = AppScope {
        name: name.clone(),
        rights: granted.rights.clone(),
        call_tools: f.call_tools.clone().unwrap_or_else(|| vec!["*".into()]),
        read: None,
    };
    let (mut info, tools) = check(s, &a, scope, limits).await?;
    let mut confirm = json!({
        "source": text, "name": name, "digest": a.digest,
        "write": granted.rights.write, "ddl": granted.rights.ddl, "maintain": granted.rights.maintain,
        "allow_hosts": granted.allow_hosts, "confirm": true,
    });
    if !granted.limits.is_empty() {
        confirm["limits"] = Value::Object(granted.limits.clone());
    }
    if let Some(h) = &f.sha256 {
        confirm["sha256"] = h.clone().into();
    }
    if let Some(c) = &f.call_tools {
        confirm["call_tools"] = json!(c);
    }
    let plan = plan(&a, &info, &granted, tools, confirm);
    if f.confirm != Some(true) {
        return Ok(json!({ "plan": plan }));
    }
    info.origin = Some(a.origin());
    let description = f
        .description
        .clone()
        .or_else(|| a.manifest.as_ref().and_then(|m| m.description.clone()));
    let fields = AppFields {
        name: Some(name),
        description,
        ..f
    };
    let (rec, token) = s.apps.create(fields, Some(info))?;
    if let Some(w) = &rec.wasm {
        record(s, actor, "install", &rec.name, w, None);
    }
    s.agg.sync();
    let _ = s.agg.refresh(&rec.name).await;
    Ok(json!({"app": s.agg.entry(&rec), "token": token, "plan": plan}))
}

/// The WASM app `name`, or a clear refusal.
fn wasm_app(s: &Installer<'_>, name: &str) -> Result<(AppRecord, WasmInfo), Error> {
    let rec = s.apps.get(name).ok_or_else(|| apps::no_app(name))?;
    let w = rec.wasm.clone().ok_or_else(|| {
        Error::invalid(format!("app {name} is not a WASM app"))
            .column("name")
            .hint("upgrades and rollbacks apply to WASM apps")
    })?;
    Ok((rec, w))
}

/// `apps/upgrade`: the app's source pulled again (or a new one), with the rights it has or
/// those the call grants (`write`, `ddl`, `maintain`, `allow_hosts`, `limits`). A version
/// asking for more than the current one asked, or not signed by the trusted key that signed the
/// current one, answers a plan unless confirmed (its `signer_change` says what changes). A component
/// that does not compile changes nothing. The version replaced is kept for a rollback.
pub(super) async fn upgrade(s: &Installer<'_>, actor: Actor, v: Value) -> Result<Value, Error> {
    let u: UpgradeArgs = parse("apps/upgrade", v)?;
    let (rec, cur) = wasm_app(s, &u.name)?;
    let text = match (&u.source, &cur.origin) {
        (Some(t), _) => t.clone(),
        (None, Some(o)) => o.source.clone(),
        (None, None) => {
            return Err(Error::invalid(format!(
                "app {} was installed from a file: there is nothing to pull again",
                u.name
            ))
            .column("source")
            .hint("give the new version's source (oci://... or https://... with sha256)"));
        }
    };
    let sha = match (&u.sha256, &u.source, &cur.origin) {
        (Some(h), _, _) => Some(h.clone()),
        (None, None, Some(o)) if !text.starts_with("oci://") => {
            o.digest.strip_prefix("sha256:").map(str::to_string)
        }
        _ => None,
    };
    let src = Source::parse(&text, sha.as_deref())?;
    let a = fetch(s, &src, u.digest.as_deref()).await?;
    let from = digest_of(&cur);
    if a.digest == from && a.sha256 == cur.sha256 {
        return Ok(json!({"app": s.agg.entry(&rec), "upgraded": Value::Null}));
    }
    let (granted, limits) = u.grants(&rec, &cur)?;
    let scope = AppScope {
        rights: granted.rights.clone(),
        ..rec.scope()
    };
    let (mut info, tools) = check(s, &a, scope, limits.clone()).await?;
    let had = cur
        .origin
        .as_ref()
        .map(|o| o.asked.clone())
        .unwrap_or_default();
    // Losing the installed version's signer, or changing it, is the owner's call as a wider
    // right is: a plan first.
    let signer = cur
        .origin
        .as_ref()
        .and_then(|o| o.signature.signer_change(&a.signature));
    if (a.asked().exceeds(&had) || signer.is_some()) && u.confirm != Some(true) {
        let mut confirm =
            json!({"name": u.name, "source": text, "digest": a.digest, "confirm": true});
        if let Some(h) = &u.sha256 {
            confirm["sha256"] = h.clone().into();
        }
        for (k, v) in u.given() {
            confirm[k] = v;
        }
        let mut plan = plan(&a, &info, &granted, tools, confirm);
        if let Some(change) = signer {
            plan["signer_change"] = change.into();
        }
        return Ok(json!({ "plan": plan }));
    }
    info.origin = Some(a.origin());
    info.limits = limits;
    info.allow_hosts = granted.allow_hosts.clone();
    info.previous = Some(Box::new(kept(&cur)));
    swap(
        s,
        actor,
        Swap::Upgrade,
        &u.name,
        &cur,
        info,
        Some(granted.rights),
    )
    .await
}

/// What the registry keeps of the version a swap replaces.
fn kept(cur: &WasmInfo) -> Previous {
    Previous {
        sha256: cur.sha256.clone(),
        size: cur.size,
        origin: cur.origin.clone(),
    }
}

/// An upgrade or a rollback: what the event and the answer call it.
#[derive(Clone, Copy)]
enum Swap {
    Upgrade,
    Rollback,
}

/// Puts version `to` in place of `cur` (with the rights `grant` gives, in the same atomic
/// registry write), records it, lets the new
/// backend take over (calls in flight finish on the old one) and answers the entry with the
/// digests from and to.
async fn swap(
    s: &Installer<'_>,
    actor: Actor,
    kind: Swap,
    name: &str,
    cur: &WasmInfo,
    to: WasmInfo,
    grant: Option<apps::Rights>,
) -> Result<Value, Error> {
    let from = digest_of(cur);
    let (before, after) = s.apps.swap_component(name, &cur.sha256, to, grant)?;
    forget_dropped(s, &before);
    let (action, key) = match kind {
        Swap::Upgrade => ("upgrade", "upgraded"),
        Swap::Rollback => ("rollback", "rolledBack"),
    };
    let to = after.wasm.as_ref().map(digest_of);
    if let Some(w) = &after.wasm {
        record(s, actor, action, &after.name, w, Some(&from));
    }
    if s.agg.sync().contains(&after.name) {
        let _ = s.agg.refresh(&after.name).await;
    }
    let mut out = json!({"app": s.agg.entry(&after)});
    out[key] = json!({"from": from, "to": to});
    Ok(out)
}

/// `apps/rollback`: back to the version kept, at once (its component is stored and compiled);
/// the version left is kept in its turn.
pub(super) async fn rollback(s: &Installer<'_>, actor: Actor, v: Value) -> Result<Value, Error> {
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Args {
        name: String,
    }
    let args: Args = parse("apps/rollback", v)?;
    let (_, cur) = wasm_app(s, &args.name)?;
    let Some(prev) = cur.previous.clone() else {
        return Err(Error::invalid(format!(
            "app {} has no earlier version to go back to",
            args.name
        ))
        .column("name")
        .hint("a version is kept when apps/upgrade replaces it"));
    };
    if !s
        .agg
        .wasm
        .apps_dir
        .join(format!("{}.wasm", prev.sha256))
        .is_file()
    {
        return Err(Error::invalid(format!(
            "app {}'s earlier version (sha256 {}) is no longer stored",
            args.name, prev.sha256
        ))
        .column("name")
        .hint("upgrade to it again by its source instead"));
    }
    let to = WasmInfo {
        sha256: prev.sha256.clone(),
        size: prev.size,
        limits: cur.limits.clone(),
        allow_hosts: cur.allow_hosts.clone(),
        origin: prev.origin.clone(),
        previous: Some(Box::new(kept(&cur))),
    };
    swap(s, actor, Swap::Rollback, &args.name, &cur, to, None).await
}

/// After a swap: the version no longer kept (an upgrade's, two versions back) is dropped, and
/// its component file too when no app uses it.
fn forget_dropped(s: &Installer<'_>, before: &AppRecord) {
    if let Some(p) = before.wasm.as_ref().and_then(|w| w.previous.as_ref()) {
        s.forget_file(&p.sha256);
    }
}
