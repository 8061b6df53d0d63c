//! The span queue between the request path and the collector: a bounded channel
//! (`OTEL_BSP_MAX_QUEUE_SIZE`, 2048) that a span ending never waits on, and one thread that
//! exports its batches (`OTEL_BSP_MAX_EXPORT_BATCH_SIZE`, 512, at least every
//! `OTEL_BSP_SCHEDULE_DELAY`, 5 s) through the OTLP exporter. A full queue drops the span and
//! counts it (`datanotes_trace_spans_dropped_total`); a collector unreachable, slow or refusing
//! costs the requests nothing, its failed batches are counted
//! (`datanotes_trace_export_failures_total`), and the log says so once per episode, not per span.
//!
//! The SDK's own batch processor does the same but neither counts what it drops where the
//! owner can see it nor says so in the engine's log.

use super::metrics::metrics;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{Span, SpanData, SpanExporter, SpanProcessor};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TrySendError, sync_channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

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

#[derive(Default)]
struct Shared {
    stopping: AtomicBool,
    /// Said in the log since the queue last emptied.
    said_full: AtomicBool,
    /// The resource the provider gives, handed to the exporter before its next batch.
    resource: Mutex<Option<Resource>>,
}

#[derive(Debug)]
pub(super) struct Queue {
    tx: SyncSender<SpanData>,
    shared: Arc<Shared>,
    worker: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Shared")
    }
}

impl Queue {
    pub(super) fn start<E: SpanExporter + 'static>(exporter: E) -> Queue {
        let knobs = Knobs::from_env();
        let (tx, rx) = sync_channel(knobs.queue);
        let shared = Arc::new(Shared::default());
        let s = shared.clone();
        let worker = std::thread::Builder::new()
            .name("trace-export".into())
            .spawn(move || run(exporter, rx, s, knobs))
            .ok();
        Queue {
            tx,
            shared,
            worker: Mutex::new(worker),
        }
    }
}

impl SpanProcessor for Queue {
    fn on_start(&self, _span: &mut Span, _cx: &opentelemetry::Context) {}

    fn on_end(&self, span: SpanData) {
        if !span.span_context.is_sampled() || self.shared.stopping.load(Ordering::Relaxed) {
            return;
        }
        if let Err(TrySendError::Full(_)) = self.tx.try_send(span) {
            metrics().span_dropped();
            if !self.shared.said_full.swap(true, Ordering::Relaxed) {
                tracing::warn!(
                    "the trace export queue is full (the collector is slow or unreachable): \
                     spans are dropped and counted in datanotes_trace_spans_dropped_total"
                );
            }
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        Ok(())
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.shared.stopping.store(true, Ordering::Relaxed);
        let Some(worker) = self.worker.lock().unwrap().take() else {
            return Ok(());
        };
        // The worker exports what is queued, then ends; a collector that does not answer is
        // not waited for beyond `timeout`.
        let (done, wait) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = worker.join();
            let _ = done.send(());
        });
        let _ = wait.recv_timeout(timeout);
        Ok(())
    }

    fn set_resource(&mut self, resource: &Resource) {
        *self.shared.resource.lock().unwrap() = Some(resource.clone());
    }
}

fn run<E: SpanExporter>(mut exporter: E, rx: Receiver<SpanData>, shared: Arc<Shared>, k: Knobs) {
    let mut failing = false;
    let mut batch = Vec::with_capacity(k.batch);
    loop {
        let deadline = Instant::now() + k.delay;
        let mut gone = false;
        while batch.len() < k.batch && !shared.stopping.load(Ordering::Relaxed) {
            let left = deadline.saturating_duration_since(Instant::now());
            // Wake now and then to see a stop.
            match rx.recv_timeout(left.min(Duration::from_millis(100))) {
                Ok(s) => batch.push(s),
                Err(RecvTimeoutError::Timeout) if Instant::now() >= deadline => break,
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => {
                    gone = true;
                    break;
                }
            }
        }
        let stopping = gone || shared.stopping.load(Ordering::Relaxed);
        if stopping {
            batch.extend(rx.try_iter());
        }
        if let Some(r) = shared.resource.lock().unwrap().take() {
            exporter.set_resource(&r);
        }
        // The queue emptied: a new episode of a full queue is said again.
        if batch.len() < k.batch {
            shared.said_full.store(false, Ordering::Relaxed);
        }
        if !batch.is_empty() {
            let n = batch.len();
            match block_on(exporter.export(std::mem::take(&mut batch))) {
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
            batch = Vec::with_capacity(k.batch);
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
