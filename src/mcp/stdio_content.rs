//! `datanotes mcp`'s resources, templates, prompts, completions and subscriptions: each request
//! passed to the running server's `/mcp` as it is, its answer (or error) back, and the server's
//! `resources/updated` and `list_changed` passed on to the desktop client.

use super::Proxy;
use rmcp::ErrorData;
use rmcp::model::ClientRequest;
use serde_json::{Value, json};

impl Proxy {
    /// Sends `method` with `params` to the server; its result as `T`.
    pub(super) async fn pass<T: serde::de::DeserializeOwned>(
        &self,
        method: &str,
        params: Value,
    ) -> Result<T, ErrorData> {
        let up = self.upstream().await?;
        let req: ClientRequest =
            serde_json::from_value(json!({"method": method, "params": params}))
                .map_err(|e| ErrorData::invalid_params(format!("{method}: {e}"), None))?;
        let r = up
            .send_request(req)
            .await
            .map_err(|e| self.upstream_err(e))?;
        let v =
            serde_json::to_value(r).map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        serde_json::from_value(v).map_err(|e| {
            ErrorData::internal_error(
                format!("the server's answer to {method} is not valid: {e}"),
                None,
            )
        })
    }
}

/// The params of a request as JSON (`{}` for none).
pub(super) fn params<P: serde::Serialize>(p: Option<P>) -> Value {
    p.and_then(|p| serde_json::to_value(p).ok())
        .unwrap_or_else(|| json!({}))
}
