//! Route table and request handlers. Handlers parse input into schema types once, call the
//! stores (SQLite work on the blocking pool), and shape JSON; errors go through `ApiError`.

use crate::body::{decode_metrics, json_body, metrics_encoding, read_body};
use crate::error::{ApiError, Result};
use crate::{json, AppState};
use actix_web::http::header;
use actix_web::{web, HttpRequest, HttpResponse};
use futures::StreamExt;
use serde::Deserialize;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::Arc;
use trainlog_meta::{MetaStore, NewRun, Run, RunUpdate};
use trainlog_schema::arrow::ARROW_STREAM_MEDIA_TYPE;
use trainlog_schema::limits::{
    check_count, check_len, MAX_NAME_BYTES, MAX_PAGE_SIZE, MAX_TAGS_PER_REQUEST, MAX_TAG_VALUE_BYTES, MAX_TEXT_BYTES,
};
use trainlog_schema::{flatten_params, ArtifactPath, ProjectName, RunId, RunStatus, TagKey};
use trainlog_store::StepRange;

pub const OPENAPI: &str = include_str!("openapi.json");

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/metrics", web::get().to(crate::metrics::prometheus));
    cfg.service(
        web::scope("/api/v1")
            .route("/health", web::get().to(health))
            .route("/openapi.json", web::get().to(openapi))
            .route("/projects", web::get().to(list_projects))
            .route("/projects", web::post().to(create_project))
            .route("/projects/{name}", web::get().to(get_project))
            .route("/projects/{name}/runs", web::get().to(project_runs))
            .route("/runs", web::post().to(create_run))
            .route("/runs/search", web::post().to(search_runs))
            .route("/runs/{id}", web::get().to(get_run))
            .route("/runs/{id}", web::patch().to(update_run))
            .route("/runs/{id}/params", web::post().to(log_params))
            .route("/runs/{id}/metadata/{section}", web::put().to(put_metadata))
            .route("/runs/{id}/checkpoints", web::post().to(put_checkpoint))
            .route("/runs/{id}/checkpoints", web::get().to(list_checkpoints))
            .route("/runs/{id}/checkpoints/latest", web::get().to(latest_checkpoint))
            .route("/runs/{id}/artifacts", web::get().to(list_artifacts))
            .route("/runs/{id}/artifacts/{path:.*}", web::put().to(put_artifact))
            .route("/runs/{id}/artifacts/{path:.*}", web::get().to(get_artifact))
            .route("/runs/{id}/artifacts/{path:.*}", web::delete().to(delete_artifact))
            .route("/runs/{id}/tags", web::post().to(set_tags))
            .route("/runs/{id}/finish", web::post().to(finish_run))
            .route("/runs/{id}/metrics", web::post().to(log_metrics))
            .route("/runs/{id}/metrics", web::get().to(get_metrics))
            .route("/metrics", web::get().to(get_metrics_many))
            .route("/admin/flush", web::post().to(flush))
            .route("/admin/stats", web::get().to(stats))
            .configure(crate::registry_routes::configure)
            .configure(crate::sweep_routes::configure),
    )
    .default_service(web::to(|req: HttpRequest| async move {
        Err::<HttpResponse, _>(ApiError::NotFound(format!("route {} {}", req.method(), req.path())))
    }));
}

pub(crate) type State = web::Data<AppState>;

/// Runs a metadata-store call on the blocking pool.
pub(crate) async fn meta<T: Send + 'static>(
    state: &State,
    f: impl FnOnce(&MetaStore) -> trainlog_meta::Result<T> + Send + 'static,
) -> Result<T> {
    let m: Arc<MetaStore> = state.meta.clone();
    Ok(web::block(move || f(&m)).await??)
}

/// Applies a change to a run in the metadata store and answers the run as it is afterwards;
/// the project's runs table is rewritten soon after.
async fn change_run(
    state: &State,
    id: RunId,
    change: impl Fn(&MetaStore, &RunId) -> trainlog_meta::Result<()> + Send + 'static,
) -> Result<Run> {
    let run = meta(state, move |m| {
        change(m, &id)?;
        m.run(&id)
    })
    .await?;
    state.store.project_changed(run.project_id);
    Ok(run)
}

fn run_id(path: &str) -> Result<RunId> {
    RunId::parse("id", path).map_err(|_| ApiError::NotFound(format!("run {path:?}")))
}

fn now_ms() -> i64 {
    trainlog_meta::now_ms()
}

async fn run_json(state: &State, run: &Run) -> Result<Value> {
    let summaries = state.store.summaries(&run.id, run.project_id).await?;
    Ok(json::run(run, &summaries))
}

pub(crate) fn query_pairs(req: &HttpRequest) -> Result<Vec<(String, String)>> {
    web::Query::<Vec<(String, String)>>::from_query(req.query_string())
        .map(|q| q.into_inner())
        .map_err(|e| ApiError::invalid("query", e.to_string()))
}

pub(crate) fn query_one<'a>(pairs: &'a [(String, String)], name: &str) -> Option<&'a str> {
    pairs.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
}

fn query_int<T: std::str::FromStr>(pairs: &[(String, String)], name: &str) -> Result<Option<T>> {
    query_one(pairs, name)
        .map(|v| v.parse().map_err(|_| ApiError::invalid(name, format!("expected an integer, got {v:?}"))))
        .transpose()
}

async fn health(state: State) -> Result<HttpResponse> {
    meta(&state, |m| m.counter("health")).await?;
    Ok(HttpResponse::Ok().json(json!({"status": "ok"})))
}

async fn openapi() -> HttpResponse {
    HttpResponse::Ok().content_type("application/json").body(OPENAPI)
}

async fn list_projects(state: State) -> Result<HttpResponse> {
    let projects = meta(&state, |m| m.list_projects()).await?;
    let list: Vec<Value> = projects.iter().map(|(p, n)| json::project(p, Some(*n))).collect();
    Ok(HttpResponse::Ok().json(json!({ "projects": list })))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateProject {
    name: String,
    #[serde(default)]
    description: String,
}

async fn create_project(state: State, req: HttpRequest, payload: web::Payload) -> Result<HttpResponse> {
    let body: CreateProject = json_body(&req, payload).await?;
    let name = ProjectName::parse("name", &body.name)?;
    check_len("description", "a project's description", &body.description, MAX_TEXT_BYTES)?;
    let project = meta(&state, move |m| m.create_project(&name, &body.description)).await?;
    Ok(HttpResponse::Created().json(json::project(&project, Some(0))))
}

async fn get_project(state: State, path: web::Path<String>) -> Result<HttpResponse> {
    let name = path.into_inner();
    let project = meta(&state, move |m| m.project_by_name(&name)).await?;
    Ok(HttpResponse::Ok().json(json::project(&project, None)))
}

/// Tags as an object of strings (null deletes where allowed), or a list of labels.
fn parse_tags(field: &str, value: &Value, allow_delete: bool) -> Result<(BTreeMap<TagKey, String>, Vec<TagKey>)> {
    let mut set = BTreeMap::new();
    let mut delete = Vec::new();
    match value {
        Value::Null => {}
        Value::Array(labels) => {
            check_count(field, "tags", labels.len(), MAX_TAGS_PER_REQUEST)?;
            for (i, label) in labels.iter().enumerate() {
                let here = format!("{field}[{i}]");
                let s = label.as_str().ok_or_else(|| ApiError::invalid(&here, "a tag label must be a string"))?;
                set.insert(TagKey::parse(&here, s)?, String::new());
            }
        }
        Value::Object(map) => {
            check_count(field, "tags", map.len(), MAX_TAGS_PER_REQUEST)?;
            for (k, v) in map {
                let here = format!("{field}.{k}");
                let key = TagKey::parse(&here, k)?;
                match v {
                    Value::String(s) => {
                        check_len(&here, "a tag value", s, MAX_TAG_VALUE_BYTES)?;
                        set.insert(key, s.clone());
                    }
                    Value::Null if allow_delete => delete.push(key),
                    Value::Number(_) | Value::Bool(_) => {
                        set.insert(key, v.to_string());
                    }
                    _ => return Err(ApiError::invalid(&here, "a tag value must be a string")),
                }
            }
        }
        _ => return Err(ApiError::invalid(field, "expected an object of tags or a list of labels")),
    }
    Ok((set, delete))
}

/// Refuses run text beyond its limit: notes up to `MAX_TEXT_BYTES`, the name and the rest up to `MAX_NAME_BYTES`.
fn check_run_text(fields: &[(&str, Option<&str>)]) -> Result<()> {
    for &(field, value) in fields {
        let max = if field == "notes" { MAX_TEXT_BYTES } else { MAX_NAME_BYTES };
        check_len(field, &format!("a run's {field}"), value.unwrap_or_default(), max)?;
    }
    Ok(())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateRun {
    project: Option<String>,
    name: Option<String>,
    id: Option<String>,
    #[serde(default)]
    params: Value,
    #[serde(default)]
    tags: Value,
    #[serde(default)]
    user: String,
    #[serde(default)]
    host: String,
    #[serde(default)]
    group: String,
    parent_id: Option<String>,
    #[serde(default)]
    notes: String,
    start_time: Option<i64>,
    #[serde(default)]
    resume: bool,
    #[serde(default)]
    overwrite_params: bool,
}

async fn create_run(state: State, req: HttpRequest, payload: web::Payload) -> Result<HttpResponse> {
    let body: CreateRun = json_body(&req, payload).await?;
    let params = if body.params.is_null() { BTreeMap::new() } else { flatten_params("params", &body.params)? };
    let (tags, _) = parse_tags("tags", &body.tags, false)?;
    check_run_text(&[
        ("name", body.name.as_deref()),
        ("user", Some(&body.user)),
        ("host", Some(&body.host)),
        ("group", Some(&body.group)),
        ("notes", Some(&body.notes)),
    ])?;
    let new = NewRun {
        id: body.id.as_deref().map(|s| RunId::parse("id", s)).transpose()?,
        project: body.project.as_deref().map(|s| ProjectName::parse("project", s)).transpose()?,
        name: body.name,
        params,
        tags,
        user: body.user,
        host: body.host,
        group: body.group,
        parent_id: body.parent_id.as_deref().map(|s| RunId::parse("parent_id", s)).transpose()?,
        notes: body.notes,
        start_ms: body.start_time,
        resume: body.resume,
        overwrite_params: body.overwrite_params,
    };
    if new.project.is_none() && !(new.resume && new.id.is_some()) {
        return Err(ApiError::invalid("project", "a new run needs a project"));
    }
    let (run, created) = meta(&state, move |m| m.create_run(&new)).await?;
    state.store.project_changed(run.project_id);
    let body = run_json(&state, &run).await?;
    Ok(if created { HttpResponse::Created().json(body) } else { HttpResponse::Ok().json(body) })
}

async fn get_run(state: State, path: web::Path<String>) -> Result<HttpResponse> {
    let id = run_id(&path)?;
    let (run, metadata) = meta(&state, move |m| Ok((m.run(&id)?, m.metadata(&id)?))).await?;
    let mut body = run_json(&state, &run).await?;
    body["metadata"] = json!(metadata);
    Ok(HttpResponse::Ok().json(body))
}

/// Largest metadata document accepted, so a huge git diff cannot bloat the database.
const MAX_METADATA_BYTES: usize = 4 << 20;

async fn put_metadata(
    state: State,
    path: web::Path<(String, String)>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    let (id, section) = path.into_inner();
    let id = run_id(&id)?;
    let valid_section = !section.is_empty()
        && section.len() <= 64
        && section.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if !valid_section {
        return Err(ApiError::invalid("section", "a metadata section has 1 to 64 characters from [A-Za-z0-9_-]"));
    }
    let bytes = crate::body::json_bytes(&req, payload).await?;
    if bytes.len() > MAX_METADATA_BYTES {
        return Err(ApiError::TooLarge { limit: MAX_METADATA_BYTES });
    }
    let value: Value = crate::body::parse_json(&bytes)?;
    if !value.is_object() {
        return Err(ApiError::invalid("body", "a metadata section is a JSON object"));
    }
    change_run(&state, id, move |m, id| m.set_metadata(id, &section, &value)).await?;
    Ok(HttpResponse::Ok().json(json!({"status": "ok"})))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct UpdateRun {
    name: Option<String>,
    notes: Option<String>,
    group: Option<String>,
    #[serde(default)]
    tags: Value,
}

async fn update_run(
    state: State,
    path: web::Path<String>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    let id = run_id(&path)?;
    let body: UpdateRun = json_body(&req, payload).await?;
    let (set_tags, delete_tags) = parse_tags("tags", &body.tags, true)?;
    check_run_text(&[
        ("name", body.name.as_deref()),
        ("group", body.group.as_deref()),
        ("notes", body.notes.as_deref()),
    ])?;
    let update = RunUpdate { name: body.name, notes: body.notes, group: body.group, set_tags, delete_tags };
    let run = change_run(&state, id, move |m, id| m.update_run(id, &update)).await?;
    Ok(HttpResponse::Ok().json(run_json(&state, &run).await?))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LogParams {
    params: Value,
    #[serde(default)]
    overwrite: bool,
}

async fn log_params(
    state: State,
    path: web::Path<String>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    let id = run_id(&path)?;
    let body: LogParams = json_body(&req, payload).await?;
    let params = flatten_params("params", &body.params)?;
    let run = change_run(&state, id, move |m, id| m.set_params(id, &params, body.overwrite)).await?;
    let params: serde_json::Map<String, Value> = run.params.iter().map(|(k, v)| (k.clone(), v.to_json())).collect();
    Ok(HttpResponse::Ok().json(json!({ "params": params })))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SetTags {
    tags: Value,
}

async fn set_tags(
    state: State,
    path: web::Path<String>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    let id = run_id(&path)?;
    let body: SetTags = json_body(&req, payload).await?;
    let (set_tags, delete_tags) = parse_tags("tags", &body.tags, true)?;
    let update = RunUpdate { set_tags, delete_tags, ..RunUpdate::default() };
    let run = change_run(&state, id, move |m, id| m.update_run(id, &update)).await?;
    Ok(HttpResponse::Ok().json(json!({ "tags": run.tags })))
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct Finish {
    status: Option<String>,
    end_time: Option<i64>,
}

async fn finish_run(
    state: State,
    path: web::Path<String>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    let id = run_id(&path)?;
    let bytes = crate::body::json_bytes(&req, payload).await?;
    let body: Finish =
        if bytes.iter().all(u8::is_ascii_whitespace) { Finish::default() } else { crate::body::parse_json(&bytes)? };
    let status = RunStatus::parse("status", body.status.as_deref().unwrap_or("finished"))?;
    if status == RunStatus::Running {
        return Err(ApiError::invalid(
            "status",
            "finish takes a final status; resume a run by creating it again with \"resume\": true",
        ));
    }
    let run = change_run(&state, id.clone(), move |m, id| m.set_status(id, status, body.end_time)).await?;
    state.store.run_finished(&id).await?;
    Ok(HttpResponse::Ok().json(run_json(&state, &run).await?))
}

/// Entries in the run → project cache before it starts over.
const MAX_CACHED_RUN_PROJECTS: usize = 100_000;

/// The project of a run, from a cache filled on first use (a run never changes project).
async fn run_project(state: &State, id: &RunId) -> Result<i64> {
    if let Some(&p) = state.run_projects.lock().map_err(|_| ApiError::Internal("lock poisoned".into()))?.get(id) {
        return Ok(p);
    }
    let owned = id.clone();
    let head = meta(state, move |m| m.run_head(&owned)).await?;
    let mut cache = state.run_projects.lock().map_err(|_| ApiError::Internal("lock poisoned".into()))?;
    if cache.len() >= MAX_CACHED_RUN_PROJECTS {
        cache.clear();
    }
    cache.insert(id.clone(), head.project_id);
    Ok(head.project_id)
}

async fn log_metrics(
    state: State,
    path: web::Path<String>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    let id = run_id(&path)?;
    let project_id = run_project(&state, &id).await?;
    let bytes = read_body(&req, payload).await?;
    let encoding = metrics_encoding(&req)?;
    let now = now_ms();
    let batch = decode_metrics(encoding, bytes, now)?;
    let accepted = batch.points.len();
    state.store.append(&id, project_id, batch).await?;
    Ok(HttpResponse::Ok().json(json!({ "accepted": accepted })))
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

fn wants_arrow(req: &HttpRequest) -> bool {
    req.headers().get(header::ACCEPT).and_then(|v| v.to_str().ok()).is_some_and(|v| v.contains(ARROW_STREAM_MEDIA_TYPE))
}

fn arrow_series(series: &trainlog_store::Series) -> Result<HttpResponse> {
    use arrow_array::{Float64Array, Int64Array, RecordBatch};
    use arrow_schema::{DataType, Field, Schema};
    let schema = Arc::new(Schema::new(vec![
        Field::new("step", DataType::Int64, false),
        Field::new("timestamp", DataType::Int64, false),
        Field::new("value", DataType::Float64, false),
    ]));
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![
            Arc::new(Int64Array::from(series.steps.clone())),
            Arc::new(Int64Array::from(series.timestamps.clone())),
            Arc::new(Float64Array::from(series.values.clone())),
        ],
    )
    .map_err(|e| ApiError::Internal(e.to_string()))?;
    let mut buf = Vec::new();
    {
        let mut w = arrow_ipc::writer::StreamWriter::try_new(&mut buf, &schema)
            .map_err(|e| ApiError::Internal(e.to_string()))?;
        w.write(&batch).map_err(|e| ApiError::Internal(e.to_string()))?;
        w.finish().map_err(|e| ApiError::Internal(e.to_string()))?;
    }
    Ok(HttpResponse::Ok().content_type(ARROW_STREAM_MEDIA_TYPE).body(buf))
}

fn series_body(series: &trainlog_store::Series, buckets: Option<usize>, out: &mut Vec<u8>) -> Result<()> {
    let r = match buckets {
        Some(n) => serde_json::to_writer(&mut *out, &json::Buckets(&series.downsample(n))),
        None => serde_json::to_writer(&mut *out, &json::Points(series)),
    };
    r.map_err(|e| ApiError::Internal(e.to_string()))
}

async fn get_metrics(state: State, path: web::Path<String>, req: HttpRequest) -> Result<HttpResponse> {
    let id = run_id(&path)?;
    run_project(&state, &id).await?;
    let q = series_query(&query_pairs(&req)?)?;
    let series = state.store.series(&id, &q.key, q.range).await?;
    if q.buckets.is_none() && wants_arrow(&req) {
        return arrow_series(&series);
    }
    let mut out = Vec::with_capacity(series.len() * 48 + 64);
    out.extend_from_slice(b"{\"key\":");
    serde_json::to_writer(&mut out, q.key.as_str()).map_err(|e| ApiError::Internal(e.to_string()))?;
    out.extend_from_slice(if q.buckets.is_some() { b",\"buckets\":" } else { b",\"points\":" });
    series_body(&series, q.buckets, &mut out)?;
    let missing = state.store.missing_files(&id);
    if !missing.is_empty() {
        out.extend_from_slice(b",\"missing_files\":");
        serde_json::to_writer(&mut out, &missing).map_err(|e| ApiError::Internal(e.to_string()))?;
    }
    out.push(b'}');
    Ok(HttpResponse::Ok().content_type("application/json").body(out))
}

async fn get_metrics_many(state: State, req: HttpRequest) -> Result<HttpResponse> {
    let pairs = query_pairs(&req)?;
    let q = series_query(&pairs)?;
    let runs = query_one(&pairs, "runs").ok_or_else(|| ApiError::invalid("runs", "the query parameter is required"))?;
    let ids: Vec<RunId> = runs.split(',').filter(|s| !s.is_empty()).map(run_id).collect::<Result<_>>()?;
    if ids.is_empty() || ids.len() > 1000 {
        return Err(ApiError::invalid("runs", "give 1 to 1000 comma-separated run ids"));
    }
    let mut out = Vec::with_capacity(4096);
    out.extend_from_slice(b"{\"key\":");
    serde_json::to_writer(&mut out, q.key.as_str()).map_err(|e| ApiError::Internal(e.to_string()))?;
    out.extend_from_slice(b",\"series\":[");
    // Series are read a few at a time, in order: their decoding runs on the blocking pool.
    const SERIES_READS_IN_FLIGHT: usize = 4;
    let (key, range) = (&q.key, q.range);
    let mut reads = futures::stream::iter(ids.iter().map(|id| {
        let state = &state;
        async move {
            run_project(state, id).await?;
            Ok::<_, ApiError>(state.store.series(id, key, range).await?)
        }
    }))
    .buffered(SERIES_READS_IN_FLIGHT);
    for (i, id) in ids.iter().enumerate() {
        let series = reads.next().await.ok_or_else(|| ApiError::Internal("a series read went missing".into()))??;
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(b"{\"run_id\":");
        serde_json::to_writer(&mut out, id.as_str()).map_err(|e| ApiError::Internal(e.to_string()))?;
        out.extend_from_slice(if q.buckets.is_some() { b",\"buckets\":" } else { b",\"points\":" });
        series_body(&series, q.buckets, &mut out)?;
        out.push(b'}');
    }
    out.extend_from_slice(b"]}");
    Ok(HttpResponse::Ok().content_type("application/json").body(out))
}

struct SearchRequest {
    project: Option<String>,
    filter: String,
    order_by: Vec<String>,
    limit: u32,
    offset: u64,
}

fn page(limit: Option<u32>, token: Option<&str>) -> Result<(u32, u64)> {
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

async fn search(state: &State, req: SearchRequest) -> Result<HttpResponse> {
    let project_id = match req.project {
        Some(name) => Some(meta(state, move |m| m.project_by_name(&name)).await?.id),
        None => None,
    };
    state.store.sync_summaries().await?;
    let (limit, offset) = (req.limit, req.offset);
    let (filter, order_by) = (req.filter, req.order_by);
    let mut runs = meta(state, move |m| m.search(project_id, &filter, &order_by, limit + 1, offset)).await?;
    let next = (runs.len() > limit as usize).then(|| (offset + limit as u64).to_string());
    runs.truncate(limit as usize);
    let mut list = Vec::with_capacity(runs.len());
    for run in &runs {
        list.push(run_json(state, run).await?);
    }
    Ok(HttpResponse::Ok().json(json!({ "runs": list, "next_page_token": next })))
}

async fn project_runs(state: State, path: web::Path<String>, req: HttpRequest) -> Result<HttpResponse> {
    let pairs = query_pairs(&req)?;
    let order_by: Vec<String> = pairs
        .iter()
        .filter(|(k, _)| k == "order_by")
        .flat_map(|(_, v)| v.split(',').map(|s| s.trim().to_owned()).filter(|s| !s.is_empty()).collect::<Vec<_>>())
        .collect();
    let (limit, offset) = page(query_int(&pairs, "limit")?, query_one(&pairs, "page_token"))?;
    let req = SearchRequest {
        project: Some(path.into_inner()),
        filter: query_one(&pairs, "filter").unwrap_or("").to_owned(),
        order_by,
        limit,
        offset,
    };
    search(&state, req).await
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SearchBody {
    project: Option<String>,
    #[serde(default)]
    filter: String,
    #[serde(default)]
    order_by: Vec<String>,
    limit: Option<u32>,
    page_token: Option<String>,
}

async fn search_runs(state: State, req: HttpRequest, payload: web::Payload) -> Result<HttpResponse> {
    let body: SearchBody = json_body(&req, payload).await?;
    let (limit, offset) = page(body.limit, body.page_token.as_deref())?;
    search(&state, SearchRequest { project: body.project, filter: body.filter, order_by: body.order_by, limit, offset })
        .await
}

fn artifact_json(a: &trainlog_meta::ArtifactRow) -> Value {
    json!({"path": a.path, "size": a.size, "sha256": a.sha256, "created_time": a.created_ms})
}

/// The run and artifact path of an artifact route, parsed once. The path is percent-decoded by
/// the router, so an encoded `..` is refused here like a plain one.
async fn artifact_target(state: &State, path: &web::Path<(String, String)>) -> Result<(RunId, i64, ArtifactPath)> {
    let (id, artifact) = (&path.0, &path.1);
    let run = run_id(id)?;
    let artifact = ArtifactPath::parse("path", artifact)?;
    let project_id = run_project(state, &run).await?;
    Ok((run, project_id, artifact))
}

async fn list_artifacts(state: State, path: web::Path<String>, req: HttpRequest) -> Result<HttpResponse> {
    let id = run_id(&path)?;
    run_project(&state, &id).await?;
    let pairs = query_pairs(&req)?;
    let prefix = query_one(&pairs, "prefix").unwrap_or("").to_owned();
    let rows = meta(&state, move |m| m.artifacts(&id, &prefix)).await?;
    let list: Vec<Value> = rows.iter().map(artifact_json).collect();
    Ok(HttpResponse::Ok().json(json!({ "artifacts": list })))
}

/// Streams the body into the object store (never whole in memory), then records it.
async fn put_artifact(state: State, path: web::Path<(String, String)>, payload: web::Payload) -> Result<HttpResponse> {
    let (run, project_id, artifact) = artifact_target(&state, &path).await?;
    let artifacts = state.store.artifacts();
    let location = trainlog_store::ArtifactStore::location(project_id, &run, &artifact)?;
    let uploaded = artifacts.upload(&location, payload).await?;
    let row = meta(&state, move |m| m.put_artifact(&run, &artifact, uploaded.size, &uploaded.sha256)).await?;
    Ok(HttpResponse::Created().json(artifact_json(&row)))
}

async fn get_artifact(state: State, path: web::Path<(String, String)>) -> Result<HttpResponse> {
    let (run, project_id, artifact) = artifact_target(&state, &path).await?;
    let location = trainlog_store::ArtifactStore::location(project_id, &run, &artifact)?;
    let row = meta(&state, move |m| m.artifact(&run, &artifact)).await?;
    // The stored object's own size, so bytes changed behind the server's back still arrive
    // whole and fail the client's checksum instead of breaking the response.
    let (size, body) = match state.store.artifacts().download(&location).await {
        Ok(found) => found,
        Err(trainlog_store::Error::ObjectStore(object_store::Error::NotFound { .. })) => {
            return Err(ApiError::NotFound(format!("the bytes of artifact {:?} are missing from the store", row.path)))
        }
        Err(e) => return Err(e.into()),
    };
    Ok(HttpResponse::Ok()
        .content_type("application/octet-stream")
        .insert_header(("x-trainlog-sha256", row.sha256.clone()))
        .no_chunking(size)
        .streaming(body.map(|chunk| chunk.map_err(|e| ApiError::Internal(e.to_string())))))
}

async fn delete_artifact(state: State, path: web::Path<(String, String)>) -> Result<HttpResponse> {
    let (run, project_id, artifact) = artifact_target(&state, &path).await?;
    let location = trainlog_store::ArtifactStore::location(project_id, &run, &artifact)?;
    let existed = {
        let (run, artifact) = (run.clone(), artifact.clone());
        meta(&state, move |m| m.delete_artifact(&run, &artifact)).await?
    };
    if !existed {
        return Err(ApiError::NotFound(format!("artifact {artifact:?} of run {run}")));
    }
    state.store.artifacts().delete(&location).await?;
    Ok(HttpResponse::Ok().json(json!({"status": "ok"})))
}

fn checkpoint_json(c: &trainlog_meta::CheckpointRow) -> Value {
    json!({
        "name": c.name,
        "step": c.step,
        "files": c.files,
        "metadata": c.metadata,
        "metric": c.metric_key,
        "metric_value": c.metric_value.map(trainlog_schema::json_f64),
        "created_time": c.created_ms,
        "prefix": format!("checkpoints/{}/", c.name),
    })
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CheckpointFile {
    path: String,
    size: u64,
    sha256: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NewCheckpoint {
    step: i64,
    name: Option<String>,
    files: Vec<CheckpointFile>,
    #[serde(default)]
    metadata: Value,
    keep_last: Option<usize>,
    keep_best: Option<usize>,
    metric: Option<String>,
    mode: Option<String>,
}

/// Records a checkpoint whose files were uploaded under `checkpoints/{name}/`, then applies
/// retention: the checkpoints it drops lose their rows and their artifacts.
async fn put_checkpoint(
    state: State,
    path: web::Path<String>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    let id = run_id(&path)?;
    let project_id = run_project(&state, &id).await?;
    let body: NewCheckpoint = json_body(&req, payload).await?;
    let name = body.name.clone().unwrap_or_else(|| format!("step-{:012}", body.step));
    if name.contains('/') {
        return Err(ApiError::invalid("name", "a checkpoint name has no '/'"));
    }
    ArtifactPath::parse("name", &format!("checkpoints/{name}"))?;
    for (i, f) in body.files.iter().enumerate() {
        ArtifactPath::parse(&format!("files[{i}].path"), &f.path)?;
    }
    let minimize = match body.mode.as_deref() {
        None | Some("min") => true,
        Some("max") => false,
        Some(other) => return Err(ApiError::invalid("mode", format!("expected \"min\" or \"max\", got {other:?}"))),
    };
    if body.keep_best.is_some() && body.metric.is_none() {
        return Err(ApiError::invalid("metric", "keep_best needs the metric to rank checkpoints by"));
    }
    let metric_value = match &body.metric {
        Some(metric) => {
            let key = trainlog_schema::MetricKey::parse("metric", metric)?;
            let upto = StepRange { min: None, max: Some(body.step) };
            state.store.series(&id, &key, upto).await?.values.last().copied()
        }
        None => None,
    };
    let row = trainlog_meta::CheckpointRow {
        name,
        step: body.step,
        files: Value::Array(
            body.files.iter().map(|f| json!({"path": f.path, "size": f.size, "sha256": f.sha256})).collect(),
        ),
        metadata: body.metadata,
        metric_key: body.metric.clone(),
        metric_value,
        created_ms: now_ms(),
    };
    let retention = trainlog_meta::Retention {
        keep_last: body.keep_last,
        keep_best: body.keep_best,
        metric: body.metric,
        minimize,
    };
    let dropped = {
        let (id, row) = (id.clone(), row.clone());
        meta(&state, move |m| m.put_checkpoint(&id, &row, &retention)).await?
    };
    let artifacts = state.store.artifacts();
    for c in &dropped {
        for f in c.files.as_array().into_iter().flatten() {
            let rel = f["path"].as_str().unwrap_or_default();
            if let Ok(p) = ArtifactPath::parse("path", &format!("checkpoints/{}/{rel}", c.name)) {
                let location = trainlog_store::ArtifactStore::location(project_id, &id, &p)?;
                artifacts.delete(&location).await?;
            }
        }
    }
    let dropped_names: Vec<&str> = dropped.iter().map(|c| c.name.as_str()).collect();
    Ok(HttpResponse::Created().json(json!({"checkpoint": checkpoint_json(&row), "dropped": dropped_names})))
}

async fn list_checkpoints(state: State, path: web::Path<String>) -> Result<HttpResponse> {
    let id = run_id(&path)?;
    let rows = meta(&state, move |m| m.checkpoints(&id)).await?;
    Ok(HttpResponse::Ok().json(json!({"checkpoints": rows.iter().map(checkpoint_json).collect::<Vec<_>>()})))
}

async fn latest_checkpoint(state: State, path: web::Path<String>) -> Result<HttpResponse> {
    let id = run_id(&path)?;
    let rows = {
        let id = id.clone();
        meta(&state, move |m| m.checkpoints(&id)).await?
    };
    let latest = rows.first().ok_or_else(|| ApiError::NotFound(format!("a checkpoint of run {id}")))?;
    Ok(HttpResponse::Ok().json(checkpoint_json(latest)))
}

async fn flush(state: State) -> Result<HttpResponse> {
    state.store.flush().await?;
    Ok(HttpResponse::Ok().json(json!({"status": "ok"})))
}

async fn stats(state: State) -> Result<HttpResponse> {
    let s = state.store.stats();
    let c = s.counters;
    let errors: serde_json::Map<String, Value> =
        crate::error::error_counts().into_iter().map(|(code, n)| (code.to_owned(), json!(n))).collect();
    let mut body = json!({
        "buffered_points": s.buffered_points,
        "buffered_bytes": s.buffered_bytes,
        "max_buffer_bytes": s.max_buffer_bytes,
        "frozen_generations": s.frozen_generations,
        "files": s.files,
        "file_bytes": s.file_bytes,
        "file_rows": s.file_rows,
        "wal_replayed_records": s.wal_replayed_records,
        "wal_cut_bytes": s.wal_cut_bytes,
        "object_store_seconds": c.object_store_micros as f64 / 1e6,
        "errors": errors,
    });
    for (name, _, value) in c.named() {
        body[name] = json!(value);
    }
    Ok(HttpResponse::Ok().json(body))
}
