//! Alerts: a run's (`trainlog.alert` from code), a project's inbox, and where they go (its
//! channels, each delivery recorded). Raising an alert needs write on its run; reading them,
//! read; channels and deliveries are the project's admins'. A channel that reaches a private,
//! loopback or link-local address needs a server admin to allow it.

use crate::body::json_body;
use crate::error::{ApiError, Result};
use crate::lookup;
use crate::state::{meta, State};
use crate::wire::{NameText, RunIdText, StatusOk, OK};
use actix_web::{web, HttpRequest, HttpResponse};
use serde::{Deserialize, Serialize};
use trainlog_meta::alerts::{AlertRow, ChannelRow, DeliveryRow, NewAlert, NewChannel};
use trainlog_meta::Role;
use utoipa::ToSchema;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/runs/{id}/alerts", web::post().to(raise_alert))
        .route("/runs/{id}/alerts", web::get().to(run_alerts))
        .route("/projects/{name}/alerts", web::get().to(project_alerts))
        .route("/projects/{name}/alerts/read", web::post().to(read_alerts))
        .route("/projects/{name}/alert-channels", web::get().to(list_channels))
        .route("/projects/{name}/alert-channels", web::post().to(add_channel))
        .route("/projects/{name}/alert-channels/{channel}", web::delete().to(remove_channel))
        .route("/projects/{name}/alert-deliveries", web::get().to(list_deliveries))
        .route("/projects/{name}/alert-rules", web::get().to(list_rules))
        .route("/projects/{name}/alert-rules", web::post().to(add_rule))
        .route("/projects/{name}/alert-rules/{rule}", web::delete().to(remove_rule))
        .route("/alert-rules", web::get().to(list_installation_rules))
        .route("/alert-rules", web::post().to(add_installation_rule))
        .route("/alert-rules/{rule}", web::delete().to(remove_installation_rule));
}

/// This resource's operations in the API document.
#[derive(utoipa::OpenApi)]
#[openapi(paths(
    raise_alert,
    run_alerts,
    project_alerts,
    read_alerts,
    list_channels,
    add_channel,
    remove_channel,
    list_deliveries,
    list_rules,
    add_rule,
    remove_rule,
    list_installation_rules,
    add_installation_rule,
    remove_installation_rule
))]
pub(super) struct Api;

/// Characters an alert's title may have.
pub const MAX_TITLE_CHARS: usize = 200;
/// Characters an alert's text may have.
pub const MAX_TEXT_CHARS: usize = 10_000;
/// The longest wait for folding repeats: a week, in seconds.
pub const MAX_WAIT_S: f64 = 604_800.0;
/// Alerts and deliveries one list answers.
pub const LIST_LIMIT: i64 = 500;

fn check_text(field: &str, text: &str, max: usize, required: bool) -> Result<()> {
    if required && text.trim().is_empty() {
        return Err(ApiError::invalid(field, "must not be empty"));
    }
    let chars = text.chars().count();
    if chars > max {
        return Err(ApiError::invalid(field, format!("at most {max} characters, got {chars}")));
    }
    if text.chars().any(|c| c.is_control() && c != '\n' && c != '\t') {
        return Err(ApiError::invalid(field, "no control characters but newlines and tabs"));
    }
    Ok(())
}

/// Raise an alert on a run: recorded at its step and sent to the project's channels. A repeat
/// of its title within `wait_duration` seconds is folded into the earlier alert (counted).
#[utoipa::path(post, path = "/api/v1/runs/{id}/alerts", tag = "alerts",
    params(("id" = inline(RunIdText), Path, description = "The run's id.")),
    request_body = RaiseAlert,
    responses((status = 201, description = "The alert, new.", body = AlertView),
        (status = 200, description = "The earlier alert a repeat was folded into.", body = AlertView)))]
pub(crate) async fn raise_alert(
    state: State,
    path: web::Path<String>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    let (run, _) = lookup::writable(&state, &req, &path).await?;
    let body: RaiseAlert = json_body(&req, payload).await?;
    check_text("title", &body.title, MAX_TITLE_CHARS, true)?;
    check_text("text", &body.text, MAX_TEXT_CHARS, false)?;
    let level = body.level.unwrap_or_else(|| "info".into());
    if !trainlog_meta::alerts::LEVELS.contains(&level.as_str()) {
        return Err(ApiError::invalid("level", "one of info, warn, error"));
    }
    let wait = body.wait_duration.unwrap_or(0.0);
    if !(0.0..=MAX_WAIT_S).contains(&wait) {
        return Err(ApiError::invalid("wait_duration", format!("seconds from 0 to {MAX_WAIT_S}")));
    }
    if body.step.is_some_and(|s| s < 0) {
        return Err(ApiError::invalid("step", "at least 0"));
    }
    let new = NewAlert {
        run: None,
        rule: String::new(),
        level,
        title: body.title,
        text: body.text,
        step: body.step,
        wait_ms: (wait * 1000.0) as i64,
    };
    let (alert, created) = meta(&state, move |m| m.record_run_alert(&run, &new)).await?;
    if created {
        crate::deliver::wake();
    }
    let view = AlertView::from(alert);
    Ok(if created { HttpResponse::Created().json(view) } else { HttpResponse::Ok().json(view) })
}

/// A run's alerts, oldest first.
#[utoipa::path(get, path = "/api/v1/runs/{id}/alerts", tag = "alerts",
    params(("id" = inline(RunIdText), Path, description = "The run's id.")),
    responses((status = 200, description = "The run's alerts (at most 500).", body = AlertList)))]
pub(crate) async fn run_alerts(state: State, path: web::Path<String>, req: HttpRequest) -> Result<HttpResponse> {
    let (run, _) = lookup::readable(&state, &req, &path).await?;
    let rows = meta(&state, move |m| m.run_alerts(&run, LIST_LIMIT)).await?;
    Ok(HttpResponse::Ok().json(AlertList { alerts: rows.into_iter().map(AlertView::from).collect(), read_up_to: None }))
}

/// A project's latest alerts, newest first: its inbox.
#[utoipa::path(get, path = "/api/v1/projects/{name}/alerts", tag = "alerts",
    params(("name" = inline(NameText), Path, description = "The project's name.")),
    responses((status = 200, description = "The project's latest alerts (at most 500).", body = AlertList)))]
pub(crate) async fn project_alerts(state: State, path: web::Path<String>, req: HttpRequest) -> Result<HttpResponse> {
    let project = lookup::project(&state, &req, path.into_inner(), Role::Read).await?;
    let user = reader(&req);
    let (rows, read_up_to) =
        meta(&state, move |m| Ok((m.project_alerts(project.id, LIST_LIMIT)?, m.alerts_read_up_to(&user, project.id)?)))
            .await?;
    Ok(HttpResponse::Ok()
        .json(AlertList { alerts: rows.into_iter().map(AlertView::from).collect(), read_up_to: Some(read_up_to) }))
}

/// Whose reading of an inbox a request is: the caller's name, or '' on a server without keys.
pub(crate) fn reader(req: &HttpRequest) -> String {
    crate::auth::caller(req).map(|c| c.name).unwrap_or_default()
}

/// Mark the project's alerts read by the caller, up to alert `up_to` (never back).
#[utoipa::path(post, path = "/api/v1/projects/{name}/alerts/read", tag = "alerts",
    params(("name" = inline(NameText), Path, description = "The project's name.")),
    request_body = ReadAlerts,
    responses((status = 200, description = "How far the caller has read now.", body = ReadUpTo)))]
pub(crate) async fn read_alerts(
    state: State,
    path: web::Path<String>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    let project = lookup::project(&state, &req, path.into_inner(), Role::Read).await?;
    let body: ReadAlerts = json_body(&req, payload).await?;
    if body.up_to < 0 {
        return Err(ApiError::invalid("up_to", "an alert id, at least 0"));
    }
    let user = reader(&req);
    let read_up_to = meta(&state, move |m| m.mark_alerts_read(&user, project.id, body.up_to)).await?;
    Ok(HttpResponse::Ok().json(ReadUpTo { read_up_to }))
}

/// A project's alert channels (their secrets never shown).
#[utoipa::path(get, path = "/api/v1/projects/{name}/alert-channels", tag = "alerts",
    params(("name" = inline(NameText), Path, description = "The project's name.")),
    responses((status = 200, description = "The project's channels.", body = ChannelList)))]
pub(crate) async fn list_channels(state: State, path: web::Path<String>, req: HttpRequest) -> Result<HttpResponse> {
    let project = lookup::project(&state, &req, path.into_inner(), Role::Admin).await?;
    let rows = meta(&state, move |m| m.channels(project.id)).await?;
    Ok(HttpResponse::Ok().json(ChannelList { channels: rows.into_iter().map(ChannelView::from).collect() }))
}

/// Add a channel the project's alerts go to: a webhook (JSON, signed with `secret` in
/// `X-Trainlog-Signature`), a Slack or Discord incoming webhook, or an e-mail address (on a
/// server with an SMTP relay).
#[utoipa::path(post, path = "/api/v1/projects/{name}/alert-channels", tag = "alerts",
    params(("name" = inline(NameText), Path, description = "The project's name.")),
    request_body = AddChannel,
    responses((status = 201, description = "The channel.", body = ChannelView)))]
pub(crate) async fn add_channel(
    state: State,
    path: web::Path<String>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    let project = lookup::project(&state, &req, path.into_inner(), Role::Admin).await?;
    let body: AddChannel = json_body(&req, payload).await?;
    if !trainlog_meta::alerts::CHANNEL_KINDS.contains(&body.kind.as_str()) {
        return Err(ApiError::invalid("kind", "one of webhook, slack, discord, email"));
    }
    let target = if body.kind == "email" {
        let address = body.url.trim().strip_prefix("mailto:").unwrap_or(body.url.trim());
        if !crate::mail::is_address(address) {
            return Err(ApiError::invalid("url", format!("{address:?} is not an e-mail address")));
        }
        if state.mailer.is_none() {
            return Err(ApiError::invalid(
                "kind",
                "this server sends no e-mail: start it with --smtp-url and --smtp-from",
            ));
        }
        format!("mailto:{address}")
    } else {
        body.url.clone()
    };
    if let Some(secret) = &body.secret {
        check_text("secret", secret, 200, true)?;
    }
    if body.allow_private {
        crate::auth::require_admin(&req, "a channel to a private, loopback or link-local address")?;
    }
    if body.kind != "email" {
        crate::deliver::check_target("url", &body.url, body.allow_private).await?;
    }
    let new = NewChannel {
        kind: body.kind,
        target,
        secret: body.secret.filter(|s| !s.is_empty()),
        allow_private: body.allow_private,
        created_by: crate::auth::caller(&req).map(|c| c.name),
    };
    let row = meta(&state, move |m| m.add_channel(project.id, &new)).await?;
    Ok(HttpResponse::Created().json(ChannelView::from(row)))
}

/// Remove a channel: nothing more goes there, and its pending deliveries are given up.
#[utoipa::path(delete, path = "/api/v1/projects/{name}/alert-channels/{channel}", tag = "alerts",
    params(("name" = inline(NameText), Path, description = "The project's name."),
        ("channel" = i64, Path, description = "The channel's id.", minimum = 1)),
    responses((status = 200, description = "Removed.", body = StatusOk)))]
pub(crate) async fn remove_channel(
    state: State,
    path: web::Path<(String, String)>,
    req: HttpRequest,
) -> Result<HttpResponse> {
    let (name, channel) = path.into_inner();
    let project = lookup::project(&state, &req, name, Role::Admin).await?;
    let channel: i64 =
        channel.parse().ok().filter(|id| *id > 0).ok_or_else(|| ApiError::NotFound(format!("channel {channel:?}")))?;
    meta(&state, move |m| m.remove_channel(project.id, channel)).await?;
    Ok(HttpResponse::Ok().json(OK))
}

/// A project's latest deliveries, newest first: sent, pending (with the next attempt's time) or
/// failed, with what the receiver last answered.
#[utoipa::path(get, path = "/api/v1/projects/{name}/alert-deliveries", tag = "alerts",
    params(("name" = inline(NameText), Path, description = "The project's name.")),
    responses((status = 200, description = "The project's latest deliveries (at most 500).", body = DeliveryList)))]
pub(crate) async fn list_deliveries(state: State, path: web::Path<String>, req: HttpRequest) -> Result<HttpResponse> {
    let project = lookup::project(&state, &req, path.into_inner(), Role::Admin).await?;
    let rows = meta(&state, move |m| m.deliveries(project.id, LIST_LIMIT)).await?;
    Ok(HttpResponse::Ok().json(DeliveryList { deliveries: rows.into_iter().map(DeliveryView::from).collect() }))
}

/// A project's alert rules, as written.
#[utoipa::path(get, path = "/api/v1/projects/{name}/alert-rules", tag = "alerts",
    params(("name" = inline(NameText), Path, description = "The project's name.")),
    responses((status = 200, description = "The project's rules.", body = RuleList)))]
pub(crate) async fn list_rules(state: State, path: web::Path<String>, req: HttpRequest) -> Result<HttpResponse> {
    let project = lookup::project(&state, &req, path.into_inner(), Role::Read).await?;
    let (rows, firings) = meta(&state, move |m| Ok((m.rules_for(project.id)?, m.rule_firings(project.id)?))).await?;
    let rules = rows
        .into_iter()
        .map(|r| {
            let fired = firings.get(&r.text).copied();
            RuleView { last_fired_time: fired.map(|f| f.0), fired: fired.map_or(0, |f| f.1), ..RuleView::from(r) }
        })
        .collect();
    Ok(HttpResponse::Ok().json(RuleList { rules }))
}

/// Add a rule the server evaluates for the project's runs, written as people say it:
/// `KEY not finite`, `KEY > NUMBER`, `KEY < NUMBER` (on each point as it arrives), or a run's end
/// (`failed`, `lost`, `preempted`, `killed`, `finished`).
#[utoipa::path(post, path = "/api/v1/projects/{name}/alert-rules", tag = "alerts",
    params(("name" = inline(NameText), Path, description = "The project's name.")),
    request_body = AddRule,
    responses((status = 201, description = "The rule.", body = RuleView)))]
pub(crate) async fn add_rule(
    state: State,
    path: web::Path<String>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    let project = lookup::project(&state, &req, path.into_inner(), Role::Write).await?;
    let body: AddRule = json_body(&req, payload).await?;
    let by = crate::auth::caller(&req).map(|c| c.name);
    let cache = state.clone();
    let row = meta(&state, move |m| {
        let row = m.add_rule(project.id, &body.rule, by.as_deref())?;
        cache.rules.reload(m)?;
        Ok(row)
    })
    .await?;
    Ok(HttpResponse::Created().json(RuleView::from(row)))
}

/// Remove a rule of the project.
#[utoipa::path(delete, path = "/api/v1/projects/{name}/alert-rules/{rule}", tag = "alerts",
    params(("name" = inline(NameText), Path, description = "The project's name."),
        ("rule" = i64, Path, description = "The rule's id.", minimum = 1)),
    responses((status = 200, description = "Removed.", body = StatusOk)))]
pub(crate) async fn remove_rule(
    state: State,
    path: web::Path<(String, String)>,
    req: HttpRequest,
) -> Result<HttpResponse> {
    let (name, rule) = path.into_inner();
    let project = lookup::project(&state, &req, name, Role::Write).await?;
    let rule: i64 =
        rule.parse().ok().filter(|id| *id > 0).ok_or_else(|| ApiError::NotFound(format!("rule {rule:?}")))?;
    let cache = state.clone();
    meta(&state, move |m| {
        m.remove_rule(project.id, rule)?;
        cache.rules.reload(m)
    })
    .await?;
    Ok(HttpResponse::Ok().json(OK))
}

/// The rules every project has, which server admins give (each project's runs are checked
/// against them as against its own rules, and their alerts go to the project's channels).
#[utoipa::path(get, path = "/api/v1/alert-rules", tag = "alerts",
    responses((status = 200, description = "The installation's rules.", body = RuleList)))]
pub(crate) async fn list_installation_rules(state: State) -> Result<HttpResponse> {
    let rows = meta(&state, |m| m.installation_rules()).await?;
    Ok(HttpResponse::Ok().json(RuleList { rules: rows.into_iter().map(RuleView::from).collect() }))
}

/// Give every project a rule (server admins).
#[utoipa::path(post, path = "/api/v1/alert-rules", tag = "alerts", request_body = AddRule,
    responses((status = 201, description = "The rule.", body = RuleView)))]
pub(crate) async fn add_installation_rule(
    state: State,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    crate::auth::require_admin(&req, "a rule every project has")?;
    let body: AddRule = json_body(&req, payload).await?;
    let by = crate::auth::caller(&req).map(|c| c.name);
    let cache = state.clone();
    let row = meta(&state, move |m| {
        let row = m.add_installation_rule(&body.rule, by.as_deref())?;
        cache.rules.reload(m)?;
        Ok(row)
    })
    .await?;
    Ok(HttpResponse::Created().json(RuleView::from(row)))
}

/// Remove a rule every project had (server admins).
#[utoipa::path(delete, path = "/api/v1/alert-rules/{rule}", tag = "alerts",
    params(("rule" = i64, Path, description = "The rule's id.", minimum = 1)),
    responses((status = 200, description = "Removed.", body = StatusOk)))]
pub(crate) async fn remove_installation_rule(
    state: State,
    path: web::Path<String>,
    req: HttpRequest,
) -> Result<HttpResponse> {
    crate::auth::require_admin(&req, "a rule every project has")?;
    let rule = path.into_inner();
    let rule: i64 =
        rule.parse().ok().filter(|id| *id > 0).ok_or_else(|| ApiError::NotFound(format!("rule {rule:?}")))?;
    let cache = state.clone();
    meta(&state, move |m| {
        m.remove_installation_rule(rule)?;
        cache.rules.reload(m)
    })
    .await?;
    Ok(HttpResponse::Ok().json(OK))
}

// Wire types.

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AddRule {
    /// The rule as people say it: `train/loss not finite`, `eval/acc < 0.5`, `failed`.
    #[schema(min_length = 1, max_length = 300)]
    pub rule: String,
}

#[derive(Serialize, ToSchema)]
pub struct RuleView {
    pub id: i64,
    pub rule: String,
    pub created_by: Option<String>,
    pub created_time: i64,
    /// In lists: when it last fired (ms since the Unix epoch), and how many times it fired,
    /// repeats folded into an alert counted.
    pub last_fired_time: Option<i64>,
    pub fired: i64,
    /// A rule a server admin gave every project (removed only there, `/alert-rules`).
    pub installation: bool,
}

impl From<trainlog_meta::alert_rules::RuleRow> for RuleView {
    fn from(r: trainlog_meta::alert_rules::RuleRow) -> Self {
        RuleView {
            id: r.id,
            rule: r.text,
            created_by: r.created_by,
            created_time: r.created_ms,
            last_fired_time: None,
            fired: 0,
            installation: r.project_id == trainlog_meta::alert_rules::INSTALLATION,
        }
    }
}

#[derive(Serialize, ToSchema)]
pub struct RuleList {
    pub rules: Vec<RuleView>,
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RaiseAlert {
    /// 1 to 200 characters.
    #[schema(min_length = 1, max_length = 200)]
    pub title: String,
    /// At most 10,000 characters.
    #[serde(default)]
    #[schema(max_length = 10000)]
    pub text: String,
    /// `info` (the default), `warn` or `error`.
    #[serde(default)]
    #[schema(pattern = "^(info|warn|error)$")]
    pub level: Option<String>,
    /// The run's step it is about.
    #[serde(default)]
    #[schema(minimum = 0)]
    pub step: Option<i64>,
    /// Seconds within which a repeat of this title on this run is folded into this alert (0 to
    /// 604,800; default 0: every alert is sent).
    #[serde(default)]
    #[schema(minimum = 0, maximum = 604800)]
    pub wait_duration: Option<f64>,
}

/// An alert, as the inbox, the run and the API show it.
#[derive(Serialize, ToSchema)]
pub struct AlertView {
    pub id: i64,
    /// The run it is about; null for an alert about the project.
    pub run: Option<String>,
    /// The rule that fired; empty for an alert raised from code.
    pub rule: String,
    pub level: String,
    pub title: String,
    pub text: String,
    pub step: Option<i64>,
    /// When it was first raised, ms since the Unix epoch.
    pub time: i64,
    /// When it was last raised (a repeat folded into it).
    pub last_time: i64,
    /// How many times it was raised.
    pub count: i64,
}

impl From<AlertRow> for AlertView {
    fn from(a: AlertRow) -> Self {
        AlertView {
            id: a.id,
            run: a.run_id,
            rule: a.rule,
            level: a.level,
            title: a.title,
            text: a.text,
            step: a.step,
            time: a.time_ms,
            last_time: a.last_ms,
            count: a.count,
        }
    }
}

#[derive(Serialize, ToSchema)]
pub struct AlertList {
    pub alerts: Vec<AlertView>,
    /// In a project's inbox: the newest alert the caller has read (0: none); newer ones are unread.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub read_up_to: Option<i64>,
}

/// How far a caller has read a project's alerts.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadAlerts {
    /// The newest alert read: an alert id.
    #[serde(deserialize_with = "crate::wire::integer::required")]
    #[schema(minimum = 0)]
    pub up_to: i64,
}

#[derive(Serialize, ToSchema)]
pub struct ReadUpTo {
    pub read_up_to: i64,
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AddChannel {
    /// `webhook`, `slack`, `discord` or `email`.
    #[schema(pattern = "^(webhook|slack|discord|email)$")]
    pub kind: String,
    /// Where to POST: an http or https URL; for `email`, the address (`mailto:ana@example.com`
    /// or the bare address).
    pub url: String,
    /// A webhook's signing secret: each body is signed with HMAC-SHA256 in
    /// `X-Trainlog-Signature: t=<unix seconds>,v1=<hex of HMAC("t.body")>`.
    #[serde(default)]
    pub secret: Option<String>,
    /// Let it reach a private, loopback or link-local address (server admins only).
    #[serde(default)]
    pub allow_private: bool,
}

#[derive(Serialize, ToSchema)]
pub struct ChannelView {
    pub id: i64,
    pub kind: String,
    pub url: String,
    /// Whether its bodies are signed (the secret itself is never shown).
    pub signed: bool,
    pub allow_private: bool,
    pub created_by: Option<String>,
    pub created_time: i64,
}

impl From<ChannelRow> for ChannelView {
    fn from(c: ChannelRow) -> Self {
        ChannelView {
            id: c.id,
            kind: c.kind,
            url: c.target,
            signed: c.signed,
            allow_private: c.allow_private,
            created_by: c.created_by,
            created_time: c.created_ms,
        }
    }
}

#[derive(Serialize, ToSchema)]
pub struct ChannelList {
    pub channels: Vec<ChannelView>,
}

#[derive(Serialize, ToSchema)]
pub struct DeliveryView {
    pub id: i64,
    pub alert: i64,
    pub title: String,
    /// The rule that raised the alert, or empty for an alert from code.
    pub rule: String,
    pub channel: i64,
    pub kind: String,
    pub url: String,
    /// `pending`, `sent` or `failed` (given up after its last attempt).
    pub status: String,
    pub attempts: i64,
    /// When a pending delivery is tried next, ms since the Unix epoch.
    pub next_time: i64,
    /// What the receiver (or the network) last answered.
    pub answer: String,
    pub sent_time: Option<i64>,
}

impl From<DeliveryRow> for DeliveryView {
    fn from(d: DeliveryRow) -> Self {
        DeliveryView {
            id: d.id,
            alert: d.alert_id,
            title: d.title,
            rule: d.rule,
            channel: d.channel_id,
            kind: d.kind,
            url: d.target,
            status: d.status,
            attempts: d.attempts,
            next_time: d.next_ms,
            answer: d.answer,
            sent_time: d.sent_ms,
        }
    }
}

#[derive(Serialize, ToSchema)]
pub struct DeliveryList {
    pub deliveries: Vec<DeliveryView>,
}
