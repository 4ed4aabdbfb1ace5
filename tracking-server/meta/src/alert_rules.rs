//! A project's alert rules, as written, and the runs that ended since the rules on runs' ends
//! last looked (by the runs' revision clock).

use crate::db::vals;
use crate::{not_found, now_ms, Error, MetaStore, Result};
use trainlog_schema::alert_rule::AlertRule;

/// A rule as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct RuleRow {
    pub id: i64,
    /// Its project, or [`INSTALLATION`] for a rule every project has.
    pub project_id: i64,
    pub text: String,
    pub created_by: Option<String>,
    pub created_ms: i64,
}

/// A run that ended, as the rules on runs' ends see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndedRun {
    pub id: String,
    pub project_id: i64,
    pub status: String,
    pub revision: i64,
}

/// A running run as the activity rules see it: what its GPUs cost an hour now.
#[derive(Debug, Clone, PartialEq)]
pub struct WatchedRun {
    pub id: String,
    pub status: String,
    /// What its running attempt's priced nodes cost an hour, and its GPUs; None without a job.
    pub usd_per_hour: Option<f64>,
    pub gpus: i64,
    /// Nodes of its job with no price.
    pub unpriced_nodes: i64,
}

/// Rules one project may have, and the installation.
pub const MAX_RULES_PER_PROJECT: i64 = 100;

/// The `project_id` of an installation rule: a rule a server admin gave every project.
pub const INSTALLATION: i64 = 0;

impl MetaStore {
    /// Adds a rule to a project (parsed first: a rule the server cannot evaluate is refused).
    pub fn add_rule(&self, project_id: i64, text: &str, created_by: Option<&str>) -> Result<RuleRow> {
        AlertRule::parse(text)?;
        let text = text.trim().to_owned();
        let created_ms = now_ms();
        self.write(|tx| {
            if !tx.exists("SELECT 1 FROM projects WHERE id = ?1 AND deleted = 0", vals![project_id])? {
                return Err(not_found(format!("project {project_id}")));
            }
            let count: i64 = tx
                .row("SELECT COUNT(*) FROM alert_rules WHERE project_id = ?1 AND deleted = 0", vals![project_id])?
                .map_or(Ok(0), |r| r.get(0))?;
            if count >= MAX_RULES_PER_PROJECT {
                return Err(Error::Invalid {
                    field: "rule".into(),
                    reason: format!("a project may have at most {MAX_RULES_PER_PROJECT} rules"),
                });
            }
            let id: i64 = tx
                .row(
                    "INSERT INTO alert_rules (project_id, text, created_by, created_ms) VALUES (?1, ?2, ?3, ?4) RETURNING id",
                    vals![project_id, text.as_str(), created_by, created_ms],
                )?
                .ok_or_else(|| Error::Corrupt("a rule's insert answered no id".into()))?
                .get(0)?;
            Ok(RuleRow { id, project_id, text: text.clone(), created_by: created_by.map(str::to_owned), created_ms })
        })
    }

    /// The rules of one project, or of every project (`None`), oldest first.
    pub fn rules(&self, project_id: Option<i64>) -> Result<Vec<RuleRow>> {
        self.read(|db| {
            db.rows(
                "SELECT id, project_id, text, created_by, created_ms FROM alert_rules
                 WHERE deleted = 0 AND (CAST(?1 AS BIGINT) IS NULL OR project_id = ?1) ORDER BY id",
                vals![project_id],
            )?
            .iter()
            .map(|r| {
                Ok(RuleRow {
                    id: r.get(0)?,
                    project_id: r.get(1)?,
                    text: r.get(2)?,
                    created_by: r.get(3)?,
                    created_ms: r.get(4)?,
                })
            })
            .collect()
        })
    }

    /// Adds a rule every project has (a server admin's).
    pub fn add_installation_rule(&self, text: &str, created_by: Option<&str>) -> Result<RuleRow> {
        AlertRule::parse(text)?;
        let text = text.trim().to_owned();
        let created_ms = now_ms();
        self.write(|tx| {
            let count: i64 = tx
                .row("SELECT COUNT(*) FROM installation_rules WHERE deleted = 0", vals![])?
                .map_or(Ok(0), |r| r.get(0))?;
            if count >= MAX_RULES_PER_PROJECT {
                return Err(Error::Invalid {
                    field: "rule".into(),
                    reason: format!("the installation may have at most {MAX_RULES_PER_PROJECT} rules"),
                });
            }
            let id: i64 = tx
                .row(
                    "INSERT INTO installation_rules (text, created_by, created_ms) VALUES (?1, ?2, ?3) RETURNING id",
                    vals![text.as_str(), created_by, created_ms],
                )?
                .ok_or_else(|| Error::Corrupt("a rule's insert answered no id".into()))?
                .get(0)?;
            Ok(RuleRow {
                id,
                project_id: INSTALLATION,
                text: text.clone(),
                created_by: created_by.map(str::to_owned),
                created_ms,
            })
        })
    }

    /// The rules every project has, oldest first.
    pub fn installation_rules(&self) -> Result<Vec<RuleRow>> {
        self.read(|db| {
            db.rows(
                "SELECT id, text, created_by, created_ms FROM installation_rules WHERE deleted = 0 ORDER BY id",
                vals![],
            )?
            .iter()
            .map(|r| {
                Ok(RuleRow {
                    id: r.get(0)?,
                    project_id: INSTALLATION,
                    text: r.get(1)?,
                    created_by: r.get(2)?,
                    created_ms: r.get(3)?,
                })
            })
            .collect()
        })
    }

    /// Removes a rule every project had.
    pub fn remove_installation_rule(&self, id: i64) -> Result<()> {
        self.write(|tx| {
            let changed =
                tx.exec("UPDATE installation_rules SET deleted = 1 WHERE id = ?1 AND deleted = 0", vals![id])?;
            if changed == 0 {
                return Err(not_found(format!("installation rule {id}")));
            }
            Ok(())
        })
    }

    /// The rules a project's runs are checked against: its own, then the installation's.
    pub fn rules_for(&self, project_id: i64) -> Result<Vec<RuleRow>> {
        let mut rules = self.rules(Some(project_id))?;
        rules.extend(self.installation_rules()?);
        Ok(rules)
    }

    /// Removes a rule of a project.
    pub fn remove_rule(&self, project_id: i64, id: i64) -> Result<()> {
        self.write(|tx| crate::alerts::remove_row(tx, "alert_rules", "rule", project_id, id))
    }

    /// The status and price of the runs named (those that exist).
    pub fn watched_runs(&self, ids: &[&str]) -> Result<Vec<WatchedRun>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let marks = (1..=ids.len()).map(|i| format!("?{i}")).collect::<Vec<_>>().join(", ");
        let params: Vec<crate::db::Value> = ids.iter().map(|r| crate::db::Value::from(*r)).collect();
        self.read(|db| {
            db.rows(
                &format!(
                    "SELECT r.id, r.status, j.usd_per_hour, j.gpus, j.unpriced_nodes FROM runs r
                     LEFT JOIN run_jobs j ON j.run_id = r.id WHERE r.id IN ({marks})"
                ),
                &params,
            )?
            .iter()
            .map(|r| {
                Ok(WatchedRun {
                    id: r.get(0)?,
                    status: r.get(1)?,
                    usd_per_hour: r.get(2)?,
                    gpus: r.get::<Option<i64>>(3)?.unwrap_or(0),
                    unpriced_nodes: r.get::<Option<i64>>(4)?.unwrap_or(0),
                })
            })
            .collect()
        })
    }

    /// The running runs of a project.
    pub fn running_runs(&self, project_id: i64) -> Result<Vec<String>> {
        self.read(|db| {
            db.rows(
                "SELECT id FROM runs WHERE project_id = ?1 AND status = 'running' AND deleted = 0 ORDER BY id",
                vals![project_id],
            )?
            .iter()
            .map(|r| r.get(0))
            .collect()
        })
    }

    /// When each rule of a project (by its text) last fired, and how many times it did.
    pub fn rule_firings(&self, project_id: i64) -> Result<std::collections::HashMap<String, (i64, i64)>> {
        self.read(|db| {
            db.rows(
                "SELECT rule, MAX(last_ms), CAST(SUM(count) AS BIGINT) FROM alerts
                 WHERE project_id = ?1 AND rule <> '' GROUP BY rule",
                vals![project_id],
            )?
            .iter()
            .map(|r| Ok((r.get(0)?, (r.get(1)?, r.get(2)?))))
            .collect()
        })
    }

    /// The runs clock's latest revision.
    pub fn latest_revision(&self) -> Result<i64> {
        self.read(|db| {
            Ok(db
                .row("SELECT MAX(revision) FROM runs", vals![])?
                .map(|r| r.get::<Option<i64>>(0))
                .transpose()?
                .flatten()
                .unwrap_or(0))
        })
    }

    /// Runs of projects with rules (or of every project, with installation rules) that ended and
    /// changed after revision `after`, up to
    /// revision `upto` (at most `limit`, by revision).
    pub fn ended_since(&self, after: i64, upto: i64, limit: i64) -> Result<Vec<EndedRun>> {
        self.read(|db| {
            db.rows(
                "SELECT r.id, r.project_id, r.status, r.revision FROM runs r
                 WHERE r.revision > ?1 AND r.revision <= ?3 AND r.status IN ('failed', 'lost', 'preempted', 'killed', 'finished')
                   AND (r.project_id IN (SELECT project_id FROM alert_rules WHERE deleted = 0)
                        OR EXISTS (SELECT 1 FROM installation_rules WHERE deleted = 0))
                 ORDER BY r.revision LIMIT ?2",
                vals![after, limit, upto],
            )?
            .iter()
            .map(|r| Ok(EndedRun { id: r.get(0)?, project_id: r.get(1)?, status: r.get(2)?, revision: r.get(3)? }))
            .collect()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::NewRun;
    use trainlog_schema::{ProjectName, RunId, RunStatus};

    #[test]
    fn rules_are_kept_as_written_and_runs_that_ended_are_found_after_a_revision() {
        let dir = tempfile::tempdir().expect("dir");
        let m = crate::test_store(dir.path());
        let run = RunId::parse("id", "watched").expect("id");
        let new = NewRun {
            id: Some(run.clone()),
            project: Some(ProjectName::parse("project", "watch").expect("name")),
            ..NewRun::default()
        };
        m.create_run_joining(&new).expect("run");
        let project = m.run_head(&run).expect("head").project_id;
        assert!(matches!(m.add_rule(project, "stalled for a bit", None), Err(Error::Invalid { .. })));
        let rule = m.add_rule(project, " failed ", Some("ana")).expect("rule");
        assert_eq!(rule.text, "failed");
        assert_eq!(m.rules(Some(project)).expect("rules"), vec![rule.clone()]);
        let before = m.latest_revision().expect("revision");
        assert_eq!(m.ended_since(before, i64::MAX, 10).expect("none"), vec![]);
        m.set_status(&run, RunStatus::Failed, None).expect("fail");
        let [ended] = <[EndedRun; 1]>::try_from(m.ended_since(before, i64::MAX, 10).expect("one")).expect("one");
        assert_eq!((ended.id.as_str(), ended.status.as_str()), ("watched", "failed"));
        m.remove_rule(project, rule.id).expect("remove");
        assert_eq!(m.rules(None).expect("rules"), vec![]);
        assert_eq!(m.ended_since(before, i64::MAX, 10).expect("no rules, none"), vec![]);
        // An installation rule: every project's runs are read again.
        let everywhere = m.add_installation_rule("lost", Some("root")).expect("installation rule");
        assert_eq!(
            m.rules_for(project).expect("rules").iter().map(|r| r.project_id).collect::<Vec<_>>(),
            vec![INSTALLATION]
        );
        assert_eq!(m.ended_since(before, i64::MAX, 10).expect("one").len(), 1);
        m.remove_installation_rule(everywhere.id).expect("remove");
        assert!(m.installation_rules().expect("none").is_empty());
    }
}
