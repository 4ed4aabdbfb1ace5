//! The API's error type and the one place that maps error kinds to HTTP statuses.

use actix_web::http::StatusCode;
use actix_web::{HttpResponse, ResponseError};
use serde_json::json;
use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("{0} not found")]
    NotFound(String),
    #[error("{field}: {reason}")]
    Invalid { field: String, reason: String },
    #[error("{field}: {reason}")]
    Conflict { field: String, reason: String },
    #[error("the request body is larger than the limit of {limit} bytes")]
    TooLarge { limit: usize },
    /// The work a request asks for is past a budget: `field` names what to ask less of.
    #[error("{field}: {reason}")]
    OverBudget { field: String, reason: String, limit: u64 },
    #[error("{0}")]
    Timeout(String),
    #[error("{0}")]
    UnsupportedMediaType(String),
    #[error("{field}: {reason}")]
    Forbidden { field: String, reason: String },
    #[error("{0}")]
    MisdirectedRequest(String),
    #[error("{0}")]
    Unauthenticated(String),
    #[error("this route does not take {method}; it takes {allow}")]
    MethodNotAllowed { method: String, allow: String },
    #[error("{reason}")]
    TooManyRequests { reason: String, retry_after_s: u64 },
    #[error("{0}")]
    Unavailable(String),
    #[error("{0}")]
    InsufficientStorage(String),
    #[error("{0}")]
    Internal(String),
}

pub type Result<T, E = ApiError> = std::result::Result<T, E>;

impl ApiError {
    pub fn invalid(field: impl Into<String>, reason: impl Into<String>) -> Self {
        Self::Invalid { field: field.into(), reason: reason.into() }
    }

    fn code(&self) -> &'static str {
        match self {
            ApiError::NotFound(_) => "not_found",
            ApiError::Invalid { .. } => "invalid_argument",
            ApiError::Conflict { .. } => "conflict",
            ApiError::TooLarge { .. } => "payload_too_large",
            ApiError::OverBudget { .. } => "over_budget",
            ApiError::Timeout(_) => "request_timeout",
            ApiError::UnsupportedMediaType(_) => "unsupported_media_type",
            ApiError::Forbidden { .. } => "forbidden",
            ApiError::MisdirectedRequest(_) => "misdirected_request",
            ApiError::Unauthenticated(_) => "unauthenticated",
            ApiError::MethodNotAllowed { .. } => "method_not_allowed",
            ApiError::TooManyRequests { .. } => "too_many_requests",
            ApiError::Unavailable(_) => "unavailable",
            ApiError::InsufficientStorage(_) => "insufficient_storage",
            ApiError::Internal(_) => "internal",
        }
    }

    /// The message a client reads. An internal error's own text (a database's, a store's) stays
    /// in the server's log, under a number the answer gives.
    fn public_message(&self) -> String {
        match self {
            ApiError::Internal(detail) => {
                static INCIDENTS: AtomicU64 = AtomicU64::new(1);
                let n = INCIDENTS.fetch_add(1, Ordering::Relaxed);
                tracing::error!("internal error #{n}: {detail}");
                format!("internal error #{n} of this server; its log says more")
            }
            other => other.to_string(),
        }
    }

    /// Seconds after which the same request may succeed, for `Retry-After`.
    fn retry_after(&self) -> Option<u64> {
        match self {
            ApiError::Unavailable(_) | ApiError::InsufficientStorage(_) => Some(1),
            ApiError::TooManyRequests { retry_after_s, .. } => Some(*retry_after_s),
            _ => None,
        }
    }

    fn field(&self) -> Option<&str> {
        match self {
            ApiError::Invalid { field, .. }
            | ApiError::Conflict { field, .. }
            | ApiError::Forbidden { field, .. }
            | ApiError::OverBudget { field, .. } => Some(field),
            ApiError::MisdirectedRequest(_) => Some("Host"),
            ApiError::TooLarge { .. } => Some("body"),
            _ => None,
        }
    }

    /// The limit a refusal for size or work names.
    fn limit(&self) -> Option<u64> {
        match self {
            ApiError::TooLarge { limit } => Some(*limit as u64),
            ApiError::OverBudget { limit, .. } => Some(*limit),
            _ => None,
        }
    }
}

/// Every error kind's HTTP status, in one place.
fn status_of(error: &ApiError) -> StatusCode {
    match error {
        ApiError::NotFound(_) => StatusCode::NOT_FOUND,
        ApiError::Invalid { .. } => StatusCode::BAD_REQUEST,
        ApiError::Conflict { .. } => StatusCode::CONFLICT,
        ApiError::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
        ApiError::OverBudget { .. } => StatusCode::BAD_REQUEST,
        ApiError::Timeout(_) => StatusCode::REQUEST_TIMEOUT,
        ApiError::UnsupportedMediaType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
        ApiError::Forbidden { .. } => StatusCode::FORBIDDEN,
        ApiError::MisdirectedRequest(_) => StatusCode::MISDIRECTED_REQUEST,
        ApiError::Unauthenticated(_) => StatusCode::UNAUTHORIZED,
        ApiError::MethodNotAllowed { .. } => StatusCode::METHOD_NOT_ALLOWED,
        ApiError::TooManyRequests { .. } => StatusCode::TOO_MANY_REQUESTS,
        ApiError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
        ApiError::InsufficientStorage(_) => StatusCode::INSUFFICIENT_STORAGE,
        ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        status_of(self)
    }

    fn error_response(&self) -> HttpResponse {
        count(self.code());
        let mut body = json!({"code": self.code(), "message": self.public_message()});
        if let Some(field) = self.field() {
            body["field"] = json!(field);
        }
        if let Some(limit) = self.limit() {
            body["limit"] = json!(limit);
        }
        let mut response = HttpResponse::build(self.status_code());
        if let Some(seconds) = self.retry_after() {
            // Clients keep the data (the SDKs spool it) and send it again after this long.
            response.insert_header((actix_web::http::header::RETRY_AFTER, seconds.to_string()));
        }
        if let ApiError::Unauthenticated(_) = self {
            response.insert_header((actix_web::http::header::WWW_AUTHENTICATE, "Bearer realm=\"trainlog\""));
        }
        if let ApiError::MethodNotAllowed { allow, .. } = self {
            response.insert_header((actix_web::http::header::ALLOW, allow.as_str()));
        }
        response.json(json!({ "error": body }))
    }
}

/// The prefixes MLflow's clients call: its REST API and its artifact proxy. Errors under them
/// answer in MLflow's shape.
pub const MLFLOW_API_PREFIXES: [&str; 2] = ["/api/2.0/mlflow", "/ajax-api/2.0/mlflow"];
pub const MLFLOW_ARTIFACT_PREFIXES: [&str; 2] = ["/api/2.0/mlflow-artifacts", "/ajax-api/2.0/mlflow-artifacts"];

/// Whether a path is one of the MLflow door's.
pub fn is_mlflow_path(path: &str) -> bool {
    MLFLOW_API_PREFIXES.iter().chain(MLFLOW_ARTIFACT_PREFIXES.iter()).any(|p| path.starts_with(p))
}

/// The MLflow door's answer to an error: the status and `error_code` MLflow's own server gives
/// for the same kind of failure (it answers 400 to an invalid argument and to a conflict alike;
/// handlers name `RESOURCE_ALREADY_EXISTS` where a create meets an existing name).
pub fn mlflow_code(error: &ApiError) -> (StatusCode, &'static str) {
    match error {
        ApiError::NotFound(_) => (StatusCode::NOT_FOUND, "RESOURCE_DOES_NOT_EXIST"),
        ApiError::Invalid { .. }
        | ApiError::Conflict { .. }
        | ApiError::TooLarge { .. }
        | ApiError::OverBudget { .. }
        | ApiError::UnsupportedMediaType(_)
        | ApiError::MisdirectedRequest(_) => (StatusCode::BAD_REQUEST, "INVALID_PARAMETER_VALUE"),
        ApiError::MethodNotAllowed { .. } => (StatusCode::METHOD_NOT_ALLOWED, "ENDPOINT_NOT_FOUND"),
        ApiError::Timeout(_) => (StatusCode::REQUEST_TIMEOUT, "REQUEST_LIMIT_EXCEEDED"),
        ApiError::Forbidden { .. } => (StatusCode::FORBIDDEN, "PERMISSION_DENIED"),
        ApiError::Unauthenticated(_) => (StatusCode::UNAUTHORIZED, "UNAUTHENTICATED"),
        ApiError::TooManyRequests { .. } => (StatusCode::TOO_MANY_REQUESTS, "REQUEST_LIMIT_EXCEEDED"),
        ApiError::Unavailable(_) => (StatusCode::SERVICE_UNAVAILABLE, "TEMPORARILY_UNAVAILABLE"),
        ApiError::InsufficientStorage(_) => (StatusCode::INSUFFICIENT_STORAGE, "RESOURCE_EXHAUSTED"),
        ApiError::Internal(_) => (StatusCode::INTERNAL_SERVER_ERROR, "INTERNAL_ERROR"),
    }
}

/// The MLflow body of an error: `{"error_code", "message"}`, counted like every other.
pub fn mlflow_response(error: &ApiError, code_override: Option<&'static str>) -> HttpResponse {
    count(error.code());
    let (status, code) = mlflow_code(error);
    let mut response = HttpResponse::build(status);
    if let Some(seconds) = error.retry_after() {
        response.insert_header((actix_web::http::header::RETRY_AFTER, seconds.to_string()));
    }
    // MLflow's messages name their parameter in words; the field goes beside them.
    match error {
        ApiError::Invalid { field, reason } | ApiError::Conflict { field, reason } => {
            response.json(json!({"error_code": code_override.unwrap_or(code), "message": reason, "field": field}))
        }
        ApiError::OverBudget { field, reason, limit } => response.json(
            json!({"error_code": code_override.unwrap_or(code), "message": reason, "field": field, "limit": limit}),
        ),
        ApiError::TooLarge { limit } => response.json(json!({
            "error_code": code_override.unwrap_or(code),
            "message": error.public_message(),
            "field": "body",
            "limit": limit
        })),
        _ => response.json(json!({"error_code": code_override.unwrap_or(code), "message": error.public_message()})),
    }
}

impl From<trainlog_schema::Error> for ApiError {
    fn from(e: trainlog_schema::Error) -> Self {
        ApiError::Invalid { field: e.field, reason: e.reason }
    }
}

/// Error answers given since start, by error code.
static ERRORS_BY_CODE: [(&str, AtomicU64); 16] = [
    ("not_found", AtomicU64::new(0)),
    ("invalid_argument", AtomicU64::new(0)),
    ("conflict", AtomicU64::new(0)),
    ("payload_too_large", AtomicU64::new(0)),
    ("over_budget", AtomicU64::new(0)),
    ("request_timeout", AtomicU64::new(0)),
    ("unsupported_media_type", AtomicU64::new(0)),
    ("forbidden", AtomicU64::new(0)),
    ("misdirected_request", AtomicU64::new(0)),
    ("unauthenticated", AtomicU64::new(0)),
    ("method_not_allowed", AtomicU64::new(0)),
    ("too_many_requests", AtomicU64::new(0)),
    ("unavailable", AtomicU64::new(0)),
    ("insufficient_storage", AtomicU64::new(0)),
    ("internal", AtomicU64::new(0)),
    ("other", AtomicU64::new(0)),
];

fn count(code: &str) {
    let slot = ERRORS_BY_CODE.iter().find(|(c, _)| *c == code).unwrap_or(&ERRORS_BY_CODE[ERRORS_BY_CODE.len() - 1]);
    slot.1.fetch_add(1, Ordering::Relaxed);
}

/// How many error answers of each code were given since start.
pub fn error_counts() -> Vec<(&'static str, u64)> {
    ERRORS_BY_CODE.iter().map(|(code, n)| (*code, n.load(Ordering::Relaxed))).collect()
}

impl From<trainlog_meta::Error> for ApiError {
    fn from(e: trainlog_meta::Error) -> Self {
        use trainlog_meta::Error as M;
        if e.is_disk_full() {
            return ApiError::InsufficientStorage(format!("the data disk is full: {e}; free space and retry"));
        }
        if e.is_unavailable() {
            return ApiError::Unavailable(e.to_string());
        }
        match e {
            M::NotFound { what } => ApiError::NotFound(what),
            M::Invalid { field, reason } => ApiError::Invalid { field, reason },
            M::Conflict { field, reason } => ApiError::Conflict { field, reason },
            M::Forbidden { field, reason } => ApiError::Forbidden { field, reason },
            other => ApiError::Internal(other.to_string()),
        }
    }
}

impl From<trainlog_meta::search::mlflow::FilterRewriteError> for ApiError {
    fn from(e: trainlog_meta::search::mlflow::FilterRewriteError) -> Self {
        ApiError::invalid(e.field, e.message)
    }
}

impl From<trainlog_store::Error> for ApiError {
    fn from(e: trainlog_store::Error) -> Self {
        use trainlog_store::Error as S;
        if e.is_disk_full() {
            return ApiError::InsufficientStorage(format!("the data disk is full: {e}; free space and retry"));
        }
        match e {
            S::Meta(m) => m.into(),
            S::ShuttingDown => ApiError::Unavailable("the server is shutting down".into()),
            S::Body(reason) => ApiError::invalid("body", reason),
            S::Backpressure(b @ trainlog_store::Backpressure::BlobBeingDeleted { .. }) => {
                ApiError::Unavailable(b.to_string())
            }
            S::Backpressure(b) => ApiError::Unavailable(format!("{b}; send the batch again later")),
            other => ApiError::Internal(other.to_string()),
        }
    }
}

impl From<actix_web::error::BlockingError> for ApiError {
    fn from(e: actix_web::error::BlockingError) -> Self {
        ApiError::Internal(e.to_string())
    }
}
