//! Checkpoints: named sets of a run's artifacts saved at a step, and the retention rules that
//! decide which ones to keep.

use crate::db::{vals, Row};
use crate::{not_found, now_ms, Error, MetaStore, Result};
use serde_json::Value;
use trainlog_schema::RunId;

#[derive(Debug, Clone, PartialEq)]
pub struct CheckpointRow {
    pub name: String,
    pub step: i64,
    /// `[{"path", "size", "sha256"}]`, paths relative to the checkpoint.
    pub files: Value,
    pub metadata: Value,
    pub metric_key: Option<String>,
    pub metric_value: Option<f64>,
    pub created_ms: i64,
}

/// Which checkpoints to keep: the newest `keep_last` by step, and the `keep_best` best by
/// `metric` (lowest when `minimize`). A checkpoint kept by either rule stays.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Retention {
    pub keep_last: Option<usize>,
    pub keep_best: Option<usize>,
    pub metric: Option<String>,
    pub minimize: bool,
}

fn row(r: &Row) -> Result<CheckpointRow> {
    let files: String = r.get(2)?;
    let metadata: String = r.get(3)?;
    Ok(CheckpointRow {
        name: r.get(0)?,
        step: r.get(1)?,
        files: serde_json::from_str(&files).unwrap_or(Value::Null),
        metadata: serde_json::from_str(&metadata).unwrap_or(Value::Null),
        metric_key: r.get(4)?,
        metric_value: r.get(5)?,
        created_ms: r.get(6)?,
    })
}

const COLUMNS: &str = "name, step, files, metadata, metric_key, metric_value, created_ms";

/// Names of the checkpoints `retention` drops, given all of a run's checkpoints.
pub fn to_drop(all: &[CheckpointRow], retention: &Retention) -> Vec<String> {
    if retention.keep_last.is_none() && retention.keep_best.is_none() {
        return Vec::new();
    }
    let mut keep = std::collections::HashSet::new();
    let mut by_step: Vec<&CheckpointRow> = all.iter().collect();
    by_step.sort_by(|a, b| b.step.cmp(&a.step).then(b.created_ms.cmp(&a.created_ms)));
    if let Some(n) = retention.keep_last {
        keep.extend(by_step.iter().take(n).map(|c| c.name.clone()));
    }
    if let (Some(n), Some(metric)) = (retention.keep_best, &retention.metric) {
        let mut scored: Vec<(&CheckpointRow, f64)> = all
            .iter()
            .filter(|c| c.metric_key.as_deref() == Some(metric.as_str()))
            .filter_map(|c| c.metric_value.filter(|v| !v.is_nan()).map(|v| (c, v)))
            .collect();
        scored.sort_by(|a, b| {
            let order = a.1.total_cmp(&b.1);
            if retention.minimize {
                order
            } else {
                order.reverse()
            }
        });
        keep.extend(scored.iter().take(n).map(|(c, _)| c.name.clone()));
    }
    all.iter().filter(|c| !keep.contains(&c.name)).map(|c| c.name.clone()).collect()
}

impl MetaStore {
    /// Records a checkpoint. Every file must be a recorded artifact of the run with the same
    /// sha256 (uploaded first). Answers the checkpoint and the names dropped by `retention`,
    /// whose rows are removed; deleting their artifacts is the caller's part.
    pub fn put_checkpoint(
        &self,
        run: &RunId,
        checkpoint: &CheckpointRow,
        retention: &Retention,
    ) -> Result<Vec<CheckpointRow>> {
        let files_text = checkpoint.files.to_string();
        let metadata_text = checkpoint.metadata.to_string();
        self.in_run_tx(run, |tx| {
            for file in checkpoint.files.as_array().into_iter().flatten() {
                let rel = file["path"].as_str().unwrap_or_default();
                let path = format!("checkpoints/{}/{rel}", checkpoint.name);
                let stored: Option<String> = tx
                    .row(
                        "SELECT sha256 FROM artifacts WHERE run_id = ?1 AND path = ?2",
                        vals![run.as_str(), path.as_str()],
                    )?
                    .map(|r| r.get(0))
                    .transpose()?;
                match stored {
                    None => {
                        return Err(Error::Invalid {
                            field: "files".into(),
                            reason: format!("{path} was not uploaded"),
                        })
                    }
                    Some(sha) if Some(sha.as_str()) != file["sha256"].as_str() => {
                        return Err(Error::Invalid {
                            field: "files".into(),
                            reason: format!("{path} has sha256 {sha} on the server, not {}", file["sha256"]),
                        })
                    }
                    Some(_) => {}
                }
            }
            tx.exec(
                &format!(
                    "INSERT INTO checkpoints ({COLUMNS}, run_id) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
                     ON CONFLICT (run_id, name) DO UPDATE SET step = excluded.step, files = excluded.files,
                       metadata = excluded.metadata, metric_key = excluded.metric_key,
                       metric_value = excluded.metric_value, created_ms = excluded.created_ms"
                ),
                vals![
                    checkpoint.name.as_str(),
                    checkpoint.step,
                    files_text.as_str(),
                    metadata_text.as_str(),
                    checkpoint.metric_key.as_deref(),
                    checkpoint.metric_value,
                    now_ms(),
                    run.as_str()
                ],
            )?;
            let all: Vec<CheckpointRow> = tx
                .rows(&format!("SELECT {COLUMNS} FROM checkpoints WHERE run_id = ?1"), vals![run.as_str()])?
                .iter()
                .map(row)
                .collect::<Result<_>>()?;
            let dropped_names = to_drop(&all, retention);
            let dropped: Vec<CheckpointRow> = all.into_iter().filter(|c| dropped_names.contains(&c.name)).collect();
            for c in &dropped {
                tx.exec(
                    "DELETE FROM checkpoints WHERE run_id = ?1 AND name = ?2",
                    vals![run.as_str(), c.name.as_str()],
                )?;
                tx.exec(
                    "DELETE FROM artifacts WHERE run_id = ?1 AND substr(path, 1, length(CAST(?2 AS TEXT))) = ?2",
                    vals![run.as_str(), format!("checkpoints/{}/", c.name)],
                )?;
            }
            Ok(dropped)
        })
    }

    /// A run's checkpoints, newest step first.
    pub fn checkpoints(&self, run: &RunId) -> Result<Vec<CheckpointRow>> {
        self.read(|db| {
            if !db.exists("SELECT 1 FROM runs WHERE id = ?1 AND deleted = 0", vals![run.as_str()])? {
                return Err(not_found(format!("run {run}")));
            }
            db.rows(
                &format!("SELECT {COLUMNS} FROM checkpoints WHERE run_id = ?1 ORDER BY step DESC, created_ms DESC"),
                vals![run.as_str()],
            )?
            .iter()
            .map(row)
            .collect()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ck(name: &str, step: i64, value: Option<f64>) -> CheckpointRow {
        CheckpointRow {
            name: name.into(),
            step,
            files: Value::Array(vec![]),
            metadata: Value::Null,
            metric_key: value.map(|_| "val/loss".into()),
            metric_value: value,
            created_ms: step,
        }
    }

    #[test]
    fn retention_keeps_the_last_n_and_the_best_by_metric() {
        let all = vec![
            ck("a", 1, Some(0.9)),
            ck("b", 2, Some(0.2)),
            ck("c", 3, Some(0.5)),
            ck("d", 4, Some(0.7)),
            ck("e", 5, None),
        ];
        let last2 = Retention { keep_last: Some(2), ..Default::default() };
        assert_eq!(to_drop(&all, &last2), vec!["a", "b", "c"]);
        let best1 =
            Retention { keep_last: Some(2), keep_best: Some(1), metric: Some("val/loss".into()), minimize: true };
        assert_eq!(to_drop(&all, &best1), vec!["a", "c"]);
        let best_max =
            Retention { keep_best: Some(2), metric: Some("val/loss".into()), minimize: false, ..Default::default() };
        assert_eq!(to_drop(&all, &best_max), vec!["b", "c", "e"]);
        assert!(to_drop(&all, &Retention::default()).is_empty());
    }
}
