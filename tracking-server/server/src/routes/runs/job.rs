//! The job a run follows, on the wire: a process joining with the run's creation, its
//! heartbeats and its end, and the job's attempts and figures as a run's answers show them.

use crate::body::json_body;
use crate::error::{ApiError, Result};
use crate::lookup;
use crate::state::{meta, State};
use crate::wire::{integer, RunIdText};
use actix_web::{web, HttpRequest, HttpResponse};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use trainlog_meta::jobs::{AttemptFigures, JobFigures, NodeFigures, NodeInfo, ProcessJoin, ProcessReport};
use trainlog_schema::limits::{check_len, MAX_NAME_CHARS, MAX_TEXT_CHARS};
use utoipa::ToSchema;

/// One process of a job, joining the run as it creates or resumes it.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ProcessInput {
    #[serde(deserialize_with = "integer::required")]
    #[schema(minimum = 0)]
    pub rank: i64,
    #[serde(default, deserialize_with = "integer::optional")]
    #[schema(minimum = 0)]
    pub local_rank: Option<i64>,
    #[serde(deserialize_with = "integer::required")]
    #[schema(minimum = 1)]
    pub world_size: i64,
    #[serde(default, deserialize_with = "integer::optional")]
    #[schema(minimum = 0)]
    pub node_rank: Option<i64>,
    #[serde(default, deserialize_with = "integer::optional")]
    #[schema(minimum = 1)]
    pub node_count: Option<i64>,
    #[serde(default)]
    #[schema(max_length = 500)]
    pub host: String,
    #[serde(default, deserialize_with = "integer::optional")]
    pub pid: Option<i64>,
    /// torchrun, slurm, mpi, skypilot, kubernetes, sagemaker, vertex, trainlog or none.
    #[serde(default)]
    #[schema(max_length = 500)]
    pub launcher: String,
    #[schema(max_length = 500)]
    pub job_id: Option<String>,
    /// The launcher's count of restarts of the job; another value starts another attempt.
    #[schema(max_length = 500)]
    pub restart: Option<String>,
    #[schema(max_length = 500)]
    pub cloud: Option<String>,
    #[schema(max_length = 500)]
    pub region: Option<String>,
    #[schema(max_length = 500)]
    pub zone: Option<String>,
    #[schema(max_length = 500)]
    pub instance_type: Option<String>,
    /// The cluster's name (SkyPilot, Slurm); another cluster starts another attempt.
    #[schema(max_length = 500)]
    pub cluster: Option<String>,
    pub spot: Option<bool>,
    /// When the process started, ms since the Unix epoch; when it joined if absent.
    #[serde(default, deserialize_with = "integer::optional")]
    pub started_ms: Option<i64>,
    /// When the launcher says the job was submitted (a Slurm job's submit time), ms since the
    /// Unix epoch: the first attempt's queue wait is from then to its start.
    #[serde(default, deserialize_with = "integer::optional")]
    pub submitted_ms: Option<i64>,
    /// The job context as the process detected it, with where each value came from.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub context: Value,
    /// The node, described by its first process (local rank 0).
    pub node: Option<NodeInput>,
}

/// A node of a job: its GPUs and its price.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NodeInput {
    #[serde(default, deserialize_with = "integer::optional")]
    #[schema(minimum = 0)]
    pub gpus: Option<i64>,
    #[serde(default)]
    #[schema(max_items = 64)]
    pub gpu_names: Vec<String>,
    #[schema(max_length = 500)]
    pub driver: Option<String>,
    /// The node's price per hour, USD (all its GPUs).
    pub usd_per_hour: Option<f64>,
    #[schema(max_length = 500)]
    pub price_source: Option<String>,
    /// Where `gpus` came from: the launcher's allocation on the node (`SLURM_GPUS_ON_NODE=2`),
    /// what NVML showed, and whether they disagree.
    #[schema(max_length = 500)]
    pub gpus_source: Option<String>,
}

/// The largest job context a process may send.
const MAX_CONTEXT_BYTES: usize = 64 << 10;

impl ProcessInput {
    /// Parses the wire form into what the store records; refusals name the field.
    pub fn into_join(self) -> Result<ProcessJoin> {
        let texts = [
            ("process.host", Some(&self.host)),
            ("process.launcher", Some(&self.launcher)),
            ("process.job_id", self.job_id.as_ref()),
            ("process.restart", self.restart.as_ref()),
            ("process.cloud", self.cloud.as_ref()),
            ("process.region", self.region.as_ref()),
            ("process.zone", self.zone.as_ref()),
            ("process.instance_type", self.instance_type.as_ref()),
            ("process.cluster", self.cluster.as_ref()),
        ];
        for (field, value) in texts {
            check_len(field, "a job's text", value.map_or("", String::as_str), MAX_NAME_CHARS)?;
        }
        let context = if self.context.is_null() { "{}".to_owned() } else { self.context.to_string() };
        if !(self.context.is_null() || self.context.is_object()) {
            return Err(ApiError::invalid("process.context", "the job context is a JSON object"));
        }
        if context.len() > MAX_CONTEXT_BYTES {
            return Err(ApiError::invalid("process.context", "the job context is at most 64 KiB"));
        }
        let node = match self.node {
            None => None,
            Some(n) => {
                if n.gpu_names.len() > 64 {
                    return Err(ApiError::invalid("process.node.gpu_names", "at most 64 GPU names"));
                }
                let texts = n.gpu_names.iter().chain(&n.driver).chain(&n.price_source).chain(&n.gpus_source);
                for name in texts {
                    check_len("process.node", "a node's text", name, MAX_NAME_CHARS)?;
                }
                Some(NodeInfo {
                    gpus: n.gpus.unwrap_or(n.gpu_names.len() as i64),
                    gpu_names: n.gpu_names,
                    driver: n.driver,
                    usd_per_hour: n.usd_per_hour,
                    price_source: n.price_source,
                    gpus_source: n.gpus_source,
                })
            }
        };
        Ok(ProcessJoin {
            rank: self.rank,
            local_rank: self.local_rank.unwrap_or(0),
            world_size: self.world_size,
            node_rank: self.node_rank.unwrap_or(0),
            node_count: self.node_count.unwrap_or(1),
            host: self.host,
            pid: self.pid,
            launcher: if self.launcher.is_empty() { "none".into() } else { self.launcher },
            job_id: self.job_id,
            restart: self.restart,
            cloud: self.cloud,
            region: self.region,
            zone: self.zone,
            instance_type: self.instance_type,
            cluster: self.cluster,
            spot: self.spot,
            started_ms: self.started_ms,
            submitted_ms: self.submitted_ms,
            context,
            node,
        })
    }
}

/// Which process of the job sends this: its attempt and rank, and the steps it logged so far.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ProcessReportInput {
    /// The attempt it joined; when absent, the latest attempt its rank joined.
    #[serde(default, deserialize_with = "integer::optional")]
    #[schema(minimum = 1)]
    pub attempt: Option<i64>,
    #[serde(deserialize_with = "integer::required")]
    #[schema(minimum = 0)]
    pub rank: i64,
    #[serde(default, deserialize_with = "integer::optional")]
    pub first_step: Option<i64>,
    #[serde(default, deserialize_with = "integer::optional")]
    pub last_step: Option<i64>,
    /// At its end: why it ended (an exception and its message, a signal).
    #[schema(max_length = 1048576)]
    pub reason: Option<String>,
    /// At its end: the last lines it printed.
    #[schema(max_length = 1048576)]
    pub last_lines: Option<String>,
    /// When the process took this report, ms since the Unix epoch (a heartbeat's time of life);
    /// when the server hears it if absent, and never later than that.
    #[serde(default, deserialize_with = "integer::optional")]
    pub time: Option<i64>,
}

impl ProcessReportInput {
    pub fn into_report(self) -> Result<ProcessReport> {
        for (field, value) in [("process.reason", &self.reason), ("process.last_lines", &self.last_lines)] {
            check_len(field, "a process's text", value.as_deref().unwrap_or_default(), MAX_TEXT_CHARS)?;
        }
        if self.attempt.is_some_and(|a| a < 1) {
            return Err(ApiError::invalid("process.attempt", "attempts are numbered from 1"));
        }
        Ok(ProcessReport {
            attempt: self.attempt.unwrap_or(0),
            rank: self.rank,
            first_step: self.first_step,
            last_step: self.last_step,
            reason: self.reason,
            last_lines: self.last_lines,
            at_ms: self.time,
        })
    }
}

/// The job's totals: what it cost so far across every node and attempt, and the work lost to
/// preemptions.
#[derive(Serialize, ToSchema)]
pub struct JobView {
    pub launcher: String,
    pub job_id: Option<String>,
    pub world_size: i64,
    pub node_count: i64,
    pub attempts: i64,
    /// GPUs of the latest attempt.
    pub gpus: i64,
    /// Sum over attempts and nodes of each node's price × how long it ran.
    pub cost_usd: f64,
    /// Price per hour of the running attempt; 0 when none runs.
    pub usd_per_hour: f64,
    /// Nodes that had no price: their cost is not in `cost_usd`.
    pub unpriced_nodes: i64,
    pub gpu_hours: f64,
    /// GPU-hours and dollars of preempted or lost attempts after their last checkpoint.
    pub lost_usd: f64,
    pub lost_gpu_hours: f64,
    /// Steps logged again after restoring an older checkpoint.
    pub steps_replayed: i64,
    /// When the figures were computed, ms since the Unix epoch.
    pub at_ms: i64,
}

impl From<JobFigures> for JobView {
    fn from(j: JobFigures) -> Self {
        JobView {
            launcher: j.launcher,
            job_id: j.job_id,
            world_size: j.world_size,
            node_count: j.node_count,
            attempts: j.attempts,
            gpus: j.gpus,
            cost_usd: j.cost_usd,
            usd_per_hour: j.usd_per_hour,
            unpriced_nodes: j.unpriced_nodes,
            gpu_hours: j.gpu_hours,
            lost_usd: j.lost_usd,
            lost_gpu_hours: j.lost_gpu_hours,
            steps_replayed: j.steps_replayed,
            at_ms: j.at_ms,
        }
    }
}

/// One start of the job.
#[derive(Serialize, ToSchema)]
pub struct AttemptView {
    pub number: i64,
    /// running, finished, failed, killed, preempted, or lost (no heartbeat, and the job started again).
    pub status: String,
    pub start_time: i64,
    pub end_time: Option<i64>,
    pub launcher: String,
    pub job_id: Option<String>,
    pub world_size: i64,
    pub node_count: i64,
    /// Processes that joined it.
    pub ranks: i64,
    pub cloud: Option<String>,
    pub region: Option<String>,
    pub zone: Option<String>,
    pub instance_type: Option<String>,
    pub cluster: Option<String>,
    pub spot: Option<bool>,
    /// When the launcher says the job was submitted (a Slurm job's submit time), ms since the
    /// Unix epoch: the first attempt waited in the queue from then to its start.
    pub submitted_time: Option<i64>,
    /// What decided how it ended, in words: the process whose end decided it and why (an exit
    /// code; a signal, and whether anything said it was a preemption), no heartbeat from any
    /// process for the server's bound, or its launcher starting the job again. Null while it runs.
    pub ended_by: Option<String>,
    /// Which rank failed first and why.
    pub reason: Option<String>,
    pub last_lines: Option<String>,
    pub gpus: i64,
    pub usd_per_hour: Option<f64>,
    pub price_sources: Vec<String>,
    pub cost_usd: f64,
    pub unpriced_nodes: i64,
    pub gpu_hours: f64,
    pub first_step: Option<i64>,
    pub last_step: Option<i64>,
    pub last_checkpoint_step: Option<i64>,
    pub last_checkpoint_time: Option<i64>,
    pub steps_replayed: i64,
    pub lost_usd: f64,
    pub lost_gpu_hours: f64,
    pub lost_steps: i64,
    pub nodes: Vec<NodeView>,
    /// Its processes, by rank.
    pub processes: Vec<ProcessView>,
}

/// One process of an attempt.
#[derive(Serialize, ToSchema)]
pub struct ProcessView {
    pub rank: i64,
    pub local_rank: i64,
    pub node_rank: i64,
    pub host: String,
    pub pid: Option<i64>,
    /// running, finished, failed, killed, preempted, or lost.
    pub status: String,
    pub start_time: i64,
    /// Its last heartbeat.
    pub seen_time: i64,
    pub end_time: Option<i64>,
    pub reason: Option<String>,
    /// The job context as the process detected it, with `detected_from`: which variable gave
    /// each value.
    #[schema(value_type = Object)]
    pub context: Value,
}

impl From<trainlog_meta::jobs::ProcessFigures> for ProcessView {
    fn from(p: trainlog_meta::jobs::ProcessFigures) -> Self {
        ProcessView {
            rank: p.rank,
            local_rank: p.local_rank,
            node_rank: p.node_rank,
            host: p.host,
            pid: p.pid,
            status: p.status,
            start_time: p.start_ms,
            seen_time: p.seen_ms,
            end_time: p.end_ms,
            reason: p.reason,
            context: serde_json::from_str(&p.context).unwrap_or(Value::Null),
        }
    }
}

/// A node of an attempt.
#[derive(Serialize, ToSchema)]
pub struct NodeView {
    pub node_rank: i64,
    pub host: String,
    pub gpus: i64,
    pub gpu_names: Vec<String>,
    pub driver: Option<String>,
    pub usd_per_hour: Option<f64>,
    pub price_source: Option<String>,
    /// Where `gpus` came from (the launcher's allocation, NVML), and any disagreement.
    pub gpus_source: Option<String>,
    pub start_time: i64,
    pub end_time: i64,
    pub processes: i64,
    pub cost_usd: Option<f64>,
    pub gpu_hours: f64,
}

impl From<NodeFigures> for NodeView {
    fn from(n: NodeFigures) -> Self {
        NodeView {
            node_rank: n.node_rank,
            host: n.host,
            gpus: n.gpus,
            gpu_names: n.gpu_names,
            driver: n.driver,
            usd_per_hour: n.usd_per_hour,
            price_source: n.price_source,
            gpus_source: n.gpus_source,
            start_time: n.start_ms,
            end_time: n.end_ms,
            processes: n.processes,
            cost_usd: n.cost_usd,
            gpu_hours: n.gpu_hours,
        }
    }
}

impl From<AttemptFigures> for AttemptView {
    fn from(a: AttemptFigures) -> Self {
        AttemptView {
            number: a.number,
            status: a.status,
            start_time: a.start_ms,
            end_time: a.end_ms,
            launcher: a.launcher,
            job_id: a.job_id,
            world_size: a.world_size,
            node_count: a.node_count,
            ranks: a.ranks,
            cloud: a.cloud,
            region: a.region,
            zone: a.zone,
            instance_type: a.instance_type,
            cluster: a.cluster,
            spot: a.spot,
            submitted_time: a.submitted_ms,
            ended_by: a.ended_by,
            reason: a.reason,
            last_lines: a.last_lines,
            gpus: a.gpus,
            usd_per_hour: a.usd_per_hour,
            price_sources: a.price_sources,
            cost_usd: a.cost_usd,
            unpriced_nodes: a.unpriced_nodes,
            gpu_hours: a.gpu_hours,
            first_step: a.first_step,
            last_step: a.last_step,
            last_checkpoint_step: a.last_checkpoint_step,
            last_checkpoint_time: a.last_checkpoint_ms,
            steps_replayed: a.steps_replayed,
            lost_usd: a.lost_usd,
            lost_gpu_hours: a.lost_gpu_hours,
            lost_steps: a.lost_steps,
            nodes: a.nodes.into_iter().map(NodeView::from).collect(),
            processes: a.processes.into_iter().map(ProcessView::from).collect(),
        }
    }
}

/// The job and its attempts, as a run's answer carries them.
pub async fn job_of(
    state: &State,
    id: &trainlog_schema::RunId,
    project_id: i64,
) -> Result<(Option<JobView>, Vec<AttemptView>)> {
    let run = id.clone();
    let job = meta(state, move |m| m.job(&run)).await?;
    Ok(match job {
        Some((figures, mut attempts)) => {
            last_lines_from_console(state, id, project_id, &mut attempts).await;
            (Some(figures.into()), attempts.into_iter().map(AttemptView::from).collect())
        }
        None => (None, Vec::new()),
    })
}

/// Lines shown for a failed attempt.
const LAST_LINES: usize = 20;

/// A failed attempt whose failing process said nothing of its end (killed by a signal, out of
/// memory: no traceback reached its SDK) shows that rank's last console lines in the attempt.
/// A console that cannot be read leaves the attempt as it is: the lines are a help, not the record.
async fn last_lines_from_console(
    state: &State,
    id: &trainlog_schema::RunId,
    project_id: i64,
    attempts: &mut [AttemptFigures],
) {
    for a in attempts.iter_mut().filter(|a| a.last_lines.is_none()) {
        let Some(failed) =
            a.processes.iter().filter(|p| p.status == "failed").min_by_key(|p| (p.end_ms.unwrap_or(i64::MAX), p.rank))
        else {
            continue;
        };
        let (rank, attempt) = (failed.rank, a.number);
        let Ok(lines) = state.store.console().lines(id, project_id).await else { return };
        let last: Vec<String> = lines
            .iter()
            .rev()
            .filter(|l| i64::from(l.rank) == rank && l.attempt == attempt)
            .take(LAST_LINES)
            .map(|l| trainlog_store::console::query::strip_ansi(&l.line).into_owned())
            .collect();
        if !last.is_empty() {
            a.last_lines = Some(last.into_iter().rev().collect::<Vec<_>>().join("\n"));
        }
    }
}

/// Where a joining process landed: its attempt, and whether it started it.
#[derive(Serialize, ToSchema)]
pub struct JoinedView {
    pub attempt: i64,
    pub rank: i64,
    pub new_attempt: bool,
}

/// A heartbeat's answer: the job's latest attempt, and for rank 0 the job's figures now (its
/// live cost series continues from them).
#[derive(Serialize, ToSchema)]
pub struct HeartbeatAnswer {
    /// The job's latest attempt; when it is not the sender's, the sender's attempt was superseded.
    pub current_attempt: i64,
    /// The attempt the sender is in now: another than the one it named when the server had
    /// ended that one `lost` (no heartbeat from any of its processes) and the job goes on.
    pub attempt: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub job: Option<JobView>,
    /// A stop asked of the run: the process ends the run `killed`, saying who stopped it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stop: Option<super::stop::StopView>,
}

/// Tell the server this process of the run's job is alive, with the steps it logged so far.
#[utoipa::path(post, path = "/api/v1/runs/{id}/heartbeat", tag = "runs",
    params(("id" = inline(RunIdText), Path, description = "The run's id.")),
    request_body = ProcessReportInput,
    responses((status = 200, description = "The job's latest attempt, and its figures for rank 0.", body = HeartbeatAnswer)))]
pub(crate) async fn heartbeat(
    state: State,
    path: web::Path<String>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    let body: ProcessReportInput = json_body(&req, payload).await?;
    let report = body.into_report()?;
    let (id, _) = lookup::writable(&state, &req, &path).await?;
    let figures = report.rank == 0;
    let (beat, job, stop) = meta(&state, move |m| {
        let (beat, job) = m.process_heartbeat(&id, &report, figures)?;
        Ok((beat, job, m.stop_request(&id)?))
    })
    .await?;
    Ok(HttpResponse::Ok().json(HeartbeatAnswer {
        current_attempt: beat.latest,
        attempt: beat.yours,
        job: job.map(JobView::from),
        stop: stop.map(super::stop::StopView::from),
    }))
}
