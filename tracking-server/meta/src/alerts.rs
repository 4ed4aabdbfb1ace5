//! Alerts, the channels they go to and their deliveries: an alert is recorded once with a
//! delivery per channel of its project, in one transaction, so none is lost when the server
//! stops; deliveries are retried with backoff until sent or given up.

use crate::db::{vals, Db, Row};
use crate::{not_found, now_ms, Error, MetaStore, Result};
use trainlog_schema::RunId;

/// How bad an alert is, as `trainlog.alert(level=...)` says it.
pub const LEVELS: [&str; 3] = ["info", "warn", "error"];

/// What a channel is: the body it is sent and how.
pub const CHANNEL_KINDS: [&str; 4] = ["webhook", "slack", "discord", "email"];

/// Attempts at one delivery before it is given up.
pub const MAX_ATTEMPTS: i64 = 8;

/// The wait after attempt `n` (1-based) failed: 2, 4, 8 ... seconds, at most 10 minutes.
pub fn retry_after_ms(attempts: i64) -> i64 {
    (1_000i64 << attempts.clamp(1, 20)).min(600_000)
}

/// An alert to record.
#[derive(Debug, Clone, Default)]
pub struct NewAlert {
    pub run: Option<RunId>,
    /// The rule that fired, or empty for an alert from code.
    pub rule: String,
    pub level: String,
    pub title: String,
    pub text: String,
    pub step: Option<i64>,
    /// A repeat of this title on this run within this many ms is folded into the earlier alert.
    pub wait_ms: i64,
}

/// An alert as recorded.
#[derive(Debug, Clone, PartialEq)]
pub struct AlertRow {
    pub id: i64,
    pub project_id: i64,
    pub run_id: Option<String>,
    pub rule: String,
    pub level: String,
    pub title: String,
    pub text: String,
    pub step: Option<i64>,
    pub time_ms: i64,
    pub last_ms: i64,
    /// How many times it was raised: 1, and one more for each repeat folded into it.
    pub count: i64,
}

const ALERT_COLUMNS: &str =
    "a.id, a.project_id, a.run_id, a.rule, a.level, a.title, a.text, a.step, a.time_ms, a.last_ms, a.count";

fn alert_row(r: &Row) -> Result<AlertRow> {
    Ok(AlertRow {
        id: r.get(0)?,
        project_id: r.get(1)?,
        run_id: r.get(2)?,
        rule: r.get(3)?,
        level: r.get(4)?,
        title: r.get(5)?,
        text: r.get(6)?,
        step: r.get(7)?,
        time_ms: r.get(8)?,
        last_ms: r.get(9)?,
        count: r.get(10)?,
    })
}

/// A channel to add.
#[derive(Debug, Clone, Default)]
pub struct NewChannel {
    pub kind: String,
    pub target: String,
    pub secret: Option<String>,
    pub allow_private: bool,
    pub created_by: Option<String>,
}

/// A channel as lists show it (never its secret).
#[derive(Debug, Clone, PartialEq)]
pub struct ChannelRow {
    pub id: i64,
    pub project_id: i64,
    pub kind: String,
    pub target: String,
    pub signed: bool,
    pub allow_private: bool,
    pub created_by: Option<String>,
    pub created_ms: i64,
}

/// A delivery due now, with what sending it needs.
#[derive(Debug, Clone)]
pub struct DueDelivery {
    pub id: i64,
    pub attempts: i64,
    pub alert: AlertRow,
    pub project: String,
    pub channel: ChannelRow,
    pub secret: Option<String>,
}

/// A delivery as the project's admins see it.
#[derive(Debug, Clone, PartialEq)]
pub struct DeliveryRow {
    pub id: i64,
    pub alert_id: i64,
    pub title: String,
    /// The rule that raised its alert, or empty for an alert from code.
    pub rule: String,
    pub channel_id: i64,
    pub kind: String,
    pub target: String,
    pub status: String,
    pub attempts: i64,
    pub next_ms: i64,
    pub answer: String,
    pub sent_ms: Option<i64>,
}

/// How an attempt at a delivery went.
#[derive(Debug, Clone)]
pub enum Attempt {
    Sent { answer: String },
    Failed { answer: String },
}

fn channel_row(r: &Row, at: usize) -> Result<ChannelRow> {
    Ok(ChannelRow {
        id: r.get(at)?,
        project_id: r.get(at + 1)?,
        kind: r.get(at + 2)?,
        target: r.get(at + 3)?,
        signed: r.get::<Option<String>>(at + 4)?.is_some_and(|s| !s.is_empty()),
        allow_private: r.get::<i64>(at + 5)? != 0,
        created_by: r.get(at + 6)?,
        created_ms: r.get(at + 7)?,
    })
}

const CHANNEL_COLUMNS: &str =
    "c.id, c.project_id, c.kind, c.target, c.secret, c.allow_private, c.created_by, c.created_ms";

fn check_alert(new: &NewAlert) -> Result<()> {
    if !LEVELS.contains(&new.level.as_str()) {
        return Err(Error::Invalid { field: "level".into(), reason: format!("one of {}", LEVELS.join(", ")) });
    }
    Ok(())
}

/// Marks row `id` of a project's `table` (channels, rules) removed; not found when it has none
/// such still there. The row stays for what refers to it.
pub(crate) fn remove_row(tx: &dyn Db, table: &str, what: &str, project_id: i64, id: i64) -> Result<()> {
    let changed = tx.exec(
        &format!("UPDATE {table} SET deleted = 1 WHERE id = ?1 AND project_id = ?2 AND deleted = 0"),
        vals![id, project_id],
    )?;
    if changed == 0 {
        return Err(not_found(format!("{what} {id} of project {project_id}")));
    }
    Ok(())
}

/// Records `new` in project `project_id`, folding a repeat; answers the alert and whether it was
/// new (a new one has a pending delivery to each of the project's channels).
fn record(tx: &dyn Db, project_id: i64, new: &NewAlert) -> Result<(AlertRow, bool)> {
    let now = now_ms();
    let run = new.run.as_ref().map(RunId::as_str);
    if new.wait_ms > 0 {
        let earlier = tx.row(
            &format!(
                "SELECT {ALERT_COLUMNS} FROM alerts a WHERE a.project_id = ?1 AND a.run_id IS NOT DISTINCT FROM ?2
                 AND a.rule = ?3 AND a.title = ?4 AND a.last_ms >= ?5 ORDER BY a.id DESC LIMIT 1"
            ),
            vals![project_id, run, new.rule.as_str(), new.title.as_str(), now - new.wait_ms],
        )?;
        if let Some(earlier) = earlier {
            let mut folded = alert_row(&earlier)?;
            tx.exec("UPDATE alerts SET count = count + 1, last_ms = ?2 WHERE id = ?1", vals![folded.id, now])?;
            folded.count += 1;
            folded.last_ms = now;
            return Ok((folded, false));
        }
    }
    let id: i64 = tx
        .row(
            "INSERT INTO alerts (project_id, run_id, rule, level, title, text, step, time_ms, last_ms)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?8) RETURNING id",
            vals![
                project_id,
                run,
                new.rule.as_str(),
                new.level.as_str(),
                new.title.as_str(),
                new.text.as_str(),
                new.step,
                now
            ],
        )?
        .ok_or_else(|| Error::Corrupt("an alert's insert answered no id".into()))?
        .get(0)?;
    tx.exec(
        "INSERT INTO alert_deliveries (alert_id, channel_id, next_ms)
         SELECT ?1, c.id, ?3 FROM alert_channels c WHERE c.project_id = ?2 AND c.deleted = 0",
        vals![id, project_id, now],
    )?;
    let alert = AlertRow {
        id,
        project_id,
        run_id: run.map(str::to_owned),
        rule: new.rule.clone(),
        level: new.level.clone(),
        title: new.title.clone(),
        text: new.text.clone(),
        step: new.step,
        time_ms: now,
        last_ms: now,
        count: 1,
    };
    Ok((alert, true))
}

impl MetaStore {
    /// Records an alert of run `run` (its project's), folding a repeat within its wait.
    pub fn record_run_alert(&self, run: &RunId, new: &NewAlert) -> Result<(AlertRow, bool)> {
        check_alert(new)?;
        let new = NewAlert { run: Some(run.clone()), ..new.clone() };
        self.in_run_tx(run, |tx| {
            let project_id: i64 = tx
                .row("SELECT project_id FROM runs WHERE id = ?1", vals![run.as_str()])?
                .ok_or_else(|| not_found(format!("run {run}")))?
                .get(0)?;
            record(tx, project_id, &new)
        })
    }

    /// Records an alert of a project, not of one run (a rule over the project's runs).
    pub fn record_project_alert(&self, project_id: i64, new: &NewAlert) -> Result<(AlertRow, bool)> {
        check_alert(new)?;
        self.write(|tx| record(tx, project_id, new))
    }

    /// A run's alerts, oldest first (at most `limit`).
    pub fn run_alerts(&self, run: &RunId, limit: i64) -> Result<Vec<AlertRow>> {
        self.read(|db| {
            db.rows(
                &format!("SELECT {ALERT_COLUMNS} FROM alerts a WHERE a.run_id = ?1 ORDER BY a.id LIMIT ?2"),
                vals![run.as_str(), limit],
            )?
            .iter()
            .map(alert_row)
            .collect()
        })
    }

    /// A project's latest alerts, newest first (at most `limit`).
    pub fn project_alerts(&self, project_id: i64, limit: i64) -> Result<Vec<AlertRow>> {
        self.read(|db| {
            db.rows(
                &format!("SELECT {ALERT_COLUMNS} FROM alerts a WHERE a.project_id = ?1 ORDER BY a.id DESC LIMIT ?2"),
                vals![project_id, limit],
            )?
            .iter()
            .map(alert_row)
            .collect()
        })
    }

    /// Adds a channel to a project; its later alerts go there too.
    pub fn add_channel(&self, project_id: i64, new: &NewChannel) -> Result<ChannelRow> {
        if !CHANNEL_KINDS.contains(&new.kind.as_str()) {
            return Err(Error::Invalid {
                field: "kind".into(),
                reason: format!("one of {}", CHANNEL_KINDS.join(", ")),
            });
        }
        let created_ms = now_ms();
        self.write(|tx| {
            if !tx.exists("SELECT 1 FROM projects WHERE id = ?1 AND deleted = 0", vals![project_id])? {
                return Err(not_found(format!("project {project_id}")));
            }
            let id: i64 = tx
                .row(
                    "INSERT INTO alert_channels (project_id, kind, target, secret, allow_private, created_by, created_ms)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) RETURNING id",
                    vals![
                        project_id,
                        new.kind.as_str(),
                        new.target.as_str(),
                        new.secret.as_deref(),
                        i64::from(new.allow_private),
                        new.created_by.as_deref(),
                        created_ms
                    ],
                )?
                .ok_or_else(|| Error::Corrupt("a channel's insert answered no id".into()))?
                .get(0)?;
            Ok(ChannelRow {
                id,
                project_id,
                kind: new.kind.clone(),
                target: new.target.clone(),
                signed: new.secret.as_deref().is_some_and(|s| !s.is_empty()),
                allow_private: new.allow_private,
                created_by: new.created_by.clone(),
                created_ms,
            })
        })
    }

    /// A project's channels.
    pub fn channels(&self, project_id: i64) -> Result<Vec<ChannelRow>> {
        self.read(|db| {
            db.rows(
                &format!("SELECT {CHANNEL_COLUMNS} FROM alert_channels c WHERE c.project_id = ?1 AND c.deleted = 0 ORDER BY c.id"),
                vals![project_id],
            )?
            .iter()
            .map(|r| channel_row(r, 0))
            .collect()
        })
    }

    /// Removes a channel: nothing more is sent there, and its pending deliveries are given up.
    pub fn remove_channel(&self, project_id: i64, id: i64) -> Result<()> {
        self.write(|tx| {
            remove_row(tx, "alert_channels", "channel", project_id, id)?;
            tx.exec(
                "UPDATE alert_deliveries SET status = 'failed', answer = 'the channel was removed'
                 WHERE channel_id = ?1 AND status = 'pending'",
                vals![id],
            )?;
            Ok(())
        })
    }

    /// Deliveries due at `now` (at most `limit`), oldest first.
    pub fn due_deliveries(&self, now: i64, limit: i64) -> Result<Vec<DueDelivery>> {
        self.read(|db| {
            db.rows(
                &format!(
                    "SELECT d.id, d.attempts, p.name, {ALERT_COLUMNS}, {CHANNEL_COLUMNS}
                     FROM alert_deliveries d JOIN alerts a ON a.id = d.alert_id
                     JOIN alert_channels c ON c.id = d.channel_id JOIN projects p ON p.id = a.project_id
                     WHERE d.status = 'pending' AND d.next_ms <= ?1 ORDER BY d.next_ms, d.id LIMIT ?2"
                ),
                vals![now, limit],
            )?
            .iter()
            .map(|r| {
                let alert = AlertRow {
                    id: r.get(3)?,
                    project_id: r.get(4)?,
                    run_id: r.get(5)?,
                    rule: r.get(6)?,
                    level: r.get(7)?,
                    title: r.get(8)?,
                    text: r.get(9)?,
                    step: r.get(10)?,
                    time_ms: r.get(11)?,
                    last_ms: r.get(12)?,
                    count: r.get(13)?,
                };
                Ok(DueDelivery {
                    id: r.get(0)?,
                    attempts: r.get(1)?,
                    project: r.get(2)?,
                    alert,
                    channel: channel_row(r, 14)?,
                    secret: r.get(18)?,
                })
            })
            .collect()
        })
    }

    /// The earliest time a pending delivery is due, if any.
    pub fn next_delivery_ms(&self) -> Result<Option<i64>> {
        self.read(|db| {
            Ok(db
                .row("SELECT MIN(next_ms) FROM alert_deliveries WHERE status = 'pending'", vals![])?
                .map(|r| r.get::<Option<i64>>(0))
                .transpose()?
                .flatten())
        })
    }

    /// Records how an attempt at delivery `id` went: sent, retried later, or given up after
    /// [`MAX_ATTEMPTS`]. Answers the delivery's status now.
    pub fn record_attempt(&self, id: i64, attempt: &Attempt) -> Result<String> {
        let now = now_ms();
        self.write(|tx| {
            let attempts: i64 = tx
                .row("SELECT attempts FROM alert_deliveries WHERE id = ?1 AND status = 'pending'", vals![id])?
                .ok_or_else(|| not_found(format!("pending delivery {id}")))?
                .get::<i64>(0)?
                + 1;
            let (status, answer, next) = match attempt {
                Attempt::Sent { answer } => ("sent", answer.as_str(), now),
                Attempt::Failed { answer } if attempts >= MAX_ATTEMPTS => ("failed", answer.as_str(), now),
                Attempt::Failed { answer } => ("pending", answer.as_str(), now + retry_after_ms(attempts)),
            };
            let answer: String = answer.chars().take(1_000).collect();
            let sent = (status == "sent").then_some(now);
            tx.exec(
                "UPDATE alert_deliveries SET status = ?2, attempts = ?3, next_ms = ?4, answer = ?5, sent_ms = ?6 WHERE id = ?1",
                vals![id, status, attempts, next, answer.as_str(), sent],
            )?;
            Ok(status.to_owned())
        })
    }

    /// A project's latest deliveries, newest first (at most `limit`).
    pub fn deliveries(&self, project_id: i64, limit: i64) -> Result<Vec<DeliveryRow>> {
        self.read(|db| {
            db.rows(
                "SELECT d.id, d.alert_id, a.title, c.id, c.kind, c.target, d.status, d.attempts, d.next_ms, d.answer, d.sent_ms, a.rule
                 FROM alert_deliveries d JOIN alerts a ON a.id = d.alert_id JOIN alert_channels c ON c.id = d.channel_id
                 WHERE a.project_id = ?1 ORDER BY d.id DESC LIMIT ?2",
                vals![project_id, limit],
            )?
            .iter()
            .map(|r| {
                Ok(DeliveryRow {
                    id: r.get(0)?,
                    alert_id: r.get(1)?,
                    title: r.get(2)?,
                    channel_id: r.get(3)?,
                    kind: r.get(4)?,
                    target: r.get(5)?,
                    status: r.get(6)?,
                    attempts: r.get(7)?,
                    next_ms: r.get(8)?,
                    answer: r.get(9)?,
                    sent_ms: r.get(10)?,
                    rule: r.get(11)?,
                })
            })
            .collect()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::NewRun;
    use trainlog_schema::ProjectName;

    fn store_with_run(dir: &std::path::Path) -> (MetaStore, RunId, i64) {
        let m = crate::test_store(dir);
        let run = RunId::parse("id", "alerting").expect("id");
        let new = NewRun {
            id: Some(run.clone()),
            project: Some(ProjectName::parse("project", "watch").expect("name")),
            ..NewRun::default()
        };
        m.create_run_joining(&new).expect("run");
        let project = m.run_head(&run).expect("head").project_id;
        (m, run, project)
    }

    fn alert(title: &str, wait_ms: i64) -> NewAlert {
        NewAlert { level: "warn".into(), title: title.into(), text: "t".into(), wait_ms, ..NewAlert::default() }
    }

    #[test]
    fn an_alert_goes_to_every_channel_once_and_a_repeat_within_its_wait_is_folded() {
        let dir = tempfile::tempdir().expect("dir");
        let (m, run, project) = store_with_run(dir.path());
        let hook =
            NewChannel { kind: "webhook".into(), target: "https://example.com/h".into(), ..NewChannel::default() };
        let slack =
            NewChannel { kind: "slack".into(), target: "https://hooks.slack.com/x".into(), ..NewChannel::default() };
        m.add_channel(project, &hook).expect("hook");
        m.add_channel(project, &slack).expect("slack");
        let (first, new) = m.record_run_alert(&run, &alert("loss is NaN", 60_000)).expect("alert");
        assert!(new);
        let (again, new) = m.record_run_alert(&run, &alert("loss is NaN", 60_000)).expect("again");
        assert!(!new);
        assert_eq!((again.id, again.count), (first.id, 2));
        let (other, new) = m.record_run_alert(&run, &alert("slow", 0)).expect("other");
        assert!(new && other.id != first.id);
        assert_eq!(m.run_alerts(&run, 10).expect("list").len(), 2);
        let due = m.due_deliveries(now_ms() + 1, 10).expect("due");
        assert_eq!(due.len(), 4, "two alerts × two channels");
        assert!(m.record_run_alert(&run, &NewAlert { level: "fatal".into(), ..alert("x", 0) }).is_err());
    }

    #[test]
    fn a_failed_delivery_waits_longer_each_time_and_is_given_up_after_its_last_attempt() {
        let dir = tempfile::tempdir().expect("dir");
        let (m, run, project) = store_with_run(dir.path());
        let hook =
            NewChannel { kind: "webhook".into(), target: "https://example.com/h".into(), ..NewChannel::default() };
        let channel = m.add_channel(project, &hook).expect("hook");
        m.record_run_alert(&run, &alert("down", 0)).expect("alert");
        let [due] = <[DueDelivery; 1]>::try_from(m.due_deliveries(now_ms() + 1, 10).expect("due")).expect("one");
        assert_eq!(m.record_attempt(due.id, &Attempt::Failed { answer: "500".into() }).expect("1"), "pending");
        assert!(m.due_deliveries(now_ms(), 10).expect("due").is_empty(), "not before its wait");
        assert_eq!(m.next_delivery_ms().expect("next").map(|n| n > now_ms()), Some(true));
        for _ in 2..MAX_ATTEMPTS {
            assert_eq!(m.record_attempt(due.id, &Attempt::Failed { answer: "500".into() }).expect("n"), "pending");
        }
        assert_eq!(m.record_attempt(due.id, &Attempt::Failed { answer: "500".into() }).expect("last"), "failed");
        let [row] = <[DeliveryRow; 1]>::try_from(m.deliveries(project, 10).expect("rows")).expect("one");
        assert_eq!((row.status.as_str(), row.attempts, row.answer.as_str()), ("failed", MAX_ATTEMPTS, "500"));
        assert_eq!(row.channel_id, channel.id);
        assert_eq!(retry_after_ms(1), 2_000);
        assert_eq!(retry_after_ms(30), 600_000);
    }
}
