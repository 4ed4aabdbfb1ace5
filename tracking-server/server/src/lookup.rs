//! What a request names, found once and checked: projects by name, and runs by id (the project
//! each belongs to cached, since a run never changes project), with the role checks every such
//! route starts with.

use crate::auth::{require, require_run};
use crate::error::{ApiError, Result};
use crate::state::{meta, State};
use actix_web::HttpRequest;
use trainlog_meta::{Project, Role, Scope};
use trainlog_schema::RunId;

/// The active project of that name, once the caller holds `need` on it (404 when they may not read it).
pub(crate) async fn project(state: &State, req: &HttpRequest, name: String, need: Role) -> Result<Project> {
    let project = meta(state, move |m| m.project_by_name(&name)).await?;
    require(req, Scope::Project, project.id, &project.name, need).await?;
    Ok(project)
}

/// A run id from a path or a list; one that cannot be an id is a run not found.
pub(crate) fn run_id(text: &str) -> Result<RunId> {
    RunId::parse("id", text).map_err(|_| ApiError::NotFound(format!("run {text:?}")))
}

/// The run a path names, which the caller may read: its id and its project.
pub(crate) async fn readable(state: &State, req: &HttpRequest, path: &str) -> Result<(RunId, i64)> {
    let id = run_id(path)?;
    let project_id = run_for(state, req, &id, Role::Read).await?;
    Ok((id, project_id))
}

/// The active run a path names, which the caller may change: its id and its project.
pub(crate) async fn writable(state: &State, req: &HttpRequest, path: &str) -> Result<(RunId, i64)> {
    let id = run_id(path)?;
    let project_id = run_for(state, req, &id, Role::Write).await?;
    Ok((id, project_id))
}

/// Entries in the run → project cache before it starts over.
const MAX_CACHED_RUN_PROJECTS: usize = 100_000;

/// The project of an active run, from a cache filled on first use.
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
pub(crate) fn forget_run_project(state: &State, id: &RunId) -> Result<()> {
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
pub(crate) async fn run_for(state: &State, req: &HttpRequest, id: &RunId, need: Role) -> Result<i64> {
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

/// Refuses a run list unless every run exists (active or archived, in an active project) and
/// the caller may read it: one lookup per 500 runs, one role check per distinct project. A run
/// that is unknown or hidden is not found, by its id.
pub(crate) async fn readable_runs(state: &State, req: &HttpRequest, ids: &[RunId]) -> Result<()> {
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
