//! What rmcp's sessions send to `/mcp` clients, put right on its way out.
//!
//! rmcp (3.11) gives every request a server sends a `_meta.progressToken` of its own
//! (`Peer::send_request`), and offers no way not to. The door's requests to a client are an
//! app's, passed on (`channel.rs`): the client must see them as the app wrote them. So the
//! session manager below is rmcp's own, whose streams drop that token from each request before
//! it is written. A token the app itself put in its request's `_meta` stays: rmcp keeps the
//! request's own `params._meta` beside the one it adds, and the one it adds is the one removed.

use std::sync::Arc;

use futures_util::{Stream, StreamExt};
use rmcp::model::{
    ClientJsonRpcMessage, GetExtensions, JsonRpcMessage, RequestMetaObject, ServerJsonRpcMessage,
};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::session::{
    ServerSseMessage, SessionId, SessionManager,
};

/// rmcp's local session manager, whose outgoing requests lose the progress token rmcp added.
pub(super) struct Outgoing(pub(super) LocalSessionManager);

type Local = LocalSessionManager;

impl SessionManager for Outgoing {
    type Error = <Local as SessionManager>::Error;
    type Transport = <Local as SessionManager>::Transport;

    async fn create_session(&self) -> Result<(SessionId, Self::Transport), Self::Error> {
        self.0.create_session().await
    }

    async fn initialize_session(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<ServerJsonRpcMessage, Self::Error> {
        self.0.initialize_session(id, message).await
    }

    async fn has_session(&self, id: &SessionId) -> Result<bool, Self::Error> {
        self.0.has_session(id).await
    }

    async fn close_session(&self, id: &SessionId) -> Result<(), Self::Error> {
        self.0.close_session(id).await
    }

    async fn create_stream(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        Ok(self.0.create_stream(id, message).await?.map(as_sent))
    }

    async fn accept_message(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<(), Self::Error> {
        self.0.accept_message(id, message).await
    }

    async fn create_standalone_stream(
        &self,
        id: &SessionId,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        Ok(self.0.create_standalone_stream(id).await?.map(as_sent))
    }

    async fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        Ok(self.0.resume(id, last_event_id).await?.map(as_sent))
    }
}

/// A message as its sender wrote it: a request without the progress token rmcp added to it.
/// Anything else goes on untouched (and uncopied).
fn as_sent(mut m: ServerSseMessage) -> ServerSseMessage {
    let Some(msg) = m.message.take_if(|msg| added(msg)) else {
        return m;
    };
    let mut msg = Arc::unwrap_or_clone(msg);
    drop_added(&mut msg);
    m.message = Some(Arc::new(msg));
    m
}

/// Whether `msg` is a request with a progress token rmcp put beside the request's own `_meta`.
fn added(msg: &ServerJsonRpcMessage) -> bool {
    match msg {
        JsonRpcMessage::Request(r) => r
            .request
            .extensions()
            .get::<RequestMetaObject>()
            .is_some_and(|meta| meta.0.contains_key("progressToken")),
        _ => false,
    }
}

/// Drops the progress token rmcp added to a request, with the `_meta` it alone made.
fn drop_added(msg: &mut ServerJsonRpcMessage) {
    if let JsonRpcMessage::Request(r) = msg {
        let ext = r.request.extensions_mut();
        if let Some(meta) = ext.get_mut::<RequestMetaObject>() {
            meta.0.remove("progressToken");
            if meta.0.is_empty() {
                ext.remove::<RequestMetaObject>();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::{CustomRequest, GetMeta, NumberOrString, ProgressToken, ServerRequest};
    use serde_json::{Value, json};

    fn sent(params: Value, token: Option<u32>) -> Value {
        let mut request = ServerRequest::CustomRequest(CustomRequest::new(
            "sampling/createMessage",
            Some(params),
        ));
        if let Some(t) = token {
            request
                .get_meta_mut()
                .set_progress_token(ProgressToken(NumberOrString::Number(t.into())));
        }
        let msg = JsonRpcMessage::request(request, NumberOrString::Number(3));
        let m = ServerSseMessage::from_message(msg);
        serde_json::to_value(&*as_sent(m).message.unwrap()).unwrap()
    }

    /// The token rmcp adds is gone, with the `_meta` it alone made; the app's own `_meta` (its
    /// own token too) stays as the app wrote it.
    #[test]
    fn a_request_goes_out_as_the_app_wrote_it() {
        let plain = json!({"messages": [], "maxTokens": 5});
        let out = sent(plain.clone(), Some(0));
        assert_eq!(out["params"], plain);
        let own = json!({"messages": [], "_meta": {"progressToken": "app-7", "k": 1}});
        let out = sent(own.clone(), Some(1));
        assert_eq!(out["params"], own);
        // Without a token added, nothing changes.
        assert_eq!(sent(plain.clone(), None)["params"], plain);
    }
}
