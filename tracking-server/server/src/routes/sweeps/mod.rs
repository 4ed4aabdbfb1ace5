//! Sweep routes: create and read sweeps, stop and resume them, and the agents' protocol (claim
//! the next trial, heartbeat, report the end). The server decides: it proposes parameters,
//! prunes trials on the metrics it ingests, and enforces the run cap and the budget.

mod wire;

use crate::body::json_body;
use crate::error::{ApiError, Result};
use crate::query::{query_one, query_pairs};
use crate::state::{meta, State};
use crate::wire::{Float, RunIdText};
use actix_web::{web, HttpRequest, HttpResponse};
use serde_json::Value;
use std::collections::BTreeMap;
use trainlog_meta::{NewRun, Placement, Role, SweepRow, TrialEnd, TrialRow};
use trainlog_schema::limits::{check_len, MAX_NAME_CHARS, MAX_SWEEP_NAME_CHARS, MAX_TEXT_CHARS};
use trainlog_schema::{flatten_params, MetricKey, ProjectName, RunId, TagKey};
use trainlog_store::StepRange;
use trainlog_sweep::config::{Method, SweepConfig};
use trainlog_sweep::early::{self, Decision, Progress, Rule};
use trainlog_sweep::space::Observation;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/sweeps", web::post().to(create_sweep))
        .route("/sweeps", web::get().to(list_sweeps))
        .route("/sweeps/{id}", web::get().to(get_sweep))
        .route("/sweeps/{id}/trials", web::get().to(list_trials))
        .route("/sweeps/{id}/stop", web::post().to(stop_sweep))
        .route("/sweeps/{id}/resume", web::post().to(resume_sweep))
        .route("/sweeps/{id}/next", web::post().to(next_trial))
        .route("/sweeps/{id}/trials/{index}/heartbeat", web::post().to(heartbeat))
        .route("/sweeps/{id}/trials/{index}/end", web::post().to(end_trial))
        .route("/runs/{id}/sweep", web::get().to(run_sweep));
}

/// This resource's operations in the API document.
#[derive(utoipa::OpenApi)]
#[openapi(paths(
    create_sweep,
    list_sweeps,
    get_sweep,
    list_trials,
    stop_sweep,
    resume_sweep,
    next_trial,
    heartbeat,
    end_trial,
    run_sweep,
))]
pub(super) struct Api;

/// The cost series the clients record, whose last value is what a run has cost.
const COST_KEY: &str = "cost/usd";

fn parse_config(text: &str) -> Result<SweepConfig> {
    trainlog_sweep::config::parse(text)
        .map_err(|e| ApiError::invalid(e.field, format!("{} (line {})", e.reason, e.line)))
}

/// A stored sweep's configuration; it was validated when the sweep was created.
fn stored_config(sweep: &SweepRow) -> Result<SweepConfig> {
    trainlog_sweep::config::parse(&sweep.config)
        .map_err(|e| ApiError::Internal(format!("sweep {} holds a configuration that no longer parses: {e}", sweep.id)))
}

fn trial_index(path: &str) -> Result<i64> {
    path.parse::<i64>().ok().filter(|i| *i >= 0).ok_or_else(|| ApiError::invalid("index", "expected a trial number"))
}

/// Create a sweep from a sweep file.
#[utoipa::path(post, path = "/api/v1/sweeps", tag = "sweeps", request_body = wire::CreateSweep,
    responses((status = 201, description = "The new sweep.", body = wire::SweepView)))]
pub(crate) async fn create_sweep(state: State, req: HttpRequest, payload: web::Payload) -> Result<HttpResponse> {
    let body: wire::CreateSweep = json_body(&req, payload).await?;
    check_len("config", "a sweep file", &body.config, MAX_TEXT_CHARS)?;
    let cfg = parse_config(&body.config)?;
    let project = body
        .project
        .or(cfg.project.clone())
        .ok_or_else(|| ApiError::invalid("project", "give a project (in the request or the sweep file)"))?;
    let project = ProjectName::parse("project", &project)?;
    let name = body.name.or(cfg.name.clone()).unwrap_or_default();
    check_len("name", "a sweep name", &name, MAX_SWEEP_NAME_CHARS)?;
    let actor = crate::auth::actor(&req);
    let sweep = meta(&state, move |m| m.create_sweep(&project, &name, &body.config, actor.as_ref())).await?;
    Ok(HttpResponse::Created().json(sweep_view(&state, &sweep, &[]).await?))
}

/// List sweeps.
#[utoipa::path(get, path = "/api/v1/sweeps", tag = "sweeps", params(("project" = Option<String>, Query, min_length = 1, max_length = 500, pattern = r"^[^\x00-\x1F\x7F-\x9F \xA0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000](?:[^\x00-\x1F\x7F-\x9F]*[^\x00-\x1F\x7F-\x9F \xA0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000])?$", description = "Only this project's sweeps.")),
    responses((status = 200, description = "The sweeps.", body = wire::SweepList)))]
pub(crate) async fn list_sweeps(state: State, req: HttpRequest) -> Result<HttpResponse> {
    let pairs = query_pairs(&req)?;
    let project = query_one(&pairs, "project").map(|p| ProjectName::parse("project", p)).transpose()?;
    let visible = crate::auth::visibility(&req, trainlog_meta::Scope::Project).await?;
    let sweeps = meta(&state, move |m| m.sweeps(project.as_ref())).await?;
    let mut out = Vec::with_capacity(sweeps.len());
    for s in sweeps.into_iter().filter(|s| visible.allows(s.project_id)) {
        let id = s.id.clone();
        let trials = meta(&state, move |m| m.trials(&id)).await?;
        out.push(sweep_view(&state, &s, &trials).await?);
    }
    Ok(HttpResponse::Ok().json(wire::SweepList { sweeps: out }))
}

/// Get a sweep.
#[utoipa::path(get, path = "/api/v1/sweeps/{id}", tag = "sweeps", params(("id" = String, Path, description = "The sweep's id.")),
    responses((status = 200, description = "The sweep.", body = wire::SweepView)))]
pub(crate) async fn get_sweep(state: State, path: web::Path<String>, req: HttpRequest) -> Result<HttpResponse> {
    sweep_access(&state, &req, &path, Role::Read).await?;
    let (sweep, trials) = load(&state, &path).await?;
    Ok(HttpResponse::Ok().json(sweep_view(&state, &sweep, &trials).await?))
}

/// A sweep's trials with their results.
#[utoipa::path(get, path = "/api/v1/sweeps/{id}/trials", tag = "sweeps", params(("id" = String, Path, description = "The sweep's id.")),
    responses((status = 200, description = "The trials.", body = wire::TrialList)))]
pub(crate) async fn list_trials(state: State, path: web::Path<String>, req: HttpRequest) -> Result<HttpResponse> {
    sweep_access(&state, &req, &path, Role::Read).await?;
    let (sweep, trials) = load(&state, &path).await?;
    let cfg = stored_config(&sweep)?;
    let now = trainlog_meta::now_ms();
    let mut out = Vec::with_capacity(trials.len());
    for t in &trials {
        let spent = trial_cost(&state, t).await?;
        let metric = t.loss.map(|l| Float(cfg.metric.goal.loss(l)));
        out.push(wire::TrialResult { trial: trial_view(t, now), metric, cost_usd: spent });
    }
    Ok(HttpResponse::Ok().json(wire::TrialList { trials: out }))
}

/// Refuses a caller holding less than `need` on a sweep's project (a sweep they may not read is
/// not found).
async fn sweep_access(state: &State, req: &HttpRequest, id: &str, need: Role) -> Result<()> {
    if crate::auth::actor(req).is_none() {
        return Ok(());
    }
    let owned = id.to_owned();
    let sweep = meta(state, move |m| m.sweep(&owned)).await?;
    crate::auth::require_in_project(req, sweep.project_id, need, || format!("sweep {id:?}")).await
}

async fn load(state: &State, id: &str) -> Result<(SweepRow, Vec<TrialRow>)> {
    let id = id.to_owned();
    meta(state, move |m| Ok((m.sweep(&id)?, m.trials(&id)?))).await
}

fn trial_view(t: &TrialRow, now: i64) -> wire::TrialView {
    wire::TrialView {
        index: t.index,
        run_id: t.run_id.clone(),
        params: t.params.clone(),
        state: t.state.clone(),
        attempts: t.attempts,
        agent: t.agent.clone(),
        slot: t.slot.clone(),
        gpus: t.gpus,
        bracket: t.bracket,
        exit_code: t.exit_code,
        output_tail: t.output_tail.clone(),
        stop_reason: t.stop_reason.clone(),
        created_time: t.created_ms,
        started_time: t.started_ms,
        ended_time: t.ended_ms,
        heartbeat_time: t.heartbeat_ms,
        run_seconds: t.elapsed_ms(now) as f64 / 1000.0,
    }
}

/// What a trial's run has cost so far: the last value of its cost series.
async fn trial_cost(state: &State, t: &TrialRow) -> Result<Option<f64>> {
    let run = RunId::parse("run_id", &t.run_id)?;
    let sums = state.store.summaries(&run).await?;
    Ok(sums.get(COST_KEY).map(|s| s.last).filter(|v| v.is_finite()))
}

/// Money and GPU-hours spent by the sweep's trials so far.
async fn spent(state: &State, trials: &[TrialRow]) -> Result<(f64, f64)> {
    let now = trainlog_meta::now_ms();
    let mut usd = 0.0;
    let mut gpu_hours = 0.0;
    for t in trials {
        usd += trial_cost(state, t).await?.unwrap_or(0.0);
        gpu_hours += t.gpus * t.elapsed_ms(now) as f64 / 3_600_000.0;
    }
    Ok((usd, gpu_hours))
}

async fn sweep_view(state: &State, sweep: &SweepRow, trials: &[TrialRow]) -> Result<wire::SweepView> {
    let cfg = stored_config(sweep)?;
    let (usd, gpu_hours) = spent(state, trials).await?;
    let mut counts = BTreeMap::new();
    for t in trials {
        *counts.entry(t.state.clone()).or_insert(0) += 1;
    }
    let best = trials
        .iter()
        .filter_map(|t| t.loss.filter(|l| l.is_finite()).map(|l| (l, t)))
        .min_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(l, t)| wire::BestTrial {
            trial: t.index,
            run_id: t.run_id.clone(),
            value: cfg.metric.goal.loss(l),
            params: t.params.clone(),
        });
    // Best so far after each ended trial, in the order trials ended, for the UI's curve.
    let mut ended: Vec<&TrialRow> = trials.iter().filter(|t| t.loss.is_some_and(f64::is_finite)).collect();
    ended.sort_by_key(|t| (t.ended_ms.unwrap_or(i64::MAX), t.index));
    let mut best_so_far = Vec::with_capacity(ended.len());
    let mut running_best = f64::INFINITY;
    for (n, t) in ended.iter().enumerate() {
        let l = t.loss.unwrap_or(f64::INFINITY);
        running_best = running_best.min(l);
        best_so_far.push(wire::BestSoFar {
            trials: n + 1,
            trial: t.index,
            ended_time: t.ended_ms,
            value: cfg.metric.goal.loss(l),
            best: cfg.metric.goal.loss(running_best),
        });
    }
    Ok(wire::SweepView {
        id: sweep.id.clone(),
        project: sweep.project.clone(),
        name: sweep.name.clone(),
        state: sweep.state.clone(),
        ended_reason: sweep.ended_reason.clone(),
        method: cfg.method.as_str(),
        metric: wire::SweepMetric {
            name: cfg.metric.name.clone(),
            goal: match cfg.metric.goal {
                trainlog_sweep::space::Goal::Minimize => "minimize",
                trainlog_sweep::space::Goal::Maximize => "maximize",
            },
        },
        command: cfg.command.clone(),
        run_cap: cfg.run_cap,
        grid_size: (cfg.method == Method::Grid).then(|| trainlog_sweep::grid::size(&cfg.space).ok()).flatten(),
        budget: wire::Money { usd: cfg.budget.usd, gpu_hours: cfg.budget.gpu_hours },
        spent: wire::Spent { usd, gpu_hours },
        trial_count: trials.len(),
        counts,
        best,
        best_so_far,
        parameters: cfg.space.params.iter().map(|(n, _)| n.clone()).collect(),
        config: sweep.config.clone(),
        created_time: sweep.created_ms,
        updated_time: sweep.updated_ms,
    })
}

async fn set_state(state: State, id: String, to: &'static str) -> Result<HttpResponse> {
    let sweep = meta(&state, {
        let id = id.clone();
        move |m| {
            let s = m.sweep(&id)?;
            if s.state == "finished" {
                return Err(trainlog_meta::Error::Conflict {
                    field: "state".into(),
                    reason: format!("sweep {id} is finished ({})", s.ended_reason),
                });
            }
            m.set_sweep_state(&id, to, if to == "stopped" { "stopped" } else { "" })
        }
    })
    .await?;
    let trials = meta(&state, move |m| m.trials(&id)).await?;
    Ok(HttpResponse::Ok().json(sweep_view(&state, &sweep, &trials).await?))
}

/// Stop a sweep: no new trials, running ones are told to stop.
#[utoipa::path(post, path = "/api/v1/sweeps/{id}/stop", tag = "sweeps", params(("id" = String, Path, description = "The sweep's id.")),
    responses((status = 200, description = "The sweep as it is now.", body = wire::SweepView)))]
pub(crate) async fn stop_sweep(
    state: State,
    path: web::Path<String>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    crate::body::empty_body(&req, payload).await?;
    sweep_access(&state, &req, &path, Role::Write).await?;
    set_state(state, path.into_inner(), "stopped").await
}

/// Resume a stopped sweep.
#[utoipa::path(post, path = "/api/v1/sweeps/{id}/resume", tag = "sweeps", params(("id" = String, Path, description = "The sweep's id.")),
    responses((status = 200, description = "The sweep as it is now.", body = wire::SweepView)))]
pub(crate) async fn resume_sweep(
    state: State,
    path: web::Path<String>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    crate::body::empty_body(&req, payload).await?;
    sweep_access(&state, &req, &path, Role::Write).await?;
    set_state(state, path.into_inner(), "running").await
}

/// Why a sweep starts no more trials, if it does not.
fn exhausted(cfg: &SweepConfig, trials: &[TrialRow], usd: f64, gpu_hours: f64) -> Option<&'static str> {
    if budget_spent(cfg, usd, gpu_hours) {
        return Some("budget");
    }
    if cfg.run_cap.is_some_and(|cap| trials.len() as u64 >= cap) {
        return Some("run_cap");
    }
    None
}

fn budget_spent(cfg: &SweepConfig, usd: f64, gpu_hours: f64) -> bool {
    cfg.budget.usd.is_some_and(|b| usd >= b) || cfg.budget.gpu_hours.is_some_and(|b| gpu_hours >= b)
}

/// Trials whose agent stopped reporting: their node is treated as lost, so they are preempted.
async fn expire_lost(state: &State, sweep: &SweepRow, trials: &mut Vec<TrialRow>) -> Result<()> {
    let now = trainlog_meta::now_ms();
    let timeout = state.trial_timeout_ms;
    // Agents could not report while this server was down: their silence counts from its start.
    let silent_since = |t: &TrialRow| t.heartbeat_ms.max(state.started_ms);
    let lost: Vec<(i64, i64)> = trials
        .iter()
        .filter(|t| t.is_active() && now - silent_since(t) > timeout)
        .map(|t| (t.index, t.attempts))
        .collect();
    if lost.is_empty() {
        return Ok(());
    }
    for (index, attempt) in lost {
        let end = TrialEnd {
            state: "preempted".into(),
            exit_code: None,
            output_tail: format!("no heartbeat from its agent for {} s: the node is taken as lost", timeout / 1000),
            loss: None,
        };
        finish_attempt(state, sweep, index, Some(attempt), end).await?;
    }
    let id = sweep.id.clone();
    *trials = meta(state, move |m| m.trials(&id)).await?;
    Ok(())
}

/// Ends a trial's attempt, with the loss read from its run; a preempted trial past its retries fails.
async fn finish_attempt(
    state: &State,
    sweep: &SweepRow,
    index: i64,
    attempt: Option<i64>,
    mut end: TrialEnd,
) -> Result<TrialRow> {
    let cfg = stored_config(sweep)?;
    let id = sweep.id.clone();
    let trial = meta(state, move |m| m.trial(&id, index)).await?;
    end.loss = trial_loss(state, &cfg, &trial).await?;
    // A trial the sweep asked to stop was pruned, however it exited.
    if !trial.stop_reason.is_empty() {
        end.state = "pruned".into();
    }
    if end.state == "preempted" && trial.attempts > i64::from(cfg.max_retries) {
        end.output_tail = format!(
            "preempted {} times, more than max_retries ({})\n{}",
            trial.attempts, cfg.max_retries, end.output_tail
        );
        end.state = "failed".into();
    }
    let run_status = match end.state.as_str() {
        "finished" => "finished",
        "pruned" => "pruned",
        "preempted" => "preempted",
        _ => "failed",
    };
    let id = sweep.id.clone();
    let row = meta(state, move |m| m.end_trial(&id, index, attempt, &end, run_status)).await?;
    state.store.project_changed(sweep.project_id);
    Ok(row)
}

/// The trial's loss: the last value of the sweep's metric in its run, in the minimizing direction.
async fn trial_loss(state: &State, cfg: &SweepConfig, t: &TrialRow) -> Result<Option<f64>> {
    let run = RunId::parse("run_id", &t.run_id)?;
    let sums = state.store.summaries(&run).await?;
    Ok(sums.get(&cfg.metric.name).map(|s| cfg.metric.goal.loss(s.last)).filter(|l| l.is_finite()))
}

/// For an agent: the next trial to start, or why there is none.
#[utoipa::path(post, path = "/api/v1/sweeps/{id}/next", tag = "sweeps", params(("id" = String, Path, description = "The sweep's id.")), request_body = wire::NextTrialRequest,
    responses((status = 200, description = "A trial, or done, or wait.", body = wire::NextTrial)))]
pub(crate) async fn next_trial(
    state: State,
    path: web::Path<String>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    sweep_access(&state, &req, &path, Role::Write).await?;
    let body: wire::NextTrialRequest = json_body(&req, payload).await?;
    check_len("agent", "an agent's name", &body.agent, MAX_NAME_CHARS)?;
    check_len("slot", "a slot's name", &body.slot, MAX_NAME_CHARS)?;
    if !(body.gpus.is_finite() && (0.0..=1024.0).contains(&body.gpus)) {
        return Err(ApiError::invalid("gpus", "expected a number of GPUs from 0 to 1024"));
    }
    let placement = Placement { agent: body.agent, slot: body.slot, gpus: body.gpus };
    // One proposal at a time in this server. Servers sharing the database decide through it: a
    // new trial takes the next index, which is unique, and a preempted trial restarts once, in
    // one transaction each. A proposal that lost that race is made again on what the database
    // holds then.
    let _guard = state.sweep_lock.lock().await;
    for _ in 0..MAX_PROPOSALS {
        match propose_trial(&state, &path, &req, &placement).await {
            Err(ApiError::Conflict { .. }) => continue,
            answered => return answered,
        }
    }
    Err(ApiError::Unavailable(format!(
        "other servers started trials of sweep {} {MAX_PROPOSALS} times while this one proposed; ask again",
        path.as_str()
    )))
}

/// Proposals one request may make while other servers take the trials it proposed.
const MAX_PROPOSALS: usize = 16;

/// The next trial of a sweep for an agent, or why there is none; `ApiError::Conflict` when
/// another server changed the sweep or took the trial proposed here first.
async fn propose_trial(state: &State, path: &str, req: &HttpRequest, placement: &Placement) -> Result<HttpResponse> {
    let (state, placement) = (state.clone(), placement.clone());
    let (sweep, mut trials) = load(&state, path).await?;
    let cfg = stored_config(&sweep)?;
    let done = |reason: &str| HttpResponse::Ok().json(no_trial_answer(true, reason));
    if sweep.state != "running" {
        return Ok(done(if sweep.state == "finished" { &sweep.ended_reason } else { &sweep.state }));
    }
    expire_lost(&state, &sweep, &mut trials).await?;
    let (usd, gpu_hours) = spent(&state, &trials).await?;
    if budget_spent(&cfg, usd, gpu_hours) {
        finish_sweep(&state, &sweep, &trials, "budget", true).await?;
        return Ok(done("budget"));
    }
    // A preempted trial is started again first, with its run, so it can restore its checkpoint.
    if let Some(t) = trials.iter().find(|t| t.state == "preempted") {
        let (id, index, p) = (sweep.id.clone(), t.index, placement.clone());
        let t = meta(&state, move |m| m.restart_trial(&id, index, &p)).await?;
        return Ok(HttpResponse::Ok().json(assignment(&sweep, &cfg, &t, true)));
    }
    if let Some(reason) = exhausted(&cfg, &trials, usd, gpu_hours) {
        return Ok(no_trial(finish_sweep(&state, &sweep, &trials, reason, false).await?, reason));
    }
    let index = trials.len() as u64;
    let params = match cfg.method {
        Method::Grid => {
            match trainlog_sweep::grid::point(&cfg.space, index).map_err(|e| ApiError::Internal(e.to_string()))? {
                Some(p) => p,
                None => {
                    let finished = finish_sweep(&state, &sweep, &trials, "grid_exhausted", false).await?;
                    return Ok(no_trial(finished, "grid_exhausted"));
                }
            }
        }
        Method::Random => trainlog_sweep::random::sample(&cfg.space, cfg.seed, index),
        Method::Tpe => {
            let history: Vec<Observation> = trials
                .iter()
                .filter(|t| t.state != "running")
                .map(|t| Observation { params: params_map(&t.params), loss: t.loss })
                .collect();
            trainlog_sweep::tpe::suggest(&cfg.space, &history, cfg.seed, index, &Default::default())
        }
    };
    let bracket = early::bracket_of(&cfg.early_terminate, index).map(|b| b as i64);
    let params_json = Value::Object(params.into_iter().collect());
    let mut tags = BTreeMap::new();
    tags.insert(TagKey::parse("tags", "sweep")?, sweep.id.clone());
    tags.insert(TagKey::parse("tags", "sweep_trial")?, index.to_string());
    let new = NewRun {
        project: Some(ProjectName::parse("project", &sweep.project)?),
        name: Some(format!("{}-{index:03}", sweep.name)),
        params: flatten_params("params", &params_json)?,
        tags,
        host: placement.agent.split(':').next().unwrap_or_default().to_owned(),
        user: crate::auth::caller(req).map(|c| c.name).unwrap_or_default(),
        group: sweep.name.clone(),
        ..Default::default()
    };
    let id = sweep.id.clone();
    let p = params_json.clone();
    let t = meta(&state, move |m| m.start_trial(&id, index as i64, &new, &p, bracket, &placement)).await?;
    state.store.project_changed(sweep.project_id);
    Ok(HttpResponse::Ok().json(assignment(&sweep, &cfg, &t, false)))
}

fn params_map(v: &Value) -> trainlog_sweep::space::Params {
    v.as_object().map(|o| o.iter().map(|(k, v)| (k.clone(), v.clone())).collect()).unwrap_or_default()
}

/// What an agent needs to start a trial.
fn assignment(sweep: &SweepRow, cfg: &SweepConfig, t: &TrialRow, resume: bool) -> wire::NextTrial {
    wire::NextTrial::Trial(wire::Assignment {
        status: "trial",
        sweep_id: sweep.id.clone(),
        project: sweep.project.clone(),
        index: t.index,
        run_id: t.run_id.clone(),
        params: t.params.clone(),
        command: cfg.command.clone(),
        attempt: t.attempts,
        resume,
        metric: cfg.metric.name.clone(),
    })
}

/// Marks the sweep finished when nothing runs any more; answers the reason given to agents.
/// Marks the sweep finished unless trials still run (one may yet be preempted and need a new
/// start); answers whether it finished.
async fn finish_sweep(state: &State, sweep: &SweepRow, trials: &[TrialRow], reason: &str, now: bool) -> Result<bool> {
    if now || !trials.iter().any(|t| t.is_active() || t.state == "preempted") {
        let (id, r) = (sweep.id.clone(), reason.to_owned());
        meta(state, move |m| m.set_sweep_state(&id, "finished", &r)).await?;
        return Ok(true);
    }
    Ok(false)
}

/// The answer to an agent when no new trial can start: done, or wait while others still run.
fn no_trial(finished: bool, reason: &str) -> HttpResponse {
    HttpResponse::Ok().json(no_trial_answer(finished, reason))
}

fn no_trial_answer(finished: bool, reason: &str) -> wire::NextTrial {
    wire::NextTrial::None(if finished {
        wire::NoTrial { status: "done", reason: reason.to_owned(), retry_after_ms: None }
    } else {
        wire::NoTrial { status: "wait", reason: reason.to_owned(), retry_after_ms: Some(1000) }
    })
}

/// Whether a running trial should stop: the sweep was stopped, or the early-termination rule
/// prunes it on the metric points ingested so far. With `evaluate` false (the trial asking for
/// itself) the rule is not run again: the agent's heartbeats run it, and record the decision.
async fn should_stop(state: &State, sweep: &SweepRow, trial: &TrialRow, evaluate: bool) -> Result<Option<String>> {
    if !trial.stop_reason.is_empty() {
        return Ok(Some(trial.stop_reason.clone()));
    }
    if !trial.is_active() {
        return Ok(None);
    }
    let reason = if sweep.state == "stopped" {
        Some("the sweep was stopped".to_owned())
    } else if !evaluate {
        None
    } else {
        let cfg = stored_config(sweep)?;
        match cfg.early_terminate {
            Rule::None => None,
            ref rule => prune_decision(state, sweep, &cfg, rule, trial).await?,
        }
    };
    if let Some(r) = &reason {
        let (id, index, r) = (sweep.id.clone(), trial.index, r.clone());
        meta(state, move |m| m.request_trial_stop(&id, index, &r)).await?;
    }
    Ok(reason)
}

/// A trial's metric as (step, loss). Rules compare trials only at steps the trial being judged
/// has reached, so a peer is read up to `max_step`, plus its last point when it went further
/// (which tells the rules it reached those steps, and is never compared itself).
async fn progress_of(state: &State, cfg: &SweepConfig, t: &TrialRow, max_step: Option<i64>) -> Result<Progress> {
    let run = RunId::parse("run_id", &t.run_id)?;
    let key = MetricKey::parse("metric", &cfg.metric.name)?;
    let series = state.store.series(&run, &key, StepRange { min: None, max: max_step }).await?;
    let mut points: Vec<(i64, f64)> = series
        .steps
        .iter()
        .zip(&series.values)
        .filter(|(_, v)| v.is_finite())
        .map(|(s, v)| (*s, cfg.metric.goal.loss(*v)))
        .collect();
    if let Some(max) = max_step {
        let sums = state.store.summaries(&run).await?;
        if let Some(last) = sums.get(&cfg.metric.name).filter(|s| s.last_step > max && s.last.is_finite()) {
            points.push((last.last_step, cfg.metric.goal.loss(last.last)));
        }
    }
    Ok(Progress { trial_index: t.index as u64, points })
}

async fn prune_decision(
    state: &State,
    sweep: &SweepRow,
    cfg: &SweepConfig,
    rule: &Rule,
    trial: &TrialRow,
) -> Result<Option<String>> {
    let me = progress_of(state, cfg, trial, None).await?;
    let Some(&(last_step, _)) = me.points.last() else {
        return Ok(None);
    };
    let id = sweep.id.clone();
    let trials = meta(state, move |m| m.trials(&id)).await?;
    let mut peers = Vec::with_capacity(trials.len());
    for t in trials.iter().filter(|t| t.index != trial.index) {
        peers.push(progress_of(state, cfg, t, Some(last_step)).await?);
    }
    Ok(match early::decide(rule, &me, &peers) {
        Decision::Continue => None,
        Decision::Stop { reason, .. } => Some(reason),
    })
}

/// Why a report about `attempt` must stop: the trial ended or runs another attempt.
fn superseded(trial: &TrialRow, attempt: Option<i64>) -> Option<String> {
    let attempt = attempt.unwrap_or(trial.attempts);
    if !trial.is_active() {
        Some(format!("the trial is {}", trial.state))
    } else if attempt != trial.attempts {
        Some(format!("attempt {attempt} was superseded by attempt {}", trial.attempts))
    } else {
        None
    }
}

/// For an agent: a running trial is alive; answers whether it must stop.
#[utoipa::path(post, path = "/api/v1/sweeps/{id}/trials/{index}/heartbeat", tag = "sweeps", params(("id" = String, Path, description = "The sweep's id."), ("index" = String, Path, pattern = "^[0-9]{1,18}$", description = "The trial's number, from 0.")), request_body = wire::Heartbeat,
    responses((status = 200, description = "Whether to stop.", body = wire::StopAnswer)))]
pub(crate) async fn heartbeat(
    state: State,
    path: web::Path<(String, String)>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    let (id, index) = path.into_inner();
    let index = trial_index(&index)?;
    sweep_access(&state, &req, &id, Role::Write).await?;
    let body: wire::Heartbeat = json_body(&req, payload).await?;
    let (sweep, trial) = {
        let id = id.clone();
        meta(&state, move |m| {
            let trial = m.trial(&id, index)?;
            m.trial_heartbeat(&id, index, body.attempt.unwrap_or(trial.attempts))?;
            Ok((m.sweep(&id)?, trial))
        })
        .await?
    };
    let stop = match superseded(&trial, body.attempt) {
        Some(reason) => Some(reason),
        None => should_stop(&state, &sweep, &trial, true).await?,
    };
    Ok(HttpResponse::Ok().json(wire::StopAnswer { state: trial.state, stop: stop.is_some(), reason: stop }))
}

/// At most this much of a trial's last output is kept.
const MAX_TAIL_LINES: usize = 40;
const MAX_TAIL_LINE_BYTES: usize = 1000;

fn output_tail(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(MAX_TAIL_LINES)..]
        .iter()
        .map(|l| {
            // A progress bar redrawn with \r is one long line: keep its end.
            let l = l.rsplit('\r').next().unwrap_or(l);
            let mut start = l.len().saturating_sub(MAX_TAIL_LINE_BYTES);
            while !l.is_char_boundary(start) {
                start += 1;
            }
            &l[start..]
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// For an agent: a trial's attempt ended.
#[utoipa::path(post, path = "/api/v1/sweeps/{id}/trials/{index}/end", tag = "sweeps", params(("id" = String, Path, description = "The sweep's id."), ("index" = String, Path, pattern = "^[0-9]{1,18}$", description = "The trial's number, from 0.")), request_body = wire::EndTrial,
    responses((status = 200, description = "The trial as it is now.", body = wire::TrialView)))]
pub(crate) async fn end_trial(
    state: State,
    path: web::Path<(String, String)>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    let (id, index) = path.into_inner();
    let index = trial_index(&index)?;
    sweep_access(&state, &req, &id, Role::Write).await?;
    let body: wire::EndTrial = json_body(&req, payload).await?;
    let tail = output_tail(&body.output_tail);
    let sweep = {
        let id = id.clone();
        meta(&state, move |m| m.sweep(&id)).await?
    };
    let end =
        TrialEnd { state: body.outcome.as_str().into(), exit_code: body.exit_code, output_tail: tail, loss: None };
    let row = finish_attempt(&state, &sweep, index, body.attempt, end).await?;
    // A sweep whose last trial just ended may be complete.
    let _guard = state.sweep_lock.lock().await;
    let (sweep, trials) = load(&state, &id).await?;
    if sweep.state == "running" {
        let cfg = stored_config(&sweep)?;
        let (usd, gpu_hours) = spent(&state, &trials).await?;
        let grid_done = cfg.method == Method::Grid
            && trainlog_sweep::grid::size(&cfg.space).is_ok_and(|n| trials.len() as u64 >= n);
        let reason = exhausted(&cfg, &trials, usd, gpu_hours).or(grid_done.then_some("grid_exhausted"));
        if let Some(reason) = reason {
            finish_sweep(&state, &sweep, &trials, reason, false).await?;
        }
    }
    Ok(HttpResponse::Ok().json(trial_view(&row, trainlog_meta::now_ms())))
}

/// For a run inside a sweep: its trial, and whether the sweep wants it to stop.
/// For a run inside a sweep: its trial, and whether it must stop.
#[utoipa::path(get, path = "/api/v1/runs/{id}/sweep", tag = "sweeps",
    params(("id" = inline(RunIdText), Path, description = "The run's id."), ("attempt" = Option<i64>, Query, description = "The attempt the run belongs to.")),
    responses((status = 200, description = "The trial.", body = wire::RunTrial)))]
pub(crate) async fn run_sweep(state: State, path: web::Path<String>, req: HttpRequest) -> Result<HttpResponse> {
    let attempt = query_one(&query_pairs(&req)?, "attempt")
        .map(|a| a.parse::<i64>().map_err(|_| ApiError::invalid("attempt", "expected a number")))
        .transpose()?;
    let run = RunId::parse("id", &path)?;
    let project_id = crate::lookup::run_project(&state, &run).await?;
    crate::auth::require_run(&req, &run, project_id, Role::Read).await?;
    let trial = meta(&state, move |m| m.trial_of_run(&run)).await?;
    let Some(trial) = trial else {
        return Err(ApiError::NotFound(format!("a sweep trial for run {}", path.as_str())));
    };
    let sweep = {
        let id = trial.sweep_id.clone();
        meta(&state, move |m| m.sweep(&id)).await?
    };
    let stop = match superseded(&trial, attempt) {
        Some(reason) => Some(reason),
        None => should_stop(&state, &sweep, &trial, false).await?,
    };
    Ok(HttpResponse::Ok().json(wire::RunTrial {
        sweep_id: sweep.id,
        trial: trial.index,
        params: trial.params,
        state: trial.state,
        stop: stop.is_some(),
        reason: stop,
    }))
}
