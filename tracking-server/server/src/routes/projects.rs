//! Projects: listing, creating and reading them, their settings (whether runs keep their git
//! diff), and the keys their runs use (params, metrics, tags), which the UI completes filters
//! from.

use crate::auth::role_on;
use crate::body::json_body;
use crate::error::Result;
use crate::lookup;
use crate::state::{meta, State};
use crate::wire::{NameText, RoleName};
use actix_web::{web, HttpRequest, HttpResponse};
use serde::{Deserialize, Serialize};
use trainlog_meta::{Project, ProjectSettings, Role, Scope};
use trainlog_schema::limits::{check_len, MAX_TEXT_CHARS};
use trainlog_schema::ProjectName;
use utoipa::{PartialSchema, ToSchema};

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/projects", web::get().to(list_projects))
        .route("/projects", web::post().to(create_project))
        .route("/projects/{name}", web::get().to(get_project))
        .route("/projects/{name}/settings", web::get().to(get_settings))
        .route("/projects/{name}/settings", web::patch().to(update_settings))
        .route("/projects/{name}/keys", web::get().to(project_keys));
}

/// This resource's operations in the API document.
#[derive(utoipa::OpenApi)]
#[openapi(paths(list_projects, create_project, get_project, get_settings, update_settings, project_keys,))]
pub(super) struct Api;

/// List projects, with how many runs each holds.
#[utoipa::path(get, path = "/api/v1/projects", tag = "projects", responses((status = 200, description = "Every project.", body = ProjectList)))]
pub(crate) async fn list_projects(state: State, req: HttpRequest) -> Result<HttpResponse> {
    let visible = crate::auth::visibility(&req, Scope::Project).await?;
    let user = super::alerts::reader(&req);
    let (projects, unread) = meta(&state, move |m| Ok((m.list_projects()?, m.unread_alerts(&user)?))).await?;
    let mut views = Vec::with_capacity(projects.len());
    for (p, n) in projects.iter().filter(|(p, _)| visible.allows(p.id)) {
        let mut view = ProjectView::new(p, Some(*n), role_on(&req, Scope::Project, p.id).await?);
        view.unread_alerts = Some(unread.get(&p.id).copied().unwrap_or(0));
        views.push(view);
    }
    Ok(HttpResponse::Ok().json(ProjectList { projects: views }))
}

/// Create a project.
#[utoipa::path(post, path = "/api/v1/projects", tag = "projects", request_body = CreateProject,
    responses((status = 201, description = "The new project.", body = ProjectView)))]
pub(crate) async fn create_project(state: State, req: HttpRequest, payload: web::Payload) -> Result<HttpResponse> {
    let body: CreateProject = json_body(&req, payload).await?;
    let name = ProjectName::parse("name", &body.name)?;
    check_len("description", "a project's description", &body.description, MAX_TEXT_CHARS)?;
    let creator = crate::auth::actor(&req);
    let project = meta(&state, move |m| m.create_project(&name, &body.description, creator.as_ref())).await?;
    let role = role_on(&req, Scope::Project, project.id).await?;
    Ok(HttpResponse::Created().json(ProjectView::new(&project, Some(0), role)))
}

/// Get a project.
#[utoipa::path(get, path = "/api/v1/projects/{name}", tag = "projects", params(("name" = inline(NameText), Path, description = "The project's name.")),
    responses((status = 200, description = "The project.", body = ProjectView)))]
pub(crate) async fn get_project(state: State, path: web::Path<String>, req: HttpRequest) -> Result<HttpResponse> {
    let project = lookup::project(&state, &req, path.into_inner(), Role::Read).await?;
    let role = role_on(&req, Scope::Project, project.id).await?;
    Ok(HttpResponse::Ok().json(ProjectView::new(&project, None, role)))
}

/// A project's settings.
#[utoipa::path(get, path = "/api/v1/projects/{name}/settings", tag = "projects", params(("name" = inline(NameText), Path, description = "The project's name.")),
    responses((status = 200, description = "The settings.", body = SettingsView)))]
pub(crate) async fn get_settings(state: State, path: web::Path<String>, req: HttpRequest) -> Result<HttpResponse> {
    let project = lookup::project(&state, &req, path.into_inner(), Role::Read).await?;
    let id = project.id;
    let settings = meta(&state, move |m| m.project_settings(id)).await?;
    Ok(HttpResponse::Ok().json(SettingsView::of(settings)))
}

/// Change a project's settings (admin of the project, or of the server); settings left out stay
/// as they are.
#[utoipa::path(patch, path = "/api/v1/projects/{name}/settings", tag = "projects", params(("name" = inline(NameText), Path, description = "The project's name.")),
    request_body = UpdateSettings, responses((status = 200, description = "The settings as they are now.", body = SettingsView)))]
pub(crate) async fn update_settings(
    state: State,
    path: web::Path<String>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    let body: UpdateSettings = json_body(&req, payload).await?;
    let project = lookup::project(&state, &req, path.into_inner(), Role::Admin).await?;
    let id = project.id;
    let settings = meta(&state, move |m| {
        let mut settings = m.project_settings(id)?;
        if let Some(capture_diff) = body.capture_diff {
            settings.capture_diff = capture_diff;
        }
        m.set_project_settings(id, settings)?;
        Ok(settings)
    })
    .await?;
    Ok(HttpResponse::Ok().json(SettingsView::of(settings)))
}

/// The distinct param, metric and tag keys of a project's runs (archived runs left out).
#[utoipa::path(get, path = "/api/v1/projects/{name}/keys", tag = "projects",
    params(("name" = inline(NameText), Path, description = "The project's name.")),
    responses((status = 200, description = "The keys, each list sorted.", body = ProjectKeys)))]
pub(crate) async fn project_keys(state: State, path: web::Path<String>, req: HttpRequest) -> Result<HttpResponse> {
    let project = lookup::project(&state, &req, path.into_inner(), Role::Read).await?;
    state.store.sync_summaries().await?;
    let id = project.id;
    let keys = meta(&state, move |m| m.project_keys(id)).await?;
    Ok(HttpResponse::Ok().json(ProjectKeys { params: keys.params, metrics: keys.metrics, tags: keys.tags }))
}

// Wire types.

#[derive(Serialize, ToSchema)]
pub struct ProjectView {
    pub id: i64,
    pub name: String,
    pub description: String,
    /// Milliseconds since the Unix epoch.
    pub created_time: i64,
    /// How many runs the project holds; given in lists and on creation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_count: Option<u64>,
    /// The caller's role on the project (admin when the server checks no keys).
    pub your_role: RoleName,
    /// In lists: the project's alerts the caller has not read (its inbox).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unread_alerts: Option<i64>,
}

impl ProjectView {
    pub fn new(p: &Project, run_count: Option<u64>, your_role: trainlog_meta::Role) -> Self {
        ProjectView {
            id: p.id,
            name: p.name.clone(),
            description: p.description.clone(),
            created_time: p.created_ms,
            run_count,
            your_role: RoleName::of(your_role),
            unread_alerts: None,
        }
    }
}

#[derive(Serialize, ToSchema)]
pub struct ProjectList {
    pub projects: Vec<ProjectView>,
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateProject {
    #[schema(schema_with = NameText::schema)]
    pub name: String,
    #[serde(default)]
    #[schema(max_length = 1048576)]
    pub description: String,
}

/// A project's settings.
#[derive(Serialize, ToSchema)]
pub struct SettingsView {
    /// Whether runs keep the uncommitted git diff their clients record; when false the server
    /// stores `code.diff` as null with `diff_disabled: true`.
    pub capture_diff: bool,
}

impl SettingsView {
    fn of(settings: ProjectSettings) -> Self {
        SettingsView { capture_diff: settings.capture_diff }
    }
}

/// Settings to change; those left out stay as they are.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateSettings {
    #[serde(default)]
    pub capture_diff: Option<bool>,
}

/// The keys a project's runs use.
#[derive(Serialize, ToSchema)]
pub struct ProjectKeys {
    pub params: Vec<String>,
    pub metrics: Vec<String>,
    pub tags: Vec<String>,
}
