//! A run's histograms: recorded in batches, read by key and step range a page at a time.

use super::wire::{HistogramIn, HistogramPage, HistogramView, RecordHistograms, Recorded};
use crate::error::{ApiError, Result};
use crate::lookup;
use crate::query::{query_int, query_one, query_pairs};
use crate::state::{meta, State};
use crate::wire::{KeyText, RunIdText};
use actix_web::{web, HttpRequest, HttpResponse};
use trainlog_meta::HistogramQuery;
use trainlog_schema::limits::{MAX_HISTOGRAMS_PER_REQUEST, MAX_HISTOGRAM_BINS, MAX_KEY_CHARS};
use trainlog_schema::{Histogram, MetricKey};

/// The largest body recording histograms: 1,000 of them, each with a key of 250 characters at 6
/// bytes a character (JSON's `\uXXXX`), 513 edges and 512 counts of at most 25 bytes a number
/// (`-1.7976931348623157e+308,`), and 128 bytes for its step, time and field names: 27,253,000 bytes.
pub(crate) const MAX_RECORD_HISTOGRAMS_BYTES: usize = 26 << 20;
const _: () = assert!(
    MAX_HISTOGRAMS_PER_REQUEST * (6 * MAX_KEY_CHARS + 25 * (2 * MAX_HISTOGRAM_BINS + 1) + 128)
        <= MAX_RECORD_HISTOGRAMS_BYTES
);

/// Record histograms, all or none; one at the key and step of an earlier one replaces it. The
/// body is at most 26 MiB.
#[utoipa::path(post, path = "/api/v1/runs/{id}/histograms", tag = "media",
    params(("id" = inline(RunIdText), Path, description = "The run's id.")),
    request_body = RecordHistograms,
    responses((status = 200, description = "Recorded.", body = Recorded)))]
pub(crate) async fn record_histograms(
    state: State,
    path: web::Path<String>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    let (run, _) = lookup::writable(&state, &req, &path).await?;
    // Within its size cap, its histograms, edges and counts counted as they parse.
    let bytes = crate::body::json_bytes_within(&req, payload, MAX_RECORD_HISTOGRAMS_BYTES).await?;
    let body: RecordHistograms = super::parse_off_workers(bytes).await?;
    let now = trainlog_meta::now_ms();
    let histograms = body
        .histograms
        .into_iter()
        .enumerate()
        .map(|(i, h): (usize, HistogramIn)| {
            let field = format!("histograms[{i}]");
            let parsed = Histogram {
                key: MetricKey::parse(&format!("{field}.key"), &h.key)?,
                step: h.step,
                edges: h.edges,
                counts: h.counts,
                timestamp_ms: h.timestamp.unwrap_or(now),
            };
            parsed.check(&field)?;
            Ok(parsed)
        })
        .collect::<Result<Vec<_>>>()?;
    let recorded = meta(&state, move |m| m.put_histograms(&run, &histograms)).await?;
    Ok(HttpResponse::Ok().json(Recorded { recorded }))
}

/// A run's histograms under a key, by step, a page at a time.
#[utoipa::path(get, path = "/api/v1/runs/{id}/histograms", tag = "media",
    params(("id" = inline(RunIdText), Path, description = "The run's id."),
        ("key" = inline(KeyText), Query, description = "The histogram's key."),
        ("step_min" = Option<i64>, Query, description = "Only histograms at this step or later."),
        ("step_max" = Option<i64>, Query, description = "Only histograms at this step or earlier."),
        ("limit" = Option<u32>, Query, minimum = 1, maximum = 1000, description = "Histograms in a page; 1000 when absent."),
        ("page_token" = Option<String>, Query, pattern = r"^-?[0-9]{0,19}$", description = "The `next_page_token` of the page before.")),
    responses((status = 200, description = "A page of histograms.", body = HistogramPage)))]
pub(crate) async fn list_histograms(state: State, path: web::Path<String>, req: HttpRequest) -> Result<HttpResponse> {
    let (run, _) = lookup::readable(&state, &req, &path).await?;
    let pairs = query_pairs(&req)?;
    let key = query_one(&pairs, "key").ok_or_else(|| ApiError::invalid("key", "the histogram's key is required"))?;
    let key = MetricKey::parse("key", key)?;
    let limit: usize = query_int(&pairs, "limit")?.unwrap_or(MAX_HISTOGRAMS_PER_REQUEST);
    if limit == 0 || limit > MAX_HISTOGRAMS_PER_REQUEST {
        return Err(ApiError::invalid("limit", format!("expected 1 to {MAX_HISTOGRAMS_PER_REQUEST}, got {limit}")));
    }
    let after = match query_one(&pairs, "page_token").filter(|t| !t.is_empty()) {
        Some(t) => {
            Some(t.parse::<i64>().map_err(|_| ApiError::invalid("page_token", "not a page token from this server"))?)
        }
        None => None,
    };
    let query = HistogramQuery {
        key,
        step_min: query_int(&pairs, "step_min")?,
        step_max: query_int(&pairs, "step_max")?,
        after,
        limit: limit + 1,
    };
    let mut rows = meta(&state, move |m| m.histograms(&run, &query)).await?;
    let more = rows.len() > limit;
    rows.truncate(limit);
    let next_page_token = if more { rows.last().map(|h| h.step.to_string()) } else { None };
    let histograms = rows
        .into_iter()
        .map(|h| HistogramView { step: h.step, edges: h.edges, counts: h.counts, timestamp: h.timestamp_ms })
        .collect();
    Ok(HttpResponse::Ok().json(HistogramPage { histograms, next_page_token }))
}
