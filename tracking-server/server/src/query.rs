//! Query strings: their pairs parsed once, single values and integers read from them, and the
//! page a listing answers.

use crate::error::{ApiError, Result};
use actix_web::{web, HttpRequest};
use trainlog_schema::limits::MAX_PAGE_SIZE;

/// The query string's pairs, in order.
pub(crate) fn query_pairs(req: &HttpRequest) -> Result<Vec<(String, String)>> {
    web::Query::<Vec<(String, String)>>::from_query(req.query_string())
        .map(|q| q.into_inner())
        .map_err(|e| ApiError::invalid("query", e.to_string()))
}

/// The first value of a parameter.
pub(crate) fn query_one<'a>(pairs: &'a [(String, String)], name: &str) -> Option<&'a str> {
    pairs.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
}

/// The first value of a parameter, as an integer.
pub(crate) fn query_int<T: std::str::FromStr>(pairs: &[(String, String)], name: &str) -> Result<Option<T>> {
    query_one(pairs, name)
        .map(|v| v.parse().map_err(|_| ApiError::invalid(name, format!("expected an integer, got {v:?}"))))
        .transpose()
}

/// The size and offset of a page: `limit` (100 by default) and a `page_token` this server gave.
pub(crate) fn page(limit: Option<u32>, token: Option<&str>) -> Result<(u32, u64)> {
    let limit = limit.unwrap_or(100);
    if limit == 0 || limit > MAX_PAGE_SIZE {
        return Err(ApiError::invalid("limit", format!("expected 1 to at most {MAX_PAGE_SIZE}, got {limit}")));
    }
    let offset = match token {
        None | Some("") => 0,
        Some(t) => t.parse().map_err(|_| ApiError::invalid("page_token", "not a page token from this server"))?,
    };
    Ok((limit, offset))
}
