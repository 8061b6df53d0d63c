//! The apps' last listings, saved under `.datanotes/app-tools/`: an app that is down at start is
//! listed from what it last said (listing never waits on an app).

use super::*;

impl Aggregator {
    /// Where an app's last known tools are kept: `.datanotes/app-tools/<app>.json` (0600).
    pub(super) fn listing_path(&self, app: &str) -> std::path::PathBuf {
        self.engine
            .meta_dir
            .join("app-tools")
            .join(format!("{app}.json"))
    }

    pub(super) fn load_listing(&self, app: &str) -> Option<Listing> {
        let bytes = std::fs::read(self.listing_path(app)).ok()?;
        match serde_json::from_slice(&bytes) {
            Ok(l) => Some(l),
            Err(e) => {
                tracing::warn!(app, "the last known tools of app {app} are unreadable: {e}");
                None
            }
        }
    }

    /// Saves an app's listing (after it changed), so that a restart lists its tools at once.
    pub(super) fn save_listing(&self, app: &str, l: &Listing) {
        let path = self.listing_path(app);
        let r = (|| {
            if let Some(d) = path.parent() {
                std::fs::create_dir_all(d)?;
                crate::engine::lock::set_mode(d, 0o700)?;
            }
            let bytes = serde_json::to_vec(l).map_err(std::io::Error::other)?;
            crate::auth::write_private(&path, &bytes)
        })();
        if let Err(e) = r {
            tracing::warn!(app, "cannot save the last known tools of app {app}: {e}");
        }
    }
}
