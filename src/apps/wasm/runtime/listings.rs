//! Each component's last tool listing, saved beside its compiled code: an app is listed at
//! start without instantiating it, and how long listing took is kept for `apps/get`.
//!
//! How long a listing took without an instance, derived or read, is each app's `runtime.listingUs`.

use super::*;

impl WasmRuntime {
    /// Where the tools a component lists are kept: next to its compiled code, for this build.
    /// A typed component's tools carry the app's name ([`typed::names_the_app`]), so its
    /// listing is kept per app (`Some(app)`): two apps of one component, in one server or in
    /// two sharing the cache, must not list each other's. Another's is kept once (`None`).
    pub(in crate::apps::wasm) fn listing_path(&self, sha: &str, app: Option<&str>) -> PathBuf {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (self.listing_key, app.unwrap_or("")).hash(&mut h);
        let code = self.cache_path(sha);
        code.with_extension(format!("tools-{:016x}.json", h.finish()))
    }

    /// The tools a component listed (once, from an instance), if kept: listing an app needs no
    /// instance.
    pub(in crate::apps::wasm) fn cached_listing(&self, sha: &str, app: &str) -> Option<Listing> {
        let t0 = std::time::Instant::now();
        let bytes = std::fs::read(self.listing_path(sha, None))
            .or_else(|_| std::fs::read(self.listing_path(sha, Some(app))))
            .ok()?;
        let l = serde_json::from_slice(&bytes).ok()?;
        self.note_listing(sha, false, t0.elapsed());
        Some(l)
    }

    /// Notes how long a component's listing took: `derived` from its types, or read from the
    /// cache.
    pub(in crate::apps::wasm) fn note_listing(
        &self,
        sha: &str,
        derived: bool,
        took: std::time::Duration,
    ) {
        let us = took.as_micros() as u64;
        let how = if derived {
            "derived from its types"
        } else {
            "read from the cache"
        };
        tracing::debug!(component = %sha.get(..12).unwrap_or(sha), us, "tool listing {how}");
        let mut times = self.listing_times.lock().unwrap();
        let t = times.entry(sha.to_string()).or_default();
        if derived {
            t.derived = Some(us);
        } else {
            t.cached = Some(us);
        }
    }

    /// The last times (µs) listing a component's tools took without running it:
    /// `{"derived": …, "cached": …}` (null when it was not done since the server started).
    pub(in crate::apps::wasm) fn listing_us(&self, sha: &str) -> serde_json::Value {
        let t = self
            .listing_times
            .lock()
            .unwrap()
            .get(sha)
            .copied()
            .unwrap_or_default();
        serde_json::json!({"derived": t.derived, "cached": t.cached})
    }

    /// Keeps the tools a component listed (see [`WasmRuntime::cached_listing`]), unless kept
    /// already.
    pub(in crate::apps::wasm) fn save_listing(&self, sha: &str, app: &str, l: &Listing) {
        let path = self.listing_path(sha, typed::names_the_app(l).then_some(app));
        let r = serde_json::to_vec(l)
            .map_err(std::io::Error::other)
            .and_then(|b| match std::fs::read(&path) {
                Ok(kept) if kept == b => Ok(()),
                _ => write_cache(&path, &b),
            });
        if let Err(e) = r {
            tracing::warn!("cannot keep the listing in the compile cache: {e}");
        }
    }
}
