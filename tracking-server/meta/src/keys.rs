//! The keys a project's runs use (params, metrics, tags), for autocomplete and for telling a user
//! that a filter names a key no run has.

use crate::db::vals;
use crate::{MetaStore, Result};

/// Distinct keys of a project's active runs, each list sorted.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProjectKeys {
    pub params: Vec<String>,
    pub metrics: Vec<String>,
    pub tags: Vec<String>,
}

impl MetaStore {
    /// The keys of a project's runs that are not deleted.
    pub fn project_keys(&self, project_id: i64) -> Result<ProjectKeys> {
        self.read(|db| {
            let distinct = |table: &str| -> Result<Vec<String>> {
                let sql = format!(
                    "SELECT DISTINCT t.key FROM runs r JOIN {table} t ON t.run_id = r.id \
                     WHERE r.project_id = ?1 AND r.deleted = 0 ORDER BY t.key"
                );
                db.rows(&sql, vals![project_id])?.iter().map(|r| r.get(0)).collect()
            };
            Ok(ProjectKeys {
                params: distinct("params")?,
                metrics: distinct("metric_summaries")?,
                tags: distinct("tags")?,
            })
        })
    }
}
