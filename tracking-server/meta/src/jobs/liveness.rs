//! Liveness, decided by the server: a running attempt none of whose processes sent a heartbeat
//! within the bound ends `lost` at their last heartbeat, and its run with it. A process of such
//! an attempt that speaks again (a heartbeat, its end) goes on in a new attempt of the job.

use super::{close_attempt, current_attempt, lock_run, write_job_row};
use crate::db::{vals, Db};
use crate::{now_ms, MetaStore, Result};
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;
use trainlog_schema::RunId;

/// Three heartbeats of the SDK (one every 30 s) missed in a row.
pub const DEFAULT_LOST_AFTER_MS: i64 = 90_000;

static LOST_AFTER_MS: AtomicI64 = AtomicI64::new(DEFAULT_LOST_AFTER_MS);

/// After this long without a heartbeat from any of its processes, an attempt is gone: the
/// liveness check ends it `lost`, the next process to join starts a new attempt, and the cost
/// of its nodes stops at their last heartbeat.
pub fn lost_after_ms() -> i64 {
    LOST_AFTER_MS.load(Ordering::Relaxed)
}

/// Sets the bound (`trainlog server --lost-after-s`); at least one second.
pub fn set_lost_after_ms(ms: i64) {
    LOST_AFTER_MS.store(ms.max(1_000), Ordering::Relaxed);
}

/// How often the server looks for silent attempts: a third of the bound, at most every 30 s.
pub fn check_every() -> Duration {
    Duration::from_millis((lost_after_ms() / 3).clamp(250, 30_000) as u64)
}

/// Why a process that stopped speaking ended `lost`.
pub(super) fn silence_reason() -> String {
    format!("no heartbeat from any process of its attempt for {} s", lost_after_ms() as f64 / 1000.0)
}

/// The most attempts one round of the check ends; the rest wait for the next round.
pub const CHECK_LIMIT: i64 = 1_000;

impl MetaStore {
    /// Ends `lost` every running attempt (up to [`CHECK_LIMIT`]) whose processes were all silent
    /// for the bound; a run whose latest attempt that is ends as the attempt did (`lost`, or
    /// `failed` when a rank had failed before the others fell silent). Answers the runs ended.
    pub fn close_silent_attempts(&self) -> Result<Vec<RunId>> {
        let since = now_ms() - lost_after_ms();
        let silent = self.read(|db| {
            db.rows(
                "SELECT a.run_id, a.number FROM run_attempts a
                 WHERE a.status = 'running' AND NOT EXISTS (
                     SELECT 1 FROM run_processes p WHERE p.run_id = a.run_id AND p.attempt = a.number AND p.seen_ms >= ?1)
                 LIMIT ?2",
                vals![since, CHECK_LIMIT],
            )?
            .iter()
            .map(|r| Ok((r.get::<String>(0)?, r.get::<i64>(1)?)))
            .collect::<Result<Vec<_>>>()
        })?;
        let mut ended = Vec::new();
        for (run, number) in silent {
            let Ok(id) = RunId::parse("run_id", &run) else { continue };
            let closed = self.in_kept_run_tx(&id, |tx| close_if_silent(tx, id.as_str(), number, since));
            match closed {
                Ok(true) => ended.push(id),
                Ok(false) => {}
                // Deleted for good meanwhile.
                Err(crate::Error::NotFound { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(ended)
    }
}

/// Ends attempt `number` `lost` if it still runs and no process spoke since `since`; the run
/// ends with it when it is the latest. Answers whether the run ended.
fn close_if_silent(tx: &dyn Db, run: &str, number: i64, since: i64) -> Result<bool> {
    lock_run(tx, run)?;
    let still = tx.exists(
        "SELECT 1 FROM run_attempts a WHERE a.run_id = ?1 AND a.number = ?2 AND a.status = 'running' AND NOT EXISTS (
             SELECT 1 FROM run_processes p WHERE p.run_id = a.run_id AND p.attempt = a.number AND p.seen_ms >= ?3)",
        vals![run, number, since],
    )?;
    if !still {
        return Ok(false);
    }
    close_attempt(tx, run, number, None)?;
    write_job_row(tx, run)?;
    if current_attempt(tx, run)?.is_none_or(|latest| latest.number != number) {
        return Ok(false);
    }
    let ended = tx.exec(
        "UPDATE runs SET status = (SELECT status FROM run_attempts WHERE run_id = ?1 AND number = ?2),
            end_ms = (SELECT end_ms FROM run_attempts WHERE run_id = ?1 AND number = ?2)
         WHERE id = ?1 AND status = 'running'",
        vals![run, number],
    )?;
    Ok(ended > 0)
}

/// A process of attempt `attempt` speaks (a heartbeat or its end). When the liveness check had
/// ended it `lost` with that attempt, and the job has not started again since, the job goes on:
/// a new attempt like the lost one (the first process to speak opens it, the others join it) and
/// the run runs again. Answers the attempt the process is in now.
pub(super) fn speaks_again(tx: &dyn Db, run: &str, attempt: i64, rank: i64) -> Result<i64> {
    if attempt <= 0 {
        return Ok(attempt);
    }
    let lost = tx.exists(
        "SELECT 1 FROM run_attempts a JOIN run_processes p ON p.run_id = a.run_id AND p.attempt = a.number
         WHERE a.run_id = ?1 AND a.number = ?2 AND p.rank = ?3 AND a.status = 'lost' AND p.status = 'lost'",
        vals![run, attempt, rank],
    )?;
    if !lost {
        return Ok(attempt);
    }
    lock_run(tx, run)?;
    let Some(latest) = current_attempt(tx, run)? else { return Ok(attempt) };
    let now = now_ms();
    let goes_on = if latest.number == attempt {
        let number = attempt + 1;
        tx.exec(
            "INSERT INTO run_attempts (run_id, number, key, status, start_ms, launcher, job_id, world_size, node_count,
                cloud, region, zone, instance_type, cluster, spot, submitted_ms)
             SELECT run_id, ?3, key, 'running', ?4, launcher, job_id, world_size, node_count,
                cloud, region, zone, instance_type, cluster, spot, submitted_ms
             FROM run_attempts WHERE run_id = ?1 AND number = ?2",
            vals![run, attempt, number, now],
        )?;
        tx.exec("UPDATE runs SET status = 'running', end_ms = NULL WHERE id = ?1", vals![run])?;
        number
    } else if latest.status == "running" && latest.key == attempt_key_of(tx, run, attempt)? {
        latest.number
    } else {
        // The job started again otherwise meanwhile: this process belongs to the past.
        return Ok(attempt);
    };
    tx.exec(
        "INSERT INTO run_processes (run_id, attempt, rank, local_rank, node_rank, host, pid, status, start_ms, seen_ms, context)
         SELECT run_id, ?3, rank, local_rank, node_rank, host, pid, 'running', ?4, ?4, context
         FROM run_processes p WHERE run_id = ?1 AND attempt = ?2 AND rank = ?5
           AND NOT EXISTS (SELECT 1 FROM run_processes q WHERE q.run_id = ?1 AND q.attempt = ?3 AND q.rank = ?5)",
        vals![run, attempt, goes_on, now, rank],
    )?;
    tx.exec(
        "INSERT INTO run_nodes (run_id, attempt, node_rank, host, gpus, gpu_names, driver, usd_per_hour, price_source, gpus_source)
         SELECT n.run_id, ?3, n.node_rank, n.host, n.gpus, n.gpu_names, n.driver, n.usd_per_hour, n.price_source, n.gpus_source
         FROM run_nodes n JOIN run_processes p ON p.run_id = n.run_id AND p.attempt = n.attempt AND p.node_rank = n.node_rank
         WHERE n.run_id = ?1 AND n.attempt = ?2 AND p.rank = ?4
           AND NOT EXISTS (SELECT 1 FROM run_nodes m WHERE m.run_id = ?1 AND m.attempt = ?3 AND m.node_rank = n.node_rank)",
        vals![run, attempt, goes_on, rank],
    )?;
    write_job_row(tx, run)?;
    Ok(goes_on)
}

fn attempt_key_of(tx: &dyn Db, run: &str, number: i64) -> Result<String> {
    Ok(tx
        .row("SELECT key FROM run_attempts WHERE run_id = ?1 AND number = ?2", vals![run, number])?
        .map(|r| r.get(0))
        .transpose()?
        .unwrap_or_default())
}
