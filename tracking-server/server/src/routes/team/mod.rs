//! Routes of a team server: who is calling, users and their API keys (server admins), and roles
//! on projects and registered models (their admins). Changes hold at once: cached keys and roles
//! are dropped.

mod wire;

use crate::auth::{self, require, require_admin};
use crate::body::json_body;
use crate::error::{ApiError, Result};
use crate::state::{meta, State};
use crate::wire::{NameText, RoleName, StatusOk, OK};
use actix_web::{web, HttpRequest, HttpResponse};
use trainlog_meta::{Role, Scope};

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/whoami", web::get().to(whoami))
        .route("/users", web::get().to(list_users))
        .route("/users", web::post().to(create_user))
        .route("/users/{name}", web::delete().to(remove_user))
        .route("/users/{name}/keys", web::get().to(list_keys))
        .route("/users/{name}/keys", web::post().to(create_key))
        .route("/keys/{id}", web::delete().to(revoke_key))
        .route("/projects/{name}/members", web::get().to(project_members))
        .route("/projects/{name}/members/{user}", web::put().to(set_project_member))
        .route("/projects/{name}/members/{user}", web::delete().to(remove_project_member))
        .route("/models/{name}/members", web::get().to(model_members))
        .route("/models/{name}/members/{user}", web::put().to(set_model_member))
        .route("/models/{name}/members/{user}", web::delete().to(remove_model_member));
}

/// This resource's operations in the API document.
#[derive(utoipa::OpenApi)]
#[openapi(paths(
    whoami,
    list_users,
    create_user,
    remove_user,
    list_keys,
    create_key,
    revoke_key,
    project_members,
    set_project_member,
    remove_project_member,
    model_members,
    set_model_member,
    remove_model_member,
))]
pub(super) struct Api;

/// Users and roles only mean something on a server that checks keys.
fn needs_auth(req: &HttpRequest) -> Result<()> {
    if auth::enabled(req) {
        Ok(())
    } else {
        Err(ApiError::Forbidden {
            field: "auth".into(),
            reason: "this server runs without --auth, so it has no users or roles to manage".into(),
        })
    }
}

/// The caller may manage `user`'s keys: a server admin, or that user.
fn may_manage_keys_of(req: &HttpRequest, user: &str) -> Result<()> {
    needs_auth(req)?;
    match auth::actor(req) {
        Some(a) if a.is_admin || a.name == user => Ok(()),
        _ => require_admin(req, "another user's keys"),
    }
}

/// Who the request's key belongs to (answers without a key when the server checks none).
#[utoipa::path(get, path = "/api/v1/whoami", tag = "users", responses((status = 200, description = "The caller.", body = wire::WhoAmI)))]
pub(crate) async fn whoami(req: HttpRequest) -> HttpResponse {
    let actor = auth::actor(&req);
    HttpResponse::Ok().json(wire::WhoAmI {
        auth: auth::enabled(&req),
        admin: actor.as_ref().is_some_and(|a| a.is_admin),
        default_role: actor.as_ref().map(|a| RoleName::of(a.default_role)),
        user: actor.map(|a| a.name),
    })
}

/// List users (server admins).
#[utoipa::path(get, path = "/api/v1/users", tag = "users", responses((status = 200, description = "Every user.", body = wire::UserList)))]
pub(crate) async fn list_users(state: State, req: HttpRequest) -> Result<HttpResponse> {
    needs_auth(&req)?;
    require_admin(&req, "the list of users")?;
    let users = meta(&state, |m| m.users()).await?;
    let users = users
        .into_iter()
        .map(|u| wire::UserView {
            name: u.name,
            admin: u.is_admin,
            active_keys: u.active_keys,
            created_time: u.created_ms,
        })
        .collect();
    Ok(HttpResponse::Ok().json(wire::UserList { users }))
}

/// Create a user (server admins); answers its first key, shown this once.
#[utoipa::path(post, path = "/api/v1/users", tag = "users", request_body = wire::CreateUser,
    responses((status = 201, description = "The user's first key.", body = wire::NewKeyView)))]
pub(crate) async fn create_user(state: State, req: HttpRequest, payload: web::Payload) -> Result<HttpResponse> {
    needs_auth(&req)?;
    require_admin(&req, "creating users")?;
    let body: wire::CreateUser = json_body(&req, payload).await?;
    let name = body.name.clone();
    let key = meta(&state, move |m| m.add_user(&body.name, body.admin)).await?;
    Ok(HttpResponse::Created().json(wire::NewKeyView { user: name, key_id: key.id, key: key.key }))
}

/// Remove a user and their keys (server admins); what they logged stays.
#[utoipa::path(delete, path = "/api/v1/users/{name}", tag = "users",
    params(("name" = inline(wire::UserNameText), Path, description = "The user's name.")),
    responses((status = 200, description = "Removed; their keys stop working at once.", body = StatusOk)))]
pub(crate) async fn remove_user(state: State, path: web::Path<String>, req: HttpRequest) -> Result<HttpResponse> {
    needs_auth(&req)?;
    require_admin(&req, "removing users")?;
    let name = path.into_inner();
    meta(&state, move |m| m.remove_user(&name)).await?;
    auth::forget(&req);
    Ok(HttpResponse::Ok().json(OK))
}

/// A user's keys (server admins, or the user).
#[utoipa::path(get, path = "/api/v1/users/{name}/keys", tag = "users",
    params(("name" = inline(wire::UserNameText), Path, description = "The user's name.")),
    responses((status = 200, description = "The keys, revoked ones too; never their secrets.", body = wire::KeyList)))]
pub(crate) async fn list_keys(state: State, path: web::Path<String>, req: HttpRequest) -> Result<HttpResponse> {
    let name = path.into_inner();
    may_manage_keys_of(&req, &name)?;
    let rows = {
        let name = name.clone();
        meta(&state, move |m| {
            m.users()?
                .iter()
                .any(|u| u.name == name)
                .then_some(())
                .ok_or_else(|| trainlog_meta::Error::NotFound { what: format!("user {name:?}") })?;
            m.keys(Some(&name))
        })
        .await?
    };
    let keys = rows
        .into_iter()
        .map(|k| wire::KeyView {
            id: k.id,
            user: k.user,
            created_time: k.created_ms,
            last_used_time: k.last_used_ms,
            revoked_time: k.revoked_ms,
        })
        .collect();
    Ok(HttpResponse::Ok().json(wire::KeyList { keys }))
}

/// Make another key for a user (server admins, or the user); shown this once.
#[utoipa::path(post, path = "/api/v1/users/{name}/keys", tag = "users",
    params(("name" = inline(wire::UserNameText), Path, description = "The user's name.")),
    responses((status = 201, description = "The new key.", body = wire::NewKeyView)))]
pub(crate) async fn create_key(
    state: State,
    path: web::Path<String>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    crate::body::empty_body(&req, payload).await?;
    let name = path.into_inner();
    may_manage_keys_of(&req, &name)?;
    let user = name.clone();
    let key = meta(&state, move |m| m.create_key(&user)).await?;
    Ok(HttpResponse::Created().json(wire::NewKeyView { user: name, key_id: key.id, key: key.key }))
}

/// Revoke a key by its id (server admins, or its user); it stops working at once.
#[utoipa::path(delete, path = "/api/v1/keys/{id}", tag = "users",
    params(("id" = inline(wire::KeyIdText), Path, description = "The key's id: the 12 hex digits after `tl_`.")),
    responses((status = 200, description = "Revoked.", body = StatusOk)))]
pub(crate) async fn revoke_key(state: State, path: web::Path<String>, req: HttpRequest) -> Result<HttpResponse> {
    needs_auth(&req)?;
    let id = path.into_inner();
    let owner = {
        let id = id.clone();
        meta(&state, move |m| Ok(m.keys(None)?.into_iter().find(|k| k.id == id).map(|k| k.user))).await?
    };
    let owner = owner.ok_or_else(|| ApiError::NotFound(format!("key {id:?}")))?;
    may_manage_keys_of(&req, &owner)?;
    meta(&state, move |m| m.revoke_key(&id)).await?;
    auth::forget(&req);
    Ok(HttpResponse::Ok().json(OK))
}

/// The caller must be an admin of the project or model, which must exist.
async fn scope_admin(state: &State, req: &HttpRequest, scope: Scope, name: &str) -> Result<()> {
    needs_auth(req)?;
    let owned = name.to_owned();
    let id = meta(state, move |m| m.scope_id(scope, &owned)).await?;
    require(req, scope, id, name, Role::Admin).await
}

async fn members(state: State, req: HttpRequest, scope: Scope, name: String) -> Result<HttpResponse> {
    scope_admin(&state, &req, scope, &name).await?;
    let rows = meta(&state, move |m| m.members(scope, &name)).await?;
    let members = rows.into_iter().map(|(user, role)| wire::Member { user, role: RoleName::of(role) }).collect();
    let default_role = RoleName::of(auth::default_role(&req));
    Ok(HttpResponse::Ok().json(wire::MemberList { members, default_role }))
}

async fn set_member(
    state: State,
    req: HttpRequest,
    payload: web::Payload,
    scope: Scope,
    (name, user): (String, String),
) -> Result<HttpResponse> {
    scope_admin(&state, &req, scope, &name).await?;
    let body: wire::SetMember = json_body(&req, payload).await?;
    let role = body.role;
    meta(&state, move |m| m.grant(scope, &name, &user, role.role())).await?;
    auth::forget(&req);
    Ok(HttpResponse::Ok().json(OK))
}

async fn remove_member(
    state: State,
    req: HttpRequest,
    scope: Scope,
    (name, user): (String, String),
) -> Result<HttpResponse> {
    scope_admin(&state, &req, scope, &name).await?;
    meta(&state, move |m| m.revoke_role(scope, &name, &user)).await?;
    auth::forget(&req);
    Ok(HttpResponse::Ok().json(OK))
}

/// Users holding a role of their own on a project (its admins).
#[utoipa::path(get, path = "/api/v1/projects/{name}/members", tag = "projects",
    params(("name" = inline(NameText), Path, description = "The project's name.")),
    responses((status = 200, description = "The members.", body = wire::MemberList)))]
pub(crate) async fn project_members(state: State, path: web::Path<String>, req: HttpRequest) -> Result<HttpResponse> {
    members(state, req, Scope::Project, path.into_inner()).await
}

/// Give a user a role on a project (its admins); `none` keeps them out even when the default
/// lets everyone read.
#[utoipa::path(put, path = "/api/v1/projects/{name}/members/{user}", tag = "projects",
    params(("name" = inline(NameText), Path, description = "The project's name."),
        ("user" = inline(wire::UserNameText), Path, description = "The user's name.")),
    request_body = wire::SetMember, responses((status = 200, description = "Granted; it holds at once.", body = StatusOk)))]
pub(crate) async fn set_project_member(
    state: State,
    path: web::Path<(String, String)>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    set_member(state, req, payload, Scope::Project, path.into_inner()).await
}

/// Take a user's own role on a project away (its admins); they get the default role.
#[utoipa::path(delete, path = "/api/v1/projects/{name}/members/{user}", tag = "projects",
    params(("name" = inline(NameText), Path, description = "The project's name."),
        ("user" = inline(wire::UserNameText), Path, description = "The user's name.")),
    responses((status = 200, description = "Removed.", body = StatusOk)))]
pub(crate) async fn remove_project_member(
    state: State,
    path: web::Path<(String, String)>,
    req: HttpRequest,
) -> Result<HttpResponse> {
    remove_member(state, req, Scope::Project, path.into_inner()).await
}

/// Users holding a role of their own on a registered model (its admins).
#[utoipa::path(get, path = "/api/v1/models/{name}/members", tag = "registry",
    params(("name" = inline(NameText), Path, description = "The model's name.")),
    responses((status = 200, description = "The members.", body = wire::MemberList)))]
pub(crate) async fn model_members(state: State, path: web::Path<String>, req: HttpRequest) -> Result<HttpResponse> {
    members(state, req, Scope::Model, path.into_inner()).await
}

/// Give a user a role on a registered model (its admins).
#[utoipa::path(put, path = "/api/v1/models/{name}/members/{user}", tag = "registry",
    params(("name" = inline(NameText), Path, description = "The model's name."),
        ("user" = inline(wire::UserNameText), Path, description = "The user's name.")),
    request_body = wire::SetMember, responses((status = 200, description = "Granted; it holds at once.", body = StatusOk)))]
pub(crate) async fn set_model_member(
    state: State,
    path: web::Path<(String, String)>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    set_member(state, req, payload, Scope::Model, path.into_inner()).await
}

/// Take a user's own role on a registered model away (its admins).
#[utoipa::path(delete, path = "/api/v1/models/{name}/members/{user}", tag = "registry",
    params(("name" = inline(NameText), Path, description = "The model's name."),
        ("user" = inline(wire::UserNameText), Path, description = "The user's name.")),
    responses((status = 200, description = "Removed.", body = StatusOk)))]
pub(crate) async fn remove_model_member(
    state: State,
    path: web::Path<(String, String)>,
    req: HttpRequest,
) -> Result<HttpResponse> {
    remove_member(state, req, Scope::Model, path.into_inner()).await
}
