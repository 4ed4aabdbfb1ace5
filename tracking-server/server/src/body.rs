//! Request bodies: reading with a size limit, the content type checked, and JSON with errors
//! that name the field.

use crate::error::{ApiError, Result};
use actix_web::{web, HttpRequest};
use futures::StreamExt;
use serde::de::DeserializeOwned;

/// Largest request body accepted.
pub const MAX_BODY_BYTES: usize = 64 << 20;

/// Reads the whole body, refusing more than `MAX_BODY_BYTES` without buffering the excess.
pub async fn read_body(req: &HttpRequest, mut payload: web::Payload) -> Result<web::Bytes> {
    let declared = req
        .headers()
        .get(actix_web::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|n| n > MAX_BODY_BYTES) {
        return Err(ApiError::TooLarge { limit: MAX_BODY_BYTES });
    }
    let mut body = web::BytesMut::with_capacity(declared.unwrap_or(8192).min(MAX_BODY_BYTES));
    while let Some(chunk) = payload.next().await {
        let chunk = chunk.map_err(|e| ApiError::invalid("body", format!("could not read the body: {e}")))?;
        if body.len() + chunk.len() > MAX_BODY_BYTES {
            return Err(ApiError::TooLarge { limit: MAX_BODY_BYTES });
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body.freeze())
}

/// Parses JSON; on failure, re-parses to name the field at fault (`points[3].value`).
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::invalid("body", "expected a JSON object, got an empty body"));
    }
    refuse_nul(bytes)?;
    match serde_json::from_slice(bytes) {
        Ok(v) => Ok(v),
        Err(_) => {
            let de = &mut serde_json::Deserializer::from_slice(bytes);
            match serde_path_to_error::deserialize::<_, T>(de) {
                Ok(v) => Ok(v),
                Err(e) => {
                    let path = e.path().to_string();
                    let field = if path == "." || path.is_empty() { "body".to_owned() } else { path };
                    Err(ApiError::invalid(field, e.inner().to_string()))
                }
            }
        }
    }
}

/// Refuses JSON whose text (a string or a key) holds a NUL character, which no store keeps
/// alike (PostgreSQL refuses it, C strings end at it). Raw NUL bytes are not JSON; escaped, it is
/// `\u0000`, so only a body holding that is walked to name the field.
pub fn refuse_nul(bytes: &[u8]) -> Result<()> {
    if memchr::memmem::find(bytes, br"\u0000").is_none() {
        return Ok(());
    }
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(bytes) else { return Ok(()) };
    match nul_at(&value, String::new()) {
        Some(field) => Err(ApiError::invalid(
            if field.is_empty() { "body".to_owned() } else { field },
            "text may not hold a NUL character (\\u0000)",
        )),
        None => Ok(()),
    }
}

/// The path of the first string or key holding NUL, `a.b[2]` style.
fn nul_at(value: &serde_json::Value, path: String) -> Option<String> {
    match value {
        serde_json::Value::String(s) => s.contains('\0').then_some(path),
        serde_json::Value::Array(items) => {
            items.iter().enumerate().find_map(|(i, v)| nul_at(v, format!("{path}[{i}]")))
        }
        serde_json::Value::Object(map) => map.iter().find_map(|(k, v)| {
            let here = if path.is_empty() { k.clone() } else { format!("{path}.{k}") };
            if k.contains('\0') {
                Some(here)
            } else {
                nul_at(v, here)
            }
        }),
        _ => None,
    }
}

/// The media type of a JSON request body.
pub const JSON_MEDIA_TYPE: &str = "application/json";

/// The request's media type, lowercased and without parameters (`; charset=utf-8`). A missing
/// or unreadable Content-Type is refused: without one, a browser's cross-origin form or
/// `text/plain` post would reach the handlers without a CORS preflight.
pub(crate) fn media_type(req: &HttpRequest, accepted: &str) -> Result<String> {
    let header = req
        .headers()
        .get(actix_web::http::header::CONTENT_TYPE)
        .ok_or_else(|| ApiError::UnsupportedMediaType(format!("the request has no Content-Type; send {accepted}")))?;
    let value = header.to_str().map_err(|_| {
        ApiError::UnsupportedMediaType(format!("the Content-Type header is not readable text; send {accepted}"))
    })?;
    Ok(value.split(';').next().unwrap_or("").trim().to_ascii_lowercase())
}

/// Refuses a request whose Content-Type is not `application/json`.
fn require_json(req: &HttpRequest) -> Result<()> {
    match media_type(req, JSON_MEDIA_TYPE)?.as_str() {
        JSON_MEDIA_TYPE => Ok(()),
        other => Err(ApiError::UnsupportedMediaType(format!(
            "content type {other:?} is not accepted; send {JSON_MEDIA_TYPE}"
        ))),
    }
}

/// Reads a body sent as `application/json`, refusing any other content type before reading it.
/// Reads a JSON body. An empty body needs no content type: routes whose body is optional take
/// it as absent, the others refuse it as empty.
pub async fn json_bytes(req: &HttpRequest, payload: web::Payload) -> Result<web::Bytes> {
    let bytes = read_body(req, payload).await?;
    if !bytes.is_empty() {
        require_json(req)?;
    }
    Ok(bytes)
}

/// Reads a request body that is one JSON object. Serde would also fill a struct from an array
/// of its fields in order; such bodies are refused.
pub async fn json_body<T: DeserializeOwned>(req: &HttpRequest, payload: web::Payload) -> Result<T> {
    parse_json_object(&json_bytes(req, payload).await?)
}

/// Parses a body that must be one JSON object into `T`.
pub fn parse_json_object<T: DeserializeOwned>(bytes: &[u8]) -> Result<T> {
    match bytes.trim_ascii_start().first() {
        Some(b'{') | None => parse_json(bytes),
        Some(_) => Err(ApiError::invalid("body", "expected a JSON object")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use actix_web::test::TestRequest;

    fn request_with(content_type: &[u8]) -> HttpRequest {
        let value = actix_web::http::header::HeaderValue::from_bytes(content_type).unwrap();
        TestRequest::default().insert_header((actix_web::http::header::CONTENT_TYPE, value)).to_http_request()
    }

    #[test]
    fn nul_in_any_text_is_refused_naming_its_field() {
        let field = |body: &str| match refuse_nul(body.as_bytes()) {
            Err(ApiError::Invalid { field, .. }) => Some(field),
            _ => None,
        };
        assert_eq!(field(r#"{"name": "a\u0000b"}"#).as_deref(), Some("name"));
        assert_eq!(field(r#"{"tags": {"t": ["x", "\u0000"]}}"#).as_deref(), Some("tags.t[1]"));
        assert_eq!(field(r#"{"pa\u0000rams": 1}"#).as_deref(), Some("pa\u{0}rams"));
        assert_eq!(field(r#"{"text": "a literal \\u0000 is kept"}"#), None);
        assert_eq!(field(r#"{"name": "plain"}"#), None);
    }

    #[test]
    fn json_bodies_need_the_json_content_type() {
        for accepted in ["application/json", "application/json; charset=utf-8", "Application/JSON ;charset=UTF-8"] {
            assert!(require_json(&request_with(accepted.as_bytes())).is_ok(), "{accepted}");
        }
        let refused = [
            &b"text/plain"[..],
            b"application/x-www-form-urlencoded",
            b"multipart/form-data; boundary=x",
            b"application/jsonp",
            b"",
            b"application/json\xff",
        ];
        for content_type in refused {
            let err = require_json(&request_with(content_type)).unwrap_err();
            assert!(
                matches!(&err, ApiError::UnsupportedMediaType(m) if m.contains("send application/json")),
                "{content_type:?}: {err:?}"
            );
        }
        let err = require_json(&TestRequest::default().to_http_request()).unwrap_err();
        assert!(matches!(&err, ApiError::UnsupportedMediaType(m) if m.contains("no Content-Type")), "{err:?}");
    }
}
