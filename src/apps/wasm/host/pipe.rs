//! A guest's stdout and stderr: kept for the log, never refusing a write.

use std::sync::{Arc, Mutex};

/// A guest's stdout or stderr: kept for the log (the first [`LogPipe::KEEP`] bytes of a call),
/// never refusing a write. (wasmtime's `MemoryOutputPipe` fails writes past its capacity: a guest
/// that printed more than that in one call trapped, Rust's `println!` panicking on a broken pipe.)
#[derive(Clone, Default)]
pub(crate) struct LogPipe(Arc<Mutex<(Vec<u8>, usize)>>);

impl LogPipe {
    const KEEP: usize = 64 << 10;

    fn keep(&self, bytes: &[u8]) {
        let mut g = self.0.lock().unwrap();
        let room = Self::KEEP.saturating_sub(g.0.len());
        let n = room.min(bytes.len());
        g.0.extend_from_slice(&bytes[..n]);
        g.1 += bytes.len() - n;
    }

    /// What was kept since the last take, and how many bytes were dropped after it; empties it.
    pub(in crate::apps::wasm) fn take(&self) -> (Vec<u8>, usize) {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}

impl wasmtime_wasi::cli::IsTerminal for LogPipe {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl wasmtime_wasi::cli::StdoutStream for LogPipe {
    fn p2_stream(&self) -> Box<dyn wasmtime_wasi::p2::OutputStream> {
        Box::new(self.clone())
    }
    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

impl wasmtime_wasi::p2::OutputStream for LogPipe {
    fn write(&mut self, bytes: bytes::Bytes) -> wasmtime_wasi::p2::StreamResult<()> {
        self.keep(&bytes);
        Ok(())
    }
    fn flush(&mut self) -> wasmtime_wasi::p2::StreamResult<()> {
        Ok(())
    }
    fn check_write(&mut self) -> wasmtime_wasi::p2::StreamResult<usize> {
        Ok(Self::KEEP)
    }
}

#[wasmtime_wasi::async_trait]
impl wasmtime_wasi::p2::Pollable for LogPipe {
    async fn ready(&mut self) {}
}

impl tokio::io::AsyncWrite for LogPipe {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        self.keep(buf);
        std::task::Poll::Ready(Ok(buf.len()))
    }
    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }
    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }
}

/// The end of a guest's stderr (at most 600 bytes), without Rust's backtrace advice.
pub(crate) fn stderr_tail(bytes: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(bytes);
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim_end)
        .filter(|l| !l.is_empty() && !l.starts_with("note: run with `RUST_BACKTRACE"))
        .collect();
    let mut out = lines.join("\n");
    if out.len() > 600 {
        let mut cut = out.len() - 600;
        while !out.is_char_boundary(cut) {
            cut += 1;
        }
        out = format!("…{}", &out[cut..]);
    }
    Some(out).filter(|s| !s.is_empty())
}
