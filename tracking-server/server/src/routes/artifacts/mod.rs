//! A run's artifacts (upload, list, download with its checksum, delete) and checkpoints
//! (`checkpoints`). The MLflow artifact proxy stores and reads through the same functions.

mod checkpoints;
mod wire;

pub(crate) use wire::FileEntry;

use crate::body::{checked_upload, UploadRules};
use crate::error::{ApiError, Result};
use crate::lookup;
use crate::query::{query_one, query_pairs};
use crate::state::{meta, State};
use crate::wire::{ArtifactPathText, RunIdText, StatusOk, OK};
use actix_web::{web, HttpRequest, HttpResponse};
use futures::StreamExt;
use trainlog_meta::Role;
use trainlog_schema::{ArtifactPath, RunId};

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/runs/{id}/checkpoints", web::post().to(checkpoints::put_checkpoint))
        .route("/runs/{id}/checkpoints", web::get().to(checkpoints::list_checkpoints))
        .route("/runs/{id}/checkpoints/latest", web::get().to(checkpoints::latest_checkpoint))
        .route("/runs/{id}/checkpoints/{name}/restores", web::post().to(checkpoints::record_restore))
        .route("/runs/{id}/artifacts", web::get().to(list_artifacts))
        .route("/runs/{id}/artifacts/{path:.*}", web::put().to(put_artifact))
        .route("/runs/{id}/artifacts/{path:.*}", web::get().to(get_artifact))
        .route("/runs/{id}/artifacts/{path:.*}", web::delete().to(delete_artifact));
}

/// This resource's operations in the API document.
#[derive(utoipa::OpenApi)]
#[openapi(paths(
    checkpoints::put_checkpoint,
    checkpoints::list_checkpoints,
    checkpoints::latest_checkpoint,
    checkpoints::record_restore,
    list_artifacts,
    put_artifact,
    get_artifact,
    delete_artifact,
))]
pub(super) struct Api;

/// The run and artifact path of an artifact route, parsed once. The path is percent-decoded by
/// the router, so an encoded `..` is refused here like a plain one.
async fn artifact_target(
    state: &State,
    req: &HttpRequest,
    path: &web::Path<(String, String)>,
    need: Role,
) -> Result<(RunId, i64, ArtifactPath)> {
    let (id, artifact) = (&path.0, &path.1);
    let run = lookup::run_id(id)?;
    let artifact = ArtifactPath::parse("path", artifact)?;
    let project_id = lookup::run_for(state, req, &run, need).await?;
    Ok((run, project_id, artifact))
}

/// A run's artifacts.
#[utoipa::path(get, path = "/api/v1/runs/{id}/artifacts", tag = "runs",
    params(("id" = inline(RunIdText), Path, description = "The run's id."), ("prefix" = Option<String>, Query, description = "Only paths starting with this.")),
    responses((status = 200, description = "The artifacts.", body = wire::ArtifactList)))]
pub(crate) async fn list_artifacts(state: State, path: web::Path<String>, req: HttpRequest) -> Result<HttpResponse> {
    let (id, _) = lookup::readable(&state, &req, &path).await?;
    let pairs = query_pairs(&req)?;
    let prefix = query_one(&pairs, "prefix").unwrap_or("").to_owned();
    let rows = meta(&state, move |m| m.artifacts(&id, &prefix)).await?;
    Ok(HttpResponse::Ok().json(wire::ArtifactList { artifacts: rows.iter().map(wire::ArtifactView::new).collect() }))
}

/// Upload an artifact (replacing one at the same path).
#[utoipa::path(put, path = "/api/v1/runs/{id}/artifacts/{path}", tag = "runs",
    params(("id" = inline(RunIdText), Path, description = "The run's id."), ("path" = inline(ArtifactPathText), Path, description = "A relative path; '/' separates folders.")),
    request_body(content = Option<Vec<u8>>, content_type = "application/octet-stream", description = "The bytes; an empty body stores an empty file."),
    responses((status = 201, description = "Stored.", body = wire::ArtifactView)))]
pub(crate) async fn put_artifact(
    state: State,
    path: web::Path<(String, String)>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    let (run, project_id, artifact) = artifact_target(&state, &req, &path, Role::Write).await?;
    let row = store_artifact(&state, &req, run, project_id, artifact, payload, UploadRules::ANY).await?;
    Ok(HttpResponse::Created().json(wire::ArtifactView::new(&row)))
}

/// Stores an artifact's bytes, checked by `rules` as they arrive, then its record; a path that is
/// a file and a folder at once is refused.
pub(crate) async fn store_artifact(
    state: &State,
    req: &HttpRequest,
    run: RunId,
    project_id: i64,
    artifact: ArtifactPath,
    payload: web::Payload,
    rules: UploadRules,
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
    let (body, refusal) = checked_upload(req, payload, rules)?;
    let uploaded = artifacts.upload(&location, body).await.map_err(|e| refusal.or(e.into()))?;
    meta(state, move |m| m.put_artifact(&run, &artifact, uploaded.size, &uploaded.sha256)).await
}

/// Download an artifact; `x-trainlog-sha256` gives its checksum.
#[utoipa::path(get, path = "/api/v1/runs/{id}/artifacts/{path}", tag = "runs",
    params(("id" = inline(RunIdText), Path, description = "The run's id."), ("path" = inline(ArtifactPathText), Path)),
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
    params(("id" = inline(RunIdText), Path, description = "The run's id."), ("path" = inline(ArtifactPathText), Path)),
    responses((status = 200, description = "Deleted.", body = StatusOk)))]
pub(crate) async fn delete_artifact(
    state: State,
    path: web::Path<(String, String)>,
    req: HttpRequest,
) -> Result<HttpResponse> {
    let (run, project_id, artifact) = artifact_target(&state, &req, &path, Role::Write).await?;
    remove_artifact(&state, run, project_id, artifact).await?;
    Ok(HttpResponse::Ok().json(OK))
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
