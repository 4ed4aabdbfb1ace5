//! Deleting an archived run for good: its rows go in one transaction that leaves a row in
//! `purged_runs`, which keeps the id from coming back and lists the runs whose objects are still
//! to be deleted from the object store.

use crate::db::{vals, Db};
use crate::{not_found, now_ms, Error, MetaStore, Result};
use trainlog_schema::RunId;

/// A run deleted for good whose metric files and artifacts may still be in the object store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PurgedRun {
    pub id: RunId,
    pub project_id: i64,
}

/// Tables holding rows of one run by `run_id`, deleted before the run's own row. Its row of
/// `run_usage` stays: the spend ledger (see [`MetaStore::forget_spend`]).
const RUN_TABLES: &[&str] = &[
    "params",
    "tags",
    "metric_summaries",
    "metric_files",
    "artifacts",
    "checkpoints",
    "run_metadata",
    "logged_models",
    "run_attempts",
    "run_processes",
    "run_nodes",
    "run_jobs",
    "alerts",
    "checkpoint_restores",
    "media_items",
    "media_refs",
    "media_index_dirty",
    "media_histograms",
];

/// Whether `id` names a run deleted for good.
pub(crate) fn is_purged_in(db: &dyn Db, id: &str) -> Result<bool> {
    db.exists("SELECT 1 FROM purged_runs WHERE run_id = ?1", vals![id])
}

impl MetaStore {
    /// Deletes an archived run's rows for good (params, tags, summaries, the catalog of its metric
    /// files, artifacts, checkpoints, metadata, logged models) and records it in `purged_runs`.
    /// Refuses a run that is not archived, that a model version was made from, or that is a trial
    /// of a running sweep. Answers the run's project; its objects are the caller's to delete.
    pub fn purge_run(&self, id: &RunId) -> Result<PurgedRun> {
        self.write(|tx| {
            let head = tx
                .row(
                    "SELECT project_id, deleted, start_ms, \"user\", group_name FROM runs WHERE id = ?1",
                    vals![id.as_str()],
                )?
                .ok_or_else(|| not_found(format!("run {id}")))?;
            let (project_id, archived): (i64, bool) = (head.get(0)?, head.get(1)?);
            let (start_ms, user, group): (i64, String, String) = (head.get(2)?, head.get(3)?, head.get(4)?);
            if !archived {
                return Err(Error::Conflict {
                    field: "id".into(),
                    reason: format!(
                        "run {id} is not archived; archive it first (POST /api/v1/runs/{id}/archive), then delete it"
                    ),
                });
            }
            let versions = tx.rows(
                "SELECT m.name || ' version ' || v.version FROM model_versions v
                 JOIN registered_models m ON m.id = v.model_id WHERE v.run_id = ?1 ORDER BY m.name, v.version",
                vals![id.as_str()],
            )?;
            if !versions.is_empty() {
                let versions: Vec<String> = versions.iter().map(|r| r.get(0)).collect::<Result<_>>()?;
                return Err(Error::Conflict {
                    field: "id".into(),
                    reason: format!(
                        "run {id} holds the files of model {}; delete those versions first",
                        versions.join(", ")
                    ),
                });
            }
            let running_sweep = tx.row(
                "SELECT s.name FROM sweep_trials t JOIN sweeps s ON s.id = t.sweep_id
                 WHERE t.run_id = ?1 AND s.state = 'running'",
                vals![id.as_str()],
            )?;
            if let Some(sweep) = running_sweep {
                let sweep: String = sweep.get(0)?;
                return Err(Error::Conflict {
                    field: "id".into(),
                    reason: format!("run {id} is a trial of sweep {sweep:?}, still running; stop the sweep first"),
                });
            }
            crate::media::unreference_run_blobs(tx, id.as_str())?;
            tx.exec(
                "DELETE FROM alert_deliveries WHERE alert_id IN (SELECT id FROM alerts WHERE run_id = ?1)",
                vals![id.as_str()],
            )?;
            for table in RUN_TABLES {
                tx.exec(&format!("DELETE FROM {table} WHERE run_id = ?1"), vals![id.as_str()])?;
            }
            tx.exec("DELETE FROM runs WHERE id = ?1", vals![id.as_str()])?;
            tx.exec(
                "INSERT INTO purged_runs (run_id, project_id, purged_ms, start_ms, \"user\", group_name)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                vals![id.as_str(), project_id, now_ms(), start_ms, user, group],
            )?;
            Ok(PurgedRun { id: id.clone(), project_id })
        })
    }

    /// Every run deleted for good, whose points a replayed log must drop.
    pub fn purged_runs(&self) -> Result<Vec<RunId>> {
        self.read(|db| {
            let rows = db.rows("SELECT run_id FROM purged_runs", vals![])?;
            rows.iter().map(|r| Ok(RunId::from_trusted(r.get::<String>(0)?))).collect()
        })
    }

    /// Runs deleted for good whose objects are not yet known to be deleted.
    pub fn purges_pending(&self) -> Result<Vec<PurgedRun>> {
        self.read(|db| {
            let rows = db.rows("SELECT run_id, project_id FROM purged_runs WHERE objects_left = 1", vals![])?;
            rows.iter()
                .map(|r| Ok(PurgedRun { id: RunId::from_trusted(r.get::<String>(0)?), project_id: r.get(1)? }))
                .collect()
        })
    }

    /// Records that a purged run's objects are deleted.
    pub fn purge_finished(&self, id: &RunId) -> Result<()> {
        self.write(|db| {
            db.exec("UPDATE purged_runs SET objects_left = 0 WHERE run_id = ?1", vals![id.as_str()])?;
            Ok(())
        })
    }

    /// The spend ledger: runs deleted for good whose spend the report, the budgets and `/metrics`
    /// still add up, oldest start first.
    pub fn spend_ledger(&self) -> Result<Vec<LedgerEntry>> {
        self.read(|db| {
            let rows = db.rows(
                "SELECT l.run_id, p.name, l.start_ms, l.\"user\", l.purged_ms, u.priced, u.cost_usd, u.gpu_hours
                 FROM purged_runs l JOIN run_usage u ON u.run_id = l.run_id JOIN projects p ON p.id = l.project_id
                 WHERE l.start_ms IS NOT NULL ORDER BY l.start_ms, l.run_id",
                vals![],
            )?;
            rows.iter()
                .map(|r| {
                    Ok(LedgerEntry {
                        run_id: r.get(0)?,
                        project: r.get(1)?,
                        start_ms: r.get(2)?,
                        user: r.get::<Option<String>>(3)?.unwrap_or_default(),
                        purged_ms: r.get(4)?,
                        cost_usd: r.get::<bool>(5)?.then_some(r.get(6)?),
                        gpu_hours: r.get(7)?,
                    })
                })
                .collect()
        })
    }

    /// Removes a run deleted for good from the spend ledger, for good: the report no longer adds
    /// up what it spent. Answers whether it was there.
    pub fn forget_spend(&self, run_id: &str) -> Result<bool> {
        self.write(|tx| {
            let Some(head) = tx.row(
                "SELECT l.project_id, l.start_ms FROM purged_runs l JOIN run_usage u ON u.run_id = l.run_id
                 WHERE l.run_id = ?1 AND l.start_ms IS NOT NULL",
                vals![run_id],
            )?
            else {
                return Ok(false);
            };
            let (project_id, start_ms): (i64, i64) = (head.get(0)?, head.get(1)?);
            tx.exec("DELETE FROM run_usage WHERE run_id = ?1", vals![run_id])?;
            tx.exec(
                "INSERT INTO usage_rollup_dirty (project_id, day, generation) VALUES (?1, ?2, 1)
                 ON CONFLICT (project_id, day) DO UPDATE SET generation = usage_rollup_dirty.generation + 1",
                vals![project_id, start_ms.div_euclid(crate::report::DAY_MS)],
            )?;
            Ok(true)
        })
    }
}

/// A run deleted for good whose spend stays in the report.
#[derive(Debug, Clone, PartialEq)]
pub struct LedgerEntry {
    pub run_id: String,
    pub project: String,
    pub start_ms: i64,
    pub user: String,
    pub purged_ms: i64,
    /// None when not every node of it had a price.
    pub cost_usd: Option<f64>,
    pub gpu_hours: f64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jobs::{NodeInfo, ProcessJoin};
    use crate::{NewRun, NewVersion};
    use serde_json::json;
    use trainlog_schema::ProjectName;

    fn count(meta: &MetaStore, sql: &str, id: &str) -> i64 {
        meta.read(|db| db.row(sql, vals![id])?.expect("a count").get(0)).unwrap()
    }

    #[test]
    fn a_purge_takes_every_row_of_an_archived_run_and_keeps_its_id_from_coming_back() {
        let dir = tempfile::tempdir().unwrap();
        let meta = crate::test_store(dir.path());
        // Each run is joined by a process of its job, so the job's tables hold rows of it too.
        let process = ProcessJoin {
            world_size: 1,
            node_count: 1,
            host: "node-0".into(),
            launcher: "trainlog".into(),
            context: "{}".into(),
            node: Some(NodeInfo { gpus: 1, ..NodeInfo::default() }),
            ..ProcessJoin::default()
        };
        let new = |id: &str| NewRun {
            project: Some(ProjectName::parse("project", "p").unwrap()),
            id: Some(RunId::parse("id", id).unwrap()),
            process: Some(process.clone()),
            ..NewRun::default()
        };
        let (gone, _) = meta.create_run(&new("gone")).unwrap();
        let (kept, _) = meta.create_run(&new("kept")).unwrap();
        for run in [&gone.id, &kept.id] {
            meta.write(|c| {
                c.batch(&format!(
                    "INSERT INTO params VALUES ('{run}', 'lr', 'float', '0.1', 0.1);
                     INSERT INTO tags VALUES ('{run}', 'k', 'v');
                     INSERT INTO metric_summaries (run_id, key, last, last_step, last_ms, min, max, count)
                         VALUES ('{run}', 'loss', 1, 1, 1, 1, 1, 1);
                     INSERT INTO metric_files VALUES ('projects/1/metrics/{run}/1.parquet', '{run}', 1, 1, 1, '{{}}', 1);
                     INSERT INTO artifacts VALUES ('{run}', 'a.txt', 1, 'x', 1);
                     INSERT INTO run_metadata VALUES ('{run}', 'env', '{{}}', 1);
                     INSERT INTO run_usage (run_id, revision, summaries_revision, computed_ms, outcome, gpus,
                         gpu_model, provider, pricing, gpu_hours, spot_gpu_hours, priced, cost_usd, gpu_series)
                         VALUES ('{run}', 1, 1, 1, 'finished', 1, '', '', '', 1, 0, 1, 1, 0);
                     INSERT INTO checkpoint_restores VALUES ('{run}', 'c', 1, 1, 1, NULL, NULL);
                     INSERT INTO media_items VALUES ('{run}', 'img', 0, 0, 'image', 'x', NULL, 'image/png', 1,
                         NULL, NULL, NULL, '{{}}', 1, NULL, NULL);
                     INSERT INTO media_refs VALUES ('{run}', 'x', 1);
                     INSERT INTO media_index_dirty VALUES ('{run}', 1, 1, 1);
                     INSERT INTO media_histograms VALUES ('{run}', 'w', 0, '[0,1]', '[1]', 1);
                     INSERT INTO alerts (project_id, run_id, level, title, text, time_ms, last_ms)
                         SELECT project_id, id, 'warn', 'loss is NaN', '', 1, 1 FROM runs WHERE id = '{run}';"
                ))?;
                Ok(())
            })
            .unwrap();
        }

        let refused = meta.purge_run(&gone.id).unwrap_err();
        assert!(
            matches!(&refused, Error::Conflict { field, reason } if field == "id" && reason.contains("archive it first")),
            "{refused}"
        );
        meta.set_run_deleted(&gone.id, true).unwrap();
        let version = NewVersion {
            run_id: gone.id.to_string(),
            source: json!({}),
            files: json!([]),
            description: String::new(),
            lineage: json!({}),
            tags: Default::default(),
            alias: None,
        };
        meta.create_version("m", &version).unwrap();
        let refused = meta.purge_run(&gone.id).unwrap_err();
        assert!(matches!(&refused, Error::Conflict { reason, .. } if reason.contains("m version 1")), "{refused}");
        meta.delete_model("m").unwrap();

        let purged = meta.purge_run(&gone.id).unwrap();
        assert_eq!(purged, PurgedRun { id: gone.id.clone(), project_id: gone.project_id });
        for table in RUN_TABLES.iter().chain(&["runs"]) {
            let column = if *table == "runs" { "id" } else { "run_id" };
            let sql = format!("SELECT COUNT(*) FROM {table} WHERE {column} = ?1");
            assert_eq!(count(&meta, &sql, gone.id.as_str()), 0, "{table} keeps nothing of the purged run");
            let expected = i64::from(!matches!(*table, "checkpoints" | "logged_models"));
            assert_eq!(count(&meta, &sql, kept.id.as_str()), expected, "{table} keeps the other run's rows");
        }
        let ledger = meta.spend_ledger().unwrap();
        assert_eq!(ledger.len(), 1, "its row of the report stays: {ledger:?}");
        assert_eq!(
            (ledger[0].run_id.as_str(), ledger[0].cost_usd, ledger[0].gpu_hours),
            (gone.id.as_str(), Some(1.0), 1.0)
        );
        assert!(meta.forget_spend(gone.id.as_str()).unwrap());
        assert_eq!(meta.spend_ledger().unwrap(), vec![]);
        assert!(!meta.forget_spend(kept.id.as_str()).unwrap(), "a run not deleted is not in the ledger");
        assert!(matches!(meta.purge_run(&gone.id), Err(Error::NotFound { .. })));
        assert_eq!(meta.purged_runs().unwrap(), vec![gone.id.clone()]);
        assert_eq!(meta.purges_pending().unwrap(), vec![purged]);
        meta.purge_finished(&gone.id).unwrap();
        assert_eq!(meta.purges_pending().unwrap(), vec![]);
        assert_eq!(meta.purged_runs().unwrap(), vec![gone.id.clone()], "the id stays taken");

        let again = meta.create_run(&new("gone")).unwrap_err();
        assert!(
            matches!(&again, Error::Conflict { field, reason } if field == "id" && reason.contains("deleted for good")),
            "{again}"
        );
        assert!(meta.create_run(&NewRun { resume: true, ..new("gone") }).is_err());
    }
}
