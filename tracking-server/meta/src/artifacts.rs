//! The record of each run's artifacts: path, size and sha256 of files in the object store.

use crate::db::{vals, Row};
use crate::{not_found, now_ms, MetaStore, Result};
use trainlog_schema::{ArtifactPath, RunId};

#[derive(Debug, Clone, PartialEq)]
pub struct ArtifactRow {
    pub path: String,
    pub size: u64,
    pub sha256: String,
    pub created_ms: i64,
}

/// `path, size, sha256, created_ms` as an `ArtifactRow`.
fn artifact_row(r: &Row) -> Result<ArtifactRow> {
    Ok(ArtifactRow { path: r.get(0)?, size: r.get::<i64>(1)? as u64, sha256: r.get(2)?, created_ms: r.get(3)? })
}

impl MetaStore {
    /// Records an artifact whose bytes are in the object store (replacing an earlier record).
    pub fn put_artifact(&self, run: &RunId, path: &ArtifactPath, size: u64, sha256: &str) -> Result<ArtifactRow> {
        let created_ms = now_ms();
        self.in_run_tx(run, |tx| {
            tx.exec(
                "INSERT INTO artifacts (run_id, path, size, sha256, created_ms) VALUES (?1, ?2, ?3, ?4, ?5)
                 ON CONFLICT (run_id, path) DO UPDATE SET size = excluded.size, sha256 = excluded.sha256, created_ms = excluded.created_ms",
                vals![run.as_str(), path.as_str(), size as i64, sha256, created_ms],
            )?;
            Ok(())
        })?;
        Ok(ArtifactRow { path: path.to_string(), size, sha256: sha256.to_owned(), created_ms })
    }

    /// Artifacts of a run under `prefix` (all when empty), by path.
    pub fn artifacts(&self, run: &RunId, prefix: &str) -> Result<Vec<ArtifactRow>> {
        self.read(|db| {
            db.rows(
                "SELECT path, size, sha256, created_ms FROM artifacts
                 WHERE run_id = ?1 AND substr(path, 1, length(CAST(?2 AS TEXT))) = ?2 ORDER BY path",
                vals![run.as_str(), prefix],
            )?
            .iter()
            .map(artifact_row)
            .collect()
        })
    }

    /// An artifact of the run that `path` cannot sit beside: one at a folder of `path` (`a` for
    /// `a/b`), or one inside `path` taken as a folder (`a/b` for `a`). A path is a file or a
    /// folder, never both, in every store.
    pub fn artifact_path_clash(&self, run: &RunId, path: &ArtifactPath) -> Result<Option<String>> {
        self.read(|db| {
            db.row(
                "SELECT path FROM artifacts WHERE run_id = ?1 AND (substr(path, 1, length(CAST(?2 AS TEXT)) + 1) = ?2 || '/'
                 OR substr(CAST(?2 AS TEXT), 1, length(path) + 1) = path || '/') LIMIT 1",
                vals![run.as_str(), path.as_str()],
            )?
            .map(|r| r.get(0))
            .transpose()
        })
    }

    pub fn artifact(&self, run: &RunId, path: &ArtifactPath) -> Result<ArtifactRow> {
        self.read(|db| {
            let row = db.row(
                "SELECT path, size, sha256, created_ms FROM artifacts WHERE run_id = ?1 AND path = ?2",
                vals![run.as_str(), path.as_str()],
            )?;
            artifact_row(&row.ok_or_else(|| not_found(format!("artifact {path:?} of run {run}")))?)
        })
    }

    /// Forgets an artifact; answers whether there was one.
    pub fn delete_artifact(&self, run: &RunId, path: &ArtifactPath) -> Result<bool> {
        self.in_run_tx(run, |tx| {
            Ok(tx.exec("DELETE FROM artifacts WHERE run_id = ?1 AND path = ?2", vals![run.as_str(), path.as_str()])?
                > 0)
        })
    }
}
