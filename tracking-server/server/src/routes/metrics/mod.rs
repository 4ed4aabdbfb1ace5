//! Metric series: appending points to a run (JSON or Arrow, acknowledged once in the
//! write-ahead log), reading one run's series as points or buckets, the same metric of several
//! runs, and the grouped query (`grouped`).

mod decode;
mod grouped;
mod wire;

use crate::body::read_body;
use crate::error::{ApiError, Result};
use crate::lookup;
use crate::query::{query_int, query_one, query_pairs};
use crate::respond::{streamed, wants_arrow};
use crate::state::State;
use crate::wire::{KeyText, RunIdText};
use actix_web::{web, HttpRequest, HttpResponse};
use decode::{decode_metrics, metrics_encoding};
use futures::StreamExt;
use std::sync::Arc;
use trainlog_meta::Role;
use trainlog_schema::arrow::ARROW_STREAM_MEDIA_TYPE;
use trainlog_schema::limits::{check_len, MAX_QUERY_RUN_IDS_CHARS};
use trainlog_schema::RunId;
use trainlog_store::StepRange;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/runs/{id}/metrics", web::post().to(log_metrics))
        .route("/runs/{id}/metrics", web::get().to(get_metrics))
        .route("/metrics", web::get().to(get_metrics_many))
        .route("/metrics/query", web::post().to(grouped::query_metrics));
}

/// This resource's operations in the API document.
#[derive(utoipa::OpenApi)]
#[openapi(paths(log_metrics, get_metrics, get_metrics_many, grouped::query_metrics,))]
pub(super) struct Api;

/// Append metric points to a run. Answered once the points are in the write-ahead log.
#[utoipa::path(post, path = "/api/v1/runs/{id}/metrics", tag = "metrics", params(("id" = inline(RunIdText), Path, description = "The run's id.")),
    request_body(content((wire::LogMetrics = "application/json"), ("application/vnd.apache.arrow.stream")),
        description = "JSON, or an Arrow IPC stream with columns key (utf8 or dictionary), step (int64), value (float64) and optionally timestamp (int64). Gzip and zstd Content-Encoding are accepted."),
    responses((status = 200, description = "The points are durable.", body = wire::Accepted)))]
pub(crate) async fn log_metrics(
    state: State,
    path: web::Path<String>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    let (id, project_id) = lookup::writable(&state, &req, &path).await?;
    let bytes = read_body(&req, payload).await?;
    let encoding = metrics_encoding(&req)?;
    let now = trainlog_meta::now_ms();
    let batch = decode_metrics(encoding, bytes, now)?;
    let accepted = batch.points.len();
    let fired = state.rules.check(project_id, &id, &batch, now);
    state.store.append(&id, project_id, batch).await?;
    if !fired.is_empty() {
        crate::rules::raise(state.clone(), id, fired);
    }
    Ok(HttpResponse::Ok().json(wire::Accepted { accepted }))
}

struct SeriesQuery {
    key: trainlog_schema::MetricKey,
    range: StepRange,
    buckets: Option<usize>,
}

fn series_query(pairs: &[(String, String)]) -> Result<SeriesQuery> {
    let key = query_one(pairs, "key").ok_or_else(|| ApiError::invalid("key", "the query parameter is required"))?;
    let key = trainlog_schema::MetricKey::parse("key", key)?;
    let range = StepRange { min: query_int(pairs, "step_min")?, max: query_int(pairs, "step_max")? };
    let buckets: Option<usize> = query_int(pairs, "buckets")?;
    if buckets.is_some_and(|n| n == 0 || n > 100_000) {
        return Err(ApiError::invalid("buckets", "expected 1 to 100000"));
    }
    Ok(SeriesQuery { key, range, buckets })
}

/// Rows of each record batch of a series written as Arrow: each is encoded on its own.
const ARROW_BATCH_ROWS: usize = 1 << 16;

/// Writes a series as an Arrow IPC stream of step, timestamp and value (its columns moved, not
/// copied), in record batches of `ARROW_BATCH_ROWS`.
fn write_arrow_series(series: trainlog_store::Series, out: &mut dyn std::io::Write) -> std::io::Result<()> {
    use arrow_array::{Float64Array, Int64Array, RecordBatch};
    use arrow_schema::{DataType, Field, Schema};
    let schema = Arc::new(Schema::new(vec![
        Field::new("step", DataType::Int64, false),
        Field::new("timestamp", DataType::Int64, false),
        Field::new("value", DataType::Float64, false),
    ]));
    let failed = |e: arrow_schema::ArrowError| std::io::Error::other(e.to_string());
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![
            Arc::new(Int64Array::from(series.steps)),
            Arc::new(Int64Array::from(series.timestamps)),
            Arc::new(Float64Array::from(series.values)),
        ],
    )
    .map_err(failed)?;
    let mut w = arrow_ipc::writer::StreamWriter::try_new(out, &schema).map_err(failed)?;
    for offset in (0..batch.num_rows()).step_by(ARROW_BATCH_ROWS) {
        w.write(&batch.slice(offset, ARROW_BATCH_ROWS.min(batch.num_rows() - offset))).map_err(failed)?;
    }
    w.finish().map_err(failed)
}

/// A read answering more points one by one than `answered`: `what` holds `points`.
fn too_many_answered(what: &str, points: u64, answered: u64) -> ApiError {
    ApiError::OverBudget {
        field: "buckets".into(),
        reason: format!(
            "{what} {points} points, more than the {answered} points a read answers one by one; \
             ask for buckets, or for a shorter step range (step_min, step_max)"
        ),
        limit: answered,
    }
}

/// One metric of a run: every point in a step range, or buckets for a chart. The read is
/// bounded before it starts, as `GET /metrics` bounds it: the series' points (from its summary)
/// at most the query budget, and without buckets at most `MAX_POINTS_ANSWERED` answered.
#[utoipa::path(get, path = "/api/v1/runs/{id}/metrics", tag = "metrics",
    params(("id" = inline(RunIdText), Path, description = "The run's id."), ("key" = inline(KeyText), Query, description = "The metric's key."),
        ("step_min" = Option<i64>, Query), ("step_max" = Option<i64>, Query),
        ("buckets" = Option<u32>, Query, minimum = 1, maximum = 100000, description = "Reduce the series to at most this many buckets.")),
    responses((status = 200, description = "The series. With `Accept: application/vnd.apache.arrow.stream` and no buckets, an Arrow IPC stream of step, timestamp and value.",
        content((wire::MetricSeries = "application/json"), ("application/vnd.apache.arrow.stream")))))]
pub(crate) async fn get_metrics(state: State, path: web::Path<String>, req: HttpRequest) -> Result<HttpResponse> {
    let (id, _) = lookup::readable(&state, &req, &path).await?;
    let q = series_query(&query_pairs(&req)?)?;
    let points = series_points(&state, std::slice::from_ref(&id), &q.key).await?;
    let budget = max_query_points();
    if points > budget {
        return Err(ApiError::OverBudget {
            field: "key".into(),
            reason: format!(
                "the series {} of run {id} holds {points} points, more than the {budget} points one read may cost",
                q.key
            ),
            limit: budget,
        });
    }
    // Without buckets every point is written out: a whole series is checked before it is read,
    // a step range once its points are known.
    let answered = budget.min(MAX_POINTS_ANSWERED);
    if q.buckets.is_none() && q.range == StepRange::default() && points > answered {
        return Err(too_many_answered(&format!("the series {} of run {id} holds", q.key), points, answered));
    }
    let series = state.store.series(&id, &q.key, q.range).await?;
    if q.buckets.is_none() && series.len() as u64 > answered {
        return Err(too_many_answered("the steps asked for hold", series.len() as u64, answered));
    }
    // Bucketing and writing the answer run on the blocking pool, and it is sent as it is written.
    if q.buckets.is_none() && wants_arrow(&req) {
        return Ok(streamed(ARROW_STREAM_MEDIA_TYPE, move |out| write_arrow_series(series, out)));
    }
    let missing_files = state.store.missing_files(&id);
    Ok(streamed("application/json", move |out| {
        let answer =
            wire::MetricSeries { key: q.key.as_str(), body: wire::SeriesBody::new(&series, q.buckets), missing_files };
        serde_json::to_writer(out, &answer).map_err(std::io::Error::from)
    }))
}

/// One metric of several runs.
#[utoipa::path(get, path = "/api/v1/metrics", tag = "metrics",
    params(("key" = inline(KeyText), Query, description = "The metric's key."), ("runs" = String, Query, max_length = 50000, pattern = "^[A-Za-z0-9_-]{1,64}(,[A-Za-z0-9_-]{1,64}){0,999}$", description = "1 to 1,000 comma-separated run ids."),
        ("step_min" = Option<i64>, Query), ("step_max" = Option<i64>, Query),
        ("buckets" = Option<u32>, Query, minimum = 1, maximum = 100000)),
    responses((status = 200, description = "The series, in the order of `runs`.", body = wire::MultiRunSeries)))]
pub(crate) async fn get_metrics_many(state: State, req: HttpRequest) -> Result<HttpResponse> {
    let pairs = query_pairs(&req)?;
    let q = series_query(&pairs)?;
    let runs = query_one(&pairs, "runs").ok_or_else(|| ApiError::invalid("runs", "the query parameter is required"))?;
    check_len("runs", "the list of run ids", runs, MAX_QUERY_RUN_IDS_CHARS)?;
    let ids: Vec<RunId> = runs.split(',').filter(|s| !s.is_empty()).map(lookup::run_id).collect::<Result<_>>()?;
    if ids.is_empty() || ids.len() > 1000 {
        return Err(ApiError::invalid("runs", "give 1 to 1000 comma-separated run ids"));
    }
    // A run named twice is read and answered once.
    let ids = distinct_ids(ids);
    let (key, range) = (&q.key, q.range);
    for id in &ids {
        lookup::run_for(&state, &req, id, Role::Read).await?;
    }
    let budget = match q.buckets {
        Some(_) => max_query_points(),
        None => max_query_points().min(MAX_POINTS_ANSWERED),
    };
    check_points_budget(&state, &ids, key, budget).await?;
    let all: Vec<trainlog_store::Series> = futures::stream::iter(ids.iter().map(|id| {
        let state = &state;
        async move { Ok::<_, ApiError>(state.store.series(id, key, range).await?) }
    }))
    .buffered(SERIES_READS_IN_FLIGHT)
    .collect::<Vec<_>>()
    .await
    .into_iter()
    .collect::<Result<_>>()?;
    // The answer is written on the blocking pool, and sent as it is written.
    Ok(streamed("application/json", move |out| {
        let answer = wire::MultiRunSeries {
            key: q.key.as_str(),
            series: ids
                .iter()
                .zip(&all)
                .map(|(id, series)| wire::RunSeries {
                    run_id: id.as_str(),
                    body: wire::SeriesBody::new(series, q.buckets),
                })
                .collect(),
        };
        serde_json::to_writer(out, &answer).map_err(std::io::Error::from)
    }))
}

/// Points one read of series may cost (`GET /metrics`, `POST /metrics/query`, one run's series
/// and MLflow's history): the point counts of the series asked for, from their summaries, over
/// the distinct runs, checked before any series is read. `trainlog server --max-query-points`
/// (`TRAINLOG_MAX_QUERY_POINTS`) lowers it.
pub const MAX_QUERY_POINTS: u64 = 50_000_000;

/// The budget the server was started with; 0 until it is set.
static QUERY_POINTS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Sets the points budget (`trainlog server --max-query-points`), at most `MAX_QUERY_POINTS`.
pub fn set_max_query_points(points: u64) {
    QUERY_POINTS.store(points.clamp(1, MAX_QUERY_POINTS), std::sync::atomic::Ordering::Relaxed);
}

/// The budget the server was started with; else `MAX_QUERY_POINTS`, or the budget
/// `TRAINLOG_MAX_QUERY_POINTS` gives when it is lower.
pub fn max_query_points() -> u64 {
    match QUERY_POINTS.load(std::sync::atomic::Ordering::Relaxed) {
        0 => {
            static FROM_ENV: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
            *FROM_ENV.get_or_init(|| {
                std::env::var("TRAINLOG_MAX_QUERY_POINTS")
                    .ok()
                    .and_then(|s| s.trim().parse::<u64>().ok())
                    .map_or(MAX_QUERY_POINTS, |n| n.min(MAX_QUERY_POINTS))
            })
        }
        points => points,
    }
}

/// Points `GET /metrics` may answer as points (without `buckets`): each is written out, so the
/// answer is bounded too (about 40 bytes of JSON a point).
pub const MAX_POINTS_ANSWERED: u64 = 5_000_000;

/// Run ids in the order given, each once.
fn distinct_ids(ids: Vec<RunId>) -> Vec<RunId> {
    let mut seen = std::collections::HashSet::with_capacity(ids.len());
    ids.into_iter().filter(|id| seen.insert(id.clone())).collect()
}

/// The points of `key` in `runs` (distinct) together, from their summaries, without reading a series.
pub(super) async fn series_points(state: &State, runs: &[RunId], key: &trainlog_schema::MetricKey) -> Result<u64> {
    let summaries = state.store.summaries_of(runs, |k| k == key.as_str()).await?;
    Ok(summaries
        .values()
        .filter_map(|keys| keys.get(key.as_str()))
        .map(|summary| summary.count)
        .fold(0u64, u64::saturating_add))
}

/// Refuses a read of `key` in `runs` (distinct) whose series hold more points than `budget`,
/// before reading any.
async fn check_points_budget(
    state: &State,
    runs: &[RunId],
    key: &trainlog_schema::MetricKey,
    budget: u64,
) -> Result<()> {
    let points = series_points(state, runs, key).await?;
    if points > budget {
        return Err(ApiError::OverBudget {
            field: "runs".into(),
            reason: format!(
                "the series {key} of these {} runs hold {points} points, more than the {budget} points one query may read; ask for fewer runs",
                runs.len()
            ),
            limit: budget,
        });
    }
    Ok(())
}

/// Series read at once by the routes that read many: their decoding runs on the blocking pool.
const SERIES_READS_IN_FLIGHT: usize = 4;

/// Points of series a grouped query keeps between reading its runs' step extents and bucketing
/// them (24 bytes a point); the series past it are read a second time instead.
const GROUP_POINTS_KEPT: usize = 2 << 20;
