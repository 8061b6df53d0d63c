//! The writer's queue: one FIFO of jobs (in the order they were handed over, events and writes
//! alike), with a wake-up rule that spares the writer thread a wake per tool-call event.
//!
//! A job someone waits for (a write) wakes the writer at once. An event (nobody waits for it)
//! wakes it only when it is idle; while it gathers an interval's events ([`Queue::gather`]) the
//! next events are queued without a wake, and the interval ends at its deadline, at the first
//! job that is not an event, or when a batch's worth of jobs is waiting.
//!
//! An event's report is encoded once, on the writer. On a batch nobody waits for, the writer yields
//! its core every 20 µs of event work, as the calls it reports on share that core.

use super::{Job, MAX_BATCH};
use std::collections::VecDeque;
use std::sync::{Condvar, Mutex};
use std::time::Instant;

/// What the writer is handed.
pub(super) enum Msg {
    Job(Box<Job>),
    Stop,
}

impl Msg {
    /// An event nobody waits for: it does not end an interval of events.
    fn quiet(&self) -> bool {
        matches!(self, Msg::Job(j) if j.quiet())
    }
}

#[derive(Default)]
struct State {
    msgs: VecDeque<Msg>,
    /// Messages in `msgs` that are not quiet.
    loud: usize,
    /// The writer sleeps in [`Queue::recv`] (any message wakes it).
    waiting: bool,
    /// The writer sleeps in [`Queue::gather`] (only a loud message, or a full batch, wakes it).
    gathering: bool,
    /// The writer thread is gone: nothing is taken any more.
    closed: bool,
}

#[derive(Default)]
pub(super) struct Queue {
    state: Mutex<State>,
    ready: Condvar,
}

impl Queue {
    /// Queues a message, waking the writer if it waits for this one; false once the writer
    /// thread is gone (the message is dropped: a caller waiting for its answer learns it).
    pub(super) fn push(&self, m: Msg) -> bool {
        let quiet = m.quiet();
        let mut s = self.state.lock().unwrap();
        if s.closed {
            return false;
        }
        s.msgs.push_back(m);
        if !quiet {
            s.loud += 1;
        }
        let wake = s.waiting || (s.gathering && (!quiet || s.msgs.len() >= MAX_BATCH));
        drop(s);
        if wake {
            self.ready.notify_one();
        }
        true
    }

    /// The writer thread ends (stopped, or panicked): what is still queued is dropped.
    pub(super) fn close(&self) {
        let mut s = self.state.lock().unwrap();
        s.closed = true;
        s.loud = 0;
        let left = std::mem::take(&mut s.msgs);
        drop(s);
        drop(left);
    }

    fn pop(s: &mut State) -> Option<Msg> {
        let m = s.msgs.pop_front()?;
        if !m.quiet() {
            s.loud -= 1;
        }
        Some(m)
    }

    /// The next message, waiting for one (until `deadline`, if any: then `None`).
    pub(super) fn recv(&self, deadline: Option<Instant>) -> Option<Msg> {
        let mut s = self.state.lock().unwrap();
        loop {
            if let Some(m) = Self::pop(&mut s) {
                return Some(m);
            }
            s.waiting = true;
            s = match deadline {
                None => self.ready.wait(s).unwrap(),
                Some(d) => {
                    let left = d.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        s.waiting = false;
                        return None;
                    }
                    self.ready.wait_timeout(s, left).unwrap().0
                }
            };
            s.waiting = false;
        }
    }

    /// The next message if there is one.
    pub(super) fn try_recv(&self) -> Option<Msg> {
        Self::pop(&mut self.state.lock().unwrap())
    }

    /// Sleeps until `deadline`, while only events arrive (queued, not taken), and fewer than a
    /// batch of them.
    pub(super) fn gather(&self, deadline: Instant) {
        let mut s = self.state.lock().unwrap();
        while s.loud == 0 && s.msgs.len() < MAX_BATCH {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            s.gathering = true;
            s = self.ready.wait_timeout(s, left).unwrap().0;
            s.gathering = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{Actor, Cmd, EventCall};
    use serde_json::Value;
    use std::sync::Arc;
    use std::time::Duration;

    fn event(n: i64) -> Msg {
        Msg::Job(Box::new(Job {
            cmd: Cmd::Event {
                op: crate::engine::Op::ToolCall,
                call: EventCall::later(move || Ok(serde_json::value::to_raw_value(&n).unwrap())),
            },
            actor: Actor::default(),
            reply: None,
            trace: None,
        }))
    }

    fn write() -> (Msg, std::sync::mpsc::Receiver<crate::error::Result<Value>>) {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let job = Job {
            cmd: Cmd::Scan {
                table: None,
                id: None,
            },
            actor: Actor::default(),
            reply: Some(tx),
            trace: None,
        };
        (Msg::Job(Box::new(job)), rx)
    }

    /// What a message is: an event's number, or -1 for a write.
    fn what(m: Msg) -> i64 {
        match m {
            Msg::Job(j) => match j.cmd {
                Cmd::Event { call, .. } => (call.0)().unwrap().get().parse::<i64>().unwrap(),
                _ => -1,
            },
            Msg::Stop => -2,
        }
    }

    /// Events and writes come out in the order they went in; events queued during an interval
    /// stay there (in order) until it ends, and a write ends it at once.
    #[test]
    fn messages_keep_their_order_and_a_write_ends_an_interval_of_events() {
        let q = Arc::new(Queue::default());
        q.push(event(0));
        let (w, _rx) = write();
        q.push(w);
        q.push(event(1));
        let got: Vec<i64> = std::iter::from_fn(|| q.try_recv()).map(what).collect();
        assert_eq!(got, vec![0, -1, 1]);

        let q2 = q.clone();
        let pusher = std::thread::spawn(move || {
            for i in 0..10 {
                q2.push(event(i));
            }
            std::thread::sleep(Duration::from_millis(50));
            let (w, rx) = write();
            q2.push(w);
            rx
        });
        let t0 = Instant::now();
        // An interval far longer than the test: only the write ends it.
        q.gather(t0 + Duration::from_secs(60));
        assert!(t0.elapsed() < Duration::from_secs(30));
        let _rx = pusher.join().unwrap();
        let got: Vec<i64> = std::iter::from_fn(|| q.try_recv()).map(what).collect();
        let mut want: Vec<i64> = (0..10).collect();
        want.push(-1);
        assert_eq!(got, want);
    }

    /// Once the writer is gone, nothing is queued, and a caller waiting for an answer learns it.
    #[test]
    fn a_closed_queue_takes_nothing_and_drops_what_it_held() {
        let q = Queue::default();
        let (w, rx) = write();
        assert!(q.push(w));
        q.close();
        assert!(rx.recv().is_err());
        assert!(!q.push(event(1)));
        assert!(q.try_recv().is_none());
    }
}
