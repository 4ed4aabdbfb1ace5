//! MLflow 3's logged models, kept beside the run that logged them: their files are that run's
//! artifacts under `models/{id}/`.

use crate::db::{vals, Row};
use crate::{not_found, now_ms, Error, MetaStore, Result};
use std::collections::BTreeMap;

#[derive(Debug, Clone, PartialEq)]
pub struct LoggedModelRow {
    pub id: String,
    pub project_id: i64,
    pub run_id: String,
    pub name: String,
    pub model_type: String,
    /// `pending`, `ready` or `failed`.
    pub status: String,
    pub params: BTreeMap<String, String>,
    pub tags: BTreeMap<String, String>,
    pub created_ms: i64,
    pub updated_ms: i64,
    /// Logged outside any run: `run_id` is a run made to hold its files.
    pub own_run: bool,
}

/// A fresh logged model id, as MLflow spells them: `m-` and 32 hex digits.
pub fn new_logged_model_id() -> String {
    format!("m-{}", uuid::Uuid::new_v4().simple())
}

const COLUMNS: &str = "id, project_id, run_id, name, model_type, status, params, tags, created_ms, updated_ms, own_run";

/// A row of `COLUMNS`, its params and tags decoded from their JSON text.
fn from_row(r: &Row) -> Result<LoggedModelRow> {
    let mut row = LoggedModelRow {
        id: r.get(0)?,
        project_id: r.get(1)?,
        run_id: r.get(2)?,
        name: r.get(3)?,
        model_type: r.get(4)?,
        status: r.get(5)?,
        params: BTreeMap::new(),
        tags: BTreeMap::new(),
        created_ms: r.get(8)?,
        updated_ms: r.get(9)?,
        own_run: r.get(10)?,
    };
    let map = |text: String| {
        serde_json::from_str::<BTreeMap<String, String>>(&text)
            .map_err(|e| Error::Corrupt(format!("logged model {}: {e}", row.id)))
    };
    let (params, tags) = (map(r.get(6)?)?, map(r.get(7)?)?);
    row.params = params;
    row.tags = tags;
    Ok(row)
}

fn encode(map: &BTreeMap<String, String>) -> String {
    serde_json::to_string(map).unwrap_or_else(|_| "{}".to_owned())
}

impl MetaStore {
    /// Records a logged model of a run (status `pending` until its files are uploaded).
    pub fn create_logged_model(&self, row: &LoggedModelRow) -> Result<()> {
        self.write(|db| {
            let inserted = db.exec(
                "INSERT INTO logged_models (id, project_id, run_id, name, model_type, status, params, tags, created_ms, updated_ms, own_run)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?9, ?10) ON CONFLICT (id) DO NOTHING",
                vals![
                    row.id.as_str(),
                    row.project_id,
                    row.run_id.as_str(),
                    row.name.as_str(),
                    row.model_type.as_str(),
                    row.status.as_str(),
                    encode(&row.params),
                    encode(&row.tags),
                    row.created_ms,
                    row.own_run
                ],
            )?;
            if inserted == 0 {
                return Err(crate::Error::Conflict {
                    field: "model_id".into(),
                    reason: format!("Logged model with ID '{}' already exists", row.id),
                });
            }
            Ok(())
        })
    }

    pub fn logged_model(&self, id: &str) -> Result<LoggedModelRow> {
        let found = self.read(|db| db.row(&format!("SELECT {COLUMNS} FROM logged_models WHERE id = ?1"), vals![id]))?;
        from_row(&found.ok_or_else(|| not_found(format!("Logged model with ID '{id}'")))?)
    }

    /// The logged models of some projects, newest first.
    pub fn logged_models(&self, project_ids: &[i64]) -> Result<Vec<LoggedModelRow>> {
        self.read(|db| {
            let sql = format!("SELECT {COLUMNS} FROM logged_models WHERE project_id = ?1 ORDER BY created_ms DESC, id");
            let mut out = Vec::new();
            for &id in project_ids {
                for row in db.rows(&sql, vals![id])? {
                    out.push(from_row(&row)?);
                }
            }
            Ok(out)
        })
    }

    /// Deletes a logged model. One logged outside any run takes the run made to hold its files
    /// with it, archived (its files stay until that run is purged); a run's own model leaves its
    /// files among the run's artifacts. Answers the deleted model.
    pub fn delete_logged_model(&self, id: &str) -> Result<LoggedModelRow> {
        let row = self.logged_model(id)?;
        self.write(|tx| {
            tx.exec("DELETE FROM logged_models WHERE id = ?1", vals![id])?;
            if row.own_run {
                tx.exec("UPDATE runs SET deleted = ?2 WHERE id = ?1", vals![row.run_id.as_str(), true])?;
            }
            Ok(())
        })?;
        Ok(row)
    }

    /// Changes a logged model's status, or merges params and tags into it.
    pub fn update_logged_model(
        &self,
        id: &str,
        status: Option<&str>,
        params: &BTreeMap<String, String>,
        set_tags: &BTreeMap<String, String>,
        delete_tags: &[String],
    ) -> Result<LoggedModelRow> {
        let mut row = self.logged_model(id)?;
        row.params.extend(params.clone());
        row.tags.extend(set_tags.clone());
        for key in delete_tags {
            if row.tags.remove(key).is_none() {
                return Err(not_found(format!("tag {key:?} of logged model {id}")));
            }
        }
        if let Some(s) = status {
            row.status = s.to_owned();
        }
        row.updated_ms = now_ms();
        self.write(|db| {
            db.exec(
                "UPDATE logged_models SET status = ?2, params = ?3, tags = ?4, updated_ms = ?5 WHERE id = ?1",
                vals![id, row.status.as_str(), encode(&row.params), encode(&row.tags), row.updated_ms],
            )?;
            Ok(())
        })?;
        Ok(row)
    }
}
