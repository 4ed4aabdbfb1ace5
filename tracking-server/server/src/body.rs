//! Request bodies: reading with a size limit and a time limit, the content type checked, and
//! JSON with errors that name the field; streamed uploads checked as their bytes arrive.

use crate::error::{ApiError, Result};
use actix_web::{web, HttpRequest};
use futures::{Stream, StreamExt};
use serde::de::DeserializeOwned;
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Largest request body accepted.
pub const MAX_BODY_BYTES: usize = 64 << 20;

/// How long a body may go without a byte, and the grace a body has before it must keep up
/// `MIN_BODY_BYTES_PER_S` on average: a body that trickles in is answered 408.
/// `trainlog server --body-timeout-s` (`TRAINLOG_BODY_TIMEOUT_S`) changes it.
pub const BODY_TIMEOUT: Duration = Duration::from_secs(30);

/// The average rate a body must keep up past its first `BODY_TIMEOUT`.
pub const MIN_BODY_BYTES_PER_S: u64 = 16 << 10;

/// The body time limit the server was started with, in microseconds; 0 until it is set.
static BODY_TIMEOUT_US: AtomicU64 = AtomicU64::new(0);

/// Sets the body time limit (`trainlog server --body-timeout-s`).
pub fn set_body_timeout(timeout: Duration) {
    BODY_TIMEOUT_US.store(timeout.as_micros().clamp(1, u64::MAX as u128) as u64, Ordering::Relaxed);
}

/// The body time limit the server was started with; else the seconds `TRAINLOG_BODY_TIMEOUT_S`
/// gives, else `BODY_TIMEOUT`.
pub fn body_timeout() -> Duration {
    match BODY_TIMEOUT_US.load(Ordering::Relaxed) {
        0 => {
            static FROM_ENV: OnceLock<Duration> = OnceLock::new();
            *FROM_ENV.get_or_init(|| {
                std::env::var("TRAINLOG_BODY_TIMEOUT_S")
                    .ok()
                    .and_then(|s| s.trim().parse::<f64>().ok())
                    .filter(|s| s.is_finite() && *s > 0.0)
                    .map_or(BODY_TIMEOUT, Duration::from_secs_f64)
            })
        }
        us => Duration::from_micros(us),
    }
}

/// The time a body's bytes have to arrive: none for `body_timeout()`, and past that grace at
/// least `MIN_BODY_BYTES_PER_S` on average.
struct BodyClock {
    started: Instant,
    grace: Duration,
}

impl BodyClock {
    fn start() -> Self {
        Self { started: Instant::now(), grace: body_timeout() }
    }

    /// The next chunk of `payload`, or 408 when it does not come in time.
    async fn next<S, T>(&self, payload: &mut S, received: u64) -> Result<Option<T>>
    where
        S: Stream<Item = T> + Unpin,
    {
        let earned = Duration::from_secs_f64(received as f64 / MIN_BODY_BYTES_PER_S as f64);
        let wait = (self.grace + earned).saturating_sub(self.started.elapsed()).min(self.grace);
        tokio::time::timeout(wait, payload.next()).await.map_err(|_| {
            ApiError::Timeout(format!(
                "the request body did not arrive in time: {received} bytes in {:.0} s; a body may pause at most {} s \
                 and must arrive at {MIN_BODY_BYTES_PER_S} bytes a second or more past its first {} s",
                self.started.elapsed().as_secs_f64(),
                self.grace.as_secs_f64(),
                self.grace.as_secs_f64(),
            ))
        })
    }
}

fn declared_length(req: &HttpRequest) -> Option<u64> {
    req.headers()
        .get(actix_web::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
}

/// Reads the whole body, refusing more than `MAX_BODY_BYTES` without buffering the excess.
/// Refuses a POST whose Content-Type a page of any site may send without a CORS preflight
/// (none, a form's, multipart or `text/plain`), with a body or without: only Origin would stand
/// between such a post and the state it changes. Every body reader calls it; a POST handler that
/// reads no body calls it itself.
pub fn refuse_simple_post(req: &HttpRequest) -> Result<()> {
    if req.method() != actix_web::http::Method::POST {
        return Ok(());
    }
    let essence = req
        .headers()
        .get(actix_web::http::header::CONTENT_TYPE)
        .map(|v| v.to_str().unwrap_or("").split(';').next().unwrap_or("").trim().to_ascii_lowercase());
    match essence.as_deref() {
        None | Some("" | "application/x-www-form-urlencoded" | "multipart/form-data" | "text/plain") => {
            Err(ApiError::UnsupportedMediaType(
                "a POST needs a Content-Type that a web page cannot send without asking first, also with an empty \
                 body: the route's own, application/json or application/vnd.apache.arrow.stream"
                    .into(),
            ))
        }
        Some(_) => Ok(()),
    }
}

/// Reads the body of a POST that takes no fields: empty, or an empty JSON object.
pub async fn empty_body(req: &HttpRequest, payload: web::Payload) -> Result<()> {
    let bytes = json_bytes(req, payload).await?;
    if bytes.trim_ascii().is_empty() {
        return Ok(());
    }
    match parse_json::<serde_json::Value>(&bytes)? {
        serde_json::Value::Object(fields) if fields.is_empty() => Ok(()),
        _ => Err(ApiError::invalid("body", "this route takes no fields: send {} or nothing")),
    }
}

pub async fn read_body(req: &HttpRequest, payload: web::Payload) -> Result<web::Bytes> {
    read_body_within(req, payload, MAX_BODY_BYTES).await
}

/// Reads the whole body, refusing more than `limit` bytes (413, before the excess is read) and a
/// body that does not arrive in time (408).
pub async fn read_body_within(req: &HttpRequest, mut payload: web::Payload, limit: usize) -> Result<web::Bytes> {
    refuse_simple_post(req)?;
    let declared = declared_length(req);
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(ApiError::TooLarge { limit });
    }
    let clock = BodyClock::start();
    let mut body = web::BytesMut::with_capacity(declared.map_or(8192, |n| n as usize).min(limit));
    while let Some(chunk) = clock.next(&mut payload, body.len() as u64).await? {
        let chunk = chunk.map_err(|e| ApiError::invalid("body", format!("could not read the body: {e}")))?;
        if body.len() + chunk.len() > limit {
            return Err(ApiError::TooLarge { limit });
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body.freeze())
}

/// A check of an upload's first bytes (a file type's magic bytes).
pub type HeadCheck = fn(&[u8]) -> Result<()>;

/// What a streamed upload must be: at most `limit` bytes, and its first `head` bytes passing
/// `check`.
pub struct UploadRules {
    pub limit: Option<u64>,
    pub head: usize,
    pub check: Option<HeadCheck>,
}

impl UploadRules {
    /// Any size, any bytes: only the time limit.
    pub const ANY: UploadRules = UploadRules { limit: None, head: 0, check: None };
}

/// Why a checked upload stopped, kept for the handler: the store sees only that the stream failed.
#[derive(Clone, Default)]
pub struct Refusal(Rc<RefCell<Option<ApiError>>>);

impl Refusal {
    /// The refusal when the stream stopped for one, else `other`.
    pub fn or(&self, other: ApiError) -> ApiError {
        self.0.borrow_mut().take().unwrap_or(other)
    }

    fn set(&self, e: ApiError) -> String {
        let text = e.to_string();
        *self.0.borrow_mut() = Some(e);
        text
    }
}

/// A request's body as a stream that follows `rules` and the time limit as the bytes arrive:
/// past the limit, or with a head that fails its check, it fails at once, before the rest is
/// read; the `Refusal` says why.
pub fn checked_upload(
    req: &HttpRequest,
    payload: web::Payload,
    rules: UploadRules,
) -> Result<(impl Stream<Item = std::result::Result<web::Bytes, String>> + Unpin, Refusal)> {
    if let (Some(limit), Some(declared)) = (rules.limit, declared_length(req)) {
        if declared > limit {
            return Err(ApiError::TooLarge { limit: limit as usize });
        }
    }
    let refusal = Refusal::default();
    struct Reading {
        payload: web::Payload,
        clock: BodyClock,
        received: u64,
        head: Option<Vec<u8>>,
        rules: UploadRules,
        refusal: Refusal,
        done: bool,
    }
    let head = (rules.check.is_some() && rules.head > 0).then(|| Vec::with_capacity(rules.head));
    let reading =
        Reading { payload, clock: BodyClock::start(), received: 0, head, rules, refusal: refusal.clone(), done: false };
    let stream = futures::stream::unfold(reading, |mut r| async move {
        if r.done {
            return None;
        }
        let fail = |r: &mut Reading, e: ApiError| {
            r.done = true;
            Err(r.refusal.set(e))
        };
        let item = match r.clock.next(&mut r.payload, r.received).await {
            Err(e) => fail(&mut r, e),
            Ok(None) => {
                // The body ended: a head shorter than the check needs is checked as it is.
                r.done = true;
                match (r.head.take(), r.rules.check) {
                    (Some(head), Some(check)) => match check(&head) {
                        Ok(()) => return None,
                        Err(e) => Err(r.refusal.set(e)),
                    },
                    _ => return None,
                }
            }
            Ok(Some(Err(e))) => fail(&mut r, ApiError::invalid("body", format!("could not read the body: {e}"))),
            Ok(Some(Ok(chunk))) => {
                r.received += chunk.len() as u64;
                if let Some(limit) = r.rules.limit.filter(|&l| r.received > l) {
                    fail(&mut r, ApiError::TooLarge { limit: limit as usize })
                } else {
                    let mut verdict = Ok(());
                    if let Some(head) = r.head.as_mut() {
                        let take = (r.rules.head - head.len()).min(chunk.len());
                        head.extend_from_slice(&chunk[..take]);
                        if head.len() == r.rules.head {
                            if let (Some(check), Some(head)) = (r.rules.check, r.head.take()) {
                                verdict = check(&head);
                            }
                        }
                    }
                    match verdict {
                        Ok(()) => Ok(chunk),
                        Err(e) => fail(&mut r, e),
                    }
                }
            }
        };
        Some((item, r))
    });
    Ok((Box::pin(stream), refusal))
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
    refuse_nul_in(&value)
}

/// Refuses a parsed JSON value holding NUL in any string or key, naming the field.
pub fn refuse_nul_in(value: &serde_json::Value) -> Result<()> {
    match nul_at(value, String::new()) {
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
    json_bytes_within(req, payload, MAX_BODY_BYTES).await
}

/// `json_bytes` with a route's own size limit, smaller than `MAX_BODY_BYTES`.
pub async fn json_bytes_within(req: &HttpRequest, payload: web::Payload, limit: usize) -> Result<web::Bytes> {
    let bytes = read_body_within(req, payload, limit).await?;
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

/// `json_body` with a route's own size limit, smaller than `MAX_BODY_BYTES` where the route's
/// limits imply one: a larger body is refused (413) before it is read further or parsed.
pub async fn json_body_within<T: DeserializeOwned>(
    req: &HttpRequest,
    payload: web::Payload,
    limit: usize,
) -> Result<T> {
    parse_json_object(&json_bytes_within(req, payload, limit).await?)
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
