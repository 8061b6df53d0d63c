//! The input an app's task needs, for a client of 2026-07-28 (the tasks extension, SEP-2663).
//!
//! An app of 2025-11-25 whose task needs input says `input_required`, and asks its requests
//! (`elicitation/create`, `sampling/createMessage`, `roots/list`) on the stream of the
//! requestor's `tasks/result`. A client of 2026-07-28 takes no request from a server: it reads
//! them as the task's `inputRequests` in `tasks/get`, and answers them with `tasks/update`.
//!
//! So when `tasks/get` finds the app's task in `input_required`, the door asks the app for the
//! task's result in the background, with an [`Inbox`] as the client's side: each request the
//! app asks there waits in it, under a key, until the client's `tasks/update` answers it (or
//! the app stops waiting). The result that request ends with is kept for the next `tasks/get`.
//! Inboxes are kept per calling token and task, at most [`MAX_INBOXES`]; the oldest goes first
//! (its requests answered that the client went away).

use crate::apps::backend::{ClientAnswer, ClientChannel, ClientRefusal};
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::{Notify, oneshot};
use tokio_util::sync::CancellationToken;

/// The most tasks waiting for their clients' input at once.
const MAX_INBOXES: usize = 256;
/// The most requests of one task waiting for the client: more are refused (a flood).
const MAX_ASKED: usize = 16;

/// An app's request (`{"method", "params"}`) and where the client's answer goes.
type Waiting = (Value, oneshot::Sender<Result<Value, ClientRefusal>>);

/// The requests an app asked within one task, waiting for the client, and the task's result
/// once the app gave it.
pub(super) struct Inbox {
    /// By key.
    asked: Mutex<BTreeMap<String, Waiting>>,
    /// The result of the background `tasks/result` (the app's result, or why it failed).
    ended: Mutex<Option<Result<Value, crate::error::Error>>>,
    /// Told when a request is asked or the result comes.
    changed: Notify,
    next: AtomicU64,
    /// Cancels the background `tasks/result` (the inbox forgotten).
    pub(super) cancel: CancellationToken,
    made: u64,
}

impl Inbox {
    /// The requests waiting, as the extension's `inputRequests` are written.
    pub(super) fn requests(&self) -> BTreeMap<String, Value> {
        let asked = self.asked.lock().unwrap();
        asked
            .iter()
            .map(|(k, (r, _))| (k.clone(), r.clone()))
            .collect()
    }

    /// Waits until a request waits for the client or the result came, at most `within`.
    pub(super) async fn settled(&self, within: std::time::Duration) {
        self.wait(within, |i| {
            !i.asked.lock().unwrap().is_empty() || i.ended.lock().unwrap().is_some()
        })
        .await;
    }

    /// Its result, waited for at most `within`: the app may say its task ended before the
    /// result reaches the background request.
    pub(super) async fn result_within(
        &self,
        within: std::time::Duration,
    ) -> Option<Result<Value, crate::error::Error>> {
        self.wait(within, |i| i.ended.lock().unwrap().is_some())
            .await;
        self.ended()
    }

    /// Waits until `done` holds, told by each change, at most `within`.
    async fn wait(&self, within: std::time::Duration, done: impl Fn(&Self) -> bool) {
        let _ = tokio::time::timeout(within, async {
            loop {
                let changed = self.changed.notified();
                if done(self) {
                    return;
                }
                changed.await;
            }
        })
        .await;
    }

    /// The background `tasks/result` ended with `r`.
    pub(super) fn end(&self, r: Result<Value, crate::error::Error>) {
        *self.ended.lock().unwrap() = Some(r);
        self.changed.notify_waiters();
    }

    /// Its result, once the app gave it.
    pub(super) fn ended(&self) -> Option<Result<Value, crate::error::Error>> {
        self.ended.lock().unwrap().clone()
    }

    /// Answers the requests the client answered (`responses`, by key): all of them, or none
    /// when a key names no request waiting (answered with that key).
    pub(super) fn answer(&self, responses: &BTreeMap<String, Value>) -> Result<(), String> {
        let mut asked = self.asked.lock().unwrap();
        if let Some(k) = responses.keys().find(|k| !asked.contains_key(*k)) {
            return Err(k.clone());
        }
        for (k, v) in responses {
            if let Some((_, answer)) = asked.remove(k) {
                let _ = answer.send(Ok(v.clone()));
            }
        }
        Ok(())
    }
}

/// The client's side of the background `tasks/result`: the app's requests wait in the inbox.
pub(super) struct Asked(pub(super) Arc<Inbox>);

/// A task's notifications have no request of the client to go with (the trait's default:
/// dropped), and it wants no progress.
impl ClientChannel for Asked {
    fn request<'a>(&'a self, method: &'a str, params: Value) -> ClientAnswer<'a> {
        Box::pin(async move {
            if !super::rounds::asks_the_client(method) {
                return Err(ClientRefusal::undeclared(method));
            }
            let inbox = &self.0;
            let n = inbox.next.fetch_add(1, Ordering::Relaxed);
            let key = format!("{}-{n}", method.replace('/', "-"));
            let (answer, got) = oneshot::channel();
            let request = json!({"method": method, "params": params});
            {
                let mut asked = inbox.asked.lock().unwrap();
                if asked.len() >= MAX_ASKED {
                    return Err(ClientRefusal {
                        code: -32603,
                        message: format!(
                            "this task already waits for {MAX_ASKED} answers of its client: ask again once they came"
                        ),
                        data: None,
                    });
                }
                asked.insert(key, (request, answer));
            }
            inbox.changed.notify_waiters();
            got.await
                .unwrap_or_else(|_| Err(super::rounds::went_away("task", method)))
        })
    }
}

/// The inboxes of the tasks waiting for input, by calling token and task id.
#[derive(Default)]
pub(super) struct TaskInputs {
    all: Mutex<HashMap<(String, String), Arc<Inbox>>>,
    made: AtomicU64,
}

impl TaskInputs {
    /// The inbox of `token`'s task `id`, and whether it was made now (its background
    /// `tasks/result` is then to be started).
    pub(super) fn open(&self, token: &str, id: &str) -> (Arc<Inbox>, bool) {
        let mut all = self.all.lock().unwrap();
        let key = (token.to_string(), id.to_string());
        if let Some(i) = all.get(&key) {
            return (i.clone(), false);
        }
        for (_, i) in crate::bounded::evict_oldest(&mut *all, MAX_INBOXES - 1, |_, i| Some(i.made))
        {
            i.cancel.cancel();
        }
        let inbox = Arc::new(Inbox {
            asked: Mutex::default(),
            ended: Mutex::default(),
            changed: Notify::new(),
            next: AtomicU64::new(1),
            cancel: CancellationToken::new(),
            made: self.made.fetch_add(1, Ordering::Relaxed),
        });
        all.insert(key, inbox.clone());
        (inbox, true)
    }

    /// The inbox of `token`'s task `id`, if it has one.
    pub(super) fn get(&self, token: &str, id: &str) -> Option<Arc<Inbox>> {
        let key = (token.to_string(), id.to_string());
        self.all.lock().unwrap().get(&key).cloned()
    }

    /// Forgets the inbox of `token`'s task `id` (the task ended or was cancelled): its
    /// background request is cancelled, and its requests answered that the client went away.
    pub(super) fn forget(&self, token: &str, id: &str) {
        let key = (token.to_string(), id.to_string());
        if let Some(i) = self.all.lock().unwrap().remove(&key) {
            i.cancel.cancel();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_apps_request_waits_for_the_clients_answer_by_key() {
        let inputs = TaskInputs::default();
        let (inbox, new) = inputs.open("owner", "t1");
        assert!(new);
        assert!(!inputs.open("owner", "t1").1, "one inbox a task");
        assert!(inputs.get("app:x", "t1").is_none(), "another token's");
        let asked = Asked(inbox.clone());
        let app = tokio::spawn(async move {
            asked
                .request("elicitation/create", json!({"message": "name?"}))
                .await
        });
        inbox.settled(std::time::Duration::from_secs(5)).await;
        let requests = inbox.requests();
        assert_eq!(
            requests["elicitation-create-1"],
            json!({"method": "elicitation/create", "params": {"message": "name?"}})
        );
        let wrong = BTreeMap::from([("nope".to_string(), json!({}))]);
        assert_eq!(inbox.answer(&wrong), Err("nope".into()));
        let right = BTreeMap::from([(
            "elicitation-create-1".to_string(),
            json!({"action": "accept", "content": {"name": "Ada"}}),
        )]);
        inbox.answer(&right).unwrap();
        let got = app.await.unwrap().unwrap();
        assert_eq!(got["content"]["name"], "Ada");
        assert!(inbox.requests().is_empty());
        // No more than MAX_ASKED wait at once.
        let flood: Vec<_> = (0..MAX_ASKED + 1)
            .map(|_| {
                let asked = Asked(inbox.clone());
                tokio::spawn(async move { asked.request("roots/list", json!({})).await })
            })
            .collect();
        let mut refused = 0;
        for f in flood {
            if let Ok(Ok(Err(_))) =
                tokio::time::timeout(std::time::Duration::from_millis(50), f).await
            {
                refused += 1;
            }
        }
        assert_eq!((refused, inbox.requests().len()), (1, MAX_ASKED));
        // A request of another kind is refused at once.
        let r = Asked(inbox.clone()).request("tools/call", json!({})).await;
        assert!(r.is_err());
        inputs.forget("owner", "t1");
        assert!(inbox.cancel.is_cancelled());
        assert!(inputs.get("owner", "t1").is_none());
    }
}
