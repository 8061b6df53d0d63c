//! What stands before the MCP layer at `/mcp`: the token (the `Host` and `Origin` checks are
//! [`super::hosts`]).
//!
//! The token is a static token, or an OAuth access token for this `/mcp` (`Server::mcp_caller`); a
//! 401 names the OAuth metadata.

use crate::server::Shared;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

/// Refuses `/mcp` requests without a valid token before they reach the MCP layer; the caller
/// travels with the request.
/// A 401 says where to start OAuth (`WWW-Authenticate`, RFC 9728).
pub(super) async fn require_token(
    State(s): State<Shared>,
    mut req: Request,
    next: Next,
) -> Response {
    // Every principal that acts on the vault opens sessions; a metrics token does not (403).
    let caller = s.mcp_caller(req.headers()).and_then(|ctx| {
        crate::auth::authorize(
            &ctx.caller,
            crate::auth::Access::Read,
            crate::auth::Target::None,
        )
        .map(|()| ctx)
    });
    match caller {
        Ok(ctx) => {
            req.extensions_mut().insert(ctx);
            next.run(req).await
        }
        Err(e) if e.status == 403 => e.into_response(),
        Err(e) => {
            let invalid = crate::server::bearer(req.headers()).is_some();
            let challenge =
                crate::server::challenge(req.headers(), invalid.then_some(e.message.as_str()));
            let mut r = e.into_response();
            r.headers_mut()
                .insert(axum::http::header::WWW_AUTHENTICATE, challenge);
            r
        }
    }
}
