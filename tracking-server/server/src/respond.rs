//! Shapes of answers several routes share: JSON written in one buffer, the choice of Arrow by
//! `Accept`, and the `Server-Timing` header.

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
