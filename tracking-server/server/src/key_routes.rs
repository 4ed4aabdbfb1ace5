//! The keys a project's runs use (params, metrics, tags): the UI completes filters from them and
//! warns when a filter names a key no run has.

use crate::api;
use crate::auth::require;
use crate::error::Result;
use crate::routes::{meta, State};
use actix_web::{web, HttpRequest, HttpResponse};
use trainlog_meta::{Role, Scope};

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/projects/{name}/keys", web::get().to(project_keys));
}

/// The distinct param, metric and tag keys of a project's runs (archived runs left out).
#[utoipa::path(get, path = "/api/v1/projects/{name}/keys", tag = "projects",
    params(("name" = inline(api::NameText), Path, description = "The project's name.")),
    responses((status = 200, description = "The keys, each list sorted.", body = api::ProjectKeys)))]
pub(crate) async fn project_keys(state: State, path: web::Path<String>, req: HttpRequest) -> Result<HttpResponse> {
    let name = path.into_inner();
    let project = meta(&state, move |m| m.project_by_name(&name)).await?;
    require(&req, Scope::Project, project.id, &project.name, Role::Read).await?;
    state.store.sync_summaries().await?;
    let id = project.id;
    let keys = meta(&state, move |m| m.project_keys(id)).await?;
    Ok(HttpResponse::Ok().json(api::ProjectKeys { params: keys.params, metrics: keys.metrics, tags: keys.tags }))
}
