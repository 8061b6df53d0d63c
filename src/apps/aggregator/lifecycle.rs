//! The apps' backends over time: made from their records ([`Aggregator::sync`]), probed and
//! refreshed, their reachability noted (one log line per change), and their events outside
//! calls handled.

use super::*;

/// The longest an app's [`AppBackend::keep_up`] runs at a probe.
pub(super) const KEEP_UP: Duration = Duration::from_secs(10);

/// The most app events waiting to be handled; more are dropped (a flood of updates).
pub(super) const EVENTS_QUEUE: usize = 1024;

impl Slot {
    /// Notes that the app answered now.
    pub(super) fn seen_now(&self) {
        self.last_seen
            .store(chrono::Utc::now().timestamp_millis(), Ordering::Relaxed);
    }
}

/// Notes an app's answer (or failure): one log line per change of reachability, naming the app.
pub(super) fn record(s: &mut Slot, err: Option<&BackendError>) {
    match err {
        None => {
            if s.reachable == Some(false) {
                tracing::info!(app = %s.name, "app {} is reachable again", s.name);
            }
            s.reachable = Some(true);
            s.seen_now();
            if let Some(e) = s.last_error.take() {
                s.previous_error = Some(e);
            }
        }
        Some(e) => {
            if s.reachable != Some(false) {
                tracing::warn!(app = %s.name, "app {} is not reachable: {e}", s.name);
            }
            s.reachable = Some(false);
            s.last_error = Some((e.0.clone(), crate::engine::journal::now()));
        }
    }
}

impl Aggregator {
    /// Starts the background refreshes: every app now, then every app every 5 minutes
    /// (`DATANOTES_APP_REFRESH_MS`), and unreachable apps when their probe is due: after
    /// `DATANOTES_APP_PROBE_MS` (10 s), doubled at each failure in a row up to
    /// `DATANOTES_APP_PROBE_MAX_MS` (5 minutes), back to the base on recovery.
    pub fn start(self: &Arc<Self>) {
        self.follow_events();
        let probe = self.probe.0;
        let full = crate::knobs::ms("DATANOTES_APP_REFRESH_MS", 300_000);
        let me = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut last_full = tokio::time::Instant::now();
            let mut first = true;
            loop {
                let Some(agg) = me.upgrade() else { return };
                let all = first || last_full.elapsed() >= full;
                if all {
                    last_full = tokio::time::Instant::now();
                }
                first = false;
                let now = tokio::time::Instant::now();
                let names: Vec<String> = agg
                    .slots
                    .read()
                    .unwrap()
                    .iter()
                    .filter(|s| {
                        all || (s.reachable != Some(true) && s.next_probe.is_none_or(|t| now >= t))
                    })
                    .map(|s| s.name.clone())
                    .collect();
                let tasks: Vec<_> = names
                    .into_iter()
                    .map(|n| agg.clone().refresh_owned(n))
                    .collect();
                futures_util::future::join_all(tasks).await;
                // What the reachable apps hold for callers, kept up (their subscriptions).
                let reachable: Vec<Arc<dyn AppBackend>> = {
                    let slots = agg.slots.read().unwrap();
                    let up = slots.iter().filter(|s| s.reachable == Some(true));
                    up.map(|s| s.backend.clone()).collect()
                };
                let kept = reachable
                    .iter()
                    .map(|b| tokio::time::timeout(KEEP_UP, b.keep_up()));
                futures_util::future::join_all(kept).await;
                drop(agg);
                tokio::time::sleep(probe).await;
            }
        });
    }

    pub(super) async fn refresh_owned(self: Arc<Self>, name: String) {
        let _ = self.refresh(&name).await;
    }

    pub(super) fn backend_for(&self, rec: &AppRecord) -> Option<(String, Arc<dyn AppBackend>)> {
        if let Some(w) = &rec.wasm {
            // The scope is part of it: a WASM app's engine calls are checked against the scope
            // its backend holds, so a changed `write`, `ddl` or `maintain` needs a new backend;
            // and so are its allow_hosts, held by its instances.
            let fp = format!(
                "wasm {} {} allow_hosts={:?} write={:?} ddl={} maintain={}",
                w.sha256,
                serde_json::to_string(&w.limits).unwrap_or_default(),
                w.allow_hosts,
                rec.rights.write,
                rec.rights.ddl,
                rec.rights.maintain
            );
            let scope = rec.scope();
            return Some((
                fp,
                Arc::new(WasmApp::new(
                    self.wasm.clone(),
                    scope,
                    &w.sha256,
                    w.limits.clone(),
                    &w.allow_hosts,
                )),
            ));
        }
        let url = rec.mcp_url.clone()?;
        let policy = crate::apps::self_url::policy(rec, &url);
        let fp = format!(
            "remote {url} {policy:?} {}",
            rec.mcp_token
                .as_deref()
                .map(crate::auth::token_hash)
                .unwrap_or_default()
        );
        Some((
            fp,
            Arc::new(RemoteApp::new(
                url.clone(),
                policy,
                rec.mcp_token.clone(),
                // Without a static token: its OAuth sign-in, used if the app asks for one.
                rec.mcp_token.is_none().then(|| {
                    crate::apps::remote::oauth::for_app(&self.engine.meta_dir, &rec.name, &url)
                }),
                self.timeouts,
                self.caps,
                Some(self.events_of(&rec.name)),
            )),
        ))
    }

    /// Brings the slots in line with the registry (after create, update, delete). Returns the
    /// apps whose backend is new and should be refreshed.
    pub fn sync(&self) -> Vec<String> {
        let mut fresh = vec![];
        {
            let mut slots = self.slots.write().unwrap();
            // Read under the lock: of two syncs at once, the later one sees the later registry
            // (an app created meanwhile is not taken for deleted).
            let recs = self.registry.list();
            let mut old: HashMap<String, Slot> =
                slots.drain(..).map(|s| (s.name.clone(), s)).collect();
            // The apps given a new backend whose resources follow the vault.
            let mut followers_replaced = vec![];
            for rec in &recs {
                let Some((fp, backend)) = self.backend_for(rec) else {
                    continue;
                };
                match old.remove(&rec.name) {
                    // A registry change (a restarted remote app registers its address again)
                    // makes the next probe of an app that is down due at once.
                    Some(mut s) if s.fingerprint == fp => {
                        s.failures = 0;
                        s.next_probe = None;
                        slots.push(s)
                    }
                    prev => {
                        fresh.push(rec.name.clone());
                        // What callers subscribed to at the app goes on at its new backend.
                        if let Some(p) = &prev {
                            backend.adopt(p.backend.subscriptions());
                            if backend.resources_follow_the_vault() {
                                followers_replaced.push(rec.name.clone());
                            }
                        }
                        // Keep the last known tools until the new backend answers; at start,
                        // those saved with the app.
                        let listing = match prev {
                            Some(p) => p.listing,
                            None => self.load_listing(&rec.name),
                        };
                        slots.push(Slot {
                            name: rec.name.clone(),
                            backend,
                            fingerprint: fp,
                            listing,
                            reachable: None,
                            last_error: None,
                            previous_error: None,
                            last_seen: AtomicI64::new(0),
                            failures: 0,
                            next_probe: None,
                        });
                    }
                }
            }
            // A new version of an app whose resources follow the vault: its subscribers are
            // told (the door keeps their subscriptions; the app is not asked).
            for app in followers_replaced {
                let _ = self.updated.send(resources::ResourceUpdate::App(app));
            }
            // What is left was deleted.
            for name in old.keys() {
                let _ = std::fs::remove_file(self.listing_path(name));
                crate::apps::remote::oauth::forget(&self.engine.meta_dir, name);
            }
        }
        self.resolve();
        fresh
    }

    /// Re-reads one app's tools. Answers what changed: tools added, removed, skipped.
    pub async fn refresh(&self, name: &str) -> Result<Value> {
        let backend = {
            let slots = self.slots.read().unwrap();
            slots
                .iter()
                .find(|s| s.name == name)
                .map(|s| (s.backend.clone(), s.fingerprint.clone()))
        };
        let Some((backend, fp)) = backend else {
            return Ok(json!({"added": [], "removed": [], "skipped": []}));
        };
        let before: HashSet<String> = self.app_tool_names(name).into_iter().collect();
        let caps = self.caps;
        let r = backend.list().await.and_then(|mut l| {
            let bytes = serde_json::to_vec(&l.tools).map_or(0, |v| v.len());
            if let Some(why) = caps.listing_over(l.tools.len(), bytes, 1) {
                return Err(BackendError(why));
            }
            if let Some(why) = caps.bound_content(&mut l) {
                tracing::warn!(app = name, "{why}");
            }
            Ok(l)
        });
        let mut changed = None;
        let mut first = false;
        {
            let mut slots = self.slots.write().unwrap();
            let Some(s) = slots
                .iter_mut()
                .find(|s| s.name == name && s.fingerprint == fp)
            else {
                return Ok(json!({"added": [], "removed": [], "skipped": []}));
            };
            record(s, r.as_ref().err());
            if r.is_ok() {
                s.failures = 0;
                s.next_probe = None;
            } else {
                s.failures = s.failures.saturating_add(1);
                let wait = backoff(self.probe.0, self.probe.1, s.failures);
                s.next_probe = Some(tokio::time::Instant::now() + wait);
            }
            if let Ok(l) = r
                && s.listing.as_ref() != Some(&l)
            {
                first = s.listing.is_none();
                changed = Some(l.clone());
                s.listing = Some(l);
            }
        }
        if let Some(l) = changed {
            self.save_listing(name, &l);
        }
        self.resolve_with(first.then_some(name));
        let after: HashSet<String> = self.app_tool_names(name).into_iter().collect();
        let ns = self.ns.read().unwrap().clone();
        Ok(json!({
            "added": after.difference(&before).collect::<Vec<_>>(),
            "removed": before.difference(&after).collect::<Vec<_>>(),
            "skipped": ns.skipped.get(name).cloned().unwrap_or_default(),
        }))
    }
}
