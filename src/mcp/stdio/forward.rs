//! A client's requests forwarded to the server's `/mcp` and their answers relayed back as
//! the server wrote them: one JSON answer or an SSE stream (resumed from its last event id when
//! the server closes it early), and the session's GET stream followed for what the server sends
//! outside requests.

use super::*;

pub(super) fn is_sse(r: &reqwest::Response) -> bool {
    r.headers()
        .get("content-type")
        .is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"))
}

impl Relay {
    /// A request of the client, until it is answered or `cancel`led (its stream closed).
    pub(super) async fn request(
        self: Arc<Self>,
        msg: Value,
        body: Vec<u8>,
        cancel: CancellationToken,
    ) {
        let key = msg.get("id").map(Value::to_string);
        tokio::select! {
            _ = cancel.cancelled() => {}
            _ = self.ask(msg, body) => {}
        }
        if let Some(k) = key {
            self.inflight.lock().unwrap().remove(&k);
        }
    }

    /// A request of the client: posted, and every message of its answer written back. A
    /// session the server no longer knows is opened again, and the request posted again once.
    /// A read whose answer is lost (the server went away while it answered: it restarted) is
    /// posted again as the server comes back, for up to [`READ_AGAIN`]; a write is not, as it
    /// may have been done.
    pub(super) async fn ask(&self, msg: Value, body: Vec<u8>) {
        let id = msg.get("id").cloned().unwrap_or(Value::Null);
        let method = msg.get("method").and_then(Value::as_str);
        let read = method.is_some_and(is_read);
        let (mut reopened, mut lost_until) = (false, None);
        loop {
            let why = match self.ask_once(&msg, &body, &id, method).await {
                Ok(()) => return,
                Err(Failed::Gone(stale)) if !reopened => {
                    reopened = true;
                    match self.reopen(&stale).await {
                        Ok(()) => continue,
                        Err(why) => why,
                    }
                }
                Err(Failed::Gone(_)) => format!("{} does not know the session", self.url),
                Err(Failed::Lost(why)) if read => {
                    let until =
                        *lost_until.get_or_insert_with(|| tokio::time::Instant::now() + READ_AGAIN);
                    if tokio::time::Instant::now() < until {
                        tokio::time::sleep(WAIT).await;
                        continue;
                    }
                    why
                }
                Err(Failed::Lost(why) | Failed::Refused(why)) => why,
            };
            return self.say(refusal(&id, -32603, why)).await;
        }
    }

    /// One post of a request, and its answer written back.
    pub(super) async fn ask_once(
        &self,
        msg: &Value,
        body: &[u8],
        id: &Value,
        method: Option<&str>,
    ) -> Result<(), Failed> {
        let sessionless = !era_headers(msg).is_empty();
        let session = self.session().filter(|_| !sessionless);
        let r = self
            .post(msg, body, session.as_ref())
            .await
            .map_err(Failed::Lost)?;
        if r.status() == reqwest::StatusCode::NOT_FOUND
            && let Some(stale) = session
        {
            return Err(Failed::Gone(stale));
        }
        if !r.status().is_success() {
            return Err(Failed::Refused(self.refused(r, id).await));
        }
        if r.status() == reqwest::StatusCode::ACCEPTED {
            return Ok(());
        }
        if !is_sse(&r) {
            let t = r
                .text()
                .await
                .map_err(|e| Failed::Lost(plain::error_words(&self.url, Who::Engine, &e)))?;
            self.schemas.learn(method, &t);
            self.say(one_line(t.trim().to_string())).await;
            return Ok(());
        }
        let mut answer = None;
        self.relay_stream(r, Some(id), &mut answer, session.as_ref())
            .await
            .map_err(Failed::Lost)?;
        if let Some(a) = answer {
            self.schemas.learn(method, &a);
            self.say(a).await;
        }
        Ok(())
    }

    /// Writes back every message of an SSE response; the one answering `id` (if any) is kept in
    /// `answer` instead. A stream that ends before that answer is resumed (with `session`)
    /// from its last event.
    pub(super) async fn relay_stream(
        &self,
        r: reqwest::Response,
        id: Option<&Value>,
        answer: &mut Option<String>,
        session: Option<&Session>,
    ) -> Result<(), Words> {
        let mut r = r;
        let (mut last, mut wait) = (None::<String>, WAIT);
        for _ in 0..=MAX_RESUMES {
            let mut events = sse_stream::SseStream::from_bytes_stream(r.bytes_stream());
            while let Some(Ok(ev)) = events.next().await {
                last = ev.id.or(last);
                if let Some(ms) = ev.retry {
                    wait = Duration::from_millis(ms).min(MAX_WAIT);
                }
                let Some(data) = ev.data.filter(|d| !d.trim().is_empty()) else {
                    continue;
                };
                if data.len() > MAX_MESSAGE {
                    continue;
                }
                if id.is_some_and(|id| answers(&data, id)) {
                    *answer = Some(one_line(data));
                    return Ok(());
                }
                self.say(one_line(data)).await;
            }
            if id.is_none() {
                return Ok(());
            }
            let Some(from) = last.clone() else {
                return Err(format!("{} closed the stream before answering", self.url));
            };
            tokio::time::sleep(wait).await;
            r = self
                .to_server(reqwest::Method::GET, session)
                .header("last-event-id", from)
                .send()
                .await
                .map_err(|e| plain::error_words(&self.url, Who::Engine, &e))?;
            if !r.status().is_success() {
                return Err(plain::http_status(
                    &self.url,
                    Who::Engine,
                    r.status().as_u16(),
                ));
            }
        }
        Err(format!(
            "{} closed the request's stream {MAX_RESUMES} times before answering",
            self.url
        ))
    }

    /// A notification or an answer of the client: posted (a session the server no longer
    /// knows is opened again first).
    pub(super) async fn pass(&self, msg: &Value, body: &[u8]) {
        let session = self.session();
        if let Ok(r) = self.post(msg, body, session.as_ref()).await
            && r.status() == reqwest::StatusCode::NOT_FOUND
            && let Some(stale) = session
            && self.reopen(&stale).await.is_ok()
        {
            let _ = self.post(msg, body, self.session().as_ref()).await;
        }
    }

    /// The session's own stream (`GET`): every message written back, kept open, resumed from
    /// its last event, and opened again on a new session if the server restarted.
    pub(super) async fn follow(self: Arc<Self>) {
        let (mut last, mut on, mut wait) = (None::<String>, None::<Session>, WAIT);
        loop {
            let Some(session) = self.session() else {
                return;
            };
            if on.as_ref() != Some(&session) {
                (last, on) = (None, Some(session.clone()));
            }
            let mut get = self.to_server(reqwest::Method::GET, Some(&session));
            if let Some(l) = &last {
                get = get.header("last-event-id", l);
            }
            let r = match get.send().await {
                Ok(r) => r,
                // The server is away (restarting?): asked again, less and less often.
                Err(_) => {
                    tokio::time::sleep(wait).await;
                    wait = (wait * 2).min(MAX_WAIT);
                    continue;
                }
            };
            match r.status().as_u16() {
                404 => {
                    if self.reopen(&session).await.is_err() {
                        tokio::time::sleep(wait).await;
                        wait = (wait * 2).min(MAX_WAIT);
                    }
                    continue;
                }
                405 => return,
                s if !(200..300).contains(&s) || !is_sse(&r) => {
                    tokio::time::sleep(MAX_WAIT).await;
                    continue;
                }
                _ => wait = WAIT,
            }
            let mut events = sse_stream::SseStream::from_bytes_stream(r.bytes_stream());
            while let Some(Ok(ev)) = events.next().await {
                last = ev.id.or(last);
                if let Some(data) = ev.data.filter(|d| !d.trim().is_empty())
                    && data.len() <= MAX_MESSAGE
                {
                    self.say(one_line(data)).await;
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}
