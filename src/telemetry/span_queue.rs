//! The span queue between the request path and the collector: a bounded queue
//! (`OTEL_BSP_MAX_QUEUE_SIZE`, 2048) that a span ending never waits on and that wakes nobody
//! until a batch is ready (a wake per span cost a call more than the span itself), and one
//! thread that exports its batches (`OTEL_BSP_MAX_EXPORT_BATCH_SIZE`, 512, at least every
//! `OTEL_BSP_SCHEDULE_DELAY`, 5 s) through the OTLP exporter. A full queue drops the span and
//! counts it (`datanotes_trace_spans_dropped_total`); a collector unreachable, slow or refusing
//! costs the requests nothing, its failed batches are counted
//! (`datanotes_trace_export_failures_total`), and the log says so once per episode, not per span.
//!
//! The queue holds the engine's own span records ([`Record`], see `trace::Span`); the export
//! thread turns each batch into the SDK's span data for the exporter, so that what a span costs
//! beyond its record is paid off the request's path. (The SDK's own batch processor queues its
//! span data, neither counts what it drops where the owner can see it, nor says so in the
//! engine's log.)

use super::metrics::metrics;
use opentelemetry::InstrumentationScope;
use opentelemetry::KeyValue;
use opentelemetry::trace::{SpanContext, SpanId, SpanKind, Status};
use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanExporter, SpanLinks};
use std::borrow::Cow;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant, SystemTime};

/// What a sampled span records until it ends.
pub(super) struct Record {
    pub parent: SpanId,
    pub parent_remote: bool,
    pub kind: SpanKind,
    pub name: Cow<'static, str>,
    pub start: SystemTime,
    pub attributes: Vec<KeyValue>,
    pub status: Status,
}

/// A span ended, waiting for export.
pub(super) struct Ended {
    pub context: SpanContext,
    pub record: Record,
    pub end: SystemTime,
}

impl Ended {
    /// The SDK's span data, as its exporters take it.
    fn into_data(self, scope: &InstrumentationScope) -> SpanData {
        let r = self.record;
        SpanData {
            span_context: self.context,
            parent_span_id: r.parent,
            parent_span_is_remote: r.parent_remote,
            span_kind: r.kind,
            name: r.name,
            start_time: r.start,
            end_time: self.end,
            attributes: r.attributes,
            dropped_attributes_count: 0,
            events: SpanEvents::default(),
            links: SpanLinks::default(),
            status: r.status,
            instrumentation_scope: scope.clone(),
        }
    }
}

struct Knobs {
    queue: usize,
    batch: usize,
    delay: Duration,
}

fn knob(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .filter(|v| *v > 0)
        .unwrap_or(default)
}

impl Knobs {
    fn from_env() -> Knobs {
        let queue = knob("OTEL_BSP_MAX_QUEUE_SIZE", 2048) as usize;
        Knobs {
            queue,
            batch: (knob("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 512) as usize).min(queue),
            delay: Duration::from_millis(knob("OTEL_BSP_SCHEDULE_DELAY", 5000)),
        }
    }
}

struct Shared {
    knobs: Knobs,
    /// The spans ended and not yet exported, at most `knobs.queue`.
    spans: Mutex<Vec<Ended>>,
    /// Told when a batch is ready or the queue stops: the worker sleeps until then (or its
    /// schedule), so a span ending wakes nobody.
    ready: Condvar,
    stopping: AtomicBool,
    /// Said in the log since the queue last emptied.
    said_full: AtomicBool,
}

pub(super) struct Queue {
    shared: Arc<Shared>,
    worker: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl Queue {
    pub(super) fn start<E: SpanExporter + 'static>(exporter: E) -> Queue {
        let knobs = Knobs::from_env();
        let shared = Arc::new(Shared {
            spans: Mutex::new(Vec::with_capacity(knobs.batch)),
            knobs,
            ready: Condvar::new(),
            stopping: AtomicBool::new(false),
            said_full: AtomicBool::new(false),
        });
        let s = shared.clone();
        let worker = std::thread::Builder::new()
            .name("trace-export".into())
            .spawn(move || run(exporter, s))
            .ok();
        Queue {
            shared,
            worker: Mutex::new(worker),
        }
    }

    /// Queues a span that ended; a full queue drops it (counted).
    pub(super) fn push(&self, span: Ended) {
        let s = &*self.shared;
        if s.stopping.load(Ordering::Relaxed) {
            return;
        }
        let mut spans = s.spans.lock().unwrap();
        if spans.len() >= s.knobs.queue {
            drop(spans);
            metrics().span_dropped();
            if !s.said_full.swap(true, Ordering::Relaxed) {
                tracing::warn!(
                    "the trace export queue is full (the collector is slow or unreachable): \
                     spans are dropped and counted in datanotes_trace_spans_dropped_total"
                );
            }
            return;
        }
        spans.push(span);
        if spans.len() == s.knobs.batch {
            s.ready.notify_one();
        }
    }

    /// Exports what is queued and stops, waiting at most `timeout`.
    pub(super) fn shutdown(&self, timeout: Duration) {
        // Told under the queue's lock, so the worker cannot miss it between seeing `stopping`
        // false and waiting (it would sleep out its schedule, past `timeout`).
        {
            let _spans = self.shared.spans.lock().unwrap();
            self.shared.stopping.store(true, Ordering::Relaxed);
            self.shared.ready.notify_one();
        }
        let Some(worker) = self.worker.lock().unwrap().take() else {
            return;
        };
        // The worker exports what is queued, then ends; a collector that does not answer is
        // not waited for beyond `timeout`.
        let (done, wait) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = worker.join();
            let _ = done.send(());
        });
        let _ = wait.recv_timeout(timeout);
    }
}

/// The next batch: at most `batch` spans, taken once that many are queued, the schedule's
/// delay has passed, or the queue stops (then all that is queued).
fn next_batch(s: &Shared) -> (Vec<Ended>, bool) {
    let k = &s.knobs;
    let deadline = Instant::now() + k.delay;
    let mut spans = s.spans.lock().unwrap();
    loop {
        let stopping = s.stopping.load(Ordering::Relaxed);
        let now = Instant::now();
        if stopping || spans.len() >= k.batch || now >= deadline {
            if stopping || spans.len() <= k.batch {
                let fresh = Vec::with_capacity(k.batch);
                return (std::mem::replace(&mut *spans, fresh), stopping);
            }
            return (spans.drain(..k.batch).collect(), false);
        }
        spans = s.ready.wait_timeout(spans, deadline - now).unwrap().0;
    }
}

fn run<E: SpanExporter>(exporter: E, shared: Arc<Shared>) {
    super::yield_to_requests();
    let mut failing = false;
    let scope = InstrumentationScope::builder("datanotes").build();
    loop {
        let (batch, stopping) = next_batch(&shared);
        // The queue emptied: a new episode of a full queue is said again.
        if batch.len() < shared.knobs.batch {
            shared.said_full.store(false, Ordering::Relaxed);
        }
        if !batch.is_empty() {
            let n = batch.len();
            let batch = batch.into_iter().map(|e| e.into_data(&scope)).collect();
            match block_on(exporter.export(batch)) {
                Ok(()) if failing => {
                    failing = false;
                    tracing::info!("trace export works again");
                }
                Ok(()) => {}
                Err(e) => {
                    metrics().span_export_failed();
                    if !failing {
                        failing = true;
                        tracing::warn!(
                            "trace export failed ({n} spans lost): {e}; further failures are \
                             counted in datanotes_trace_export_failures_total, not logged"
                        );
                    }
                }
            }
        }
        if stopping {
            let _ = exporter.shutdown();
            return;
        }
    }
}

/// Runs an export to its end on this thread: the exporter's blocking HTTP client answers on
/// the first poll; anything else is polled again until it does.
fn block_on<F: std::future::Future>(f: F) -> F::Output {
    let mut f = std::pin::pin!(f);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    loop {
        if let std::task::Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}
