//! A call posted to a remote app whose answer is not read yet: the answer's event stream
//! ([`Events`]) and the guard that tells the app when the caller gives up on it ([`Abandon`]).
//! Both ways of posting a call (`direct.rs`, `raw.rs`) hold them.

use super::{ActorClient, RemoteApp, Route, StreamableHttpClient};
use futures_util::stream::BoxStream;
use rmcp::model::{ClientJsonRpcMessage, NumberOrString};
use std::sync::Arc;

/// An answer's SSE stream, as rmcp's transport reads it.
pub(super) type Events =
    BoxStream<'static, Result<sse_stream::Sse, rmcp::transport::streamable_http_client::SseError>>;

/// A call posted directly whose answer is not read yet: dropped armed (its caller cancelled
/// it, or hung up), it tells the app with `notifications/cancelled` for the call's request, so
/// that the app stops working on it. Posting that waits for nothing on the caller's path.
pub(super) struct Abandon<'a> {
    app: &'a RemoteApp,
    client: &'a ActorClient,
    pub(super) route: Route,
    id: NumberOrString,
    pub(super) armed: bool,
}

impl<'a> Abandon<'a> {
    /// Armed for the request `id` posted on `route`.
    pub(super) fn new(
        app: &'a RemoteApp,
        client: &'a ActorClient,
        route: Route,
        id: &NumberOrString,
    ) -> Abandon<'a> {
        Abandon {
            app,
            client,
            route,
            id: id.clone(),
            armed: true,
        }
    }
}

impl Drop for Abandon<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let Ok(msg) = serde_json::from_value::<ClientJsonRpcMessage>(serde_json::json!({
            "jsonrpc": "2.0",
            "method": "notifications/cancelled",
            "params": {"requestId": self.id, "reason": "the caller cancelled the call"},
        })) else {
            return;
        };
        let http = self.client.http().clone();
        let uri: Arc<str> = self.app.url.as_str().into();
        let (session, headers) = (self.route.session.clone(), self.route.headers.clone());
        let token = self.app.bearer_now();
        rt.spawn(async move {
            let _ = http.post_message(uri, msg, session, token, headers).await;
        });
    }
}
