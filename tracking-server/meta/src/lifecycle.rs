//! Deleting and restoring projects and runs, renaming projects, and project tags. A deleted
//! project or run keeps its rows and files: it is hidden from lists, searches and reads by
//! name or id until it is restored (MLflow's `lifecycle_stage`).

use crate::runs::{load_params, project_from_row, run_from_row, RUN_COLUMNS};
use crate::{not_found, Error, MetaStore, Project, Result, Run};
use rusqlite::{params, params_from_iter, Connection, OptionalExtension};
use std::collections::{BTreeMap, HashMap};
use trainlog_schema::{ParamValue, ProjectName, RunId};

/// A run by id, deleted or not, with whether it is deleted.
pub(crate) fn run_any_in(conn: &Connection, id: &str) -> Result<(Run, bool)> {
    let sql =
        format!("SELECT {RUN_COLUMNS}, r.deleted FROM runs r JOIN projects p ON p.id = r.project_id WHERE r.id = ?1");
    let (mut run, deleted) = conn
        .prepare_cached(&sql)?
        .query_row([id], |r| Ok((run_from_row(r)?, r.get::<_, i64>(12)? != 0)))
        .optional()?
        .ok_or_else(|| not_found(format!("run {id}")))?;
    load_params(conn, &mut run)?;
    Ok((run, deleted))
}

/// Many runs, deleted or not, in the order of `ids` (unknown ids are left out): one query per
/// table for each 500 runs, rather than three per run.
pub(crate) fn runs_any_in(conn: &Connection, ids: &[String]) -> Result<Vec<(Run, bool)>> {
    let mut found: HashMap<String, (Run, bool)> = HashMap::with_capacity(ids.len());
    for chunk in ids.chunks(500) {
        let marks = vec!["?"; chunk.len()].join(",");
        let sql = format!(
            "SELECT {RUN_COLUMNS}, r.deleted FROM runs r JOIN projects p ON p.id = r.project_id WHERE r.id IN ({marks})"
        );
        let mut stmt = conn.prepare(&sql)?;
        let rows = stmt.query_map(params_from_iter(chunk), |r| Ok((run_from_row(r)?, r.get::<_, i64>(12)? != 0)))?;
        for row in rows {
            let (run, deleted) = row?;
            found.insert(run.id.as_str().to_owned(), (run, deleted));
        }
        let mut stmt =
            conn.prepare(&format!("SELECT run_id, key, type, value FROM params WHERE run_id IN ({marks})"))?;
        let rows = stmt.query_map(params_from_iter(chunk), |r| {
            Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?, r.get::<_, String>(2)?, r.get::<_, String>(3)?))
        })?;
        for row in rows {
            let (run_id, key, ty, text) = row?;
            let value = ParamValue::from_stored(&ty, &text).ok_or_else(|| {
                Error::Corrupt(format!("param {key} of run {run_id} has type {ty} and value {text:?}"))
            })?;
            if let Some((run, _)) = found.get_mut(&run_id) {
                run.params.insert(key, value);
            }
        }
        let mut stmt = conn.prepare(&format!("SELECT run_id, key, value FROM tags WHERE run_id IN ({marks})"))?;
        let rows = stmt.query_map(params_from_iter(chunk), |r| {
            Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?, r.get::<_, String>(2)?))
        })?;
        for row in rows {
            let (run_id, key, value) = row?;
            if let Some((run, _)) = found.get_mut(&run_id) {
                run.tags.insert(key, value);
            }
        }
    }
    Ok(ids.iter().filter_map(|id| found.remove(id)).collect())
}

impl MetaStore {
    /// A project by id, deleted or not; answers whether it is deleted.
    pub fn project_any(&self, id: i64) -> Result<(Project, bool)> {
        self.read(|conn| {
            conn.prepare_cached("SELECT id, name, description, created_ms, deleted FROM projects WHERE id = ?1")?
                .query_row([id], |r| Ok((project_from_row(r)?, r.get::<_, i64>(4)? != 0)))
                .optional()?
                .ok_or_else(|| not_found(format!("project {id}")))
        })
    }

    /// A project by name, deleted or not; answers whether it is deleted.
    pub fn project_by_name_any(&self, name: &str) -> Result<(Project, bool)> {
        self.read(|conn| {
            conn.prepare_cached("SELECT id, name, description, created_ms, deleted FROM projects WHERE name = ?1")?
                .query_row([name], |r| Ok((project_from_row(r)?, r.get::<_, i64>(4)? != 0)))
                .optional()?
                .ok_or_else(|| not_found(format!("project {name:?}")))
        })
    }

    /// Every project, deleted ones too, each with whether it is deleted.
    pub fn list_projects_any(&self) -> Result<Vec<(Project, bool)>> {
        self.read(|conn| {
            let mut stmt =
                conn.prepare_cached("SELECT id, name, description, created_ms, deleted FROM projects ORDER BY name")?;
            let rows = stmt.query_map([], |r| Ok((project_from_row(r)?, r.get::<_, i64>(4)? != 0)))?;
            Ok(rows.collect::<rusqlite::Result<_>>()?)
        })
    }

    /// Gives a project another name; its files stay where they are (they are kept by id).
    pub fn rename_project(&self, id: i64, name: &ProjectName) -> Result<()> {
        self.write(|conn| {
            let tx = conn.transaction()?;
            let taken: Option<i64> =
                tx.query_row("SELECT id FROM projects WHERE name = ?1", [name.as_str()], |r| r.get(0)).optional()?;
            if taken.is_some_and(|other| other != id) {
                return Err(crate::Error::Conflict {
                    field: "name".into(),
                    reason: format!("project {name:?} already exists"),
                });
            }
            if tx.execute("UPDATE projects SET name = ?2 WHERE id = ?1", params![id, name.as_str()])? == 0 {
                return Err(not_found(format!("project {id}")));
            }
            tx.commit()?;
            Ok(())
        })
    }

    /// Deletes (or restores) a project and every run in it, as MLflow does an experiment.
    pub fn set_project_deleted(&self, id: i64, deleted: bool) -> Result<()> {
        self.write(|conn| {
            let tx = conn.transaction()?;
            if tx.execute("UPDATE projects SET deleted = ?2 WHERE id = ?1", params![id, deleted])? == 0 {
                return Err(not_found(format!("project {id}")));
            }
            tx.execute("UPDATE runs SET deleted = ?2 WHERE project_id = ?1", params![id, deleted])?;
            tx.commit()?;
            Ok(())
        })
    }

    /// A run by id, deleted or not; answers whether it is deleted.
    pub fn run_any(&self, id: &RunId) -> Result<(Run, bool)> {
        self.read(|conn| run_any_in(conn, id.as_str()))
    }

    /// The project of a run in an active project, deleted (archived) or not, and whether it is
    /// deleted; a run of a deleted project is not found.
    pub fn run_head_any(&self, id: &RunId) -> Result<(i64, bool)> {
        self.run_projects_any(std::slice::from_ref(id))?.remove(id).ok_or_else(|| not_found(format!("run {id}")))
    }

    /// `run_head_any` for many runs, one query per 500: each found run's project and whether
    /// it is deleted. Unknown runs and runs of deleted projects are left out.
    pub fn run_projects_any(&self, ids: &[RunId]) -> Result<HashMap<RunId, (i64, bool)>> {
        self.read(|conn| {
            let mut found = HashMap::with_capacity(ids.len());
            for chunk in ids.chunks(500) {
                let marks = vec!["?"; chunk.len()].join(",");
                let sql = format!(
                    "SELECT r.id, r.project_id, r.deleted FROM runs r JOIN projects p ON p.id = r.project_id
                     WHERE p.deleted = 0 AND r.id IN ({marks})"
                );
                let mut stmt = conn.prepare(&sql)?;
                let rows = stmt.query_map(params_from_iter(chunk.iter().map(RunId::as_str)), |r| {
                    Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?, r.get::<_, i64>(2)? != 0))
                })?;
                for row in rows {
                    let (id, project_id, deleted) = row?;
                    found.insert(RunId::from_trusted(id), (project_id, deleted));
                }
            }
            Ok(found)
        })
    }

    /// Deletes (or restores) a run; its rows and files stay.
    pub fn set_run_deleted(&self, id: &RunId, deleted: bool) -> Result<()> {
        self.write(|conn| {
            if conn.execute("UPDATE runs SET deleted = ?2 WHERE id = ?1", params![id.as_str(), deleted])? == 0 {
                return Err(not_found(format!("run {id}")));
            }
            Ok(())
        })
    }

    pub fn project_tags(&self, id: i64) -> Result<BTreeMap<String, String>> {
        self.read(|conn| {
            let mut stmt = conn.prepare_cached("SELECT key, value FROM project_tags WHERE project_id = ?1")?;
            let rows = stmt.query_map([id], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))?;
            Ok(rows.collect::<rusqlite::Result<_>>()?)
        })
    }

    /// Sets a project tag, or deletes it (`None`); answers whether the tag was there.
    pub fn set_project_tag(&self, id: i64, key: &str, value: Option<&str>) -> Result<bool> {
        self.write(|conn| {
            let tx = conn.transaction()?;
            let existed =
                tx.execute("DELETE FROM project_tags WHERE project_id = ?1 AND key = ?2", params![id, key])? > 0;
            if let Some(value) = value {
                tx.execute(
                    "INSERT INTO project_tags (project_id, key, value) VALUES (?1, ?2, ?3)",
                    params![id, key, value],
                )?;
            }
            tx.commit()?;
            Ok(existed)
        })
    }
}
