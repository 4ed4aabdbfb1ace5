//! The API's error type and the one place that maps error kinds to HTTP statuses.

use actix_web::http::StatusCode;
use actix_web::{HttpResponse, ResponseError};
use serde_json::json;

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
    #[error("{0}")]
    UnsupportedMediaType(String),
    #[error("{0}")]
    Unavailable(String),
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
            ApiError::UnsupportedMediaType(_) => "unsupported_media_type",
            ApiError::Unavailable(_) => "unavailable",
            ApiError::Internal(_) => "internal",
        }
    }

    fn field(&self) -> Option<&str> {
        match self {
            ApiError::Invalid { field, .. } | ApiError::Conflict { field, .. } => Some(field),
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
        ApiError::UnsupportedMediaType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
        ApiError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
        ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        status_of(self)
    }

    fn error_response(&self) -> HttpResponse {
        if matches!(self, ApiError::Internal(_)) {
            eprintln!("trainlog: internal error: {self}");
        }
        let mut body = json!({"code": self.code(), "message": self.to_string()});
        if let Some(field) = self.field() {
            body["field"] = json!(field);
        }
        HttpResponse::build(self.status_code()).json(json!({ "error": body }))
    }
}

impl From<trainlog_schema::Error> for ApiError {
    fn from(e: trainlog_schema::Error) -> Self {
        ApiError::Invalid { field: e.field, reason: e.reason }
    }
}

impl From<trainlog_meta::Error> for ApiError {
    fn from(e: trainlog_meta::Error) -> Self {
        use trainlog_meta::Error as M;
        match e {
            M::NotFound { what } => ApiError::NotFound(what),
            M::Invalid { field, reason } => ApiError::Invalid { field, reason },
            M::Conflict { field, reason } => ApiError::Conflict { field, reason },
            other => ApiError::Internal(other.to_string()),
        }
    }
}

impl From<trainlog_store::Error> for ApiError {
    fn from(e: trainlog_store::Error) -> Self {
        use trainlog_store::Error as S;
        match e {
            S::Meta(m) => m.into(),
            S::ShuttingDown => ApiError::Unavailable("the server is shutting down".into()),
            S::Body(reason) => ApiError::invalid("body", reason),
            other => ApiError::Internal(other.to_string()),
        }
    }
}

impl From<actix_web::error::BlockingError> for ApiError {
    fn from(e: actix_web::error::BlockingError) -> Self {
        ApiError::Internal(e.to_string())
    }
}
