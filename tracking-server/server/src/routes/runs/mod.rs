//! Runs: creating or resuming them, reading them with their metadata, changing their name,
//! notes, group, params and tags, finishing, archiving, restoring and deleting them for good,
//! and searching them (`search`).

mod job;
mod recorded;
mod search;
mod stop;
mod wire;

pub(crate) use wire::RunView;

use crate::auth::require_run;
use crate::body::json_body;
use crate::error::{ApiError, Result};
use crate::lookup;
use crate::state::{meta, State};
use crate::wire::{RunIdText, StatusOk, OK};
use actix_web::{web, HttpRequest, HttpResponse};
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use trainlog_meta::{MetaStore, NewRun, Role, Run, RunUpdate};
use trainlog_schema::limits::{
    check_count, check_epoch_ms, check_len, MAX_NAME_CHARS, MAX_TAGS_PER_REQUEST, MAX_TAG_VALUE_CHARS, MAX_TEXT_CHARS,
};
use trainlog_schema::{flatten_params, ProjectName, RunColor, RunId, TagKey};

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/projects/{name}/runs", web::get().to(search::project_runs))
        .route("/runs", web::post().to(create_run))
        .route("/runs/search", web::post().to(search::search_runs))
        .route("/runs/{id}", web::get().to(get_run))
        .route("/runs/{id}", web::patch().to(update_run))
        .route("/runs/{id}", web::delete().to(delete_run))
        .route("/runs/{id}/params", web::post().to(log_params))
        .route("/runs/{id}/metadata/{section}", web::put().to(put_metadata))
        .route("/runs/{id}/tags", web::post().to(set_tags))
        .route("/runs/{id}/finish", web::post().to(finish_run))
        .route("/runs/{id}/heartbeat", web::post().to(job::heartbeat))
        .route("/runs/{id}/stop", web::post().to(stop::stop_run))
        .route("/runs/{id}/archive", web::post().to(archive_run))
        .route("/runs/{id}/restore", web::post().to(restore_run));
}

/// This resource's operations in the API document.
#[derive(utoipa::OpenApi)]
#[openapi(paths(
    search::project_runs,
    create_run,
    search::search_runs,
    get_run,
    update_run,
    log_params,
    put_metadata,
    set_tags,
    finish_run,
    job::heartbeat,
    stop::stop_run,
    archive_run,
    delete_run,
    restore_run,
))]
pub(super) struct Api;

/// Applies a change to a run in the metadata store and answers the run as it is afterwards;
/// the project's runs table is rewritten soon after.
async fn change_run(
    state: &State,
    req: &HttpRequest,
    path: &str,
    change: impl Fn(&MetaStore, &RunId) -> trainlog_meta::Result<()> + Send + 'static,
) -> Result<Run> {
    let (id, _) = lookup::writable(state, req, path).await?;
    let run = meta(state, move |m| {
        change(m, &id)?;
        m.run(&id)
    })
    .await?;
    state.store.project_changed(run.project_id);
    Ok(run)
}

async fn run_view(state: &State, run: &Run, archived: bool) -> Result<wire::RunView> {
    let summaries = state.store.summaries(&run.id).await?;
    Ok(wire::RunView::new(run, &summaries, archived))
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
#[utoipa::path(post, path = "/api/v1/runs", tag = "runs", request_body = wire::CreateRun,
    responses((status = 201, description = "The new run.", body = wire::CreatedRun), (status = 200, description = "The resumed run.", body = wire::CreatedRun)))]
pub(crate) async fn create_run(state: State, req: HttpRequest, payload: web::Payload) -> Result<HttpResponse> {
    let mut body: wire::CreateRun = json_body(&req, payload).await?;
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
        start_ms: body.start_time.map(|t| check_epoch_ms("start_time", t)).transpose()?,
        resume: body.resume,
        overwrite_params: body.overwrite_params,
        actor: crate::auth::actor(&req),
        process: body.process.map(job::ProcessInput::into_join).transpose()?,
    };
    let rank = new.process.as_ref().map(|p| p.rank);
    if new.project.is_none() && !(new.resume && new.id.is_some()) {
        return Err(ApiError::invalid("project", "a new run needs a project"));
    }
    let (run, created, joined) = meta(&state, move |m| m.create_run_joining(&new)).await?;
    state.store.project_changed(run.project_id);
    let (job, _) =
        if joined.is_some() { job::job_of(&state, &run.id, run.project_id).await? } else { (None, Vec::new()) };
    let body = wire::CreatedRun {
        run: run_view(&state, &run, false).await?,
        job,
        joined: joined.zip(rank).map(|(j, rank)| job::JoinedView {
            attempt: j.attempt,
            rank,
            new_attempt: j.new_attempt,
        }),
    };
    Ok(if created { HttpResponse::Created().json(body) } else { HttpResponse::Ok().json(body) })
}

/// Get a run with its params, tags, metric summaries and metadata; an archived run too.
#[utoipa::path(get, path = "/api/v1/runs/{id}", tag = "runs", params(("id" = inline(RunIdText), Path, description = "The run's id.")),
    responses((status = 200, description = "The run.", body = wire::RunDetail)))]
pub(crate) async fn get_run(state: State, path: web::Path<String>, req: HttpRequest) -> Result<HttpResponse> {
    let (id, _) = lookup::readable(&state, &req, &path).await?;
    let ((run, archived), metadata) = meta(&state, move |m| Ok((m.run_any(&id)?, m.metadata(&id)?))).await?;
    let (job, attempts) = job::job_of(&state, &run.id, run.project_id).await?;
    let run = run_view(&state, &run, archived).await?;
    Ok(HttpResponse::Ok().json(wire::RunDetail { run, metadata, job, attempts }))
}

/// Largest metadata document accepted, so a huge git diff cannot bloat the database.
const MAX_METADATA_BYTES: usize = 4 << 20;

/// Store one metadata section of a run (code, environment, packages, …), replacing it. The
/// command lines of `environment` and `python` and the diff and remote URL of `code` are stored
/// with their secrets masked (`command_line_redactions`, `argv_redactions` and `diff_redactions`
/// count them); in a project that keeps no diffs, `code.diff` is stored null with
/// `diff_disabled: true`.
#[utoipa::path(put, path = "/api/v1/runs/{id}/metadata/{section}", tag = "runs",
    params(("id" = inline(RunIdText), Path, description = "The run's id."), ("section" = String, Path, pattern = "^[A-Za-z0-9_-]{1,64}$", description = "A section's name.")),
    request_body(content = Object, description = "The section: a JSON object of at most 4 MiB."),
    responses((status = 200, description = "Stored.", body = StatusOk)))]
pub(crate) async fn put_metadata(
    state: State,
    path: web::Path<(String, String)>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    let (id, section) = path.into_inner();
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
    change_run(&state, &req, &id, move |m, id| {
        if !recorded::is_redacted(&section) {
            return m.set_metadata(id, &section, &value);
        }
        let capture_diff =
            !recorded::needs_project_settings(&section) || m.project_settings(m.run(id)?.project_id)?.capture_diff;
        let mut value = value.clone();
        recorded::redact_section(&section, &mut value, capture_diff);
        m.set_metadata(id, &section, &value)
    })
    .await?;
    Ok(HttpResponse::Ok().json(OK))
}

/// Change a run's name, notes, group, colour or tags (a null tag value deletes the tag).
#[utoipa::path(patch, path = "/api/v1/runs/{id}", tag = "runs", params(("id" = inline(RunIdText), Path, description = "The run's id.")),
    request_body = wire::UpdateRun, responses((status = 200, description = "The run as it is now.", body = wire::RunView)))]
pub(crate) async fn update_run(
    state: State,
    path: web::Path<String>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    let body: wire::UpdateRun = json_body(&req, payload).await?;
    let (set_tags, delete_tags) = parse_tags("tags", &body.tags, true)?;
    check_run_text(&[
        ("name", body.name.as_deref()),
        ("group", body.group.as_deref()),
        ("notes", body.notes.as_deref()),
    ])?;
    let color = body.color.as_deref().map(|c| RunColor::parse("color", c)).transpose()?;
    let update = RunUpdate { name: body.name, notes: body.notes, group: body.group, color, set_tags, delete_tags };
    let run = change_run(&state, &req, &path, move |m, id| m.update_run(id, &update)).await?;
    Ok(HttpResponse::Ok().json(run_view(&state, &run, false).await?))
}

/// Add params to a run. A different value for a key already stored is a conflict unless `overwrite`.
#[utoipa::path(post, path = "/api/v1/runs/{id}/params", tag = "runs", params(("id" = inline(RunIdText), Path, description = "The run's id.")),
    request_body = wire::LogParams, responses((status = 200, description = "All the run's params.", body = wire::ParamsAnswer)))]
pub(crate) async fn log_params(
    state: State,
    path: web::Path<String>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    let body: wire::LogParams = json_body(&req, payload).await?;
    let params = flatten_params("params", &body.params)?;
    let run = change_run(&state, &req, &path, move |m, id| m.set_params(id, &params, body.overwrite)).await?;
    Ok(HttpResponse::Ok().json(wire::ParamsAnswer { params: wire::ParamsView::new(&run) }))
}

/// Set or delete (null) tags of a run.
#[utoipa::path(post, path = "/api/v1/runs/{id}/tags", tag = "runs", params(("id" = inline(RunIdText), Path, description = "The run's id.")),
    request_body = wire::SetTags, responses((status = 200, description = "All the run's tags.", body = wire::TagsAnswer)))]
pub(crate) async fn set_tags(
    state: State,
    path: web::Path<String>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    let body: wire::SetTags = json_body(&req, payload).await?;
    let (set_tags, delete_tags) = parse_tags("tags", &body.tags, true)?;
    let update = RunUpdate { set_tags, delete_tags, ..RunUpdate::default() };
    let run = change_run(&state, &req, &path, move |m, id| m.update_run(id, &update)).await?;
    Ok(HttpResponse::Ok().json(wire::TagsAnswer { tags: run.tags }))
}

/// End a run with a final status (finished when the body is empty).
#[utoipa::path(post, path = "/api/v1/runs/{id}/finish", tag = "runs", params(("id" = inline(RunIdText), Path, description = "The run's id.")),
    request_body(content = Option<wire::FinishRun>, description = "May be empty."),
    responses((status = 200, description = "The run as it is now.", body = wire::RunView)))]
pub(crate) async fn finish_run(
    state: State,
    path: web::Path<String>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    let bytes = crate::body::json_bytes(&req, payload).await?;
    let body: wire::FinishRun = match bytes.trim_ascii() {
        b"" | b"null" => wire::FinishRun::default(),
        _ => crate::body::parse_json_object(&bytes)?,
    };
    let status = body.status.unwrap_or(wire::FinalStatus::Finished).run_status();
    let end_time = body.end_time.map(|t| check_epoch_ms("end_time", t)).transpose()?;
    let run = match body.process.map(job::ProcessReportInput::into_report).transpose()? {
        // One process of the job ended: the run ends when its last rank does.
        Some(report) => {
            let ended = Arc::new(AtomicBool::new(false));
            let seen = ended.clone();
            let run = change_run(&state, &req, &path, move |m, id| {
                seen.store(m.end_process(id, &report, status, end_time)?, Ordering::Relaxed);
                Ok(())
            })
            .await?;
            if ended.load(Ordering::Relaxed) {
                state.store.run_finished(&run.id).await?;
            }
            run
        }
        None => {
            let run = change_run(&state, &req, &path, move |m, id| m.set_status(id, status, end_time)).await?;
            state.store.run_finished(&run.id).await?;
            run
        }
    };
    Ok(HttpResponse::Ok().json(run_view(&state, &run, false).await?))
}

/// Archive a run: it leaves lists and searches (unless they ask for archived runs) and takes no
/// changes until restored; its data stays and reads go on. Archiving an archived run changes nothing.
#[utoipa::path(post, path = "/api/v1/runs/{id}/archive", tag = "runs", params(("id" = inline(RunIdText), Path, description = "The run's id.")),
    request_body(content = Option<wire::NoFields>, description = "Empty, or `{}`."),
    responses((status = 200, description = "The run, archived.", body = wire::RunView)))]
pub(crate) async fn archive_run(
    state: State,
    path: web::Path<String>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    set_archived(state, path, req, payload, true).await
}

/// Restore an archived run. Restoring an active run changes nothing.
#[utoipa::path(post, path = "/api/v1/runs/{id}/restore", tag = "runs", params(("id" = inline(RunIdText), Path, description = "The run's id.")),
    request_body(content = Option<wire::NoFields>, description = "Empty, or `{}`."),
    responses((status = 200, description = "The run, active.", body = wire::RunView)))]
pub(crate) async fn restore_run(
    state: State,
    path: web::Path<String>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    set_archived(state, path, req, payload, false).await
}

/// Delete an archived run for good: its params, tags, summaries, metric points (buffered or in
/// files), artifacts, checkpoints and metadata. What it spent stays in the report (the spend
/// ledger; `trainlog ledger forget` removes it). Needs admin on the run's project. Refused for a
/// run that is not archived, that a model version was made from, or that is a trial of a running
/// sweep. The run's id is never used again.
#[utoipa::path(delete, path = "/api/v1/runs/{id}", tag = "runs", params(("id" = inline(RunIdText), Path, description = "The run's id.")),
    responses((status = 200, description = "Deleted for good.", body = wire::DeletedRun)))]
pub(crate) async fn delete_run(state: State, path: web::Path<String>, req: HttpRequest) -> Result<HttpResponse> {
    let id = lookup::run_id(&path)?;
    let (project_id, _) = lookup::run_project_any(&state, &id).await?;
    require_run(&req, &id, project_id, Role::Admin).await?;
    // What it spent stays in the spend ledger: its row of the report, brought up to date first.
    crate::report_rows::refresh_run(&state, id.to_string(), trainlog_meta::now_ms()).await?;
    let outcome = state.store.purge_run(&id).await?;
    lookup::forget_run_project(&state, &id)?;
    Ok(HttpResponse::Ok().json(wire::DeletedRun {
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
    let id = lookup::run_id(&path)?;
    let (project_id, _) = lookup::run_project_any(&state, &id).await?;
    require_run(&req, &id, project_id, Role::Write).await?;
    let bytes = crate::body::json_bytes(&req, payload).await?;
    if !matches!(bytes.trim_ascii(), b"" | b"null") {
        crate::body::parse_json_object::<wire::NoFields>(&bytes)?;
    }
    let (run, archived) = {
        let id = id.clone();
        meta(&state, move |m| {
            m.set_run_deleted(&id, archived)?;
            m.run_any(&id)
        })
        .await?
    };
    lookup::forget_run_project(&state, &id)?;
    state.store.project_changed(project_id);
    Ok(HttpResponse::Ok().json(run_view(&state, &run, archived).await?))
}
