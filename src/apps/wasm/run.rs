//! Running a guest's work like every call: in a slot of the app's instances, within its
//! `timeout_ms`, unless its caller cancels it (a 0.2 guest is given a grace to return).

use super::*;

/// The work of one call or request in an instance of the app.
pub(super) type Work<T> = BoxFuture<'static, Result<T, WasmError>>;

/// How long a cancelled call of a component that imports `engine.cancelled` may go on, to see
/// it and return, before it is interrupted.
pub(super) const GRACE: Duration = Duration::from_millis(50);

/// A failed call's answer: an error result the caller sees (the app stays reachable).
pub(super) fn error(msg: impl std::fmt::Display) -> Result<Value, BackendError> {
    Ok(json!({"content": [{"type": "text", "text": msg.to_string()}], "isError": true}))
}

/// Runs `fut` unless `cancel` fires first: `None` then, and `fut` is dropped at once (a guest
/// stopped wherever it is, its instance thrown away). Nothing is armed until `fut` waits: a
/// call that ends in its first step only polls it. Once armed, the token is checked before
/// `fut` is polled again, so a guest woken after the cancellation (its epoch tick's yield)
/// does not run another tick. With a `grace`, `fut` goes on for that long after the
/// cancellation (a guest that asks `engine.cancelled` sees it and returns), then is dropped;
/// its answer is `None` all the same.
pub(super) async fn unless_cancelled<T>(
    cancel: &tokio_util::sync::CancellationToken,
    grace: Option<Duration>,
    fut: impl Future<Output = T>,
) -> Option<T> {
    use std::task::Poll;
    let mut fut = std::pin::pin!(fut);
    let mut cancelled = std::pin::pin!(cancel.cancelled());
    let mut armed = false;
    // Set once cancelled, with a grace: when `fut` is dropped.
    let mut ends: Option<std::pin::Pin<Box<tokio::time::Sleep>>> = None;
    std::future::poll_fn(|cx| {
        if armed && ends.is_none() && cancelled.as_mut().poll(cx).is_ready() {
            let Some(g) = grace else {
                return Poll::Ready(None);
            };
            ends = Some(Box::pin(tokio::time::sleep(g)));
        }
        if let Some(e) = ends.as_mut()
            && e.as_mut().poll(cx).is_ready()
        {
            return Poll::Ready(None);
        }
        if let Poll::Ready(r) = fut.as_mut().poll(cx) {
            return Poll::Ready(ends.is_none().then_some(r));
        }
        if !armed {
            armed = true;
            if cancelled.as_mut().poll(cx).is_ready() {
                let Some(g) = grace else {
                    return Poll::Ready(None);
                };
                let mut e = Box::pin(tokio::time::sleep(g));
                if e.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(None);
                }
                ends = Some(e);
            }
        }
        Poll::Pending
    })
    .await
}

/// Runs `fut` until `deadline`; `None` when the deadline came first, `Some(Err)` if it panicked
/// (a host function's panic: the call fails, not the request that made it). The deadline wins a
/// tie: a guest woken after it (by a host call that ended then, its HTTP request bounded by the
/// same deadline, say) is cancelled, not resumed. The timer is only armed once `fut` waits (a
/// call that ends in its first step registers none).
pub(super) async fn until<T>(
    deadline: tokio::time::Instant,
    fut: impl Future<Output = T>,
) -> Option<std::thread::Result<T>> {
    use futures_util::FutureExt;
    use std::task::Poll;
    let mut fut = std::pin::pin!(std::panic::AssertUnwindSafe(fut).catch_unwind());
    let mut sleep = std::pin::pin!(tokio::time::sleep_until(deadline));
    std::future::poll_fn(|cx| {
        if tokio::time::Instant::now() >= deadline {
            return Poll::Ready(None);
        }
        if let Poll::Ready(r) = fut.as_mut().poll(cx) {
            return Poll::Ready(Some(r));
        }
        sleep.as_mut().poll(cx).map(|()| None)
    })
    .await
}

impl WasmApp {
    /// Runs `work` (a tool call, a read) like every call: in a slot, within the app's
    /// `timeout_ms`, unless its caller cancels it. Answers its result or why it failed (the
    /// text the caller reads); `Err` only when the caller cancelled it.
    ///
    /// The work starts on the caller's task and, if it does not end in its first step, goes on
    /// in a task of its own on the guests' runtime: a caller that goes away (a closed
    /// connection) does not cancel it half-way; its timeout does, and so does its caller's
    /// cancellation (`ctx.cancel`: MCP `notifications/cancelled`, a closed MCP request), which
    /// the task watches itself (the caller no longer awaits it then). A component that imports
    /// `engine.cancelled` (0.2) is given [`GRACE`] to return once cancelled, before it is
    /// interrupted: its instance is kept when it does.
    pub(super) async fn run<T: Send + 'static>(
        &self,
        what: String,
        ctx: &CallContext,
        work: impl FnOnce(Arc<Inner>, CallContext, tokio::time::Instant) -> Work<T> + Send + 'static,
    ) -> Result<Result<T, String>, BackendError> {
        // A component that cannot be loaded makes the app unreachable (not a failed call).
        let grace = match self.0.loaded().await {
            Ok(p) => p.shared().grace.then_some(GRACE),
            Err(e) => return Err(e.into()),
        };
        let timeout = Duration::from_millis(self.0.limits.timeout_ms);
        let deadline = tokio::time::Instant::now() + timeout;
        let (me, cc, panicked) = (self.clone(), ctx.clone(), what.clone());
        let mut work = Box::pin(async move {
            let run = async {
                // Waiting for a free instance counts in the call's time too.
                let _permit = match me.slot(deadline).await {
                    Ok(p) => p,
                    Err(e) => return Err(format!("{what}: {e}")),
                };
                // A timeout drops the call's future, which cancels the guest even when it
                // is blocked in a host call (a sleep): its instance is thrown away (a
                // cancelled store is never reused) and the slot is free as soon as this
                // returns.
                match until(deadline, work(me.0.clone(), cc.clone(), deadline)).await {
                    None => Err(WasmError::Timeout {
                        what: what.clone(),
                        ms: timeout.as_millis(),
                    }
                    .to_string()),
                    Some(Err(_)) => Err(WasmError::Panicked(what.clone()).to_string()),
                    Some(Ok(Err(e))) => Err(e.to_string()),
                    Some(Ok(Ok(v))) => Ok(v),
                }
            };
            // A cancellation drops `run` the same way, wherever it is: waiting for a slot,
            // making the instance, spinning (seen at the next epoch tick, when the guest
            // yields) or blocked in a host call (seen at once); after the grace, if any.
            unless_cancelled(&cc.cancel, grace, run)
                .await
                .ok_or_else(BackendError::cancelled)
        });
        // The first step, here: a call that needs no wait (most: a warm instance, guest
        // code that ends before the next epoch tick, at most 10 ms, and no host call that
        // waits) is answered without a hop to the guests' threads and back. A guest that
        // yields (an epoch tick, an engine call, a sleep, an HTTP request) goes on there.
        let first = std::future::poll_fn(|cx| std::task::Poll::Ready(work.as_mut().poll(cx))).await;
        if let std::task::Poll::Ready(r) = first {
            return r;
        }
        let task = self.0.rt.guests.handle().spawn(work);
        task.await
            .unwrap_or_else(|_| Ok(Err(WasmError::Panicked(panicked).to_string())))
    }
}
