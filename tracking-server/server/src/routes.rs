//! Route table and request handlers. Handlers parse input into schema types once, call the
//! stores (SQLite work on the blocking pool), and shape JSON; errors go through `ApiError`.

use crate::api;
use crate::auth::{require, require_run, role_on};
use crate::body::{decode_metrics, json_body, metrics_encoding, read_body};
use crate::error::{ApiError, Result};
use crate::AppState;
use actix_web::http::header;
use actix_web::{web, HttpRequest, HttpResponse};
use futures::StreamExt;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::Arc;
use trainlog_meta::{MetaStore, NewRun, Role, Run, RunUpdate, Scope};
use trainlog_schema::arrow::ARROW_STREAM_MEDIA_TYPE;
use trainlog_schema::limits::{
    check_count, check_len, MAX_NAME_CHARS, MAX_PAGE_SIZE, MAX_QUERY_FILTER_CHARS, MAX_QUERY_ORDER_BY_CHARS,
    MAX_QUERY_RUN_IDS_CHARS, MAX_TAGS_PER_REQUEST, MAX_TAG_VALUE_CHARS, MAX_TEXT_CHARS,
};
use trainlog_schema::{flatten_params, ArtifactPath, ProjectName, RunId, TagKey};
use trainlog_store::StepRange;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/metrics", web::get().to(crate::metrics::prometheus));
    cfg.service(
        web::scope("/api/v1")
            .route("/health", web::get().to(health))
            .route("/health/live", web::get().to(health_live))
            .route("/health/ready", web::get().to(health_ready))
            .route("/openapi.json", web::get().to(openapi))
            .route("/projects", web::get().to(list_projects))
            .route("/projects", web::post().to(create_project))
            .route("/projects/{name}", web::get().to(get_project))
            .route("/projects/{name}/runs", web::get().to(project_runs))
            .route("/runs", web::post().to(create_run))
            .route("/runs/search", web::post().to(search_runs))
            .route("/runs/{id}", web::get().to(get_run))
            .route("/runs/{id}", web::patch().to(update_run))
            .route("/runs/{id}", web::delete().to(delete_run))
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
            .route("/runs/{id}/archive", web::post().to(archive_run))
            .route("/runs/{id}/restore", web::post().to(restore_run))
            .route("/runs/{id}/metrics", web::post().to(log_metrics))
            .route("/runs/{id}/metrics", web::get().to(get_metrics))
            .route("/metrics", web::get().to(get_metrics_many))
            .route("/metrics/query", web::post().to(query_metrics))
            .route("/admin/flush", web::post().to(flush))
            .route("/admin/stats", web::get().to(stats))
            .configure(crate::registry_routes::configure)
            .configure(crate::sweep_routes::configure)
            .configure(crate::team_routes::configure)
            .configure(crate::view_routes::configure)
            .configure(crate::key_routes::configure),
    )
    .default_service(web::to(|req: HttpRequest| async move {
        Err::<HttpResponse, _>(match crate::openapi::allowed_methods(req.path()) {
            Some(allow) => ApiError::MethodNotAllowed { method: req.method().to_string(), allow },
            None => ApiError::NotFound(format!("route {} {}", req.method(), req.path())),
        })
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
    req: &HttpRequest,
    id: RunId,
    change: impl Fn(&MetaStore, &RunId) -> trainlog_meta::Result<()> + Send + 'static,
) -> Result<Run> {
    writable_run(state, req, &id).await?;
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

async fn run_view(state: &State, run: &Run, archived: bool) -> Result<api::RunView> {
    let summaries = state.store.summaries(&run.id).await?;
    Ok(api::RunView::new(run, &summaries, archived))
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

/// Whether the server answers and its database is usable.
#[utoipa::path(get, path = "/api/v1/health", tag = "system", responses((status = 200, description = "The server is up.", body = api::Health)))]
pub(crate) async fn health(state: State) -> Result<HttpResponse> {
    meta(&state, |m| m.counter("health")).await?;
    Ok(HttpResponse::Ok().json(api::Health { status: "ok" }))
}

/// Liveness for a load balancer or an orchestrator: the process answers requests. Checks nothing
/// else, so a database outage does not get every replica restarted.
#[utoipa::path(get, path = "/api/v1/health/live", tag = "system", responses((status = 200, description = "The process serves requests.", body = api::Health)))]
pub(crate) async fn health_live() -> HttpResponse {
    HttpResponse::Ok().json(api::Health { status: "ok" })
}

/// Readiness for a load balancer: the metadata database and the object store both answer. A
/// replica that is not ready answers 503, naming what failed, and should get no traffic.
#[utoipa::path(get, path = "/api/v1/health/ready", tag = "system", responses(
    (status = 200, description = "The database and the object store answer.", body = api::Readiness),
    (status = 503, description = "The database or the object store does not answer.", body = api::Readiness)))]
pub(crate) async fn health_ready(state: State) -> HttpResponse {
    let m = state.meta.clone();
    let database = match web::block(move || m.ping()).await {
        Ok(Ok(())) => "ok".to_owned(),
        Ok(Err(e)) => e.to_string(),
        Err(e) => e.to_string(),
    };
    let store = match state.store.probe().await {
        Ok(()) => "ok".to_owned(),
        Err(e) => e.to_string(),
    };
    let ready = database == "ok" && store == "ok";
    let body = api::Readiness { status: if ready { "ready" } else { "unavailable" }, database, store };
    if ready {
        HttpResponse::Ok().json(body)
    } else {
        HttpResponse::ServiceUnavailable().insert_header(("Retry-After", "5")).json(body)
    }
}

/// This API description (OpenAPI 3.1).
#[utoipa::path(get, path = "/api/v1/openapi.json", tag = "system", responses((status = 200, description = "The OpenAPI document.", content_type = "application/json", body = Object)))]
pub(crate) async fn openapi() -> HttpResponse {
    HttpResponse::Ok().content_type("application/json").body(crate::openapi::document())
}

/// List projects, with how many runs each holds.
#[utoipa::path(get, path = "/api/v1/projects", tag = "projects", responses((status = 200, description = "Every project.", body = api::ProjectList)))]
pub(crate) async fn list_projects(state: State, req: HttpRequest) -> Result<HttpResponse> {
    let visible = crate::auth::visibility(&req, Scope::Project).await?;
    let projects = meta(&state, |m| m.list_projects()).await?;
    let mut views = Vec::with_capacity(projects.len());
    for (p, n) in projects.iter().filter(|(p, _)| visible.allows(p.id)) {
        views.push(api::ProjectView::new(p, Some(*n), role_on(&req, Scope::Project, p.id).await?));
    }
    Ok(HttpResponse::Ok().json(api::ProjectList { projects: views }))
}

/// Create a project.
#[utoipa::path(post, path = "/api/v1/projects", tag = "projects", request_body = api::CreateProject,
    responses((status = 201, description = "The new project.", body = api::ProjectView)))]
pub(crate) async fn create_project(state: State, req: HttpRequest, payload: web::Payload) -> Result<HttpResponse> {
    let body: api::CreateProject = json_body(&req, payload).await?;
    let name = ProjectName::parse("name", &body.name)?;
    check_len("description", "a project's description", &body.description, MAX_TEXT_CHARS)?;
    let creator = crate::auth::actor(&req);
    let project = meta(&state, move |m| m.create_project(&name, &body.description, creator.as_ref())).await?;
    let role = role_on(&req, Scope::Project, project.id).await?;
    Ok(HttpResponse::Created().json(api::ProjectView::new(&project, Some(0), role)))
}

/// Get a project.
#[utoipa::path(get, path = "/api/v1/projects/{name}", tag = "projects", params(("name" = inline(api::NameText), Path, description = "The project's name.")),
    responses((status = 200, description = "The project.", body = api::ProjectView)))]
pub(crate) async fn get_project(state: State, path: web::Path<String>, req: HttpRequest) -> Result<HttpResponse> {
    let name = path.into_inner();
    let project = meta(&state, move |m| m.project_by_name(&name)).await?;
    require(&req, Scope::Project, project.id, &project.name, Role::Read).await?;
    let role = role_on(&req, Scope::Project, project.id).await?;
    Ok(HttpResponse::Ok().json(api::ProjectView::new(&project, None, role)))
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
                        check_len(&here, "a tag value", s, MAX_TAG_VALUE_CHARS)?;
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

/// Refuses run text beyond its limit: notes up to `MAX_TEXT_CHARS`, the name and the rest up to `MAX_NAME_CHARS`.
fn check_run_text(fields: &[(&str, Option<&str>)]) -> Result<()> {
    for &(field, value) in fields {
        let max = if field == "notes" { MAX_TEXT_CHARS } else { MAX_NAME_CHARS };
        check_len(field, &format!("a run's {field}"), value.unwrap_or_default(), max)?;
    }
    Ok(())
}

/// Create a run, or resume one (`resume` with its `id`).
#[utoipa::path(post, path = "/api/v1/runs", tag = "runs", request_body = api::CreateRun,
    responses((status = 201, description = "The new run.", body = api::RunView), (status = 200, description = "The resumed run.", body = api::RunView)))]
pub(crate) async fn create_run(state: State, req: HttpRequest, payload: web::Payload) -> Result<HttpResponse> {
    let mut body: api::CreateRun = json_body(&req, payload).await?;
    // With keys, a run's user is the key's, whatever the client says.
    if let Some(caller) = crate::auth::caller(&req) {
        body.user = caller.name;
    }
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
        actor: crate::auth::actor(&req),
    };
    if new.project.is_none() && !(new.resume && new.id.is_some()) {
        return Err(ApiError::invalid("project", "a new run needs a project"));
    }
    let (run, created) = meta(&state, move |m| m.create_run(&new)).await?;
    state.store.project_changed(run.project_id);
    let body = run_view(&state, &run, false).await?;
    Ok(if created { HttpResponse::Created().json(body) } else { HttpResponse::Ok().json(body) })
}

/// Get a run with its params, tags, metric summaries and metadata; an archived run too.
#[utoipa::path(get, path = "/api/v1/runs/{id}", tag = "runs", params(("id" = inline(api::RunIdText), Path, description = "The run's id.")),
    responses((status = 200, description = "The run.", body = api::RunDetail)))]
pub(crate) async fn get_run(state: State, path: web::Path<String>, req: HttpRequest) -> Result<HttpResponse> {
    let id = run_id(&path)?;
    readable_run(&state, &req, &id).await?;
    let ((run, archived), metadata) = meta(&state, move |m| Ok((m.run_any(&id)?, m.metadata(&id)?))).await?;
    let run = run_view(&state, &run, archived).await?;
    Ok(HttpResponse::Ok().json(api::RunDetail { run, metadata }))
}

/// Largest metadata document accepted, so a huge git diff cannot bloat the database.
const MAX_METADATA_BYTES: usize = 4 << 20;

/// Store one metadata section of a run (code, environment, packages, …), replacing it.
#[utoipa::path(put, path = "/api/v1/runs/{id}/metadata/{section}", tag = "runs",
    params(("id" = inline(api::RunIdText), Path, description = "The run's id."), ("section" = String, Path, pattern = "^[A-Za-z0-9_-]{1,64}$", description = "A section's name.")),
    request_body(content = Object, description = "The section: a JSON object of at most 4 MiB."),
    responses((status = 200, description = "Stored.", body = api::StatusOk)))]
pub(crate) async fn put_metadata(
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
    change_run(&state, &req, id, move |m, id| m.set_metadata(id, &section, &value)).await?;
    Ok(HttpResponse::Ok().json(api::OK))
}

/// Change a run's name, notes, group or tags (a null tag value deletes the tag).
#[utoipa::path(patch, path = "/api/v1/runs/{id}", tag = "runs", params(("id" = inline(api::RunIdText), Path, description = "The run's id.")),
    request_body = api::UpdateRun, responses((status = 200, description = "The run as it is now.", body = api::RunView)))]
pub(crate) async fn update_run(
    state: State,
    path: web::Path<String>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    let id = run_id(&path)?;
    let body: api::UpdateRun = json_body(&req, payload).await?;
    let (set_tags, delete_tags) = parse_tags("tags", &body.tags, true)?;
    check_run_text(&[
        ("name", body.name.as_deref()),
        ("group", body.group.as_deref()),
        ("notes", body.notes.as_deref()),
    ])?;
    let update = RunUpdate { name: body.name, notes: body.notes, group: body.group, set_tags, delete_tags };
    let run = change_run(&state, &req, id, move |m, id| m.update_run(id, &update)).await?;
    Ok(HttpResponse::Ok().json(run_view(&state, &run, false).await?))
}

/// Add params to a run. A different value for a key already stored is a conflict unless `overwrite`.
#[utoipa::path(post, path = "/api/v1/runs/{id}/params", tag = "runs", params(("id" = inline(api::RunIdText), Path, description = "The run's id.")),
    request_body = api::LogParams, responses((status = 200, description = "All the run's params.", body = api::ParamsAnswer)))]
pub(crate) async fn log_params(
    state: State,
    path: web::Path<String>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    let id = run_id(&path)?;
    let body: api::LogParams = json_body(&req, payload).await?;
    let params = flatten_params("params", &body.params)?;
    let run = change_run(&state, &req, id, move |m, id| m.set_params(id, &params, body.overwrite)).await?;
    Ok(HttpResponse::Ok().json(api::ParamsAnswer { params: api::ParamsView::new(&run) }))
}

/// Set or delete (null) tags of a run.
#[utoipa::path(post, path = "/api/v1/runs/{id}/tags", tag = "runs", params(("id" = inline(api::RunIdText), Path, description = "The run's id.")),
    request_body = api::SetTags, responses((status = 200, description = "All the run's tags.", body = api::TagsAnswer)))]
pub(crate) async fn set_tags(
    state: State,
    path: web::Path<String>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    let id = run_id(&path)?;
    let body: api::SetTags = json_body(&req, payload).await?;
    let (set_tags, delete_tags) = parse_tags("tags", &body.tags, true)?;
    let update = RunUpdate { set_tags, delete_tags, ..RunUpdate::default() };
    let run = change_run(&state, &req, id, move |m, id| m.update_run(id, &update)).await?;
    Ok(HttpResponse::Ok().json(api::TagsAnswer { tags: run.tags }))
}

/// End a run with a final status (finished when the body is empty).
#[utoipa::path(post, path = "/api/v1/runs/{id}/finish", tag = "runs", params(("id" = inline(api::RunIdText), Path, description = "The run's id.")),
    request_body(content = Option<api::FinishRun>, description = "May be empty."),
    responses((status = 200, description = "The run as it is now.", body = api::RunView)))]
pub(crate) async fn finish_run(
    state: State,
    path: web::Path<String>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    let id = run_id(&path)?;
    let bytes = crate::body::json_bytes(&req, payload).await?;
    let body: api::FinishRun = match bytes.trim_ascii() {
        b"" | b"null" => api::FinishRun::default(),
        _ => crate::body::parse_json_object(&bytes)?,
    };
    let status = body.status.unwrap_or(api::FinalStatus::Finished).run_status();
    let run = change_run(&state, &req, id.clone(), move |m, id| m.set_status(id, status, body.end_time)).await?;
    state.store.run_finished(&id).await?;
    Ok(HttpResponse::Ok().json(run_view(&state, &run, false).await?))
}

/// Archive a run: it leaves lists and searches (unless they ask for archived runs) and takes no
/// changes until restored; its data stays and reads go on. Archiving an archived run changes nothing.
#[utoipa::path(post, path = "/api/v1/runs/{id}/archive", tag = "runs", params(("id" = inline(api::RunIdText), Path, description = "The run's id.")),
    request_body(content = Option<api::NoFields>, description = "Empty, or `{}`."),
    responses((status = 200, description = "The run, archived.", body = api::RunView)))]
pub(crate) async fn archive_run(
    state: State,
    path: web::Path<String>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    set_archived(state, path, req, payload, true).await
}

/// Restore an archived run. Restoring an active run changes nothing.
#[utoipa::path(post, path = "/api/v1/runs/{id}/restore", tag = "runs", params(("id" = inline(api::RunIdText), Path, description = "The run's id.")),
    request_body(content = Option<api::NoFields>, description = "Empty, or `{}`."),
    responses((status = 200, description = "The run, active.", body = api::RunView)))]
pub(crate) async fn restore_run(
    state: State,
    path: web::Path<String>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    set_archived(state, path, req, payload, false).await
}

/// Delete an archived run for good: its params, tags, summaries, metric points (buffered or in
/// files), artifacts, checkpoints and metadata. Needs admin on the run's project. Refused for a
/// run that is not archived, that a model version was made from, or that is a trial of a running
/// sweep. The run's id is never used again.
#[utoipa::path(delete, path = "/api/v1/runs/{id}", tag = "runs", params(("id" = inline(api::RunIdText), Path, description = "The run's id.")),
    responses((status = 200, description = "Deleted for good.", body = api::DeletedRun)))]
pub(crate) async fn delete_run(state: State, path: web::Path<String>, req: HttpRequest) -> Result<HttpResponse> {
    let id = run_id(&path)?;
    let (project_id, _) = run_project_any(&state, &id).await?;
    require_run(&req, &id, project_id, Role::Admin).await?;
    let outcome = state.store.purge_run(&id).await?;
    forget_run_project(&state, &id)?;
    Ok(HttpResponse::Ok().json(api::DeletedRun {
        id: id.to_string(),
        objects_deleted: outcome.objects_deleted as u64,
        objects_pending: outcome.objects_pending,
    }))
}

async fn set_archived(
    state: State,
    path: web::Path<String>,
    req: HttpRequest,
    payload: web::Payload,
    archived: bool,
) -> Result<HttpResponse> {
    let id = run_id(&path)?;
    let (project_id, _) = run_project_any(&state, &id).await?;
    require_run(&req, &id, project_id, Role::Write).await?;
    let bytes = crate::body::json_bytes(&req, payload).await?;
    if !matches!(bytes.trim_ascii(), b"" | b"null") {
        crate::body::parse_json_object::<api::NoFields>(&bytes)?;
    }
    let (run, archived) = {
        let id = id.clone();
        meta(&state, move |m| {
            m.set_run_deleted(&id, archived)?;
            m.run_any(&id)
        })
        .await?
    };
    forget_run_project(&state, &id)?;
    state.store.project_changed(project_id);
    Ok(HttpResponse::Ok().json(run_view(&state, &run, archived).await?))
}

/// Entries in the run → project cache before it starts over.
const MAX_CACHED_RUN_PROJECTS: usize = 100_000;

/// The project of a run, from a cache filled on first use (a run never changes project).
pub(crate) async fn run_project(state: &State, id: &RunId) -> Result<i64> {
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

/// Drops a run from the run → project cache, whose runs are active ones.
fn forget_run_project(state: &State, id: &RunId) -> Result<()> {
    state.run_projects.lock().map_err(|_| ApiError::Internal("lock poisoned".into()))?.remove(id);
    Ok(())
}

/// The project of a run, archived or not, and whether it is archived; a run of a deleted
/// project is not found. Active runs come from the cache.
pub(crate) async fn run_project_any(state: &State, id: &RunId) -> Result<(i64, bool)> {
    match run_project(state, id).await {
        Ok(project_id) => Ok((project_id, false)),
        Err(ApiError::NotFound(_)) => {
            let owned = id.clone();
            meta(state, move |m| m.run_head_any(&owned)).await
        }
        Err(e) => Err(e),
    }
}

/// The project of a run the caller holds `need` on; a run they may not read is not found. An
/// archived run is read like any other, and refuses changes until restored.
async fn run_for(state: &State, req: &HttpRequest, id: &RunId, need: Role) -> Result<i64> {
    let (project_id, archived) = run_project_any(state, id).await?;
    require_run(req, id, project_id, need).await?;
    if archived && need > Role::Read {
        return Err(ApiError::Conflict {
            field: "id".into(),
            reason: format!("run {id} is archived; restore it (POST /api/v1/runs/{id}/restore) to change it"),
        });
    }
    Ok(project_id)
}

/// The project of a run the caller may read; a run they may not is not found.
async fn readable_run(state: &State, req: &HttpRequest, id: &RunId) -> Result<i64> {
    run_for(state, req, id, Role::Read).await
}

/// The project of an active run the caller may change.
async fn writable_run(state: &State, req: &HttpRequest, id: &RunId) -> Result<i64> {
    run_for(state, req, id, Role::Write).await
}

/// Append metric points to a run. Answered once the points are in the write-ahead log.
#[utoipa::path(post, path = "/api/v1/runs/{id}/metrics", tag = "metrics", params(("id" = inline(api::RunIdText), Path, description = "The run's id.")),
    request_body(content((api::LogMetrics = "application/json"), ("application/vnd.apache.arrow.stream")),
        description = "JSON, or an Arrow IPC stream with columns key (utf8 or dictionary), step (int64), value (float64) and optionally timestamp (int64). Gzip and zstd Content-Encoding are accepted."),
    responses((status = 200, description = "The points are durable.", body = api::Accepted)))]
pub(crate) async fn log_metrics(
    state: State,
    path: web::Path<String>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    let id = run_id(&path)?;
    let project_id = writable_run(&state, &req, &id).await?;
    let bytes = read_body(&req, payload).await?;
    let encoding = metrics_encoding(&req)?;
    let now = now_ms();
    let batch = decode_metrics(encoding, bytes, now)?;
    let accepted = batch.points.len();
    state.store.append(&id, project_id, batch).await?;
    Ok(HttpResponse::Ok().json(api::Accepted { accepted }))
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

/// One metric of a run: every point in a step range, or buckets for a chart.
#[utoipa::path(get, path = "/api/v1/runs/{id}/metrics", tag = "metrics",
    params(("id" = inline(api::RunIdText), Path, description = "The run's id."), ("key" = inline(api::KeyText), Query, description = "The metric's key."),
        ("step_min" = Option<i64>, Query), ("step_max" = Option<i64>, Query),
        ("buckets" = Option<u32>, Query, minimum = 1, maximum = 100000, description = "Reduce the series to at most this many buckets.")),
    responses((status = 200, description = "The series. With `Accept: application/vnd.apache.arrow.stream` and no buckets, an Arrow IPC stream of step, timestamp and value.",
        content((api::MetricSeries = "application/json"), ("application/vnd.apache.arrow.stream")))))]
pub(crate) async fn get_metrics(state: State, path: web::Path<String>, req: HttpRequest) -> Result<HttpResponse> {
    let id = run_id(&path)?;
    readable_run(&state, &req, &id).await?;
    let q = series_query(&query_pairs(&req)?)?;
    let series = state.store.series(&id, &q.key, q.range).await?;
    if q.buckets.is_none() && wants_arrow(&req) {
        return arrow_series(&series);
    }
    let answer = api::MetricSeries {
        key: q.key.as_str(),
        body: api::SeriesBody::new(&series, q.buckets),
        missing_files: state.store.missing_files(&id),
    };
    let mut out = Vec::with_capacity(series.len() * 48 + 64);
    serde_json::to_writer(&mut out, &answer).map_err(|e| ApiError::Internal(e.to_string()))?;
    Ok(HttpResponse::Ok().content_type("application/json").body(out))
}

/// One metric of several runs.
#[utoipa::path(get, path = "/api/v1/metrics", tag = "metrics",
    params(("key" = inline(api::KeyText), Query, description = "The metric's key."), ("runs" = String, Query, max_length = 50000, pattern = "^[A-Za-z0-9_-]{1,64}(,[A-Za-z0-9_-]{1,64}){0,999}$", description = "1 to 1,000 comma-separated run ids."),
        ("step_min" = Option<i64>, Query), ("step_max" = Option<i64>, Query),
        ("buckets" = Option<u32>, Query, minimum = 1, maximum = 100000)),
    responses((status = 200, description = "The series, in the order of `runs`.", body = api::MultiRunSeries)))]
pub(crate) async fn get_metrics_many(state: State, req: HttpRequest) -> Result<HttpResponse> {
    let pairs = query_pairs(&req)?;
    let q = series_query(&pairs)?;
    let runs = query_one(&pairs, "runs").ok_or_else(|| ApiError::invalid("runs", "the query parameter is required"))?;
    check_len("runs", "the list of run ids", runs, MAX_QUERY_RUN_IDS_CHARS)?;
    let ids: Vec<RunId> = runs.split(',').filter(|s| !s.is_empty()).map(run_id).collect::<Result<_>>()?;
    if ids.is_empty() || ids.len() > 1000 {
        return Err(ApiError::invalid("runs", "give 1 to 1000 comma-separated run ids"));
    }
    let (key, range) = (&q.key, q.range);
    let all: Vec<trainlog_store::Series> = futures::stream::iter(ids.iter().map(|id| {
        let (state, req) = (&state, &req);
        async move {
            readable_run(state, req, id).await?;
            Ok::<_, ApiError>(state.store.series(id, key, range).await?)
        }
    }))
    .buffered(SERIES_READS_IN_FLIGHT)
    .collect::<Vec<_>>()
    .await
    .into_iter()
    .collect::<Result<_>>()?;
    let answer = api::MultiRunSeries {
        key: q.key.as_str(),
        series: ids
            .iter()
            .zip(&all)
            .map(|(id, series)| api::RunSeries { run_id: id.as_str(), body: api::SeriesBody::new(series, q.buckets) })
            .collect(),
    };
    let mut out = Vec::with_capacity(4096);
    serde_json::to_writer(&mut out, &answer).map_err(|e| ApiError::Internal(e.to_string()))?;
    Ok(HttpResponse::Ok().content_type("application/json").body(out))
}

/// Series read at once by the routes that read many: their decoding runs on the blocking pool.
const SERIES_READS_IN_FLIGHT: usize = 4;

/// Points of series a grouped query keeps between reading its runs' step extents and bucketing
/// them (24 bytes a point); the series past it are read a second time instead.
const GROUP_POINTS_KEPT: usize = 2 << 20;

/// Refuses a run list unless every run exists (active or archived, in an active project) and
/// the caller may read it: one lookup per 500 runs, one role check per distinct project. A run
/// that is unknown or hidden is not found, by its id.
async fn readable_runs(state: &State, req: &HttpRequest, ids: &[RunId]) -> Result<()> {
    let owned = ids.to_vec();
    let found = meta(state, move |m| m.run_projects_any(&owned)).await?;
    let mut checked = std::collections::HashSet::new();
    for id in ids {
        let &(project_id, _) = found.get(id).ok_or_else(|| ApiError::NotFound(format!("run {id}")))?;
        if checked.insert(project_id) {
            crate::auth::require_in_project(req, project_id, Role::Read, || format!("run {id}")).await?;
        }
    }
    Ok(())
}

/// One metric of many runs, by run (as `GET /metrics`, with up to 20,000 ids) or by group: each
/// group's runs bucketed on one step grid, with the mean of their last values, their min and
/// max, and how many runs each bucket holds.
#[utoipa::path(post, path = "/api/v1/metrics/query", tag = "metrics", request_body = api::MetricsQuery,
    responses((status = 200, description = "With `runs`, the series in the order given, as `GET /metrics` answers them; with `groups`, the groups in the order given.",
        body = api::MetricsQueryAnswer)))]
pub(crate) async fn query_metrics(state: State, req: HttpRequest, payload: web::Payload) -> Result<HttpResponse> {
    use trainlog_schema::limits::{MAX_QUERY_BUCKETS, MAX_QUERY_GROUPS, MAX_QUERY_RUNS};
    let body: api::MetricsQuery = json_body(&req, payload).await?;
    let key = body.key.as_deref().ok_or_else(|| ApiError::invalid("key", "the metric's key is required"))?;
    let key = trainlog_schema::MetricKey::parse("key", key)?;
    let n = body.buckets.ok_or_else(|| ApiError::invalid("buckets", "the number of buckets is required"))?;
    if n == 0 || n > 100_000 {
        return Err(ApiError::invalid("buckets", "expected 1 to 100000"));
    }
    let too_many_buckets = |what: &str, count: usize| {
        ApiError::invalid(
            "buckets",
            format!(
                "{count} {what} × {n} buckets is more than the {MAX_QUERY_BUCKETS} buckets an answer may hold; ask for fewer"
            ),
        )
    };
    let range = StepRange { min: body.step_min, max: body.step_max };
    let groups = match (body.runs, body.groups) {
        (Some(_), Some(_)) => return Err(ApiError::invalid("groups", "give runs or groups, not both")),
        (None, None) => return Err(ApiError::invalid("runs", "give runs (run ids) or groups (run ids by group name)")),
        (None, Some(groups)) => groups.0,
        (Some(runs), None) => {
            if runs.is_empty() || runs.len() > MAX_QUERY_RUNS {
                return Err(ApiError::invalid(
                    "runs",
                    format!("give 1 to {MAX_QUERY_RUNS} run ids, got {}", runs.len()),
                ));
            }
            if runs.len().saturating_mul(n) > MAX_QUERY_BUCKETS {
                return Err(too_many_buckets("runs", runs.len()));
            }
            let ids: Vec<RunId> = runs.iter().map(|s| run_id(s)).collect::<Result<_>>()?;
            readable_runs(&state, &req, &ids).await?;
            let buckets: Vec<Vec<trainlog_store::Bucket>> = futures::stream::iter(ids.iter().map(|id| {
                let (state, key) = (&state, &key);
                async move { Ok::<_, ApiError>(state.store.series(id, key, range).await?.downsample(n)) }
            }))
            .buffered(SERIES_READS_IN_FLIGHT)
            .collect::<Vec<_>>()
            .await
            .into_iter()
            .collect::<Result<_>>()?;
            let answer = api::MetricsQueryAnswer::Runs(api::MultiRunSeries {
                key: key.as_str(),
                series: ids
                    .iter()
                    .zip(buckets)
                    .map(|(id, b)| api::RunSeries {
                        run_id: id.as_str(),
                        body: api::SeriesBody { points: None, buckets: Some(api::Buckets(b)) },
                    })
                    .collect(),
            });
            return json_answer(&answer);
        }
    };
    if groups.is_empty() || groups.len() > MAX_QUERY_GROUPS {
        return Err(ApiError::invalid("groups", format!("give 1 to {MAX_QUERY_GROUPS} groups, got {}", groups.len())));
    }
    let total: usize = groups.iter().map(|(_, ids)| ids.len()).sum();
    if total > MAX_QUERY_RUNS {
        return Err(ApiError::invalid(
            "groups",
            format!("the groups may hold {MAX_QUERY_RUNS} run ids in all, got {total}"),
        ));
    }
    if groups.len().saturating_mul(n) > MAX_QUERY_BUCKETS {
        return Err(too_many_buckets("groups", groups.len()));
    }
    for (name, _) in &groups {
        if name.is_empty() || name.chars().any(char::is_control) {
            return Err(ApiError::invalid(
                "groups",
                format!("a group's name is 1 or more characters, none of them control characters: {name:?}"),
            ));
        }
        check_len("groups", "a group's name", name, MAX_NAME_CHARS)?;
    }
    // Each run is read once, whatever the groups it is in.
    let mut distinct: Vec<RunId> = Vec::new();
    let mut index: std::collections::HashMap<RunId, usize> = std::collections::HashMap::new();
    let mut members: Vec<Vec<usize>> = Vec::with_capacity(groups.len());
    for (_, ids) in &groups {
        let mut m = Vec::with_capacity(ids.len());
        for raw in ids {
            let id = run_id(raw)?;
            let next = distinct.len();
            let i = *index.entry(id.clone()).or_insert(next);
            if i == next {
                distinct.push(id);
            }
            m.push(i);
        }
        m.sort_unstable();
        m.dedup();
        members.push(m);
    }
    readable_runs(&state, &req, &distinct).await?;
    let mut groups_of: Vec<Vec<usize>> = vec![Vec::new(); distinct.len()];
    for (g, m) in members.iter().enumerate() {
        for &i in m {
            groups_of[i].push(g);
        }
    }
    // First the step extent of every run, keeping the series while they fit the budget; then
    // each group's grid over its runs' extents, and every run's points on its groups' grids.
    let mut extents: Vec<Option<(i64, i64)>> = Vec::with_capacity(distinct.len());
    let mut kept: Vec<Option<trainlog_store::Series>> = Vec::with_capacity(distinct.len());
    let mut kept_points = 0usize;
    {
        let mut reads = futures::stream::iter(distinct.iter().map(|id| state.store.series(id, &key, range)))
            .buffered(SERIES_READS_IN_FLIGHT);
        while let Some(series) = reads.next().await {
            let series = series?;
            let extent = series.steps.first().copied().zip(series.steps.last().copied());
            extents.push(extent);
            if extent.is_some() && kept_points + series.len() <= GROUP_POINTS_KEPT {
                kept_points += series.len();
                kept.push(Some(series));
            } else {
                kept.push(None);
            }
        }
    }
    let mut grids: Vec<Option<trainlog_store::GroupBuckets>> = members
        .iter()
        .map(|m| trainlog_store::StepGrid::over(m.iter().filter_map(|&i| extents[i]), n))
        .map(|grid| grid.map(trainlog_store::GroupBuckets::new))
        .collect();
    let mut add = |i: usize, series: &trainlog_store::Series| {
        for &g in &groups_of[i] {
            if let Some(grid) = grids[g].as_mut() {
                grid.add(series);
            }
        }
    };
    let again: Vec<usize> = (0..distinct.len()).filter(|&i| extents[i].is_some() && kept[i].is_none()).collect();
    for (i, series) in kept.iter_mut().enumerate() {
        if let Some(series) = series.take() {
            add(i, &series);
        }
    }
    {
        let mut reads = futures::stream::iter(again.iter().map(|&i| {
            let (state, key, id) = (&state, &key, &distinct[i]);
            async move { Ok::<_, ApiError>((i, state.store.series(id, key, range).await?)) }
        }))
        .buffered(SERIES_READS_IN_FLIGHT);
        while let Some(read) = reads.next().await {
            let (i, series) = read?;
            add(i, &series);
        }
    }
    let answer = api::MetricsQueryAnswer::Groups(api::GroupedSeries {
        key: key.as_str(),
        groups: groups
            .iter()
            .zip(&members)
            .zip(&grids)
            .map(|(((name, _), m), grid)| api::GroupSeries {
                name: name.clone(),
                runs: m.len() as u64,
                runs_without_points: m.iter().filter(|&&i| extents[i].is_none()).count() as u64,
                buckets: grid
                    .as_ref()
                    .map(|g| g.buckets().iter().map(api::GroupBucketView::new).collect())
                    .unwrap_or_default(),
            })
            .collect(),
    });
    json_answer(&answer)
}

fn json_answer(answer: &impl serde::Serialize) -> Result<HttpResponse> {
    let mut out = Vec::with_capacity(4096);
    serde_json::to_writer(&mut out, answer).map_err(|e| ApiError::Internal(e.to_string()))?;
    Ok(HttpResponse::Ok().content_type("application/json").body(out))
}

struct SearchRequest {
    project: Option<String>,
    filter: String,
    order_by: Vec<String>,
    limit: u32,
    offset: u64,
    archived: api::Archived,
    columns: Columns,
    total: bool,
}

/// Which keys of one kind (params, tags or metrics) a search answers.
#[derive(Clone, Debug, PartialEq)]
enum Pick {
    All,
    Only(std::collections::BTreeSet<String>),
}

impl Pick {
    fn keeps(&self, key: &str) -> bool {
        match self {
            Pick::All => true,
            Pick::Only(keys) => keys.contains(key),
        }
    }
}

/// The params, tags and metrics a search answers for each run (`columns`); everything by default.
#[derive(Clone, Debug, PartialEq)]
struct Columns {
    params: Pick,
    tags: Pick,
    metrics: Pick,
}

impl Default for Columns {
    fn default() -> Self {
        Columns { params: Pick::All, tags: Pick::All, metrics: Pick::All }
    }
}

impl Columns {
    /// `params`, `tags`, `metrics`, or one of them followed by `.KEY`; a kind not named is left out.
    /// `field_of(i)` names the item in an error.
    fn parse<'a>(items: impl IntoIterator<Item = &'a str>, field_of: impl Fn(usize) -> String) -> Result<Columns> {
        let none = || Pick::Only(Default::default());
        let mut columns = Columns { params: none(), tags: none(), metrics: none() };
        for (i, item) in items.into_iter().enumerate() {
            let (kind, key) = match item.split_once('.') {
                Some((kind, key)) => (kind, Some(key)),
                None => (item, None),
            };
            let pick = match kind {
                "params" => &mut columns.params,
                "tags" => &mut columns.tags,
                "metrics" => &mut columns.metrics,
                _ => {
                    return Err(ApiError::invalid(
                        &field_of(i),
                        format!("expected params, tags or metrics, alone or followed by .KEY, got {item:?}"),
                    ))
                }
            };
            match key {
                None => *pick = Pick::All,
                Some("") => return Err(ApiError::invalid(&field_of(i), format!("a key must follow {kind:?}."))),
                Some(key) => {
                    if let Pick::Only(keys) = pick {
                        keys.insert(key.to_owned());
                    }
                }
            }
        }
        Ok(columns)
    }
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

async fn search(state: &State, http: &HttpRequest, req: SearchRequest) -> Result<HttpResponse> {
    use trainlog_meta::search::RunScope;
    use trainlog_meta::Visibility;
    let started = std::time::Instant::now();
    let scope = match req.project {
        Some(name) => {
            let project = meta(state, move |m| m.project_by_name(&name)).await?;
            require(http, Scope::Project, project.id, &project.name, Role::Read).await?;
            RunScope::Project(project.id)
        }
        None => match crate::auth::visibility(http, Scope::Project).await? {
            Visibility::All => RunScope::All,
            Visibility::Only(ids) => RunScope::Projects(ids),
            Visibility::AllBut(ids) => RunScope::AllBut(ids),
        },
    };
    // Filters and orders on metrics read the stored summaries: write the changed ones first.
    state.store.sync_summaries().await?;
    let (limit, offset) = (req.limit, req.offset);
    let (filter, order_by, lifecycle, want_total) = (req.filter, req.order_by, req.archived.lifecycle(), req.total);
    let columns = req.columns;
    // One blocking call: the page of runs (params and tags loaded per table, not per run, and
    // kept between answers while a run is unchanged) and, when asked, the number of matches.
    let (mut runs, more, total) = meta(state, move |m| {
        let mut runs = m.search_in(scope.clone(), lifecycle, &filter, &order_by, limit + 1, offset)?;
        let more = runs.len() > limit as usize;
        runs.truncate(limit as usize);
        let total = match (want_total, more) {
            (false, _) => None,
            (true, false) if !runs.is_empty() || offset == 0 => Some(offset + runs.len() as u64),
            (true, _) => Some(m.search_count(scope, lifecycle, &filter)?),
        };
        Ok((runs, more, total))
    })
    .await?;
    // Summaries as stored, with the points this server took and has not written yet.
    let mut summaries = match &columns.metrics {
        Pick::Only(keys) if keys.is_empty() => Default::default(),
        metrics => {
            let ids: Vec<RunId> = runs.iter().map(|(run, _)| run.id.clone()).collect();
            state.store.summaries_of(&ids, |key| metrics.keeps(key)).await?
        }
    };
    let next = more.then(|| (offset + limit as u64).to_string());
    if columns.params != Pick::All || columns.tags != Pick::All {
        for (run, _) in &mut runs {
            run.params.retain(|k, _| columns.params.keeps(k));
            run.tags.retain(|k, _| columns.tags.keeps(k));
        }
    }
    if wants_arrow(http) {
        let mut answer = arrow_runs(runs, summaries, next, total).await?;
        answer.headers_mut().insert(SERVER_TIMING, server_timing(started));
        return Ok(answer);
    }
    let list = runs
        .into_iter()
        .map(|(run, archived)| {
            let summaries = summaries.remove(run.id.as_str()).unwrap_or_default();
            api::RunView::from_owned(run, summaries, archived)
        })
        .collect();
    let list = api::RunList { runs: list, next_page_token: next, total };
    // Sized up front: a page of wide runs is a megabyte, and growing the buffer copies it over.
    let mut body = Vec::with_capacity(list.runs.len() * 1024 + 256);
    serde_json::to_writer(&mut body, &list).map_err(|e| ApiError::Internal(e.to_string()))?;
    Ok(HttpResponse::Ok()
        .content_type("application/json")
        .insert_header((SERVER_TIMING, server_timing(started)))
        .body(body))
}

const SERVER_TIMING: actix_web::http::header::HeaderName =
    actix_web::http::header::HeaderName::from_static("server-timing");

/// A `Server-Timing` value (W3C) saying how long the server spent on an answer, body included,
/// so a client can tell the server's time from the network's.
fn server_timing(started: std::time::Instant) -> actix_web::http::header::HeaderValue {
    let text = format!("app;dur={:.3}", started.elapsed().as_secs_f64() * 1e3);
    actix_web::http::header::HeaderValue::from_str(&text)
        .unwrap_or_else(|_| actix_web::http::header::HeaderValue::from_static("app"))
}

/// A page of runs as an Arrow IPC stream in the runs table's layout (attributes, then `params`,
/// `tags` and `metrics` struct columns); the next page token and the total travel in headers.
async fn arrow_runs(
    runs: Vec<(Run, bool)>,
    mut summaries: std::collections::HashMap<String, BTreeMap<String, trainlog_schema::MetricSummary>>,
    next: Option<String>,
    total: Option<u64>,
) -> Result<HttpResponse> {
    let exports: Vec<trainlog_meta::RunExport> = runs
        .into_iter()
        .map(|(run, _)| {
            let summaries = summaries.remove(run.id.as_str()).unwrap_or_default();
            trainlog_meta::RunExport { run, summaries }
        })
        .collect();
    let body = web::block(move || -> Result<Vec<u8>> {
        let batch = trainlog_store::runs_record_batch(&exports)?;
        let mut buf = Vec::new();
        let mut w = arrow_ipc::writer::StreamWriter::try_new(&mut buf, &batch.schema())
            .map_err(|e| ApiError::Internal(e.to_string()))?;
        w.write(&batch).map_err(|e| ApiError::Internal(e.to_string()))?;
        w.finish().map_err(|e| ApiError::Internal(e.to_string()))?;
        drop(w);
        Ok(buf)
    })
    .await??;
    let mut answer = HttpResponse::Ok();
    answer.content_type(ARROW_STREAM_MEDIA_TYPE);
    if let Some(next) = next {
        answer.insert_header(("x-next-page-token", next));
    }
    if let Some(total) = total {
        answer.insert_header(("x-total-count", total.to_string()));
    }
    Ok(answer.body(body))
}

/// A project's runs, filtered and sorted.
#[utoipa::path(get, path = "/api/v1/projects/{name}/runs", tag = "runs",
    params(("name" = inline(api::NameText), Path, description = "The project's name."), ("filter" = Option<String>, Query, max_length = 3000, description = "e.g. `params.lr > 0.001 and status = 'finished'`."),
        ("order_by" = Option<String>, Query, max_length = 1000, description = "Comma-separated, e.g. `metrics.val/acc desc`."),
        ("limit" = Option<u32>, Query, minimum = 1, maximum = 1000), ("page_token" = Option<String>, Query, pattern = "^[0-9]{0,18}$"),
        ("archived" = Option<String>, Query, pattern = "^(false|true|all)$", description = "false: only active runs (the default); true: only archived runs; all: both."),
        ("columns" = Option<String>, Query, max_length = 3000, description = "Comma-separated: `params`, `tags`, `metrics` (every key of the kind) or `params.KEY`, `tags.KEY`, `metrics.KEY`; a kind not named is left out. Everything when absent."),
        ("total" = Option<bool>, Query, description = "true: answer `total`, the number of runs matched over every page (it costs a count).")),
    responses((status = 200, description = "One page of runs. With `Accept: application/vnd.apache.arrow.stream`, an Arrow IPC stream in the runs table's layout, with the next page token and the total in the `x-next-page-token` and `x-total-count` headers.",
        content((api::RunList = "application/json"), ("application/vnd.apache.arrow.stream")))))]
pub(crate) async fn project_runs(state: State, path: web::Path<String>, req: HttpRequest) -> Result<HttpResponse> {
    let pairs = query_pairs(&req)?;
    let filter = query_one(&pairs, "filter").unwrap_or("");
    check_len(
        "filter",
        "a filter in the URL (a longer one goes to POST /runs/search)",
        filter,
        MAX_QUERY_FILTER_CHARS,
    )?;
    let order_by_text: usize = pairs.iter().filter(|(k, _)| k == "order_by").map(|(_, v)| v.chars().count()).sum();
    if order_by_text > MAX_QUERY_ORDER_BY_CHARS {
        return Err(ApiError::invalid(
            "order_by",
            format!("order_by in the URL may have at most {MAX_QUERY_ORDER_BY_CHARS} characters, got {order_by_text}"),
        ));
    }
    let order_by: Vec<String> = pairs
        .iter()
        .filter(|(k, _)| k == "order_by")
        .flat_map(|(_, v)| v.split(',').map(|s| s.trim().to_owned()).filter(|s| !s.is_empty()).collect::<Vec<_>>())
        .collect();
    let (limit, offset) = page(query_int(&pairs, "limit")?, query_one(&pairs, "page_token"))?;
    let archived = match query_one(&pairs, "archived") {
        None => api::Archived::Active,
        Some(text) => api::Archived::parse(text)
            .ok_or_else(|| ApiError::invalid("archived", format!("expected false, true or all, got {text:?}")))?,
    };
    let columns = match query_one(&pairs, "columns") {
        None => Columns::default(),
        Some(text) => {
            check_len("columns", "the columns in the URL", text, MAX_QUERY_FILTER_CHARS)?;
            Columns::parse(text.split(',').map(str::trim).filter(|s| !s.is_empty()), |_| "columns".to_owned())?
        }
    };
    let total = match query_one(&pairs, "total") {
        None | Some("false") => false,
        Some("true") => true,
        Some(text) => return Err(ApiError::invalid("total", format!("expected true or false, got {text:?}"))),
    };
    let search_req = SearchRequest {
        project: Some(path.into_inner()),
        filter: filter.to_owned(),
        order_by,
        limit,
        offset,
        archived,
        columns,
        total,
    };
    search(&state, &req, search_req).await
}

/// Search runs of one project or all.
#[utoipa::path(post, path = "/api/v1/runs/search", tag = "runs", request_body = api::SearchRuns,
    responses((status = 200, description = "One page of runs.", body = api::RunList)))]
pub(crate) async fn search_runs(state: State, req: HttpRequest, payload: web::Payload) -> Result<HttpResponse> {
    let body: api::SearchRuns = json_body(&req, payload).await?;
    let (limit, offset) = page(body.limit, body.page_token.as_deref())?;
    let search_req = SearchRequest {
        project: body.project,
        filter: body.filter,
        order_by: body.order_by,
        limit,
        offset,
        archived: body.archived.unwrap_or_default(),
        columns: match &body.columns {
            None => Columns::default(),
            Some(items) => Columns::parse(items.iter().map(String::as_str), |i| format!("columns[{i}]"))?,
        },
        total: body.total,
    };
    search(&state, &req, search_req).await
}

/// The run and artifact path of an artifact route, parsed once. The path is percent-decoded by
/// the router, so an encoded `..` is refused here like a plain one.
async fn artifact_target(
    state: &State,
    req: &HttpRequest,
    path: &web::Path<(String, String)>,
    need: Role,
) -> Result<(RunId, i64, ArtifactPath)> {
    let (id, artifact) = (&path.0, &path.1);
    let run = run_id(id)?;
    let artifact = ArtifactPath::parse("path", artifact)?;
    let project_id = run_for(state, req, &run, need).await?;
    Ok((run, project_id, artifact))
}

/// A run's artifacts.
#[utoipa::path(get, path = "/api/v1/runs/{id}/artifacts", tag = "runs",
    params(("id" = inline(api::RunIdText), Path, description = "The run's id."), ("prefix" = Option<String>, Query, description = "Only paths starting with this.")),
    responses((status = 200, description = "The artifacts.", body = api::ArtifactList)))]
pub(crate) async fn list_artifacts(state: State, path: web::Path<String>, req: HttpRequest) -> Result<HttpResponse> {
    let id = run_id(&path)?;
    readable_run(&state, &req, &id).await?;
    let pairs = query_pairs(&req)?;
    let prefix = query_one(&pairs, "prefix").unwrap_or("").to_owned();
    let rows = meta(&state, move |m| m.artifacts(&id, &prefix)).await?;
    Ok(HttpResponse::Ok().json(api::ArtifactList { artifacts: rows.iter().map(api::ArtifactView::new).collect() }))
}

/// Upload an artifact (replacing one at the same path).
#[utoipa::path(put, path = "/api/v1/runs/{id}/artifacts/{path}", tag = "runs",
    params(("id" = inline(api::RunIdText), Path, description = "The run's id."), ("path" = inline(api::ArtifactPathText), Path, description = "A relative path; '/' separates folders.")),
    request_body(content = Option<Vec<u8>>, content_type = "application/octet-stream", description = "The bytes; an empty body stores an empty file."),
    responses((status = 201, description = "Stored.", body = api::ArtifactView)))]
pub(crate) async fn put_artifact(
    state: State,
    path: web::Path<(String, String)>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    let (run, project_id, artifact) = artifact_target(&state, &req, &path, Role::Write).await?;
    let row = store_artifact(&state, run, project_id, artifact, payload).await?;
    Ok(HttpResponse::Created().json(api::ArtifactView::new(&row)))
}

/// Stores an artifact's bytes, then its record; a path that is a file and a folder at once is refused.
pub(crate) async fn store_artifact(
    state: &State,
    run: RunId,
    project_id: i64,
    artifact: ArtifactPath,
    payload: web::Payload,
) -> Result<trainlog_meta::ArtifactRow> {
    let clash = {
        let (run, artifact) = (run.clone(), artifact.clone());
        meta(state, move |m| m.artifact_path_clash(&run, &artifact)).await?
    };
    if let Some(other) = clash {
        return Err(ApiError::Conflict {
            field: "path".into(),
            reason: format!("artifact {other:?} is in the way: a path is a file or a folder of files, not both"),
        });
    }
    let artifacts = state.store.artifacts();
    let location = trainlog_store::ArtifactStore::location(project_id, &run, &artifact)?;
    let uploaded = artifacts.upload(&location, payload).await?;
    meta(state, move |m| m.put_artifact(&run, &artifact, uploaded.size, &uploaded.sha256)).await
}

/// Download an artifact; `x-trainlog-sha256` gives its checksum.
#[utoipa::path(get, path = "/api/v1/runs/{id}/artifacts/{path}", tag = "runs",
    params(("id" = inline(api::RunIdText), Path, description = "The run's id."), ("path" = inline(api::ArtifactPathText), Path)),
    responses((status = 200, description = "The bytes.", content_type = "application/octet-stream", body = Vec<u8>,
        headers(("x-trainlog-sha256" = String, description = "Hex SHA-256 of the bytes.")))))]
pub(crate) async fn get_artifact(
    state: State,
    path: web::Path<(String, String)>,
    req: HttpRequest,
) -> Result<HttpResponse> {
    let (run, project_id, artifact) = artifact_target(&state, &req, &path, Role::Read).await?;
    artifact_download(&state, run, project_id, artifact).await
}

/// An artifact's bytes, streamed, with their checksum in `x-trainlog-sha256`.
pub(crate) async fn artifact_download(
    state: &State,
    run: RunId,
    project_id: i64,
    artifact: ArtifactPath,
) -> Result<HttpResponse> {
    let location = trainlog_store::ArtifactStore::location(project_id, &run, &artifact)?;
    let row = meta(state, move |m| m.artifact(&run, &artifact)).await?;
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

/// Delete an artifact.
#[utoipa::path(delete, path = "/api/v1/runs/{id}/artifacts/{path}", tag = "runs",
    params(("id" = inline(api::RunIdText), Path, description = "The run's id."), ("path" = inline(api::ArtifactPathText), Path)),
    responses((status = 200, description = "Deleted.", body = api::StatusOk)))]
pub(crate) async fn delete_artifact(
    state: State,
    path: web::Path<(String, String)>,
    req: HttpRequest,
) -> Result<HttpResponse> {
    let (run, project_id, artifact) = artifact_target(&state, &req, &path, Role::Write).await?;
    remove_artifact(&state, run, project_id, artifact).await?;
    Ok(HttpResponse::Ok().json(api::OK))
}

/// Deletes an artifact's record, then its bytes.
pub(crate) async fn remove_artifact(state: &State, run: RunId, project_id: i64, artifact: ArtifactPath) -> Result<()> {
    let location = trainlog_store::ArtifactStore::location(project_id, &run, &artifact)?;
    let existed = {
        let (run, artifact) = (run.clone(), artifact.clone());
        meta(state, move |m| m.delete_artifact(&run, &artifact)).await?
    };
    if !existed {
        return Err(ApiError::NotFound(format!("artifact {artifact:?} of run {run}")));
    }
    state.store.artifacts().delete(&location).await?;
    Ok(())
}

/// Record a checkpoint whose files were uploaded under `checkpoints/{name}/`, then apply retention.
#[utoipa::path(post, path = "/api/v1/runs/{id}/checkpoints", tag = "runs", params(("id" = inline(api::RunIdText), Path, description = "The run's id.")),
    request_body = api::NewCheckpoint, responses((status = 201, description = "The checkpoint, and those retention dropped.", body = api::CheckpointCreated)))]
pub(crate) async fn put_checkpoint(
    state: State,
    path: web::Path<String>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    let id = run_id(&path)?;
    let project_id = writable_run(&state, &req, &id).await?;
    let body: api::NewCheckpoint = json_body(&req, payload).await?;
    let name = body.name.clone().unwrap_or_else(|| format!("step-{:012}", body.step));
    if name.contains('/') {
        return Err(ApiError::invalid("name", "a checkpoint name has no '/'"));
    }
    ArtifactPath::parse("name", &format!("checkpoints/{name}"))?;
    for (i, f) in body.files.iter().enumerate() {
        ArtifactPath::parse(&format!("files[{i}].path"), &f.path)?;
    }
    let minimize = body.mode.unwrap_or(api::RankMode::Min) == api::RankMode::Min;
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
    let dropped = dropped.into_iter().map(|c| c.name).collect();
    Ok(HttpResponse::Created().json(api::CheckpointCreated { checkpoint: api::CheckpointView::new(&row), dropped }))
}

/// A run's checkpoints, newest step first.
#[utoipa::path(get, path = "/api/v1/runs/{id}/checkpoints", tag = "runs", params(("id" = inline(api::RunIdText), Path, description = "The run's id.")),
    responses((status = 200, description = "The checkpoints.", body = api::CheckpointList)))]
pub(crate) async fn list_checkpoints(state: State, path: web::Path<String>, req: HttpRequest) -> Result<HttpResponse> {
    let id = run_id(&path)?;
    readable_run(&state, &req, &id).await?;
    let rows = meta(&state, move |m| m.checkpoints(&id)).await?;
    Ok(HttpResponse::Ok()
        .json(api::CheckpointList { checkpoints: rows.iter().map(api::CheckpointView::new).collect() }))
}

/// A run's newest checkpoint.
#[utoipa::path(get, path = "/api/v1/runs/{id}/checkpoints/latest", tag = "runs", params(("id" = inline(api::RunIdText), Path, description = "The run's id.")),
    responses((status = 200, description = "The checkpoint.", body = api::CheckpointView)))]
pub(crate) async fn latest_checkpoint(state: State, path: web::Path<String>, req: HttpRequest) -> Result<HttpResponse> {
    let id = run_id(&path)?;
    readable_run(&state, &req, &id).await?;
    let rows = {
        let id = id.clone();
        meta(&state, move |m| m.checkpoints(&id)).await?
    };
    let latest = rows.first().ok_or_else(|| ApiError::NotFound(format!("a checkpoint of run {id}")))?;
    Ok(HttpResponse::Ok().json(api::CheckpointView::new(latest)))
}

/// Persist everything buffered to Parquet now.
#[utoipa::path(post, path = "/api/v1/admin/flush", tag = "system", responses((status = 200, description = "Everything acknowledged is in Parquet.", body = api::StatusOk)))]
pub(crate) async fn flush(state: State, req: HttpRequest) -> Result<HttpResponse> {
    crate::auth::require_admin(&req, "flushing")?;
    state.store.flush().await?;
    Ok(HttpResponse::Ok().json(api::OK))
}

/// The server's counters: buffer, files, write-ahead log, persisting, compaction, errors.
#[utoipa::path(get, path = "/api/v1/admin/stats", tag = "system", responses((status = 200, description = "The counters.", body = api::Stats)))]
pub(crate) async fn stats(state: State, req: HttpRequest) -> Result<HttpResponse> {
    crate::auth::require_admin(&req, "the server's counters")?;
    let s = state.store.stats();
    let c = s.counters;
    Ok(HttpResponse::Ok().json(api::Stats {
        buffered_points: s.buffered_points as u64,
        buffered_bytes: s.buffered_bytes as u64,
        max_buffer_bytes: s.max_buffer_bytes as u64,
        frozen_generations: s.frozen_generations as u64,
        files: s.files as u64,
        file_bytes: s.file_bytes as u64,
        file_rows: s.file_rows as u64,
        wal_replayed_records: s.wal_replayed_records as u64,
        wal_cut_bytes: s.wal_cut_bytes as u64,
        object_store_seconds: c.object_store_micros as f64 / 1e6,
        errors: crate::error::error_counts().into_iter().map(|(code, n)| (code.to_owned(), n)).collect(),
        counters: c.named().into_iter().map(|(name, _, value)| (name.to_owned(), value)).collect(),
    }))
}
