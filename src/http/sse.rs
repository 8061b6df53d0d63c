//! `GET /datanotes/changes/stream`: the feed as Server-Sent Events. Each event's `id:` is its
//! seq; a client reconnecting with `Last-Event-ID` resumes right after it. Each consumer pulls
//! from the ring (or the journal when it is behind), so it holds nothing a writer waits for.
//! The feed (`crate::feed`) does the reading, the filters and the cursors; this is the transport.

use super::Authed;
use crate::auth::{self, Access};
use crate::error::Error;
use crate::feed::{self, Change, Filter, check_cursor, read};
use crate::server::{Shared, bearer};
use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

fn list(q: &HashMap<String, String>, k: &str) -> Option<Vec<String>> {
    q.get(k).map(|v| {
        v.split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(String::from)
            .collect()
    })
}

/// The stream: token, access check, filter and cursor (`Last-Event-ID`, else `since`, else the
/// newest seq), then every change after the cursor as one event, with a heartbeat every 15 s.
pub(super) async fn stream(
    State(s): State<Shared>,
    Query(q): Query<HashMap<String, String>>,
    Authed(ctx): Authed,
    headers: HeaderMap,
) -> Result<Response, Error> {
    auth::authorize(&ctx.caller, Access::Read, auth::Target::None)?;
    let filter = Filter::new(list(&q, "ops"), list(&q, "tables"))?;
    let last_id = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .map(str::trim);
    let since = match last_id.or(q.get("since").map(String::as_str)) {
        Some(v) => match v.parse::<i64>() {
            Ok(n) => n,
            Err(_) => {
                return Err(Error::invalid(format!("invalid cursor {v:?}"))
                    .column("since")
                    .hint("a cursor is a seq number"));
            }
        },
        None => s.engine.last_seq(),
    };
    check_cursor(&s.engine, since)?;
    let engine = s.engine.clone();
    let rx = engine.seq.subscribe();
    // The token is checked again before each event: a rotated or deleted token ends the stream.
    let token = (
        s.clone(),
        bearer(&headers).unwrap_or_default().to_string(),
        ctx.caller.clone(),
    );
    let state = (
        engine,
        since,
        rx,
        VecDeque::<Arc<Change>>::new(),
        filter,
        token,
    );
    let events = futures_util::stream::unfold(
        state,
        |(engine, mut cursor, mut rx, mut buf, filter, token)| async move {
            loop {
                if let Some(c) = buf.pop_front() {
                    token.0.identify(&token.1)?;
                    let ev = Event::default()
                        .id(c.seq.to_string())
                        .data(feed::shown(&c, &token.2));
                    let state = (engine, cursor, rx, buf, filter, token);
                    return Some((Ok::<_, Infallible>(ev), state));
                }
                rx.borrow_and_update();
                let (e, f) = (engine.clone(), filter.clone());
                let page = tokio::task::spawn_blocking(move || read(&e, cursor, 500, &f))
                    .await
                    .ok()?
                    .ok()?;
                cursor = page.next;
                if page.changes.is_empty() {
                    rx.changed().await.ok()?;
                } else {
                    buf.extend(page.changes);
                }
            }
        },
    );
    // End the stream when the server shuts down (the client resumes with Last-Event-ID).
    let mut closing = s.closing.subscribe();
    let events = futures_util::StreamExt::take_until(events, async move {
        let _ = closing.wait_for(|c| *c).await;
    });
    Ok(Sse::new(events)
        .keep_alive(
            KeepAlive::new()
                .interval(Duration::from_secs(15))
                .text("heartbeat"),
        )
        .into_response())
}
