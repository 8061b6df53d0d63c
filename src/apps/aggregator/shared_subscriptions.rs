//! Subscriptions made at apps on their shared sessions, counted. A caller without a session of
//! its own (a 2026-07-28 client's `subscriptions/listen`) subscribes on the app's shared
//! session, which every such caller uses. Two listen streams naming one resource make one
//! subscription there: the app is asked to unsubscribe when the last of them ends, not when
//! the first does (which would stop the other's updates).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// An app's name and a resource's URI as the app wrote it.
type Key = (String, String);

/// How many callers hold each subscription on an app's shared session. Each one's count is
/// behind a lock of its own, held while the app is asked: a subscribe and the last unsubscribe
/// reach the app in the order they were made.
#[derive(Default)]
pub(super) struct SharedSubscriptions(Mutex<HashMap<Key, Arc<tokio::sync::Mutex<usize>>>>);

impl SharedSubscriptions {
    /// Runs a subscribe (`on`) or unsubscribe of `uri` at `app`: `ask` is run when the app must
    /// be asked. The count goes up with a subscribe the app took and down with an unsubscribe.
    pub(super) async fn change<F, T, E>(
        &self,
        app: &str,
        uri: &str,
        on: bool,
        ask: F,
    ) -> Result<(), E>
    where
        F: std::future::Future<Output = Result<T, E>>,
    {
        let key = (app.to_string(), uri.to_string());
        let slot = self
            .0
            .lock()
            .unwrap()
            .entry(key.clone())
            .or_default()
            .clone();
        let mut held = slot.lock().await;
        // A subscribe is always asked (the app may have forgotten it); an unsubscribe only
        // by the last caller holding it.
        let r = if on || *held <= 1 {
            ask.await.map(|_| ())
        } else {
            Ok(())
        };
        match (on, &r) {
            (true, Ok(())) => *held += 1,
            (false, _) => *held = held.saturating_sub(1),
            (true, Err(_)) => {}
        }
        let none = *held == 0;
        drop(held);
        if none {
            // Forgotten once no caller holds it and no one else is at it.
            let mut map = self.0.lock().unwrap();
            if Arc::strong_count(&slot) == 2 && slot.try_lock().is_ok_and(|n| *n == 0) {
                map.remove(&key);
            }
        }
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[tokio::test]
    async fn the_app_is_asked_to_unsubscribe_when_the_last_caller_goes() {
        let subs = SharedSubscriptions::default();
        let asked = AtomicUsize::new(0);
        let ask = || async {
            asked.fetch_add(1, Ordering::SeqCst);
            Ok::<_, ()>(())
        };
        subs.change("a", "file:///x", true, ask()).await.unwrap();
        subs.change("a", "file:///x", true, ask()).await.unwrap();
        assert_eq!(asked.load(Ordering::SeqCst), 2, "each subscribe is asked");
        subs.change("a", "file:///x", false, ask()).await.unwrap();
        assert_eq!(asked.load(Ordering::SeqCst), 2, "one caller still holds it");
        subs.change("a", "file:///x", false, ask()).await.unwrap();
        assert_eq!(asked.load(Ordering::SeqCst), 3, "the last one unsubscribes");
        assert!(subs.0.lock().unwrap().is_empty(), "forgotten");
        // A subscribe the app refused holds nothing.
        let refused = subs
            .change("a", "file:///y", true, async { Err::<(), _>("no") })
            .await;
        assert_eq!(refused, Err("no"));
        subs.change("a", "file:///y", false, ask()).await.unwrap();
        assert_eq!(asked.load(Ordering::SeqCst), 4);
        assert!(subs.0.lock().unwrap().is_empty());
    }
}
