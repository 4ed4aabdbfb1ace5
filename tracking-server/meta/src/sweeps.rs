//! Sweeps and their trials: the state a sweep keeps between agents and server restarts.

use crate::db::{vals, Db, Row};
use crate::runs::{create_run_in, ensure_project_in, one, NewRun};
use crate::{not_found, now_ms, Actor, Error, MetaStore, Result, Role};
use serde_json::Value;
use trainlog_schema::{ProjectName, RunId};

#[derive(Debug, Clone, PartialEq)]
pub struct SweepRow {
    pub id: String,
    pub project_id: i64,
    pub project: String,
    pub name: String,
    /// The sweep file as given.
    pub config: String,
    /// running, stopped or finished.
    pub state: String,
    /// Why a sweep finished: run_cap, budget, grid_exhausted; empty while it runs.
    pub ended_reason: String,
    pub created_ms: i64,
    pub updated_ms: i64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct TrialRow {
    pub sweep_id: String,
    pub index: i64,
    pub run_id: String,
    pub params: Value,
    /// running, finished, failed, pruned, preempted (waiting to be started again) or lost
    /// (preempted too many times).
    pub state: String,
    pub attempts: i64,
    pub agent: String,
    pub slot: String,
    /// GPUs the trial holds; a share of a GPU counts as a fraction.
    pub gpus: f64,
    pub bracket: Option<i64>,
    pub exit_code: Option<i64>,
    pub output_tail: String,
    pub loss: Option<f64>,
    /// Set when the sweep decided to prune the trial; the agent and the trial read it.
    pub stop_reason: String,
    pub created_ms: i64,
    pub started_ms: i64,
    pub ended_ms: Option<i64>,
    pub heartbeat_ms: i64,
    /// Time spent running over every attempt, in milliseconds, the current one excluded.
    pub run_ms: i64,
}

impl TrialRow {
    pub fn is_active(&self) -> bool {
        self.state == "running"
    }

    /// Time spent running over every attempt, up to `now` for a running one.
    pub fn elapsed_ms(&self, now: i64) -> i64 {
        self.run_ms + if self.is_active() { (now - self.started_ms).max(0) } else { 0 }
    }
}

/// Where a claimed trial runs.
#[derive(Debug, Clone, Default)]
pub struct Placement {
    pub agent: String,
    pub slot: String,
    pub gpus: f64,
}

/// How a trial attempt ended.
#[derive(Debug, Clone)]
pub struct TrialEnd {
    pub state: String,
    pub exit_code: Option<i64>,
    pub output_tail: String,
    pub loss: Option<f64>,
}

const SWEEP_COLUMNS: &str =
    "s.id, s.project_id, p.name, s.name, s.config, s.state, s.ended_reason, s.created_ms, s.updated_ms";
const TRIAL_COLUMNS: &str =
    "sweep_id, trial_index, run_id, params, state, attempts, agent, slot, gpus, bracket, exit_code, \
     output_tail, loss, stop_reason, created_ms, started_ms, ended_ms, heartbeat_ms, run_ms";

fn sweep_from_row(r: &Row) -> Result<SweepRow> {
    Ok(SweepRow {
        id: r.get(0)?,
        project_id: r.get(1)?,
        project: r.get(2)?,
        name: r.get(3)?,
        config: r.get(4)?,
        state: r.get(5)?,
        ended_reason: r.get(6)?,
        created_ms: r.get(7)?,
        updated_ms: r.get(8)?,
    })
}

fn trial_from_row(r: &Row) -> Result<TrialRow> {
    let params: String = r.get(3)?;
    Ok(TrialRow {
        sweep_id: r.get(0)?,
        index: r.get(1)?,
        run_id: r.get(2)?,
        params: serde_json::from_str(&params).unwrap_or(Value::Null),
        state: r.get(4)?,
        attempts: r.get(5)?,
        agent: r.get(6)?,
        slot: r.get(7)?,
        gpus: r.get(8)?,
        bracket: r.get(9)?,
        exit_code: r.get(10)?,
        output_tail: r.get(11)?,
        loss: r.get(12)?,
        stop_reason: r.get(13)?,
        created_ms: r.get(14)?,
        started_ms: r.get(15)?,
        ended_ms: r.get(16)?,
        heartbeat_ms: r.get(17)?,
        run_ms: r.get(18)?,
    })
}

fn get_sweep(db: &dyn Db, id: &str) -> Result<SweepRow> {
    let sql = format!("SELECT {SWEEP_COLUMNS} FROM sweeps s JOIN projects p ON p.id = s.project_id WHERE s.id = ?1");
    sweep_from_row(&db.row(&sql, vals![id])?.ok_or_else(|| not_found(format!("sweep {id}")))?)
}

fn get_trial(db: &dyn Db, sweep: &str, index: i64) -> Result<TrialRow> {
    let sql = format!("SELECT {TRIAL_COLUMNS} FROM sweep_trials WHERE sweep_id = ?1 AND trial_index = ?2");
    trial_from_row(
        &db.row(&sql, vals![sweep, index])?.ok_or_else(|| not_found(format!("trial {index} of sweep {sweep}")))?,
    )
}

fn touch(tx: &dyn Db, sweep: &str) -> Result<()> {
    tx.exec("UPDATE sweeps SET updated_ms = ?2 WHERE id = ?1", vals![sweep, now_ms()])?;
    Ok(())
}

impl MetaStore {
    /// Stores a new sweep (creating its project if needed).
    /// Creates a sweep; the actor needs write on its project, or creates the project.
    pub fn create_sweep(
        &self,
        project: &ProjectName,
        name: &str,
        config: &str,
        actor: Option<&Actor>,
    ) -> Result<SweepRow> {
        let id = uuid::Uuid::new_v4().simple().to_string()[..12].to_owned();
        self.write(|tx| {
            let project = ensure_project_in(tx, project.as_str(), actor, Role::Write)?;
            let now = now_ms();
            let name = if name.is_empty() { format!("sweep-{id}") } else { name.to_owned() };
            tx.exec(
                "INSERT INTO sweeps (id, project_id, name, config, state, created_ms, updated_ms)
                 VALUES (?1, ?2, ?3, ?4, 'running', ?5, ?5)",
                vals![&id, project.id, &name, config, now],
            )?;
            Ok(())
        })?;
        self.sweep(&id)
    }

    pub fn sweep(&self, id: &str) -> Result<SweepRow> {
        self.read(|db| get_sweep(db, id))
    }

    /// Sweeps, newest first, of one project or of all.
    pub fn sweeps(&self, project: Option<&ProjectName>) -> Result<Vec<SweepRow>> {
        self.read(|db| {
            let sql = format!(
                "SELECT {SWEEP_COLUMNS} FROM sweeps s JOIN projects p ON p.id = s.project_id
                 WHERE CAST(?1 AS TEXT) IS NULL OR p.name = ?1 ORDER BY s.created_ms DESC, s.id"
            );
            db.rows(&sql, vals![project.map(|p| p.as_str())])?.iter().map(sweep_from_row).collect()
        })
    }

    /// Moves a sweep to `state` (running, stopped, finished) with the reason.
    pub fn set_sweep_state(&self, id: &str, state: &str, reason: &str) -> Result<SweepRow> {
        self.write(|tx| {
            get_sweep(tx, id)?;
            tx.exec(
                "UPDATE sweeps SET state = ?2, ended_reason = ?3, updated_ms = ?4 WHERE id = ?1",
                vals![id, state, reason, now_ms()],
            )?;
            Ok(())
        })?;
        self.sweep(id)
    }

    /// The trials of a sweep in the order they were proposed.
    pub fn trials(&self, sweep: &str) -> Result<Vec<TrialRow>> {
        self.read(|db| {
            get_sweep(db, sweep)?;
            let sql = format!("SELECT {TRIAL_COLUMNS} FROM sweep_trials WHERE sweep_id = ?1 ORDER BY trial_index");
            db.rows(&sql, vals![sweep])?.iter().map(trial_from_row).collect()
        })
    }

    pub fn trial(&self, sweep: &str, index: i64) -> Result<TrialRow> {
        self.read(|db| get_trial(db, sweep, index))
    }

    /// The trial a run belongs to, if any.
    pub fn trial_of_run(&self, run: &RunId) -> Result<Option<TrialRow>> {
        self.read(|db| {
            let sql = format!("SELECT {TRIAL_COLUMNS} FROM sweep_trials WHERE run_id = ?1");
            db.row(&sql, vals![run.as_str()])?.as_ref().map(trial_from_row).transpose()
        })
    }

    /// Creates the trial's run and the trial, running at `placement`, in one transaction.
    /// Fails with a conflict if `index` was taken meanwhile.
    pub fn start_trial(
        &self,
        sweep: &str,
        index: i64,
        run: &NewRun,
        params_json: &Value,
        bracket: Option<i64>,
        placement: &Placement,
    ) -> Result<TrialRow> {
        self.write(|tx| {
            let s = get_sweep(tx, sweep)?;
            if s.state != "running" {
                return Err(Error::Conflict { field: "sweep".into(), reason: format!("sweep {sweep} is {}", s.state) });
            }
            // Trials are numbered from 0 without gaps: a server that proposed from an older count
            // lost a race with another, and proposes again.
            let trials: i64 =
                one(tx.row("SELECT COUNT(*) FROM sweep_trials WHERE sweep_id = ?1", vals![sweep])?, "a count")?
                    .get(0)?;
            if trials != index {
                return Err(Error::Conflict {
                    field: "trial".into(),
                    reason: format!("trial {index} is not the next one: the sweep has {trials}"),
                });
            }
            let (run_id, _, _) = create_run_in(tx, run)?;
            let now = now_ms();
            tx.exec(
                "INSERT INTO sweep_trials (sweep_id, trial_index, run_id, params, state, agent, slot, gpus, bracket,
                   created_ms, started_ms, heartbeat_ms)
                 VALUES (?1, ?2, ?3, ?4, 'running', ?5, ?6, ?7, ?8, ?9, ?9, ?9)",
                vals![
                    sweep,
                    index,
                    run_id.as_str(),
                    params_json.to_string(),
                    &placement.agent,
                    &placement.slot,
                    placement.gpus,
                    bracket,
                    now
                ],
            )?;
            touch(tx, sweep)?;
            Ok(())
        })?;
        self.trial(sweep, index)
    }

    /// Starts a preempted trial again at `placement`: same run, one more attempt.
    pub fn restart_trial(&self, sweep: &str, index: i64, placement: &Placement) -> Result<TrialRow> {
        self.write(|tx| {
            let t = get_trial(tx, sweep, index)?;
            if t.state != "preempted" {
                return Err(Error::Conflict { field: "trial".into(), reason: format!("trial {index} is {}", t.state) });
            }
            let now = now_ms();
            tx.exec(
                "UPDATE sweep_trials SET state = 'running', attempts = attempts + 1, agent = ?3, slot = ?4, gpus = ?5,
                   started_ms = ?6, heartbeat_ms = ?6, ended_ms = NULL, exit_code = NULL, stop_reason = ''
                 WHERE sweep_id = ?1 AND trial_index = ?2",
                vals![sweep, index, &placement.agent, &placement.slot, placement.gpus, now],
            )?;
            tx.exec(
                "UPDATE runs SET status = 'running', end_ms = NULL, updated_ms = ?2 WHERE id = ?1",
                vals![t.run_id, now],
            )?;
            touch(tx, sweep)?;
            Ok(())
        })?;
        self.trial(sweep, index)
    }

    /// Records that the trial's agent still watches its attempt; answers false (and records
    /// nothing) when that attempt is no longer the trial's running one.
    pub fn trial_heartbeat(&self, sweep: &str, index: i64, attempt: i64) -> Result<bool> {
        self.write(|tx| {
            get_trial(tx, sweep, index)?;
            let n = tx.exec(
                "UPDATE sweep_trials SET heartbeat_ms = ?4
                 WHERE sweep_id = ?1 AND trial_index = ?2 AND attempts = ?3 AND state = 'running'",
                vals![sweep, index, attempt, now_ms()],
            )?;
            Ok(n == 1)
        })
    }

    /// Marks a running trial to be pruned; the first reason stays.
    pub fn request_trial_stop(&self, sweep: &str, index: i64, reason: &str) -> Result<()> {
        self.write(|tx| {
            tx.exec(
                "UPDATE sweep_trials SET stop_reason = ?3
                 WHERE sweep_id = ?1 AND trial_index = ?2 AND stop_reason = '' AND state = 'running'",
                vals![sweep, index, reason],
            )?;
            Ok(())
        })
    }

    /// Ends attempt `attempt` of the trial (None: whichever runs). A trial that already ended,
    /// or runs another attempt, is left as it is, so a late report cannot undo a newer state;
    /// answers the trial as stored.
    pub fn end_trial(
        &self,
        sweep: &str,
        index: i64,
        attempt: Option<i64>,
        end: &TrialEnd,
        run_status: &str,
    ) -> Result<TrialRow> {
        self.write(|tx| {
            let t = get_trial(tx, sweep, index)?;
            if t.state != "running" || attempt.is_some_and(|a| a != t.attempts) {
                return Ok(());
            }
            let now = now_ms();
            tx.exec(
                "UPDATE sweep_trials SET state = ?3, exit_code = ?4, output_tail = ?5, loss = COALESCE(?6, loss),
                   ended_ms = ?7, run_ms = run_ms + CASE WHEN ?7 > started_ms THEN ?7 - started_ms ELSE 0 END
                 WHERE sweep_id = ?1 AND trial_index = ?2",
                vals![sweep, index, &end.state, end.exit_code, &end.output_tail, end.loss, now],
            )?;
            tx.exec(
                "UPDATE runs SET status = ?2, end_ms = COALESCE(end_ms, ?3), updated_ms = ?3 WHERE id = ?1",
                vals![&t.run_id, run_status, now],
            )?;
            // A trial process that died without a word leaves its attempt running: it ends with the trial.
            crate::jobs::finish_running_attempt(tx, &t.run_id, run_status, now)?;
            touch(tx, sweep)?;
            Ok(())
        })?;
        self.trial(sweep, index)
    }

    /// Sets a trial's loss (the sweep's metric when the trial ended).
    pub fn set_trial_loss(&self, sweep: &str, index: i64, loss: Option<f64>) -> Result<()> {
        self.write(|tx| {
            tx.exec(
                "UPDATE sweep_trials SET loss = ?3 WHERE sweep_id = ?1 AND trial_index = ?2",
                vals![sweep, index, loss],
            )?;
            Ok(())
        })
    }
}
