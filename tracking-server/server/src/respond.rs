//! Shapes of answers several routes share: JSON written in one buffer, long answers written on
//! the blocking pool and sent as they are written, the choice of Arrow by `Accept`, and the
//! `Server-Timing` header.

use crate::error::{ApiError, Result};
use actix_web::http::header::{self, HeaderName, HeaderValue};
use actix_web::{HttpRequest, HttpResponse};
use trainlog_schema::arrow::ARROW_STREAM_MEDIA_TYPE;

/// An answer as JSON, written in one buffer.
pub(crate) fn json_answer(answer: &impl serde::Serialize) -> Result<HttpResponse> {
    let mut out = Vec::with_capacity(4096);
    serde_json::to_writer(&mut out, answer).map_err(|e| ApiError::Internal(e.to_string()))?;
    Ok(HttpResponse::Ok().content_type("application/json").body(out))
}

/// Bytes of a streamed answer written before they are sent.
const STREAMED_CHUNK_BYTES: usize = 1 << 20;

/// Chunks of a streamed answer written and not yet sent: the memory it holds besides its source.
const STREAMED_CHUNKS_AHEAD: usize = 4;

/// A long answer written by `write` on the blocking pool and sent as it is written, a chunk at a
/// time: the workers keep answering other requests, and the answer never sits whole in memory.
/// A client that goes away stops the writing at its next chunk.
pub(crate) fn streamed(
    content_type: &'static str,
    write: impl FnOnce(&mut dyn std::io::Write) -> std::io::Result<()> + Send + 'static,
) -> HttpResponse {
    type Chunk = std::result::Result<actix_web::web::Bytes, ApiError>;
    let (tx, rx) = tokio::sync::mpsc::channel::<Chunk>(STREAMED_CHUNKS_AHEAD);
    tokio::task::spawn_blocking(move || {
        let mut out = ChunkWriter { tx, buf: Vec::with_capacity(STREAMED_CHUNK_BYTES) };
        if let Err(e) = write(&mut out).and_then(|()| out.send()) {
            // The status is sent: a failure can only cut the answer short, which the client sees.
            let _ = out.tx.blocking_send(Err(ApiError::Internal(format!("writing the answer: {e}"))));
        }
    });
    let chunks = futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|chunk| (chunk, rx)) });
    HttpResponse::Ok().content_type(content_type).streaming(chunks)
}

/// Collects written bytes into chunks and sends each full one, waiting while the client is behind.
struct ChunkWriter {
    tx: tokio::sync::mpsc::Sender<std::result::Result<actix_web::web::Bytes, ApiError>>,
    buf: Vec<u8>,
}

impl ChunkWriter {
    fn send(&mut self) -> std::io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let chunk = std::mem::replace(&mut self.buf, Vec::with_capacity(STREAMED_CHUNK_BYTES));
        self.tx
            .blocking_send(Ok(actix_web::web::Bytes::from(chunk)))
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::BrokenPipe, "the client went away"))
    }
}

impl std::io::Write for ChunkWriter {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.buf.extend_from_slice(bytes);
        if self.buf.len() >= STREAMED_CHUNK_BYTES {
            self.send()?;
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Whether the client asks for an Arrow IPC stream.
pub(crate) fn wants_arrow(req: &HttpRequest) -> bool {
    req.headers().get(header::ACCEPT).and_then(|v| v.to_str().ok()).is_some_and(|v| v.contains(ARROW_STREAM_MEDIA_TYPE))
}

pub(crate) const SERVER_TIMING: HeaderName = HeaderName::from_static("server-timing");

/// A `Server-Timing` value (W3C) saying how long the server spent on an answer, body included,
/// so a client can tell the server's time from the network's.
pub(crate) fn server_timing(started: std::time::Instant) -> HeaderValue {
    let text = format!("app;dur={:.3}", started.elapsed().as_secs_f64() * 1e3);
    HeaderValue::from_str(&text).unwrap_or_else(|_| HeaderValue::from_static("app"))
}
