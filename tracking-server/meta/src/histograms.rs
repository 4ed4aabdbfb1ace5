//! The histograms each run logged per key and step, kept as JSON arrays of edges and counts.

use crate::db::{vals, Row};
use crate::{Error, MetaStore, Result};
use serde_json::Value as Json;
use trainlog_schema::{Histogram, MetricKey, RunId};

/// Which histograms a listing answers: one key, a step range, after a step (paging).
#[derive(Debug, Clone)]
pub struct HistogramQuery {
    pub key: MetricKey,
    pub step_min: Option<i64>,
    pub step_max: Option<i64>,
    /// Histograms strictly after this step.
    pub after: Option<i64>,
    pub limit: usize,
}

fn numbers(text: &str) -> Result<Vec<f64>> {
    let bad = || Error::Corrupt("a histogram's edges or counts are not as written".into());
    serde_json::from_str::<Vec<Json>>(text).map_err(|_| bad())?.iter().map(|v| v.as_f64().ok_or_else(bad)).collect()
}

fn histogram(r: &Row) -> Result<Histogram> {
    Ok(Histogram {
        key: MetricKey::from_trusted(r.get(0)?),
        step: r.get(1)?,
        edges: numbers(&r.get::<String>(2)?)?,
        counts: numbers(&r.get::<String>(3)?)?,
        timestamp_ms: r.get(4)?,
    })
}

const COLUMNS: &str = "key, step, edges, counts, timestamp_ms";

impl MetaStore {
    /// Records histograms of a live run in one transaction, replacing any at the same key and step.
    pub fn put_histograms(&self, run: &RunId, histograms: &[Histogram]) -> Result<usize> {
        self.write(|tx| {
            let project_id = crate::media::live_run_project(tx, run)?;
            for h in histograms {
                let text = |v: &[f64]| serde_json::to_string(v).unwrap_or_else(|_| "[]".into());
                tx.exec(
                    "INSERT INTO media_histograms (run_id, key, step, edges, counts, timestamp_ms)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6)
                     ON CONFLICT (run_id, key, step) DO UPDATE SET edges = excluded.edges,
                       counts = excluded.counts, timestamp_ms = excluded.timestamp_ms",
                    vals![run.as_str(), h.key.as_str(), h.step, text(&h.edges), text(&h.counts), h.timestamp_ms],
                )?;
            }
            if !histograms.is_empty() {
                crate::media::mark_dirty(tx, run, project_id)?;
            }
            Ok(histograms.len())
        })
    }

    /// A run's histograms under one key, by step, as `query` picks them.
    pub fn histograms(&self, run: &RunId, query: &HistogramQuery) -> Result<Vec<Histogram>> {
        self.read(|db| {
            db.rows(
                &format!(
                    "SELECT {COLUMNS} FROM media_histograms WHERE run_id = ?1 AND key = ?2 AND step >= ?3 AND step <= ?4
                       AND step > ?5 ORDER BY step LIMIT {}",
                    query.limit
                ),
                vals![
                    run.as_str(),
                    query.key.as_str(),
                    query.step_min.unwrap_or(i64::MIN),
                    query.step_max.unwrap_or(i64::MAX),
                    query.after.unwrap_or(i64::MIN)
                ],
            )?
            .iter()
            .map(histogram)
            .collect()
        })
    }

    /// Every histogram of a run, by key and step, for its Parquet file.
    pub fn histogram_index_rows(&self, run: &RunId) -> Result<Vec<Histogram>> {
        self.read(|db| {
            db.rows(
                &format!("SELECT {COLUMNS} FROM media_histograms WHERE run_id = ?1 ORDER BY key, step"),
                vals![run.as_str()],
            )?
            .iter()
            .map(histogram)
            .collect()
        })
    }
}
