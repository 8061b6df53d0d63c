//! Webhooks: the owner registers a URL; the engine POSTs batches of matching changes to it, in
//! order, at least once, signed with HMAC-SHA256, retrying with exponential backoff. Each
//! webhook's cursor is persisted after every successful delivery, so a restart resumes there.
//!
//! Signature: `X-Datanotes-Signature: sha256=<hex>` where hex is HMAC-SHA256 with the webhook's
//! secret over `<X-Datanotes-Timestamp>.<raw body>`.

use super::{Filter, read};
use crate::auth;
use crate::engine::Engine;
use crate::error::{Error, Result};
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sha2::Sha256;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Hook {
    id: String,
    url: String,
    ops: Option<Vec<String>>,
    tables: Option<Vec<String>>,
    secret: String,
    created: String,
    cursor: i64,
    last_success: Option<String>,
    last_error: Option<String>,
    consecutive_failures: u32,
}

/// A webhook URL as a non-owner sees it: without user, password, query and fragment (where
/// the secrets of a URL live), e.g. `https://host/path`.
pub fn redact_url(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(mut u) => {
            let _ = u.set_username("");
            let _ = u.set_password(None);
            u.set_query(None);
            u.set_fragment(None);
            u.to_string()
        }
        Err(_) => "(hidden)".into(),
    }
}

impl Hook {
    /// The webhook as listed: whole for the owner; for anyone else (an app's token) its URL
    /// redacted, here and in its last error.
    fn public(&self, whole: bool) -> Value {
        let (url, last_error) = if whole {
            (self.url.clone(), self.last_error.clone())
        } else {
            let url = redact_url(&self.url);
            let mut forms = vec![self.url.clone()];
            if let Ok(u) = reqwest::Url::parse(&self.url) {
                forms.push(u.to_string());
            }
            let last_error = self.last_error.as_ref().map(|e| {
                forms
                    .iter()
                    .fold(e.clone(), |e, form| e.replace(form.as_str(), &url))
            });
            (url, last_error)
        };
        json!({
            "id": self.id, "url": url, "ops": self.ops, "tables": self.tables, "created": self.created,
            "cursor": self.cursor, "last_success": self.last_success, "last_error": last_error,
            "consecutive_failures": self.consecutive_failures,
        })
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateArgs {
    pub url: String,
    #[serde(default)]
    pub ops: Option<Vec<String>>,
    #[serde(default)]
    pub tables: Option<Vec<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IdArg {
    pub id: String,
}

pub struct Webhooks {
    path: PathBuf,
    engine: Arc<Engine>,
    hooks: Mutex<Vec<Hook>>,
    tasks: Mutex<HashMap<String, tokio::task::AbortHandle>>,
    http: reqwest::Client,
    backoff_min: Duration,
    backoff_max: Duration,
}

/// Signs a delivery body.
pub fn sign(secret: &str, timestamp: &str, body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("any key length");
    mac.update(timestamp.as_bytes());
    mac.update(b".");
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

impl Webhooks {
    /// Loads the webhooks and starts their deliveries (call inside the tokio runtime).
    pub fn start(engine: Arc<Engine>) -> anyhow::Result<Arc<Webhooks>> {
        let path = engine.meta_dir.join("webhooks.json");
        let hooks: Vec<Hook> = match std::fs::read(&path) {
            Ok(b) => serde_json::from_slice(&b)?,
            Err(_) => vec![],
        };
        let w = Arc::new(Webhooks {
            path,
            engine,
            hooks: Mutex::new(hooks),
            tasks: Mutex::new(HashMap::new()),
            // The outbound client (no system proxy); any address, redirects followed, as before.
            http: crate::outbound::builder(crate::outbound::Policy::Any)
                .redirect(crate::outbound::redirects(crate::outbound::Policy::Any, 10))
                .timeout(Duration::from_secs(15))
                .build()?,
            backoff_min: crate::knobs::ms("DATANOTES_WEBHOOK_BACKOFF_MS", 500),
            backoff_max: crate::knobs::ms("DATANOTES_WEBHOOK_BACKOFF_MAX_MS", 60_000),
        });
        let ids: Vec<String> = w
            .hooks
            .lock()
            .unwrap()
            .iter()
            .map(|h| h.id.clone())
            .collect();
        for id in ids {
            w.spawn(id);
        }
        Ok(w)
    }

    fn save(&self, hooks: &[Hook]) -> Result<()> {
        let bytes = serde_json::to_vec_pretty(hooks).map_err(|e| Error::internal(e.to_string()))?;
        auth::write_private(&self.path, &bytes)?;
        Ok(())
    }

    fn spawn(self: &Arc<Self>, id: String) {
        let me = self.clone();
        let h = tokio::spawn(me.deliver(id.clone()));
        self.tasks.lock().unwrap().insert(id, h.abort_handle());
    }

    pub fn create(self: &Arc<Self>, a: CreateArgs) -> Result<Value> {
        let ok_url = a.url.starts_with("http://") || a.url.starts_with("https://");
        if !ok_url || reqwest::Url::parse(&a.url).is_err() {
            return Err(Error::invalid(format!("invalid webhook url {:?}", a.url))
                .column("url")
                .rule("url")
                .hint("give an http(s) URL, e.g. http://127.0.0.1:8080/hook"));
        }
        Filter::new(a.ops.clone(), a.tables.clone())?;
        let hook = Hook {
            id: format!("wh_{}", hex::encode(rand::random::<[u8; 6]>())),
            url: a.url,
            ops: a.ops,
            tables: a.tables,
            secret: format!("whsec_{}", hex::encode(rand::random::<[u8; 32]>())),
            created: crate::engine::journal::now(),
            cursor: self.engine.last_seq(),
            last_success: None,
            last_error: None,
            consecutive_failures: 0,
        };
        {
            let mut hooks = self.hooks.lock().unwrap();
            let mut next = hooks.clone();
            next.push(hook.clone());
            self.save(&next)?;
            *hooks = next;
        }
        self.spawn(hook.id.clone());
        Ok(json!({"webhook": hook.public(true), "secret": hook.secret}))
    }

    /// The webhooks, for `caller`: the owner sees their URLs whole, an app redacted.
    /// How many webhook subscriptions there are.
    pub fn count(&self) -> usize {
        self.hooks.lock().unwrap().len()
    }

    pub fn list(&self, caller: &auth::Caller) -> Value {
        let whole = matches!(caller, auth::Caller::Owner);
        let hooks = self.hooks.lock().unwrap();
        json!({"webhooks": hooks.iter().map(|h| h.public(whole)).collect::<Vec<_>>()})
    }

    pub fn delete(&self, a: IdArg) -> Result<Value> {
        {
            let mut hooks = self.hooks.lock().unwrap();
            let mut next = hooks.clone();
            let before = next.len();
            next.retain(|h| h.id != a.id);
            if next.len() == before {
                return Err(Error::not_found(format!("no webhook {}", a.id))
                    .column("id")
                    .hint("webhooks/ lists them"));
            }
            self.save(&next)?;
            *hooks = next;
        }
        if let Some(t) = self.tasks.lock().unwrap().remove(&a.id) {
            t.abort();
        }
        Ok(json!({"deleted": a.id}))
    }

    fn update(&self, id: &str, f: impl FnOnce(&mut Hook)) {
        let mut hooks = self.hooks.lock().unwrap();
        if let Some(h) = hooks.iter_mut().find(|h| h.id == id) {
            f(h);
        }
        let snapshot = hooks.clone();
        if let Err(e) = self.save(&snapshot) {
            tracing::error!(webhook = id, "saving webhook state failed: {e}");
        }
    }

    /// One webhook's delivery loop: in order, at least once.
    async fn deliver(self: Arc<Self>, id: String) {
        let mut rx = self.engine.seq.subscribe();
        let mut backoff = self.backoff_min;
        loop {
            let Some(hook) = self
                .hooks
                .lock()
                .unwrap()
                .iter()
                .find(|h| h.id == id)
                .cloned()
            else {
                return;
            };
            let filter = Filter::saved(hook.ops.as_deref(), hook.tables.clone());
            rx.borrow_and_update();
            let engine = self.engine.clone();
            let cursor = hook.cursor;
            let page =
                tokio::task::spawn_blocking(move || read(&engine, cursor, 100, &filter)).await;
            let page = match page {
                Ok(Ok(p)) => p,
                Ok(Err(e)) => {
                    // The cursor was vacuumed away: say so and go on from where the feed starts.
                    tracing::warn!(webhook = %id, "webhook cursor: {e}");
                    let start = self
                        .engine
                        .with_journal(|c| crate::engine::journal::meta_i64(c, "vacuumed_before"))
                        .unwrap_or(0);
                    self.update(&id, |h| {
                        h.last_error = Some(e.message.clone());
                        h.cursor = h.cursor.max(start - 1);
                    });
                    continue;
                }
                Err(_) => return,
            };
            if page.changes.is_empty() {
                if page.next != cursor
                    && let Some(h) = self.hooks.lock().unwrap().iter_mut().find(|h| h.id == id)
                {
                    h.cursor = page.next;
                }
                if rx.changed().await.is_err() {
                    return;
                }
                continue;
            }
            let first = page.changes[0].seq;
            let body = format!(
                "{{\"webhook\":{},\"changes\":{}}}",
                serde_json::to_string(&id).unwrap_or_default(),
                {
                    // Webhooks are the owner's: every change as it is.
                    let p = page.to_json(&crate::auth::Caller::Owner);
                    // `{"changes":[...],"next":N}` → `[...]`
                    let start = p.find('[').unwrap_or(0);
                    let end = p.rfind("],\"next\"").map(|i| i + 1).unwrap_or(p.len());
                    p[start..end].to_string()
                }
            );
            let ts = chrono::Utc::now().timestamp().to_string();
            let delivery = format!(
                "{id}-{first}-{}",
                page.changes.last().map(|c| c.seq).unwrap_or(first)
            );
            // A CLIENT span per delivery (export on), its context sent as `traceparent`.
            let span = crate::telemetry::trace::start_span(
                None,
                "webhook delivery",
                opentelemetry::trace::SpanKind::Client,
                vec![
                    opentelemetry::KeyValue::new("datanotes.webhook.id", id.clone()),
                    opentelemetry::KeyValue::new("datanotes.webhook.delivery", delivery.clone()),
                    opentelemetry::KeyValue::new("http.request.method", "POST"),
                ],
            );
            let mut req = self.http.post(&hook.url);
            for (k, v) in span
                .as_ref()
                .map(|s| crate::telemetry::trace::inject(s.context()))
                .unwrap_or_default()
            {
                req = req.header(k, v);
            }
            let resp = req
                .header("content-type", "application/json")
                .header("x-datanotes-webhook", &id)
                .header("x-datanotes-delivery", &delivery)
                .header("x-datanotes-timestamp", &ts)
                .header(
                    "x-datanotes-signature",
                    sign(&hook.secret, &ts, body.as_bytes()),
                )
                .body(body)
                .send()
                .await;
            let err = match resp {
                Ok(r) if r.status().is_success() => None,
                Ok(r) => Some(format!("HTTP {}", r.status())),
                // Without the URL: the owner knows it, and it may hold a secret.
                Err(e) => Some(format!("request failed: {}", e.without_url())),
            };
            if let Some(span) = span {
                span.end(err.as_ref().map(|_| "delivery_failed"));
            }
            match err {
                None => {
                    backoff = self.backoff_min;
                    let now = crate::engine::journal::now();
                    self.update(&id, |h| {
                        h.cursor = page.next;
                        h.last_success = Some(now);
                        h.consecutive_failures = 0;
                    });
                }
                Some(e) => {
                    tracing::warn!(webhook = %id, delivery, "webhook delivery failed: {e}");
                    crate::telemetry::metrics::metrics().webhook_failed();
                    self.update(&id, |h| {
                        h.last_error = Some(e);
                        h.consecutive_failures += 1;
                    });
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(self.backoff_max);
                }
            }
        }
    }
}
