//! The job a run follows: processes joining it (one per rank), their heartbeats and ends, the
//! attempts they form (each start of the job), and the figures of each attempt.
//!
//! Processes coordinate only through this store. A joining process starts a new attempt when
//! there is none running, when its launcher says this is another start (its key differs), when
//! its rank already joined the running attempt, when its node rank runs on another host there,
//! or when every process of the running attempt stopped sending heartbeats. The attempt it
//! replaces ends then: as its processes said (failed, preempted, ...) or `lost`, at their last
//! heartbeat. An attempt that ended `killed` or `lost` and whose launcher starts the job again
//! was `preempted`. The server's liveness check ([`liveness`]) ends `lost` the attempts no
//! process speaks for.

mod figures;
pub mod liveness;

pub use figures::{AttemptFigures, CheckpointMark, JobFigures, NodeFigures, ProcessFigures};

use crate::db::{vals, Db, Dialect, Row};
use crate::{not_found, now_ms, Error, MetaStore, Result};
use std::collections::BTreeMap;
use trainlog_schema::{RunId, RunStatus};

/// A process joining a run, with the job context it detected.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ProcessJoin {
    pub rank: i64,
    pub local_rank: i64,
    pub world_size: i64,
    pub node_rank: i64,
    pub node_count: i64,
    pub host: String,
    pub pid: Option<i64>,
    pub launcher: String,
    pub job_id: Option<String>,
    /// The launcher's restart count (or other marker of this start).
    pub restart: Option<String>,
    pub cloud: Option<String>,
    pub region: Option<String>,
    pub zone: Option<String>,
    pub instance_type: Option<String>,
    pub cluster: Option<String>,
    pub spot: Option<bool>,
    /// When the process started (its clock), else when it joined.
    pub started_ms: Option<i64>,
    /// When the launcher says the job was submitted (a Slurm job's submit time).
    pub submitted_ms: Option<i64>,
    /// The context as detected (JSON text), kept as sent.
    pub context: String,
    /// The node, described by its first process.
    pub node: Option<NodeInfo>,
}

/// A node as its first process describes it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct NodeInfo {
    pub gpus: i64,
    pub gpu_names: Vec<String>,
    pub driver: Option<String>,
    pub usd_per_hour: Option<f64>,
    pub price_source: Option<String>,
    /// Where `gpus` came from (the launcher's allocation, NVML), and any disagreement.
    pub gpus_source: Option<String>,
}

/// Where a process landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Joined {
    pub attempt: i64,
    /// It started this attempt.
    pub new_attempt: bool,
}

/// A process's heartbeat or end: the steps it logged so far.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ProcessReport {
    /// 0 when the process does not know (its run's creation was spooled): the latest attempt
    /// it joined.
    pub attempt: i64,
    pub rank: i64,
    pub first_step: Option<i64>,
    pub last_step: Option<i64>,
    /// At the end: why it ended (an exception, a signal) and the last lines it printed.
    pub reason: Option<String>,
    pub last_lines: Option<String>,
    /// When the process took this report (its clock); when the server heard it if absent, and
    /// never later than that.
    pub at_ms: Option<i64>,
}

/// When a report was taken: the process's own time, never later than now.
fn heard_at(report: &ProcessReport) -> i64 {
    let now = now_ms();
    report.at_ms.map_or(now, |at| at.min(now))
}

pub use liveness::{lost_after_ms, set_lost_after_ms, DEFAULT_LOST_AFTER_MS};

/// What a joining process's launcher says about this start of the job: another value is another
/// attempt.
fn attempt_key(p: &ProcessJoin) -> String {
    let part = |v: &Option<String>| v.clone().unwrap_or_default();
    format!(
        "restart={}|cluster={}|zone={}|world={}|nodes={}",
        part(&p.restart),
        part(&p.cluster),
        part(&p.zone),
        p.world_size,
        p.node_count
    )
}

/// Serializes the joins of one run on PostgreSQL (SQLite has one writer).
fn lock_run(tx: &dyn Db, run: &str) -> Result<()> {
    if tx.dialect() == Dialect::Postgres {
        tx.exec("SELECT pg_advisory_xact_lock(hashtext(?1))", vals![format!("trainlog-job:{run}")])?;
    }
    Ok(())
}

struct Current {
    number: i64,
    key: String,
    status: String,
}

fn current_attempt(tx: &dyn Db, run: &str) -> Result<Option<Current>> {
    let row = tx.row(
        "SELECT number, key, status FROM run_attempts WHERE run_id = ?1 ORDER BY number DESC LIMIT 1",
        vals![run],
    )?;
    row.map(|r| Ok(Current { number: r.get(0)?, key: r.get(1)?, status: r.get(2)? })).transpose()
}

/// Joins a process to the run `run` (which exists), in the caller's transaction.
pub(crate) fn join_in(tx: &dyn Db, run: &str, p: &ProcessJoin) -> Result<Joined> {
    check_join(p)?;
    lock_run(tx, run)?;
    let now = now_ms();
    let key = attempt_key(p);
    let current = current_attempt(tx, run)?;
    let starts_new = match &current {
        None => true,
        Some(a) if a.status != "running" || a.key != key => true,
        Some(a) => {
            let rank_again = tx.exists(
                "SELECT 1 FROM run_processes WHERE run_id = ?1 AND attempt = ?2 AND rank = ?3",
                vals![run, a.number, p.rank],
            )?;
            let node_elsewhere = tx.exists(
                "SELECT 1 FROM run_processes WHERE run_id = ?1 AND attempt = ?2 AND node_rank = ?3 AND host <> ?4",
                vals![run, a.number, p.node_rank, &p.host],
            )?;
            let last_seen: Option<i64> = tx
                .row("SELECT MAX(seen_ms) FROM run_processes WHERE run_id = ?1 AND attempt = ?2", vals![run, a.number])?
                .map(|r| r.get(0))
                .transpose()?
                .flatten();
            rank_again || node_elsewhere || last_seen.is_some_and(|seen| seen < now - lost_after_ms())
        }
    };
    let attempt = if starts_new {
        if let Some(a) = current.as_ref().filter(|a| a.status == "running") {
            close_attempt(tx, run, a.number, None)?;
        }
        if let Some(a) = current.as_ref().filter(|a| a.key != key) {
            relaunched(tx, run, a, &key)?;
        }
        let number = current.as_ref().map_or(1, |a| a.number + 1);
        tx.exec(
            "INSERT INTO run_attempts (run_id, number, key, status, start_ms, launcher, job_id, world_size, node_count,
                cloud, region, zone, instance_type, cluster, spot, submitted_ms)
             VALUES (?1, ?2, ?3, 'running', ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)",
            vals![
                run,
                number,
                key,
                p.started_ms.unwrap_or(now),
                &p.launcher,
                p.job_id.as_deref(),
                p.world_size,
                p.node_count,
                p.cloud.as_deref(),
                p.region.as_deref(),
                p.zone.as_deref(),
                p.instance_type.as_deref(),
                p.cluster.as_deref(),
                p.spot,
                p.submitted_ms
            ],
        )?;
        number
    } else {
        let number = current.as_ref().map_or(1, |a| a.number);
        // A later process may know what the first did not (rank 0 often knows the most).
        let least = if tx.dialect() == Dialect::Postgres { "LEAST" } else { "MIN" };
        tx.exec(
            &format!(
                "UPDATE run_attempts SET cloud = COALESCE(cloud, ?3), region = COALESCE(region, ?4),
                    zone = COALESCE(zone, ?5), instance_type = COALESCE(instance_type, ?6), spot = COALESCE(spot, ?7),
                    job_id = COALESCE(job_id, ?8), start_ms = {least}(start_ms, ?9),
                    submitted_ms = COALESCE(submitted_ms, ?10)
                 WHERE run_id = ?1 AND number = ?2"
            ),
            vals![
                run,
                number,
                p.cloud.as_deref(),
                p.region.as_deref(),
                p.zone.as_deref(),
                p.instance_type.as_deref(),
                p.spot,
                p.job_id.as_deref(),
                p.started_ms.unwrap_or(now),
                p.submitted_ms
            ],
        )?;
        number
    };
    let started = p.started_ms.unwrap_or(now);
    tx.exec(
        "INSERT INTO run_processes (run_id, attempt, rank, local_rank, node_rank, host, pid, status, start_ms, seen_ms, context)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 'running', ?8, ?9, ?10)",
        vals![run, attempt, p.rank, p.local_rank, p.node_rank, &p.host, p.pid, started, now, &p.context],
    )?;
    if let Some(node) = &p.node {
        let names = serde_json::to_string(&node.gpu_names).unwrap_or_else(|_| "[]".into());
        // Money is the admins': the installation's catalog (valid when the attempt started)
        // prices the node whenever it can, whatever the job says; a price the job reports is
        // used only where the catalog has none, and its source says so.
        let attempt_start: i64 = tx
            .row("SELECT start_ms FROM run_attempts WHERE run_id = ?1 AND number = ?2", vals![run, attempt])?
            .map(|r| r.get(0))
            .transpose()?
            .unwrap_or(started);
        let reported = node.usd_per_hour.map(|usd| {
            let from = node.price_source.as_deref().filter(|s| !s.is_empty()).unwrap_or("no source given");
            (usd, format!("reported by the job: ${usd}/h ({from})"))
        });
        let spot = p.spot == Some(true);
        let (usd_per_hour, price_source, on_demand_usd_per_hour) =
            match crate::prices::price_node(tx, p, node.gpus, &node.gpu_names, attempt_start)? {
                Some((usd, source, on_demand)) => match &reported {
                    Some((theirs, _)) if *theirs != usd => {
                        (Some(usd), Some(format!("{source}; the job reported ${theirs}/h, not used")), on_demand)
                    }
                    _ => (Some(usd), Some(source), on_demand),
                },
                // What a spot price the job reports saves is unknown: no on-demand price beside it.
                None => reported
                    .map_or((None, None, None), |(usd, source)| (Some(usd), Some(source), (!spot).then_some(usd))),
            };
        tx.exec(
            "DELETE FROM run_nodes WHERE run_id = ?1 AND attempt = ?2 AND node_rank = ?3",
            vals![run, attempt, p.node_rank],
        )?;
        tx.exec(
            "INSERT INTO run_nodes (run_id, attempt, node_rank, host, gpus, gpu_names, driver, usd_per_hour, price_source,
                 gpus_source, on_demand_usd_per_hour)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
            vals![
                run,
                attempt,
                p.node_rank,
                &p.host,
                node.gpus,
                names,
                node.driver.as_deref(),
                usd_per_hour,
                price_source.as_deref(),
                node.gpus_source.as_deref(),
                on_demand_usd_per_hour
            ],
        )?;
    }
    write_job_row(tx, run)?;
    Ok(Joined { attempt, new_attempt: starts_new })
}

/// The most GPUs one node may report (the largest single systems hold 72).
pub const MAX_NODE_GPUS: i64 = 1024;
/// The highest price per hour a job may report for its node (clouds' largest GPU instances
/// cost about $100 an hour).
pub const MAX_NODE_USD_PER_HOUR: f64 = 10_000.0;

fn check_join(p: &ProcessJoin) -> Result<()> {
    let invalid = |field: &str, reason: String| Err(Error::Invalid { field: format!("process.{field}"), reason });
    if p.world_size < 1 {
        return invalid("world_size", format!("the world size is at least 1, got {}", p.world_size));
    }
    if p.rank < 0 || p.rank >= p.world_size {
        return invalid("rank", format!("a rank is from 0 to world_size - 1 ({}), got {}", p.world_size - 1, p.rank));
    }
    if p.node_count < 1 {
        return invalid("node_count", format!("the node count is at least 1, got {}", p.node_count));
    }
    if p.node_rank < 0 || p.node_rank >= p.node_count {
        return invalid(
            "node_rank",
            format!("a node rank is from 0 to node_count - 1 ({}), got {}", p.node_count - 1, p.node_rank),
        );
    }
    if p.local_rank < 0 {
        return invalid("local_rank", format!("a local rank is at least 0, got {}", p.local_rank));
    }
    if let Some(node) = &p.node {
        if !(0..=MAX_NODE_GPUS).contains(&node.gpus) {
            return invalid("node.gpus", format!("a node has 0 to {MAX_NODE_GPUS} GPUs, got {}", node.gpus));
        }
        if node.usd_per_hour.is_some_and(|u| !u.is_finite() || !(0.0..=MAX_NODE_USD_PER_HOUR).contains(&u)) {
            return invalid(
                "node.usd_per_hour",
                format!("a node's price is a finite number of dollars from 0 to {MAX_NODE_USD_PER_HOUR} an hour"),
            );
        }
    }
    Ok(())
}

/// The worst way a process ended, for its attempt: a failure outranks a preemption, which
/// outranks a kill, which outranks finishing.
fn outcome_rank(status: &str) -> u8 {
    match status {
        "failed" => 4,
        "preempted" => 3,
        "killed" => 2,
        "lost" => 1,
        _ => 0,
    }
}

/// Ends attempt `number`: processes still running end `lost` at their last heartbeat; the
/// attempt ends as its worst process did (`status` overrides, for a run finished as a whole),
/// and `ended_by` says which process decided it and why.
fn close_attempt(tx: &dyn Db, run: &str, number: i64, status: Option<(&str, i64)>) -> Result<()> {
    match status {
        Some((s, end)) => tx.exec(
            "UPDATE run_processes SET status = ?3, end_ms = ?4 WHERE run_id = ?1 AND attempt = ?2 AND end_ms IS NULL",
            vals![run, number, s, end],
        )?,
        None => tx.exec(
            "UPDATE run_processes SET status = 'lost', end_ms = seen_ms, reason = COALESCE(reason, ?3)
             WHERE run_id = ?1 AND attempt = ?2 AND end_ms IS NULL",
            vals![run, number, liveness::silence_reason()],
        )?,
    };
    let rows = tx.rows(
        "SELECT status, end_ms, rank, reason FROM run_processes WHERE run_id = ?1 AND attempt = ?2 ORDER BY end_ms, rank",
        vals![run, number],
    )?;
    let mut worst = status.map_or("finished", |(s, _)| s).to_owned();
    let mut end = status.map(|(_, e)| e);
    let mut ended_by = status.map(|(s, _)| format!("the run was ended {s} as a whole"));
    for r in &rows {
        let (s, e, rank, why): (String, Option<i64>, i64, Option<String>) =
            (r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?);
        if status.is_none() && outcome_rank(&s) > outcome_rank(&worst) {
            ended_by = Some(format!("rank {rank} {s}{}", why.map(|w| format!(": {w}")).unwrap_or_default()));
            worst = s;
        }
        end = end.max(e);
    }
    if rows.is_empty() && status.is_none() {
        worst = "lost".into();
        ended_by = Some(liveness::silence_reason());
    }
    if worst == "finished" && status.is_none() {
        ended_by = Some("every process finished".into());
    }
    // Its last checkpoint is kept as it was: the work it lost does not grow when retention later
    // deletes that checkpoint.
    let last_checkpoint = "FROM checkpoints c WHERE c.run_id = ?1 AND c.created_ms >= run_attempts.start_ms
        AND c.created_ms <= ?4 ORDER BY c.created_ms DESC, c.step DESC LIMIT 1";
    tx.exec(
        &format!(
            "UPDATE run_attempts SET status = ?3, end_ms = ?4, ended_by = ?5, checkpoint_fixed = 1,
                checkpoint_step = (SELECT c.step {last_checkpoint}),
                checkpoint_ms = (SELECT c.created_ms {last_checkpoint})
             WHERE run_id = ?1 AND number = ?2"
        ),
        vals![run, number, worst, end.unwrap_or_else(now_ms), ended_by],
    )?;
    Ok(())
}

/// A sweep trial its sweep asked to stop (pruned) and that then ended on that signal (`killed`,
/// or `preempted` on a spot instance) was pruned: no failure, no lost work.
fn pruned_by_its_sweep(tx: &dyn Db, run: &str, number: i64) -> Result<()> {
    let reason: Option<String> = tx
        .row(
            "SELECT t.stop_reason FROM sweep_trials t JOIN run_attempts a ON a.run_id = t.run_id
             WHERE t.run_id = ?1 AND a.number = ?2 AND t.stop_reason <> '' AND a.status IN ('killed', 'preempted')",
            vals![run, number],
        )?
        .map(|r| r.get(0))
        .transpose()?;
    if let Some(reason) = reason {
        tx.exec(
            "UPDATE run_attempts SET status = 'pruned', ended_by = ?3 WHERE run_id = ?1 AND number = ?2",
            vals![run, number, format!("pruned by its sweep: {reason}")],
        )?;
    }
    Ok(())
}

/// The launcher started the job again (another restart count, cluster or zone): an earlier
/// attempt that ended `killed` (SIGTERM with nothing else to go on) or `lost` was preempted.
fn relaunched(tx: &dyn Db, run: &str, earlier: &Current, key: &str) -> Result<()> {
    let status: Option<String> = tx
        .row("SELECT status FROM run_attempts WHERE run_id = ?1 AND number = ?2", vals![run, earlier.number])?
        .map(|r| r.get(0))
        .transpose()?;
    if !matches!(status.as_deref(), Some("killed" | "lost")) {
        return Ok(());
    }
    let changed: Vec<String> = earlier
        .key
        .split('|')
        .zip(key.split('|'))
        .filter(|(before, after)| before != after)
        .map(|(before, after)| format!("{before} -> {after}"))
        .collect();
    let evidence = format!(
        "preempted: its launcher started the job again ({}) after it ended {}",
        changed.join(", "),
        status.unwrap_or_default()
    );
    tx.exec(
        "UPDATE run_attempts SET status = 'preempted', ended_by = ?3 WHERE run_id = ?1 AND number = ?2",
        vals![run, earlier.number, evidence],
    )?;
    Ok(())
}

/// The attempt a report names, or for 0 the latest attempt its rank joined.
fn attempt_of(tx: &dyn Db, run: &str, report: &ProcessReport) -> Result<Option<i64>> {
    if report.attempt > 0 {
        return Ok(Some(report.attempt));
    }
    Ok(tx
        .row("SELECT MAX(attempt) FROM run_processes WHERE run_id = ?1 AND rank = ?2", vals![run, report.rank])?
        .map(|r| r.get::<Option<i64>>(0))
        .transpose()?
        .flatten())
}

impl MetaStore {
    /// Records a process's heartbeat; answers the job's latest attempt, and with `figures` the
    /// job's figures now (rank 0 continues the cost series from them; other ranks need none).
    pub fn process_heartbeat(
        &self,
        run: &RunId,
        report: &ProcessReport,
        figures: bool,
    ) -> Result<(Beat, Option<JobFigures>)> {
        let latest = self.in_run_tx(run, |tx| {
            let attempt = attempt_of(tx, run.as_str(), report)?.unwrap_or(0);
            let attempt = liveness::speaks_again(tx, run.as_str(), attempt, report.rank)?;
            let changed = tx.exec(
                "UPDATE run_processes SET seen_ms = ?4,
                    first_step = CASE WHEN first_step IS NULL OR ?5 < first_step THEN ?5 ELSE first_step END,
                    last_step = CASE WHEN last_step IS NULL OR ?6 > last_step THEN ?6 ELSE last_step END
                 WHERE run_id = ?1 AND attempt = ?2 AND rank = ?3",
                vals![run.as_str(), attempt, report.rank, heard_at(report), report.first_step, report.last_step],
            )?;
            if changed == 0 {
                return Err(not_found(format!("rank {} of attempt {} of run {run}", report.rank, report.attempt)));
            }
            Ok(Beat { yours: attempt, latest: current_attempt(tx, run.as_str())?.map_or(attempt, |a| a.number) })
        })?;
        let figures = if figures { self.job(run)?.map(|(figures, _)| figures) } else { None };
        Ok((latest, figures))
    }

    /// Ends one process of the run. When every rank of its attempt has ended, the attempt ends
    /// as its worst process did, and so does the run if that attempt is its latest. Answers
    /// whether the run ended.
    pub fn end_process(
        &self,
        run: &RunId,
        report: &ProcessReport,
        status: RunStatus,
        end_ms: Option<i64>,
    ) -> Result<bool> {
        self.in_run_tx(run, |tx| {
            lock_run(tx, run.as_str())?;
            let end = end_ms.unwrap_or_else(now_ms);
            let Some(attempt) = attempt_of(tx, run.as_str(), report)? else {
                // A process that never joined (its run came from elsewhere) ends the run as a whole.
                finish_whole_run(tx, run.as_str(), status, end)?;
                return Ok(true);
            };
            let attempt = liveness::speaks_again(tx, run.as_str(), attempt, report.rank)?;
            let report = &ProcessReport { attempt, ..report.clone() };
            let changed = tx.exec(
                "UPDATE run_processes SET status = ?4, end_ms = ?5, seen_ms = ?5, reason = ?6, last_lines = ?7,
                    first_step = CASE WHEN first_step IS NULL OR ?8 < first_step THEN ?8 ELSE first_step END,
                    last_step = CASE WHEN last_step IS NULL OR ?9 > last_step THEN ?9 ELSE last_step END
                 WHERE run_id = ?1 AND attempt = ?2 AND rank = ?3",
                vals![
                    run.as_str(),
                    report.attempt,
                    report.rank,
                    status.as_str(),
                    end,
                    report.reason.as_deref(),
                    report.last_lines.as_deref(),
                    report.first_step,
                    report.last_step
                ],
            )?;
            if changed == 0 {
                finish_whole_run(tx, run.as_str(), status, end)?;
                return Ok(true);
            }
            let Some(current) = current_attempt(tx, run.as_str())? else { return Ok(false) };
            let head = tx
                .row(
                    "SELECT a.status, a.world_size,
                        (SELECT COUNT(*) FROM run_processes p WHERE p.run_id = a.run_id AND p.attempt = a.number AND p.end_ms IS NOT NULL)
                     FROM run_attempts a WHERE a.run_id = ?1 AND a.number = ?2",
                    vals![run.as_str(), report.attempt],
                )?
                .ok_or_else(|| not_found(format!("attempt {} of run {run}", report.attempt)))?;
            let (attempt_status, world, ended): (String, i64, i64) = (head.get(0)?, head.get(1)?, head.get(2)?);
            if attempt_status != "running" || ended < world {
                return Ok(false);
            }
            close_attempt(tx, run.as_str(), report.attempt, None)?;
            pruned_by_its_sweep(tx, run.as_str(), report.attempt)?;
            write_job_row(tx, run.as_str())?;
            if current.number != report.attempt {
                return Ok(false);
            }
            let (final_status, final_end): (String, Option<i64>) = tx
                .row("SELECT status, end_ms FROM run_attempts WHERE run_id = ?1 AND number = ?2", vals![run.as_str(), report.attempt])?
                .map(|r| Ok::<_, Error>((r.get(0)?, r.get(1)?)))
                .transpose()?
                .unwrap_or(("finished".into(), None));
            tx.exec(
                "UPDATE runs SET status = ?2, end_ms = ?3 WHERE id = ?1",
                vals![run.as_str(), final_status, final_end.unwrap_or(end)],
            )?;
            Ok(true)
        })
    }

    /// The run's job: its figures and attempts (oldest first); None for a run no process joined.
    pub fn job(&self, run: &RunId) -> Result<Option<(JobFigures, Vec<AttemptFigures>)>> {
        self.snapshot(|db| job_in(db, run.as_str(), now_ms()))
    }

    /// The job rows of several runs, as lists show them.
    pub fn job_rows(&self, runs: &[&str]) -> Result<BTreeMap<String, JobRow>> {
        if runs.is_empty() {
            return Ok(BTreeMap::new());
        }
        self.read(|db| {
            let marks = (1..=runs.len()).map(|i| format!("?{i}")).collect::<Vec<_>>().join(", ");
            let params: Vec<crate::db::Value> = runs.iter().map(|r| crate::db::Value::from(*r)).collect();
            let rows = db.rows(
                &format!(
                    "SELECT run_id, launcher, job_id, world_size, node_count, attempts, gpus, lost_usd, lost_gpu_hours, steps_replayed,
                        cost_usd, usd_per_hour, cost_at_ms, unpriced_nodes
                     FROM run_jobs WHERE run_id IN ({marks})"
                ),
                &params,
            )?;
            rows.iter()
                .map(|r| {
                    Ok((
                        r.get(0)?,
                        JobRow {
                            launcher: r.get(1)?,
                            job_id: r.get(2)?,
                            world_size: r.get(3)?,
                            node_count: r.get(4)?,
                            attempts: r.get(5)?,
                            gpus: r.get(6)?,
                            lost_usd: r.get(7)?,
                            lost_gpu_hours: r.get(8)?,
                            steps_replayed: r.get(9)?,
                            cost: match (r.get(10)?, r.get(11)?, r.get(12)?, r.get(13)?) {
                                (Some(cost_usd), Some(usd_per_hour), Some(at_ms), Some(unpriced_nodes)) => {
                                    Some(JobCost { cost_usd, usd_per_hour, at_ms, unpriced_nodes })
                                }
                                _ => None,
                            },
                        },
                    ))
                })
                .collect()
        })
    }
}

/// What a heartbeat answers: the attempt the sender is in now (another than the one it named
/// when its attempt had ended `lost` and it spoke again) and the job's latest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Beat {
    pub yours: i64,
    pub latest: i64,
}

/// A run's job in one row, as lists and search see it.
#[derive(Debug, Clone, PartialEq)]
pub struct JobRow {
    pub launcher: String,
    pub job_id: Option<String>,
    pub world_size: i64,
    pub node_count: i64,
    pub attempts: i64,
    pub gpus: i64,
    pub lost_usd: f64,
    pub lost_gpu_hours: f64,
    pub steps_replayed: i64,
    /// What it cost when the row was written (None for a row written before rows kept it).
    pub cost: Option<JobCost>,
}

/// A job's cost as its row keeps it: what it cost at `at_ms`, and what its running attempt
/// costs an hour from then (0 once it ended), so a list shows the job's figure at any time.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct JobCost {
    pub cost_usd: f64,
    pub usd_per_hour: f64,
    pub at_ms: i64,
    /// Nodes with no price: their cost is not in `cost_usd`.
    pub unpriced_nodes: i64,
}

impl JobCost {
    /// What the job has cost by `now_ms`.
    pub fn at(&self, now_ms: i64) -> f64 {
        self.cost_usd + self.usd_per_hour * figures::hours(self.at_ms, now_ms)
    }
}

/// Rewrites the run's row in `run_jobs` from its attempts.
fn write_job_row(tx: &dyn Db, run: &str) -> Result<()> {
    let now = now_ms();
    let Some((job, _)) = job_in(tx, run, now)? else { return Ok(()) };
    tx.exec("DELETE FROM run_jobs WHERE run_id = ?1", vals![run])?;
    tx.exec(
        "INSERT INTO run_jobs (run_id, launcher, job_id, world_size, node_count, attempts, gpus, lost_usd, lost_gpu_hours, steps_replayed,
             cost_usd, usd_per_hour, cost_at_ms, unpriced_nodes)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)",
        vals![
            run,
            job.launcher,
            job.job_id,
            job.world_size,
            job.node_count,
            job.attempts,
            job.gpus,
            job.lost_usd,
            job.lost_gpu_hours,
            job.steps_replayed,
            job.cost_usd,
            job.usd_per_hour,
            now,
            job.unpriced_nodes
        ],
    )?;
    Ok(())
}

/// The end of a process's span: its end, else its last heartbeat when that is old (it is gone),
/// else now.
fn span_end(end_ms: Option<i64>, seen_ms: i64, now: i64) -> i64 {
    match end_ms {
        Some(end) => end,
        None if seen_ms < now - lost_after_ms() => seen_ms,
        None => now,
    }
}

pub(crate) fn job_in(db: &dyn Db, run: &str, now: i64) -> Result<Option<(JobFigures, Vec<AttemptFigures>)>> {
    let attempt_rows = db.rows(
        "SELECT number, status, start_ms, end_ms, launcher, job_id, world_size, node_count, cloud, region, zone,
            instance_type, cluster, spot, submitted_ms, ended_by, checkpoint_fixed, checkpoint_step, checkpoint_ms
         FROM run_attempts WHERE run_id = ?1 ORDER BY number",
        vals![run],
    )?;
    if attempt_rows.is_empty() {
        return Ok(None);
    }
    let process_rows = db.rows(
        "SELECT attempt, node_rank, host, start_ms, seen_ms, end_ms, first_step, last_step, status, last_lines,
            rank, local_rank, pid, reason, context
         FROM run_processes WHERE run_id = ?1 ORDER BY attempt, rank",
        vals![run],
    )?;
    let node_rows = db.rows(
        "SELECT attempt, node_rank, host, gpus, gpu_names, driver, usd_per_hour, price_source, gpus_source,
            on_demand_usd_per_hour
         FROM run_nodes WHERE run_id = ?1 ORDER BY attempt, node_rank",
        vals![run],
    )?;
    let checkpoints: Vec<CheckpointMark> = db
        .rows("SELECT step, created_ms FROM checkpoints WHERE run_id = ?1", vals![run])?
        .iter()
        .map(|r| Ok(CheckpointMark { step: r.get(0)?, created_ms: r.get(1)? }))
        .collect::<Result<_>>()?;
    let mut attempts = Vec::with_capacity(attempt_rows.len());
    let mut earlier_last_step: Option<i64> = None;
    for r in &attempt_rows {
        let mut a = attempt_from_row(r)?;
        let mine: Vec<&Row> = process_rows.iter().filter(|p| p.get::<i64>(0).ok() == Some(a.number)).collect();
        a.ranks = mine.len() as i64;
        let mut first_failure: Option<i64> = None;
        // Spans of each node from its processes.
        let mut spans: BTreeMap<i64, (String, i64, i64, i64)> = BTreeMap::new();
        for p in &mine {
            let (node, host, start, seen, end): (i64, String, i64, i64, Option<i64>) =
                (p.get(1)?, p.get(2)?, p.get(3)?, p.get(4)?, p.get(5)?);
            let (first, last, status, lines): (Option<i64>, Option<i64>, String, Option<String>) =
                (p.get(6)?, p.get(7)?, p.get(8)?, p.get(9)?);
            let stop = span_end(end, seen, now);
            let span = spans.entry(node).or_insert((host, start, stop, 0));
            span.1 = span.1.min(start);
            span.2 = span.2.max(stop);
            span.3 += 1;
            a.first_step = match (a.first_step, first) {
                (Some(x), Some(y)) => Some(x.min(y)),
                (x, y) => x.or(y),
            };
            a.last_step = a.last_step.max(last);
            // The first rank to fail, by its end (the lowest rank of a tie), names the attempt's
            // reason: in DDP the other ranks' collectives fail after it.
            let failed_at = end.unwrap_or(i64::MAX);
            if status == "failed" && first_failure.is_none_or(|f| failed_at < f) {
                let (rank, why): (i64, Option<String>) = (p.get(10)?, p.get(13)?);
                a.reason = Some(format!("rank {rank} failed{}", why.map(|w| format!(": {w}")).unwrap_or_default()));
                a.last_lines = lines;
                first_failure = Some(failed_at);
            }
            a.processes.push(ProcessFigures {
                rank: p.get(10)?,
                local_rank: p.get(11)?,
                node_rank: node,
                host: p.get(2)?,
                pid: p.get(12)?,
                status,
                start_ms: start,
                seen_ms: seen,
                end_ms: end,
                reason: p.get(13)?,
                context: p.get(14)?,
            });
        }
        for (node_rank, (host, start, stop, processes)) in spans {
            let info = node_rows
                .iter()
                .find(|n| n.get::<i64>(0).ok() == Some(a.number) && n.get::<i64>(1).ok() == Some(node_rank));
            let node = node_figures(node_rank, host, start, stop, processes, info)?;
            a.gpus += node.gpus;
            a.gpu_hours += node.gpu_hours;
            let on_demand = node.on_demand_usd_per_hour.map(|usd| usd * figures::hours(node.start_ms, node.end_ms));
            a.on_demand_usd = a.on_demand_usd.zip(on_demand).map(|(sum, usd)| sum + usd);
            match node.cost_usd {
                Some(cost) => {
                    a.cost_usd += cost;
                    a.usd_per_hour = Some(a.usd_per_hour.unwrap_or(0.0) + node.usd_per_hour.unwrap_or(0.0));
                }
                None => a.unpriced_nodes += 1,
            }
            if let Some(source) = &node.price_source {
                if !a.price_sources.contains(source) {
                    a.price_sources.push(source.clone());
                }
            }
            a.nodes.push(node);
        }
        figures::settle_attempt(&mut a, earlier_last_step, &checkpoints);
        earlier_last_step = earlier_last_step.max(a.last_step);
        attempts.push(a);
    }
    Ok(figures::job_totals(&attempts, now).map(|job| (job, attempts)))
}

fn node_figures(
    node_rank: i64,
    host: String,
    start_ms: i64,
    end_ms: i64,
    processes: i64,
    info: Option<&Row>,
) -> Result<NodeFigures> {
    let (gpus, gpu_names, driver, usd_per_hour, price_source, gpus_source, on_demand_usd_per_hour) = match info {
        Some(n) => {
            let names: String = n.get(4)?;
            let names = serde_json::from_str(&names).unwrap_or_default();
            (n.get(3)?, names, n.get(5)?, n.get(6)?, n.get(7)?, n.get(8)?, n.get(9)?)
        }
        None => (0, Vec::new(), None, None, None, None, None),
    };
    let hours = figures::hours(start_ms, end_ms);
    Ok(NodeFigures {
        node_rank,
        host,
        gpus,
        gpu_names,
        driver,
        usd_per_hour,
        on_demand_usd_per_hour,
        price_source,
        gpus_source,
        start_ms,
        end_ms,
        processes,
        cost_usd: usd_per_hour.map(|p: f64| p * hours),
        gpu_hours: hours * gpus as f64,
    })
}

fn attempt_from_row(r: &Row) -> Result<AttemptFigures> {
    let spot: Option<i64> = r.get(13)?;
    Ok(AttemptFigures {
        number: r.get(0)?,
        status: r.get(1)?,
        start_ms: r.get(2)?,
        end_ms: r.get(3)?,
        launcher: r.get(4)?,
        job_id: r.get(5)?,
        world_size: r.get(6)?,
        node_count: r.get(7)?,
        ranks: 0,
        cloud: r.get(8)?,
        region: r.get(9)?,
        zone: r.get(10)?,
        instance_type: r.get(11)?,
        cluster: r.get(12)?,
        spot: spot.map(|s| s != 0),
        submitted_ms: r.get(14)?,
        ended_by: r.get(15)?,
        checkpoint_at_end: match (r.get::<Option<i64>>(16)?, r.get::<Option<i64>>(17)?, r.get::<Option<i64>>(18)?) {
            (Some(1), Some(step), Some(created_ms)) => Some(Some(CheckpointMark { step, created_ms })),
            (Some(1), _, _) => Some(None),
            _ => None,
        },
        reason: None,
        last_lines: None,
        gpus: 0,
        usd_per_hour: None,
        price_sources: Vec::new(),
        cost_usd: 0.0,
        on_demand_usd: Some(0.0),
        unpriced_nodes: 0,
        gpu_hours: 0.0,
        first_step: None,
        last_step: None,
        last_checkpoint_step: None,
        last_checkpoint_ms: None,
        steps_replayed: 0,
        lost_usd: 0.0,
        lost_gpu_hours: 0.0,
        lost_steps: 0,
        nodes: Vec::new(),
        processes: Vec::new(),
    })
}

fn finish_whole_run(tx: &dyn Db, run: &str, status: RunStatus, end: i64) -> Result<()> {
    tx.exec("UPDATE runs SET status = ?2, end_ms = ?3 WHERE id = ?1", vals![run, status.as_str(), end])?;
    finish_running_attempt(tx, run, status.as_str(), end)
}

/// A run finished as a whole (not by its processes): its running attempt ends with it.
pub(crate) fn finish_running_attempt(tx: &dyn Db, run: &str, status: &str, end_ms: i64) -> Result<()> {
    if let Some(a) = current_attempt(tx, run)?.filter(|a| a.status == "running") {
        close_attempt(tx, run, a.number, Some((status, end_ms)))?;
        write_job_row(tx, run)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests;
