//! A client's answers to what an app asked of it, as the client wrote them.
//!
//! rmcp reads a client's answer to a server request into its own types (a sampling result's
//! fields come out in its order, a number as its type holds it, a field it does not model is
//! dropped). The app asked, so the app gets the answer as the client wrote it: the door keeps
//! each answer a client posts on its session (its raw `result`, by JSON-RPC id) before rmcp
//! reads it, and the relay (`channel.rs`) takes it by the id of the request it sent. Only the
//! last [`KEPT`] are kept: an answer nobody takes (a request of rmcp's own) is pushed out.

use rmcp::model::RequestId;
use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;
use std::collections::VecDeque;
use std::sync::Mutex;

/// Answers kept per session, waiting to be taken.
const KEPT: usize = 32;

/// One session's answers not yet taken: (the id as JSON text, the `result`).
#[derive(Default)]
pub(crate) struct Answers(Mutex<VecDeque<(String, Value)>>);

impl Answers {
    /// Keeps the `result` of a JSON-RPC answer posted by the client (`body`); anything else (a
    /// request, a notification, an error, what does not parse) is left to rmcp alone.
    pub(super) fn keep(&self, body: &[u8]) {
        // A request or notification names its method: the common case costs one scan.
        if body.windows(8).any(|w| w == b"\"method\"") {
            return;
        }
        #[derive(Deserialize)]
        struct Answer<'a> {
            #[serde(borrow)]
            id: &'a RawValue,
            result: Value,
        }
        let Ok(a) = serde_json::from_slice::<Answer>(body) else {
            return;
        };
        let mut kept = self.0.lock().unwrap();
        if kept.len() == KEPT {
            kept.pop_front();
        }
        kept.push_back((a.id.get().trim().to_string(), a.result));
    }

    /// The answer to the request `id`, if the client's answer was kept.
    pub(super) fn take(&self, id: &RequestId) -> Option<Value> {
        let key = serde_json::to_string(id).ok()?;
        let mut kept = self.0.lock().unwrap();
        let at = kept.iter().position(|(k, _)| *k == key)?;
        kept.remove(at).map(|(_, v)| v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::NumberOrString;

    #[test]
    fn an_answer_is_kept_as_written_until_taken_and_nothing_else_is() {
        let a = Answers::default();
        a.keep(br#"{"jsonrpc":"2.0","id":7,"result":{"role":"assistant","model":"m","n":1}}"#);
        a.keep(br#"{"jsonrpc":"2.0","id":8,"method":"ping"}"#);
        a.keep(br#"{"jsonrpc":"2.0","id":9,"error":{"code":-1,"message":"no"}}"#);
        let seven = NumberOrString::Number(7);
        let r = a.take(&seven).unwrap();
        assert_eq!(
            serde_json::to_string(&r).unwrap(),
            r#"{"role":"assistant","model":"m","n":1}"#
        );
        assert!(a.take(&seven).is_none());
        assert!(a.take(&NumberOrString::Number(8)).is_none());
        assert!(a.take(&NumberOrString::Number(9)).is_none());
        // Bounded: the oldest goes.
        for i in 0..=KEPT as i64 {
            a.keep(format!(r#"{{"jsonrpc":"2.0","id":{i},"result":{{}}}}"#).as_bytes());
        }
        assert!(a.take(&NumberOrString::Number(0)).is_none());
        assert!(a.take(&NumberOrString::Number(KEPT as i64)).is_some());
        a.keep(br#"{"jsonrpc":"2.0","id":"s-1","result":{}}"#);
        assert!(a.take(&NumberOrString::String("s-1".into())).is_some());
    }
}
