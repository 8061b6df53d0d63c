//! An app's requests to a client of protocol 2026-07-28, turned into that version's multi
//! round-trip requests (SEP-2322). Such a client takes no request from a server: when an app
//! asks something during a call (`sampling/createMessage`, `elicitation/create`, `roots/list`,
//! sent as the earlier versions do), the call's answer is an `InputRequiredResult` naming the
//! request and carrying a `requestState`; the client answers it and calls again with its
//! `inputResponses` and that state, and the answer goes to the app, whose call has gone on
//! waiting for it. The call runs on in its own task meanwhile ([`Rounds`] keeps it, under an
//! unguessable state given to the caller that made it), for at most the call timeout; one whose
//! client never comes back is cancelled (the app told) when it runs out.
//!
//! The waiting calls are bounded in number ([`MAX_WAITING`]); the oldest goes first.

use super::exact::Exact;
use super::{Shared, calls};
use crate::apps::backend::{ClientAnswer, ClientChannel, ClientRefusal};
use crate::ops::Ctx;
use futures_util::future::BoxFuture;
use rmcp::ErrorData;
use rmcp::model::{CallToolResponse, InputRequiredResult};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

/// Whether the request is of a protocol version that takes input requests as multi round-trip
/// results (2026-07-28 and later) rather than as requests from the server.
pub(super) fn era(rc: &rmcp::service::RequestContext<rmcp::RoleServer>) -> bool {
    rc.extensions
        .get::<http::request::Parts>()
        .and_then(|p| p.headers.get("mcp-protocol-version"))
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v >= "2026-07-28")
}

/// Whether an app's request is one a client of 2026-07-28 can be given as an input request.
pub(super) fn asks_the_client(method: &str) -> bool {
    matches!(
        method,
        "sampling/createMessage" | "elicitation/create" | "roots/list"
    )
}

/// The most calls waiting for their clients' input at once: beyond it, the oldest is
/// cancelled.
const MAX_WAITING: usize = 256;

/// A request of the app, waiting for the client's answer.
struct Ask {
    method: String,
    params: Value,
    answer: oneshot::Sender<Result<Value, ClientRefusal>>,
}

/// The channel of the client's request the call answers now: the one that started it, then
/// each that goes on with it (the earlier ones are answered).
type Current = Arc<Mutex<Option<Arc<dyn ClientChannel>>>>;

/// The caller's side of a call made for a 2026-07-28 client: the app's requests go to the
/// call's driver ([`Rounds::drive`]), which gives them to the client as input requests; its
/// notifications (progress) to the channel of the client's request of the round, if any.
struct Bridge(mpsc::Sender<Ask>, Current);

impl Bridge {
    fn current(&self) -> Option<Arc<dyn ClientChannel>> {
        self.1.lock().unwrap().clone()
    }
}

impl ClientChannel for Bridge {
    fn wants_progress(&self) -> bool {
        self.current().is_some_and(|c| c.wants_progress())
    }

    fn notify<'a>(&'a self, method: &'a str, params: Value) -> BoxFuture<'a, ()> {
        let current = self.current();
        Box::pin(async move {
            if let Some(c) = current {
                c.notify(method, params).await;
            }
        })
    }

    fn request<'a>(&'a self, method: &'a str, params: Value) -> ClientAnswer<'a> {
        Box::pin(async move {
            if !asks_the_client(method) {
                return Err(ClientRefusal::undeclared(method));
            }
            let (answer, got) = oneshot::channel();
            let ask = Ask {
                method: method.to_string(),
                params,
                answer,
            };
            if self.0.send(ask).await.is_err() {
                return Err(went_away("call", method));
            }
            got.await.unwrap_or_else(|_| Err(went_away("call", method)))
        })
    }
}

/// The refusal of an app's request whose client went away before it answered (`of`: "call"
/// or "task").
pub(super) fn went_away(of: &str, method: &str) -> ClientRefusal {
    ClientRefusal {
        code: -32603,
        message: format!("the client of this {of} did not answer {method}: it went away"),
        data: None,
    }
}

/// A call waiting for its client to answer an input request.
struct Waiting {
    /// The calling token's name: only its caller may go on with it.
    caller: String,
    call: Running,
    /// The key of the request asked, and where its answer goes.
    asked: (String, oneshot::Sender<Result<Value, ClientRefusal>>),
    until: tokio::time::Instant,
}

/// A call running in its own task, and the app's requests it makes.
struct Running {
    task: tokio::task::JoinHandle<Result<calls::Served, ErrorData>>,
    asks: mpsc::Receiver<Ask>,
    cancel: CancellationToken,
    /// Where its notifications go.
    client: Current,
}

/// The calls waiting for input, by `requestState`.
#[derive(Default)]
pub(super) struct Rounds(Mutex<HashMap<String, Waiting>>);

impl Rounds {
    /// Starts a call for a 2026-07-28 client (`client`: the channel of its request, for the
    /// app's progress), or goes on with the one `state` names, given the client's
    /// `responses`; answers the call's result or its next input request, each also written
    /// into `exact` as the app wrote it.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn serve(
        &self,
        server: &Shared,
        ctx: Ctx,
        tool: String,
        args: Value,
        state: Option<String>,
        responses: Option<&rmcp::model::InputResponses>,
        limit: Duration,
        client: Option<Arc<dyn ClientChannel>>,
        given_up: CancellationToken,
        exact: Option<Exact>,
    ) -> Result<CallToolResponse, ErrorData> {
        let caller = ctx.caller.token_name();
        let call = match state {
            None => {
                let (tx, asks) = mpsc::channel(4);
                let cancel = CancellationToken::new();
                let current = Arc::new(Mutex::new(client));
                let bridge: Arc<dyn ClientChannel> = Arc::new(Bridge(tx, current.clone()));
                let (server, c) = (server.clone(), cancel.clone());
                let task = tokio::spawn(async move {
                    calls::serve_call(&server, ctx, tool, args, Some(bridge), c, None).await
                });
                Running {
                    task,
                    asks,
                    cancel,
                    client: current,
                }
            }
            Some(state) => {
                let w = self.0.lock().unwrap().remove(&state);
                let Some(w) = w.filter(|w| w.caller == caller) else {
                    return Err(ErrorData::invalid_params(
                        "requestState names no call waiting for input (it ended, ran out of time, or is another caller's): call the tool again without it",
                        None,
                    ));
                };
                // What the app sends from now on belongs to this request.
                *w.call.client.lock().unwrap() = client;
                let (key, answer) = w.asked;
                let given = responses.and_then(|r| r.get(&key)).cloned();
                let _ = answer.send(given.ok_or_else(|| ClientRefusal {
                    code: -32602,
                    message: format!("the client gave no answer to the input request {key}"),
                    data: None,
                }));
                w.call
            }
        };
        self.drive(call, caller, limit, given_up, exact).await
    }

    /// Waits for the call's result or its next request of the client (an input request, the
    /// call kept for the client's next round).
    async fn drive(
        &self,
        mut call: Running,
        caller: String,
        limit: Duration,
        given_up: CancellationToken,
        exact: Option<Exact>,
    ) -> Result<CallToolResponse, ErrorData> {
        let ask = tokio::select! {
            // The client gave up on this round: the call is cancelled (the app told).
            _ = given_up.cancelled() => {
                call.cancel.cancel();
                return Err(ErrorData::internal_error("the call was cancelled", None));
            }
            r = &mut call.task => return finished(r, exact),
            ask = call.asks.recv() => ask,
        };
        let Some(ask) = ask else {
            // The call let go of its channel: its result comes next.
            return finished(call.task.await, exact);
        };
        let request = json!({"method": ask.method, "params": ask.params});
        // One request a round: its method names it.
        let key = ask.method.replace('/', "-");
        let requests = match serde_json::from_value(json!({ key.clone(): request.clone() })) {
            Ok(r) => r,
            Err(e) => {
                let _ = ask.answer.send(Err(ClientRefusal {
                    code: -32602,
                    message: format!("{} cannot be passed to the client: {e}", ask.method),
                    data: None,
                }));
                return Box::pin(self.drive(call, caller, limit, given_up, exact)).await;
            }
        };
        let state = crate::auth::new_token("rs_");
        let result = InputRequiredResult::new(Some(requests), Some(state.clone()));
        // The app's request as it wrote it (rmcp's type reads its numbers as f32).
        if let Some(exact) = exact {
            exact.result(json!({
                "resultType": "input_required",
                "inputRequests": { key.clone(): request },
                "requestState": state,
            }));
        }
        let mut all = self.0.lock().unwrap();
        let now = tokio::time::Instant::now();
        all.retain(|_, w| {
            let keep = w.until > now;
            if !keep {
                w.call.cancel.cancel();
            }
            keep
        });
        for (_, w) in crate::bounded::evict_oldest(&mut *all, MAX_WAITING - 1, |_, w| Some(w.until))
        {
            w.call.cancel.cancel();
        }
        all.insert(
            state,
            Waiting {
                caller,
                call,
                asked: (key, ask.answer),
                until: now + limit,
            },
        );
        Ok(CallToolResponse::InputRequired(result))
    }
}

/// The answer of a call whose task ended, also written into `exact` as the app wrote it.
fn finished(
    r: Result<Result<calls::Served, ErrorData>, tokio::task::JoinError>,
    exact: Option<Exact>,
) -> Result<CallToolResponse, ErrorData> {
    match r {
        Ok(r) => r.map(|served| {
            if let (Some(exact), Some(app)) = (exact, served.written(true)) {
                exact.result(app);
            }
            CallToolResponse::Complete(served.result)
        }),
        Err(_) => Err(ErrorData::internal_error("the call stopped", None)),
    }
}
